"""Tests of specperf.analysis.compare (the statistics of a case against its baseline: which
samples, the kept runs' spread, what the trials can catch), through the judge's
compare_runs / compare_cases, on a real CPU run file and on synthetic runs (real models).
The run-level judgement (refusals, notes, rules) is tests/unit/analysis/judge/test_run.py."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from specperf.analysis.judge.case import compare_cases
from specperf.analysis.judge.exit_status import run_exit_status
from specperf.analysis.judge.follow_up import flagged_metrics, inconclusive_metrics
from specperf.analysis.judge.models import RunComparison
from specperf.analysis.judge.run import as_run, compare_runs
from specperf.analysis.samples import earlier_runs
from specperf.analysis.spread import kept_spreads
from specperf.analysis.stats import Direction, Verdict
from specperf.config.rules import CompareRules, MetricRule
from specperf.report.synthetic import (
    SynthConfig,
    scale_latency,
    scale_throughput,
    synthetic_run,
)
from specperf.schemas import Baseline, FreshServerConfirmation, RunResult
from specperf.store.files import load_result
from tests.support import CPU_TINY_RUN, REPO_ROOT, SYNTH_CONFIGS, verdicts

REAL_RUN = CPU_TINY_RUN  # the `real` fixture (tests/conftest.py)


# --------------------------------------------------------------------------- verdicts


def test_real_run_against_itself_has_no_regression(real: RunResult) -> None:
    cmp = compare_runs(real, real)
    # Identical data cannot show a regression; what it cannot decide (per-request
    # intervals wider than a minimum effect) is INCONCLUSIVE, exit 6, never a failure.
    assert run_exit_status([], cmp) in (0, 6) and not cmp.regressions and not cmp.refusals
    assert {cc.case.id for cc in cmp.cases} == {c.case.id for c in real.cases}
    assert cmp.counts()[Verdict.REGRESSION] == 0
    assert cmp.counts()[Verdict.IMPROVEMENT] == 0
    # One trial per case: latencies per request, with the drift caveat said everywhere.
    tpot = next(m for cc, m in cmp.all() if m.metric == "TPOT")
    assert "understates run-to-run drift" in tpot.reason
    assert any("understates run-to-run drift" in n for n in cmp.notes)
    detail = cmp.cases[0].details["TPOT"]
    assert detail.samples == "requests" and detail.note


def test_real_run_30pct_tpot_regression_is_named(real: RunResult) -> None:
    cur = scale_latency(real, 1.3, cases=["self-k3"])
    cmp = compare_runs(cur, real)
    v = verdicts(cmp)
    assert v[("self-k3-c1", "TPOT")] is Verdict.REGRESSION
    assert run_exit_status([], cmp) == 1
    reg = dict(((cc.case.id, m.metric), m) for cc, m in cmp.regressions)
    assert reg[("self-k3-c1", "TPOT")].ratio == pytest.approx(1.3, rel=0.02)
    # Untouched cases cannot regress; acceptance is unchanged by a latency change.
    assert all(cid == "self-k3-c1" for cid, _ in reg)
    assert v[("self-k3-c1", "acceptance_rate")] is Verdict.UNCHANGED


def test_per_trial_samples_when_five_trials(five_trials: RunResult) -> None:
    cur = scale_latency(five_trials, 1.3, cases=["d-k3"])
    cmp = compare_runs(cur, five_trials)
    for cc in cmp.cases:
        assert cc.baseline_trials == 6
        assert cc.details["TPOT"].samples == "trials"
        assert cc.details["output throughput"].samples == "trials"
    tpot = {cc.case.id: m for cc, m in cmp.all() if m.metric == "TPOT"}
    assert tpot["d-k3-c1"].verdict is Verdict.REGRESSION
    assert tpot["d-k3-c1"].n_baseline == 6  # one value per trial
    assert tpot["nospec-c1"].verdict is not Verdict.REGRESSION
    assert not any("understates" in n for n in cmp.notes)


def test_improvement_is_not_a_regression(five_trials: RunResult) -> None:
    # The improved cases alone: the untouched ones' 6-trial intervals are wider than 5 %.
    improved = five_trials.model_copy(update={"cases": [
        c for c in five_trials.cases if c.case.config_id == "d-k3"]})
    cur = scale_latency(improved, 0.7, cases=["d-k3"])
    cmp = compare_runs(cur, improved)
    tpot = {cc.case.id: m.verdict for cc, m in cmp.all() if m.metric == "TPOT"}
    assert tpot["d-k3-c8"] is Verdict.IMPROVEMENT
    assert all(cc.outcome(m) == "pass" for cc, m in cmp.all())
    assert not cmp.regressions and run_exit_status([], cmp) == 0


@pytest.mark.parametrize(
    ("factor", "expected"),
    [(0.80, Verdict.REGRESSION), (0.99, Verdict.UNCHANGED), (0.92, Verdict.INCONCLUSIVE),
     (1.25, Verdict.IMPROVEMENT)],
)
def test_throughput_budget_with_one_trial(factor: float, expected: Verdict) -> None:
    base = synthetic_run(configs=SYNTH_CONFIGS[:1], concurrencies=(4,), trials=1, requests=6)
    cur = scale_throughput(base, factor)
    (cc,) = compare_runs(cur, base).cases
    m = next(m for m in cc.comparisons if m.metric == "output throughput")
    assert m.verdict is expected, m.reason
    assert math.isnan(m.ci_low) and m.p_value is None
    assert m.min_effect == pytest.approx(0.15)
    assert cc.details["output throughput"].samples == "trial_means"
    assert "±15 %" in m.reason


def test_acceptance_per_position_with_absolute_tolerance(five_trials: RunResult) -> None:
    worse = synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1, 8), trials=6, requests=6, seed=3,
                          accept_shift=-0.05)
    cmp = compare_runs(worse, five_trials)
    v = verdicts(cmp)
    assert v[("d-k3-c1", "acceptance_rate")] is Verdict.REGRESSION
    for pos in range(3):
        assert v[("d-k3-c1", f"acceptance_rate[pos {pos}]")] is Verdict.REGRESSION
    assert ("nospec-c1", "acceptance_rate") not in v  # no-spec has no acceptance
    m = next(m for cc, m in cmp.all() if m.metric == "acceptance_rate")
    assert m.statistic == "rate" and m.min_effect == 0.0005


def test_sampled_acceptance_is_not_decided(five_trials: RunResult) -> None:
    """At temperature > 0 acceptance moves between server starts (measured: 0 → 82
    accepted tokens of ~600 on one release), so neither a drop nor an equality decides."""
    worse = synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1, 8), trials=6, requests=6, seed=3,
                          accept_shift=-0.05)
    sampled = CompareRules(acceptance_exact=False)
    for cur in (worse, five_trials):
        cmp = compare_runs(cur, five_trials, sampled)
        acc = [m for _, m in cmp.all() if m.metric.startswith("acceptance_rate")]
        assert acc and all(m.verdict is Verdict.INCONCLUSIVE for m in acc)
        assert all("temperature > 0" in m.reason for m in acc)


def test_rules_override_min_effect_and_disable(five_trials: RunResult) -> None:
    cur = scale_latency(five_trials, 1.3, cases=["d-k3"])
    rules = CompareRules()
    rules.metrics["tpot"] = MetricRule(name="TPOT", unit="ms",
                                       direction=Direction.LOWER_IS_BETTER,
                                       statistic="median", min_effect=0.60)
    rules.metrics["e2e"] = rules.metrics["e2e"].model_copy(update={"enabled": False})
    cmp = compare_runs(cur, five_trials, rules)
    v = verdicts(cmp)
    assert v[("d-k3-c1", "TPOT")] is not Verdict.REGRESSION  # 30 % < 60 %
    assert not any(metric == "E2E" for _, metric in v)


def test_rules_reject_unknown_keys() -> None:
    with pytest.raises(ValidationError):
        CompareRules.model_validate({"metrics": {"tpot_typo": {}}})
    with pytest.raises(ValidationError):
        CompareRules.model_validate({"min_trails": 3})


# --------------------------------------------------------------------------- summaries only

PUBLISHED = (REPO_ROOT / "baselines" / "a100-qwen3-32b"
             / "gpu-nvidia-a100-sxm4-80gb-x1.json")


def test_published_baseline_without_samples_uses_the_budget_rule_and_cannot_fail() -> None:
    published = load_result(PUBLISHED)
    assert isinstance(published, Baseline) and published.provenance.provisional
    target = published.cases[0]
    worse = target.model_copy(update={"tpot_ms": target.tpot_ms.model_copy(
        update={"mean": target.tpot_ms.mean * 1.3})})
    run = as_run(published.model_copy(update={"cases": [worse, *published.cases[1:]]}))
    cmp = compare_runs(run, published)
    # The budget rule flags +30 %, but published means measured nothing on this hardware:
    # no kept run, so the change is INCONCLUSIVE (exit 6), never a FAIL that would keep
    # a first nightly from ever becoming a kept run.
    assert run_exit_status([], cmp) == 6 and not cmp.regressions
    [(cc, reg)] = [(cc, m) for cc in cmp.cases for m in cc.comparisons
                   if m.verdict is Verdict.INCONCLUSIVE]
    assert cc.case == target.case and reg.metric == "TPOT"
    assert reg.statistic == "mean" and reg.min_effect == 0.15 and math.isnan(reg.ci_low)
    assert "no request samples" in reg.reason and "0 measured runs" in reg.reason
    assert cc.details["TPOT"].samples == "summary"
    # E2E is not in a published table: said once for the run, not once per case
    assert any(n.startswith("E2E not compared") and n.endswith(f"({len(cmp.cases)} cases)")
               for n in cmp.notes)
    assert not any("E2E" in n for cc in cmp.cases for n in cc.notes)
    assert any("provisional" in n for n in cmp.notes)


# --------------------------------------------------------------------------- retries


def test_inconclusive_metrics_skips_what_more_trials_cannot_decide(
        five_trials: RunResult) -> None:
    """A latency judged against a baseline's summary figures alone (no samples there)
    does not narrow with trials on this side, so it triggers no retry."""
    base = five_trials.cases[0]
    # The current TTFT 18 % worse: beyond TTFT's 10 % minimum effect, inside its 25 % budget.
    no_samples = base.model_copy(update={"trials": [], "ttft_ms": base.ttft_ms.model_copy(
        update={"median": base.ttft_ms.median / 1.18})})  # type: ignore[operator]
    cc = compare_cases(no_samples, base)
    ttft = next(m for m in cc.comparisons if m.metric == "TTFT")
    assert ttft.verdict is Verdict.INCONCLUSIVE and cc.details["TTFT"].samples == "summary"
    assert "TTFT" not in inconclusive_metrics(cc)


# --------------------------------------------------------------------------- kept runs


def _kept_runs(offsets: list[float]) -> list[RunResult]:
    """Runs of one server config as separate server lifetimes: each its own noise (seed),
    date and a whole-run latency offset, the way a restart shifts every trial together."""
    out = []
    for i, off in enumerate(offsets):
        run = synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1,), trials=6, requests=6,
                            seed=40 + i)
        run = scale_latency(run, off)
        prov = run.provenance.model_copy(
            update={"date": run.provenance.date.replace(day=1 + i)})
        out.append(run.model_copy(update={"provenance": prov}))
    return out


def test_kept_runs_pool_and_absorb_a_restart_offset() -> None:
    *history, base = _kept_runs([1.0, 1.12, 1.06, 0.92])
    cur = scale_latency(synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1,), trials=6,
                                      requests=6, seed=99), 1.13)
    alone = compare_runs(cur, base)
    assert any(m.verdict is Verdict.REGRESSION for _, m in alone.all() if m.metric == "TPOT")
    assert any(n.startswith("baseline: one run") for n in alone.notes)
    pooled = compare_runs(cur, base, history=[*history, base])  # the copy of base is skipped
    tpot = [(cc, m) for cc, m in pooled.all() if m.metric == "TPOT"]
    assert all(m.verdict is not Verdict.REGRESSION for _, m in tpot)
    for cc, m in tpot:
        assert cc.details["TPOT"].baseline_runs == 4
        assert m.n_baseline == 24  # 4 runs x 6 trials
        assert (cc.details["TPOT"].between_run_spread or 0) > 0.04
    assert any("4 kept runs pooled" in n for n in pooled.notes)
    # A real 80 % slowdown is still caught through the wider interval.
    slow = compare_runs(scale_latency(cur, 1.8 / 1.13), base, history=history)
    assert all(m.verdict is Verdict.REGRESSION for _, m in slow.all() if m.metric == "TPOT")


def test_kept_runs_of_other_hardware_profile_or_config_are_not_pooled() -> None:
    *history, base = _kept_runs([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    other_hw, other_profile, other_config, other_vllm, ok = history
    other_vllm = other_vllm.model_copy(update={"provenance": other_vllm.provenance.model_copy(
        update={"vllm_version": "0.31.0"})})
    other_hw = other_hw.model_copy(update={"provenance": other_hw.provenance.model_copy(
        update={"hardware_id": "cpu-elsewhere"})})
    other_profile = other_profile.model_copy(update={
        "provenance": other_profile.provenance.model_copy(update={"profile_hash": "0" * 16})})
    other_config = other_config.model_copy(update={"cases": [
        c.model_copy(update={"config_hash": "changed"}) for c in other_config.cases]})
    # Another dataset's run is not pooled; a run from before prompts were hashed is.
    base = base.model_copy(update={"provenance": base.provenance.model_copy(
        update={"prompts_hash": "1" * 16})})
    other_prompts = ok.model_copy(update={"provenance": ok.provenance.model_copy(
        update={"prompts_hash": "2" * 16, "date": ok.provenance.date.replace(day=28)})})
    assert ok.provenance.prompts_hash is None
    # Nor one that served other model revisions (#53); one that recorded none is.
    base = base.model_copy(update={"provenance": base.provenance.model_copy(
        update={"model_revisions": {"org/target": "a" * 40}})})
    other_models = ok.model_copy(update={"provenance": ok.provenance.model_copy(
        update={"model_revisions": {"org/target": "b" * 40},
                "date": ok.provenance.date.replace(day=27)})})
    assert ok.provenance.model_revisions == {}
    kept = [other_hw, other_profile, other_config, other_vllm, ok, other_prompts, other_models,
            base]
    for case in base.cases:
        assert earlier_runs(case, base, kept) == [ok.case(case.case)]
    cmp = compare_runs(_kept_runs([1.0])[0], base, history=kept)
    assert {d.baseline_runs for cc in cmp.cases for d in cc.details.values()
            if d.samples == "trials"} == {2}


def test_baseline_runs_rule_takes_the_newest_and_one_means_the_file_alone() -> None:
    *history, base = _kept_runs([1.0, 1.1, 0.9, 1.0])
    newest = earlier_runs(base.cases[0], base, history)
    assert newest[0] == history[-1].cases[0]  # newest first
    cur = _kept_runs([1.0])[0]
    two = compare_runs(cur, base, CompareRules(baseline_runs=2), history=history)
    assert {cc.details["TPOT"].baseline_runs for cc in two.cases} == {2}
    one = compare_runs(cur, base, CompareRules(baseline_runs=1), history=history)
    assert {cc.details["TPOT"].baseline_runs for cc in one.cases} == {1}
    assert all(cc.details["TPOT"].between_run_spread is None for cc in one.cases)
    assert not any(n.startswith("baseline: one run") for n in one.notes)  # asked for: nothing to advise


def test_a_run_too_noisy_for_its_minimum_effect_says_so() -> None:
    # A 40-trial baseline, a 5-trial run, ~6 % trial noise: more trials in the run help.
    noisy = synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1,), trials=40, requests=6, seed=7,
                          run_cv=0.04)
    other = synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1,), trials=5, requests=6, seed=8,
                          run_cv=0.04)
    cmp = compare_runs(other, noisy)
    tpot = cmp.cases[0].details["TPOT"]
    assert tpot.detectable is not None and tpot.detectable > 0.05
    assert tpot.trials_needed is not None and tpot.trials_needed > 5
    note = next(n for n in cmp.notes if n.startswith("these repeats cannot see"))
    assert "minimum" in note and ("trials per run would" in note or "no number" in note)
    # A 5-trial baseline that noisy: its own noise exceeds the budget, so no run can.
    small = synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1,), trials=5, requests=6, seed=7,
                          run_cv=0.15)
    note = next(n for n in compare_runs(other, small).notes
                if n.startswith("these repeats cannot see"))
    assert "no number of trials in one run would" in note
    quiet = synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1,), trials=8, requests=6, seed=7,
                          run_cv=0.005, request_cv=0.01)
    twin = synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1,), trials=8, requests=6, seed=8,
                         run_cv=0.005, request_cv=0.01)
    calm = compare_runs(twin, quiet)
    assert all(d.detectable is not None and d.detectable < 0.03
               for cc in calm.cases for k, d in cc.details.items() if d.samples == "trials")
    assert not any(n.startswith("these repeats cannot see") for n in calm.notes)


def test_cli_compare_pools_the_kept_history_beside_the_baseline(tmp_path: Path) -> None:
    from specperf.cli import main as cli_main
    from specperf.store.baselines import write_baseline

    path = tmp_path / "baselines" / "synthetic.json"
    for run in _kept_runs([1.0, 1.05, 0.95]):
        write_baseline(path, Baseline(provenance=run.provenance, cases=run.cases))
    cur = tmp_path / "run.json"
    cur.write_text(_kept_runs([1.0])[0].model_dump_json())
    out = tmp_path / "cmp.json"

    def runs_pooled(*extra: str) -> set[int]:
        # Compared, not refused (2): 6 when some interval cannot decide its minimum effect.
        assert cli_main(["compare", str(cur), str(path), "--json", str(out), *extra]) in (0, 1, 6)
        data = json.loads(out.read_text())
        return {d["baseline_runs"] for c in data["cases"] for d in c["details"].values()
                if d["samples"] == "trials"}

    assert runs_pooled() == {3}
    assert runs_pooled("--no-history") == {1}
    assert runs_pooled("--history", str(sorted((path.parent / "history").rglob("*.json"))[0])) == {2}


# --------------------------------------------------------------------------- fresh server


def _two_starts(first: RunResult, second: RunResult) -> RunResult:
    """One run whose every case was measured on two server starts: ``first``'s trials
    (start 0), then ``second``'s (start 1)."""
    cases = []
    for a in first.cases:
        b = second.case(a.case)
        assert b is not None
        trials = ([t.model_copy(update={"server_start": 0}) for t in a.trials]
                  + [t.model_copy(update={"server_start": 1, "index": len(a.trials) + t.index})
                     for t in b.trials])
        cases.append(a.model_copy(update={"trials": trials}))
    return first.model_copy(update={"cases": cases})


