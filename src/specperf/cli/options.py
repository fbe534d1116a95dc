"""What the `specperf` commands share: options, exit codes, reading input files.

An option used by more than one command is defined here once, so it means one thing
everywhere (docs/commands.md):

* ``--json`` prints the command's result as JSON on stdout instead of the tables;
* ``--history FILE ... / --no-history`` choose the earlier runs pooled with a baseline;
* ``--kept-runs DIR`` pools the kept runs of a directory of run files (a nightly's own
  history) and may replace the baseline with them (:mod:`specperf.analysis.reference`);
* ``--width N`` the columns of the console tables; ``-v/--verbose`` unchanged metrics too.

A bad input file or option value becomes :class:`BadInput`; a command's ``run`` wrapped in
:func:`exits_2_on_bad_input` prints it as one line on stderr and returns exit code 2.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from specperf.analysis.reference import Reference, choose_reference
from specperf.config import settings
from specperf.config.exits import Exit
from specperf.config.profile import ProfileError
from specperf.config.profile_file import load_profile
from specperf.config.rules import CompareRules
from specperf.schemas import Baseline, RunResult, recorded_rules
from specperf.store.baselines import history_dir, load_history
from specperf.store.files import BaselineError, atomic_write_text, load_result, one_line
from specperf.store.kept_runs import read_kept_runs

__all__ = [
    "BadInput",
    "add_history", "add_json", "add_json_out", "add_kept_runs", "add_rules_profile",
    "add_verbose", "add_width", "check_outputs", "exits_2_on_bad_input", "history",
    "history_files", "json_out_path", "load", "one_line", "reference", "rules", "same_file",
    "step_summary_output", "stdout_console", "wants_json", "write_output",
]

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
                return Exit.BAD_INPUT

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


def add_rules_profile(p: argparse.ArgumentParser) -> None:
    """``--profile``: whose ``[compare]`` table (minimum effects, α, trials) to plan by."""
    p.add_argument("--profile", metavar="NAME_OR_PATH", default=None,
                   help="the profile whose [compare] table the figures are for (default: the "
                        "rules a run file recorded; a baseline records none, so the defaults)")


def rules(args: argparse.Namespace, result: RunResult | Baseline) -> tuple[CompareRules, str]:
    """The comparison rules a command plans by, and where they came from: ``--profile``'s
    ``[compare]`` table, else the rules a run file recorded (a baseline records none), else
    the defaults -- the same table the suite judges that profile's runs by."""
    if args.profile is not None:
        try:
            return load_profile(args.profile).compare, f"{args.profile}'s [compare]"
        except ProfileError as exc:
            raise BadInput(one_line(str(exc))) from None
    if isinstance(result, RunResult) and result.compare_rules is not None:
        return result.compare_rules, "the rules the run recorded"
    return recorded_rules(result), "the defaults; --profile P for a profile's"


def add_kept_runs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kept-runs", metavar="DIR", default=None,
                   help="a directory of earlier run files (e.g. recent nightlies, fetched by "
                        "`specperf fetch-nightlies`): those of the same hardware, profile, vLLM "
                        "and prompts that passed their own checks are pooled as kept runs; "
                        "with [compare] baseline_runs of them they replace the baseline "
                        "(docs/baselines.md#the-nightly-lifecycle)")


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


def load(path: Path | str) -> RunResult | Baseline:
    """A run or a baseline file (told apart by ``kind``); :class:`BadInput` when bad."""
    try:
        return load_result(Path(path))
    except BaselineError as exc:
        raise BadInput(one_line(str(exc))) from None


def history(args: argparse.Namespace, baseline: Path | str) -> list[Any]:
    """The ``--history`` files, else the baseline's kept history; none with ``--no-history``.

    A bad kept run is bad input here (exit 2 naming it), not skipped as a perf run skips
    it: the reviewer can delete it or pass --no-history, and a verdict silently pooled
    differently from the one the run got would be a second, quieter surprise."""
    if args.no_history:
        return []
    if args.history:
        return [load(p) for p in args.history]
    try:
        return load_history(Path(baseline))
    except BaselineError as exc:
        raise BadInput(one_line(str(exc)) + " (or pass --no-history)") from None


def reference(args: argparse.Namespace, run: RunResult | Baseline,
              base: RunResult | Baseline | None, base_label: str | None,
              history: list[Any]) -> Reference:
    """What ``run`` is judged against: the baseline and its history, or with ``--kept-runs``
    the kept runs of that directory as well (a bad file there is skipped with a line on
    stderr naming it: it costs its own pooling only)."""
    rules = recorded_rules(run)
    if not getattr(args, "kept_runs", None):
        if base is None:
            raise BadInput("give a BASELINE file, or --kept-runs DIR")
        if base.provenance.provisional:
            # Said plainly whenever it happens, kept runs or not.
            return choose_reference(run, baseline=base, baseline_label=base_label,
                                    history=history, kept=[], rules=rules)
        return Reference("baseline", base, base_label, history=history)
    try:
        kept = read_kept_runs(Path(args.kept_runs),
                              on_bad=lambda line: print(line, file=sys.stderr))
    except BaselineError as exc:
        raise BadInput(f"--kept-runs: {one_line(str(exc))}") from None
    return choose_reference(run, baseline=base, baseline_label=base_label, history=history,
                            kept=[(k.label, k.result) for k in kept], rules=rules)


