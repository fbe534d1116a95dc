"""Tests of specperf.analysis.judge.case (judge_case, and compare_cases: the same on
evidence given piece by piece) on a real CPU run file and synthetic cases. How each metric
is compared is tests/unit/analysis/test_compare.py's; each hold rule, test_rules.py's."""

from __future__ import annotations

from specperf.analysis.gain import GAIN_METRIC
from specperf.analysis.judge.case import compare_cases, judge_case
from specperf.analysis.judge.evidence import Evidence
from specperf.analysis.stats import Verdict
from specperf.config.rules import CompareRules
from specperf.schemas import RunResult
from tests.unit.analysis.test_gain import _case, _tpots


def test_compare_cases_directly(real: RunResult) -> None:
    a = real.cases[-1]
    cc = compare_cases(a, a)
    assert {m.metric for m in cc.comparisons} >= {"TTFT", "TPOT", "E2E", "output throughput",
                                                  "acceptance_rate", "acceptance_rate[pos 2]"}
    assert cc.worst in (Verdict.UNCHANGED, Verdict.INCONCLUSIVE)


def test_compare_cases_is_judge_case_of_the_same_evidence(real: RunResult) -> None:
    base, cur = real.cases[0], real.cases[-1].model_copy(update={"case": real.cases[0].case})
    rules = CompareRules(min_baseline_runs=1)
    direct = judge_case(Evidence(current=cur, baseline=base), rules)
    assert compare_cases(base, cur, rules).model_dump_json() == direct.model_dump_json()


def test_without_a_baseline_case_only_the_paired_gain_is_judged() -> None:
    """A case the baseline lacks: its own paired gain against the floor, nothing else."""
    spec, nospec = _case("ngram-k3", _tpots(20.0)), _case("nospec", _tpots(30.0))
    cc = compare_cases(None, spec, paired=nospec, gain_floor=1.0)
    assert [m.metric for m in cc.comparisons] == [GAIN_METRIC]
    assert cc.baseline_trials == 0 and cc.comparisons[0].verdict is Verdict.UNCHANGED
    assert "paired with" in cc.details[GAIN_METRIC].note
    # No floor: nothing to judge without a baseline.
    assert compare_cases(None, spec, paired=nospec).comparisons == []