def test_a_flag_from_one_server_start_is_cleared_by_a_fresh_one_a_real_shift_is_not() -> None:
    *history, base = _kept_runs([1.0, 1.03, 0.97, 1.0])

    def current(seed: int, factor: float) -> RunResult:
        return scale_latency(synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1,), trials=6,
                                           requests=6, seed=seed), factor)

    # One start 22 % slow (its own offset): flagged on its own trials ...
    odd = current(99, 1.22)
    alone = compare_runs(odd, base, history=history)
    flagged = {cc.case.id: flagged_metrics(cc) for cc in alone.cases}
    assert all("TPOT" in m for m in flagged.values())
    # ... but the fresh start is back at the baseline: not confirmed, INCONCLUSIVE.
    both = compare_runs(_two_starts(odd, current(98, 0.99)), base, history=history)
    for cc in both.cases:
        tpot = next(m for m in cc.comparisons if m.metric == "TPOT")
        assert tpot.verdict is not Verdict.REGRESSION
        assert cc.details["TPOT"].current_server_starts == 2
        assert tpot.n_current == 12
        assert "not confirmed on a fresh server: start 1 regression" in tpot.reason
    # A real 35 % slowdown shows on both starts and is confirmed.
    real_shift = compare_runs(_two_starts(current(99, 1.35), current(98, 1.33)), base,
                              history=history)
    for cc in real_shift.cases:
        tpot = next(m for m in cc.comparisons if m.metric == "TPOT")
        assert tpot.verdict is Verdict.REGRESSION
        assert "confirmed on 2 server starts: start 1 regression" in tpot.reason


