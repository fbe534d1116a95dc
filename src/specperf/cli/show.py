"""``specperf show FILE``: the provenance and measurements of a run or a baseline."""

from __future__ import annotations

import argparse
from typing import Any

from specperf.cli import options
from specperf.config.exits import Exit
from specperf.report.console import plain, render_summary

PROG = "specperf"

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK,)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("show", help="summarise a run or a baseline file",
                              description="Print the provenance and measurements of a run or a "
                                          "baseline (told apart by its `kind` field).")
    p.add_argument("file", help="run.json or a baseline file")
    options.add_width(p)
    return p


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    result = options.load(args.file)
    print(plain(f"{args.file}: {result.kind} (schema {result.schema_version})"))
    print(render_summary(result, width=args.width), end="")
    return Exit.OK
