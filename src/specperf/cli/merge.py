"""``specperf merge RUN.json ... --out MERGED.json``: one run file from a sharded run's.

What may be merged and what is refused: specperf.store.merge (its docstring is this
command's --help description).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specperf.cli import options
from specperf.store import merge
from specperf.store.files import atomic_write_text


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "merge",
        help="merge the run files of a sharded run into one",
        description=merge.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", metavar="RUN.json", help="run files of the shards")
    p.add_argument("--out", "-o", required=True, metavar="MERGED.json",
                   help="where to write the merged run file")
    return p


def run(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.runs]
    try:
        runs = [merge.read_run(p) for p in paths]
        merged = merge.merge_runs(runs, [str(p) for p in paths])
    except merge.MergeError as exc:
        # The whole message: a refused merge names every run and field that differ.
        print(f"specperf merge: {exc}", file=sys.stderr)
        return options.EXIT_BAD_INPUT
    out = Path(args.out)
    merged = merged.model_copy(update={"run_dir": str(out.resolve().parent)})
    atomic_write_text(out, merged.model_dump_json(indent=1))
    failed = len(merged.failed)
    print(f"{out}: {len(runs)} run(s), {len(merged.cases)} cases, {len(merged.checks)} checks"
          + (f", {failed} failed" if failed else ""))
    return options.EXIT_OK