def test_a_flag_never_measured_on_a_fresh_start_is_inconclusive_not_a_regression() -> None:
    """The fresh start did not happen (server did not start again, run interrupted): the
    first start's figures stand, its timing REGRESSIONs wait as INCONCLUSIVE, saying why."""
    *history, base = _kept_runs([1.0, 1.03, 0.97, 1.0])
    slow = scale_latency(synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1,), trials=6,
                                       requests=6, seed=99), 1.35)
    note = "not confirmed: the run was interrupted before the fresh start"
    waiting = slow.model_copy(update={"cases": [c.model_copy(update={
        "confirmation": FreshServerConfirmation(triggered_by=["TPOT"], first_trials=6,
                                                trials=6, note=note)}) for c in slow.cases]})
    flagged = compare_runs(slow, base, history=history)
    judged = compare_runs(waiting, base, history=history)
    for before, after in zip(flagged.cases, judged.cases, strict=True):
        regressed = {m.metric for m in before.comparisons if m.verdict is Verdict.REGRESSION}
        assert "TPOT" in regressed
        for was, now in zip(before.comparisons, after.comparisons, strict=True):
            assert (now.ratio, now.ci_low, now.ci_high) == (was.ratio, was.ci_low, was.ci_high)
            if was.metric in regressed:
                assert now.verdict is Verdict.INCONCLUSIVE
                assert now.reason.endswith(f"; flagged on the first server start, {note}.")
            else:
                assert now.verdict is was.verdict


