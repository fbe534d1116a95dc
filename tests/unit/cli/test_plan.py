"""`specperf plan`: the night per shard, the devices, the exit codes; every shipped GPU
profile fits its card and the nightly's night (the workflow's shards and job limit)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specperf import cli
from specperf.config.exits import Exit
from specperf.config.profile_file import load_profile
from tests.support import INSTALL_DEV, REPO_ROOT, need_module

PROFILES = REPO_ROOT / "perf_tests" / "profiles"
GPU_PROFILES = sorted(p for p in PROFILES.glob("*.toml")
                      if (h := load_profile(p).hardware) is not None
                      and (h.id or "").startswith("gpu-"))
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "nightly-perf.yml"


def _plan(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
          *argv: str) -> tuple[int, str, str]:
    monkeypatch.chdir(REPO_ROOT)  # ./baselines, as a user in the checkout runs it
    # No hub cache: the KV-cache check reads this machine's models otherwise.
    monkeypatch.setenv("HF_HUB_CACHE", str(REPO_ROOT / "tests" / "data" / "no-hub-cache"))
    rc = cli.main(["plan", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _night() -> tuple[int, float]:
    """(shards, minutes) of the nightly's perf job: its default shard list and its limit."""
    yaml = need_module("yaml", INSTALL_DEV)
    job = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["perf"]
    # `fromJSON(inputs.shards || vars.SPECPERF_SHARDS || '[1, 2]')`: the last literal list
    lists = re.findall(r"'(\[[^']*\])'", job["strategy"]["matrix"]["shard"])
    assert lists, job["strategy"]["matrix"]["shard"]
    return len(json.loads(lists[-1])), float(job["timeout-minutes"])


def test_the_a100_night_fits_two_shards_with_a_margin(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out, err = _plan(capsys, monkeypatch, "--profile", "a100-qwen3-32b", "--shards", "2",
                         "--limit-minutes", "720", "--json")
    assert rc == Exit.OK, err
    plan = json.loads(out)
    assert plan["fits"] and plan["does_not_fit"] == []
    assert all(s["total_min"] <= 600 for s in plan["plan"]["shards"])
    assert plan["baseline"].endswith("gpu-nvidia-a100-sxm4-80gb-x1.json")
    assert plan["devices"]["memory_gib"] == 80.0 and plan["devices"]["estimated"]
    assert all(r["fits"] and len(r["servers"]) == 1 for r in plan["devices"]["resident"])
    # The 1.7B drafts at 0.9 hold one 8192-token sequence (at the published 0.85 they did
    # not: tests/unit/analysis/test_kv_cache.py).
    assert plan["kv_cache_warnings"] == []


def test_an_hour_is_not_an_a100_night(capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out, _ = _plan(capsys, monkeypatch, "--profile", "a100-qwen3-32b",
                       "--limit-minutes", "60")
    assert rc == Exit.PLAN_DOES_NOT_FIT
    assert "does not fit (1):" in out and "> --limit-minutes 60" in out
    assert "shard 1 (nospec, qwen3-0.6b-k1" in out


def test_servers_over_the_device_are_named_and_exit_14(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    text = (PROFILES / "a100-qwen3-32b.toml").read_text(encoding="utf-8")
    beside = tmp_path / "a100-qwen3-32b.toml"
    beside.write_text(text.replace('reference = "bracket"', 'reference = "beside"'),
                      encoding="utf-8")
    rc, out, _ = _plan(capsys, monkeypatch, "--profile", str(beside), "--shards", "2")
    assert rc == Exit.PLAN_DOES_NOT_FIT
    assert "DOES NOT FIT" in out
    assert "device 0: nospec 0.92 × 80.0 GiB + qwen3-0.6b-k1 0.92 × 80.0 GiB = 147.2 GiB" in out


def test_a_cpu_profile_plans_on_this_machine_s_hardware(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out, _ = _plan(capsys, monkeypatch, "--profile", "cpu-tiny", "--json")
    plan = json.loads(out)
    assert rc == Exit.OK and plan["devices"] is None
    assert plan["plan"]["hardware_id"].startswith("cpu-")
    rc, out, _ = _plan(capsys, monkeypatch, "--profile", "cpu-tiny")
    assert rc == Exit.OK and "not device-checked" in out


def test_a_run_file_s_measured_starts(capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run = REPO_ROOT / "tests" / "data" / "run-cpu-tiny-k123.json"
    rc, out, _ = _plan(capsys, monkeypatch, "--profile", "cpu-tiny", "--run", str(run),
                       "--json")
    assert rc == Exit.OK and "measured starts of" in json.loads(out)["plan"]["starts_from"]


@pytest.mark.parametrize(("argv", "says"), [
    (["--profile", "no-such-profile"], "no profile named"),
    (["--profile", "cpu-tiny", "--shards", "0"], "--shards 0"),
    (["--profile", "cpu-tiny", "--limit-minutes", "-1"], "--limit-minutes -1"),
    (["--profile", "cpu-tiny", "--hardware", "gpu-unknown-card-x1"], "knows no such card"),
], ids=["unknown-profile", "shards-0", "limit-negative", "unknown-card"])
def test_bad_input_exits_2_with_one_line(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch,
                                         argv: list[str], says: str) -> None:
    rc, _, err = _plan(capsys, monkeypatch, *argv)
    assert rc == Exit.BAD_INPUT and says in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("profile", GPU_PROFILES, ids=[p.stem for p in GPU_PROFILES])
def test_every_gpu_profile_fits_its_card_and_the_nightly_s_night(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        profile: Path) -> None:
    shards, minutes = _night()
    rc, out, _ = _plan(capsys, monkeypatch, "--profile", str(profile), "--shards", str(shards),
                       "--limit-minutes", f"{minutes:g}", "--json")
    plan = json.loads(out)
    assert rc == Exit.OK, plan["does_not_fit"]
    assert plan["devices"] is not None and plan["devices"]["resident"]


def test_the_gpu_profiles_are_all_there() -> None:
    assert len(GPU_PROFILES) >= 8
