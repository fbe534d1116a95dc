"""The contention guard (specperf.engine.contention): /proc parsing and arithmetic, the
retry policy, the real /proc of this machine, and the session's limit. How the outside load
reads in run files, reports and compare: tests/unit/analysis/test_outside_load.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specperf.engine import contention
from specperf.engine.contention import (
    CpuSnapshot,
    ProcStat,
    is_contended,
    measure_guarded,
    outside_cores,
    parse_pid_stat,
    parse_system_busy,
    take_snapshot,
    tree_ticks,
)
from specperf.engine.session import PerfOptions, PerfSession
from specperf.schemas import Trial
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


# --------------------------------------------------------------------------- the session


@pytest.mark.parametrize(("option", "limit"), [(None, 0.25), (0.0, 0.0), (1.25, 1.25)])
def test_option_overrides_the_profiles_limit(tmp_path: Path, option: float | None,
                                             limit: float) -> None:
    session = PerfSession(options=PerfOptions(
        profile=str(CPU_CI_PROFILE), rootdir=REPO,
        run_dir=tmp_path, json_path=None, baselines_dir=tmp_path, update_baselines=False,
        force=False, repeats=None, dataset=None, models_cache=tmp_path,
        max_outside_cores=option), say=lambda _: None)
    assert session.max_outside_cores == limit
