"""The `specperf` command: review runs and baselines without vLLM.

    specperf compare RUN.json BASELINE.json [--markdown PATH] [--json PATH] [-v]
    specperf report RUN.json --out DIR [--baseline FILE]
    specperf show FILE.json
    specperf schema [--baseline]
    specperf model ...                      (the cost model; specperf.cli.model)

Exit codes: 0 fine; 1 ``compare`` found a regression; 2 bad input (unreadable, truncated
or invalid file, or a baseline that does not compare: other hardware or profile).

Adding a command (the plug-in convention)
-----------------------------------------
Write a module ``specperf/cli_<name>.py`` with a function::

    def add_<name>_command(subparsers) -> argparse.ArgumentParser:
        p = subparsers.add_parser("<name>", help="...")
        ...
        p.set_defaults(func=run_<name>)   # run_<name>(args) -> int exit code
        return p

(``<name>`` with ``-`` written as ``_`` in the module and function names, e.g.
``cli_fetch_sharegpt.add_fetch_sharegpt_command`` for ``specperf fetch-sharegpt``).
That is all: :data:`COMMAND_MODULES` below already lists the planned commands, and any
other ``specperf.cli_*`` module is discovered too, so nobody needs to edit this file. A
module that does not exist yet is skipped silently; one that fails to import (or lacks
the function) is skipped with a one-line warning on stderr, so one broken plug-in never
takes the whole CLI down. Plug-ins must import heavy or optional packages (vLLM, torch,
matplotlib) inside their ``run_*`` function, not at module level: ``specperf --help``
imports every plug-in.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["COMMAND_MODULES", "EXIT_BAD_INPUT", "build_parser", "main"]

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2

#: Plug-in commands, in the order `specperf --help` lists them: module names under
#: ``specperf``; each defines ``add_<name>_command(subparsers)``.
COMMAND_MODULES = [
    "model",
    "advise",
    "power",
    "merge",
    "fetch_sharegpt",
]


def _warn(msg: str) -> None:
    print(f"specperf: warning: {msg}", file=sys.stderr)


def _error(msg: str) -> int:
    print(f"specperf: error: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _one_line(message: str) -> str:
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


# --------------------------------------------------------------------------- plug-ins


def _plugin_modules() -> list[str]:
    names = list(COMMAND_MODULES)
    try:
        import specperf

        for info in pkgutil.iter_modules(specperf.__path__):
            if info.name.startswith("cli_") and info.name not in names:
                names.append(info.name)
    except Exception as exc:  # noqa: BLE001 - discovery is a convenience
        _warn(f"could not list specperf.cli_* modules: {exc}")
    return names


def _register_plugins(subparsers: Any) -> None:
    for module_name in _plugin_modules():
        full = f"specperf.cli.{module_name}"
        func_name = f"add_{module_name}_command"
        try:
            module = importlib.import_module(full)
        except ModuleNotFoundError as exc:
            if exc.name == full:  # not written yet
                continue
            _warn(f"command module {full} skipped: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - one broken plug-in must not break the CLI
            _warn(f"command module {full} skipped: {type(exc).__name__}: {exc}")
            continue
        add = getattr(module, func_name, None)
        if add is None:
            _warn(f"command module {full} skipped: it defines no {func_name}(subparsers)")
            continue
        try:
            add(subparsers)
        except (argparse.ArgumentError, ValueError, TypeError) as exc:
            _warn(f"command module {full} skipped: {func_name} failed: {exc}")


# --------------------------------------------------------------------------- built-ins


def _load(path: str) -> Any:
    """A run or a baseline; raises BaselineError (one-line by _one_line) when bad."""
    from specperf.store.files import load_result

    return load_result(Path(path))


def _history(args: argparse.Namespace, baseline: str) -> list[Any]:
    """--history files, else the baseline's kept history; none with --no-history."""
    from specperf.store.baselines import load_history

    if args.no_history:
        return []
    if args.history:
        return [_load(p) for p in args.history]
    return load_history(Path(baseline))


def _cmd_compare(args: argparse.Namespace) -> int:
    from specperf.analysis.compare import as_run, compare_runs
    from specperf.report.console import render_comparison
    from specperf.store.files import BaselineError, atomic_write_text

    try:
        run = _load(args.run)
        base = _load(args.baseline)
        history = _history(args, args.baseline)
    except BaselineError as exc:
        return _error(_one_line(str(exc)))
    cmp = compare_runs(run, base, run_label=args.run, baseline_label=args.baseline,
                       force=args.force, history=history)
    print(render_comparison(cmp, width=args.width, verbose=args.verbose), end="")
    try:
        if args.json:
            atomic_write_text(Path(args.json), cmp.model_dump_json(indent=1) + "\n")
        if args.markdown or args.step_summary:
            from specperf.report.markdown import render_markdown, write_step_summary

            as_a_run = as_run(run, args.run)
            if args.markdown:
                atomic_write_text(Path(args.markdown), render_markdown(as_a_run, cmp,
                                                                       verbose=args.verbose))
            if args.step_summary:
                write_step_summary(as_a_run, cmp)
    except OSError as exc:
        return _error(f"cannot write the comparison: {exc}")
    for r in cmp.refusals:
        print(f"specperf: refused: {r}", file=sys.stderr)
    return cmp.exit_code


