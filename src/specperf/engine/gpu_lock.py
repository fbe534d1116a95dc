"""The machine lock of GPU runs: two runs never share one GPU machine.

Two runs on one GPU box measure each other (and may not both fit in its memory). A run
that will use GPUs takes an exclusive ``flock`` on one file for the whole machine
(SPECPERF_GPU_LOCK, default /tmp/specperf-gpu.lock — /tmp, not a per-user directory, so
that every user's runs meet at the same file) before its first server and keeps it until
its servers are stopped. The kernel drops the lock when the process dies, SIGKILL
included, so a crashed run never leaves the box locked. The holder writes its PID and
what it runs into the file; a run that finds the lock taken exits with
:attr:`~specperf.config.exits.Exit.GPU_LOCKED` and names the holder.

A shared /tmp path is one any user can plant something at first (issue #54: a symlink to
a root-owned 0600 file was made world-writable and overwritten). So the lock is opened
only as a regular file of one link, never through a symlink (``O_NOFOLLOW``), and its
mode is opened to every user only when this call created it (``O_CREAT | O_EXCL``); a
path that is anything else — a symlink, a directory, a hard link, another user's file
this one cannot write — is :class:`GpuLockUnusable` (exit 2, naming the path and the
fix), never followed. A runner that needs to meet no other user's runs does best with a
lock in a directory it owns (SPECPERF_GPU_LOCK=$XDG_RUNTIME_DIR/specperf-gpu.lock).

CPU runs take no lock: CI runs several CPU runs side by side on purpose, and on a shared
CPU machine the contention guard (specperf.engine.contention) is what keeps a neighbour
out of the figures.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

from specperf.config import settings

__all__ = ["DEFAULT_PATH", "GpuLockUnusable", "GpuLocked", "acquire", "release", "take_for_run"]

DEFAULT_PATH = Path("/tmp/specperf-gpu.lock")  # noqa: S108 - one file every user shares

_held: dict[str, int] = {}  # path -> fd, for this process
_depth: dict[str, int] = {}


class GpuLocked(RuntimeError):
    """Another run holds this machine's GPU lock."""

    def __init__(self, path: Path, holder: str) -> None:
        self.path = path
        self.holder = holder
        super().__init__(
            f"another specperf run holds this GPU machine ({holder}; lock file {path}) — "
            "nothing was run. Wait for it to finish, or stop it; two runs on one GPU box "
            "measure each other. SPECPERF_GPU_LOCK_WAIT_S=N waits up to N seconds for it; "
            "SPECPERF_GPU_LOCK names another lock file (e.g. one per set of "
            "CUDA_VISIBLE_DEVICES), =off takes none")


class GpuLockUnusable(RuntimeError):
    """The lock path is not a lock file this run may use (a symlink, a directory, a hard
    link, another user's file it cannot write): nothing was run."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"GPU machine lock {path} {reason}, so it is not used — nothing was run. Fix: "
            "remove it if nothing of yours is behind it, or set SPECPERF_GPU_LOCK to a file in "
            "a directory you own (e.g. SPECPERF_GPU_LOCK=$XDG_RUNTIME_DIR/specperf-gpu.lock; "
            "=off takes none)")


#: Never through a symlink at the last component; a FIFO planted there does not block.
_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

_REASONS = {errno.ELOOP: "is a symbolic link", errno.EISDIR: "is a directory",
            errno.EACCES: "is not writable by this user (another user's file?)",
            errno.EPERM: "is not writable by this user (another user's file?)",
            errno.ENXIO: "is not a regular file"}


def _open_lock(path: Path) -> int:
    """The lock file's descriptor: created here (then opened to every user's runs), or an
    existing regular file of one link, never followed through a symlink; raises
    :class:`GpuLockUnusable`."""
    for _ in range(3):  # removed between the two opens by its owner: try again
        try:
            fd = os.open(path, _OPEN | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            pass
        except OSError as exc:
            raise GpuLockUnusable(path, _REASONS.get(exc.errno, f"cannot be created ({exc.strerror})")
                                  ) from None
        else:
            os.fchmod(fd, 0o666)  # every user's runs take the same lock; ours to open
            return fd
        try:
            fd = os.open(path, _OPEN)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise GpuLockUnusable(path, _REASONS.get(exc.errno, f"cannot be opened ({exc.strerror})")
                                  ) from None
        st = os.fstat(fd)
        reason = ("is not a regular file" if not stat.S_ISREG(st.st_mode)
                  else f"has {st.st_nlink} hard links" if st.st_nlink != 1 else None)
        if reason is None:
            return fd
        os.close(fd)
        raise GpuLockUnusable(path, reason)
    raise GpuLockUnusable(path, "keeps disappearing as it is opened")


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "its PID is not recorded"


def acquire(path: Path, wait_s: float = 0.0, what: str = "") -> None:
    """Take the lock at ``path`` (again, if this process holds it: counted); wait up to
    ``wait_s`` for its holder; raises :class:`GpuLocked`, or :class:`GpuLockUnusable`
    for a path that is not a lock file this run may use."""
    key = str(path)
    if key in _held:
        _depth[key] += 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_lock(path)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = _holder(fd)
                os.close(fd)
                raise GpuLocked(path, holder) from None
            time.sleep(1.0)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()}: {what or ' '.join(sys.argv)}\n".encode(), 0)
    _held[key] = fd
    _depth[key] = 1


def take_for_run(what: str, say: Callable[[str], None]) -> Path | None:
    """A GPU run's lock, at the file SPECPERF_GPU_LOCK names (waiting as
    SPECPERF_GPU_LOCK_WAIT_S says); None when it says off. Raises :class:`GpuLocked` or
    :class:`GpuLockUnusable`."""
    env = settings.current()
    where = env.gpu_lock
    if where is not None and where.strip().lower() in {"off", "0", "false", "no"}:
        return None
    path = Path(where).expanduser() if where else DEFAULT_PATH
    acquire(path, env.gpu_lock_wait_s, what=what)
    say(f"specperf: GPU machine lock {path} taken (SPECPERF_GPU_LOCK)")
    return path


def release(path: Path) -> None:
    """Give back one :func:`acquire`; the last one unlocks (closing the file)."""
    key = str(path)
    if key not in _held:
        return
    _depth[key] -= 1
    if _depth[key] > 0:
        return
    fd = _held.pop(key)
    del _depth[key]
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass
    os.close(fd)
