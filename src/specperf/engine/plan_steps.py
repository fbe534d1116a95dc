"""The steps a measuring plan yields, what each is answered with, and the loop that
answers them (:func:`carry_out`).

Two plans speak them: a server config's trial plan (:mod:`specperf.engine.trial_plan`:
base repeats, retry batches, then confirmation) and the fresh-server confirmation alone
(:mod:`specperf.engine.confirmation`), which the matrix's measurer and the scenario runner
both carry out. The plans do no I/O; whoever carries one out answers each step with its
own servers and judgement.

=================  ==============================================================
:class:`RunTrials`  run these trials, in order → ``None``
:class:`Compare`    compare these cases, as measured so far, with the baseline →
                    ``{concurrency: CaseComparison | None}`` (retry batches)
:class:`Judge`      judge these cases as measured so far →
                    ``{concurrency: FollowUp | None}`` (confirmation)
:class:`Restart`    mark these cases' trials as the first start's, start the
                    server again → ``None``, or the cause when it did not start
:class:`Say`        show this line → ``None``
=================  ==============================================================
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, TypeVar

if TYPE_CHECKING:
    from specperf.analysis.judge.follow_up import FollowUp
    from specperf.analysis.judge.models import CaseComparison

__all__ = ["Compare", "Judge", "PlanFeedback", "PlanStep", "Restart", "RunTrials", "Say",
           "TrialSpec", "carry_out"]

Outcome = TypeVar("Outcome")


@dataclass(frozen=True)
class TrialSpec:
    """One trial of the config's case at ``concurrency`` (with its paired no-spec trial,
    if it has one); ``warmup``: send the warm-up requests first."""

    concurrency: int
    warmup: bool = False


@dataclass(frozen=True)
class RunTrials:
    trials: tuple[TrialSpec, ...]


@dataclass(frozen=True)
class Compare:
    concurrencies: tuple[int, ...]


@dataclass(frozen=True)
class Judge:
    concurrencies: tuple[int, ...]


@dataclass(frozen=True)
class Restart:
    concurrencies: tuple[int, ...]


@dataclass(frozen=True)
class Say:
    line: str


PlanStep: TypeAlias = "RunTrials | Compare | Judge | Restart | Say"
#: What a step found: comparisons for Compare, follow-ups for Judge, a failure cause for
#: Restart, else None.
PlanFeedback: TypeAlias = ("Mapping[int, CaseComparison | None] | Mapping[int, FollowUp | None]"
                           " | str | None")


def carry_out(
    plan: Generator[PlanStep, PlanFeedback, Outcome], *,
    run_trials: Callable[[tuple[TrialSpec, ...]], None],
    judge: Callable[[tuple[int, ...]], Mapping[int, FollowUp | None]],
    restart: Callable[[tuple[int, ...]], str | None],
    say: Callable[[str], None],
    compare: Callable[[tuple[int, ...]], Mapping[int, CaseComparison | None]] | None = None,
) -> Outcome:
    """Answer the plan's steps until it returns, and return what it returned. ``compare``:
    None for a caller whose plans never ask for comparisons (the scenarios' confirmation);
    a plan that asks anyway is a bug, said as such."""
    feedback: PlanFeedback = None
    while True:
        try:
            step = plan.send(feedback)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        feedback = None
        if isinstance(step, RunTrials):
            run_trials(step.trials)
        elif isinstance(step, Judge):
            feedback = judge(step.concurrencies)
        elif isinstance(step, Compare):
            if compare is None:
                raise TypeError(f"this plan's caller answers no Compare step ({step!r})")
            feedback = compare(step.concurrencies)
        elif isinstance(step, Restart):
            feedback = restart(step.concurrencies)
        elif isinstance(step, Say):
            say(step.line)
        else:  # pragma: no cover - a new step kind without its handler
            raise TypeError(f"unknown plan step {step!r}")
