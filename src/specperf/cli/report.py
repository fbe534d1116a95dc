"""``specperf report RUN --out DIR``: every report of a run (and its comparison) into DIR."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specperf.analysis.judge.run import as_run
from specperf.analysis.run_report import build_run_report
from specperf.cli import options
from specperf.config.exits import Exit
from specperf.report import write_all
from specperf.report.console import plain, render_comparison, render_run

PROG = "specperf"

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK,)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "report", help="write charts, HTML, markdown and text reports of a run",
        description="Write run.json, report.html (self-contained), report.md, report.txt and "
                    "plots/*.png for a run into --out; with --baseline, also the comparison "
                    "and baseline overlays; a regression does not fail it: `compare` is the gate. "
                    "Other files in --out are left alone; --out must not hold an input or "
                    "another run's run.json.")
    p.add_argument("run", help="run.json (or a baseline file)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--baseline", metavar="FILE", help="baseline (or run) to compare against")
    p.add_argument("--step-summary", action="store_true",
                   help="also append the markdown to $GITHUB_STEP_SUMMARY (when set)")
    options.add_verbose(p)
    options.add_history(p)
    options.add_kept_runs(p)
    options.add_width(p)
    return p


#: What `specperf.report.write_all` writes into --out (and plots/ below it): the files this
#: command may replace. Every other file in --out is left alone.
WRITES = ("run.json", "comparison.json", "advice.json", "report.md", "report.html",
          "report.txt")


def _check_out(out: Path, args: argparse.Namespace, result: Any) -> None:
    """--out DIR: a directory; none of the inputs among the files written there; and its
    run.json, if any, this very run (re-rendering a report is fine; replacing another run's
    file, perhaps its only copy, is not)."""
    if out.exists() and not out.is_dir():
        raise options.BadInput(f"--out {out}: is a file; give a directory")
    written = [out / name for name in WRITES]
    inputs = [Path(p) for p in (args.run, args.baseline) if p]
    inputs += options.history_files(args, args.baseline)
    plots = out / "plots"
    for given in inputs:
        clash = next((w for w in written if options.same_file(w, given)), None)
        if clash is None and given.exists() and plots.is_dir():
            clash = next((w for w in plots.iterdir() if options.same_file(w, given)), None)
        if clash is not None:
            raise options.BadInput(
                f"--out {out}: would write {clash.name} over the input {given} (the same file); "
                "a command never writes over a file it reads — give another --out directory")
    options.check_outputs(options.step_summary_output(args), inputs)
    existing = out / "run.json"
    if existing.is_file():
        try:
            same = options.load(existing) == result
        except options.BadInput:
            same = False
        if not same:
            raise options.BadInput(
                f"--out {out}: {existing} holds another run, which the report would replace; "
                "give a new or empty --out directory (or move that file away)")


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    result = as_run(options.load(args.run), args.run)
    _check_out(Path(args.out), args, result)
    base = options.load(args.baseline) if args.baseline else None
    history = options.history(args, args.baseline) if args.baseline else []
    label: str | None = None
    notes: list[str] = []
    if base is not None or args.kept_runs:
        # The same choice `compare --kept-runs` makes, so the report shows the gate's verdicts.
        ref = options.reference(args, result, base, args.baseline, history)
        base, label, history, notes = ref.baseline, ref.baseline_label, ref.history, ref.notes
        if base is None:
            for note in ref.notes:
                print(plain(f"specperf: {note}"), file=sys.stderr)
    report = build_run_report(result, base, run_label=args.run, baseline_label=label,
                              history=history, notes=notes, advice_names_recorded_baseline=True)
    out = Path(args.out)
    try:
        written = write_all(report, out, step_summary=args.step_summary)
    except OSError as exc:
        raise options.BadInput(f"--out {out}: cannot write the report: {exc.strerror or exc} — "
                               "give a writable directory") from None
    print(render_run(result, width=args.width), end="")
    if report.comparison is not None:
        print(render_comparison(report.comparison, width=args.width, verbose=args.verbose),
              end="")
    print(f"\nwrote {len(written)} files to {out}:")
    for name, path in written.items():
        print(f"  {name:<36} {path}")
    return Exit.OK
