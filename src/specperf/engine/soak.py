"""The time-structured scenarios on one server: a soak's windows, a ramp's phases.

Both read vLLM's cumulative spec-decode counters from /metrics around each window or
phase (specperf.engine.scrape) and drive the same streamed load as a trial
(specperf.engine.load), through the pool's load URL (so fault injection applies); what
they measure is judged by specperf.analysis.trend. Neither is retried under outside load:
a window is a point in time, and measuring it again would be another time. Each window's
outside load is recorded instead, and a busy TPOT trend is not judged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from specperf.analysis import trend
from specperf.analysis.aggregate import make_trial, summarise
from specperf.config.profile import Profile
from specperf.config.scenarios import RampScenario, SoakScenario
from specperf.engine import contention
from specperf.engine.clock import TRIALS, WARMUPS, RunClock
from specperf.engine.load import run_load
from specperf.engine.scrape import counter_delta, fetch_counters
from specperf.engine.servers import ServerPool
from specperf.schemas import (
    Case,
    GateCheck,
    LoadResult,
    RampPhase,
    RampResult,
    RequestSample,
    SoakResult,
    SoakWindow,
    TimeScenarioResults,
)
from specperf.schemas.base import utcnow

__all__ = ["TimeScenarioRunner", "soak_case", "ramp_case"]


def soak_case(scenario: SoakScenario) -> Case:
    return Case(config_id=scenario.config, concurrency=scenario.concurrency)


def ramp_case(scenario: RampScenario) -> Case:
    # Named by its c = 1 phases: the burst is in the middle of it.
    return Case(config_id=scenario.config, concurrency=1)


def burst_concurrency(profile: Profile, scenario: RampScenario) -> int:
    return scenario.burst_concurrency or max(profile.concurrencies)


@dataclass
class TimeScenarioRunner:
    profile: Profile
    pool: ServerPool
    prompts: Callable[[], list[str]]
    say: Callable[[str], None] = print
    clock: RunClock | None = None

    def _warmup(self, url: str, model: str) -> None:
        p = self.profile
        if not p.load.warmup_requests:
            return
        # As a trial's: before the counters are read, from the end of the prompt list.
        clock = self.clock or RunClock()
        with clock.phase(WARMUPS):
            run_load(url, model, self.prompts(), p.sampling, 1, 0,
                     warmup_requests=p.load.warmup_requests,
                     request_timeout_s=p.load.request_timeout_s)

    def _cycle(self, url: str, model: str, concurrency: int, n: int) -> LoadResult:
        p = self.profile
        return run_load(url, model, self.prompts(), p.sampling, concurrency, n,
                        request_timeout_s=p.load.request_timeout_s)

    def soak_and_judge(self, case: Case, max_outside_cores: float,
                       into: TimeScenarioResults) -> list[GateCheck]:
        """Run the profile's soak of ``case`` on its server, keep what it measured in
        ``into`` and judge it (specperf.analysis.trend); raises ServerError or
        ScrapeError."""
        scenario = next(s for s in self.profile.scenarios.soak if soak_case(s) == case)
        soak = self.soak(scenario)
        soak = soak.model_copy(update={
            "fits": trend.soak_fits(soak.windows, scenario, max_outside_cores)})
        into.soak.append(soak)
        return trend.soak_checks(soak)

    def ramp_and_judge(self, case: Case, max_outside_cores: float,
                       into: TimeScenarioResults) -> list[GateCheck]:
        """Run the profile's ramp of ``case`` on its server, keep what it measured in
        ``into`` and judge it (specperf.analysis.trend); raises ServerError or
        ScrapeError."""
        p = self.profile
        ramp_scenario = next(r for r in p.scenarios.ramp if ramp_case(r) == case)
        ramp = self.ramp(ramp_scenario)
        into.ramp.append(ramp)
        return trend.ramp_checks(ramp, p.config(ramp.case.config_id), p.compare,
                                 max_outside_cores)

    # -- soak --------------------------------------------------------------------------

    def soak(self, scenario: SoakScenario) -> SoakResult:
        """Windows of whole prompt cycles, ``duration_s / window_s`` of them (rounded, at
        least ``min_windows``); raises ServerError / ScrapeError."""
        case = soak_case(scenario)
        server = self.pool.server_for(case.config_id)
        url, model = self.pool.load_url(server), server.model
        metrics = self.pool.metrics_url(server)
        n_windows = max(scenario.min_windows, round(scenario.duration_s / scenario.window_s))
        cycle = scenario.cycle_requests or self.profile.load.requests_at(scenario.concurrency)
        self.say(f"specperf: soak {case.id}: {n_windows} windows of ≥ {scenario.window_s:g} s "
                 f"(cycles of {cycle} requests at c={scenario.concurrency})")
        self._warmup(url, model)
        clock = self.clock or RunClock()
        windows: list[SoakWindow] = []
        t0 = time.perf_counter()
        with clock.phase(TRIALS):
            for i in range(n_windows):
                start = time.perf_counter()
                before = fetch_counters(metrics)
                cpu_before = contention.take_snapshot(self.pool.pids(server))
                samples: list[RequestSample] = []
                while True:
                    samples += self._cycle(url, model, scenario.concurrency, cycle).samples
                    if time.perf_counter() - start >= scenario.window_s:
                        break
                cpu_after = contention.take_snapshot(self.pool.pids(server))
                acc = counter_delta(before, fetch_counters(metrics))
                end = time.perf_counter()
                ok = [s for s in samples if s.ok]
                w = SoakWindow(
                    index=i, start_s=start - t0, duration_s=end - start,
                    n_requests=len(samples), n_errors=len(samples) - len(ok),
                    tpot_ms=summarise([t for s in ok if (t := s.tpot_s) is not None]),
                    acceptance=acc,
                    outside_cores=contention.measured_outside_cores(cpu_before, cpu_after))
                windows.append(w)
                rate = w.acceptance.rate if w.acceptance is not None else None
                self.say(f"specperf: soak {case.id}: window {i + 1}/{n_windows} at "
                         f"{w.start_s:.0f} s: {w.n_requests} requests, TPOT median "
                         f"{w.tpot_ms.median or 0:.2f} ms"
                         + (f", acceptance {rate:.4f}" if rate is not None else ""))
        return SoakResult(case=case, duration_s=time.perf_counter() - t0,
                          window_s=scenario.window_s, windows=windows)

    # -- ramp --------------------------------------------------------------------------

    def ramp(self, scenario: RampScenario) -> RampResult:
        """Three phases back to back on one server: c = 1, the burst, c = 1."""
        case = ramp_case(scenario)
        p = self.profile
        server = self.pool.server_for(case.config_id)
        url, model = self.pool.load_url(server), server.model
        metrics = self.pool.metrics_url(server)
        burst = burst_concurrency(p, scenario)
        plan = [("before", 1, scenario.requests or p.load.requests_at(1)),
                ("burst", burst, scenario.burst_requests or p.load.requests_at(burst)),
                ("after", 1, scenario.requests or p.load.requests_at(1))]
        self.say(f"specperf: ramp {case.id}: "
                 + " → ".join(f"c={c} ({n} requests)" for _, c, n in plan))
        self._warmup(url, model)
        clock = self.clock or RunClock()
        phases: list[RampPhase] = []
        with clock.phase(TRIALS):
            for i, (name, c, n) in enumerate(plan):
                started = utcnow()
                before = fetch_counters(metrics)
                cpu_before = contention.take_snapshot(self.pool.pids(server))
                load = self._cycle(url, model, c, n)
                cpu_after = contention.take_snapshot(self.pool.pids(server))
                acc = counter_delta(before, fetch_counters(metrics))
                trial = make_trial(i, started, load, acc,
                                   outside_cores=contention.measured_outside_cores(
                                       cpu_before, cpu_after))
                phases.append(RampPhase(name=name, concurrency=c, trial=trial))  # type: ignore[arg-type]
                rate = acc.rate if acc is not None else None
                self.say(f"specperf: ramp {case.id}: {name} (c={c}): {len(load.samples)} "
                         "requests" + (f", acceptance {rate:.4f}" if rate is not None else
                                       (", no drafts" if acc is not None else "")))
        return RampResult(case=case, phases=phases)
