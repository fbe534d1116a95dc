"""``specperf fetch-specbench DIR``: download Spec-Bench's question file, the category set
the GPU profiles' categories scenario reads.

The download itself (atomic, verified, offline-safe) is specperf.engine.specbench_fetch;
its docstring is this command's --help description. Exit 1 when the download fails (the
message says why and what to do), 0 when the file is there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specperf.cli import options
from specperf.engine import specbench_fetch

#: Exit code of a download that did not produce the file (not bad input: the network).
EXIT_FETCH_FAILED = 1


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "fetch-specbench",
        help=f"download {specbench_fetch.FILENAME} (never done by a perf run)",
        description=specbench_fetch.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", metavar="DIR",
                   help="where to put it (e.g. datasets/, which the GPU profiles read)")
    p.add_argument("--url", default=None,
                   help=f"download from here instead (default: ${specbench_fetch.URL_ENV} or "
                        f"{specbench_fetch.URL})")
    p.add_argument("--sha256", default=None, help="refuse a file whose sha256 differs")
    p.add_argument("--force", action="store_true", help="download even if the file exists")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds without data (60)")
    return p


def run(args: argparse.Namespace) -> int:
    url = args.url or specbench_fetch.default_url()
    dest = Path(args.dir) / specbench_fetch.FILENAME
    if dest.exists() and not args.force:
        print(f"{dest}: already there (use --force to download again)")
    else:
        print(f"downloading {url}\n         to {dest}", file=sys.stderr)
    try:
        path = specbench_fetch.fetch(Path(args.dir), url, sha256=args.sha256, force=args.force,
                                     timeout_s=args.timeout)
    except specbench_fetch.FetchError as exc:
        print(f"specperf fetch-specbench: {exc}", file=sys.stderr)
        return EXIT_FETCH_FAILED
    print(path)
    return options.EXIT_OK
