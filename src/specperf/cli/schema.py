"""``specperf schema [--baseline]``: the JSON Schema of run files (or baseline files)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from specperf.config.exits import Exit
from specperf.schemas import Baseline, RunResult

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK,)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("schema", help="print the JSON Schema of run files (or baselines)",
                              description="Print the JSON Schema of a run file (RunResult), or "
                                          "of a baseline with --baseline.")
    p.add_argument("--baseline", action="store_true", help="the baseline file's schema")
    return p


def run(args: argparse.Namespace) -> int:
    model = Baseline if args.baseline else RunResult
    print(json.dumps(model.model_json_schema(), indent=2, ensure_ascii=False))
    return Exit.OK
