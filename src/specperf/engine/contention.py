"""The contention guard: how much CPU *other* processes used while a trial ran.

On a shared machine (a CPU CI runner, a GPU host whose CPU-side scheduler and tokenizer
also matter) a noisy neighbour slows a trial down exactly like a vLLM regression would.
Around every trial the suite takes a :class:`CpuSnapshot` -- the machine's busy CPU time
(``/proc/stat``), the CPU time of the vLLM servers' process trees and of the suite's own
process (``/proc/PID/stat``) -- and the difference says how many cores' worth of foreign
processes ran meanwhile::

    outside_cores = (Δ busy − Δ server trees − Δ own) / (ticks per second × wall seconds)

That is the CPU the others *got*, and on a machine the servers fill it under-reads them:
at concurrency 2 on 2 cores the scheduler shares the cores between the servers' threads
and a one-core neighbour, which then gets 0.1–0.25 cores while it still doubles the time
to first token (issue #13's busy run). So the snapshot also reads the others' *demand* --
per thread, the time it ran plus the time it waited on a run queue (``/proc/PID/task/TID/
schedstat``) -- and the outside load is the larger of the two readings. A busy loop is
always running or waiting to run, so it reads one core of demand whatever share of the
CPU the servers leave it. Demand is counted for threads seen in both snapshots; a
short-lived process that starts and ends within a trial is caught by the busy-time
reading instead.

A trial above the profile's ``load.max_outside_cores`` is measured again (up to
``load.contended_retries`` times); one still above it after that is kept and marked
``contended``, and the reports and ``specperf compare`` say so.

Before a trial, and before each of its re-measurements, :class:`QuietWaiter` checks the
outside load over a short window and, when it is over the limit, waits for it to fall --
sampling it in one-second windows, for at most the profile's ``load.busy_wait_s`` per
trial -- so that a neighbour's burst costs a wait, not a re-measured or contended trial.

The arithmetic and the parsing are pure functions of the /proc texts; :func:`take_snapshot`
is the thin reader. Where /proc is missing or unreadable (not Linux, a locked-down
container) the load is unknown (None), never an error.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from specperf.schemas import Trial

__all__ = [
    "PROBE_S",
    "WINDOW_S",
    "CpuSnapshot",
    "ProcStat",
    "QuietWaiter",
    "is_contended",
    "measure_guarded",
    "outside_cores",
    "parse_pid_stat",
    "parse_schedstat",
    "parse_system_busy",
    "sample_outside",
    "take_snapshot",
    "tree_ticks",
]

PROC = "/proc"

# /proc/stat "cpu" line: user nice system idle iowait irq softirq steal guest guest_nice.
# guest and guest_nice are already inside user and nice, so they are not added again;
# steal (time the hypervisor gave to other guests) is foreign load like any other.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


# --------------------------------------------------------------------------- parsing


def parse_system_busy(proc_stat: str) -> int:
    """Busy jiffies over all CPUs from the text of /proc/stat: user + nice + system + irq
    + softirq + steal (idle and iowait are idle)."""
    for line in proc_stat.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(x) for x in parts[1:]]
            return sum(values[i] for i in _BUSY_FIELDS if i < len(values))
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


@dataclass(frozen=True)
class ProcStat:
    """What the guard needs of one /proc/PID/stat, in clock ticks."""

    pid: int
    ppid: int
    utime: int
    stime: int
    #: CPU time of its children that have exited and been waited for: where a process's
    #: ticks go when it ends during a trial, so they are not lost from the tree.
    cutime: int
    cstime: int


def parse_pid_stat(text: str) -> ProcStat:
    """One /proc/PID/stat line. The command name (field 2) is in parentheses and may hold
    spaces and parentheses itself, so the fields are counted from the last ')'."""
    head, sep, rest = text.rpartition(")")
    if not sep:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    pid = int(head.split("(", 1)[0])
    f = rest.split()
    # After the name: state(3) ppid(4) … utime(14) stime(15) cutime(16) cstime(17).
    return ProcStat(pid=pid, ppid=int(f[1]), utime=int(f[11]), stime=int(f[12]),
                    cutime=int(f[13]), cstime=int(f[14]))


def parse_schedstat(text: str) -> int:
    """Nanoseconds one thread ran plus waited on a run queue, from the text of
    /proc/PID/task/TID/schedstat ("run_ns wait_ns timeslices")."""
    run_ns, wait_ns, *_ = text.split()
    return int(run_ns) + int(wait_ns)


def tree_pids(procs: Mapping[int, ProcStat], roots: Iterable[int]) -> set[int]:
    """The processes ``roots`` and all their descendants (by ppid) that are in ``procs``."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    seen: set[int] = set()
    stack = [r for r in roots if r in procs]
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, ()))
    return seen


def tree_ticks(procs: Mapping[int, ProcStat], roots: Iterable[int]) -> int:
    """CPU ticks of the processes ``roots`` and all their descendants (by ppid), counting
    reaped children through their parent's cutime/cstime. Roots that are gone count 0."""
    return sum(procs[pid].utime + procs[pid].stime + procs[pid].cutime + procs[pid].cstime
               for pid in tree_pids(procs, roots))