def test_flagged_metrics_are_trial_latency_and_throughput_only(real: RunResult) -> None:
    slow = scale_latency(real, 1.6)
    cmp = compare_runs(slow, real, CompareRules(min_trials=2))
    for cc in cmp.cases:
        names = flagged_metrics(cc)
        assert not any(n.startswith("acceptance") for n in names)
        # Only a REGRESSION needs a fresh server to confirm it; an improvement fails nothing.
        assert set(names) <= {m.metric for m in cc.comparisons
                              if m.verdict is Verdict.REGRESSION}
    unchanged = compare_runs(real, real, CompareRules(min_trials=2))
    assert all(flagged_metrics(cc) == [] for cc in unchanged.cases)
    faster = compare_runs(scale_latency(real, 0.6), real, CompareRules(min_trials=2))
    assert any(m.verdict is Verdict.IMPROVEMENT for _, m in faster.all())
    assert all(flagged_metrics(cc) == [] for cc in faster.cases)


def test_confirmation_is_a_note_of_the_case_comparison(real: RunResult) -> None:
    rec = FreshServerConfirmation(triggered_by=["TPOT", "E2E"], first_trials=5, trials=10,
                                  outcome={"TPOT": "regression", "E2E": "inconclusive"})
    assert rec.confirmed == ["TPOT"]
    assert rec.summary_line() == ("TPOT, E2E flagged: measured again on a fresh server "
                                  "(5 + 5 trials): TPOT confirmed regression, E2E now "
                                  "inconclusive")
    case = real.cases[0].model_copy(update={"confirmation": rec})
    cc = compare_cases(real.cases[0], case)
    assert f"current run: {rec.summary_line()}" in cc.notes
    assert "confirmation" not in real.cases[0].model_dump_json()  # absent: files as before


