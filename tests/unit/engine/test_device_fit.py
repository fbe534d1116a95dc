"""Where the devices come from off a GPU box, the refusal a profile gets, and the pool's
guard: never a server started beside others it cannot fit.

The guard's devices are a stand-in of vLLM's device memory check (vllm/v1/worker/utils.py
``request_memory``: a start needs gpu_memory_utilization × the device's total free), a
GPU-only behaviour no CPU build has."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specperf.analysis.device_memory import DeviceInventory
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from specperf.engine.device_fit import device_inventory, memory_refusal, profile_hardware_id
from specperf.engine.server import ServerError, VllmServer
from specperf.engine.servers import ServerPool
from tests.support import REPO_ROOT, need_module

BASELINES = REPO_ROOT / "baselines"


def test_a_cpu_profile_is_not_device_checked() -> None:
    tiny = load_profile("cpu-tiny", REPO_ROOT)
    assert device_inventory(tiny, BASELINES, probe=False) is None
    assert memory_refusal(tiny, BASELINES, probe=False) is None


def test_the_hardware_id_comes_from_the_profile_else_its_baseline_file(tmp_path: Path) -> None:
    a100 = load_profile("a100-qwen3-32b", REPO_ROOT)
    assert profile_hardware_id(a100) == "gpu-nvidia-a100-sxm4-80gb-x1"
    bare = a100.model_copy(update={"hardware": None})
    assert profile_hardware_id(bare, tmp_path) is None
    assert profile_hardware_id(bare, BASELINES) == "gpu-nvidia-a100-sxm4-80gb-x1"


def test_every_shipped_profile_fits_its_devices() -> None:
    for path in sorted((REPO_ROOT / "perf_tests" / "profiles").glob("*.toml")):
        assert memory_refusal(load_profile(path), BASELINES, probe=False) is None, path.name


def test_a_profile_beside_on_one_card_is_refused_naming_configs_and_gib() -> None:
    a100 = load_profile("a100-qwen3-32b", REPO_ROOT)
    beside = a100.model_copy(update={"load": a100.load.model_copy(update={"reference": "beside"})})
    why = memory_refusal(beside, BASELINES, probe=False)
    assert why is not None
    for part in ("a100-qwen3-32b.toml", "nospec", "qwen3-0.6b-k1", "147.2 GiB", "80.0 GiB",
                 "fix:"):
        assert part in why


def _pool(tmp_path: Path, profile: Profile, devices: DeviceInventory) -> ServerPool:
    return ServerPool(profile, tmp_path, tmp_path / "models", say=lambda m: None,
                      devices=lambda: devices)


def test_the_pool_never_starts_a_server_that_cannot_fit_beside_those_up(tmp_path: Path) -> None:
    need_module("vllm")
    # The a100 profile as it was before it used bracket: a pool of one server at a time
    # would stop no-spec first (tests/unit/engine/test_bracket.py); this one must refuse.
    a100 = load_profile("a100-qwen3-32b", REPO_ROOT)
    beside = a100.model_copy(update={"load": a100.load.model_copy(update={"reference": "beside"})})
    pool = _pool(tmp_path, beside, DeviceInventory(1, 80.0, "stand-in A100"))
    # The no-spec server, up (never started here: the guard reads which servers are up).
    pool.servers["nospec"] = VllmServer("nospec", [sys.executable], {}, tmp_path / "n.log",
                                        1, 1.0)
    with pytest.raises(ServerError, match="device memory") as err:
        pool.server_for("qwen3-0.6b-k1")
    assert "nospec" in str(err.value) and "147.2 GiB" in str(err.value)
    assert "qwen3-0.6b-k1" in pool.errors and "qwen3-0.6b-k1" not in pool.servers
    assert pool.records["qwen3-0.6b-k1"].error is not None
