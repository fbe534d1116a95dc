"""Which trials a server config's cases get, and when: the trial plan, as a generator.

The plan yields steps and is sent what they found; it does no I/O itself, so it is tested
on real comparisons without a server (tests/unit/engine/test_trial_plan.py).

1. **Base repeats**: ``repeats`` rounds, round-robin over the config's concurrencies (c1 c4
   c1 c4 …), so slow drift inside one server's lifetime lands on every case alike; the
   first round warms the server up.
2. **Retry batches** (on by default; ``--perf-retry-inconclusive=CAP|off``): while the
   server is still up, each case is judged (against the baseline, and its paired TPOT
   gain against its floor), and the ones with an INCONCLUSIVE check get
   :data:`RETRY_BATCH` more trials per round, interleaved, until decided or at the cap.
3. **Fresh-server confirmation** (``[compare] confirm_on_fresh_server``): a case with a
   REGRESSION still standing (a latency, the throughput, or the gain below its floor) is
   measured again on a fresh start of its server (:mod:`specperf.engine.confirmation`, the
   component the scenarios carry out too). With ``[compare] confirm_after_matrix`` the
   plan only names the flags (:class:`~specperf.engine.confirmation.Flag`, in
   ``PlanOutcome.deferred``); the measurer runs ``measure_flags_again`` for them after
   every config's cases, so a change of the host lasting minutes cannot both raise a flag
   and confirm it.

The steps (RunTrials, Compare, Judge, Restart, Say) and what each is answered with:
:mod:`specperf.engine.plan_steps`; the confirmation: :mod:`specperf.engine.confirmation`.

The generator returns a :class:`PlanOutcome`: the retry and confirmation records per case.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specperf.engine.confirmation import Flag, confirm_on_fresh_server, flag_ids, flags
from specperf.engine.plan_steps import (
    Compare,
    PlanFeedback,
    PlanStep,
    RunTrials,
    Say,
    TrialSpec,
)
from specperf.schemas import FreshServerConfirmation, InconclusiveRetry

if TYPE_CHECKING:
    from specperf.analysis.judge.models import CaseComparison

__all__ = ["RETRY_BATCH", "RETRY_CAP_FACTOR", "PlanOutcome", "retry_batches", "trial_plan"]

#: --perf-retry-inconclusive adds this many trials per round to an INCONCLUSIVE case. Two,
#: not one: a single extra trial rarely moves an interval over a few trials, and every round
#: costs a comparison (bootstrap) and a console line.
RETRY_BATCH = 2

#: --perf-retry-inconclusive without a cap: a case may get up to this many times the
#: profile's repeats — enough for a few rounds, bounded so one noisy case cannot hold the
#: run hostage.
RETRY_CAP_FACTOR = 3


@dataclass(frozen=True)
class PlanOutcome:
    retries: dict[int, InconclusiveRetry] = field(default_factory=dict)
    confirmations: dict[int, FreshServerConfirmation] = field(default_factory=dict)
    #: Flags whose fresh-server measurement waits for the other configs' cases
    #: (``confirm_later``).
    deferred: dict[int, Flag] = field(default_factory=dict)


def trial_plan(
    config_id: str,
    concurrencies: Sequence[int],
    repeats: int,
    *,
    retry_cap: int | None = None,
    confirm: bool = False,
    confirm_later: bool = False,
    batch: int = RETRY_BATCH,
) -> Generator[PlanStep, PlanFeedback, PlanOutcome]:
    """The plan for one server config's cases. ``retry_cap``: None without retries (or
    without a baseline to compare with); ``confirm``: the fresh-server rule is on and there
    is a baseline; ``confirm_later``: name the flags instead of measuring them again now
    (``[compare] confirm_after_matrix``)."""
    concs = tuple(concurrencies)
    yield RunTrials(tuple(TrialSpec(c, warmup=r == 0) for r in range(repeats) for c in concs))
    retries: dict[int, InconclusiveRetry] = {}
    if retry_cap is not None:
        retries = yield from retry_batches(config_id, concs, retry_cap, batch)
    if not confirm:
        return PlanOutcome(retries)
    if confirm_later:
        deferred = yield from flags(concs)
        if deferred:
            yield Say(f"specperf: flagged as a regression ({flag_ids(config_id, deferred)}): "
                      "measured again on a fresh vLLM server after the other configs' cases, "
                      "before deciding")
        return PlanOutcome(retries, deferred=deferred)
    confirmations = yield from confirm_on_fresh_server(config_id, concs)
    return PlanOutcome(retries, confirmations)


def _compare(concs: Sequence[int]) -> Generator[PlanStep, PlanFeedback, Mapping[int, CaseComparison | None]]:
    found = yield Compare(tuple(concs))
    assert isinstance(found, Mapping), f"a Compare step is answered with comparisons, not {found!r}"
    return found


def retry_batches(
    config_id: str, concs: Sequence[int], cap: int, batch: int,
) -> Generator[PlanStep, PlanFeedback, dict[int, InconclusiveRetry]]:
    """Rounds of ``batch`` more trials (less at the cap) for every case still INCONCLUSIVE;
    a case whose trial count did not grow is not given another round."""
    # Here: compare loads scipy, which only a run that compares as it goes needs.
    from specperf.analysis.judge.follow_up import inconclusive_metrics
    from specperf.analysis.stats import Verdict

    if batch < 1:
        raise ValueError(f"batch must be ≥ 1, not {batch}")
    records: dict[int, InconclusiveRetry] = {}
    first = yield from _compare(concs)
    for c in concs:
        cc = first.get(c)
        if cc is None:
            continue
        triggered = inconclusive_metrics(cc)
        if triggered:
            records[c] = InconclusiveRetry(
                initial_trials=cc.current_trials, trials=cc.current_trials, cap=cap,
                batch=batch, triggered_by=triggered,
                outcome={m: Verdict.INCONCLUSIVE.value for m in triggered})
    stalled: set[int] = set()
    while True:
        todo = {c: min(batch, cap - r.trials) for c, r in records.items()
                if r.still_inconclusive and r.trials < cap and c not in stalled}
        if not todo:
            break
        ids = ", ".join(f"{config_id}-c{c} +{n}" for c, n in todo.items())
        yield Say(f"specperf: INCONCLUSIVE against the baseline: more trials ({ids})")
        yield RunTrials(tuple(TrialSpec(c) for r in range(max(todo.values()))
                              for c, n in todo.items() if r < n))
        now = yield from _compare(list(todo))
        for c in todo:
            cc = now.get(c)
            assert cc is not None, "a case compared before compares after more trials"
            rec = records[c]
            if cc.current_trials <= rec.trials:
                stalled.add(c)  # the trials added nothing: never loop on it
            verdicts = {m.metric: m.verdict.value for m in cc.comparisons}
            records[c] = rec.model_copy(update={
                "trials": cc.current_trials,
                "rounds": rec.rounds + 1,
                "outcome": {m: verdicts.get(m, Verdict.INCONCLUSIVE.value)
                            for m in rec.triggered_by},
            })
    for c, rec in records.items():
        yield Say(f"specperf: {config_id}-c{c}: {rec.summary_line()}")
    return records