def test_a_timing_regression_needs_the_baseline_runs_the_rules_ask_for(
        five_trials: RunResult) -> None:
    """One baseline run cannot tell its own offset from a change (a quiet VM moved whole
    runs by 20-40 %): with min_baseline_runs = 2, a 30 % slowdown against one run is
    INCONCLUSIVE, saying why; acceptance (exact counters) is judged all the same."""
    cur = scale_latency(five_trials, 1.3, cases=["d-k3"])
    rules = CompareRules(min_baseline_runs=2)
    one = compare_runs(cur, five_trials, rules)
    v = verdicts(one)
    assert v[("d-k3-c1", "TPOT")] is Verdict.INCONCLUSIVE
    (m,) = [m for cc, m in one.all() if cc.case.id == "d-k3-c1" and m.metric == "TPOT"]
    assert "min_baseline_runs" in m.reason and "keep more runs" in m.reason
    assert not one.regressions
    # The same slowdown stands against the default rule (one run is enough there).
    assert verdicts(compare_runs(cur, five_trials))[("d-k3-c1", "TPOT")] is Verdict.REGRESSION


def test_throughput_budget_passes_only_clear_of_the_kept_runs_spread() -> None:
    """Measured on cpu-tiny (2026-12-02): with one trial a case, a 21 % drop in throughput
    read PASS against two kept runs whose means spread ±106 % by Student's t — inside the
    25 % minimum effect, while the runs themselves could not tell 25 % from nothing."""
    def one_trial(seed: int, day: int, factor: float) -> RunResult:
        run = scale_throughput(synthetic_run(configs=SYNTH_CONFIGS[:1], concurrencies=(4,), trials=1,
                                             requests=6, seed=seed), factor)
        return run.model_copy(update={"provenance": run.provenance.model_copy(
            update={"date": run.provenance.date.replace(day=day)})})

    rules = CompareRules.model_validate(
        {"metrics": {"output_throughput": {"direction": "higher", "min_effect": 0.25}}})
    earlier, base = one_trial(1, 1, 1.0), one_trial(1, 2, 1.06)
    cur = one_trial(1, 3, 0.90)

    def verdict(history: list[RunResult]) -> tuple[Verdict, str]:
        (cc,) = compare_runs(cur, base, rules, history=history).cases
        m = next(m for m in cc.comparisons if m.metric == "output throughput")
        return m.verdict, m.reason

    # Against the baseline alone the point rule decides: 10-15 % is inside 25 %.
    assert verdict([])[0] is Verdict.UNCHANGED
    # Two kept runs 6 % apart: t(1) = 12.7 makes that spread ±~65 %, so no PASS.
    v, why = verdict([earlier])
    assert v is Verdict.INCONCLUSIVE, why
    assert "could hide a change beyond it" in why
    # Kept runs that agree closely leave the point rule its PASS, and say by how much.
    close = [one_trial(1, d, f) for d, f in ((4, 1.005), (5, 0.995), (6, 1.0), (7, 1.004))]
    v, why = verdict(close)
    assert v is Verdict.UNCHANGED, why
    assert "by more than the kept runs'" in why


