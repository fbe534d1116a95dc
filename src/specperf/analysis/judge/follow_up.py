"""What a case's judgement so far asks of the run: the metrics more trials of this run can
decide (:func:`inconclusive_metrics`, the trial plan's retries), and those a fresh server
start can confirm or clear (:class:`FollowUp`, the fresh-server confirmation of
:mod:`specperf.engine.confirmation`, which the matrix's measurer and the scenarios share).

One rule decides what a fresh start can change, for comparisons against a baseline and for
a scenario's gate checks alike: a REGRESSION (a FAIL) measured from trials or requests
(:data:`RE_MEASURABLE`). The check or comparison says what its samples were; nothing here
reads a metric's display name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specperf.analysis.judge.models import CaseComparison
from specperf.analysis.stats import Verdict
from specperf.schemas import GateCheck
from specperf.schemas.gate import SampleKind

__all__ = ["RE_MEASURABLE", "FollowUp", "flagged_metrics", "follow_up_of_checks",
           "follow_up_of_comparison", "inconclusive_metrics"]

#: The samples another server start measures anew. Acceptance counters repeat exactly at
#: temperature 0, and a baseline's summary figures are not this run's: another start would
#: change neither.
RE_MEASURABLE: frozenset[SampleKind] = frozenset({"trials", "requests", "trial_means"})

#: A gate check's outcome as the verdict a confirmation records (FreshServerConfirmation
#: .outcome speaks verdicts, as the matrix's comparisons do).
_VERDICT_OF_OUTCOME = {"fail": Verdict.REGRESSION.value, "pass": Verdict.UNCHANGED.value}


@dataclass(frozen=True)
class FollowUp:
    """A case as judged so far, as the fresh-server confirmation reads it: the metrics a
    fresh start can confirm or clear (``flagged``), every metric's verdict, and how many
    trials the case has."""

    flagged: tuple[str, ...]
    trials: int
    verdicts: Mapping[str, str] = field(default_factory=dict)


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
    """The metrics of a case a fresh server start can confirm or clear: a REGRESSION on
    :data:`RE_MEASURABLE` samples (trials or requests, the TPOT gain)."""
    if cc.busy:
        # Not measured on a busy machine either way: a fresh start would not change that.
        return []
    return [m.metric for m in cc.comparisons
            if m.verdict is Verdict.REGRESSION
            and (d := cc.detail(m)) is not None and d.samples in RE_MEASURABLE]


def follow_up_of_comparison(cc: CaseComparison) -> FollowUp:
    """A case compared with its baseline (the matrix)."""
    return FollowUp(tuple(flagged_metrics(cc)), cc.current_trials,
                    {m.metric: m.verdict.value for m in cc.comparisons})


def follow_up_of_checks(checks: Sequence[GateCheck], trials: int) -> FollowUp:
    """A case's gate checks (a scenario's: its TPOT gain against the floor, its hit rate,
    its acceptance per segment) and its trial count: a FAIL on :data:`RE_MEASURABLE`
    samples is flagged; a check that does not say what its samples were never is (a start
    is a minute of the machine, spent only where it can change the verdict)."""
    return FollowUp(
        tuple(ch.metric for ch in checks if ch.outcome == "fail" and ch.samples in RE_MEASURABLE),
        trials, {ch.metric: _VERDICT_OF_OUTCOME.get(ch.outcome, ch.outcome) for ch in checks})
