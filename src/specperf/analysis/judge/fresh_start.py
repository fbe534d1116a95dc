"""The fresh server start, one room: what a case measured on several server starts says
(:func:`replicated`, each start compared alone with the baseline), and the two hold rules
it gives (:data:`specperf.analysis.judge.rules.HOLD_RULES`):

* ``fresh_start_disagreed`` — the starts were measured and do not all show the REGRESSION
  (:func:`fresh_start_disagreed`);
* ``not_confirmed`` — flagged on the first start, the fresh start never came
  (:func:`not_confirmed`).

Why a fresh start at all: one start's own offset (measured: docs/validation.md) cannot be
told from a change of vLLM by one start; a real change shows on every start. What it
measures is the engine's (specperf.engine.confirmation); what it decides is here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from specperf.analysis.judge.outcome import TIMING_METRIC_KEYS
from specperf.analysis.stats import Comparison, Verdict

if TYPE_CHECKING:
    from specperf.analysis.judge.models import MetricDetail
    from specperf.analysis.judge.rules import HoldContext

__all__ = ["fresh_start_disagreed", "not_confirmed", "replicated", "starts_disagree"]


def starts_disagree(verdict: Verdict, starts: Sequence[Verdict]) -> bool:
    """The starts were measured (more than one) and do not all show a REGRESSION that the
    pooled samples (``verdict``) or one of them shows: the one condition of
    ``fresh_start_disagreed``, which the account below words."""
    regression = Verdict.REGRESSION
    return (len(starts) > 1 and not all(v is regression for v in starts)
            and (verdict is regression or regression in starts))


def replicated(pooled: Comparison, starts: Sequence[Comparison]) -> Comparison:
    """The comparison of a case measured on several server starts (a fresh-server
    confirmation): the pooled samples' ratio and interval, a REGRESSION when every start,
    compared alone with the baseline, shows one, else the pooled verdict; each start's
    verdict is recorded (``Comparison.starts``) and told in the reason, where
    :func:`fresh_start_disagreed` (applied with the other hold rules) finds it."""
    verdicts = tuple(s.verdict for s in starts)
    each = ", ".join(f"start {i + 1} {s.verdict.value} ({s.ratio:.3f})"
                     for i, s in enumerate(starts))
    verdict = pooled.verdict
    if verdicts and all(v is Verdict.REGRESSION for v in verdicts):
        verdict, why = Verdict.REGRESSION, f"confirmed on {len(starts)} server starts: {each}"
    elif starts_disagree(pooled.verdict, verdicts):
        # The hold's words, said here where the starts are told: the reason reads in the
        # order the comparison was made (the request samples' caveat comes after).
        why = f"not confirmed on a fresh server: {each}"
    else:
        why = f"server starts: {each}"
    return pooled.model_copy(update={"verdict": verdict, "starts": verdicts,
                                     "reason": pooled.reason.rstrip(".") + f"; {why}."})


def fresh_start_disagreed(m: Comparison, detail: MetricDetail, ctx: HoldContext) -> str | None:
    # The starts disagree about a REGRESSION (the pooled samples or one start regress,
    # not every start does): it may be one start's own offset. Its words are already in
    # the reason (replicated's account of the starts): nothing to append.
    return "" if starts_disagree(m.verdict, m.starts) else None


def not_confirmed(m: Comparison, detail: MetricDetail, ctx: HoldContext) -> str | None:
    # Flagged on the first server start, but the fresh start was never measured (the
    # server did not start again, the run was interrupted, nothing after the matrix came
    # to measure it): ruling out one start's own offset is what the fresh start is for.
    confirmation = ctx.current.confirmation
    if (confirmation is None or confirmation.note is None
            or m.verdict is not Verdict.REGRESSION or detail.key not in TIMING_METRIC_KEYS):
        return None
    return f"; flagged on the first server start, {confirmation.note.rstrip('.')}."
