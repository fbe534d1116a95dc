"""The contention guard (specperf.engine.contention): /proc parsing and arithmetic, the
retry policy, the wait for a quiet machine (on a fake machine, and once on this one beside
a CPU burner), the real /proc of this machine, and the session's settings. How the outside
load reads in run files, reports and compare: tests/unit/analysis/test_outside_load.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specperf.config.profile_file import load_profile
from specperf.engine import contention
from specperf.engine.contention import (
    CpuSnapshot,
    ProcStat,
    QuietWaiter,
    is_contended,
    measure_guarded,
    outside_cores,
    outside_demand_cores,
    parse_pid_stat,
    parse_schedstat,
    parse_system_busy,
    sample_outside,
    take_snapshot,
    tree_ticks,
)
from specperf.engine.session import PerfOptions, PerfSession
from specperf.engine.trials import TrialRunner
from specperf.schemas import Case, Trial
from tests.support import CPU_CI_PROFILE, REPO_ROOT, make_requests, make_trial_of, unchecked

REPO = REPO_ROOT

PROC_STAT = """\
cpu  1000 50 300 9000 40 7 20 30 11 2
cpu0 500 25 150 4500 20 3 10 15 11 2
cpu1 500 25 150 4500 20 4 10 15 0 0
intr 12829181 0 0 0
ctxt 99
btime 1700000000
"""


def _stat_line(pid: int, comm: str, ppid: int, utime: int, stime: int, cutime: int = 0,
               cstime: int = 0) -> str:
    # Fields as the kernel writes them: pid (comm) state ppid pgrp session tty tpgid flags
    # minflt cminflt majflt cmajflt utime stime cutime cstime priority nice …
    return (f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194304 99 0 0 0 "
            f"{utime} {stime} {cutime} {cstime} 20 0 1 0 1281266 3133440 357\n")


# --------------------------------------------------------------------------- parsing


def test_system_busy_counts_busy_fields_of_the_aggregate_line_only() -> None:
    # user + nice + system + irq + softirq + steal; idle and iowait are idle, and guest /
    # guest_nice are already inside user / nice.
    assert parse_system_busy(PROC_STAT) == 1000 + 50 + 300 + 7 + 20 + 30


def test_system_busy_without_cpu_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="no aggregate 'cpu' line"):
        parse_system_busy("cpu0 1 2 3 4\nintr 5\n")


def test_pid_stat_name_with_spaces_and_parentheses() -> None:
    p = parse_pid_stat(_stat_line(4242, "vllm (engine) core 0", 17, 120, 30, 5, 6))
    assert p == ProcStat(pid=4242, ppid=17, utime=120, stime=30, cutime=5, cstime=6)


def test_pid_stat_garbage_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse_pid_stat("not a stat line")


def test_tree_ticks_walks_descendants_and_counts_reaped_children() -> None:
    procs = {p.pid: p for p in (
        ProcStat(1, 0, 5, 5, 0, 0),            # init: not ours
        ProcStat(100, 1, 10, 2, 7, 1),         # server; 8 ticks of reaped children
        ProcStat(101, 100, 40, 4, 0, 0),       # engine core
        ProcStat(103, 101, 3, 0, 0, 0),        # its worker
        ProcStat(200, 1, 900, 90, 0, 0),       # a neighbour
        ProcStat(300, 1, 1, 1, 0, 0),          # another server
    )}
    assert tree_ticks(procs, [100]) == 10 + 2 + 7 + 1 + 40 + 4 + 3
    assert tree_ticks(procs, [100, 300]) == tree_ticks(procs, [100]) + 2
    assert tree_ticks(procs, [101, 100]) == tree_ticks(procs, [100])  # counted once
    assert tree_ticks(procs, [999]) == 0  # a server that is gone
    assert tree_ticks(procs, []) == 0


# --------------------------------------------------------------------------- arithmetic


def test_outside_cores_is_the_rest_of_busy_time_per_wall_second() -> None:
    before = CpuSnapshot(wall_s=10.0, system_busy=1000, server_tree=400, own=50)
    after = CpuSnapshot(wall_s=12.0, system_busy=1300, server_tree=550, own=60)
    # (300 − 150 − 10) ticks / (100 ticks/s × 2 s) = 0.7 cores of other processes.
    assert outside_cores(before, after, 100.0) == pytest.approx(0.7)


def test_outside_cores_clamps_sampling_noise_and_needs_time() -> None:
    before = CpuSnapshot(wall_s=1.0, system_busy=100, server_tree=0, own=0)
    after = CpuSnapshot(wall_s=2.0, system_busy=190, server_tree=92, own=1)
    assert outside_cores(before, after, 100.0) == 0.0
    assert outside_cores(before, before, 100.0) is None
    assert outside_cores(before, after, 0.0) is None


def test_schedstat_is_run_plus_run_queue_wait() -> None:
    assert parse_schedstat("98076 3396923 2\n") == 98076 + 3396923


def _demand(wall_s: float, demand: dict[int, int] | None, busy: int = 0) -> CpuSnapshot:
    return CpuSnapshot(wall_s=wall_s, system_busy=busy, server_tree=0, own=0,
                       outside_demand_ns=demand)


def test_demand_counts_threads_seen_in_both_snapshots() -> None:
    # Thread 1 ran or waited all 2 s (a busy loop the servers starve), thread 2 half a
    # second; thread 3 ended during the window and thread 4 started in it: neither is
    # counted (a process that lives inside one trial shows in the busy-time reading).
    before = _demand(10.0, {1: 5_000_000_000, 2: 100, 3: 7})
    after = _demand(12.0, {1: 7_000_000_000, 2: 500_000_100, 4: 9_000_000_000})
    assert outside_demand_cores(before, after) == pytest.approx(1.25)
    assert outside_demand_cores(before, _demand(12.0, None)) is None
    assert outside_demand_cores(before, before) is None


def test_outside_load_is_the_larger_of_use_and_demand() -> None:
    # The busy loop got 0.2 cores of use (the servers filled the machine) but ran or waited
    # the whole second: the guard reads it as the one core it wants.
    starved_b, starved_a = _demand(1.0, {1: 0}, busy=0), _demand(2.0, {1: 1_000_000_000}, busy=20)
    assert outside_cores(starved_b, starved_a, 100.0) == pytest.approx(1.0)
    # A compile that starts and ends within the trial: its ticks are only in the busy time.
    short_b, short_a = _demand(1.0, {}, busy=0), _demand(2.0, {}, busy=60)
    assert outside_cores(short_b, short_a, 100.0) == pytest.approx(0.6)
    # No schedstat on this kernel: the busy time alone, as before.
    assert outside_cores(_demand(1.0, None), _demand(2.0, None, busy=30), 100.0) == pytest.approx(0.3)


@pytest.mark.parametrize(("load", "limit", "over"), [
    (0.3, 0.25, True), (0.25, 0.25, False), (0.1, 0.25, False),
    (None, 0.25, False),   # unknown load: never re-measured
    (5.0, 0.0, False), (5.0, -1.0, False), (5.0, None, False),  # guard off
])
def test_is_contended(load: float | None, limit: float | None, over: bool) -> None:
    assert is_contended(load, limit) is over


# --------------------------------------------------------------------------- the guard


def _trial(outside: float | None, index: int = 0) -> Trial:
    return make_trial_of(make_requests(1, ttft_s=0.1, tpot_s=0.05, tokens=9), index=index,
                         outside_cores=outside)


def _attempts(loads: list[float | None]) -> tuple[list[int], object]:
    calls: list[int] = []

    def attempt(n: int) -> Trial:
        calls.append(n)
        return _trial(loads[n], index=3)

    return calls, attempt


def test_contended_trial_is_measured_again_and_the_replaced_loads_are_kept() -> None:
    calls, attempt = _attempts([0.9, 0.6, 0.1])
    told: list[tuple[float | None, int]] = []
    trial = measure_guarded(attempt, 0.25, 2,  # type: ignore[arg-type]
                            on_discard=lambda t, n: told.append((t.outside_cores, n)))
    assert calls == [0, 1, 2]
    assert trial.outside_cores == 0.1 and trial.index == 3
    assert trial.remeasured_outside_cores == [0.9, 0.6]
    assert not trial.contended
    assert told == [(0.9, 1), (0.6, 2)]


def test_still_contended_after_the_retries_is_kept_and_marked() -> None:
    calls, attempt = _attempts([0.9, 0.8, 0.7, 0.0])
    trial = measure_guarded(attempt, 0.25, 2)  # type: ignore[arg-type]
    assert calls == [0, 1, 2]
    assert trial.outside_cores == 0.7 and trial.contended
    assert trial.remeasured_outside_cores == [0.9, 0.8]


@pytest.mark.parametrize(("loads", "limit", "retries"), [
    ([0.1], 0.25, 2),      # quiet: one attempt
    ([None], 0.25, 2),     # unknown: one attempt
    ([3.0], 0.0, 2),       # guard off
    ([3.0], -1.0, 2),
])
def test_one_attempt_when_quiet_unknown_or_off(loads: list[float | None], limit: float,
                                               retries: int) -> None:
    calls, attempt = _attempts(loads)
    trial = measure_guarded(attempt, limit, retries)  # type: ignore[arg-type]
    assert calls == [0]
    assert not trial.contended and trial.remeasured_outside_cores == []


def test_no_retries_marks_at_once() -> None:
    calls, attempt = _attempts([0.9])
    trial = measure_guarded(attempt, 0.25, 0)  # type: ignore[arg-type]
    assert calls == [0] and trial.contended and trial.remeasured_outside_cores == []


# --------------------------------------------------------------------------- reading /proc


def _fake_proc(root: Path, busy_user: int, entries: dict[int, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(PROC_STAT.replace("cpu  1000", f"cpu  {busy_user}", 1))
    for pid, line in entries.items():
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "stat").write_text(line)
    (root / "self").mkdir(exist_ok=True)          # not a pid: skipped
    (root / "77").mkdir(exist_ok=True)             # a process that ended mid-read
    return root


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason=unchecked("/proc on a real kernel", "run the tests on Linux"))
def test_take_snapshot_reads_a_proc_tree(tmp_path: Path) -> None:
    me = os.getpid()
    proc = _fake_proc(tmp_path / "proc", 2000, {
        me: _stat_line(me, "pytest", 1, 70, 30, 500, 500),   # own c-times are the servers'
        500: _stat_line(500, "python", me, 400, 100, 0, 0),
        501: _stat_line(501, "VLLM::EngineCore", 500, 1000, 0, 0, 0),
        600: _stat_line(600, "stress", 1, 9999, 0, 0, 0),
    })
    snap = take_snapshot([500], proc=str(proc))
    assert snap is not None
    assert snap.system_busy == parse_system_busy(PROC_STAT) + 1000
    assert snap.server_tree == 400 + 100 + 1000
    assert snap.own == 100


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason=unchecked("/proc on a real kernel", "run the tests on Linux"))
def test_take_snapshot_reads_demand_of_threads_outside_the_servers(tmp_path: Path) -> None:
    me = os.getpid()
    proc = _fake_proc(tmp_path / "proc", 2000, {
        me: _stat_line(me, "pytest", 1, 70, 30),
        500: _stat_line(500, "python", me, 400, 100),
        600: _stat_line(600, "stress", 1, 9999, 0),
    })
    for pid, tid, text in ((me, me, "1 1 1"), (500, 500, "5 5 5"), (600, 600, "100 20 3"),
                           (600, 601, "7 0 1")):
        (proc / str(pid) / "task" / str(tid)).mkdir(parents=True)
        (proc / str(pid) / "task" / str(tid) / "schedstat").write_text(text)
    snap = take_snapshot([500], proc=str(proc))
    assert snap is not None
    # Only the neighbour's threads: not the server's tree, not this process.
    assert snap.outside_demand_ns == {600: 120, 601: 7}


def test_unreadable_proc_is_unknown_not_an_error(tmp_path: Path) -> None:
    assert take_snapshot([1], proc=str(tmp_path / "no-proc")) is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "stat").write_text("intr 1 2 3\n")
    assert take_snapshot([1], proc=str(tmp_path / "bad")) is None
    assert contention.measured_outside_cores(None, None) is None


CHILD = """\
import sys, time
print("ready", flush=True)
sys.stdin.readline()
t = time.process_time()
while time.process_time() - t < 0.2:
    pass
