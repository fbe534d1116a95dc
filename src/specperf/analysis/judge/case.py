"""One case judged: its evidence (:class:`~specperf.analysis.judge.Evidence`) compared
metric by metric (:func:`specperf.analysis.compare.against_baseline`, the statistics), its
paired TPOT gain against the floor and the baseline's (:mod:`specperf.analysis.gain`),
then the hold rules (:data:`specperf.analysis.judge.HOLD_RULES`, in their order), which
may turn a verdict INCONCLUSIVE and record which one did (``Comparison.held_by``).

:func:`judge_case` is the one judgement of a case: the run (``compare_runs``), the
measurer's follow-up trials and ``specperf compare`` all call it.
"""

from __future__ import annotations

from collections.abc import Sequence

from specperf.analysis.bracket import bracketed
from specperf.analysis.compare import against_baseline
from specperf.analysis.gain import gain_drift, gain_vs_baseline, gain_vs_floor
from specperf.analysis.judge.evidence import Evidence
from specperf.analysis.judge.machine_reference import BesideReference
from specperf.analysis.judge.models import CaseComparison, MetricDetail
from specperf.analysis.judge.rules import HoldContext, apply_holds
from specperf.analysis.outside_load import busy_reason
from specperf.analysis.spread import KeptSpreads
from specperf.analysis.stats import Comparison
from specperf.config.rules import RELATIVE_TPOT, CompareRules
from specperf.schemas import CaseResult

__all__ = ["compare_cases", "judge_case"]


def compare_cases(base: CaseResult | None, cur: CaseResult,
                  rules: CompareRules | None = None,
                  earlier: Sequence[CaseResult] = (), *,
                  paired: CaseResult | None = None,
                  base_paired: CaseResult | None = None,
                  gain_floor: float | None = None,
                  earlier_paired: Sequence[tuple[CaseResult, CaseResult]] = (),
                  labels: tuple[str, str] = ("the baseline", "the run"),
                  spreads: KeptSpreads | None = None,
                  reference: BesideReference | None = None,
                  ) -> CaseComparison:
    """:func:`judge_case` on evidence given piece by piece (each piece as
    :class:`~specperf.analysis.judge.Evidence` names it); ``base`` None: the gain alone."""
    return judge_case(Evidence(
        current=cur, baseline=base, earlier=earlier, paired=paired, base_paired=base_paired,
        earlier_paired=earlier_paired, gain_floor=gain_floor,
        spreads=spreads or KeptSpreads(), reference=reference, labels=labels,
    ), rules or CompareRules())


def judge_case(ev: Evidence, rules: CompareRules) -> CaseComparison:
    """Every enabled metric of one case, baseline against current, and its paired TPOT
    gain (:mod:`specperf.analysis.gain`) when the run has one: against the floor, and
    against the baseline's gain when the baseline has paired trials too; then the hold
    rules (:mod:`specperf.analysis.judge.rules`), in their order.

    The baseline's kept runs (``ev.earlier``: same hardware, profile and server config)
    are pooled with it: with per-trial samples the spread of the runs' centres beyond
    their trial noise (:func:`specperf.analysis.stats.between_run_spread`), moderated by
    the baseline's other cases (``ev.spreads``), widens the interval — a server restart
    shifts every trial of a run together, which one run's trials cannot show.
    ``ev.labels`` name the two sides in the notes when a figure is not comparable because
    one side's metric generation cannot tell it.
    """
    base, cur, paired = ev.baseline, ev.current, ev.paired
    out = CaseComparison(
        case=cur.case,
        config_label=cur.config_label,
        method=cur.method,
        draft_model=cur.draft_model,
        num_speculative_tokens=cur.num_speculative_tokens,
        baseline_trials=len(base.trials) if base is not None else 0,
        current_trials=len(cur.trials),
        busy=busy_reason(cur.trials, paired.trials if paired is not None else ()),
    )

    def add(comparison: Comparison, detail: MetricDetail) -> None:
        out.comparisons.append(comparison)
        out.details[comparison.metric] = detail

    if paired is not None and ev.gain_floor is not None and rules.rule("tpot").enabled:
        comparison, kind = gain_vs_floor(cur, paired, ev.gain_floor, rules)
        how = (f"bracketed by {len(paired.trials)} no-spec trials of the run's reference blocks"
               if bracketed(paired) else f"paired with {len(paired.trials)} no-spec trials")
        add(comparison, MetricDetail(key="tpot_gain", unit="×", samples=kind,  # type: ignore[arg-type]
                                     note=f"{how} of the same run; baseline column = the floor"))
        if (ev.base_paired is not None and base is not None
                and rules.rule(RELATIVE_TPOT).enabled):
            comparison, kind = gain_vs_baseline(cur, paired, base, ev.base_paired, rules,
                                                ev.earlier_paired, ev.spreads)
            add(comparison, MetricDetail(key=RELATIVE_TPOT, unit="", samples=kind,
                                         note="spec TPOT / the same run's no-spec TPOT "
                                              "(1 / gain), against the baseline's"))
    if base is not None:
        against_baseline(out, add, base, cur, rules, ev.earlier, ev.labels, ev.spreads)
    apply_holds(out, HoldContext(
        rules=rules, current=cur, measured_baseline_runs=ev.measured_baseline_runs(rules),
        reference=ev.reference if base is not None else None,
        drift=gain_drift(cur, paired, rules) if ev.gain_floor is not None else None))
    return out

