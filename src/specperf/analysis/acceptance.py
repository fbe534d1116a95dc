"""Acceptance compared: the rate from the counters (and per draft position), with an
absolute tolerance, and which figures one side's metric generation cannot tell
(:func:`not_comparable`). Sampled at temperature > 0 the hold rule ``sampled_acceptance``
(:mod:`specperf.analysis.judge.rules`) decides them."""

from __future__ import annotations

from collections.abc import Callable

from specperf.analysis.judge.models import CaseComparison, MetricDetail
from specperf.analysis.stats import Comparison, compare_rate
from specperf.config.rules import CompareRules, MetricRule
from specperf.schemas import Acceptance, CaseResult
from specperf.schemas.scrape import Unknowable

__all__ = ["compare_acceptance", "not_comparable"]


#: What each figure needs from a metric generation (Acceptance.missing), and its name.
_FIGURE_NEEDS: tuple[tuple[str, str, Unknowable], ...] = (
    ("acceptance rate", "per-case counts of draft and accepted tokens", "counts"),
    ("per-position acceptance", "per-position counter", "per_position"),
    ("per-position acceptance", "drafts counter", "drafts"),
    ("mean acceptance length", "drafts counter", "drafts"),
)


def not_comparable(ba: Acceptance, ca: Acceptance,
                   labels: tuple[str, str] = ("the baseline", "the run")) -> dict[str, str]:
    """Figure → "not comparable: FIGURE, because SIDE has no Y" for each acceptance figure
    one side's metric generation cannot tell (Acceptance.missing); empty when both tell
    everything. A figure is named once, for the first reason that applies."""
    out: dict[str, str] = {}
    for figure, what, need in _FIGURE_NEEDS:
        if figure in out:
            continue
        sides = [(label, acc.generation) for label, acc in zip(labels, (ba, ca), strict=True)
                 if need in acc.missing]
        if sides:
            who = " and ".join(label for label, _ in sides)
            gens = "/".join(sorted({gen for _, gen in sides}))
            out[figure] = (f"not comparable: {figure}, because {who} "
                           f"{'has' if len(sides) == 1 else 'have'} no {what} ({gens} metrics)")
    return out


def compare_acceptance(base: CaseResult, cur: CaseResult, rule: MetricRule,
                        rules: CompareRules, out: CaseComparison,
                        add: Callable[[Comparison, MetricDetail], None],
                        labels: tuple[str, str] = ("the baseline", "the run")) -> None:
    ba, ca = base.acceptance, cur.acceptance
    if ba is None and ca is None:
        return
    if ba is None or ca is None:
        which = "current run" if ba is None else "baseline"
        out.notes.append(f"acceptance was measured only in the {which}; not compared")
        return
    unknown = not_comparable(ba, ca, labels)
    out.notes.extend(unknown.values())
    if "acceptance rate" in unknown:
        return
    if ba.rate is None or ca.rate is None:
        which = "baseline" if ba.rate is None else "current run"
        out.notes.append(f"no draft tokens were proposed in the {which}; acceptance not compared")
        return

    def detail(note: str | None = None) -> MetricDetail:
        return MetricDetail(key="acceptance_rate", unit=rule.unit, samples="counters", note=note)

    def rate(metric: str, b: float, c: float) -> Comparison:
        # Sampled at temperature > 0 the hold rule sampled_acceptance decides it (judge).
        return compare_rate(metric, b, c, tolerance=rule.min_effect, direction=rule.direction)

    add(rate(rule.name, ba.rate, ca.rate),
        detail(f"{ba.accepted_tokens:g}/{ba.draft_tokens:g} → "
               f"{ca.accepted_tokens:g}/{ca.draft_tokens:g} draft tokens accepted"))
    if not rules.per_position or "per-position acceptance" in unknown:
        return
    bp, cp = ba.per_position_rate, ca.per_position_rate
    for i, (b, c) in enumerate(zip(bp, cp, strict=False)):
        add(rate(f"{rule.name}[pos {i}]", b, c), detail())
    if len(bp) != len(cp):
        out.notes.append(f"the baseline has acceptance counters for {len(bp)} draft positions, "
                         f"the run for {len(cp)}; compared the first {min(len(bp), len(cp))}")