# --------------------------------------------------------------------------- arithmetic


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU time at one instant, in clock ticks, and the monotonic wall clock in seconds."""

    wall_s: float
    system_busy: int
    server_tree: int
    own: int
    #: Per thread id of the other processes (not the servers' trees, not this process):
    #: nanoseconds run plus waited on a run queue; None where schedstat cannot be read.
    outside_demand_ns: Mapping[int, int] | None = None


def outside_demand_cores(before: CpuSnapshot, after: CpuSnapshot) -> float | None:
    """Cores' worth of CPU the other processes' threads used or waited for between two
    snapshots, over the threads seen in both; None if either snapshot has no demand or no
    time passed."""
    wall = after.wall_s - before.wall_s
    if wall <= 0 or before.outside_demand_ns is None or after.outside_demand_ns is None:
        return None
    was = before.outside_demand_ns
    ns = sum(max(0, now - was[tid]) for tid, now in after.outside_demand_ns.items() if tid in was)
    return ns / (1e9 * wall)


def outside_cores(before: CpuSnapshot, after: CpuSnapshot, ticks_per_s: float) -> float | None:
    """Cores' worth of other processes between two snapshots -- the larger of the busy
    time they got and the CPU their threads used or waited for (module docstring); None
    if no time passed.

    Clamped at 0: ticks are sampled per process, so a quiet machine can come out a tick
    or two below zero, which means "nothing", not "negative load"."""
    wall = after.wall_s - before.wall_s
    if wall <= 0 or ticks_per_s <= 0:
        return None
    other = ((after.system_busy - before.system_busy) - (after.server_tree - before.server_tree)
             - (after.own - before.own))
    used = max(0.0, other / (ticks_per_s * wall))
    demand = outside_demand_cores(before, after)
    return used if demand is None else max(used, demand)


def is_contended(outside: float | None, max_outside_cores: float | None) -> bool:
    """Over the limit? An unknown load, or a limit that is None or ≤ 0 (guard off), is not."""
    if outside is None or max_outside_cores is None or max_outside_cores <= 0:
        return False
    return outside > max_outside_cores


# --------------------------------------------------------------------------- reading


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


def read_procs(proc: str = PROC) -> dict[int, ProcStat]:
    """Every process's stat; processes that end while being read are skipped."""
    out: dict[int, ProcStat] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            p = parse_pid_stat(_read(f"{proc}/{name}/stat"))
        except (OSError, ValueError, IndexError):
            continue
        out[p.pid] = p
    return out


def read_demand(pids: Iterable[int], proc: str = PROC) -> dict[int, int] | None:
    """Run plus run-queue wait, in ns, of every thread of ``pids``; None when the kernel
    keeps no schedstat (CONFIG_SCHED_INFO off). Threads that end while read are skipped."""
    out: dict[int, int] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"{proc}/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                out[int(tid)] = parse_schedstat(_read(f"{proc}/{pid}/task/{tid}/schedstat"))
            except FileNotFoundError:
                if not os.path.exists(f"{proc}/{pid}/task/{tid}"):
                    continue  # ended while being read
                return None  # the thread is there, its schedstat is not: no schedstat here
            except (OSError, ValueError):
                continue
    return out


def ticks_per_second() -> float | None:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return None


def take_snapshot(server_pids: Sequence[int], proc: str = PROC) -> CpuSnapshot | None:
    """The machine's, the servers' trees' and this process's CPU time now; None where
    /proc cannot tell (not Linux, unreadable)."""
    if not sys.platform.startswith("linux") or not os.path.isdir(proc):
        return None
    try:
        wall = time.monotonic()
        busy = parse_system_busy(_read(f"{proc}/stat"))
        procs = read_procs(proc)
    except (OSError, ValueError):
        return None
    me = procs.get(os.getpid())
    if me is None:
        return None
    # Our own children are the servers (counted in their trees); only our own ticks here.
    servers = tree_pids(procs, server_pids)
    others = [pid for pid in procs if pid not in servers and pid != me.pid]
    return CpuSnapshot(wall_s=wall, system_busy=busy, server_tree=tree_ticks(procs, server_pids),
                       own=me.utime + me.stime, outside_demand_ns=read_demand(others, proc))


