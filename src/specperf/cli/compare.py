"""``specperf compare RUN BASELINE``: the offline gate — the verdict and the exit status the
perf run's pytest gave (specperf.analysis.judge.exit_status; the codes: ``EXITS``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specperf.analysis.judge.run import as_run
from specperf.analysis.run_report import build_run_report
from specperf.cli import options
from specperf.config.exits import Exit
from specperf.report.console import plain, render_comparison
from specperf.report.markdown import render_markdown, write_step_summary

PROG = "specperf"

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK, Exit.FAILED, Exit.INCONCLUSIVE, Exit.BUSY)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compare", help="compare a run against a baseline: the offline gate, exiting as "
                        "the perf run would",
        description="Compare a run (or a baseline) against a baseline, per case and metric, "
                    "with a Mann-Whitney test and a bootstrap CI, under the comparison rules "
                    "the run recorded (its profile's [compare] table; else the defaults). "
                    "The outcome of every case and metric is the one the perf run's pytest "
                    "gave it, and so is the exit status; incomparable files (other hardware "
                    "or profile) are bad input. With --kept-runs DIR the run "
                    "is judged against its own recent kept runs once there are enough "
                    "(docs/baselines.md, the nightly lifecycle); the first run of a profile, "
                    "hardware and vLLM, with nothing to compare with, passes and says so.")
    p.add_argument("run", help="run.json (or a baseline file)")
    p.add_argument("baseline", nargs="?", default=None,
                   help="baseline file (or another run.json); optional with --kept-runs")
    p.add_argument("--markdown", metavar="PATH", help="also write the diff as GitHub markdown")
    options.add_json_out(p, "the comparison")
    p.add_argument("--step-summary", action="store_true",
                   help="also append the markdown to $GITHUB_STEP_SUMMARY (when set)")
    options.add_verbose(p)
    p.add_argument("--force", action="store_true",
                   help="compare even across hardware or profile changes (never a gate)")
    options.add_history(p)
    options.add_kept_runs(p)
    options.add_width(p)
    return p


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    json_out = options.json_out_path(args, f"{PROG} compare")
    outputs = {"--json-out" if args.json_out else "--json": json_out} if json_out else {}
    if args.markdown:
        outputs["--markdown"] = Path(args.markdown)
    outputs |= options.step_summary_output(args)
    # Before anything is read or written: `compare RUN BASE --json-out BASE` (arguments
    # slipped) must not replace the baseline with the comparison.
    options.check_outputs(outputs, [p for p in (args.run, args.baseline) if p]
                          + options.history_files(args, args.baseline))
    result = options.load(args.run)
    base = options.load(args.baseline) if args.baseline else None
    history = options.history(args, args.baseline) if args.baseline else []
    ref = options.reference(args, result, base, args.baseline, history)
    if ref.baseline is None:
        # The first night of this profile, hardware and vLLM: said, never a silent pass.
        for note in ref.notes:
            print(plain(f"specperf: {note}"), file=sys.stderr)
        return Exit.OK
    # Judged again: the comparison's outcomes replace the run's checks it makes again.
    report = build_run_report(result, ref.baseline, run_label=args.run,
                              baseline_label=ref.baseline_label, force=args.force,
                              history=ref.history, notes=ref.notes, judged_again=True,
                              with_advice=False)
    cmp = report.comparison
    assert cmp is not None  # compared with ref.baseline
    if options.wants_json(args):
        print(cmp.model_dump_json(indent=1))
    else:
        print(render_comparison(cmp, width=args.width, verbose=args.verbose), end="")
    if json_out is not None:
        opt = "--json-out" if args.json_out else "--json"
        options.write_output(opt, json_out, cmp.model_dump_json(indent=1) + "\n")
    if args.markdown or args.step_summary:
        as_a_run = as_run(result, args.run)
        if args.markdown:
            options.write_output("--markdown", Path(args.markdown),
                                 render_markdown(as_a_run, cmp, verbose=args.verbose))
        if args.step_summary:
            try:
                write_step_summary(as_a_run, cmp)
            except OSError as exc:
                raise options.BadInput(f"$GITHUB_STEP_SUMMARY: cannot append to it: "
                                       f"{exc.strerror or exc}") from None
    for r in cmp.refusals:
        print(plain(f"specperf: refused: {r}"), file=sys.stderr)
    # The run's own checks that a comparison does not make (requests, floors) count too:
    # the exit status is the pytest run's, from one list (analysis.judge.exit_status).
    return report.exit_status