# ------------------------------------------------------------- the spread pooled over cases

_TEN = tuple(SynthConfig(f"cfg{i}", f"config {i}") for i in range(10))


def _two_kept_runs(target: tuple[float, float] | None, *, seed: int = 70
                   ) -> tuple[RunResult, RunResult]:
    """Two kept runs (the older, then the baseline) of ten configs with one trial each,
    every config's server start moved by its own ~8 % offset. ``target``: cfg0's two
    offsets; None: cfg0 measured identically in both (two runs that agree by chance)."""
    rng = np.random.default_rng(seed)
    runs = []
    for i in range(2):
        run = synthetic_run(configs=_TEN, concurrencies=(1,), trials=1, requests=8,
                            seed=seed + i)
        for cfg in _TEN:
            off = float(np.exp(rng.normal(0.0, 0.08)))
            if cfg.id == "cfg0":
                off = target[i] if target is not None else 1.0
            run = scale_latency(run, off, cases=[cfg.id])  # type: ignore[assignment]
        prov = run.provenance.model_copy(update={"date": run.provenance.date.replace(day=1 + i)})
        runs.append(run.model_copy(update={"provenance": prov}))
    older, base = runs
    if target is None:
        # The baseline's values, measured a day earlier: another measurement (its trials
        # started then), not the baseline's own, which the pooling counts once.
        same = base.case(older.cases[0].case)
        assert same is not None
        same = same.model_copy(update={"trials": [
            t.model_copy(update={"started_at": t.started_at - timedelta(days=1)})
            for t in same.trials]})
        older = older.model_copy(update={"cases": [same, *older.cases[1:]]})
    return older, base


