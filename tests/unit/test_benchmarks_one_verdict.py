"""benchmarks/one_verdict.py (issue #13, "Done means" 1) without vLLM: reading a run file's
checks, the quiet-run ratio, the injected delay sized from a kept baseline, the summary the
criteria are read from, the burner always stopped, and --dry-run's commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from specperf.engine.proxy import expected_tpot_rise
from specperf.schemas import Baseline
from specperf.store.baselines import baseline_path, load_history, write_baseline
from specperf.store.provenance import detect_hardware
from tests.support import (
    CPU_CI_PROFILE,
    DATA_DIR,
    REPO_ROOT,
    T0,
    load_script,
    make_case,
    make_provenance,
    make_run,
)

SCRIPT = REPO_ROOT / "benchmarks" / "one_verdict.py"


@pytest.fixture(scope="module")
def ov() -> ModuleType:
    return load_script(SCRIPT)


def _check(config: str, c: int, gate: str, outcome: str, metric: str = "TPOT") -> dict[str, Any]:
    return {"case": {"config_id": config, "concurrency": c}, "gate": gate, "metric": metric,
            "outcome": outcome, "message": f"{outcome} because"}


def test_a_real_run_file_counts_every_check(ov: ModuleType) -> None:
    run = json.loads((DATA_DIR / "run-cpu-tiny.json").read_text())
    got = ov.read_checks(run)
    assert sum(got["counts"].values()) == len(run["checks"]) == len(got["outcomes"])
    assert got["counts"]["pass"] == sum(c["outcome"] == "pass" for c in run["checks"])
    assert got["outcomes"]["requests[nospec-c1] error_rate"] == "pass"


def test_every_outcome_is_counted_and_what_did_not_pass_is_worded(ov: ModuleType) -> None:
    checks = [_check("nospec", 1, "requests", "pass", "error_rate"),
              _check("draft-k2", 1, "latency", "fail"),
              _check("draft-k2", 2, "latency", "inconclusive"),
              _check("self-k3", 1, "latency", "busy"),
              _check("self-k3", 2, "throughput", "skip", "output throughput"),
              _check("self-k3", 2, "acceptance", "novel", "acceptance_rate")]
    got = ov.read_checks({"checks": checks})
    assert got["counts"] == {"pass": 1, "fail": 1, "inconclusive": 1, "busy": 1, "skip": 1,
                             "novel": 1}
    assert got["not_passed"] == [
        "FAIL latency[draft-k2-c1] TPOT: fail because",
        "INCONCLUSIVE latency[draft-k2-c2] TPOT: inconclusive because",
        "BUSY latency[self-k3-c1] TPOT: busy because",
        "NOVEL acceptance[self-k3-c2] acceptance_rate: novel because"]
    assert got["failed"] == {"latency[draft-k2-c1] TPOT": "draft-k2"}
    # A crashed run has no run file: nothing counted, nothing failed.
    assert ov.read_checks({})["counts"] == dict.fromkeys(ov.OUTCOMES, 0)


def test_fails_are_split_between_the_injected_config_and_the_others(ov: ModuleType) -> None:
    failed = ov.read_checks({"checks": [
        _check("draft-k2", 1, "latency", "fail"),
        _check("draft-k2", 1, "tpot_gain", "fail", "TPOT gain"),
        _check("draft-k21", 1, "latency", "fail"),  # a prefix of another id is another config
        _check("nospec", 1, "latency", "pass")]})["failed"]
    assert ov.failures_by_config(failed, "draft-k2") == (True, ["latency[draft-k21-c1] TPOT"])
    assert ov.failures_by_config(failed, "self-k3") == (
        False, ["latency[draft-k2-c1] TPOT", "tpot_gain[draft-k2-c1] TPOT gain",
                "latency[draft-k21-c1] TPOT"])
    assert ov.failures_by_config({}, "draft-k2") == (False, [])


def test_quiet_ratio_is_the_run_files_own_time_breakdown(ov: ModuleType) -> None:
    # The buckets exactly as run.json writes them (a cpu-ci run on this machine).
    breakdown = {"wall_s": 122.8, "server_starts_s": 56.7, "trials_s": 48.8, "warmups_s": 3.1,
                 "remeasures_s": 0.0, "restarts_s": 0.0, "reports_s": 1.8, "shutdown_s": 1.1,
                 "other_s": 11.2}
    assert ov.quiet_ratio(breakdown) == pytest.approx(122.8 / (56.7 + 48.8 + 3.1))
    # No breakdown (a run file from before it), or nothing measured: no ratio.
    assert ov.quiet_ratio(None) is None
    assert ov.quiet_ratio({"wall_s": 5.0, "other_s": 5.0}) is None


def _kept_baseline(root: Path, tpots: list[float]) -> Path:
    """cpu-ci's baseline on this machine, one kept run per TPOT (s) of draft-k2-c1."""
    path = baseline_path(root, "cpu-ci", detect_hardware()[0])
    for i, tpot in enumerate(tpots):
        write_baseline(path, Baseline(
            provenance=make_provenance(date=T0 + timedelta(hours=i), profile_name="cpu-ci"),
            cases=[make_case("nospec", 1, spec=False, tpot_s=0.05),
                   make_case("draft-k2", 1, tpot_s=tpot, tokens=33),
                   make_case("draft-k2", 2, tpot_s=0.5, tokens=33)]))
    return path