print("done", flush=True)
sys.stdin.readline()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason=unchecked("/proc on a real kernel", "run the tests on Linux"))
def test_real_proc_busy_child_is_server_tree_when_given_else_outside() -> None:
    # A child that burns 0.2 s of CPU (not of wall time: under nice 19 on a busy machine
    # that can take longer) and then waits, so its ticks are read before it exits.
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        with_before, without_before = take_snapshot([child.pid]), take_snapshot([])
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        with_after, without_after = take_snapshot([child.pid]), take_snapshot([])
        child.stdin.write("bye\n")
        child.stdin.flush()
    finally:
        child.wait(timeout=60)
    assert None not in (with_before, without_before, with_after, without_after)
    assert with_after.server_tree - with_before.server_tree > 0  # type: ignore[union-attr]
    assert without_after.server_tree == without_before.server_tree == 0  # type: ignore[union-attr]
    assert without_after.own >= without_before.own  # type: ignore[union-attr]
    given = contention.measured_outside_cores(with_before, with_after)
    not_given = contention.measured_outside_cores(without_before, without_after)
    assert given is not None and not_given is not None
    # Not given, the child is a neighbour: its CPU shows up as outside load.
    assert not_given > 0
    assert not_given > given


SPINNER = "import sys\nprint('spinning', flush=True)\nwhile True:\n    pass\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason=unchecked("/proc on a real kernel", "run the tests on Linux"))
def test_real_busy_loop_reads_one_core_however_little_the_servers_leave_it() -> None:
    """Issue #13's busy run: beside servers that fill the machine, a one-core neighbour gets
    a small share of the CPU and the busy-time reading alone said 0.11-0.24 cores. A busy
    loop is always running or waiting to run, so its demand is one core whatever the
    scheduler gives it; the guard must read at least most of that. (Not a timing: the sum
    of run and wait time of a runnable thread is its wall time on any machine.)"""
    n = os.cpu_count() or 2
    servers = [subprocess.Popen([sys.executable, "-c", SPINNER], stdout=subprocess.PIPE,
                                text=True) for _ in range(n)]
    burner = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE, text=True)
    try:
        for p in (*servers, burner):
            assert p.stdout is not None and p.stdout.readline().strip() in ("spinning", "burning")
        load = sample_outside([p.pid for p in servers], 1.0)
    finally:
        for p in (*servers, burner):
            p.kill()
            p.wait(timeout=60)
    assert load is not None and load >= 0.8, load


