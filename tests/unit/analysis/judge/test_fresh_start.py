"""The fresh server start's room (specperf.analysis.judge.fresh_start): each start compared
alone, and the two hold rules it gives — ``fresh_start_disagreed`` applied in the one loop
with the others, recorded as held_by — on real comparisons of samples."""

from __future__ import annotations

from specperf.analysis.judge import HoldContext, apply_holds
from specperf.analysis.judge.fresh_start import replicated, starts_disagree
from specperf.analysis.judge.models import CaseComparison, MetricDetail
from specperf.analysis.stats import Comparison, Verdict, compare_samples
from specperf.config.rules import CompareRules, Direction
from tests.support import make_case
from tests.unit.analysis.test_stats import lognormal


def _tpot(seed: int, centre: float) -> Comparison:
    return compare_samples("TPOT", lognormal(seed, 10, cv=0.03, centre=20.0),
                           lognormal(seed + 1, 10, cv=0.03, centre=centre),
                           direction=Direction.LOWER_IS_BETTER, min_effect=0.05)


def _judged(m: Comparison) -> Comparison:
    """``m`` as the judge leaves it: offered to the hold rules in their order."""
    case = make_case()
    out = CaseComparison(case=case.case, config_label="draft-k2")
    out.comparisons.append(m)
    out.details[m.metric] = MetricDetail(key="tpot", unit="ms", samples="trials")
    apply_holds(out, HoldContext(rules=CompareRules(), current=case))
    return out.comparisons[0]


def test_a_regression_stands_only_when_every_start_shows_it() -> None:
    slow, slower, back = _tpot(30, 25.0), _tpot(32, 26.0), _tpot(34, 20.0)
    assert (slow.verdict, slower.verdict) == (Verdict.REGRESSION, Verdict.REGRESSION)
    confirmed = _judged(replicated(slow, [slow, slower]))
    assert confirmed.verdict is Verdict.REGRESSION and confirmed.held_by is None
    assert "confirmed on 2 server starts" in confirmed.reason
    # The starts disagree: the numbers say REGRESSION, the rule holds it, by name.
    told = replicated(slow, [slow, back])
    assert told.verdict is Verdict.REGRESSION and told.starts == (slow.verdict, back.verdict)
    cleared = _judged(told)
    assert cleared.verdict is Verdict.INCONCLUSIVE and cleared.held_by == "fresh_start_disagreed"
    assert "not confirmed on a fresh server" in cleared.reason
    assert cleared.reason == told.reason  # its words were the account's, said once
    assert (cleared.ratio, cleared.ci_low) == (slow.ratio, slow.ci_low)  # the pooled figures


def test_an_improvement_needs_no_confirmation() -> None:
    faster, same = _tpot(36, 15.0), _tpot(38, 20.0)
    assert faster.verdict is Verdict.IMPROVEMENT and same.verdict is not Verdict.REGRESSION
    # The starts disagree, but an improvement fails nothing: the pooled verdict stands.
    judged = _judged(replicated(faster, [faster, same]))
    assert judged.verdict is Verdict.IMPROVEMENT and judged.held_by is None


def test_one_condition_decides_the_words_and_the_hold() -> None:
    r, u, i = Verdict.REGRESSION, Verdict.UNCHANGED, Verdict.INCONCLUSIVE
    assert starts_disagree(r, (r, u)) and starts_disagree(i, (i, r))
    assert not starts_disagree(r, (r, r)) and not starts_disagree(u, (u, i))
    assert not starts_disagree(r, ())  # one start: nothing to disagree with
