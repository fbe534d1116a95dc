"""The `specperf` command: review runs and baselines without vLLM (docs/commands.md).

    specperf compare RUN.json BASELINE.json [--markdown PATH] [--json-out PATH] [-v]
    specperf report RUN.json --out DIR [--baseline FILE]
    specperf show FILE.json
    specperf schema [--baseline]
    specperf check [--vllm V] [--profile P ...]
    specperf plan --profile P [--shards N] [--limit-minutes M] [--json]
    specperf issues COMPARE.json [--repo OWNER/NAME] [--dry-run]
    specperf model | advise | power | merge | promote | fetch-nightlies | fetch-sharegpt ...

Exit codes: 0 fine; 1 ``compare`` found a regression (``check``: a config the vLLM
would refuse); 2 bad input (unreadable, truncated or invalid file, or a baseline that does
not compare: other hardware or profile); 3 ``promote`` refused (the runs disagree); 130
interrupted.

One module per command, each with ``add_parser(subparsers) -> ArgumentParser`` and
``run(args) -> int`` (the exit code). :data:`COMMANDS` lists them in the order
`specperf --help` shows them; adding a command means writing its module, adding it there
and to docs/commands.md. Options several commands take (``--json``, ``--history``,
``--width``, ``-v``) and reading input files live in :mod:`specperf.cli.options`.
A command module imports vLLM, torch or matplotlib only inside ``run``: ``specperf --help``
imports every command.
"""

from __future__ import annotations

import argparse
from types import ModuleType

from specperf import __version__
from specperf.cli import (
    advise,
    check,
    compare,
    fetch_nightlies,
    fetch_sharegpt,
    fetch_specbench,
    issues,
    merge,
    model,
    plan,
    power,
    promote,
    report,
    schema,
    show,
)
from specperf.cli.options import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION
from specperf.config.exits import legacy
from specperf.config.settings import legacy_exit_codes

__all__ = ["COMMANDS", "EXIT_BAD_INPUT", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_REGRESSION",
           "build_parser", "main"]

#: Every `specperf` command, in the order `specperf --help` lists them.
COMMANDS: tuple[ModuleType, ...] = (
    compare, report, show, schema, check, plan, model, advise, power, merge, promote,
    fetch_nightlies, fetch_sharegpt, fetch_specbench, issues,
)


def _register(sub: argparse._SubParsersAction, command: ModuleType) -> None:  # type: ignore[type-arg]
    for name in ("add_parser", "run"):
        if not callable(getattr(command, name, None)):
            raise TypeError(f"{command.__name__} is listed in specperf.cli.COMMANDS but "
                            f"defines no {name}(); a command module defines add_parser("
                            "subparsers) and run(args)")
    command.add_parser(sub).set_defaults(func=command.run)


def build_parser() -> argparse.ArgumentParser:
    # The top-level help is a golden output (tests/data/golden/specperf-help.txt).
    parser = argparse.ArgumentParser(
        prog="specperf",
        description="Review specperf runs and baselines (no vLLM needed): compare, report, "
                    "show, schema; check profiles against a vLLM release; and the plug-in "
                    "commands.",
        epilog="Exit codes (one table for every command and the pytest run; "
               "docs/how-a-run-works.md): 0 ok, 1 a check failed, 2 bad input or comparison "
               "refused, 3 internal error, 6 inconclusive, 7 machine busy, 8 download failed, "
               "9 promote refused, 11 a profile vLLM would refuse (check), 14 a night that does "
               "not fit (plan), 130 interrupted. "
               "SPECPERF_LEGACY_EXIT_CODES=1: the old numbers, for one release.",
    )
    parser.add_argument("--version", action="version", version=f"specperf {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        _register(sub, command)
    return parser


def main(argv: list[str] | None = None) -> int:
    return legacy(_run(argv), pytest=False, enabled=legacy_exit_codes())


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `specperf show run.json | head`
        return EXIT_OK

