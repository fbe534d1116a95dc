"""RunClock: each second in one bucket, nested phases not counted twice, a discarded
attempt moved whole to re-measures, *other* the rest and never negative. The clock read is
a fake one the test advances (no sleeps); the parts that charge it (pool, trial runner,
measurer) are exercised with their vLLM side stood in for."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from specperf.config.profile_file import load_profile
from specperf.engine import contention
from specperf.engine.clock import (
    BUCKETS,
    BUSY_WAITS,
    REMEASURES,
    REPORTS,
    RESTARTS,
    SERVER_STARTS,
    SHUTDOWN,
    TRIALS,
    WARMUPS,
    RunClock,
)
from specperf.engine.measurer import CaseMeasurer
from specperf.engine.servers import ServerPool
from specperf.engine.trials import TrialRunner
from specperf.schemas import TimeBreakdown, Trial
from tests.support import CPU_CI_PROFILE, REPO_ROOT, make_requests, make_trial_of


class FakeTime:
    """A perf_counter the test moves: ``tick(s)`` is ``s`` seconds passing."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def tick(self, s: float) -> None:
        self.t += s


@pytest.fixture
def now() -> FakeTime:
    return FakeTime()


def test_each_phase_gets_its_time_and_other_is_the_rest(now: FakeTime) -> None:
    clock = RunClock(now)
    now.tick(3)  # collection: no phase
    with clock.phase(SERVER_STARTS):
        now.tick(40)
    with clock.phase(TRIALS):
        now.tick(20)
    with clock.phase(SHUTDOWN):
        now.tick(2)
    now.tick(5)
    t = clock.breakdown()
    assert (t.wall_s, t.server_starts_s, t.trials_s, t.shutdown_s, t.other_s) == (70, 40, 20, 2, 8)
    assert t.warmups_s == t.remeasures_s == t.restarts_s == t.reports_s == 0
    assert t.quiet_ratio == pytest.approx(70 / 60)


def test_a_nested_phase_is_not_counted_in_the_outer_one_too(now: FakeTime) -> None:
    clock = RunClock(now)
    with clock.phase(TRIALS) as trial:
        now.tick(1)
        with clock.phase(WARMUPS):
            now.tick(4)
        now.tick(10)
    t = clock.breakdown()
    assert (t.trials_s, t.warmups_s, t.other_s, t.wall_s) == (11, 4, 0, 15)
    assert trial.charged == {TRIALS: 11, WARMUPS: 4} and trial.seconds == 15


def test_a_whole_phase_keeps_what_is_nested_in_it(now: FakeTime) -> None:
    """A confirmation restart's stop and start are the restart's."""
    clock = RunClock(now)
    with clock.phase(RESTARTS, whole=True):
        with clock.phase(SHUTDOWN):
            now.tick(2)
        with clock.phase(SERVER_STARTS):
            now.tick(30)
            with clock.phase(TRIALS):  # deeper still: the restart's
                now.tick(1)
    t = clock.breakdown()
    assert (t.restarts_s, t.shutdown_s, t.server_starts_s, t.trials_s) == (33, 0, 0, 0)


def test_a_discarded_attempt_moves_whole_to_remeasures(now: FakeTime) -> None:
    clock = RunClock(now)
    with clock.phase(REPORTS) as outer:  # an enclosing phase's own record follows the move
        with clock.phase(TRIALS) as attempt:
            with clock.phase(WARMUPS):
                now.tick(3)
            now.tick(10)
        clock.recharge(attempt, REMEASURES)
        clock.recharge(attempt, REMEASURES)  # twice is once
        with clock.phase(TRIALS):
            now.tick(9)
    t = clock.breakdown()
    assert (t.remeasures_s, t.trials_s, t.warmups_s, t.reports_s) == (13, 9, 0, 0)
    assert outer.charged == {TRIALS: 9, WARMUPS: 0, REMEASURES: 13}
    assert t.wall_s == t.other_s + 22


