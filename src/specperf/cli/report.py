"""``specperf report RUN --out DIR``: every report of a run (and its comparison) into DIR."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from specperf.analysis.compare import as_run, compare_runs
from specperf.cli import options
from specperf.report import write_all
from specperf.report.console import render_comparison, render_run

PROG = "specperf"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "report", help="write charts, HTML, markdown and text reports of a run",
        description="Write run.json, report.html (self-contained), report.md, report.txt and "
                    "plots/*.png for a run into --out; with --baseline, also the comparison "
                    "and baseline overlays. Exit 0 (2 on bad input); `compare` is the gate.")
    p.add_argument("run", help="run.json (or a baseline file)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--baseline", metavar="FILE", help="baseline (or run) to compare against")
    p.add_argument("--step-summary", action="store_true",
                   help="also append the markdown to $GITHUB_STEP_SUMMARY (when set)")
    options.add_verbose(p)
    options.add_history(p)
    options.add_width(p)
    return p


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    result = as_run(options.load(args.run), args.run)
    base = options.load(args.baseline) if args.baseline else None
    history = options.history(args, args.baseline) if args.baseline else []
    cmp = None
    if base is not None:
        cmp = compare_runs(result, base, run_label=args.run, baseline_label=args.baseline,
                           history=history)
    out = Path(args.out)
    try:
        written = write_all(result, out, base, comparison=cmp, step_summary=args.step_summary)
    except OSError as exc:
        raise options.BadInput(f"{out}: cannot write the report: {exc}") from None
    print(render_run(result, width=args.width), end="")
    if cmp is not None:
        print(render_comparison(cmp, width=args.width, verbose=args.verbose), end="")
    print(f"\nwrote {len(written)} files to {out}:")
    for name, path in written.items():
        print(f"  {name:<36} {path}")
    return options.EXIT_OK
