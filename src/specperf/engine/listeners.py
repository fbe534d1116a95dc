"""Who listens on a loopback port: this server's process group, or someone else.

free_port() cannot reserve the port it picks; another program may bind it before vLLM
does, and answer /health. So the health check asks the kernel: the LISTEN sockets on the
port that accept 127.0.0.1 (``/proc/net/tcp`` and ``tcp6``, by inode), and which of them
are held open by a process of the server's group (``/proc/PID/fd``; the group from
``/proc/PID/stat``). Linux only: elsewhere :func:`owners` is None and the caller falls
back to its other checks.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Owners", "group_pids", "listening_inodes", "owners", "socket_inodes"]

PROC = Path("/proc")
_LISTEN = "0A"
#: Local addresses whose listener takes connections to 127.0.0.1.
_LOOPBACK_REACHING = {ipaddress.ip_address(a) for a in
                      ("127.0.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1", "::ffff:0.0.0.0")}  # noqa: S104 - read, not bound


def _address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_addr)
    # The kernel prints each 32-bit word in host (little-endian) order.
    fixed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(fixed)


def listening_inodes(port: int, tables: list[str]) -> set[int]:
    """Inodes of the LISTEN sockets on ``port`` reachable at 127.0.0.1, from the texts of
    /proc/net/tcp and /proc/net/tcp6."""
    found: set[int] = set()
    for text in tables:
        for line in text.splitlines()[1:]:
            parts = line.split()
            if len(parts) < 10 or parts[3] != _LISTEN:
                continue
            addr, _, port_hex = parts[1].partition(":")
            if int(port_hex, 16) != port:
                continue
            try:
                ip = _address(addr)
            except ValueError:
                continue
            if ip in _LOOPBACK_REACHING:
                found.add(int(parts[9]))
    return found


def group_pids(pgid: int) -> list[int]:
    """The processes of process group ``pgid``."""
    pids = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def socket_inodes(pid: int) -> set[int]:
    out: set[int] = set()
    try:
        fds = os.listdir(PROC / str(pid) / "fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(PROC / str(pid) / "fd" / fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


@dataclass(frozen=True)
class Owners:
    #: A listener on the port belongs to the group.
    ours: bool
    #: Inodes of listeners on the port that do not.
    foreign: frozenset[int]

    def describe_foreign(self) -> str:
        """Who holds the foreign listeners: "pid 123 (python3)", as far as /proc tells."""
        holders = []
        for entry in PROC.iterdir():
            if entry.name.isdigit() and socket_inodes(int(entry.name)) & self.foreign:
                try:
                    comm = (entry / "comm").read_text().strip()
                except OSError:
                    comm = "?"
                holders.append(f"pid {entry.name} ({comm})")
        return ", ".join(holders) or "a process this user cannot see"


def owners(port: int, pgid: int) -> Owners | None:
    """Whether the group ``pgid`` listens on ``port``, and the listeners that are not its;
    None where /proc/net/tcp cannot be read."""
    tables = []
    for name in ("tcp", "tcp6"):
        try:
            tables.append((PROC / "net" / name).read_text())
        except OSError:
            continue
    if not tables:
        return None
    listening = listening_inodes(port, tables)
    mine: set[int] = set()
    for pid in group_pids(pgid):
        mine |= socket_inodes(pid)
    return Owners(ours=bool(listening & mine), foreign=frozenset(listening - mine))
