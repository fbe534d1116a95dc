"""How steady is this machine's own speed? A memory-bound probe with nothing of vLLM in it.

A decode step of a small model on a CPU is memory bound: it streams the weights once per
token. This probe does the same with one matrix-vector product (``--mb`` of float32
weights, one torch thread) on the CPU the engine's threads are bound to
(``specperf.engine.server.engine_cpus``, or ``--cpu``), in a loop for ``--seconds``, and
records per second the median time of a product, the guest's CPU steal and the guest
kernel's memory activity (compaction, reclaim, THP, major faults from ``/proc/vmstat``).

What it tells: how far the machine's speed moves on its own from one ``--window`` of
seconds to the next (SD of the windows' log medians) and how often a second runs much
slower than the run's median (``--burst``, default 20 %), while the guest shows (or does
not show) a cause. On a VM whose host shares memory bandwidth, those bursts are what
moves a server start's TPOT (docs/validation.md, "Where the noise comes from"): a profile
cannot confirm a TPOT change much smaller than what this probe sees between windows.

    python benchmarks/machine_speed.py --seconds 120 [--out FILE.json]

Run it on a quiet machine; it prints a summary and, with ``--out``, writes every second.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# Counters of the guest kernel that would show it moving memory under the probe.
VMSTAT_KEYS = ("compact_stall", "compact_migrate_scanned", "pgscan_kswapd", "pgscan_direct",
               "pgmajfault", "thp_fault_alloc", "thp_collapse_alloc", "numa_pages_migrated")


def _steal_ticks() -> int | None:
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8])
    except (OSError, IndexError, ValueError):
        return None


def _vmstat() -> dict[str, int]:
    try:
        with open("/proc/vmstat") as f:
            pairs = (line.split() for line in f)
            return {k: int(v) for k, v in pairs if k in VMSTAT_KEYS}
    except OSError:
        return {}


def _default_cpu() -> int:
    try:
        from specperf.engine.server import engine_cpus
        return min(engine_cpus())
    except Exception:  # specperf not importable: the probe still runs, on any CPU
        return min(os.sched_getaffinity(0))


def summarize(seconds: list[dict[str, Any]], *, window: int, burst: float) -> dict[str, Any]:
    """Windows of ``window`` seconds: their median product time and the SD of their logs;
    bursts: seconds whose median is more than ``burst`` above the run's median second."""
    meds = [s["median_ms"] for s in seconds if s["median_ms"] is not None]
    if not meds:
        raise ValueError("no second with a measured product")
    overall = statistics.median(meds)
    windows = [statistics.median(meds[i:i + window]) for i in range(0, len(meds), window)
               if len(meds[i:i + window]) == window]
    logs = [math.log(w) for w in windows]
    slow = [s for s in seconds if s["median_ms"] is not None
            and s["median_ms"] > overall * (1 + burst)]
    return {
        "median_ms": overall,
        "window_s": window,
        "window_medians_ms": windows,
        "window_sd": statistics.stdev(logs) if len(logs) > 1 else None,
        "burst_threshold": burst,
        "burst_seconds": len(slow),
        "burst_worst": max((s["median_ms"] / overall - 1 for s in slow), default=None),
        "seconds": len(meds),
        "steal_ticks": sum(s["steal_ticks"] or 0 for s in seconds),
        "guest_memory_events": sum(sum(s["vmstat"].values()) for s in seconds),
    }


def probe(seconds: float, *, cpu: int, mb: float) -> list[dict[str, Any]]:
    import torch  # the engine's own library: the same kernels a decode step runs

    os.sched_setaffinity(0, {cpu})
    torch.set_num_threads(1)
    cols = 4096
    rows = max(1, int(mb * 2**20 / 4 / cols))
    weights, x = torch.randn(rows, cols), torch.randn(cols)
    for _ in range(3):
        weights @ x
    out: list[dict[str, Any]] = []
    end = time.monotonic() + seconds
    steal, vm = _steal_ticks(), _vmstat()
    while time.monotonic() < end:
        tick, times = time.monotonic() + 1.0, []
        while time.monotonic() < min(tick, end):
            t = time.perf_counter()
            weights @ x
            times.append(time.perf_counter() - t)
        steal2, vm2 = _steal_ticks(), _vmstat()
        out.append({
            "at": time.time(),
            "products": len(times),
            "median_ms": statistics.median(times) * 1000 if times else None,
            "steal_ticks": None if steal is None or steal2 is None else steal2 - steal,
            "vmstat": {k: vm2[k] - vm.get(k, 0) for k in vm2 if vm2[k] != vm.get(k, 0)},
        })
        steal, vm = steal2, vm2
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--cpu", type=int, default=None,
                   help="CPU to run on (default: the lowest CPU the engine's threads get)")
    p.add_argument("--mb", type=float, default=320.0,
                   help="float32 weights streamed per product (default 320, cpu-tiny's target)")
    p.add_argument("--window", type=int, default=15, help="seconds per window (default 15)")
    p.add_argument("--burst", type=float, default=0.2,
                   help="a second this much slower than the median is a burst (default 0.2)")
    p.add_argument("--out", type=Path, default=None, help="write the summary and every second")
    args = p.parse_args(argv)
    if args.seconds <= 0 or args.mb <= 0 or args.window < 1:
        p.error("--seconds, --mb and --window must be positive")
    cpu = _default_cpu() if args.cpu is None else args.cpu
    if cpu not in os.sched_getaffinity(0):
        p.error(f"--cpu {cpu}: this process may run on CPUs "
                f"{sorted(os.sched_getaffinity(0))} only")
    try:
        import torch  # noqa: F401 -- checked here so a missing torch is one line, not a traceback
    except ImportError:
        p.error("torch is not installed: run it with the test venv's python "
                "(.nox/tests/bin/python, made by `nox -s tests --install-only`)")
    seconds = probe(args.seconds, cpu=cpu, mb=args.mb)
    summary = {"cpu": cpu, "mb": args.mb,
               **summarize(seconds, window=args.window, burst=args.burst)}
    sd = summary["window_sd"]
    print(f"CPU {cpu}, {args.mb:g} MB a product: median {summary['median_ms']:.2f} ms; "
          f"{args.window} s windows move {'—' if sd is None else f'{sd * 100:.1f} %'} (SD); "
          f"{summary['burst_seconds']} of {summary['seconds']} s over "
          f"+{args.burst * 100:g} %"
          + (f" (worst +{summary['burst_worst'] * 100:.0f} %)" if summary["burst_worst"] else "")
          + f"; guest steal {summary['steal_ticks']} ticks, guest memory events "
            f"{summary['guest_memory_events']}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**summary, "per_second": seconds}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