def _cmd_report(args: argparse.Namespace) -> int:
    from specperf.analysis.compare import as_run
    from specperf.report import write_all
    from specperf.report.console import render_comparison, render_run
    from specperf.store.files import BaselineError

    try:
        run = as_run(_load(args.run), args.run)
        base = _load(args.baseline) if args.baseline else None
        history = _history(args, args.baseline) if args.baseline else []
    except BaselineError as exc:
        return _error(_one_line(str(exc)))
    cmp = None
    if base is not None:
        from specperf.analysis.compare import compare_runs

        cmp = compare_runs(run, base, run_label=args.run, baseline_label=args.baseline,
                           history=history)
    out = Path(args.out)
    try:
        written = write_all(run, out, base, comparison=cmp, step_summary=args.step_summary)
    except OSError as exc:
        return _error(f"{out}: cannot write the report: {exc}")
    print(render_run(run, width=args.width), end="")
    if cmp is not None:
        print(render_comparison(cmp, width=args.width, verbose=args.verbose), end="")
    print(f"\nwrote {len(written)} files to {out}:")
    for name, path in written.items():
        print(f"  {name:<36} {path}")
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    from specperf.report.console import render_summary
    from specperf.store.files import BaselineError

    try:
        result = _load(args.file)
    except BaselineError as exc:
        return _error(_one_line(str(exc)))
    print(f"{args.file}: {result.kind} (schema {result.schema_version})")
    print(render_summary(result, width=args.width), end="")
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    from specperf.schemas import Baseline, RunResult

    model = Baseline if args.baseline else RunResult
    print(json.dumps(model.model_json_schema(), indent=2, ensure_ascii=False))
    return EXIT_OK


def _add_builtin_commands(sub: Any) -> None:
    def width(p: argparse.ArgumentParser) -> None:
        p.add_argument("--width", type=int, default=None,
                       help="columns to render (default: the terminal's, else $COLUMNS, "
                            "else 100)")

    def history_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--history", metavar="FILE", nargs="+", default=None,
                       help="earlier runs or baselines of the same hardware and profile to "
                            "pool with the baseline (default: the baseline's kept history, "
                            "history/<name>/*.json beside it)")
        p.add_argument("--no-history", action="store_true",
                       help="judge against the baseline file alone")

    p = sub.add_parser(
        "compare", help="compare a run against a baseline; exit 1 on a regression",
        description="Compare a run (or a baseline) against a baseline, per case and metric, "
                    "with a Mann-Whitney test and a bootstrap CI, under the comparison rules "
                    "the run recorded (its profile's [compare] table; else the defaults). "
                    "Exit 0: no regression; 1: a "
                    "regression; 2: bad input or incomparable files (other hardware or "
                    "profile).")
    p.add_argument("run", help="run.json (or a baseline file)")
    p.add_argument("baseline", help="baseline file (or another run.json)")
    p.add_argument("--markdown", metavar="PATH", help="also write the diff as GitHub markdown")
    p.add_argument("--json", metavar="PATH", help="also write the comparison as JSON")
    p.add_argument("--step-summary", action="store_true",
                   help="also append the markdown to $GITHUB_STEP_SUMMARY (when set)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="list unchanged metrics and the reason for every verdict")
    p.add_argument("--force", action="store_true",
                   help="compare even across hardware or profile changes (never a gate)")
    history_args(p)
    width(p)
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser(
        "report", help="write charts, HTML, markdown and text reports of a run",
        description="Write run.json, report.html (self-contained), report.md, report.txt and "
                    "plots/*.png for a run into --out; with --baseline, also the comparison "
                    "and baseline overlays. Exit 0 (2 on bad input); `compare` is the gate.")
    p.add_argument("run", help="run.json (or a baseline file)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--baseline", metavar="FILE", help="baseline (or run) to compare against")
    p.add_argument("--step-summary", action="store_true",
                   help="also append the markdown to $GITHUB_STEP_SUMMARY (when set)")
    p.add_argument("-v", "--verbose", action="store_true", help="list unchanged metrics")
    history_args(p)
    width(p)
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("show", help="summarise a run or a baseline file",
                       description="Print the provenance and measurements of a run or a "
                                   "baseline (told apart by its `kind` field).")
    p.add_argument("file", help="run.json or a baseline file")
    width(p)
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("schema", help="print the JSON Schema of run files (or baselines)",
                       description="Print the JSON Schema of a run file (RunResult), or of a "
                                   "baseline with --baseline.")
    p.add_argument("--baseline", action="store_true", help="the baseline file's schema")
    p.set_defaults(func=_cmd_schema)


def build_parser() -> argparse.ArgumentParser:
    from specperf import __version__

    parser = argparse.ArgumentParser(
        prog="specperf",
        description="Review specperf runs and baselines (no vLLM needed): compare, report, "
                    "show, schema; and the plug-in commands.",
        epilog="Exit codes: 0 ok, 1 regression (compare), 2 bad input.",
    )
    parser.add_argument("--version", action="version", version=f"specperf {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_builtin_commands(sub)
    _register_plugins(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `specperf show run.json | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
