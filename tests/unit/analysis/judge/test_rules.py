"""The hold rules (specperf.analysis.judge.rules): each alone, and every pair, on real
Comparison objects — which rule holds which comparison, that the first in HOLD_RULES'
order wins a comparison two could hold, and that the winner is recorded (held_by) with its
reason and nothing of the loser's."""

from __future__ import annotations

import itertools
import math

import pytest

from specperf.analysis.bracket import BlockDrift
from specperf.analysis.judge import HOLD_RULES, HoldContext, apply_holds
from specperf.analysis.judge.fresh_start import replicated
from specperf.analysis.judge.machine_reference import BesideReference
from specperf.analysis.judge.models import CaseComparison, MetricDetail
from specperf.analysis.judge.rules import rule_named
from specperf.analysis.stats import Comparison, Direction, Verdict
from specperf.config.rules import CompareRules
from specperf.schemas import FreshServerConfirmation
from tests.support import make_case

NAMES = [r.name for r in HOLD_RULES]


def comparison(metric: str, verdict: Verdict, *, ratio: float = 1.3, ci: tuple[float, float] = (1.2, 1.4),
               direction: Direction = Direction.LOWER_IS_BETTER, statistic: str = "median",
               min_effect: float = 0.05) -> Comparison:
    return Comparison(metric=metric, direction=direction, statistic=statistic, baseline=10.0,  # type: ignore[arg-type]
                      current=10.0 * ratio, ratio=ratio, ci_low=ci[0], ci_high=ci[1],
                      confidence=0.95, p_value=0.001, alpha=0.01, min_effect=min_effect,
                      n_baseline=5, n_current=5, verdict=verdict,
                      reason=f"{metric} moved {ratio:.2f}x.")


def case_of(*pairs: tuple[Comparison, str, str]) -> CaseComparison:
    """A case with these (comparison, detail key, sample kind) entries."""
    case = make_case()
    out = CaseComparison(case=case.case, config_label="draft-k2")
    for m, key, samples in pairs:
        out.comparisons.append(m)
        out.details[m.metric] = MetricDetail(key=key, unit="", samples=samples)  # type: ignore[arg-type]
    return out


def slowed_reference(low: float = 1.2, high: float = 1.4) -> BesideReference:
    return BesideReference(case_id="draft-k2-c1", change=comparison(
        "no-spec TPOT beside draft-k2-c1", Verdict.REGRESSION, ratio=(low + high) / 2,
        ci=(low, high)))


def unconfirmed_case():
    return make_case().model_copy(update={"confirmation": FreshServerConfirmation(
        triggered_by=["TPOT"], first_trials=3, trials=3,
        note="the server did not start again")})


def context(*active: str) -> HoldContext:
    """A case context in which exactly the named rules' conditions hold."""
    return HoldContext(
        rules=CompareRules(acceptance_exact="sampled_acceptance" not in active,
                           min_baseline_runs=2 if "unproven_baseline" in active else 1),
        current=unconfirmed_case() if "not_confirmed" in active else make_case(),
        measured_baseline_runs=1,
        reference=slowed_reference() if "beside_reference" in active else None,
        # The no-spec blocks around the config disagree by 50 %: more than any effect here.
        drift=(BlockDrift((0, 1), (4.0, 6.0), 0.5) if "bracket_drift" in active else None))


def regressions(*active: str) -> CaseComparison:
    """A timing REGRESSION every timing rule can hold (TPOT rose 1.3x, CI 1.2-1.4: not
    beyond the limit once a 1.4x slower machine is taken out; with
    ``fresh_start_disagreed`` active, measured on two server starts of which the second
    alone is INCONCLUSIVE), the gain against its floor (REGRESSION, judged within the
    run), and the acceptance counters (UNCHANGED)."""
    tpot = comparison("TPOT", Verdict.REGRESSION)
    if "fresh_start_disagreed" in active:
        tpot = replicated(tpot, [tpot, comparison("TPOT", Verdict.INCONCLUSIVE, ratio=1.1,
                                                  ci=(0.95, 1.25))])
    return case_of(
        (tpot, "tpot", "trials"),
        (comparison("TPOT gain", Verdict.REGRESSION, ratio=0.8, ci=(0.7, 0.9),
                    direction=Direction.HIGHER_IS_BETTER), "tpot_gain", "trials"),
        (comparison("acceptance rate", Verdict.UNCHANGED, ratio=1.0, ci=(math.nan, math.nan),
                    statistic="rate"), "acceptance_rate", "counters"),
    )


