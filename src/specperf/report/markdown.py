"""GitHub-flavoured markdown: the comparison, the gate checks and the measurements of a run.

Made for the GitHub job page (``$GITHUB_STEP_SUMMARY``) and PR comments: regressions and
failed checks come first and are explained; unchanged metrics, passed checks and the
measurement table fold into ``<details>``. A step summary may be at most 1 MiB, so the
document is kept under ``max_bytes`` (default 1 000 000): when it would be larger, long
tables are cut (fewer and fewer rows) and end with a pointer to the full report in the
run's artifact (``report.html``, ``run.json``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from specperf.analysis import outside_load
from specperf.analysis.judge.models import VERDICT_ORDER, CaseComparison, RunComparison
from specperf.analysis.judge.outcome import OUTCOME_ORDER, outcomes_line
from specperf.analysis.power import repeats_line
from specperf.analysis.stats import Comparison, Direction, Verdict
from specperf.config import settings
from specperf.report import time_scenarios
from specperf.report.console import (
    delta_text,
    fmt_value,
    provenance_line,
    spec_lines,
    spread_text,
    time_lines,
)
from specperf.report.escape import md_code, md_escape
from specperf.report.scenarios import scenario_markdown
from specperf.schemas import CaseResult, GateCheck, Provenance, RunResult
from specperf.store.files import atomic_write_text

__all__ = [
    "MAX_BYTES",
    "STEP_SUMMARY_LIMIT",
    "artifact_pointer",
    "comparison_markdown",
    "md_escape",
    "render_markdown",
    "run_markdown",
    "write_markdown",
    "write_step_summary",
]

#: GitHub refuses a step summary over 1 MiB; stay clear of it.
STEP_SUMMARY_LIMIT = 1024 * 1024
MAX_BYTES = 1_000_000
T = TypeVar("T")
_ROW_LIMITS: tuple[int | None, ...] = (None, 5000, 2000, 1000, 500, 200, 100, 50, 20, 5)

VERDICT_MD = {
    Verdict.REGRESSION: "🔴 **regression**",
    Verdict.IMPROVEMENT: "🟢 improvement",
    Verdict.INCONCLUSIVE: "🟡 inconclusive",
    Verdict.UNCHANGED: "⚪ unchanged",
}
OUTCOME_MD = {"fail": "❌ **fail**", "pass": "✅ pass", "skip": "⏭️ skip",
              "inconclusive": "❔ **inconclusive**", "busy": "⏸️ **not measured: busy**"}
ARROW = {Direction.LOWER_IS_BETTER: "↓", Direction.HIGHER_IS_BETTER: "↑"}


def artifact_pointer(run_dir: str | None) -> str:
    """Where the untruncated report is: the run directory, and the workflow run on GitHub."""
    parts = []
    if run_dir:
        parts.append(f"{md_code(Path(run_dir) / 'report.html')} and "
                     f"{md_code(Path(run_dir) / 'run.json')}")
    env = settings.current()
    server, repo, run_id = env.github_server_url, env.github_repository, env.github_run_id
    if server and repo and run_id:
        parts.append(f"the artifacts of [this workflow run]({server}/{repo}/actions/runs/{run_id})")
    return " — ".join(parts) if parts else "the run artifact (report.html, run.json)"


def md_table(headers: Sequence[str], items: Sequence[T], row: Callable[[T], Sequence[str]],
           limit: int | None, pointer: str) -> str:
    """A GFM table of ``row(item)`` for the first ``limit`` items (only those are rendered),
    then a line saying how many were left out and where they are. A header ending in '>'
    is right-aligned."""
    head = "| " + " | ".join(h.rstrip(">") for h in headers) + " |\n|" + "|".join(
        "---:" if h.endswith(">") else "---" for h in headers) + "|\n"
    shown = items if limit is None else items[:limit]
    body = "".join("| " + " | ".join(row(it)) + " |\n" for it in shown)
    left = len(items) - len(shown)
    if left:
        body += (f"\n_… {left} more row{'s' if left != 1 else ''} not shown (size limit); the "
                 f"full table is in {pointer}._\n")
    return head + body


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>\n\n{body}\n</details>\n"


def _prov(p: Provenance) -> str:
    return md_escape(provenance_line(p))


# --------------------------------------------------------------------------- comparison


def _code(name: str) -> str:
    """A rule name inside a code span: whatever a run file holds cannot close the span
    or start a new line (markdown escapes do not apply inside backticks)."""
    return "".join(ch for ch in name if ch.isalnum() or ch in "_-.")


def cmp_row(cc: CaseComparison, m: Comparison) -> list[str]:
    d = cc.detail(m)
    unit = d.unit if d else ""
    change, interval = delta_text(m, d)
    base = fmt_value(m.baseline, unit)
    cur = fmt_value(m.current, unit)
    if d is not None and d.baseline_spread is not None:
        base += f" {spread_text(d.baseline_spread)}"
    if d is not None and d.current_spread is not None:
        cur += f" {spread_text(d.current_spread)}"
    metric = f"{ARROW[m.direction]} {m.metric}" + (f" ({unit})" if unit else "")
    return [md_escape(cc.case.config_id), str(cc.case.concurrency), md_escape(metric),
            md_escape(base), md_escape(cur), md_escape(change), md_escape(interval),
            VERDICT_MD[m.verdict] + (f" (held by `{_code(m.held_by)}`)" if m.held_by else "")]


CMP_HEADERS = ["config", "conc.>", "metric", "baseline>", "current>", "Δ>", "interval",
               "verdict"]


def comparison_markdown(cmp: RunComparison, *, verbose: bool = False,
                        row_limit: int | None = None, pointer: str | None = None,
                        heading: str = "###") -> str:
    """The diff: refusals, notes, then one table per verdict (regressions first and
    explained; unchanged folded unless ``verbose``)."""
    pointer = pointer or artifact_pointer(None)
    out = [f"{heading} Comparison against the baseline\n"]
    if cmp.baseline_label or cmp.run_label:
        out.append(f"Run {md_code(cmp.run_label or '?')} against baseline "
                   f"{md_code(cmp.baseline_label or '?')}"
                   "\n")
    out.append(f"- run: {_prov(cmp.run_provenance)}\n"
               f"- baseline: {_prov(cmp.baseline_provenance)}\n")
    for r in cmp.refusals:
        out.append(f"> **⛔ Refused:** {md_escape(r)}\n")
    if cmp.notes:
        out.append("\n>\n".join(f"> **Note:** {md_escape(n)}" for n in cmp.notes) + "\n")
    out.append(f"**{md_escape(cmp.summary_line())}**\n")
    if cmp.cases:
        out.append("↓ lower is better · ↑ higher is better · Δ = current vs baseline; the "
                   "interval is the "
                   f"{cmp.rules.confidence * 100:g} % bootstrap CI of the change "
                   "(rates: the absolute tolerance; budget: single runs, no CI); ± is the "
                   "robust spread (CV) of the samples\n")

    groups: dict[Verdict, list[tuple[CaseComparison, Comparison]]] = {v: [] for v in
                                                                      VERDICT_ORDER}
    for cc, m in cmp.all():
        groups[m.verdict].append((cc, m))
    for v in groups:
        groups[v].sort(key=lambda p: (p[0].case.config_id, p[0].case.concurrency))
    titles = {
        Verdict.REGRESSION: "🔴 Regressions",
        Verdict.IMPROVEMENT: "🟢 Improvements",
        Verdict.INCONCLUSIVE: "🟡 Inconclusive — can't tell yet, add trials",
        Verdict.UNCHANGED: "⚪ Unchanged",
    }
    for verdict, pairs in groups.items():
        if not pairs:
            continue
        table = md_table(CMP_HEADERS, pairs, lambda p: cmp_row(*p), row_limit, pointer)
        title = f"{titles[verdict]} ({len(pairs)})"
        if verdict is Verdict.REGRESSION:
            shown = pairs if row_limit is None else pairs[:row_limit]
            why = "".join(f"- **{md_escape(cc.case.id)} {md_escape(m.metric)}**: "
                          f"{md_escape(m.reason)}\n" for cc, m in shown)
            out.append(f"{heading}# {title}\n\n{table}\n{why}")
        elif verdict is Verdict.UNCHANGED and not verbose:
            out.append(_details(title, table))
        elif verdict is Verdict.INCONCLUSIVE and not verbose and len(pairs) > 20:
            out.append(_details(title, table))
        else:
            out.append(f"{heading}# {title}\n\n{table}")
    if cmp.attributions:
        out.append(f"{heading}# Acceptance loss vs step cost ({len(cmp.attributions)})\n\n"
                   "TPOT change against the baseline, split with each config's pinned-"
                   "acceptance twin (vLLM's synthetic rejection sampler at the baseline's "
                   "per-position rates): step cost = the twin vs the baseline's twin, "
                   "acceptance = real ÷ twin vs the baseline's (each line says when the "
                   "baseline kept no twin); intervals: "
                   f"{cmp.rules.confidence * 100:g} % bootstrap\n\n"
                   + "".join(f"- {md_escape(a.summary())}"
                             + (f" ({md_escape(a.note)})" if a.note else "") + "\n"
                             for a in cmp.attributions))
    notes = [(cc, n) for cc in cmp.cases for n in cc.notes]
    if notes:
        shown_notes = notes if row_limit is None else notes[:row_limit]
        out.append(_details(f"Case notes ({len(notes)})", "".join(
            f"- {md_escape(cc.case.id)}: {md_escape(n)}\n" for cc, n in shown_notes)))
    return "\n".join(out)


# --------------------------------------------------------------------------- run


def _num(v: float | None, unit: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return fmt_value(v, "" if unit in ("", "rate") else unit)


def _check_row(c: GateCheck) -> list[str]:
    unit = c.unit
    d = c.delta
    limit = (f"≥ {c.threshold:.2f}×" if c.gate == "tpot_gain" and c.threshold is not None
             else _num(c.threshold, unit))
    return [md_escape(c.case.id), md_escape(c.gate), md_escape(c.metric + (f" ({unit})" if unit
                                                                          else "")),
            _num(c.baseline, unit), _num(c.current, unit),
            "—" if d is None else f"{d * 100:+.1f} %", md_escape(limit),
            OUTCOME_MD[c.outcome] + (f" (held by `{_code(c.held_by)}`)" if c.held_by else ""),
            md_escape(c.message)]


CHECK_HEADERS = ["case", "gate", "metric", "baseline>", "current>", "Δ>", "limit>", "outcome",
                 "message"]
CASE_HEADERS = ["case", "config", "TTFT p50 ms>", "TPOT p50 ms>", "E2E p50 ms>", "out tok/s>",
                "acceptance>", "per position>", "trials>", "errors>"]


def run_markdown(run: RunResult, *, row_limit: int | None = None, pointer: str | None = None,
                 heading: str = "###") -> str:
    """Gate checks (failures first, the rest folded) and the measurements (folded)."""
    pointer = pointer or artifact_pointer(run.run_dir)
    out = []
    if run.checks:
        # Failed, then undecided (machine busy, inconclusive) in the open; the rest folded.
        shown = [c for c in run.checks if c.outcome in ("fail", "busy", "inconclusive")]
        shown.sort(key=lambda c: (OUTCOME_ORDER[c.outcome], c.case.config_id,
                                  c.case.concurrency))
        rest = [c for c in run.checks if c not in shown]
        out.append(f"{heading} Gate checks: "
                   f"{md_escape(outcomes_line(c.outcome for c in run.checks))}\n")
        busy = outside_load.run_busy_summary(run.cases, run.paired_nospec)
        if busy:
            out.append(f"> **{md_escape(busy)}**\n")
        if shown:
            out.append(md_table(CHECK_HEADERS, shown, _check_row, row_limit, pointer))
        if rest:
            rest.sort(key=lambda c: (c.outcome != "skip", c.case.config_id, c.case.concurrency))
            out.append(_details(f"Passed and skipped checks ({len(rest)})",
                                md_table(CHECK_HEADERS, rest, _check_row, row_limit, pointer)))
    for s in run.servers:
        if s.error:
            out.append(f"> **Server {md_code(s.config_id)} failed:** {md_escape(s.error)} "
                       f"(log {md_code(s.log_path)})\n")
    if run.baseline_note:
        out.append(f"_{md_escape(run.baseline_note)}_\n")
    for r in run.cases:
        if r.retry is not None:
            out.append(f"- retried {md_code(r.case.id)}: {md_escape(r.retry.summary_line())}\n")
        if r.confirmation is not None:
            out.append(f"- {md_code(r.case.id)}: "
                       f"{md_escape(r.confirmation.summary_line())}\n")
    outside = [f"{md_escape(r.case.id)}: {md_escape(line)}" for r in run.cases
               if (line := outside_load.case_sentence(r, run.paired_nospec))]
    if outside:
        # Said outside the folded table: a trial measured under a neighbour's load is why a
        # number may be off, so it must be seen.
        out.append("> **Outside CPU load:** "
                   + "<br>".join(outside if row_limit is None else outside[:row_limit]) + "\n")
    spec = spec_lines(run.cases)
    if spec:
        # Outside the folded table too: how proposals vary is what the acceptance columns
        # cannot show, and an instrument problem says the figures cannot be trusted.
        out.append("\n".join(f"- {md_escape(line)}" for line in
                             (spec if row_limit is None else spec[:row_limit])) + "\n")
    if run.cases:
        if outside_load.known(run.cases, run.paired_nospec):
            def row(r: CaseResult) -> list[str]:
                return [*_case_row(r), md_escape(outside_load.load_cell(
                    outside_load.case_load(r, run.paired_nospec)))]
            table = md_table([*CASE_HEADERS, "outside cores>"], run.cases, row, row_limit, pointer)
        else:
            table = md_table(CASE_HEADERS, run.cases, _case_row, row_limit, pointer)
        out.append(_details(f"Measurements ({len(run.cases)} cases)", table))
        line = repeats_line(run)
        if line:
            out.append(f"_{md_escape(line)}_\n")
    if run.scenarios:
        out.append(scenario_markdown(run, heading))
    section = time_scenarios_markdown(run, heading=heading)
    if section:
        out.append(section)
    if run.time_breakdown is not None:
        out.append(f"_{md_escape(time_lines(run.time_breakdown)[0])}_\n")
    return "\n".join(out)


def time_scenarios_markdown(run: RunResult, *, heading: str = "###") -> str:
    """The soak's windows with each trend's slope and interval; the ramp's phases side by
    side ('' for a run without scenarios)."""
    if run.time_scenarios is None:
        return ""
    out = []

    def row(cells: list[str]) -> list[str]:
        return [md_escape(c) for c in cells]

    for soak in run.time_scenarios.soak:
        out.append(f"{heading} {md_escape(time_scenarios.soak_title(soak))}\n")
        out += [f"- {md_escape(time_scenarios.fit_line(f))}" for f in soak.fits]
        out.append("")
        out.append(md_table(time_scenarios.SOAK_HEADERS, time_scenarios.soak_rows(soak),
                            row, None, ""))
    for ramp in run.time_scenarios.ramp:
        out.append(f"{heading} {md_escape(time_scenarios.ramp_title(ramp))}\n")
        out.append(md_table(time_scenarios.RAMP_HEADERS, time_scenarios.ramp_rows(ramp),
                            row, None, ""))
    return "\n".join(out)


def _case_row(r: CaseResult) -> list[str]:
    a = r.acceptance
    rate = "—" if a is None else ("n/a" if a.rate is None else f"{a.rate:.3f}")
    pos = "—" if a is None or a.rate is None else " / ".join(
        f"{x:.2f}" for x in a.per_position_rate)
    return [md_escape(r.case.id), md_escape(r.config_label), _num(r.ttft_ms.median, "ms"),
            _num(r.tpot_ms.median, "ms"), _num(r.e2e_ms.median, "ms"),
            f"{r.output_throughput:.1f}", rate, pos, str(len(r.trials)), str(r.n_errors)]


def _document(run: RunResult, comparison: RunComparison | None, *, row_limit: int | None,
              verbose: bool, pointer: str) -> str:
    if comparison is not None and comparison.refused:
        status = "⛔ comparison refused"
    elif comparison is not None and comparison.regressions:
        n = len(comparison.regressions)
        status = f"🔴 {n} regression{'s' if n != 1 else ''}"
    elif run.failed:
        status = f"❌ {len(run.failed)} gate check{'s' if len(run.failed) != 1 else ''} failed"
    elif (busy := sum(c.outcome == "busy" for c in run.checks)):
        status = f"⏸️ machine busy: {busy} check{'s' if busy != 1 else ''} not measured (not a failure)"
    elif (undecided := sum(c.outcome == "inconclusive" for c in run.checks)):
        status = f"❔ {undecided} check{'s' if undecided != 1 else ''} inconclusive (not a failure)"
    else:
        status = "✅ no regression" if comparison is not None else "✅ all gate checks passed"
    parts = [f"## specperf · {md_escape(run.provenance.profile_name)} · {status}\n",
             f"{_prov(run.provenance)} · {len(run.cases)} cases\n"]
    if comparison is not None:
        parts.append(comparison_markdown(comparison, verbose=verbose, row_limit=row_limit,
                                         pointer=pointer))
    body = run_markdown(run, row_limit=row_limit, pointer=pointer)
    if body:
        parts.append(body)
    parts.append(f"<sub>Full report: {pointer}.</sub>\n")
    return "\n".join(parts)


def render_markdown(run: RunResult, comparison: RunComparison | None = None, *,
                    max_bytes: int = MAX_BYTES, verbose: bool = False,
                    pointer: str | None = None) -> str:
    """The whole report as GFM, at most ``max_bytes`` bytes of UTF-8."""
    pointer = pointer or artifact_pointer(run.run_dir)
    # Try the whole document, then every table cut to fewer and fewer rows. A table row is
    # rarely under 60 bytes, so skip the limits that cannot fit.
    rows = len(run.cases) + len(run.checks) + (len(comparison.all()) if comparison else 0)
    for limit in _ROW_LIMITS:
        if limit is not None and limit > rows:
            continue
        if limit is None and rows * 60 > max_bytes:
            continue
        text = _document(run, comparison, row_limit=limit, verbose=verbose, pointer=pointer)
        if len(text.encode("utf-8")) <= max_bytes:
            return text
    # Even 5 rows a table is too much (huge notes or messages): say where to look.
    short = (f"## specperf · {md_escape(run.provenance.profile_name)}\n\n{_prov(run.provenance)}\n\n"
             f"The report is too large for this page; see {pointer}.\n")
    if comparison is not None:
        short += f"\n**{md_escape(comparison.summary_line())}**\n"
    encoded = short.encode("utf-8")[:max_bytes]
    return encoded.decode("utf-8", errors="ignore")


def write_markdown(path: Path | str, run: RunResult, comparison: RunComparison | None = None,
                   **kwargs: object) -> Path:
    path = Path(path)
    atomic_write_text(path, render_markdown(run, comparison, **kwargs))  # type: ignore[arg-type]
    return path


def write_step_summary(run: RunResult, comparison: RunComparison | None = None) -> Path | None:
    """Append the report to ``$GITHUB_STEP_SUMMARY`` when it is set (on GitHub Actions);
    returns the path written, or None. Keeps the file under GitHub's 1 MiB limit."""
    path = settings.current().github_step_summary
    if path is None:
        return None
    used = path.stat().st_size if path.exists() else 0
    budget = min(MAX_BYTES, STEP_SUMMARY_LIMIT - used - 1024)
    if budget < 2048:
        return None
    text = render_markdown(run, comparison, max_bytes=budget)
    with path.open("a", encoding="utf-8") as f:
        f.write(text.rstrip("\n") + "\n\n")
    return path