def measured_outside_cores(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    if before is None or after is None:
        return None
    tps = ticks_per_second()
    return None if tps is None else outside_cores(before, after, tps)


# --------------------------------------------------------------------------- the guard


def measure_guarded(
    attempt: Callable[[int], Trial],
    max_outside_cores: float | None,
    retries: int,
    on_discard: Callable[[Trial, int], None] | None = None,
    known_busy: Callable[[], bool] | None = None,
) -> Trial:
    """Run ``attempt(n)`` (n = 0, 1, …) until a trial is not contended, at most
    ``retries`` extra times. The kept trial lists the outside load of the attempts it
    replaced (``remeasured_outside_cores``); if the last one is still over the limit it is
    kept and marked ``contended`` -- a run is never lost to a busy neighbour, only flagged.
    ``on_discard(trial, n)`` is told about each discarded attempt before attempt n runs.

    ``known_busy()`` true after a contended attempt keeps it at once: the machine has
    stayed busy through a whole wait (:attr:`QuietWaiter.busy`), so another attempt would
    only measure the same neighbour again (measured beside a one-core burner: 46 attempts
    re-measured in each of two cpu-tiny runs, 928 of a run's 1566 s, and not one came out
    quiet; docs/validation.md)."""
    discarded: list[float] = []
    n = 0
    while True:
        trial = attempt(n)
        over = is_contended(trial.outside_cores, max_outside_cores)
        if not over or n >= retries or (known_busy is not None and known_busy()):
            return trial.model_copy(update={"remeasured_outside_cores": discarded,
                                            "contended": over})
        assert trial.outside_cores is not None
        discarded.append(trial.outside_cores)
        n += 1
        if on_discard is not None:
            on_discard(trial, n)


# --------------------------------------------------------------------------- the wait

#: The check before every trial: short, because a quiet run pays it once per trial (and
#: per re-measurement), in wall time nothing else uses. At 100 ticks/s a quarter second resolves
#: the default limit of 0.25 cores (6 ticks of a core); a check that misreads a quiet
#: machine as busy costs one more window, one that misreads a busy one is caught by the
#: guard after the trial.
PROBE_S = 0.25
#: The windows of the wait itself: a second's ticks read steadily (100 per core).
WINDOW_S = 1.0


def sample_outside(server_pids: Sequence[int], window_s: float,
                   sleep: Callable[[float], None] = time.sleep) -> float | None:
    """Cores' worth of other processes over the next ``window_s`` seconds (the same
    snapshots and arithmetic as a trial's, the servers' trees excluded); None where /proc
    cannot tell. Blocks for the window."""
    before = take_snapshot(server_pids)
    sleep(window_s)
    return measured_outside_cores(before, take_snapshot(server_pids))


@dataclass
class QuietWaiter:
    """Waits, bounded, for the outside load to fall below the guard's limit.

    ``wait``'s ``sample(window_s)`` measures the outside load over a window of that many
    seconds (blocking for it; :func:`sample_outside` with the run's server pids);
    ``clock`` is the monotonic clock the budget is counted on. Both are parameters so that
    tests drive the wait with a fake machine and no real sleeps.

    State across trials: once a wait has run out its budget with the load still over the
    limit, the machine is taken to be busy, and later checks do not wait again until one
    finds it below the limit -- otherwise a neighbour that stays busy would add the whole
    budget to every trial of the run (and to each re-measurement) and measure nothing
    better; the guard then re-measures and flags those trials as it always did.
    """

    #: The guard's limit (≤ 0: guard off, so no wait).
    limit: float
    #: Most seconds one trial waits, over its first attempt and its re-measurements
    #: together (≤ 0: no check, no wait).
    budget_s: float
    say: Callable[[str], None] = print
    clock: Callable[[], float] = time.monotonic
    probe_s: float = PROBE_S
    window_s: float = WINDOW_S
    #: A wait ran out with the load still over the limit, and no check has seen it below
    #: since.
    busy: bool = False

    @property
    def on(self) -> bool:
        return self.limit > 0 and self.budget_s > 0

    def wait(self, sample: Callable[[float], float | None], what: str,
             budget_s: float | None = None) -> float | None:
        """Check the outside load and, if it is over the limit, wait for it to fall for at
        most ``budget_s`` (default: the whole budget) from the start of the check, plus
        at most one window. Returns the seconds spent checking and waiting, or None when
        nothing was checked (guard or wait off, no budget left, load unknown).

        ``what`` names the trial in the two lines said when a wait starts and ends."""
        budget = self.budget_s if budget_s is None else min(budget_s, self.budget_s)
        if not self.on or budget <= 0:
            return None
        start = self.clock()
        load = sample(min(self.probe_s, budget))
        if load is None:
            return None
        if not is_contended(load, self.limit):
            self.busy = False
            return self.clock() - start
        if self.busy:
            # Busy through a whole budget already: measure at once (see the class).
            return self.clock() - start
        self.say(f"specperf: {what}: waiting for outside CPU load to fall ({load:.2f} cores "
                 f"> limit {self.limit:g}), up to {budget:g} s")
        while True:
            elapsed = self.clock() - start
            if elapsed >= budget:
                break
            # Never a window shorter than the check's: a sliver of a second reads a few
            # ticks, which is noise.
            window = max(self.probe_s, min(self.window_s, budget - elapsed))
            sampled = sample(window)
            if sampled is None:
                waited = self.clock() - start
                self.say(f"specperf: {what}: outside CPU load unknown after {waited:.0f} s: "
                         "measuring")
                return waited
            load = sampled
            if not is_contended(load, self.limit):
                waited = self.clock() - start
                self.say(f"specperf: {what}: outside CPU load fell to {load:.2f} cores after "
                         f"{waited:.0f} s")
                return waited
        waited = self.clock() - start
        self.busy = True
        self.say(f"specperf: {what}: outside CPU load still {load:.2f} cores after "
                 f"{waited:.0f} s: measuring anyway (later trials do not wait again until "
                 "it has fallen)")
        return waited
