"""specperf.analysis.power / `specperf power`, and benchmarks/gate_experiments.py --dry-run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specperf.analysis.aggregate import case_result
from specperf.analysis.power import power_lines, power_report, repeats_line
from specperf.analysis.sample_size import min_detectable_effect, required_trials
from specperf.cli import main as cli_main
from specperf.config.server_configs import ServerConfig
from specperf.schemas import Baseline, Case, RequestSample
from specperf.store.baselines import write_baseline
from tests.support import REPO_ROOT, T0, make_provenance, make_trial_of

REPO = REPO_ROOT


def _baseline(trials: int, *, requests: int = 8, trial_cv: float = 0.05,
              seed: int = 0, offset: float = 1.0, day: int = 1) -> Baseline:
    """Trials whose TPOT level drifts by `trial_cv` (log-normal), requests jitter 2 %;
    `offset` scales the whole run (a server restart's shift), `day` dates it."""
    rng = np.random.default_rng(seed)
    tlist = []
    for t in range(trials):
        level = offset * float(rng.lognormal(0.0, trial_cv))
        samples = []
        for i in range(requests):
            tpot = 0.02 * level * float(rng.lognormal(0.0, 0.02))
            ttft = 0.1 * float(rng.lognormal(0.0, 0.1))
            e2e = ttft + tpot * 31
            samples.append(RequestSample(ok=True, start_s=i * e2e, ttft_s=ttft, e2e_s=e2e,
                                         output_tokens=32, prompt_tokens=20, chunks=16))
        tlist.append(make_trial_of(samples, index=t))
    cfg = ServerConfig(id="draft-k2")
    case = case_result(Case(config_id="draft-k2", concurrency=1), cfg, tlist, "0.32.0", "abc")
    return Baseline(provenance=make_provenance(date=T0.replace(day=day)), cases=[case])


def test_trials_are_the_unit_when_there_are_three_or_more() -> None:
    report = power_report(_baseline(10), 0.10, simulate=False)
    tpot = next(m for m in report.cases[0].metrics if m.metric == "TPOT")
    assert tpot.source == "trials" and tpot.n == 10
    assert tpot.cv is not None and 0.01 < tpot.cv < 0.15
    assert tpot.needed == required_trials(tpot.cv, 0.10)
    assert tpot.detectable == pytest.approx(min_detectable_effect(tpot.cv, 10))
    thr = next(m for m in report.cases[0].metrics if m.key == "output_throughput")
    assert thr.source == "trials" and thr.cv is not None


def test_few_trials_fall_back_to_requests_and_say_so() -> None:
    report = power_report(_baseline(2), 0.05, simulate=False)
    by = {m.key: m for m in report.cases[0].metrics}
    assert by["tpot"].source == "requests" and by["tpot"].n == 16
    assert "understates run-to-run drift" in (by["tpot"].note or "")
    assert by["output_throughput"].source is None and by["output_throughput"].cv is None


def test_simulated_power_runs_the_real_rule() -> None:
    report = power_report(_baseline(8, trial_cv=0.03), 0.20, sim_trials=30, sim_resamples=100)
    tpot = next(m for m in report.cases[0].metrics if m.key == "tpot")
    assert tpot.simulated_n == max(tpot.needed or 0, 5)
    # A 20 % shift over 3 % noise, far above the 5 % minimum effect: nearly always caught.
    assert tpot.simulated_power is not None and tpot.simulated_power >= 0.8


def test_power_lines() -> None:
    lines = power_lines(_baseline(10), 0.05)
    tpot = next(ln for ln in lines if " TPOT:" in ln)
    assert tpot.startswith("draft-k2-c1 TPOT: 10 trials catch ≥ ")
    assert "5 % needs " in tpot
    few = power_lines(_baseline(1), 0.05)
    assert any("not estimated" in ln for ln in few)


def test_cli_table_json_and_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "b.json"
    path.write_text(_baseline(6).model_dump_json())
    assert cli_main(["power", "--baseline", str(path), "--effect", "0.05",
                     "--sim-trials", "5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "specperf-power" and data["cases"][0]["case"] == "draft-k2-c1"
    assert {m["metric"] for m in data["cases"][0]["metrics"]} == {
        "TTFT", "TPOT", "output throughput"}
    assert cli_main(["power", "--baseline", str(path), "--effect", "0.1",
                     "--sim-trials", "0"]) == 0
    assert "TPOT" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "specperf-baseline", "cases": [')
    assert cli_main(["power", "--baseline", str(bad), "--effect", "0.05"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err


def test_gate_experiments_dry_run_prints_the_commands(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gate_experiments.py"), "--dry-run",
         "--runs", "3", "--tries", "2", "--repeats", "5", "--sizes", "0.05,0.25",
         "--tpot-ms", "20", "--chunk-tokens", "2.5", "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if "-m pytest perf_tests" in ln]
    # 3 A/A runs + 2 sizes x 2 tries.
    assert len(lines) == 3 + 2 * 2
    assert all("--perf-repeats 5" in ln and "--perf-profile" in ln for ln in lines)
    injected = [ln for ln in lines if "SPECPERF_PROXY_DELAY_MS=" in ln]
    assert len(injected) == 4
    assert not out.exists() or not any(out.rglob("run.json"))  # nothing was run


def test_kept_runs_add_the_restart_noise_and_the_cli_finds_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_baseline(6, trial_cv=0.03, seed=s, offset=o, day=1 + s)
            for s, o in enumerate((1.0, 1.10, 0.92, 1.05))]
    alone = power_report(runs[-1], 0.10, simulate=False)
    pooled = power_report(runs[-1], 0.10, simulate=False, history=runs)
    a = next(m for m in alone.cases[0].metrics if m.key == "tpot")
    p = next(m for m in pooled.cases[0].metrics if m.key == "tpot")
    assert a.baseline_runs == 1 and a.between_run_spread is None and "one run" in (a.note or "")
    assert p.baseline_runs == 4 and (p.between_run_spread or 0) > 0.04
    assert p.detectable is not None and a.detectable is not None and p.detectable > a.detectable
    # The spread alone is near 10 %: no number of trials in one run catches it.
    assert p.needed is None and "no number of trials" in (p.note or "")
    path = tmp_path / "base.json"
    for run in runs:
        write_baseline(path, run)
    assert cli_main(["power", "--baseline", str(path), "--effect", "0.1", "--json",
                     "--sim-trials", "0"]) == 0
    tpot = next(m for m in json.loads(capsys.readouterr().out)["cases"][0]["metrics"]
                if m["key"] == "tpot")
    assert tpot["baseline_runs"] == 4
    assert cli_main(["power", "--baseline", str(path), "--effect", "0.1", "--json",
                     "--sim-trials", "0", "--no-history"]) == 0
    tpot = next(m for m in json.loads(capsys.readouterr().out)["cases"][0]["metrics"]
                if m["key"] == "tpot")
    assert tpot["baseline_runs"] == 1


def test_gate_experiments_analyse_only_judges_real_runs_and_probes_acceptance(
        tmp_path: Path) -> None:
    """Three copies of a real cpu-tiny run as an A/A series: every pairing judges them,
    and lowering acceptance by one token per thousand drafted is caught every time."""
    run = json.loads((REPO / "tests" / "data" / "run-cpu-tiny.json").read_text())
    out = tmp_path / "exp"
    for i in range(3):
        (out / f"aa{i + 1:02d}").mkdir(parents=True)
        run["provenance"]["date"] = f"2026-11-0{i + 1}T12:00:00Z"
        (out / f"aa{i + 1:02d}" / "run.json").write_text(json.dumps(run))
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gate_experiments.py"), "--analyse-only",
         "--out", str(out), "--profile", str(REPO / "tests" / "profiles" / "cpu-ci.toml"),
         "--kept", str(out / "aa01" / "run.json"), str(out / "aa02" / "run.json")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())["aa"]
    assert summary["nightly"]["pairs"] == 2 and summary["vs_kept"]["pairs"] == 3
    # Identical runs: nothing can be flagged.
    assert all(summary[m]["false_alarms"] == 0 for m in ("nightly", "one_run", "vs_kept"))
    probe = summary["acceptance_probe"]
    assert probe["changes"] > 0 and probe["caught"] == probe["changes"]
    assert probe["position_caught"] == probe["position_changes"] > 0
    assert "## A/A" in (out / "summary.md").read_text()


def test_repeats_line_says_what_the_trials_catch_and_warns_when_blind() -> None:
    from specperf.report.markdown import run_markdown
    from specperf.report.synthetic import SynthConfig, synthetic_run

    noisy = synthetic_run(configs=(SynthConfig("nospec", "no spec"),), concurrencies=(1,),
                          trials=5, seed=1, run_cv=0.12)
    line = repeats_line(noisy)
    assert line is not None and line.startswith("Smallest change 5 trials a case catch")
    assert "TPOT" in line and "minimum effect 5 %" in line and "INCONCLUSIVE" in line
    assert line in run_markdown(noisy).replace("\\", "")
    quiet = synthetic_run(configs=(SynthConfig("nospec", "no spec"),), concurrencies=(1,),
                          trials=20, seed=1, run_cv=0.002, request_cv=0.002)
    calm = repeats_line(quiet)
    assert calm is not None and "INCONCLUSIVE" not in calm
    assert repeats_line(synthetic_run(configs=(SynthConfig("nospec", "no spec"),),
                                      concurrencies=(1,), trials=2)) is None


def test_power_uses_the_rules_a_run_recorded() -> None:
    from specperf.config.rules import CompareRules
    from specperf.report.synthetic import SynthConfig, synthetic_run

    run = synthetic_run(configs=(SynthConfig("nospec", "no spec"),), concurrencies=(1,),
                        trials=6, seed=2)
    strict = run.model_copy(update={"compare_rules": CompareRules.model_validate(
        {"metrics": {"tpot": {"min_effect": 0.2}}})})
    tpot = next(m for m in power_report(strict, 0.1, simulate=False).cases[0].metrics
                if m.key == "tpot")
    assert tpot.min_effect == 0.2