# --------------------------------------------------------------------------- the session


def _session(tmp_path: Path, **options: float | None) -> PerfSession:
    return PerfSession(options=PerfOptions(
        profile=str(CPU_CI_PROFILE), rootdir=REPO,
        run_dir=tmp_path, json_path=None, baselines_dir=tmp_path, update_baselines=False,
        force=False, repeats=None, dataset=None, models_cache=tmp_path,
        **options), say=lambda _: None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("option", "limit"), [(None, 0.25), (0.0, 0.0), (1.25, 1.25)])
def test_option_overrides_the_profiles_limit(tmp_path: Path, option: float | None,
                                             limit: float) -> None:
    assert _session(tmp_path, max_outside_cores=option).max_outside_cores == limit


@pytest.mark.parametrize(("option", "wait"), [(None, 60.0), (0.0, 0.0), (5.0, 5.0)])
def test_busy_wait_option_overrides_the_profile_and_reaches_the_trials(
        tmp_path: Path, option: float | None, wait: float) -> None:
    session = _session(tmp_path, busy_wait_s=option, max_outside_cores=0.5)
    assert session.busy_wait_s == wait
    # What the trials are given (built without starting anything).
    waiter = session.measurer.runner.waiter
    assert (waiter.budget_s, waiter.limit) == (wait, 0.5)


