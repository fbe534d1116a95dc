"""``specperf advise RUN.json``: explain a run with the speculative-decoding cost model.

Examples::

    specperf advise .specperf/runs/<run>/run.json
    specperf advise run.json --baseline baselines/cpu-tiny/<hardware-id>.json
    specperf advise run.json --json

The tables and sentences are specperf.report.advice's (the reports print the same ones).
Exit codes: 0 advice printed (overhead findings included: this command explains, the
gates decide), 2 bad input (unreadable, truncated or invalid JSON: one line naming the file).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from specperf.analysis.advice import advise
from specperf.analysis.judge.run import as_run, compare_runs
from specperf.analysis.overhead_regression import DEFAULT_ACCEPTANCE_TOLERANCE, DEFAULT_TOLERANCE
from specperf.cli import options
from specperf.config.exits import Exit
from specperf.report.advice import advice_console

PROG = "specperf advise"
#: Columns of the tables when stdout is not a terminal and COLUMNS is unset.
PIPED_WIDTH = 150

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK,)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "advise",
        help="explain a run: measured vs predicted gain, costs, break-even, best k, crossover",
        description=(
            "Fit the speculative-decoding cost model to a run file and print, per spec server "
            "config and concurrency: measured gain (no-spec TPOT / spec TPOT), gain predicted "
            "from the other k of the same draft, fitted cost ratio, break-even acceptance, "
            "best k' <= k and the crossover concurrency. With --baseline, also report overhead "
            "regressions (acceptance unchanged, gain below prediction, and a timing check of "
            "the case a decided regression against that baseline) and what moved."
        ),
    )
    p.add_argument(
        "run", metavar="RUN.json", type=Path, help="a run file (run.json), or a baseline file"
    )
    p.add_argument(
        "--baseline", metavar="FILE", type=Path, default=None,
        help="a baseline or an earlier run file to look for overhead regressions against",
    )
    options.add_history(p)
    p.add_argument(
        "--tolerance", metavar="T", type=float, default=DEFAULT_TOLERANCE,
        help=f"relative gain shortfall that counts (default {DEFAULT_TOLERANCE})",
    )
    p.add_argument(
        "--acceptance-tolerance", metavar="A", type=float, default=DEFAULT_ACCEPTANCE_TOLERANCE,
        help="absolute per-position change still counted as 'acceptance unchanged' "
        f"(default {DEFAULT_ACCEPTANCE_TOLERANCE})",
    )
    options.add_json(p, "the RunAdvice")
    return p


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    tol = float(args.tolerance)
    acc_tol = float(args.acceptance_tolerance)
    if not (math.isfinite(tol) and 0.0 <= tol < 1.0):
        raise options.BadInput(f"--tolerance: must be in [0, 1), got {args.tolerance!r}")
    if not (math.isfinite(acc_tol) and 0.0 <= acc_tol <= 1.0):
        raise options.BadInput(
            f"--acceptance-tolerance: must be in [0, 1], got {args.acceptance_tolerance!r}"
        )
    result = as_run(options.load(args.run), args.run)
    base = options.load(args.baseline) if args.baseline is not None else None
    comparison = None
    if base is not None:
        # The findings are kept where the run's verdicts against this baseline back them,
        # as in the run's own report (the same comparison as `specperf compare`).
        judged = compare_runs(result, base, history=options.history(args, args.baseline))
        comparison = judged if not judged.refusals else None
    advice = advise(
        result, base, tolerance=tol, acceptance_tolerance=acc_tol,
        baseline_name=str(args.baseline) if args.baseline is not None else None,
        comparison=comparison,
    )
    if base is not None and comparison is None:
        advice.notes.append("the findings are not checked against verdicts: the comparison "
                            "with this baseline was refused (`specperf compare` says why)")
    if args.json:
        sys.stdout.write(advice.model_dump_json(indent=2) + "\n")
        return Exit.OK
    console = options.stdout_console(PIPED_WIDTH)
    head = f"advice for {args.run}"
    if advice.profile_name:
        head += f" (profile {advice.profile_name}, {advice.hardware}, vLLM {advice.vllm_version})"
    console.print(head)
    console.print(advice_console(advice))
    return Exit.OK
