"""The KV-cache check on paper: bytes per token from config.json, what is left of a
server's share of the device after the weights, against one max_model_len sequence."""

from __future__ import annotations

import pytest

from specperf.analysis.device_memory import DeviceInventory
from specperf.analysis.kv_cache import KNOWN_CONFIGS, kv_warnings, model_shape
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from tests.support import REPO_ROOT

A100 = DeviceInventory(1, 80.0, "stand-in A100 80 GB")


def _known(ref: str):
    return model_shape(ref, None, None)


def test_bytes_per_token_is_two_x_layers_x_kv_heads_x_head_dim_x_dtype() -> None:
    shape = model_shape("Qwen/Qwen3-32B", KNOWN_CONFIGS["Qwen/Qwen3-32B"], 65_000_000_000)
    assert shape is not None and not shape.estimated
    assert shape.kv_bytes_per_token() == 2 * 64 * 8 * 128 * 2
    assert shape.kv_bytes_per_token(kv_dtype_bytes=1) == 2 * 64 * 8 * 128
    assert shape.weight_bytes == 65_000_000_000


def test_weights_from_the_shape_are_an_estimate_near_the_published_size() -> None:
    shape = _known("Qwen/Qwen3-32B")
    assert shape is not None and shape.estimated
    assert shape.weight_bytes / 2 == pytest.approx(32.8e9, rel=0.01)  # Qwen3-32B: 32.8B


def _at_utilization(profile: Profile, config_prefix: str, value: str) -> Profile:
    configs = [c.model_copy(update={"serve_args": ["--gpu-memory-utilization", value]})
               if c.id.startswith(config_prefix) else c for c in profile.server_configs]
    return profile.model_copy(update={"server_configs": configs})


def test_the_1_7b_draft_at_0_85_leaves_too_little_for_one_8192_token_sequence() -> None:
    # The published run's 0.85 (the a100 profile's until #53): vLLM would refuse to start.
    a100 = load_profile("a100-qwen3-32b", REPO_ROOT)
    warnings = kv_warnings(_at_utilization(a100, "qwen3-1.7b", "0.85"), A100, _known)
    flagged = sorted(w.split(":", 1)[0] for w in warnings)
    assert flagged == [f"qwen3-1.7b-k{k}" for k in range(1, 6)]
    assert all("8192-token" in w and "an estimate" in w for w in warnings)
    # The shipped 0.9 holds one (≈ 5.8 GiB against 2.88).
    assert kv_warnings(a100, A100, _known) == []


def test_a_model_nobody_knows_is_said_unchecked() -> None:
    profile = load_profile("h100-mimo-7b-mtp", REPO_ROOT)
    (only,) = kv_warnings(profile, A100, _known)
    assert "not checked" in only and profile.target in only


def test_a_mixture_of_experts_without_cached_weights_is_not_guessed() -> None:
    moe = {**KNOWN_CONFIGS["Qwen/Qwen3-8B"], "num_experts": 128}
    assert model_shape("org/moe", moe, None) is None
    assert model_shape("org/moe", moe, 10**9) is not None
