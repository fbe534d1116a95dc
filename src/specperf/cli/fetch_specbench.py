"""``specperf fetch-specbench DIR``: download Spec-Bench's question file, the category set
the GPU profiles' categories scenario reads.

The download itself (atomic, verified, offline-safe) is specperf.engine.specbench_fetch;
its docstring is this command's --help description. A download that fails exits
``Exit.FETCH_FAILED`` (the message says why and what to do), OK when the file is there.
"""

from __future__ import annotations

import argparse
from typing import Any

from specperf.cli import options
from specperf.config.exits import Exit
from specperf.engine import specbench_fetch

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK, Exit.FETCH_FAILED)


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