def _tpot(cmp: RunComparison, case_id: str = "cfg0-c1"):  # type: ignore[no-untyped-def]
    cc = next(cc for cc in cmp.cases if cc.case.id == case_id)
    return cc, next(m for m in cc.comparisons if m.metric == "TPOT")


def test_two_kept_runs_that_agree_by_chance_borrow_the_other_cases_spread() -> None:
    # Measured on cpu-tiny (docs/validation.md, #13): a no-spec server 0.1 % apart in its
    # two kept runs had a spread of 0, so one slow start FAILed a quiet run. Pooled, its
    # interval carries the ~8 % start offset the other cases show.
    older, base = _two_kept_runs(None)
    cur = scale_latency(synthetic_run(configs=_TEN, concurrencies=(1,), trials=1,
                                      requests=8, seed=90), 1.2, cases=["cfg0"])
    alone = compare_cases(base.case(cur.cases[0].case), cur.cases[0], CompareRules(),
                          earlier=[older.cases[0]])
    assert next(m for m in alone.comparisons if m.metric == "TPOT").verdict is Verdict.REGRESSION
    assert alone.details["TPOT"].between_run_spread == 0
    cc, tpot = _tpot(compare_runs(cur, base, history=[older]))
    assert tpot.verdict is Verdict.INCONCLUSIVE
    detail = cc.details["TPOT"]
    assert detail.between_run_cases == 10 and (detail.between_run_df or 0) > 5
    assert 0.04 < (detail.between_run_spread or 0) < 0.16
    assert "moderated by 10 cases' kept runs" in tpot.reason


