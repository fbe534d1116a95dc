"""Measuring a server config's cases: carries out the trial plan (specperf.engine.trial_plan)
on the config's server, with the paired no-spec trials of a TPOT-gain gate, and keeps the
measured cases (memoised: a case's acceptance, latency and throughput tests share one
measurement).

Confirming later ([compare] confirm_after_matrix): the plan only names a config's flags;
the config's state waits with :class:`~specperf.engine.after_matrix.AfterMatrix`, which
has them measured again (:meth:`CaseMeasurer.measure_again`) once every config's cases
were measured.

Pairing: a spec config with a selected TPOT-gain gate also runs a trial on the (still
running) no-spec server just before each of its own trials at that concurrency, so the
paired comparison sees the same drift on both sides, and the pairs are the samples of
the gain. Under load.pairing = "requests" the two trials at concurrency 1 are one:
their requests alternate server by server (TrialRunner.interleaved_trials), so both
sides see the same seconds of the machine.

Bracketing (load.reference = "bracket"): never two servers up (the pool stops every other
server before it starts one). A spec config's no-spec reference is then measured in
blocks on the no-spec server alone, before the config's server starts and after it
stops (:class:`~specperf.engine.bracket.ReferenceBlocks` measures them when due); its
gain is judged only once the block after it ran (after the matrix:
specperf.engine.after_matrix), and a flag raised then is measured again on a fresh server
between fresh blocks of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from specperf.analysis import outside_load
from specperf.analysis.aggregate import case_result
from specperf.analysis.attribution import pinned_rates
from specperf.config.profile import Profile
from specperf.config.server_configs import ServerConfig
from specperf.engine.baseline_context import BaselineContext
from specperf.engine.bracket import BracketSchedule, ReferenceBlocks
from specperf.engine.clock import RESTARTS, RunClock
from specperf.engine.confirmation import Flag, measure_flags_again
from specperf.engine.observer import RunObserver
from specperf.engine.plan_steps import PlanFeedback, PlanStep, TrialSpec, carry_out
from specperf.engine.server import LOG_TAIL_LINES, ServerError, VllmServer, one_line
from specperf.engine.servers import ServerPool
from specperf.engine.trial_plan import PlanOutcome, trial_plan
from specperf.engine.trials import TrialRunner
from specperf.schemas import Case, CaseResult, FreshServerConfirmation, Trial

if TYPE_CHECKING:
    from collections.abc import Generator

    from specperf.analysis.judge.follow_up import FollowUp
    from specperf.analysis.judge.machine_reference import BesideReference
    from specperf.analysis.judge.models import CaseComparison
    from specperf.engine.after_matrix import AfterMatrix

__all__ = ["CaseMeasurer", "ConfigRun", "MeasureError"]

Outcome = TypeVar("Outcome")

#: Log lines shown after a case's failed requests (the server is still up; its last
#: lines are usually the failed requests' own).
ERROR_TAIL_LINES = 20
#: How long a server whose case failed gets to be seen dead if it is dying (a failure to
#: measure is often the first sign of a server killed meanwhile).
DEATH_GRACE_S = 3.0


class MeasureError(RuntimeError):
    """A case could not be measured (or its paired no-spec side); the message says why."""


@dataclass
class ConfigRun:
    """The state of measuring one server config: its server, its trials so far."""

    cfg: ServerConfig
    server: VllmServer
    trials: dict[int, list[Trial]]
    paired: dict[int, list[Trial]]
    nospec: VllmServer | None
    #: The vLLM version of the first start: the cases' (a fresh start runs the same).
    version: str | None
    #: Which start of the server trials go to; None: the only one so far.
    start: int | None = None
    current: Case | None = None
    #: The pinned-acceptance twin's server and its trials, one after each of the
    #: config's own (None: the config has no twin this run).
    twin: VllmServer | None = None
    twin_trials: dict[int, list[Trial]] = field(default_factory=dict)
    #: Concurrencies whose gain is judged against the no-spec blocks around the config
    #: (load.reference = "bracket"; ``paired`` is then empty).
    bracketed: list[int] = field(default_factory=list)


def _per_trial(run: ConfigRun, c: int) -> int:
    """Trials run per trial of the case: its own, a paired no-spec one, a twin's."""
    return 1 + (c in run.paired) + (c in run.twin_trials)


