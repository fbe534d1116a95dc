"""The watchdog of one server's process group: kills the group when specperf dies.

PR_SET_PDEATHSIG reaches only the server's first process, and vLLM's engine core and
workers are its children: a SIGKILLed pytest would leave them running. So each server
gets this small process (started by path with ``python -I``: stdlib only, nothing of
specperf imported). It blocks reading a pipe whose only writer is the specperf process.
The pipe closes when that process exits, however it exits (SIGKILL included): then the
group gets SIGTERM, ``grace`` seconds, then SIGKILL. A normal stop writes one byte first,
and the watchdog leaves without signalling (the group id may be reused by then).

    python -I reaper.py FD PGID GRACE_S
"""

from __future__ import annotations

import os
import signal
import sys
import time

#: What specperf writes before closing the pipe on a normal stop.
STAND_DOWN = b"x"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def watch(fd: int, pgid: int, grace_s: float) -> None:
    try:
        data = os.read(fd, 1)
    except OSError:
        data = b""
    if data == STAND_DOWN:
        return
    _signal(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.1)
    _signal(pgid, signal.SIGKILL)


def main(argv: list[str]) -> None:
    # Ctrl-C in the terminal goes to the foreground group; the watchdog acts on the
    # pipe alone, so it does not die before it can clean up.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    watch(int(argv[1]), int(argv[2]), float(argv[3]))


if __name__ == "__main__":
    main(sys.argv)