def test_the_delay_raises_the_lowest_concurrency_tpot_by_the_effect(
        ov: ModuleType, tmp_path: Path) -> None:
    path = _kept_baseline(tmp_path, [0.018, 0.020, 0.022])
    shape = ov.config_shape(load_history(path), "draft-k2")
    # Pooled over the three kept runs, c1 only (c2's 0.5 s would move the median).
    assert shape["concurrency"] == 1 and shape["tpot_s"] == pytest.approx(0.020)
    assert shape["chunks"] == shape["tokens"] == 33  # make_requests: one token a chunk
    ms = ov.injection_delay_ms(0.25, shape)
    assert ms == pytest.approx(5.0)
    rise = expected_tpot_rise(ms / 1000.0, shape["chunks"], shape["tokens"])
    assert rise / shape["tpot_s"] == pytest.approx(0.25)
    with pytest.raises(SystemExit, match="no case of config 'ngram'"):
        ov.config_shape(load_history(path), "ngram")


def _rec(phase: str = "run", exit: int = 0, **counts: int) -> dict[str, Any]:
    return {"phase": phase, "exit": exit, "run_json": "run.json", "wall_s": 600.0,
            "quiet_ratio": None, "counts": {**dict.fromkeys(("pass", "fail", "inconclusive",
                                                             "busy", "skip"), 0), **counts}}


def test_summary_quiet_and_busy_meet_the_criterion_only_with_no_fail(ov: ModuleType) -> None:
    runs = [_rec(**{"pass": 30}), _rec(exit=6, **{"pass": 28, "inconclusive": 2}),
            _rec(exit=7, **{"pass": 27, "busy": 3})]
    s = ov.summarise(runs, "quiet")
    assert s["met"] and s["runs"] == 3 and s["exits"] == {"0": 1, "6": 1, "7": 1}
    assert s["checks"]["inconclusive"] == 2 and s["runs_with"] == {
        "fail": 0, "inconclusive": 1, "busy": 1}
    assert not ov.summarise([*runs, _rec(exit=1, fail=1)], "busy")["met"]
    crashed = {**_rec(exit=3), "run_json": None}
    assert not ov.summarise([*runs, crashed], "quiet")["met"]


def test_summary_inject_needs_nine_in_ten_and_nothing_elsewhere(ov: ModuleType) -> None:
    def tries(caught: int, elsewhere: int = 0) -> list[dict[str, Any]]:
        return ([_rec("baseline")] * 3
                + [{**_rec(exit=1, fail=1), "fail_on_config": i < caught,
                    "fail_elsewhere": ["latency[nospec-c1] TPOT"] if i < elsewhere else []}
                   for i in range(10)])
    s = ov.summarise(tries(9), "inject", "draft-k2")
    assert s["met"] and s["caught"] == 9 and s["runs"] == 10  # baseline runs not counted
    assert not ov.summarise(tries(8), "inject", "draft-k2")["met"]
    assert not ov.summarise(tries(10, elsewhere=1), "inject", "draft-k2")["met"]


def test_a_stretch_counts_only_where_the_proxy_delivered_it(ov: ModuleType) -> None:
    """Every start of the injected config must show its decode forwarded at 1 + the
    stretch (within the tolerance); a start with no record, or one the proxy left alone,
    makes the run not that injection."""
    run = {"servers": [
        {"config_id": "nospec", "argv": [], "log_path": "x"},
        {"config_id": "draft-k2@start1", "argv": [], "log_path": "x",
         "injection": {"stretch": 0.25, "streams": 26, "decode_ratio": 1.2502}},
        {"config_id": "draft-k2", "argv": [], "log_path": "x",
         "injection": {"stretch": 0.25, "streams": 10, "decode_ratio": 1.249}},
        {"config_id": "draft-k3", "argv": [], "log_path": "x",
         "injection": {"stretch": 0.0, "streams": 10, "decode_ratio": 1.0}}]}
    records = ov.injections(run)
    assert set(records) == {"draft-k2@start1", "draft-k2", "draft-k3"}
    ok = ov.delivered(records, "draft-k2", 0.25)
    assert ok["ok"] and ok["decode_ratio"] == {"draft-k2@start1": 1.2502, "draft-k2": 1.249}
    short = {**records, "draft-k2": {**records["draft-k2"], "decode_ratio": 1.17}}
    assert not ov.delivered(short, "draft-k2", 0.25)["ok"]
    assert not ov.delivered(records, "draft-k3", 0.25)["ok"]   # forwarded as it came
    assert not ov.delivered(records, "draft-k1", 0.25)["ok"]   # no record: no proxy