@dataclass
class CaseMeasurer:
    profile: Profile
    pool: ServerPool
    runner: TrialRunner
    observer: RunObserver
    #: The baseline as loaded so far (the session replaces it when it loads one).
    baselines: Callable[[], BaselineContext]
    repeats: int
    #: Most trials per case under --perf-retry-inconclusive; None when it is off.
    retry_cap: int | None = None
    say: Callable[[str], None] = print
    #: Concurrencies selected per server config (set after collection).
    wanted: dict[str, set[int]] = field(default_factory=dict)
    #: Cases whose TPOT-gain test was selected (set after collection).
    tpot_gain_wanted: set[Case] = field(default_factory=set)
    results: dict[Case, CaseResult] = field(default_factory=dict)
    #: No-spec trials interleaved with a spec case's own, for its paired TPOT gain.
    paired: dict[Case, CaseResult] = field(default_factory=dict)
    paired_errors: dict[Case, str] = field(default_factory=dict)
    measure_errors: dict[Case, str] = field(default_factory=dict)
    #: Where the run's time goes: a confirmation's restart is charged here.
    clock: RunClock = field(default_factory=RunClock)
    #: What waits for every config's cases (flags, bracketed gains), set by the session;
    #: None: nothing waits (the flags are measured again at once).
    after_matrix: AfterMatrix | None = None
    #: Each measured case judged: against the baseline and its paired TPOT gain (None:
    #: nothing to judge against).
    comparisons: dict[Case, CaseComparison | None] = field(default_factory=dict)
    #: Spec configs measured with a pinned-acceptance twin (set by the session: the
    #: profile's pinned_acceptance configs, every eligible one under --perf-attribute).
    attribute: set[str] = field(default_factory=set)
    #: The twins' measurements per spec case, the rates each config's twin was pinned to,
    #: and why a config that should have had a twin has none.
    pinned: dict[Case, CaseResult] = field(default_factory=dict)
    pinned_rates: dict[str, list[float]] = field(default_factory=dict)
    pinned_errors: dict[str, str] = field(default_factory=dict)
    #: load.reference = "bracket": when the no-spec blocks run (None: beside).
    schedule: BracketSchedule | None = None
    blocks: ReferenceBlocks | None = None

    def __post_init__(self) -> None:
        # getattr: a measurer built for one of its parts alone has no profile to read.
        load = getattr(self.profile, "load", None)
        if load is not None and load.reference == "bracket":
            self.schedule = BracketSchedule(self.profile.load.bracket_every)
            self.blocks = ReferenceBlocks(
                self.profile, self.pool, self.schedule, self.repeats,
                lambda: sorted({c.concurrency for c in self.tpot_gain_wanted}),
                lambda: self.runner, self.say)

    def paired_concurrencies(self, cfg: ServerConfig, concurrencies: list[int]) -> list[int]:
        """Concurrencies at which this spec config runs paired no-spec trials: where a
        TPOT-gain item was selected (no other test needs the no-spec server up)."""
        g = self.profile.gates_for(cfg).tpot_gain
        if not cfg.is_spec or g is None or self.profile.nospec is None:
            return []
        return [c for c in concurrencies if c <= g.max_concurrency
                and Case(config_id=cfg.id, concurrency=c) in self.tpot_gain_wanted]

    def measure(self, case: Case) -> CaseResult:
        """Measure every wanted case of this case's server config, by the trial plan;
        raises ServerError when its server does not start, MeasureError when measuring
        failed (for every case of the config)."""
        if case in self.results:
            return self.results[case]
        if case in self.measure_errors:
            raise MeasureError(self.measure_errors[case])
        run = self._begin(case)
        try:
            outcome = self.carry_out(run, self._plan(run))
        except Exception as exc:  # noqa: BLE001 - reported as the cases' failure
            if run.twin is not None:
                self.pool.stop(run.twin.config_id)
            raise self._failed(run, exc) from exc
        self.finish(run, outcome)
        if run.bracketed and self.schedule is not None:
            self.schedule.spec_done()
        if run.twin is not None:
            self.pool.stop(run.twin.config_id)
        if outcome.deferred:
            assert self.after_matrix is not None, "only a plan that confirms later defers"
            self.after_matrix.wait(run, outcome)
        return self.results[case]

    def measured(self, config_id: str) -> bool:
        """Whether this config's cases were measured, or failed to be."""
        return any(c.config_id == config_id for c in (*self.results, *self.measure_errors))

    def measure_again(self, run: ConfigRun,
                      flagged: dict[int, Flag]) -> dict[int, FreshServerConfirmation]:
        """A config's waiting flags measured again on a fresh start of its server (then
        stopped, unless it is the no-spec one); a fresh start that fails leaves the first
        start's trials as they were and its flags unconfirmed."""
        run.twin = None  # the attribution is the first start's; its twin is stopped
        nospec = self.profile.nospec
        if run.paired and nospec is not None:
            try:
                # The same no-spec server as the first start's pairs when it is still up.
                run.nospec = self.pool.server_for(nospec.id)
            except ServerError as exc:
                for c in run.paired:
                    self.paired_errors[Case(config_id=run.cfg.id, concurrency=c)] = str(exc)
                run.paired = {}
                run.nospec = None
        # Copies: a failed fresh start must leave the first start's trials as they were.
        before = ({c: list(t) for c, t in run.trials.items()},
                  {c: list(t) for c, t in run.paired.items()}, run.start)
        try:
            return self.carry_out(run, measure_flags_again(run.cfg.id, flagged))
        except Exception as exc:  # noqa: BLE001 - the first start's measurement stands
            run.trials, run.paired, run.start = before
            note = (f"not confirmed: measuring on the fresh server failed: "
                    f"{type(exc).__name__}: {one_line(str(exc))}")
            self.say(f"specperf: {run.cfg.id}: {note}")
            return {c: f.unconfirmed(note) for c, f in flagged.items()}
        finally:
            if nospec is None or run.cfg.id != nospec.id:
                self.pool.stop(run.cfg.id)

    def _begin(self, case: Case) -> ConfigRun:
        cfg = self.profile.config(case.config_id)
        concs = sorted(self.wanted.get(cfg.id, set()) | {case.concurrency})
        paired = self.paired_concurrencies(cfg, concs)
        bracketed: list[int] = []
        if self.blocks is not None and paired:
            bracketed, paired = paired, []
            self.blocks.before_spec_config()
        server = self.pool.server_for(case.config_id)
        nospec: VllmServer | None = None
        if paired and self.profile.nospec is not None:
            try:
                nospec = self.pool.server_for(self.profile.nospec.id)
            except ServerError as exc:
                for c in paired:
                    self.paired_errors[Case(config_id=cfg.id, concurrency=c)] = str(exc)
                paired = []
        run = ConfigRun(cfg, server, {c: [] for c in concs}, {c: [] for c in paired},
                         nospec, server.version, current=case, bracketed=bracketed)
        if bracketed and self.schedule is not None:
            self.schedule.spec_started(cfg.id, 0)
            assert self.after_matrix is not None, "a bracketed gain waits for the matrix"
            self.after_matrix.wait_for_block(run)
        if cfg.id in self.attribute:
            run.twin = self._start_twin(cfg, concs)
            run.twin_trials = {c: [] for c in concs} if run.twin is not None else {}
        for c in concs:
            self.observer.case_started(Case(config_id=cfg.id, concurrency=c),
                                       self.repeats * _per_trial(run, c),
                                       self.profile.load.requests_at(c))
        return run

    def _start_twin(self, cfg: ServerConfig, concs: list[int]) -> VllmServer | None:
        """The config's pinned-acceptance twin, started with the baseline's per-position
        rates; None (and why, in pinned_errors and said) when there are none or it does
        not start. Its failure costs the attribution only, never the config's cases."""
        ctx = self.baselines()
        k = cfg.num_speculative_tokens
        base = [b for c in concs if (b := ctx.case(Case(config_id=cfg.id, concurrency=c)))]
        rates = pinned_rates(base, k) if k is not None else None
        if rates is None:
            why = ("no comparable baseline case with per-position acceptance to pin to "
                   "(record a baseline first: --perf-update-baselines)")
        else:
            twin_id = self.pool.pin(cfg.id, rates)
            self.say(f"specperf: {cfg.id}: pinned-acceptance twin {twin_id}: vLLM's synthetic "
                     f"rejection sampler at the baseline's per-position rates {rates}")
            try:
                server = self.pool.server_for(twin_id)
            except ServerError as exc:
                why = f"its server did not start: {exc.cause}"
            else:
                self.pinned_rates[cfg.id] = rates
                return server
        self.pinned_errors[cfg.id] = why
        self.say(f"specperf: {cfg.id}: no acceptance/step-cost attribution: {why}")
        return None

    def _plan(self, run: ConfigRun) -> Generator[PlanStep, PlanFeedback, PlanOutcome]:
        # Something to judge while the server is up: a baseline, or a paired TPOT gain.
        judged = self.baselines().baseline is not None or bool(run.paired)
        rules = self.profile.compare
        return trial_plan(
            run.cfg.id, list(run.trials), self.repeats,
            retry_cap=self.retry_cap if judged else None,
            confirm=judged and rules.confirm_on_fresh_server,
            confirm_later=self.after_matrix is not None and self.after_matrix.applies,
        )

    def carry_out(self, run: ConfigRun,
                   plan: Generator[PlanStep, PlanFeedback, Outcome]) -> Outcome:
        def run_trials(specs: tuple[TrialSpec, ...]) -> None:
            for spec in specs:
                self._one_trial(run, spec.concurrency, spec.warmup)

        def compare(concs: tuple[int, ...]) -> dict[int, CaseComparison | None]:
            reference = self.reference(run)  # one per config: its cases share it
            return {c: self._compare_now(run, c, reference) for c in concs}

        def judge(concs: tuple[int, ...]) -> dict[int, FollowUp | None]:
            # Here: compare loads scipy, which only a run that compares as it goes needs.
            from specperf.analysis.judge.follow_up import follow_up_of_comparison

            if self.blocks is not None and run.bracketed and run.start is not None:
                # A fresh start's gain needs fresh no-spec trials after it too.
                self.blocks.after_fresh_start(run.cfg.id, run.start)

            return {c: None if cc is None else follow_up_of_comparison(cc)
                    for c, cc in compare(concs).items()}

        return carry_out(plan, run_trials=run_trials, compare=compare, judge=judge,
                         restart=lambda concs: self._restart(run, concs), say=self.say)

    def _one_trial(self, run: ConfigRun, c: int, warmup: bool) -> None:
        current = run.current = Case(config_id=run.cfg.id, concurrency=c)
        index = len(run.trials[c])
        if index >= self.repeats:  # an extra trial (retry or confirmation)
            self.observer.case_more_trials(current, _per_trial(run, c))
        trial: Trial | None = None
        if c in run.paired and run.nospec is not None:
            try:
                if self.profile.load.interleaves(c):
                    trial, nospec = self.runner.interleaved_trials(run.server, run.nospec,
                                                                   index, warmup=warmup)
                else:
                    nospec = self.runner.trial(run.nospec, c, index, warmup=warmup,
                                               case=current, paired=True)
                run.paired[c].append(nospec)
            except Exception as exc:  # noqa: BLE001 - fails only the pairing
                # Interleaved, either server may have failed: the case's own trial then
                # runs alone, and fails the case if its server was the one.
                self.paired_errors[current] = f"{type(exc).__name__}: {exc}"
                run.paired.pop(c)
        if trial is None:
            trial = self.runner.trial(run.server, c, index, warmup=warmup)
        if run.start is not None:
            trial = trial.model_copy(update={"server_start": run.start})
        run.trials[c].append(trial)
        if run.twin is not None and c in run.twin_trials:
            # Right after the config's own trial, so drift lands on both alike.
            try:
                run.twin_trials[c].append(self.runner.trial(
                    run.twin, c, len(run.twin_trials[c]), warmup=not run.twin_trials[c],
                    case=current))
            except Exception as exc:  # noqa: BLE001 - fails only the attribution
                self.pinned_errors[run.cfg.id] = f"{type(exc).__name__}: {exc}"
                self.say(f"specperf: {current.id}: pinned-acceptance trial failed, no "
                         f"attribution: {exc}")
                run.twin_trials.pop(c)

    def _restart(self, run: ConfigRun, concurrencies: tuple[int, ...]) -> str | None:
        """The trials so far of these cases become the first start's; the server starts
        again. Returns why the fresh server did not start, if it did not."""
        for c in concurrencies:
            run.trials[c] = [t.model_copy(update={"server_start": 0}) for t in run.trials[c]]
        if self.blocks is not None and run.bracketed:
            self.blocks.before_fresh_start(run.cfg.id)
        try:
            # The stop and the start are the restart's (whole), not a shutdown and a start.
            with self.clock.phase(RESTARTS, whole=True):
                run.server = self.pool.restart(run.cfg.id)
        except ServerError as exc:
            return exc.cause
        run.start = 1
        if self.schedule is not None and run.bracketed:
            self.schedule.spec_started(run.cfg.id, 1)
        return None

    def gain_floor(self, case: Case) -> float | None:
        """The floor of a case's paired TPOT gain; None when it has no TPOT-gain gate."""
        g = self.profile.gates_for(self.profile.config(case.config_id)).tpot_gain
        if g is None or case.concurrency > g.max_concurrency:
            return None
        return g.ratio_at(case.concurrency)

    def _compare_now(self, run: ConfigRun, c: int,
                     reference: BesideReference | None) -> CaseComparison | None:
        """The config's case at concurrency ``c``, as measured so far: against the baseline
        and its kept runs, and its paired TPOT gain; None with neither to judge."""
        case = Case(config_id=run.cfg.id, concurrency=c)
        p = self.profile
        cur = case_result(case, run.cfg, run.trials[c], run.version, p.config_hash(run.cfg))
        paired = self.paired_result(run, c)
        return self.judge(cur, paired, reference)

    def reference(self, run: ConfigRun) -> BesideReference | None:
        """The no-spec trials measured beside this config so far, against the baseline's:
        how far the machine's own speed moved while it was measured. Built as `specperf
        compare` builds it from the run file (Against.reference), from the same mapping."""
        now = {Case(config_id=run.cfg.id, concurrency=c).id: r
               for c in (*run.paired, *run.bracketed)
               if (r := self.paired_result(run, c)) is not None}
        return self.baselines().against(self.profile.compare).reference(run.cfg.id, now)

    def paired_result(self, run: ConfigRun, c: int) -> CaseResult | None:
        """The no-spec trials of the config's case at ``c`` so far: beside its own, or
        (bracketed) the blocks around each of its starts; None without any."""
        p = self.profile
        if self.schedule is not None and c in run.bracketed and p.nospec is not None:
            # None while a start's bracket is still open.
            trials, _ = self.schedule.trials_for(run.cfg.id, run.trials[c], c)
            if not trials:
                return None
            record = self.pool.records.get(p.nospec.id)
            version = record.vllm_version if record is not None else None
            return case_result(Case(config_id=p.nospec.id, concurrency=c), p.nospec, trials,
                               version or run.version, p.config_hash(p.nospec))
        if c not in run.paired or p.nospec is None or run.nospec is None or not run.paired[c]:
            return None
        return case_result(Case(config_id=p.nospec.id, concurrency=c), p.nospec, run.paired[c],
                           run.nospec.version, p.config_hash(p.nospec))

    def judge(self, cur: CaseResult, paired: CaseResult | None,
               reference: BesideReference | None) -> CaseComparison | None:
        """The case's evidence gathered and judged as `specperf compare` gathers and judges
        it from the run file (specperf.analysis.judge); None with nothing to judge."""
        ctx = self.baselines()
        base = ctx.case(cur.case)
        floor = self.gain_floor(cur.case) if paired is not None else None
        if base is None and floor is None:
            return None
        # Here: the judge loads scipy, which only a run that judges as it goes needs.
        from specperf.analysis.judge.case import judge_case
        from specperf.analysis.judge.evidence import side_labels

        rules = self.profile.compare
        against = ctx.against(rules)
        if ctx.baseline is not None:
            against.labels = side_labels(ctx.baseline.provenance.vllm_version, cur.vllm_version)
        return judge_case(against.evidence(cur, base=base, paired=paired, gain_floor=floor,
                                           reference=reference), rules)

    def _failed(self, run: ConfigRun, exc: Exception) -> MeasureError:
        current = run.current
        assert current is not None
        try:
            run.server.check_alive(grace_s=DEATH_GRACE_S)
            # The server is up but measuring failed (/metrics unreadable, …): the cause on
            # one line, then what the server said meanwhile.
            msg = (f"case {current.id}: measuring failed: {type(exc).__name__}: "
                   f"{one_line(str(exc))}\nlog: {run.server.log_path}\n"
                   f"--- last {LOG_TAIL_LINES} log lines ---\n{run.server.log_tail()}")
        except ServerError as dead:
            self.pool.record_error(run.cfg.id, dead)
            msg = f"case {current.id}: {dead}"
        for c in run.trials:
            self.measure_errors[Case(config_id=run.cfg.id, concurrency=c)] = msg
            self.observer.case_failed(Case(config_id=run.cfg.id, concurrency=c))
        return MeasureError(msg)

    def finish(self, run: ConfigRun, outcome: PlanOutcome) -> None:
        p = self.profile
        cfg = run.cfg
        reference = self.reference(run)  # the config's, for every one of its cases
        for c, trials in run.trials.items():
            cc = Case(config_id=cfg.id, concurrency=c)
            result = case_result(cc, cfg, trials, run.version, p.config_hash(cfg))
            if c in outcome.retries:
                result = result.model_copy(update={"retry": outcome.retries[c]})
            if c in outcome.confirmations:
                result = result.model_copy(update={"confirmation": outcome.confirmations[c]})
            self.results[cc] = result
            self.observer.case_done(result.case, _case_line(result))
            if result.n_errors:
                self.say(_errors_line(result, run.server))
            paired = self.paired_result(run, c)
            if paired is not None:
                self.paired[cc] = paired
            twin = run.twin_trials.get(c)
            if twin and run.twin is not None:
                self.pinned[cc] = case_result(cc, cfg, twin, run.twin.version,
                                              p.config_hash(cfg))
            # The final judgement: what every check of the case reads, the same comparison
            # `specperf compare` makes of the run file.
            self.comparisons[cc] = self.judge(result, paired, reference)


def _errors_line(result: CaseResult, server: VllmServer) -> str:
    """Failed requests: the first error on one line and the server's log tail, once per
    case (the requests gate fails it; this is where to look)."""
    first = one_line(result.errors[0]) if result.errors else "unknown error"
    return (f"specperf: {result.case.id}: {result.n_errors} of {result.n_requests} requests "
            f"failed; first: {first}\nlog: {server.log_path}\n--- last "
            f"{ERROR_TAIL_LINES} log lines ---\n{server.log_tail(ERROR_TAIL_LINES)}")


def _case_line(result: CaseResult) -> str:
    """A measured case on one line: requests, medians, throughput, acceptance, outside load."""
    acc = result.acceptance
    acc_txt = f", acceptance {acc.rate:.3f}" if acc is not None and acc.rate is not None else ""
    busy = outside_load.load_sentence(outside_load.trials_load(result.trials))
    return (f"specperf: {result.case.id}: {result.n_requests} requests, median TTFT "
            f"{result.ttft_ms.median or float('nan'):.1f} ms, TPOT "
            f"{result.tpot_ms.median or float('nan'):.2f} ms, "
            f"{result.output_throughput:.1f} tok/s{acc_txt}" + (f"; {busy}" if busy else ""))