# --------------------------------------------------------------------------- the wait


@dataclass
class FakeMachine:
    """Outside load, one figure per window sampled in turn (the last repeats), on a clock
    that the windows advance: a wait without sleeping."""

    loads: list[float | None]
    now: float = 100.0
    windows: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sample(self, window_s: float) -> float | None:
        self.windows.append(window_s)
        self.now += window_s
        return self.loads[min(len(self.windows), len(self.loads)) - 1]


def _waiter(machine: FakeMachine, limit: float = 0.5, budget: float = 60.0
            ) -> tuple[QuietWaiter, list[str]]:
    said: list[str] = []
    return QuietWaiter(limit, budget, say=said.append, clock=machine.clock), said


def test_quiet_machine_is_checked_once_in_a_short_window_and_not_waited_for() -> None:
    m = FakeMachine([0.1])
    waiter, said = _waiter(m)
    assert waiter.wait(m.sample, "c1: trial 1") == pytest.approx(contention.PROBE_S)
    assert m.windows == [contention.PROBE_S] and said == []


def test_busy_machine_is_waited_for_until_the_load_falls() -> None:
    m = FakeMachine([0.9, 0.8, 0.7, 0.1])
    waiter, said = _waiter(m)
    waited = waiter.wait(m.sample, "draft-k2-c1: trial 1")
    assert m.windows == [contention.PROBE_S] + [contention.WINDOW_S] * 3
    assert waited == pytest.approx(contention.PROBE_S + 3 * contention.WINDOW_S)
    assert said == [
        "specperf: draft-k2-c1: trial 1: waiting for outside CPU load to fall (0.90 cores > "
        "limit 0.5), up to 60 s",
        "specperf: draft-k2-c1: trial 1: outside CPU load fell to 0.10 cores after 3 s"]
    assert not waiter.busy


