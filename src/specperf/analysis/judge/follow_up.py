"""What a case's comparison asks of the run's trial plan (:mod:`specperf.engine.trial_plan`):
the metrics more trials of this run can decide, and those a fresh server start can confirm
or clear."""

from __future__ import annotations

from specperf.analysis.judge.models import CaseComparison
from specperf.analysis.stats import Verdict

__all__ = ["flagged_metrics", "inconclusive_metrics"]


def inconclusive_metrics(cc: CaseComparison) -> list[str]:
    """The metrics of a case that more trials of this run can decide: INCONCLUSIVE on
    samples. A latency judged against a baseline's summary figures alone (no samples
    there, e.g. a provisional baseline) is left out: its band between the minimum effect
    and the budget does not narrow with trials on this side."""
    out: list[str] = []
    if cc.busy:
        # Its contended trials stay in the case: more would not make its timings count.
        return out
    for m in cc.comparisons:
        detail = cc.detail(m)
        if m.verdict is Verdict.INCONCLUSIVE and (detail is None or detail.samples
                                                  not in ("summary", "counters")):
            out.append(m.metric)
    return out


def flagged_metrics(cc: CaseComparison) -> list[str]:
    """The metrics of a case a fresh server start can confirm or clear: a REGRESSION
    measured in this run (trials or requests, the TPOT gain). Acceptance (counters,
    exactly repeatable) and comparisons against a baseline's summary figures are left out:
    another server start would not change them."""
    if cc.busy:
        # Not measured on a busy machine either way: a fresh start would not change that.
        return []
    return [m.metric for m in cc.comparisons
            if m.verdict is Verdict.REGRESSION
            and (d := cc.detail(m)) is not None and d.samples not in ("counters", "summary")]