def test_summary_inject_leaves_out_runs_the_proxy_did_not_deliver(ov: ModuleType) -> None:
    def run(caught: bool, ok: bool) -> dict[str, Any]:
        return {**_rec(exit=1 if caught else 6), "fail_on_config": caught,
                "fail_elsewhere": [], "delivered": {"ok": ok}}
    runs = [run(True, True)] * 9 + [run(False, False)]
    s = ov.summarise(runs, "inject", "draft-k2")
    assert (s["counted"], s["not_delivered"], s["caught"], s["met"]) == (9, 1, 9, True)
    s = ov.summarise([run(True, True)] * 8 + [run(False, True)] * 2, "inject", "draft-k2")
    assert (s["counted"], s["caught"], s["met"]) == (10, 8, False)
    assert not ov.summarise([run(False, False)], "inject", "draft-k2")["met"]


def test_the_burner_is_stopped_when_the_run_is_interrupted(ov: ModuleType) -> None:
    with pytest.raises(KeyboardInterrupt), ov.burner(True) as used:
        pid = used["burner_pid"]
        os.kill(pid, 0)  # running
        raise KeyboardInterrupt
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)
    assert used["burner_cores"] >= 0
    with ov.burner(False) as none:
        assert none == {}


def _dry(tmp_path: Path, *argv: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--profile", str(CPU_CI_PROFILE), "--dry-run",
         "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out.json"), *argv],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")})
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "work").exists()
    return proc.stdout.splitlines()


def test_dry_run_prints_each_mode_and_runs_nothing(tmp_path: Path) -> None:
    quiet = [ln for ln in _dry(tmp_path, "quiet", "--runs", "3") if "-m pytest perf_tests" in ln]
    assert len(quiet) == 3 and all("--perf-baselines" in ln and "--perf-update-baselines"
                                   not in ln and "SPECPERF_PROXY" not in ln for ln in quiet)
    busy = [ln for ln in _dry(tmp_path, "busy", "--runs", "2", "--", "-k", "c1")
            if "-m pytest" in ln]
    assert len(busy) == 2 and all(ln.startswith("[burner: one core]") and ln.endswith("-k c1")
                                  for ln in busy)
    inject = [ln for ln in _dry(tmp_path, "inject", "--config", "draft-k2", "--runs", "2",
                                "--inject", "delay") if "-m pytest" in ln]
    assert [("--perf-update-baselines" in ln, ln.split()[0]) for ln in inject] == [
        (True, "SPECPERF_PROXY_DELAY_MS=0")] * 3 + [
        (False, "SPECPERF_PROXY_DELAY_MS='<sized")] * 2
    assert all("SPECPERF_PROXY_CONFIGS=draft-k2" in ln for ln in inject)
    # By default the injection stretches the decode: the same fraction at any speed,
    # nothing to size; the baseline runs go through the proxy at zero delay as before.
    stretched = [ln for ln in _dry(tmp_path, "inject", "--config", "draft-k2", "--runs", "2")
                 if "-m pytest" in ln]
    assert [ln.split()[0] for ln in stretched] == ["SPECPERF_PROXY_DELAY_MS=0"] * 3 + [
        "SPECPERF_PROXY_STRETCH=0.25"] * 2


def test_dry_run_inject_sizes_the_delay_from_a_kept_baseline(tmp_path: Path) -> None:
    _kept_baseline(tmp_path / "baselines", [0.02, 0.02, 0.02])
    out = _dry(tmp_path, "inject", "--config", "draft-k2", "--runs", "2", "--inject", "delay",
               "--baselines-dir", str(tmp_path / "baselines"))
    assert any(ln.startswith("delay 5.000 ms per chunk on draft-k2") for ln in out)
    runs = [ln for ln in out if "-m pytest" in ln]
    assert len(runs) == 2 and all(ln.startswith("SPECPERF_PROXY_DELAY_MS=5.000") for ln in runs)


def test_dry_run_inject_sizes_the_delay_on_the_runs_given_not_the_baseline(
        tmp_path: Path) -> None:
    # The kept baseline ran at 20 ms; the machine now runs draft-k2-c1 at 10 ms (a VM's
    # speed moved), so +25 % now is half the delay the baseline would give.
    _kept_baseline(tmp_path / "baselines", [0.02, 0.02, 0.02])
    today = tmp_path / "run.json"
    today.write_text(make_run([make_case("nospec", 1, spec=False, tpot_s=0.025),
                               make_case("draft-k2", 1, tpot_s=0.010, tokens=33)],
                              provenance=make_provenance(profile_name="cpu-ci")
                              ).model_dump_json())
    out = _dry(tmp_path, "inject", "--config", "draft-k2", "--runs", "1", "--inject", "delay",
               "--baselines-dir", str(tmp_path / "baselines"), "--size-on", str(today))
    assert any(ln.startswith("delay 2.500 ms per chunk on draft-k2") and "--size-on" in ln
               for ln in out)
    assert [ln.split()[0] for ln in out if "-m pytest" in ln] == [
        "SPECPERF_PROXY_DELAY_MS=2.500"]


def test_a_size_on_file_that_is_not_a_run_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text("{}")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "inject", "--profile", str(CPU_CI_PROFILE), "--dry-run",
         "--config", "draft-k2", "--inject", "delay", "--work", str(tmp_path / "work"),
         "--size-on", str(bad)],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("--size-on: ") and str(bad) in proc.stderr
