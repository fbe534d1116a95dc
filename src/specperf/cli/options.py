"""What the `specperf` commands share: options, exit codes, reading input files.

An option used by more than one command is defined here once, so it means one thing
everywhere (docs/commands.md):

* ``--json`` prints the command's result as JSON on stdout instead of the tables;
* ``--history FILE ... / --no-history`` choose the earlier runs pooled with a baseline;
* ``--width N`` the columns of the console tables; ``-v/--verbose`` unchanged metrics too.

A bad input file or option value becomes :class:`BadInput`; a command's ``run`` wrapped in
:func:`exits_2_on_bad_input` prints it as one line on stderr and returns exit code 2.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from specperf.config import settings
from specperf.schemas import Baseline, RunResult
from specperf.store.baselines import load_history
from specperf.store.files import BaselineError, load_result

__all__ = [
    "EXIT_BAD_INPUT", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_REGRESSION", "BadInput",
    "add_history", "add_json", "add_json_out", "add_verbose", "add_width",
    "exits_2_on_bad_input", "history", "json_out_path", "load", "one_line", "stdout_console",
    "wants_json",
]

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

Run = Callable[[argparse.Namespace], int]


class BadInput(Exception):
    """An unreadable or invalid input file, or a bad option value; the message is one line
    and names the file or the option."""


def exits_2_on_bad_input(prog: str) -> Callable[[Run], Run]:
    """Decorate a command's ``run``: :class:`BadInput` → ``<prog>: error: <message>`` on
    stderr and exit code 2."""

    def wrap(run: Run) -> Run:
        @functools.wraps(run)
        def wrapped(args: argparse.Namespace) -> int:
            try:
                return run(args)
            except BadInput as exc:
                print(f"{prog}: error: {exc}", file=sys.stderr)
                return EXIT_BAD_INPUT

        return wrapped

    return wrap


# --------------------------------------------------------------------------- options


def add_width(p: argparse.ArgumentParser) -> None:
    p.add_argument("--width", type=int, default=None,
                   help="columns to render (default: the terminal's, else $COLUMNS, else 100)")


def add_verbose(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true",
                   help="list unchanged metrics and the reason for every verdict")


def add_history(p: argparse.ArgumentParser) -> None:
    p.add_argument("--history", metavar="FILE", nargs="+", default=None,
                   help="earlier runs or baselines of the same hardware and profile to "
                        "pool with the baseline (default: the baseline's kept history, "
                        "history/<name>/*.json beside it)")
    p.add_argument("--no-history", action="store_true",
                   help="use the baseline file alone, without its kept history")


def add_json(p: argparse.ArgumentParser, what: str) -> None:
    """``--json``: print ``what`` as JSON on stdout instead of the tables."""
    p.add_argument("--json", action="store_true",
                   help=f"print {what} as JSON on stdout instead of the tables")


def add_json_out(p: argparse.ArgumentParser, what: str) -> None:
    """``--json`` as :func:`add_json`, and ``--json-out PATH`` to write ``what`` to a file.

    ``--json PATH`` (the spelling of ``--json-out PATH`` before the two were told apart)
    still works: :func:`json_out_path` reads it and prints a deprecation note.
    """
    p.add_argument("--json", nargs="?", const=True, default=False, metavar="PATH",
                   help=f"print {what} as JSON on stdout instead of the tables "
                        "(--json PATH: deprecated spelling of --json-out PATH)")
    p.add_argument("--json-out", metavar="PATH", default=None,
                   help=f"also write {what} as JSON to PATH")


def json_out_path(args: argparse.Namespace, prog: str) -> Path | None:
    """Where ``--json-out`` (or the deprecated ``--json PATH``) writes; None for nowhere."""
    legacy = args.json if isinstance(args.json, str) else None
    if legacy is None:
        return Path(args.json_out) if args.json_out else None
    print(f"{prog}: note: --json PATH is deprecated, use --json-out PATH "
          "(--json alone prints the JSON)", file=sys.stderr)
    if args.json_out and args.json_out != legacy:
        raise BadInput(f"--json {legacy} and --json-out {args.json_out}: give one path")
    return Path(legacy)


def wants_json(args: argparse.Namespace) -> bool:
    """``--json`` without a path: print the result as JSON."""
    return args.json is True


def stdout_console(piped_width: int) -> Console:
    """A rich console on stdout. Piped or captured (no terminal) and without COLUMNS, it is
    ``piped_width`` wide: rich's default 80 columns would squeeze the tables."""
    console = Console(file=sys.stdout, highlight=False)
    if not console.is_terminal and settings.current().columns is None:
        console = Console(file=sys.stdout, highlight=False, width=piped_width)
    return console


# --------------------------------------------------------------------------- input files


def one_line(message: str) -> str:
    """A multi-line BaselineError as one line: the file, the first field, the fix."""
    # A run-or-baseline file is validated as a tagged union; drop the tag from field paths.
    message = re.sub(r"`specperf-(?:run|baseline)\.", "`", str(message))
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else str(message)
    fields = [ln for ln in lines[1:] if ln.startswith("field")]
    fixes = [ln for ln in lines[1:] if ln.startswith("fix")]
    out = lines[0]
    if fields:
        out += f": {fields[0]}"
        if len(fields) > 1:
            out += f" (and {len(fields) - 1} more)"
    if fixes:
        out += f"; {fixes[0]}"
    return out


def load(path: Path | str) -> RunResult | Baseline:
    """A run or a baseline file (told apart by ``kind``); :class:`BadInput` when bad."""
    try:
        return load_result(Path(path))
    except BaselineError as exc:
        raise BadInput(one_line(str(exc))) from None


def history(args: argparse.Namespace, baseline: Path | str) -> list[Any]:
    """The ``--history`` files, else the baseline's kept history; none with ``--no-history``."""
    if args.no_history:
        return []
    if args.history:
        return [load(p) for p in args.history]
    return load_history(Path(baseline))