#: Which comparisons of `regressions()` each rule holds when it is the only one active.
HOLDS_ALONE = {
    "fresh_start_disagreed": {"TPOT"},     # the one measured on two starts
    "sampled_acceptance": {"acceptance rate"},
    "unproven_baseline": {"TPOT"},            # not the gain against its floor
    "beside_reference": {"TPOT"},             # absolute timings only
    "bracket_drift": {"TPOT gain"},           # the gain judged against its blocks only
    "not_confirmed": {"TPOT", "TPOT gain"},   # every timing flagged on one start
}


def test_the_rules_are_named_and_ordered_once() -> None:
    assert NAMES == ["fresh_start_disagreed", "sampled_acceptance", "unproven_baseline",
                     "beside_reference", "bracket_drift", "not_confirmed"]
    assert set(HOLDS_ALONE) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_each_rule_alone_holds_what_it_covers_and_records_itself(name: str) -> None:
    out = regressions(name)
    before = {m.metric: m for m in out.comparisons}
    apply_holds(out, context(name))
    for m in out.comparisons:
        if m.metric in HOLDS_ALONE[name]:
            assert m.verdict is Verdict.INCONCLUSIVE and m.held_by == name, m
            assert m.reason.startswith(before[m.metric].reason.rstrip("."))
            # The fresh start's words are the account of the starts, already in the reason.
            assert (m.reason != before[m.metric].reason) == (name != "fresh_start_disagreed")
            # The figures stand as measured: only the verdict waits.
            assert (m.ratio, m.ci_low, m.current) == (before[m.metric].ratio,
                                                      before[m.metric].ci_low,
                                                      before[m.metric].current)
        else:
            assert m == before[m.metric], f"{name} touched {m.metric}"


def test_no_rule_active_holds_nothing() -> None:
    out = regressions()
    before = list(out.comparisons)
    apply_holds(out, context())
    assert out.comparisons == before and not out.notes


@pytest.mark.parametrize("first, second", list(itertools.combinations(NAMES, 2)))
def test_in_pairs_the_first_rule_in_order_wins_and_only_it_is_recorded(first: str,
                                                                        second: str) -> None:
    alone = {}
    for name in (first, second):
        out = regressions(first, second)
        apply_holds(out, context(name))
        alone[name] = {m.metric: m.reason for m in out.comparisons if m.held_by == name}
    out = regressions(first, second)
    apply_holds(out, context(first, second))
    for m in out.comparisons:
        winner = next((n for n in (first, second) if m.metric in HOLDS_ALONE[n]), None)
        assert m.held_by == winner, (m.metric, m.held_by)
        if winner is not None:
            # Its reason is the winner's alone: the loser appended nothing.
            assert m.reason == alone[winner][m.metric]

    # The order decides: offered the other way round, a comparison both cover goes to the
    # other rule.
    both = HOLDS_ALONE[first] & HOLDS_ALONE[second]
    reversed_rules = (rule_named(second), rule_named(first))
    out = regressions(first, second)
    apply_holds(out, context(first, second), rules=reversed_rules)
    for m in out.comparisons:
        if m.metric in both:
            assert m.held_by == second


def test_beside_reference_leaves_a_case_note_only_when_it_held_something() -> None:
    out = regressions()
    apply_holds(out, context("beside_reference"))
    assert len(out.notes) == 1 and out.notes[0].startswith(
        "timings measured while the machine ran slower: the no-spec trials beside draft-k2-c1")
    # A regression still wholly beyond its limit with the slowdown taken out stands.
    out = case_of((comparison("TPOT", Verdict.REGRESSION, ratio=2.0, ci=(1.8, 2.2)), "tpot",
                   "trials"))
    apply_holds(out, context("beside_reference"))
    assert out.comparisons[0].verdict is Verdict.REGRESSION and out.comparisons[0].held_by is None
    assert not out.notes