def test_recharge_refuses_an_open_phase_and_unknown_buckets(now: FakeTime) -> None:
    clock = RunClock(now)
    with clock.phase(TRIALS) as open_one:
        with pytest.raises(ValueError, match="still open"):
            clock.recharge(open_one, REMEASURES)
    with pytest.raises(ValueError, match="unknown time bucket 'trial'"):
        clock.recharge(open_one, "trial")
    with pytest.raises(ValueError, match="known: server_starts, trials"):
        with clock.phase("startup"):
            pass


def test_open_phases_count_up_to_now(now: FakeTime) -> None:
    """The plugin stamps the run file while its reports phase is still open."""
    clock = RunClock(now)
    with clock.phase(REPORTS):
        now.tick(6)
        assert clock.breakdown().reports_s == 6
        now.tick(1)
    assert clock.breakdown().reports_s == 7


def test_other_is_never_negative(now: FakeTime) -> None:
    clock = RunClock(now)
    with clock.phase(TRIALS):
        now.tick(50)
    t = clock.breakdown(wall_s=40)  # a wall clock read elsewhere, short of the parts
    assert t.other_s == 0 and t.wall_s == 40 and t.trials_s == 50
    assert clock.breakdown(wall_s=-1).wall_s == 0


def test_an_exception_still_closes_the_phase(now: FakeTime) -> None:
    clock = RunClock(now)
    with pytest.raises(KeyboardInterrupt), clock.phase(TRIALS):
        now.tick(5)
        raise KeyboardInterrupt
    now.tick(2)
    t = clock.breakdown()
    assert (t.trials_s, t.other_s) == (5, 2)


def test_breakdown_has_a_field_per_bucket() -> None:
    assert {f"{b}_s" for b in BUCKETS} | {"wall_s", "other_s"} == set(TimeBreakdown.model_fields)


def test_no_quiet_ratio_when_nothing_started_or_ran() -> None:
    assert TimeBreakdown(wall_s=3, other_s=3).quiet_ratio is None


# --------------------------------------------------------------------------- who charges it


def _trial(outside: float | None) -> Trial:
    return make_trial_of(make_requests(1, ttft_s=0.1, tpot_s=0.05, tokens=9),
                         outside_cores=outside)


def test_the_trial_runner_charges_trials_warmups_and_remeasures(now: FakeTime) -> None:
    """Attempt 1 (with its warm-up) ran under outside load and is measured again: all of it
    is re-measures; attempt 2 is the trial."""
    clock = RunClock(now)
    profile = SimpleNamespace(load=SimpleNamespace(contended_retries=2, requests_at=lambda _c: 8))
    observer = SimpleNamespace(trial_done=lambda: None, trial_started=lambda *_a, **_k: None)
    runner = TrialRunner(profile, pool=None, observer=observer, prompts=list,  # type: ignore[arg-type]
                         max_outside_cores=0.25, say=lambda _m: None, clock=clock)
    loads = iter([0.9, 0.1])

    def attempt(servers: Any, index: int, warmup: bool, send: Any, requests: int) -> list[Trial]:
        if warmup:
            with clock.phase(WARMUPS):
                now.tick(2)
        now.tick(10)
        return [_trial(next(loads))]

    runner._attempt = attempt  # type: ignore[method-assign]  # noqa: SLF001
    trial = runner.trial(SimpleNamespace(config_id="draft-k2"), 1, 0, warmup=True)  # type: ignore[arg-type]
    assert trial.remeasured_outside_cores == [0.9]
    t = clock.breakdown()
    assert (t.remeasures_s, t.warmups_s, t.trials_s) == (12, 0, 10)