def history_files(args: argparse.Namespace, baseline: Path | str | None) -> list[Path]:
    """The history files a command will read (inputs it must never write over)."""
    if baseline is None or getattr(args, "no_history", False):
        return []
    if getattr(args, "history", None):
        return [Path(p) for p in args.history]
    return sorted(history_dir(Path(baseline)).glob("*.json"))


# --------------------------------------------------------------------------- output files


def same_file(a: Path, b: Path) -> bool:
    """One file under two names: the same resolved path (symlinks followed), or, for
    files that exist, the same inode (a hard link)."""
    try:
        if a.resolve() == b.resolve():
            return True
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _result_kind(path: Path) -> str | None:
    """``specperf-run`` or ``specperf-baseline`` when ``path`` holds one, else None."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if kind in ("specperf-run", "specperf-baseline") else None


def check_outputs(outputs: dict[str, Path], inputs: list[Path | str]) -> None:
    """Refuse, before anything is written, an output (option → path) that is one of the
    command's inputs, two outputs that are one file, an output that is a directory, and an
    output that would replace a run or baseline file (a measurement is never overwritten
    by a report of it; such a path is almost always a slip of the argument order)."""
    for opt, out in outputs.items():
        for given in inputs:
            if same_file(out, Path(given)):
                raise BadInput(
                    f"{opt} {out}: is the input {given} (the same file); a command never "
                    "writes over a file it reads — give another path")
        if out.is_dir():
            raise BadInput(f"{opt} {out}: is a directory; give a file path")
        kind = _result_kind(out) if out.is_file() else None
        if kind is not None:
            raise BadInput(
                f"{opt} {out}: holds a {kind.removeprefix('specperf-')} file, which this "
                "output would replace; give another path (or move that file away)")
    items = list(outputs.items())
    for i, (opt_a, a) in enumerate(items):
        for opt_b, b in items[i + 1:]:
            if same_file(a, b):
                raise BadInput(f"{opt_a} {a} and {opt_b} {b}: the same file; give each its own")


def write_output(opt: str, path: Path, text: str) -> None:
    """Write one output atomically; a failure is bad input naming the option and path."""
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise BadInput(f"{opt} {path}: cannot write it: {exc.strerror or exc} — give a "
                       "writable file path") from None


def step_summary_output(args: argparse.Namespace) -> dict[str, Path]:
    """$GITHUB_STEP_SUMMARY as an output when --step-summary appends to it."""
    path = settings.current().github_step_summary
    if getattr(args, "step_summary", False) and path is not None:
        return {"$GITHUB_STEP_SUMMARY": Path(path)}
    return {}


# --------------------------------------------------------------------------- downloads


def add_fetch_arguments(p: argparse.ArgumentParser, fetcher: Any) -> None:
    """The options every ``specperf fetch-*`` command takes; ``fetcher`` is its engine
    module (specperf.engine.sharegpt_fetch, specbench_fetch: FILENAME, URL, URL_ENV)."""
    p.add_argument("dir", metavar="DIR",
                   help="where to put it (e.g. datasets/, which the GPU profiles read)")
    p.add_argument("--url", default=None,
                   help=f"download from here instead (default: ${fetcher.URL_ENV} or "
                        f"{fetcher.URL})")
    p.add_argument("--sha256", default=None, help="refuse a file whose sha256 differs")
    p.add_argument("--force", action="store_true", help="download even if the file exists")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds without data (60)")


def run_fetch(args: argparse.Namespace, fetcher: Any, command: str,
              progress: Callable[[int, int | None], None] | None = None) -> int:
    """Download ``fetcher``'s file into ``args.dir`` as ``command`` (its messages name
    it): the path printed and 0, or the reason and ``Exit.FETCH_FAILED`` (a download that
    did not produce the file is not bad input: the network)."""
    url = args.url or fetcher.default_url()
    dest = Path(args.dir) / fetcher.FILENAME
    if dest.exists() and not args.force:
        print(f"{dest}: already there (use --force to download again)")
    else:
        print(f"downloading {url}\n         to {dest}", file=sys.stderr)
    try:
        path = fetcher.fetch(Path(args.dir), url, sha256=args.sha256, force=args.force,
                             timeout_s=args.timeout, progress=progress)
    except fetcher.FetchError as exc:
        print(f"specperf {command}: {exc}", file=sys.stderr)
        return Exit.FETCH_FAILED
    print(path)
    return Exit.OK
