"""``specperf fetch-sharegpt DIR``: download the ShareGPT dataset the GPU profiles read.

The download itself (atomic, verified, offline-safe) is specperf.engine.sharegpt_fetch;
its docstring is this command's --help description. A download that fails exits
``Exit.FETCH_FAILED`` (the message says why and what to do), OK when the file is there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specperf.cli import options
from specperf.config import settings
from specperf.config.exits import Exit
from specperf.engine import sharegpt_fetch

#: Progress is printed every this many MB.
PROGRESS_EVERY_MB = 50

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK, Exit.FETCH_FAILED)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "fetch-sharegpt",
        help=f"download {sharegpt_fetch.FILENAME} (never done by a perf run)",
        description=sharegpt_fetch.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.add_fetch_arguments(p, sharegpt_fetch)
    p.add_argument("--revision", metavar="COMMIT", default=None,
                   help=f"the dataset commit to fetch at (40 hex digits; default: "
                        f"${sharegpt_fetch.REVISION_ENV}); required from the hub until "
                        "the code pins one")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    return p


@options.exits_2_on_bad_input("specperf fetch-sharegpt")
def run(args: argparse.Namespace) -> int:
    last = [-1]

    def progress(got: int, total: int | None) -> None:
        mb = got >> 20
        if args.quiet or mb // PROGRESS_EVERY_MB == last[0]:
            return
        last[0] = mb // PROGRESS_EVERY_MB
        of = f" of {total >> 20}" if total else ""
        print(f"  {mb}{of} MB", file=sys.stderr)

    # Pinned before anything is printed or asked: a commit and a checksum, or nothing is
    # downloaded (a file already there is kept: run_fetch says so).
    if args.force or not (Path(args.dir) / sharegpt_fetch.FILENAME).exists():
        try:
            args.sha256 = sharegpt_fetch.expected_sha256(args.sha256)
            if args.url is None and (args.revision is not None
                                     or not settings.current().sharegpt_url):
                args.url = sharegpt_fetch.default_url(args.revision)
        except sharegpt_fetch.NotPinned as exc:
            raise options.BadInput(str(exc)) from None
    return options.run_fetch(args, sharegpt_fetch, "fetch-sharegpt", progress)