def test_the_trial_runner_charges_the_wait_for_a_quiet_machine_to_busy_waits(
        now: FakeTime) -> None:
    """Before the attempt the outside load is 0.9 cores for two windows, then 0.1: those
    seconds are the wait's (busy_waits), not the trial's and not "other"."""
    clock = RunClock(now)
    profile = SimpleNamespace(load=SimpleNamespace(contended_retries=2, requests_at=lambda _c: 8))
    observer = SimpleNamespace(trial_done=lambda: None, trial_started=lambda *_a, **_k: None)
    pool = SimpleNamespace(pids=lambda _server: [])
    readings = iter([0.9, 0.9, 0.1])

    def sample_outside(_pids: Any, window: float) -> float:
        now.tick(window)
        return next(readings)

    runner = TrialRunner(profile, pool=pool, observer=observer, prompts=list,  # type: ignore[arg-type]
                         max_outside_cores=0.25, busy_wait_s=60, say=lambda _m: None,
                         clock=clock, sample_outside=sample_outside)
    runner.waiter.clock = now  # the budget on the same fake clock

    def attempt(servers: Any, index: int, warmup: bool, send: Any, requests: int) -> list[Trial]:
        now.tick(10)
        return [_trial(0.1)]

    runner._attempt = attempt  # type: ignore[method-assign]  # noqa: SLF001
    trial = runner.trial(SimpleNamespace(config_id="draft-k2"), 1, 0, warmup=False)  # type: ignore[arg-type]
    waited = contention.PROBE_S + 2 * contention.WINDOW_S
    assert trial.busy_wait_s == pytest.approx(waited)
    t = clock.breakdown()
    assert (t.busy_waits_s, t.trials_s, t.other_s) == (pytest.approx(waited), 10, 0)
    assert clock.seconds(BUSY_WAITS) == pytest.approx(waited)
    assert t.quiet_s == 10  # a wait is not what a quiet run costs


def test_the_pool_charges_starts_and_stops(tmp_path: Path, now: FakeTime) -> None:
    clock = RunClock(now)
    pool = ServerPool(load_profile(str(CPU_CI_PROFILE), REPO_ROOT), tmp_path, tmp_path,
                      say=lambda _m: None, clock=clock)

    def start(config_id: str) -> Any:
        now.tick(30)
        server = SimpleNamespace(config_id=config_id, stop=lambda: now.tick(2),
                                 check_alive=lambda: None)
        pool.servers[config_id] = server  # type: ignore[assignment]
        return server

    pool._start = start  # type: ignore[method-assign]  # noqa: SLF001
    pool.server_for("nospec")
    pool.server_for("nospec")  # running already: no start
    with clock.phase(RESTARTS, whole=True):  # what the measurer does for a confirmation
        pool.restart("nospec")
    pool.stop("nospec")
    t = clock.breakdown()
    assert (t.server_starts_s, t.shutdown_s, t.restarts_s) == (30, 2, 32)


def test_the_measurer_charges_a_confirmations_restart_whole(now: FakeTime) -> None:
    """The pool's stop and start inside a confirmation are the restart's; the fresh server's
    trials are trials again (test_a_flagged_case_is_measured_again_on_a_fresh_server)."""
    clock = RunClock(now)

    def restart(config_id: str) -> Any:
        with clock.phase(SHUTDOWN):
            now.tick(2)
        with clock.phase(SERVER_STARTS):
            now.tick(30)
        return SimpleNamespace(config_id=config_id)

    measurer = CaseMeasurer(profile=None, pool=SimpleNamespace(restart=restart),  # type: ignore[arg-type]
                            runner=None, observer=None, baselines=None, repeats=5,  # type: ignore[arg-type]
                            clock=clock)
    run = SimpleNamespace(cfg=SimpleNamespace(id="draft-k2"), trials={1: []}, server=None,
                          start=None)
    assert measurer._restart(run, (1,)) is None  # type: ignore[arg-type]  # noqa: SLF001
    t = clock.breakdown()
    assert (t.restarts_s, t.shutdown_s, t.server_starts_s) == (32, 0, 0)
    assert run.start == 1
