"""Fresh-server confirmation ([compare] confirm_on_fresh_server), as a plan: the one
component the matrix's measurer (at once, or after every config's cases under [compare]
confirm_after_matrix) and the scenario runner both carry out (plan_steps.carry_out).

A case flagged as a regression — a FAIL a fresh start can change, by the one rule of
:mod:`specperf.analysis.judge.follow_up` — is measured again, as many trials as it had, on
a fresh start of its server, and judged on both starts together: it stands only if that
start shows it too (analysis.judge.fresh_start). One start cannot tell its own offset from a change
of vLLM (measured: docs/validation.md). It costs a server start only when something is
flagged.

The plan asks :class:`~specperf.engine.plan_steps.Judge` for each case's
:class:`~specperf.analysis.judge.follow_up.FollowUp`: the measurer answers with its
comparison with the baseline, a scenario with its gate checks; the plan reads the flags,
verdicts and trial counts only, so neither side's metric names matter here.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specperf.engine.plan_steps import (
    Judge,
    PlanFeedback,
    PlanStep,
    Restart,
    RunTrials,
    Say,
    TrialSpec,
)
from specperf.schemas import FreshServerConfirmation

if TYPE_CHECKING:
    from specperf.analysis.judge.follow_up import FollowUp

__all__ = ["Flag", "confirm_on_fresh_server", "flag_ids", "flags", "measure_flags_again",
           "merge_flags"]


@dataclass(frozen=True)
class Flag:
    """A case flagged as a regression (against the baseline, or the TPOT gain against its
    floor): the metrics a fresh server start can confirm or clear, and how many trials the
    first start measured (the fresh one measures as many)."""

    metrics: tuple[str, ...]
    trials: int

    def unconfirmed(self, note: str) -> FreshServerConfirmation:
        """The record of a flag its fresh start could not measure: the first start's
        measurement stands, and ``note`` says why."""
        return FreshServerConfirmation(triggered_by=list(self.metrics), first_trials=self.trials,
                                       trials=self.trials, note=note)


def flag_ids(config_id: str, flagged: Mapping[int, Flag]) -> str:
    """'draft-k2-c1 TPOT, E2E; draft-k2-c4 TPOT': the flags, as the console names them."""
    return "; ".join(f"{config_id}-c{c} {', '.join(f.metrics)}" for c, f in flagged.items())


def merge_flags(waiting: Mapping[int, Flag], raised: Mapping[int, Flag]) -> dict[int, Flag]:
    """Flags raised later (a bracketed gain, once its blocks ran) joined to the ones
    already waiting: one flag per case, every metric once, the most trials."""
    out = dict(waiting)
    for c, f in raised.items():
        old = out.get(c)
        out[c] = f if old is None else Flag(tuple(dict.fromkeys((*old.metrics, *f.metrics))),
                                            max(old.trials, f.trials))
    return out


def _judge(concs: Sequence[int]) -> Generator[PlanStep, PlanFeedback, Mapping[int, FollowUp | None]]:
    found = yield Judge(tuple(concs))
    assert isinstance(found, Mapping), f"a Judge step is answered with follow-ups, not {found!r}"
    return found  # type: ignore[return-value]


def flags(concs: Sequence[int]) -> Generator[PlanStep, PlanFeedback, dict[int, Flag]]:
    """The cases flagged as a regression as measured so far, by concurrency."""
    found = yield from _judge(concs)
    return {c: Flag(f.flagged, f.trials) for c in concs
            if (f := found.get(c)) is not None and f.flagged}


def confirm_on_fresh_server(
    config_id: str, concs: Sequence[int],
) -> Generator[PlanStep, PlanFeedback, dict[int, FreshServerConfirmation]]:
    """Measure the flagged cases again on a fresh server and judge them on both starts;
    nothing flagged, nothing done."""
    flagged = yield from flags(concs)
    if not flagged:
        return {}
    yield Say(f"specperf: flagged as a regression ({flag_ids(config_id, flagged)}): "
              "measuring again on a fresh vLLM server before deciding")
    return (yield from measure_flags_again(config_id, flagged))


def measure_flags_again(
    config_id: str, flagged: Mapping[int, Flag],
) -> Generator[PlanStep, PlanFeedback, dict[int, FreshServerConfirmation]]:
    """Start the config's server again, measure each flagged case for as many trials as
    its first start had, and judge it on both starts."""
    again = tuple(sorted(flagged))
    failed = yield Restart(again)
    if failed is not None:
        # The first start's measurement stands; the case says it is unconfirmed.
        note = f"not confirmed: the fresh server did not start ({failed})"
        yield Say(f"specperf: {config_id}: {note}")
        return {c: f.unconfirmed(note) for c, f in flagged.items()}
    most = max(f.trials for f in flagged.values())
    yield RunTrials(tuple(TrialSpec(c, warmup=r == 0) for r in range(most)
                          for c in again if r < flagged[c].trials))
    now = yield from _judge(again)
    out = {}
    for c, f in flagged.items():
        judged = now.get(c)
        verdicts = judged.verdicts if judged is not None else {}
        out[c] = FreshServerConfirmation(
            triggered_by=list(f.metrics), first_trials=f.trials,
            trials=judged.trials if judged is not None else f.trials,
            outcome={m: verdicts.get(m, "inconclusive") for m in f.metrics})
        yield Say(f"specperf: {config_id}-c{c}: {out[c].summary_line()}")
    return out
