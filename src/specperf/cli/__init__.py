"""The `specperf` command: review runs and baselines without vLLM (docs/commands.md).

    specperf compare RUN.json BASELINE.json [--markdown PATH] [--json-out PATH] [-v]
    specperf report RUN.json --out DIR [--baseline FILE]
    specperf show FILE.json
    specperf schema [--baseline]
    specperf check [--vllm V] [--profile P ...]
    specperf plan --profile P [--shards N] [--limit-minutes M] [--json]
    specperf issues COMPARE.json [--repo OWNER/NAME] [--dry-run]
    specperf model | advise | power | merge | promote | fetch-nightlies | fetch-sharegpt ...

Exit codes: each command's ``--help`` lists its own (its module's ``EXITS`` and
:data:`EVERY_COMMAND`), ``specperf --help`` every one, both from
:mod:`specperf.config.exits`, the one table (docs/how-a-run-works.md, "Exit statuses").

One module per command, each with ``add_parser(subparsers) -> ArgumentParser`` and
``run(args) -> int`` (the exit code), and ``EXITS``, the codes ``run`` returns.
:data:`COMMANDS` lists them in the order
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
from specperf.config.exits import Exit, epilog, legacy
from specperf.config.settings import legacy_exit_codes

__all__ = ["COMMANDS", "EVERY_COMMAND", "build_parser", "command_exits", "main"]

#: Every `specperf` command, in the order `specperf --help` lists them.
COMMANDS: tuple[ModuleType, ...] = (
    compare, report, show, schema, check, plan, model, advise, power, merge, promote,
    fetch_nightlies, fetch_sharegpt, fetch_specbench, issues,
)

#: What any command may exit with besides its own ``EXITS``: 2 for an option argparse
#: refuses (its ``error()`` exits 2), 130 when interrupted (:func:`main`).
EVERY_COMMAND: tuple[Exit, ...] = (Exit.BAD_INPUT, Exit.INTERRUPTED)


def command_exits(command: ModuleType) -> list[Exit]:
    """Every code ``command`` can exit with, in order: its ``EXITS`` and
    :data:`EVERY_COMMAND`."""
    return sorted({*command.EXITS, *EVERY_COMMAND})


def _register(sub: argparse._SubParsersAction, command: ModuleType) -> None:  # type: ignore[type-arg]
    for name in ("add_parser", "run"):
        if not callable(getattr(command, name, None)):
            raise TypeError(f"{command.__name__} is listed in specperf.cli.COMMANDS but "
                            f"defines no {name}(); a command module defines add_parser("
                            "subparsers), run(args) and EXITS")
    if not isinstance(getattr(command, "EXITS", None), tuple):
        raise TypeError(f"{command.__name__} defines no EXITS, the exit codes its run() "
                        "returns (specperf.config.exits)")
    parser = command.add_parser(sub)
    parser.epilog = epilog(command_exits(command))
    parser.set_defaults(func=command.run)


def build_parser() -> argparse.ArgumentParser:
    # The top-level help is a golden output (tests/data/golden/specperf-help.txt).
    parser = argparse.ArgumentParser(
        prog="specperf",
        description="Review specperf runs and baselines (no vLLM needed): compare, report, "
                    "show, schema; check profiles against a vLLM release; and the plug-in "
                    "commands.",
    )
    parser.add_argument("--version", action="version", version=f"specperf {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        _register(sub, command)
    parser.epilog = (epilog({code for command in COMMANDS for code in command_exits(command)})
                     + "\nSPECPERF_LEGACY_EXIT_CODES=1: the old numbers, for one release.")
    return parser


def main(argv: list[str] | None = None) -> int:
    return legacy(_run(argv), pytest=False, enabled=legacy_exit_codes())


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except BrokenPipeError:  # `specperf show run.json | head`
        return Exit.OK