def test_a_moderated_spread_narrows_what_one_degree_of_freedom_cannot_tell() -> None:
    # Two kept runs 7 % apart: alone, Student's t with 1 degree of freedom (12.7) makes
    # the interval useless; with the other cases' runs it is t with ~10.
    older, base = _two_kept_runs((1.0, 1.07))
    cur = scale_latency(synthetic_run(configs=_TEN, concurrencies=(1,), trials=1,
                                      requests=8, seed=91), 1.6, cases=["cfg0"])
    alone = compare_cases(base.case(cur.cases[0].case), cur.cases[0], CompareRules(),
                          earlier=[older.cases[0]])
    own = next(m for m in alone.comparisons if m.metric == "TPOT")
    cc, pooled = _tpot(compare_runs(cur, base, history=[older]))
    assert cc.details["TPOT"].between_run_cases == 10
    assert math.log(pooled.ci_high / pooled.ci_low) < 0.5 * math.log(own.ci_high / own.ci_low)
    assert own.verdict is Verdict.INCONCLUSIVE and pooled.verdict is Verdict.REGRESSION


def test_a_case_noisier_than_the_others_stays_the_noisiest() -> None:
    # Its two starts 90 % apart, the others' ~8 %: moderation pulls its one-degree-of-
    # freedom estimate towards theirs, never below them.
    older, base = _two_kept_runs((1.0, 1.9))
    cur = synthetic_run(configs=_TEN, concurrencies=(1,), trials=1, requests=8, seed=92)
    cmp = compare_runs(cur, base, history=[older])
    cc, _ = _tpot(cmp)
    alone = compare_cases(base.case(cur.cases[0].case), cur.cases[0], CompareRules(),
                          earlier=[older.cases[0]])
    own = alone.details["TPOT"].between_run_spread or 0
    moderated = cc.details["TPOT"].between_run_spread or 0
    others = [c.details["TPOT"].between_run_spread or 0 for c in cmp.cases if c is not cc]
    assert max(others) < moderated < own


def test_the_spread_comes_from_the_baseline_alone_so_a_shard_is_judged_alike() -> None:
    older, base = _two_kept_runs((1.0, 1.05))
    cur = scale_latency(synthetic_run(configs=_TEN, concurrencies=(1,), trials=1,
                                      requests=8, seed=93), 1.3, cases=["cfg0"])
    shard = cur.model_copy(update={"cases": cur.cases[:1], "paired_nospec": {}})
    whole, part = (_tpot(compare_runs(r, base, history=[older]))[1] for r in (cur, shard))
    assert (whole.verdict, whole.ci_low, whole.ci_high) == (part.verdict, part.ci_low,
                                                            part.ci_high)
    # What the run judging as it goes passes (engine.baseline_context → compare_cases).
    spreads = kept_spreads(base, [older], CompareRules())
    going = compare_cases(base.case(cur.cases[0].case), cur.cases[0], CompareRules(),
                          earlier=earlier_runs(base.cases[0], base, [older]), spreads=spreads)
    tpot = next(m for m in going.comparisons if m.metric == "TPOT")
    assert (tpot.verdict, tpot.ci_low, tpot.ci_high) == (whole.verdict, whole.ci_low,
                                                         whole.ci_high)


def test_no_spec_that_moved_with_the_same_vllm_says_the_machine_moved(real: RunResult) -> None:
    # Every latency 40 % lower, no-spec's too: no draft runs there, so the machine moved.
    faster = compare_runs(scale_latency(real, 0.6), real, CompareRules(min_trials=2))
    nospec = [cc for cc in faster.cases if cc.method is None]
    assert nospec and any(m.verdict is Verdict.IMPROVEMENT
                          for cc in nospec for m in cc.comparisons if m.metric == "TPOT")
    moved = [n for n in faster.notes if n.startswith("no-spec's TPOT moved with the same vLLM")]
    assert len(moved) == 1 and "-40 % at c" in moved[0] and "the machine's too" in moved[0]
    # The verdicts stay what the numbers say.
    assert verdicts(faster) == verdicts(compare_runs(scale_latency(real, 0.6), real,
                                                     CompareRules(min_trials=2)))
    # Only the spec configs slower: no-spec did not move, nothing is said of the machine.
    spec_only = scale_latency(real, 1.6, cases=[cc.case.config_id for cc in faster.cases
                                                if cc.method is not None])
    assert not any("moved with the same vLLM" in n
                   for n in compare_runs(spec_only, real, CompareRules(min_trials=2)).notes)
    # Another vLLM may move no-spec itself: that is the upgrade's, not the machine's.
    upgraded = scale_latency(real, 0.6).model_copy(update={"provenance": real.provenance.model_copy(
        update={"vllm_version": "9.9.9"})})
    assert not any("moved with the same vLLM" in n
                   for n in compare_runs(upgraded, real, CompareRules(min_trials=2),
                                         force=True).notes)
