"""The device memory model: vLLM's rule (gpu_memory_utilization × the device's total, per
server, on every device of its parallel group) against the servers a run keeps up
together, on the shipped profiles and small ones built here."""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.analysis.device_memory import (
    VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
    DeviceInventory,
    check_fit,
    footprint,
    inventory_from_hardware_id,
    refusal,
    resident_sets,
    server_option,
)
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from tests.support import REPO_ROOT

A100 = DeviceInventory(1, 80.0, "stand-in A100 80 GB")


def _with(profile: Profile, **load: object) -> Profile:
    return profile.model_copy(update={"load": profile.load.model_copy(update=load)})


def _a100() -> Profile:
    return load_profile("a100-qwen3-32b", REPO_ROOT)


def test_a100_beside_is_refused_two_servers_of_0_92_x_80_gib() -> None:
    beside = _with(_a100(), reference="beside")
    report = check_fit(resident_sets(beside), A100)
    assert not report.fits
    # Every spec config has a TPOT-gain gate: each is up beside no-spec.
    assert len(report.misfits) == 10
    first = report.misfits[0]
    assert [s.server_id for s in first.servers] == ["nospec", "qwen3-0.6b-k1"]
    assert first.need_gib == pytest.approx(2 * VLLM_DEFAULT_GPU_MEMORY_UTILIZATION * 80)
    pinned_util = next(m for m in report.misfits if m.servers[1].server_id == "qwen3-1.7b-k1")
    assert pinned_util.need_gib == pytest.approx((0.92 + 0.9) * 80)  # its --gpu-memory-utilization 0.9
    why = refusal(report)
    assert why is not None and "nospec" in why and "147.2 GiB" in why and "bracket" in why


def test_a100_bracket_fits_one_server_at_a_time() -> None:
    profile = _a100()
    assert profile.load.reference == "bracket"
    report = check_fit(resident_sets(profile), A100)
    assert report.fits and refusal(report) is None
    assert all(len(rs.servers) == 1 for rs in report.sets)


def test_tensor_parallel_spans_four_devices_and_needs_them() -> None:
    profile = load_profile("h100x4-llama-70b", REPO_ROOT)
    fp = footprint(profile, profile.server_configs[0])
    assert fp.devices == ("0", "1", "2", "3")
    four = DeviceInventory(4, 80.0, "stand-in 4 × H100")
    assert check_fit(resident_sets(profile), four).fits
    # Beside, every one of the four devices holds two servers: four misfits per pair.
    beside = check_fit(resident_sets(_with(profile, reference="beside")), four)
    assert {m.device for m in beside.misfits} == {"0", "1", "2", "3"}
    one = check_fit(resident_sets(profile), DeviceInventory(1, 80.0, "stand-in"))
    assert not one.fits and one.misfits[0].devices_short == 3


def test_servers_on_their_own_devices_fit_beside(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("""
name = "two-cards"
target = "org/t"
concurrencies = [1]
[gates.tpot_gain]
max_concurrency = 1
[[server_configs]]
id = "nospec"
env = { CUDA_VISIBLE_DEVICES = "0" }
[[server_configs]]
id = "spec"
env = { CUDA_VISIBLE_DEVICES = "1" }
serve_args = ["--gpu-memory-utilization=0.5"]
speculative_config = { method = "ngram", num_speculative_tokens = 2, prompt_lookup_max = 3 }
""", encoding="utf-8")
    profile = load_profile(path)
    sets = resident_sets(profile)
    assert [s.server_id for s in sets[1].servers] == ["nospec", "spec"]
    assert check_fit(sets, DeviceInventory(2, 24.0, "stand-in")).fits
    assert footprint(profile, profile.config("spec")).utilization == 0.5
    # The same two on one device: 0.92 + 0.5 > 1.
    shared = profile.model_copy(update={"server_configs": [
        c.model_copy(update={"env": {}}) for c in profile.server_configs]})
    report = check_fit(resident_sets(shared), DeviceInventory(1, 24.0, "stand-in"))
    assert not report.fits and report.misfits[0].need_gib == pytest.approx(1.42 * 24)


@pytest.mark.parametrize(("args", "want"), [
    (["--gpu-memory-utilization", "0.8"], "0.8"),
    (["--gpu-memory-utilization=0.7"], "0.7"),
    (["--gpu_memory_utilization", "0.6"], "0.6"),
    (["--gpu-memory-utilization", "0.8", "--gpu-memory-utilization", "0.5"], "0.5"),
    (["--max-model-len", "8192"], None),
])
def test_the_last_spelling_of_an_option_wins(args: list[str], want: str | None) -> None:
    assert server_option(args, ("--gpu-memory-utilization",)) == want


def test_tp_short_option() -> None:
    assert server_option(["-tp", "2"], ("--tensor-parallel-size", "-tp")) == "2"


def test_hardware_ids_name_their_memory() -> None:
    a100 = inventory_from_hardware_id("gpu-nvidia-a100-sxm4-80gb-x1")
    assert a100 is not None and (a100.count, a100.memory_gib, a100.estimated) == (1, 80.0, True)
    l40s = inventory_from_hardware_id("gpu-nvidia-l40s-x2")
    assert l40s is not None and l40s.count == 2 and l40s.memory_gib == pytest.approx(44.99, abs=0.01)
    assert inventory_from_hardware_id("cpu-amd-epyc-2c") is None
    assert inventory_from_hardware_id("gpu-some-new-card-x1") is None
    keyed = inventory_from_hardware_id("gpu-some-new-card-x1", memory_gib=31.5)
    assert keyed is not None and keyed.memory_gib == 31.5