def test_a_load_that_stays_up_is_waited_for_the_budget_at_most_then_measured() -> None:
    m = FakeMachine([0.8])
    waiter, said = _waiter(m, budget=10.0)
    waited = waiter.wait(m.sample, "c1: trial 2")
    assert waited is not None and 10.0 <= waited <= 10.0 + contention.WINDOW_S
    assert len(said) == 2 and said[1].startswith(
        "specperf: c1: trial 2: outside CPU load still 0.80 cores after 10 s: measuring anyway")
    assert waiter.busy
    # Busy through a whole budget: the next trials are checked but not waited for …
    n = len(m.windows)
    assert waiter.wait(m.sample, "c1: trial 3") == pytest.approx(contention.PROBE_S)
    assert len(m.windows) == n + 1 and len(said) == 2
    # … until a check finds the machine quiet; then a new burst is waited for again.
    m.loads = [*[0.8] * len(m.windows), 0.1, 0.9, 0.2]
    assert waiter.wait(m.sample, "c1: trial 4") == pytest.approx(contention.PROBE_S)
    assert not waiter.busy
    assert waiter.wait(m.sample, "c1: trial 5") == pytest.approx(
        contention.PROBE_S + contention.WINDOW_S)
    assert said[-1] == "specperf: c1: trial 5: outside CPU load fell to 0.20 cores after 1 s"


def test_the_last_window_is_cut_to_the_budget_but_never_below_the_check() -> None:
    m = FakeMachine([0.9])
    waiter, _ = _waiter(m, budget=1.5)
    waiter.wait(m.sample, "c1: trial 1")
    assert m.windows == [contention.PROBE_S, contention.WINDOW_S, contention.PROBE_S]
    m2 = FakeMachine([0.9])
    waiter2, _ = _waiter(m2, budget=1.3)
    waiter2.wait(m2.sample, "c1: trial 1")
    assert m2.windows == [contention.PROBE_S, 1.0, contention.PROBE_S]  # 0.05 s left → 0.25


def test_a_smaller_budget_for_this_call_bounds_the_wait() -> None:
    m = FakeMachine([0.9])
    waiter, said = _waiter(m, budget=60.0)
    waited = waiter.wait(m.sample, "c1: trial 1", budget_s=2.0)
    assert waited is not None and waited <= 2.0 + contention.WINDOW_S
    assert said[0].endswith("up to 2 s")
    assert waiter.wait(m.sample, "c1: trial 1", budget_s=0.0) is None


