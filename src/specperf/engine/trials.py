"""One trial — on one server, or on a spec server and its no-spec twin with their requests
interleaved: warm-up, counters before, the measured load, counters after, guarded against
outside CPU load (specperf.engine.contention: a bounded wait for a quiet machine before
each attempt, then measure_guarded)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specperf.analysis.aggregate import make_trial
from specperf.config.profile import Profile
from specperf.engine import contention
from specperf.engine.clock import BUSY_WAITS, REMEASURES, TRIALS, WARMUPS, Phase, RunClock
from specperf.engine.load import run_interleaved_load, run_load
from specperf.engine.observer import RunObserver
from specperf.engine.scrape import counter_delta, fetch_counters, prefix_cache_delta
from specperf.engine.server import VllmServer
from specperf.engine.servers import ServerPool
from specperf.schemas import Case, LoadResult, RequestSample, Trial
from specperf.schemas.base import utcnow

__all__ = ["TrialRunner"]

#: Sends an attempt's load: (measured requests, warm-up requests, called per measured
#: request) → one LoadResult per server of the attempt, in its order.
SendLoad = Callable[[int, int, Callable[[RequestSample], None] | None], list[LoadResult]]


@dataclass
class TrialRunner:
    profile: Profile
    pool: ServerPool
    observer: RunObserver
    prompts: Callable[[], list[str]]
    #: The contention guard's limit (≤ 0 = off).
    max_outside_cores: float
    #: Most seconds a trial waits for the outside load to fall below the limit (0 = don't).
    busy_wait_s: float = 0.0
    say: Callable[[str], None] = print
    #: Where the run's time goes: measured load, warm-ups and discarded attempts.
    clock: RunClock = field(default_factory=RunClock)
    #: Outside cores over a window of the given seconds, with these pids as the suite's
    #: own; a parameter so tests drive the wait with a fake machine.
    sample_outside: Callable[[Sequence[int], float], float | None] = contention.sample_outside
    #: One for the run: whether the machine stayed busy through a whole wait carries over
    #: from trial to trial.
    waiter: contention.QuietWaiter = field(init=False, repr=False)
    #: Keep each trial's prefix-cache counter deltas (scenarios.prefix_cache).
    record_prefix_cache: bool = False

    def __post_init__(self) -> None:
        self.waiter = contention.QuietWaiter(self.max_outside_cores, self.busy_wait_s,
                                             say=self.say)

    def trial(self, server: VllmServer, concurrency: int, index: int, warmup: bool,
              case: Case | None = None, paired: bool = False) -> Trial:
        """One trial on ``server``; ``case`` (default: the server's own) is the case the
        progress display counts it for — a paired no-spec trial counts for its spec case.

        Before each attempt the outside load is checked and, above ``max_outside_cores``,
        waited for (``busy_wait_s`` at most over all of the trial's attempts). An attempt
        during which other processes used more than the limit is measured again, up to
        the profile's load.contended_retries times."""
        shown = case or Case(config_id=server.config_id, concurrency=concurrency)
        what = f"{shown.id}: trial {index + 1}{' (paired no-spec)' if paired else ''}"

        def measure(warm: bool) -> Trial:
            self.observer.trial_started(shown, paired)
            return self._attempt([server], index, warm, self._load_on(server, concurrency),
                                 self.profile.load.requests_at(concurrency))[0]

        trial = self._guarded(server, what, warmup, measure)
        self.observer.trial_done()
        return trial

    def interleaved_trials(self, server: VllmServer, nospec: VllmServer, index: int,
                           warmup: bool) -> tuple[Trial, Trial]:
        """A spec case's trial at concurrency 1 and its paired no-spec trial, measured
        together: one request to each server in turn (load.pairing = "requests"), counters
        of both around the whole, one contention reading for both (they ran in the same
        seconds, so they are kept or measured again together). Returns (spec, no-spec)."""
        shown = Case(config_id=server.config_id, concurrency=1)
        what = f"{shown.id}: trial {index + 1} (interleaved with no-spec)"
        pairs: list[Trial] = []

        def measure(warm: bool) -> Trial:
            self.observer.trial_started(shown, interleaved=True)
            spec, other = (t.model_copy(update={"interleaved": True}) for t in self._attempt(
                [server, nospec], index, warm, self._interleaved_load_on([server, nospec]),
                self.profile.load.requests_at(1)))
            pairs.append(other)
            return spec

        spec = self._guarded(server, what, warmup, measure)
        # The kept attempt is the last one: its no-spec side, with the guard's verdict.
        other = pairs[-1].model_copy(update={
            k: getattr(spec, k) for k in ("remeasured_outside_cores", "contended",
                                          "busy_wait_s")})
        self.observer.trial_done()
        self.observer.trial_done()
        return spec, other

    def _guarded(self, server: VllmServer, what: str, warmup: bool,
                 measure: Callable[[bool], Trial]) -> Trial:
        """``measure(warm_up)`` under the contention guard: the wait for a quiet machine
        before each attempt, attempts measured again while contended."""
        limit = self.max_outside_cores
        retries = self.profile.load.contended_retries
        waits: list[float] = []
        attempts: list[Phase] = []

        def attempt(n: int) -> Trial:
            # Every server of the session is the suite's own load (as in _attempt).
            with self.clock.phase(BUSY_WAITS):
                waited = self.waiter.wait(
                    lambda window: self.sample_outside(self.pool.pids(server), window), what,
                    self.busy_wait_s - sum(waits))
            if waited is not None:
                waits.append(waited)
            with self.clock.phase(TRIALS) as timed:
                attempts.append(timed)
                # The server is warm after the first attempt: warm-up requests only once.
                return measure(warmup and n == 0)

        def contended(trial: Trial, then: str) -> None:
            self.say(f"specperf: {what} ran under outside CPU load {trial.outside_cores:.2f} "
                     f"cores (limit {limit:g}){then}")

        def discarded(trial: Trial, n: int) -> None:
            # Known only once it ran: the whole attempt, its warm-up too, was for nothing.
            self.clock.recharge(attempts[-1], REMEASURES)
            contended(trial, f": measuring it again ({n}/{retries})")

        trial = contention.measure_guarded(attempt, limit, retries, on_discard=discarded,
                                           known_busy=lambda: self.waiter.busy)
        if trial.contended and len(trial.remeasured_outside_cores) < retries:
            contended(trial, ", and the machine has stayed busy since a wait ran out: kept "
                             "as measured, its timing checks not measured (busy)")
        if waits:
            trial = trial.model_copy(update={"busy_wait_s": sum(waits)})
        return trial

    def _load_on(self, server: VllmServer, concurrency: int) -> SendLoad:
        """The load of a trial on one server: ``concurrency`` requests at a time."""
        prompts, p = self.prompts(), self.profile

        def send(n: int, warmup_requests: int,
                 on_request: Callable[[RequestSample], None] | None) -> list[LoadResult]:
            return [run_load(self.pool.load_url(server), server.model, prompts, p.sampling,
                             concurrency, n, warmup_requests=warmup_requests,
                             on_request=on_request, request_timeout_s=p.load.request_timeout_s)]
        return send

    def _interleaved_load_on(self, servers: Sequence[VllmServer]) -> SendLoad:
        """The load of an interleaved trial: one request to each server in turn."""
        prompts, p = self.prompts(), self.profile

        def send(n: int, warmup_requests: int,
                 on_request: Callable[[RequestSample], None] | None) -> list[LoadResult]:
            return run_interleaved_load([(self.pool.load_url(s), s.model) for s in servers],
                                        prompts, p.sampling, n, warmup_requests=warmup_requests,
                                        on_request=on_request,
                                        request_timeout_s=p.load.request_timeout_s)
        return send

    def _attempt(self, servers: Sequence[VllmServer], index: int, warmup: bool,
                 send: SendLoad, requests: int) -> list[Trial]:
        """One attempt of a trial on ``servers`` (one, or a spec server and its no-spec
        twin whose requests interleave): ``send(requests, warmup_requests, on_request)``
        sends the load, one result per server in the same order. Each server's counters
        are read around its own side; one CPU reading covers them all, since they ran in
        the same seconds."""
        p = self.profile
        warmup_requests = p.load.warmup_requests if warmup else 0
        if warmup_requests:
            # Before the counters are read: warmup requests draft and accept tokens too,
            # and counting them would make a case's acceptance depend on how many trials
            # share the one warmup (5 trials vs 10, or a retried case).
            with self.clock.phase(WARMUPS):
                send(0, warmup_requests, None)
        started = utcnow()
        before = [fetch_counters(self.pool.metrics_url(s)) for s in servers]
        # Every server of the session is the suite's own load, not a neighbour's (an idle
        # one that polls would otherwise trigger re-measurements nothing can fix).
        pids = self.pool.pids(*servers)
        cpu_before = contention.take_snapshot(pids)
        loads = send(requests, 0, lambda sample: self.observer.request_done(sample.ok))
        cpu_after = contention.take_snapshot(pids)
        after = [fetch_counters(self.pool.metrics_url(s)) for s in servers]
        outside = contention.measured_outside_cores(cpu_before, cpu_after)
        trials = []
        for load, b, a in zip(loads, before, after, strict=True):
            if warmup_requests:
                load = load.model_copy(update={"warmup_requests": warmup_requests})
            trial = make_trial(index, started, load, counter_delta(b, a), outside_cores=outside)
            if self.record_prefix_cache:
                trial = trial.model_copy(update={"prefix_cache": prefix_cache_delta(b, a)})
            trials.append(trial)
        return trials
