"""After the matrix: what waits for every config's cases to be measured, and running it.

Two profile settings make the judged items wait (:attr:`AfterMatrix.applies`):

* ``[compare] confirm_after_matrix``: a flag raised while a config's server is up is only
  named by the trial plan (``PlanOutcome.deferred``); it is measured again on a fresh
  start of its server once the other configs' cases were measured, so a change of the
  host lasting minutes cannot both raise a flag and confirm it;
* ``[load] reference = "bracket"``: a spec config's gain is judged against the no-spec
  block before its server started and the one after it stopped (specperf.engine.bracket),
  so its gain waits for that block: after the matrix, the closing block runs and the
  bracketed gains are judged; a flag raised then waits with the others.

:class:`AfterMatrix` owns all of it: whether it applies, which items wait
(:meth:`~AfterMatrix.waits`: the judged kinds), which configs the matrix's own items
measure (:attr:`~AfterMatrix.matrix_configs`, so a judged item of one needs no server of
its own up), the configs waiting for it (flags, bracketed gains), and running it
(:meth:`~AfterMatrix.run`, at the first judged item) or abandoning it when the run ends
first (:meth:`~AfterMatrix.abandon`). The measurer hands it what waits
(:meth:`~AfterMatrix.wait`, :meth:`~AfterMatrix.wait_for_block`) and measures what it asks;
the session and the case selection ask it, the plugin orders the judged items after the
others by it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from specperf.analysis.judge.kinds import CaseKind
from specperf.config.profile import Profile
from specperf.engine.confirmation import Flag, flag_ids, merge_flags
from specperf.engine.measurer import MeasureError
from specperf.engine.server import ServerError
from specperf.engine.trial_plan import PlanOutcome
from specperf.schemas import Case, CaseResult

if TYPE_CHECKING:
    from specperf.engine.kinds import TestKind
    from specperf.engine.measurer import CaseMeasurer, ConfigRun
    from specperf.engine.selection import CaseSelection

__all__ = ["AfterMatrix"]


@dataclass
class _Pending:
    """A config whose flags wait for the other configs' cases: its state, the retries its
    cases had, the flags, and when they were raised (time.monotonic)."""

    run: ConfigRun
    outcome: PlanOutcome
    flagged_at: float


@dataclass
class AfterMatrix:
    #: The run's profile (read when first asked: the settings may be set after the
    #: session is built).
    profile: Callable[[], Profile]
    say: Callable[[str], None] = print
    #: Server configs with a selected item that is not judged (requests, acceptance):
    #: their cases are measured by those, in the matrix.
    matrix_configs: set[str] = field(default_factory=set)
    #: Configs whose flags are measured again after the matrix, in measurement order.
    pending: dict[str, _Pending] = field(default_factory=dict)
    #: Bracketed configs (load.reference = "bracket") whose gains are judged once the
    #: block after them ran.
    bracketed: dict[str, ConfigRun] = field(default_factory=dict)

    @property
    def applies(self) -> bool:
        """Whether the judged items (TPOT gain, latency, throughput) run after every
        config's cases, and flags are measured again only then: [compare]
        confirm_after_matrix, or reference = "bracket", whose gains need the no-spec block
        measured after their config (engine.bracket)."""
        p = self.profile()
        return p.compare.confirm_after_matrix or p.load.reference == "bracket"

    def waits(self, kind: TestKind) -> bool:
        """Whether an item of this kind runs after the matrix: it reads the case's
        comparison (a judged case kind), which flags measured again (and bracketed gains)
        change."""
        return isinstance(kind, CaseKind) and kind.judged and self.applies

    def selected(self, kind: CaseKind, case: Case) -> None:
        """A selected item: one that does not wait has its config measured in the matrix."""
        if not kind.judged:
            self.matrix_configs.add(case.config_id)

    def measured_before(self, kind: TestKind, case: Case) -> bool:
        """Whether this item runs after the matrix has measured its config: it needs no
        server of its own up (only the no-spec one a fresh start pairs with)."""
        return self.waits(kind) and case.config_id in self.matrix_configs

    # -- what the measurer hands over ------------------------------------------------

    def wait(self, run: ConfigRun, outcome: PlanOutcome) -> None:
        """A config's flags, named by its plan, wait to be measured again."""
        self.pending[run.cfg.id] = _Pending(run, outcome, time.monotonic())

    def wait_for_block(self, run: ConfigRun) -> None:
        """A bracketed config's gains wait for the block after it."""
        self.bracketed[run.cfg.id] = run

    # -- running it --------------------------------------------------------------------

    def run(self, measurer: CaseMeasurer, selection: CaseSelection) -> None:
        """Before a judged check: while a flag waits, every selected config not measured
        yet is measured now (its server stopped after, unless it is the no-spec one the
        others pair with), then every waiting flag is measured again on a fresh server. A
        config that cannot be measured is left to its own items, which say why.
        Bracketed, the matrix is measured whatever waits, then its closing no-spec block,
        and the gains are judged against their blocks (flags raised then wait too)
        before the flags are measured."""
        bracket = measurer.blocks is not None and not measurer.blocks.schedule.closed
        if not self.pending and not bracket:
            return
        nospec = self.profile().nospec if not bracket else None
        for cfg in selection.ordered_configs():
            concs = selection.wanted.get(cfg.id)
            if not concs or measurer.measured(cfg.id):
                continue
            try:
                measurer.measure(Case(config_id=cfg.id, concurrency=min(concs)))
            except (ServerError, MeasureError):
                continue
            finally:
                if nospec is None or cfg.id != nospec.id:
                    measurer.pool.stop(cfg.id)
        self._close_brackets(measurer)
        while self.pending:  # in the order the configs were measured
            self._confirm(measurer, self.pending.pop(next(iter(self.pending))))

    def abandon(self, results: dict[Case, CaseResult], *, interrupted: bool) -> None:
        """At the end of the run: flags that no judged item came to measure again keep the
        first start's measurement, and each flagged case records that it was not
        confirmed, and why."""
        why = ("the run was interrupted before the fresh start" if interrupted
               else "no selected check of the case ran after the matrix to measure it again")
        while self.pending:
            _, pending = self.pending.popitem()
            for c, flag in pending.outcome.deferred.items():
                case = Case(config_id=pending.run.cfg.id, concurrency=c)
                if case in results:
                    results[case] = results[case].model_copy(update={
                        "confirmation": flag.unconfirmed(f"not confirmed: {why}")})

    def _close_brackets(self, measurer: CaseMeasurer) -> None:
        """The closing block (if a spec config ran since the last), then every bracketed
        config's cases judged against the blocks around them; a flag raised now waits
        with the others to be measured again on a fresh server."""
        if measurer.blocks is None or measurer.blocks.schedule.closed:
            return
        measurer.blocks.close()
        for run in self.bracketed.values():
            flagged = self._judge_bracketed(measurer, run)
            if flagged:
                self._defer(run, flagged, measurer.results)

    def _judge_bracketed(self, measurer: CaseMeasurer, run: ConfigRun) -> dict[int, Flag]:
        """A bracketed config's cases judged against the blocks around them, as the
        measurer judges every case; returns the flags raised."""
        from specperf.analysis.judge.follow_up import follow_up_of_comparison

        reference = measurer.reference(run)
        flagged: dict[int, Flag] = {}
        for c in run.bracketed:
            case = Case(config_id=run.cfg.id, concurrency=c)
            result = measurer.results.get(case)
            if result is None:
                continue  # its measurement failed, and says why
            paired = measurer.paired_result(run, c)
            if paired is None:
                assert measurer.schedule is not None
                _, missing = measurer.schedule.trials_for(run.cfg.id, run.trials[c], c)
                measurer.paired_errors[case] = (f"no no-spec reference block brackets it "
                                                f"({missing or 'none measured'})")
                continue
            measurer.paired[case] = paired
            judged = measurer.comparisons[case] = measurer.judge(result, paired, reference)
            if judged is not None and self.profile().compare.confirm_on_fresh_server:
                follow = follow_up_of_comparison(judged)
                if follow.flagged:
                    flagged[c] = Flag(tuple(follow.flagged), follow.trials)
        return flagged

    def _defer(self, run: ConfigRun, flagged: dict[int, Flag],
               results: dict[Case, CaseResult]) -> None:
        """Flags raised against the blocks join the config's waiting ones (or wait anew)."""
        self.say(f"specperf: flagged as a regression ({flag_ids(run.cfg.id, flagged)}): "
                 "measured again on a fresh vLLM server between fresh no-spec blocks")
        pending = self.pending.get(run.cfg.id)
        if pending is None:
            retries = {c: r.retry for c in run.trials
                       if (r := results.get(Case(config_id=run.cfg.id, concurrency=c)))
                       is not None and r.retry is not None}
            self.wait(run, PlanOutcome(retries, deferred=flagged))
            return
        pending.outcome = replace(pending.outcome,
                                  deferred=merge_flags(pending.outcome.deferred, flagged))

    def _confirm(self, measurer: CaseMeasurer, pending: _Pending) -> None:
        """A waiting config's flags measured again on a fresh start of its server, then
        its cases judged on both starts."""
        run, flagged = pending.run, pending.outcome.deferred
        waited = time.monotonic() - pending.flagged_at
        self.say(f"specperf: flagged {waited / 60:.0f} min ago "
                 f"({flag_ids(run.cfg.id, flagged)}), the other configs' "
                 "cases measured since: measuring again on a fresh vLLM server")
        confirmations = {c: r.model_copy(update={"later_by_s": round(waited, 1)})
                         for c, r in measurer.measure_again(run, flagged).items()}
        measurer.finish(run, PlanOutcome(pending.outcome.retries, confirmations))
