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
from specperf.config.exits import Exit
from specperf.schemas import RunResult
from specperf.store import merge

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK,)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "merge",
        help="merge the run files of a sharded run into one",
        description=merge.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", metavar="RUN.json", help="run files of the shards")
    p.add_argument("--out", "-o", required=True, metavar="MERGED.json",
                   help="where to write the merged run file (never one of the shards; an "
                        "existing file only with --force)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out file (never a shard being merged)")
    return p


def run(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.runs]
    out = Path(args.out)
    try:
        _check_out(out, paths, force=args.force)
        runs = [_read(p) for p in paths]
        merged = merge.merge_runs(runs, [str(p) for p in paths])
        merged = merged.model_copy(update={"run_dir": str(out.resolve().parent)})
        options.write_output("--out", out, merged.model_dump_json(indent=1))
    except (merge.MergeError, options.BadInput) as exc:
        # The whole message: a refused merge names every run and field that differ.
        print(f"specperf merge: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    failed = len(merged.failed)
    print(f"{out}: {len(runs)} run(s), {len(merged.cases)} cases, {len(merged.checks)} checks"
          + (f", {failed} failed" if failed else ""))
    return Exit.OK


def _check_out(out: Path, shards: list[Path], *, force: bool) -> None:
    """`merge A B --out A` would replace a shard with the merge: refused even with --force.
    Any other existing file is replaced only with --force (it may be the only copy of a
    run: merging into it by mistake must not cost it)."""
    for shard in shards:
        if options.same_file(out, shard):
            raise options.BadInput(
                f"--out {out}: is the shard {shard} (the same file); merging never writes over "
                "a run it reads — give another --out path")
    if out.is_dir():
        raise options.BadInput(f"--out {out}: is a directory; give a file path, e.g. {out / 'run.json'}")
    if out.exists() and not force:
        raise options.BadInput(
            f"--out {out}: exists; merge never replaces a file unasked — give a new path, or "
            "pass --force to replace it")


def _read(path: Path) -> RunResult:
    """One shard; a bad file is one line naming it and the field."""
    try:
        return merge.read_run(path)
    except merge.MergeError as exc:
        raise options.BadInput(options.one_line(str(exc))) from None
