"""``specperf fetch-specbench DIR``: download Spec-Bench's question file, the category set
the GPU profiles' categories scenario reads.

The download itself (atomic, verified, offline-safe) is specperf.engine.specbench_fetch;
its docstring is this command's --help description. Exit 1 when the download fails (the
message says why and what to do), 0 when the file is there.
"""

from __future__ import annotations

import argparse
from typing import Any

from specperf.cli import options
from specperf.engine import specbench_fetch

#: Exit code of a download that did not produce the file (not bad input: the network).
EXIT_FETCH_FAILED = options.EXIT_FETCH_FAILED


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "fetch-specbench",
        help=f"download {specbench_fetch.FILENAME} (never done by a perf run)",
        description=specbench_fetch.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.add_fetch_arguments(p, specbench_fetch)
    return p


def run(args: argparse.Namespace) -> int:
    return options.run_fetch(args, specbench_fetch, "fetch-specbench")