@pytest.mark.parametrize(("limit", "budget", "loads"), [
    (0.0, 60.0, [5.0]),     # guard off: nothing to wait for
    (-1.0, 60.0, [5.0]),
    (0.5, 0.0, [5.0]),      # waiting off
    (0.5, 60.0, [None]),    # load unknown (not Linux)
])
def test_nothing_is_checked_when_off_or_unknown(limit: float, budget: float,
                                                loads: list[float | None]) -> None:
    m = FakeMachine(loads)
    waiter, said = _waiter(m, limit=limit, budget=budget)
    assert waiter.wait(m.sample, "c1: trial 1") is None
    assert said == [] and m.windows in ([], [contention.PROBE_S])


def test_a_load_that_becomes_unknown_mid_wait_ends_the_wait() -> None:
    m = FakeMachine([0.9, 0.9, None])
    waiter, said = _waiter(m)
    assert waiter.wait(m.sample, "c1: trial 1") == pytest.approx(contention.PROBE_S + 2.0)
    assert said[-1] == "specperf: c1: trial 1: outside CPU load unknown after 2 s: measuring"
    assert not waiter.busy


# --------------------------------------------------------------------------- the wait in a trial


class _Pool:
    def pids(self, *also: object) -> list[int]:
        return [4242]


class _Observer:
    def trial_started(self, case: object, paired: bool = False,
                      interleaved: bool = False) -> None:
        pass

    def trial_done(self) -> None:
        pass


@dataclass
class _Server:
    config_id: str = "draft-k2"


def _runner(machine: FakeMachine, trial_loads: list[float], *, limit: float = 0.5,
            wait: float = 60.0) -> tuple[TrialRunner, list[str], list[Sequence[int]]]:
    said: list[str] = []
    pids_seen: list[Sequence[int]] = []

    def sample(pids: Sequence[int], window: float) -> float | None:
        pids_seen.append(pids)
        return machine.sample(window)

    runner = TrialRunner(load_profile(CPU_CI_PROFILE), _Pool(), _Observer(),  # type: ignore[arg-type]
                         lambda: [], limit, busy_wait_s=wait, say=said.append,
                         sample_outside=sample)
    runner.waiter.clock = machine.clock
    attempts = iter(trial_loads)

    def attempt(*_: object) -> list[Trial]:
        machine.now += 5.0  # a trial takes time, outside the wait
        return [_trial(next(attempts), index=0)]

    runner._attempt = attempt  # type: ignore[method-assign]
    return runner, said, pids_seen


def test_a_trial_waits_before_each_attempt_and_records_the_seconds_waited() -> None:
    # Check busy → wait 2 windows → quiet; trial contended; check quiet; trial quiet.
    m = FakeMachine([0.9, 0.8, 0.2, 0.1, 0.0])
    runner, said, pids = _runner(m, [0.9, 0.1])
    trial = runner.trial(_Server(), 1, 0, warmup=False)  # type: ignore[arg-type]
    assert trial.outside_cores == 0.1 and trial.remeasured_outside_cores == [0.9]
    assert not trial.contended
    assert trial.busy_wait_s == pytest.approx(2 * contention.PROBE_S + 2 * contention.WINDOW_S)
    assert pids and all(p == [4242] for p in pids)  # the run's servers are not "outside"
    assert said[0].startswith("specperf: draft-k2-c1: trial 1: waiting for outside CPU load")
    assert said[2].startswith("specperf: draft-k2-c1: trial 1 ran under outside CPU load 0.90")
    # Written to the run file; read back the same.
    assert Trial.model_validate_json(trial.model_dump_json()) == trial


