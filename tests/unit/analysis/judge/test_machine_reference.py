"""The no-spec reference measured beside a spec config (specperf.analysis.judge.machine_reference:
reference_for, reference_change; the hold rule beside_reference in analysis.judge.rules):
a timing REGRESSION that the machine's own slowdown explains is INCONCLUSIVE; one beyond it,
or with the machine unchanged, stands. Synthetic runs (report.synthetic) with paired no-spec
trials; the real runs this rule was made from are in docs/validation.md ("The machine's speed")."""

from __future__ import annotations

import pytest

from specperf.analysis.judge.machine_reference import reference_change, reference_for
from specperf.analysis.judge.models import RunComparison
from specperf.analysis.judge.run import compare_runs
from specperf.analysis.stats import Verdict
from specperf.config.rules import CompareRules
from specperf.report.synthetic import SynthConfig, scale_latency, synthetic_run
from specperf.schemas import RunResult

CONFIGS = (
    SynthConfig("nospec", "no spec"),
    SynthConfig("d-k3", "draft k=3", "draft_model", "org/draft", 3, 0.75, 2.0),
)
#: The default rules, but judging timings against one baseline run (the baseline-runs
#: rule would make every change below INCONCLUSIVE on its own, hiding this one).
RULES = CompareRules(min_baseline_runs=1)


def _run(seed: int) -> RunResult:
    run = synthetic_run(configs=CONFIGS, concurrencies=(1, 8), trials=6, requests=6,
                        seed=seed, paired_max_concurrency=1)
    return run.model_copy(update={"tpot_gain_floors": {"d-k3-c1": 1.0}})


def _slower(run: RunResult, factor: float, *, cases: list[str] | None = None,
            reference: float = 1.0) -> RunResult:
    """``run`` with the TPOT of ``cases`` (all: None) scaled by ``factor`` and the paired
    no-spec trials (the reference beside d-k3) by ``reference``."""
    scaled = scale_latency(run, factor, cases=cases)
    paired = scale_latency(run.model_copy(update={"cases": list(run.paired_nospec.values())}),
                           reference)
    return scaled.model_copy(update={"paired_nospec": dict(
        zip(run.paired_nospec, paired.cases, strict=True))})


def _verdicts(cmp: RunComparison) -> dict[tuple[str, str], Verdict]:
    return {(cc.case.id, m.metric): m.verdict for cc, m in cmp.all()}


@pytest.fixture(scope="module")
def base() -> RunResult:
    return _run(seed=3)


def test_the_reference_is_the_configs_lowest_paired_case_in_both(base: RunResult) -> None:
    ref = reference_for("d-k3", base.paired_nospec, base.paired_nospec, RULES)
    assert ref is not None and ref.case_id == "d-k3-c1"
    assert base.paired_nospec[ref.case_id].case.config_id == "nospec"
    assert reference_for("nospec", base.paired_nospec, base.paired_nospec, RULES) is None
    assert reference_for("d-k3", {}, base.paired_nospec, RULES) is None  # the baseline has none
    unmoved = ref.change
    nospec = base.paired_nospec[ref.case_id]
    assert unmoved == reference_change(ref.case_id, nospec, nospec, RULES)
    assert unmoved is not None and unmoved.ratio == 1.0
    assert unmoved.ci_low <= 1.0 <= unmoved.ci_high  # not slowed: nothing to take out


def test_a_slower_machine_is_not_a_regression_of_the_spec_config(base: RunResult) -> None:
    """Everything 1.7x slower, the no-spec trials beside d-k3 too (what a VM's host did to
    a quiet run, docs/validation.md): d-k3's timing REGRESSIONs become INCONCLUSIVE and
    say why; no-spec's own cases have no reference and stay REGRESSION (a vLLM that got
    slower everywhere still fails there); the within-run checks are untouched."""
    cur = _slower(_run(seed=4), 1.7, reference=1.7)
    v = _verdicts(compare_runs(cur, base, RULES))
    for c in (1, 8):
        assert v[(f"d-k3-c{c}", "TPOT")] is Verdict.INCONCLUSIVE
        assert v[(f"d-k3-c{c}", "E2E")] is Verdict.INCONCLUSIVE
        assert v[(f"nospec-c{c}", "TPOT")] is Verdict.REGRESSION
    cmp = compare_runs(cur, base, RULES)
    (cc,) = [cc for cc in cmp.cases if cc.case.id == "d-k3-c8"]
    (tpot,) = [m for m in cc.comparisons if m.metric == "TPOT"]
    assert "the machine itself ran slower" in tpot.reason and "d-k3-c1" in tpot.reason
    assert any("no-spec trials beside d-k3-c1" in n for n in cmp.notes + cc.notes)
    # Without the reference (a run without paired trials) the same numbers fail.
    bare = _verdicts(compare_runs(cur.model_copy(update={"paired_nospec": {}}), base, RULES))
    assert bare[("d-k3-c8", "TPOT")] is Verdict.REGRESSION
    # The checks taken within the run judge the pairs as they were measured, untouched.
    for metric in ("TPOT gain", "TPOT vs no-spec"):
        assert v[("d-k3-c1", metric)] is not Verdict.REGRESSION


def test_a_regression_of_the_spec_config_alone_stands(base: RunResult) -> None:
    """d-k3 1.5x slower, the machine (its no-spec reference) unchanged: REGRESSION."""
    cur = _slower(_run(seed=4), 1.5, cases=["d-k3"])
    v = _verdicts(compare_runs(cur, base, RULES))
    assert v[("d-k3-c1", "TPOT")] is Verdict.REGRESSION
    assert v[("d-k3-c8", "TPOT")] is Verdict.REGRESSION
    assert v[("nospec-c8", "TPOT")] is not Verdict.REGRESSION


def test_a_regression_beyond_the_machines_slowdown_stands(base: RunResult) -> None:
    """The machine 1.2x slower and d-k3 2.4x: even with the machine's slowdown taken out
    at its largest, d-k3 is beyond its limit."""
    cur = _slower(_slower(_run(seed=4), 1.2, reference=1.2), 2.0, cases=["d-k3"])
    v = _verdicts(compare_runs(cur, base, RULES))
    assert v[("d-k3-c1", "TPOT")] is Verdict.REGRESSION
    assert v[("d-k3-c8", "TPOT")] is Verdict.REGRESSION
