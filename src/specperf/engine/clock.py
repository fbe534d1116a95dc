"""Where a run's wall time went: one accumulator per run, charged by the parts that spend it.

The session owns one :class:`RunClock` and hands it to the server pool (starts, stops),
the trial runner (measured load, warm-up requests, attempts measured again under outside
CPU load, waits for a quiet machine before an attempt) and the case measurer
(fresh-server restarts); the plugin charges the reports. :meth:`RunClock.breakdown` turns
it into the run file's :class:`~specperf.schemas.TimeBreakdown`, where *other* is whatever
no phase claimed (collection, pytest, comparisons while measuring, the baseline's load).

Phases nest: the innermost open phase is charged, so no second is counted twice — a
warm-up inside a trial is a warm-up, not also a trial. A phase opened with ``whole=True``
keeps everything inside it (a confirmation restart's stop and start are the restart, not
a shutdown and a server start). An attempt found contended only after it ran is moved to
*re-measures* by :meth:`RunClock.recharge`.

One thread: phases are opened and closed where the run's work happens (the main thread).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from specperf.schemas import TimeBreakdown

__all__ = [
    "BUCKETS",
    "BUSY_WAITS",
    "REMEASURES",
    "REPORTS",
    "RESTARTS",
    "SERVER_STARTS",
    "SHUTDOWN",
    "TRIALS",
    "WARMUPS",
    "Phase",
    "RunClock",
]

SERVER_STARTS = "server_starts"
TRIALS = "trials"
WARMUPS = "warmups"
REMEASURES = "remeasures"
#: Waiting, before an attempt, for the outside load to fall below the guard's limit.
BUSY_WAITS = "busy_waits"
RESTARTS = "restarts"
REPORTS = "reports"
SHUTDOWN = "shutdown"
#: Every bucket a phase may be charged to; TimeBreakdown has a ``<bucket>_s`` field each.
BUCKETS = (SERVER_STARTS, TRIALS, WARMUPS, REMEASURES, BUSY_WAITS, RESTARTS, REPORTS, SHUTDOWN)


@dataclass(eq=False)
class Phase:
    """One open (or closed) phase: the bucket its time goes to, and every second charged
    while it was open, by bucket (its nested phases' too), so it can be moved later."""

    name: str
    #: Where time spent in it goes: its own bucket, or an enclosing ``whole`` phase's.
    bucket: str
    #: Nested phases are charged to ``bucket`` too (it, or an enclosing phase, is whole).
    absorbing: bool
    #: Opened inside an absorbing phase: charged to that one's bucket.
    absorbed: bool
    seq: int
    charged: dict[str, float] = field(default_factory=dict)
    closed: bool = False

    @property
    def seconds(self) -> float:
        return sum(self.charged.values())


class RunClock:
    """Seconds per bucket of one run; ``now`` is the clock read (time.perf_counter; tests
    hand in a fake one)."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self._now = now
        self.started = now()
        self._mark = self.started
        self._totals: dict[str, float] = dict.fromkeys(BUCKETS, 0.0)
        self._stack: list[Phase] = []
        self._seq = 0

    def _settle(self) -> None:
        """Charge the time since the last event to the innermost open phase's bucket."""
        t = self._now()
        dt = max(0.0, t - self._mark)
        self._mark = t
        if not self._stack or dt == 0.0:
            return
        bucket = self._stack[-1].bucket
        self._totals[bucket] += dt
        for p in self._stack:
            p.charged[bucket] = p.charged.get(bucket, 0.0) + dt

    @contextmanager
    def phase(self, name: str, *, whole: bool = False) -> Iterator[Phase]:
        """Charge the time inside to ``name`` (one of :data:`BUCKETS`), less any nested
        phase's; with ``whole``, nested phases are charged to ``name`` too."""
        if name not in BUCKETS:
            raise ValueError(f"unknown time bucket {name!r}; known: {', '.join(BUCKETS)}")
        self._settle()
        outer = self._stack[-1] if self._stack else None
        absorbed = outer is not None and outer.absorbing
        self._seq += 1
        p = Phase(name=name, bucket=outer.bucket if outer is not None and absorbed else name,
                  absorbing=whole or absorbed, absorbed=absorbed, seq=self._seq)
        self._stack.append(p)
        try:
            yield p
        finally:
            self._settle()
            # Phases close in the order they opened (context managers); anything else is
            # a bug in the caller, not a reason to lose the run's figures.
            if p in self._stack:
                del self._stack[self._stack.index(p):]
            p.closed = True

    def recharge(self, done: Phase, to: str) -> None:
        """Move every second charged while the closed phase ``done`` was open to ``to`` (an
        attempt discarded after it ran is a re-measure, its warm-up included). A phase
        inside a ``whole`` one stays where that one put it."""
        if to not in BUCKETS:
            raise ValueError(f"unknown time bucket {to!r}; known: {', '.join(BUCKETS)}")
        if not done.closed:
            raise ValueError(f"phase {done.name!r} is still open: recharge it once closed")
        if done.absorbed:
            return
        moved = {b: s for b, s in done.charged.items() if b != to and s}
        if not moved:
            return
        # The phases still open that were opened before it contain it: their record of
        # what was charged inside them moves too.
        holders = [done, *(p for p in self._stack if p.seq < done.seq)]
        for bucket, s in moved.items():
            self._totals[bucket] -= s
            self._totals[to] += s
            for h in holders:
                h.charged[bucket] = h.charged.get(bucket, 0.0) - s
                h.charged[to] = h.charged.get(to, 0.0) + s

    def seconds(self, bucket: str) -> float:
        """Seconds charged to ``bucket`` so far (open phases up to now)."""
        self._settle()
        return self._totals[bucket]

    def elapsed(self) -> float:
        return max(0.0, self._now() - self.started)

    def breakdown(self, wall_s: float | None = None) -> TimeBreakdown:
        """The buckets now (open phases counted up to now) against ``wall_s`` (default:
        the time since the clock was made); *other* is the rest, never negative."""
        self._settle()
        wall = self.elapsed() if wall_s is None else max(0.0, wall_s)
        parts = {f"{b}_s": max(0.0, s) for b, s in self._totals.items()}
        return TimeBreakdown(wall_s=wall, other_s=max(0.0, wall - sum(parts.values())), **parts)