def test_a_trials_attempts_share_one_budget() -> None:
    # The first wait sees the load fall after 2.25 s; the trial is contended all the same;
    # the wait before its re-measure has the 0.75 s left, runs out, and the machine is
    # then known busy: the second attempt is kept, flagged, and not measured a third time.
    m = FakeMachine([0.9, 0.9, 0.2, 0.9])
    runner, said, _ = _runner(m, [0.9, 0.9, 0.9], wait=3.0)
    trial = runner.trial(_Server(), 1, 0, warmup=False, case=Case(config_id="draft-k2",
                                                                    concurrency=1),
                         paired=True)
    assert trial.contended and trial.remeasured_outside_cores == [0.9]
    assert trial.busy_wait_s == pytest.approx(3.0)
    assert sum("waiting for outside CPU load" in line for line in said) == 2
    assert "(paired no-spec)" in said[0]
    assert said[-1].endswith("stayed busy since a wait ran out: kept as measured, its timing "
                             "checks not measured (busy)")


def test_a_machine_busy_through_a_whole_wait_is_not_measured_again() -> None:
    # A neighbour that outlasts the wait (a burner) would make every re-measure its
    # measurement again: each trial is measured once, flagged, until a check sees it quiet.
    m = FakeMachine([0.9])
    runner, said, _ = _runner(m, [0.9, 0.9], wait=3.0)
    first = runner.trial(_Server(), 1, 0, warmup=False)  # type: ignore[arg-type]
    second = runner.trial(_Server(), 1, 1, warmup=False)  # type: ignore[arg-type]
    assert first.contended and second.contended
    assert first.remeasured_outside_cores == second.remeasured_outside_cores == []
    assert not any("measuring it again" in line for line in said)
    # Once a check finds the machine quiet, a contended trial is measured again as before.
    runner, said, _ = _runner(FakeMachine([0.1]), [0.9, 0.1], wait=3.0)
    third = runner.trial(_Server(), 1, 2, warmup=False)  # type: ignore[arg-type]
    assert not third.contended and third.remeasured_outside_cores == [0.9]


def test_known_busy_keeps_a_contended_attempt_and_never_a_quiet_one() -> None:
    calls, attempt = _attempts([0.9, 0.9, 0.9])
    trial = measure_guarded(attempt, 0.25, 2, known_busy=lambda: True)  # type: ignore[arg-type]
    assert calls == [0] and trial.contended and trial.remeasured_outside_cores == []
    calls, attempt = _attempts([0.1])
    trial = measure_guarded(attempt, 0.25, 2, known_busy=lambda: True)  # type: ignore[arg-type]
    assert calls == [0] and not trial.contended
    calls, attempt = _attempts([0.9, 0.9, 0.1])
    trial = measure_guarded(attempt, 0.25, 2, known_busy=lambda: False)  # type: ignore[arg-type]
    assert calls == [0, 1, 2] and not trial.contended


def test_without_a_wait_the_trial_records_none_and_nothing_is_sampled() -> None:
    m = FakeMachine([0.9])
    runner, said, pids = _runner(m, [0.1], wait=0.0)
    trial = runner.trial(_Server(), 1, 0, warmup=False)  # type: ignore[arg-type]
    assert trial.busy_wait_s is None and pids == [] and said == []
    assert "busy_wait_s" not in trial.model_dump(mode="json")  # run files stay as they were


# --------------------------------------------------------------------------- the wait on this machine

BURNER = "import sys\nprint('burning', flush=True)\nwhile True:\n    pass\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason=unchecked("/proc on a real kernel", "run the tests on Linux"))
def test_real_burner_is_seen_and_the_wait_ends_at_its_budget() -> None:
    """A busy loop beside the suite is a neighbour: the wait sees it over the limit and
    gives up at its budget (2 s: this test burns one core for about that long)."""
    burner = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE, text=True)
    said: list[str] = []
    waiter = QuietWaiter(0.5, 2.0, say=said.append)
    try:
        assert burner.stdout is not None and burner.stdout.readline().strip() == "burning"
        waited = waiter.wait(lambda window: sample_outside([], window), "burner")
    finally:
        burner.kill()
        burner.wait(timeout=60)
    assert said and "waiting for outside CPU load to fall" in said[0], said
    assert waited is not None and waited <= 2.0 + contention.WINDOW_S
    assert "measuring anyway" in said[-1] and waiter.busy
