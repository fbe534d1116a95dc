"""Renderers: interchangeable views (console, markdown, HTML, plots, JSON) of one RunResult.

``write_all(report, out_dir)`` is what the pytest plugin calls at the end of a run, and
what ``specperf report`` calls, with the run's
:class:`~specperf.analysis.run_report.RunReport` (the run, its comparison, its advice:
built once by :func:`~specperf.analysis.run_report.build_run_report`; nothing here
compares or advises). It fills ``out_dir`` with

====================  ==========================================================
run.json              the RunResult itself (the source of every other file)
comparison.json       the RunComparison against the baseline (when compared)
advice.json           the RunAdvice (a run with speculative cases)
report.md             GitHub-flavoured markdown, < 1 MiB (tables cut if needed)
report.html           one self-contained offline page, charts embedded
report.txt            the console view, no colour, 100 columns
plots/*.png           the charts (and ``vs_baseline_*`` overlays with a baseline)
====================  ==========================================================

and, on GitHub Actions (``$GITHUB_STEP_SUMMARY`` set), appends the markdown to the job's
summary page. The renderer modules import matplotlib/scipy lazily through this function,
so ``import specperf.report`` stays cheap.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specperf.report.advice import advice_console, advice_markdown
from specperf.schemas import RunResult
from specperf.store.files import atomic_write_text

if TYPE_CHECKING:
    from specperf.analysis.run_report import RunReport

__all__ = ["TEXT_WIDTH", "render_advice", "write_all"]


def render_advice(advice: Any, width: int, color: bool, brief: bool = False) -> str:
    """The advice section as console text (rich), for the terminal and report.txt
    (``brief``: the pytest summary without -v, see advice_console)."""
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=color, no_color=not color,
            highlight=False).print(advice_console(advice, brief))
    return buf.getvalue()

TEXT_WIDTH = 100


def _could_not(name: str, out: Path, why: str, stacklevel: int) -> None:
    """A view that could not be written, as a warning (the run's verdict does not depend
    on it); ``stacklevel`` points at the caller of write_all."""
    warnings.warn(f"specperf: could not write the {name} of the run in {out}: {why}",
                  stacklevel=stacklevel + 1)


def _readable(paths: list[Path]) -> None:
    """Atomic writes create 0600 temp files; give the reports the usual umask mode so a CI
    artifact uploader or a colleague's account can read them."""
    umask = os.umask(0)
    os.umask(umask)
    for p in paths:
        try:
            os.chmod(p, 0o666 & ~umask)
        except OSError:
            pass


def write_all(
    report: RunReport,
    out_dir: Path | str,
    *,
    step_summary: bool = True,
    strict: bool = True,
    stamp: Callable[[RunResult], RunResult] | None = None,
) -> dict[str, Path]:
    """Write every view of ``report`` (built by
    :func:`specperf.analysis.run_report.build_run_report`: this compares and advises
    nothing) into ``out_dir``; returns name → path.

    Names: ``run``, ``comparison``, ``advice``, ``markdown``, ``html``, ``text``,
    ``step_summary`` and ``plot:<key>`` for each chart. With ``strict=False`` (what the
    pytest plugin wants) a renderer that fails is reported as a warning and the others are
    still written, so one bad chart never costs the run its report.

    ``stamp`` (the plugin's: the run's time breakdown) is called once the files above are
    rendered; what it returns is written over run.json and is what the job summary shows,
    so the time the reports took is in the run file. run.json is written first all the
    same: a run interrupted while its charts render keeps its run file.
    """
    # scipy (console, markdown and html import compare): `import specperf.report` stays cheap
    from specperf.report import console, html, markdown, plots

    run = report.run
    if not isinstance(run, RunResult):
        raise TypeError("write_all writes the reports of a run: view a baseline as one "
                        "(specperf.analysis.judge.run.as_run) before building its report")
    baseline, comparison, advice = report.baseline, report.comparison, report.advice
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    def step(name: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:
            if strict:
                raise
            _could_not(name, out, f"{type(exc).__name__}: {exc}", stacklevel=3)
            return None

    def write_run(result: RunResult) -> None:
        atomic_write_text(out / "run.json", result.model_dump_json(indent=1) + "\n")
        written["run"] = out / "run.json"

    step("run file", lambda: write_run(run))

    if comparison is not None:
        cmp = comparison

        def write_cmp() -> None:
            atomic_write_text(out / "comparison.json", cmp.model_dump_json(indent=1) + "\n")
            written["comparison"] = out / "comparison.json"

        step("comparison file", write_cmp)

    if report.advice_error is not None:
        _could_not("advice", out, report.advice_error, stacklevel=2)
    if advice is not None:
        adv = advice

        def write_advice() -> None:
            atomic_write_text(out / "advice.json", adv.model_dump_json(indent=1) + "\n")
            written["advice"] = out / "advice.json"

        step("advice file", write_advice)

    charts = step("charts", lambda: plots.write_plots(run, out / "plots", baseline)) or {}
    for key, path in charts.items():
        written[f"plot:{key}"] = path

    def write_md() -> None:
        path = markdown.write_markdown(out / "report.md", run, comparison)
        if advice is not None:
            text = path.read_text(encoding="utf-8")
            section = "\n" + advice_markdown(advice, heading="###")
            if len((text + section).encode()) <= markdown.MAX_BYTES:
                atomic_write_text(path, text + section)
        written["markdown"] = path

    def write_html() -> None:
        written["html"] = html.write_html(out / "report.html", run, comparison, charts,
                                          make_plots=False)

    def write_text() -> None:
        text = console.render_run(run, width=TEXT_WIDTH, color=False)
        if comparison is not None:
            text += "\n" + console.render_comparison(comparison, width=TEXT_WIDTH, color=False,
                                                     verbose=True)
        if advice is not None:
            text += "\n" + render_advice(advice, width=TEXT_WIDTH, color=False)
        atomic_write_text(out / "report.txt", text)
        written["text"] = out / "report.txt"

    step("markdown report", write_md)
    step("HTML report", write_html)
    step("text report", write_text)
    if stamp is not None:
        finish = stamp
        stamped = step("time breakdown", lambda: finish(run))
        if stamped is not None:
            run = stamped
            step("run file", lambda: write_run(stamped))
    _readable([p for k, p in written.items() if k != "step_summary" and not k.startswith("plot:")])
    if step_summary:
        summary = step("GitHub step summary",
                       lambda: markdown.write_step_summary(run, comparison))
        if summary is not None:
            written["step_summary"] = summary
    return written