def test_a_comparison_already_held_is_not_offered_again() -> None:
    out = regressions()
    apply_holds(out, context("unproven_baseline"))
    first = list(out.comparisons)
    apply_holds(out, context("not_confirmed"))
    assert [m.held_by for m in out.comparisons if m.metric == "TPOT"] == ["unproven_baseline"]
    assert out.comparisons[0] == first[0]


def test_docs_table_lists_the_rules_in_their_order() -> None:
    """docs/statistics.md ("The hold rules") is the one table of the order: the names in
    it, top to bottom, are HOLD_RULES."""
    import re

    from specperf.analysis.judge.rules import HOLD_RULES
    from tests.support import REPO_ROOT

    text = (REPO_ROOT / "docs" / "statistics.md").read_text(encoding="utf-8")
    section = text[text.index("## The hold rules"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    rows = re.findall(r"^\| (\d) \| `(\w+)` \|", section, flags=re.M)
    assert [name for _, name in rows] == [r.name for r in HOLD_RULES]
    assert [int(n) for n, _ in rows] == list(range(1, len(HOLD_RULES) + 1))


def _gain(verdict: Verdict, ratio: float, *, key: str = "tpot_gain",
          min_effect: float = 0.0) -> CaseComparison:
    metric = "TPOT gain" if key == "tpot_gain" else "TPOT vs no-spec"
    return case_of((comparison(metric, verdict, ratio=ratio, ci=(ratio - 0.05, ratio + 0.05),
                               direction=Direction.HIGHER_IS_BETTER, min_effect=min_effect),
                    key, "requests"))


def _drift(d: float | None) -> HoldContext:
    medians = (4.0,) if d is None else (4.0, 4.0 * (1 + d))
    return HoldContext(rules=CompareRules(), current=make_case(),
                       drift=BlockDrift(tuple(range(len(medians))), medians, d))


@pytest.mark.parametrize("verdict, ratio, drift, held", [
    # The gain 1.30x its floor: a 10 % drift is smaller than the 30 % margin, 40 % is not.
    (Verdict.UNCHANGED, 1.3, 0.10, False),
    (Verdict.UNCHANGED, 1.3, 0.40, True),
    # Below its floor by 20 %: the drift decides whether that stands.
    (Verdict.REGRESSION, 0.8, 0.05, False),
    (Verdict.REGRESSION, 0.8, 0.25, True),
    # One block alone: the drift is unknown, every decided verdict waits.
    (Verdict.UNCHANGED, 1.9, None, True),
    # Already undecided: nothing to hold.
    (Verdict.INCONCLUSIVE, 1.01, 0.40, False),
])
def test_bracket_drift_holds_a_gain_whose_blocks_moved_more_than_its_effect(
        verdict: Verdict, ratio: float, drift: float | None, held: bool) -> None:
    out = _gain(verdict, ratio)
    apply_holds(out, _drift(drift))
    (m,) = out.comparisons
    assert (m.held_by == "bracket_drift") is held
    assert (m.verdict is Verdict.INCONCLUSIVE) is (held or verdict is Verdict.INCONCLUSIVE)
    if held:
        assert "no-spec block" in m.reason


def test_bracket_drift_against_the_baseline_weighs_unchanged_by_its_min_effect() -> None:
    # TPOT vs no-spec "unchanged" rules out a change of min_effect (10 %): a 12 % drift
    # between the blocks is larger than that, a 6 % one is not.
    for drift, held in ((0.12, True), (0.06, False)):
        out = _gain(Verdict.UNCHANGED, 1.01, key="tpot_vs_nospec", min_effect=0.10)
        apply_holds(out, _drift(drift))
        assert (out.comparisons[0].held_by == "bracket_drift") is held


def test_bracket_drift_never_touches_absolute_timings_nor_a_beside_case() -> None:
    out = case_of((comparison("TPOT", Verdict.REGRESSION), "tpot", "trials"))
    apply_holds(out, _drift(0.5))
    assert out.comparisons[0].held_by is None
    out = _gain(Verdict.UNCHANGED, 1.3)
    apply_holds(out, HoldContext(rules=CompareRules(), current=make_case()))
    assert out.comparisons[0].held_by is None
