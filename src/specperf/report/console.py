"""The rich console views: a run (measurements + gate checks) and a comparison.

Everything returns a string, so the same text goes to a terminal, a pytest summary, a CI
log or a file. Rules that keep it readable everywhere:

* every dynamic string goes into a :class:`rich.text.Text`, never through rich markup,
  so names like ``acceptance_rate[pos 1]`` print as they are;
* ``color=None`` means "colour only on a terminal": never when stdout is not a TTY, and
  never when ``NO_COLOR`` is set (https://no-color.org; it wins even over ``color=True``);
  ``FORCE_COLOR`` turns it on for a CI log that renders ANSI;
* the width is explicit (default: the terminal's, else ``COLUMNS``, else 100) and rich
  wraps cells to fit, so no line is wider than asked, down to 80 columns;
* no control character of the content reaches the terminal: every segment rich renders
  passes through :func:`specperf.report.escape.terminal_text` (a run file's case id or
  vLLM version holding ``ESC ] 0;title BEL`` prints as that text), the one place all
  printed run content passes; rich's own colour codes are added after it. What the CLI
  prints outside these views goes through :func:`plain`.

Why one module past 600 lines: it is every console view of the one result object (run,
baseline, comparison), and they share the width, colour and escaping rules above; split,
each view would restate them.
"""

from __future__ import annotations

import io
import math
import shutil
import sys
from collections.abc import Iterable
from typing import TextIO

from rich import box
from rich.console import (
    Console,
    ConsoleOptions,
    Group,
    RenderableType,
    RenderHook,
    RenderResult,
)
from rich.padding import Padding
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from specperf.analysis import outside_load, spec_counters
from specperf.analysis.judge.models import VERDICT_ORDER, CaseComparison, MetricDetail, RunComparison
from specperf.analysis.judge.outcome import OUTCOME_ORDER, exit_status, outcomes_line
from specperf.analysis.stats import Comparison, Direction, Verdict
from specperf.config import settings
from specperf.report import time_scenarios
from specperf.report.escape import terminal_text
from specperf.report.scenarios import scenario_text
from specperf.schemas import (
    Baseline,
    CaseResult,
    GateCheck,
    Provenance,
    RunResult,
    TimeBreakdown,
)

__all__ = [
    "checks_table",
    "cases_table",
    "default_width",
    "fmt_value",
    "plain",
    "render_baseline",
    "render_comparison",
    "render_run",
    "render_summary",
    "skipped_lines",
    "spec_lines",
    "time_lines",
    "want_color",
]

OUTCOME_STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow",
                 "inconclusive": "bold yellow", "busy": "bold magenta"}
OUTCOME_WORD = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP", "inconclusive": "INCONCLUSIVE",
                "busy": "BUSY"}
VERDICT_STYLE = {
    Verdict.REGRESSION: "bold red",
    Verdict.IMPROVEMENT: "bold green",
    Verdict.INCONCLUSIVE: "yellow",
    Verdict.UNCHANGED: "dim",
}
VERDICT_WORD = {v: v.value.upper() for v in Verdict}
ARROW = {Direction.LOWER_IS_BETTER: "↓", Direction.HIGHER_IS_BETTER: "↑"}
FALLBACK_WIDTH = 100


# --------------------------------------------------------------------------- environment


def want_color(color: bool | None = None, stream: TextIO | None = None) -> bool:
    """Whether to emit ANSI colour: NO_COLOR always wins, then ``color``, then FORCE_COLOR,
    then "is ``stream`` (stdout) a terminal"."""
    env = settings.current()
    if env.no_color:
        return False
    if color is not None:
        return color
    if env.force_color:
        return True
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and env.term != "dumb"


def default_width(stream: TextIO | None = None) -> int:
    """The terminal's width on a TTY, else COLUMNS, else 100 (a CI log has no width)."""
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    if isatty and isatty():
        return max(40, shutil.get_terminal_size((FALLBACK_WIDTH, 24)).columns)
    columns = settings.current().columns
    return FALLBACK_WIDTH if columns is None else max(40, columns)


def _text(buf: io.StringIO) -> str:
    """The rendered text without rich's trailing padding (noise in CI logs and diffs)."""
    return "\n".join(line.rstrip() for line in buf.getvalue().split("\n"))


class _Folded:
    """A renderable as rich renders it, with the control characters of its text folded
    (:func:`terminal_text`); rich's control segments (its own cursor moves) untouched."""

    def __init__(self, inner: RenderableType) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for seg in console.render(self.inner, options):
            yield seg if seg.control else Segment(terminal_text(seg.text), seg.style)


class _FoldControls(RenderHook):
    def process_renderables(self, renderables: list[RenderableType]) -> list[RenderableType]:
        return [_Folded(r) for r in renderables]


def plain(text: str) -> str:
    """A line the CLI prints outside the views (a file name, a run's label): its control
    characters folded as the views fold theirs."""
    return terminal_text(text)


def _console(buf: io.StringIO, width: int | None, color: bool | None) -> Console:
    on = want_color(color)
    console = Console(
        file=buf,
        width=width or default_width(),
        force_terminal=on,
        no_color=not on,
        color_system="standard" if on else None,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
        legacy_windows=False,
        _environ={},  # COLUMNS/NO_COLOR/FORCE_COLOR are decided above, not again by rich
    )
    console.push_render_hook(_FoldControls())
    return console


# --------------------------------------------------------------------------- numbers


def fmt_value(v: float | None, unit: str = "") -> str:
    """A figure for a table: 4 significant digits, rates with 4 decimals, '—' if missing."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if unit in ("", "rate"):
        return f"{v:.4f}"
    a = abs(v)
    digits = 0 if a >= 1000 else 1 if a >= 100 else 2 if a >= 10 else 3
    return f"{v:.{digits}f}"


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    if unit == "ms":
        return f"{v:.2f}" if v < 100 else f"{v:.1f}"
    if unit in ("", "rate"):
        return f"{v:.4f}"
    return f"{v:.1f}"


def _signed(ratio: float, digits: int = 1) -> str:
    if not math.isfinite(ratio):
        return "+inf" if ratio > 0 else "?"
    return f"{(ratio - 1.0) * 100:+.{digits}f}"


#: Sample kinds judged by the budget rule (no interval; min_effect holds the budget).
BUDGET_SAMPLES = ("trial_means", "summary")


def delta_text(m: Comparison, detail: MetricDetail | None = None) -> tuple[str, str]:
    """(change, interval) as shown in every renderer, e.g. ('+30.0 %', '[+25.1, +35.0]');
    for a rate the absolute difference and its tolerance; for the budget rule the budget."""
    if m.statistic == "rate":
        diff = m.current - m.baseline
        return f"{diff:+.4f}", f"tol ±{m.min_effect:g}"
    if not math.isfinite(m.ratio):
        return "—", "(undefined)"
    change = f"{_signed(m.ratio)} %"
    if math.isnan(m.ci_low) or math.isnan(m.ci_high):
        if detail is not None and detail.samples in BUDGET_SAMPLES:
            return change, f"budget ±{m.min_effect * 100:g} %"
        return change, "(no CI)"
    return change, f"[{_signed(m.ci_low)}, {_signed(m.ci_high)}]"


def spread_text(spread: float | None) -> str:
    return "" if spread is None else f"±{spread * 100:.0f}%" if spread >= 0.1 else \
        f"±{spread * 100:.1f}%"


# --------------------------------------------------------------------------- run view


def _delta(c: GateCheck) -> Text:
    d = c.delta
    if d is None:
        return Text("—")
    worse = (d < 0) if c.higher_is_better else (d > 0)
    return Text(f"{d * 100:+.1f} %", style="red" if worse and abs(d) > 1e-9 else "green")


#: Below this many columns the tables take their narrow layout: the case column keeps
#: every id whole (CI logs are 80 columns: nox's output is not a terminal) and the
#: columns that can go, go (per-position acceptance; a baseline column with no baseline).
NARROW = 100

#: What each kind of check judges, for the one line of a skipped group.
_KIND_WORDS = {"latency": "latency (TTFT, TPOT, E2E)", "throughput": "throughput",
               "acceptance": "acceptance", "tpot_gain": "TPOT gain", "requests": "requests"}


def _case_column(t: Table, ids: Iterable[str], header: str = "case") -> None:
    """A case column that never cuts an id ("draft-k1-c1", "tiny:…"): as wide as the
    longest, no wrapping; the other columns wrap or shrink first."""
    t.add_column(header, no_wrap=True, min_width=max((len(i) for i in ids), default=4))


def _longest_word(names: Iterable[str]) -> int:
    """The widest word of ``names``: a name column at least this wide wraps its names at
    their spaces and never cuts a word ("throughp" / "ut" at 80 columns, issue #55)."""
    return max((len(word) for name in names for word in name.split()), default=4)


def checks_table(run: RunResult, checks: Iterable[GateCheck] | None = None,
                 width: int | None = None) -> Table:
    """The gate checks (``checks``: default every one of the run), failures first. Under
    :data:`NARROW` columns the baseline and Δ columns go when no row has a baseline."""
    rows = list(run.checks if checks is None else checks)
    narrow = width is not None and width < NARROW
    with_baseline = not narrow or any(c.baseline is not None for c in rows)
    # Narrow: one space between columns (not three), so that the metric's name keeps
    # its words whole beside the figures at 80 columns.
    t = Table(title="specperf gate checks", show_lines=False, header_style="bold",
              box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1) if not narrow else (0, 0))
    _case_column(t, (c.case.id for c in rows))
    names = [_check_metric(c) for c in rows]
    # One line at 100 columns; narrower, a long name wraps at its spaces rather than losing
    # its end, as wide as its longest word so that no word is cut.
    t.add_column("metric", min_width=max(_longest_word(names), 0 if narrow else 22),
                 overflow="fold")
    # The figures never wrap: the metric's name is the one column that gives way.
    if with_baseline:
        t.add_column("baseline", justify="right", no_wrap=True)
    t.add_column("current", justify="right", no_wrap=True)
    if with_baseline:
        t.add_column("Δ", justify="right", no_wrap=True)
    t.add_column("limit", justify="right", no_wrap=True)
    t.add_column("result", justify="center", no_wrap=True)
    order = OUTCOME_ORDER
    for c in sorted(rows, key=lambda c: (order[c.outcome], c.case.config_id,
                                         c.case.concurrency)):
        unit = c.unit or ("rate" if "acceptance" in c.metric else "")
        metric = _check_metric(c)
        limit = c.threshold
        limit_txt = (f"≥ {limit:.2f}×" if c.gate == "tpot_gain" and limit is not None
                     else _fmt(limit, unit))
        cells = [Text(c.case.id), Text(metric)]
        if with_baseline:
            cells.append(Text(_fmt(c.baseline, unit)))
        cells.append(Text(_fmt(c.current, unit)))
        if with_baseline:
            cells.append(_delta(c))
        result = Text(OUTCOME_WORD[c.outcome], style=OUTCOME_STYLE[c.outcome])
        if c.held_by:
            result.append("\n(held)", style="dim")
        cells += [Text(limit_txt), result]
        t.add_row(*cells)
    return t


def _check_metric(c: GateCheck) -> str:
    """A check's metric cell: its name and unit (a hold rule that held it is marked in the
    result cell and named under the table, :func:`held_check_lines`)."""
    return c.metric + (f" ({c.unit})" if c.unit else "")



def held_check_lines(checks: Iterable[GateCheck]) -> list[str]:
    """One line per hold rule that held a check: 'held by unproven_baseline: draft-k2-c1
    TPOT, E2E; nospec-c1 TPOT' (docs/statistics.md, "The hold rules"), where the rule's
    name fits whole."""
    by_rule: dict[str, dict[str, list[str]]] = {}
    for c in checks:
        if c.held_by:
            by_rule.setdefault(c.held_by, {}).setdefault(c.case.id, []).append(c.metric)
    return [f"held by {rule}: " + "; ".join(f"{case} {', '.join(ms)}" for case, ms in cases.items())
            for rule, cases in by_rule.items()]


def skipped_lines(checks: Iterable[GateCheck]) -> list[str]:
    """One line per group of skipped checks (one reason): which kinds of check, of how
    many cases, why, and the fix the reason names — instead of a row per check, e.g.
    'not judged: latency (TTFT, TPOT, E2E) and throughput of 18 cases (36 checks) — no
    baseline for profile …; record one with --perf-update-baselines'."""
    groups: dict[str, list[GateCheck]] = {}
    for c in checks:
        if c.outcome == "skip":
            groups.setdefault(c.message.replace(c.case.id, "<case>"), []).append(c)
    lines = []
    for why, group in groups.items():
        kinds = list(dict.fromkeys(_KIND_WORDS.get(c.gate, c.gate) for c in group))
        cases = list(dict.fromkeys(c.case.id for c in group))
        which = " and ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 1 else kinds)
        named = f" ({', '.join(cases)})" if len(cases) <= 4 else ""
        lines.append(f"not judged: {which} of {len(cases)} case{'s' * (len(cases) != 1)}"
                     f"{named} ({len(group)} check{'s' * (len(group) != 1)}) — {why}")
    return lines


def cases_table(run: RunResult | Baseline | Iterable[CaseResult],
                title: str = "specperf measurements", width: int | None = None) -> Table:
    """One row per case. Under :data:`NARROW` columns the per-position acceptance goes
    (the acceptance checks and every report show it) so that no figure is cut."""
    cases = run.cases if isinstance(run, RunResult | Baseline) else list(run)
    paired = run.paired_nospec if isinstance(run, RunResult) else None
    # Other processes' CPU during the trials (the contention guard); left out for run
    # files written before it, which do not know.
    outside = outside_load.known(cases, paired)
    per_position = width is None or width >= NARROW
    t = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    _case_column(t, (r.case.id for r in cases))
    for col in ("TTFT p50 ms", "TPOT p50 ms", "E2E p50 ms", "out tok/s", "accept",
                *(["accept per position"] if per_position else []), "err",
                *(["outside cores"] if outside else [])):
        t.add_column(col, justify="right", no_wrap=col == "accept per position")
    for r in cases:
        rate, positions = _acc(r)
        cells = [Text(r.case.id), Text(_fmt(r.ttft_ms.median, "ms")),
                 Text(_fmt(r.tpot_ms.median, "ms")), Text(_fmt(r.e2e_ms.median, "ms")),
                 Text(f"{r.output_throughput:.1f}"), Text(rate),
                 *([Text(positions)] if per_position else []),
                 Text(str(r.n_errors), style="red" if r.n_errors else "")]
        if outside:
            load = outside_load.case_load(r, paired)
            cells.append(Text(outside_load.load_cell(load), style="yellow" if load.contended else ""))
        t.add_row(*cells)
    return t


def outside_load_lines(run: RunResult | Baseline) -> list[str]:
    """One line per case the contention guard acted on, e.g. 'outside load: draft-k2-c1:
    2 trials re-measured under outside load 0.90, 0.60 cores'."""
    paired = run.paired_nospec if isinstance(run, RunResult) else None
    return [f"outside load: {r.case.id}: {line}" for r in run.cases
            if (line := outside_load.case_sentence(r, paired))]


def spec_lines(cases: Iterable[CaseResult]) -> list[str]:
    """'proposals: …' for each case whose proposals vary in length, then the counters'
    cross-check ('instrument problem: …' or that they agree), when the server reported
    per-request metrics."""
    cases = list(cases)
    return ([f"proposals: {line}" for r in cases if (line := spec_counters.proposal_line(r))]
            + spec_counters.cross_check_lines(cases))


def _acc(r: CaseResult) -> tuple[str, str]:
    a = r.acceptance
    if a is None or a.rate is None:
        return ("—", "—") if r.acceptance is None else ("n/a", "n/a")
    return f"{a.rate:.3f}", " ".join(f"{x:.2f}" for x in a.per_position_rate)


def provenance_line(p: Provenance, provisional: bool = True) -> str:
    parts = [f"{p.profile_name} ({p.profile_hash[:8]})", p.hardware,
             f"vLLM {p.vllm_version or '?'}", f"{p.date:%Y-%m-%d}"]
    if p.git_commit:
        parts.append(f"commit {p.git_commit[:10]}")
    line = " · ".join(parts)
    return line + (f" · PROVISIONAL: {p.provisional}" if p.provisional and provisional else "")


#: TimeBreakdown's buckets as the time line names them, in its order.
TIME_PARTS = (("server_starts_s", "server starts"), ("trials_s", "trials"),
              ("warmups_s", "warm-ups"), ("remeasures_s", "re-measures"),
              ("busy_waits_s", "quiet-machine waits"),
              ("restarts_s", "confirmation restarts"), ("reports_s", "reports"),
              ("shutdown_s", "shutdown"), ("other_s", "other"))


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if 0.05 <= s < 9.95 else f"{s:.0f} s"


def time_lines(t: TimeBreakdown, width: int | None = None) -> list[str]:
    """Where a run's wall time went, e.g. 'time: 412 s = server starts 184 s · trials 156 s
    · … · other 41 s (1.14× starts+trials+warm-ups)'; wrapped at the ' · ' between parts
    into lines of at most ``width`` columns (two at 120, three at 80)."""
    ratio = t.quiet_ratio
    parts = [f"{label} {_seconds(getattr(t, key))}" for key, label in TIME_PARTS]
    parts[-1] += (f" ({ratio:.2f}× starts+trials+warm-ups)" if ratio is not None
                  else " (no server started, nothing measured)")
    head = f"time: {_seconds(t.wall_s)} = "
    if width is None:
        return [head + " · ".join(parts)]
    lines, line = [], head + parts[0]
    for part in parts[1:]:
        if len(line) + 3 + len(part) > width:
            lines.append(line + " ·")
            line = "  " + part
        else:
            line += " · " + part
    return [*lines, line]


def render_run(run: RunResult, width: int | None = None, color: bool | None = None,
               brief: bool = False) -> str:
    """Measurements, gate checks (failures first), server errors and a one-line summary.

    Skipped checks are one line per reason (:func:`skipped_lines`), never a row each.
    ``brief`` (the pytest summary without ``-v``): the checks table holds only the checks
    that did not pass — each passed one is in report.txt/report.md and the run file."""
    buf = io.StringIO()
    console = _console(buf, width, color)
    console.print(Text(provenance_line(run.provenance), style="dim"))
    console.print(cases_table(run, width=console.width))
    for r in run.cases:
        if r.retry is not None:
            console.print(Text(f"retried {r.case.id}: {r.retry.summary_line()}"))
        if r.confirmation is not None:
            console.print(Text(f"{r.case.id}: {r.confirmation.summary_line()}"))
    for line in outside_load_lines(run):
        console.print(Text(line, style="yellow"))
    for line in spec_lines(run.cases):
        console.print(Text(line, style="yellow" if line.startswith("instrument") else ""))
    for line in scenario_text(run):
        console.print(Text(line))
    for renderable in time_scenario_renderables(run):
        console.print(renderable)
    shown = [c for c in run.checks
             if c.outcome != "skip" and not (brief and c.outcome == "pass")]
    if shown:
        console.print(checks_table(run, shown, width=console.width))
        for line in held_check_lines(shown):
            console.print(Text(line, style="dim"))
    passed = sum(c.outcome == "pass" for c in run.checks)
    if brief and passed:
        console.print(Text(f"{passed} check{'s' * (passed != 1)} passed"
                           f"{' (every judged one)' if not shown else ''}: each is listed in "
                           "report.txt and report.md (-v lists them here)", style="green"))
    skipped = skipped_lines(run.checks)
    for line in skipped:
        console.print(Text(line, style="yellow"))
    for s in run.servers:
        if s.error:
            console.print(Text(f"server {s.config_id}: {s.error} (log {s.log_path})", style="red"))
    if run.baseline_note and not any(run.baseline_note in line for line in skipped):
        console.print(Text(run.baseline_note))
    outcomes = [c.outcome for c in run.checks]
    status = exit_status(outcomes)
    style = {0: "bold green", 1: "bold red", 6: "bold yellow", 7: "bold magenta"}[status]
    console.print(Text(f"{len(run.cases)} cases, {len(run.checks)} checks: "
                       f"{outcomes_line(outcomes)} (exit {status})", style=style))
    busy = outside_load.run_busy_summary(run.cases, run.paired_nospec)
    if busy:
        console.print(Text(busy, style="magenta"))
    return _text(buf)


def _rows_table(title: str, headers: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for h in headers:
        table.add_column(h.rstrip(">"), justify="right" if h.endswith(">") else "left")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def time_scenario_renderables(run: RunResult) -> list[RenderableType]:
    """The soak's windows with its trends, the ramp's phases side by side."""
    if run.time_scenarios is None:
        return []
    out: list[RenderableType] = []
    for soak in run.time_scenarios.soak:
        out.append(_rows_table(time_scenarios.soak_title(soak), time_scenarios.SOAK_HEADERS,
                               time_scenarios.soak_rows(soak)))
        out += [Text(time_scenarios.fit_line(f), style=OUTCOME_STYLE[f.outcome])
                for f in soak.fits]
    for ramp in run.time_scenarios.ramp:
        out.append(_rows_table(time_scenarios.ramp_title(ramp), time_scenarios.RAMP_HEADERS,
                               time_scenarios.ramp_rows(ramp)))
    return out


def render_baseline(baseline: Baseline, width: int | None = None,
                    color: bool | None = None) -> str:
    buf = io.StringIO()
    console = _console(buf, width, color)
    console.print(Text(f"specperf baseline — {len(baseline.cases)} cases", style="bold"))
    console.print(Text(provenance_line(baseline.provenance), style="dim"))
    console.print(cases_table(baseline, title="baseline measurements", width=console.width))
    for line in outside_load_lines(baseline):
        console.print(Text(line, style="yellow"))
    return _text(buf)


def render_summary(result: RunResult | Baseline, width: int | None = None,
                   color: bool | None = None) -> str:
    """`specperf show`: a run or a baseline, whichever it is."""
    if isinstance(result, Baseline):
        return render_baseline(result, width, color)
    return render_run(result, width, color)


# --------------------------------------------------------------------------- comparison


def _metric_cell(m: Comparison, d: MetricDetail | None) -> Text:
    t = Text(f"{ARROW[m.direction]} ")
    t.append(m.metric)
    unit = d.unit if d is not None else ""
    if unit:
        t.append(f" {unit}", style="dim")
    return t


def _value_cell(v: float, unit: str, spread: float | None) -> Text:
    t = Text(fmt_value(v, unit))
    s = spread_text(spread)
    if s:
        t.append(f"\n{s}", style="dim")
    return t


def _verdict_cell(m: Comparison) -> Text:
    """The verdict, marked "(held)" when a hold rule made it INCONCLUSIVE; which rule is
    one line under the config's table (:func:`_held_lines`), where its name fits whole."""
    t = Text(VERDICT_WORD[m.verdict], style=VERDICT_STYLE[m.verdict])
    if m.held_by:
        t.append("\n(held)", style="dim")
    return t


def _held_lines(rows: list[tuple[CaseComparison, Comparison, MetricDetail | None]]) -> list[str]:
    """One line per hold rule that held something of a config: 'held by
    unproven_baseline: c4 TPOT, E2E; c8 TPOT' (docs/statistics.md, "The hold rules")."""
    by_rule: dict[str, dict[int, list[str]]] = {}
    for cc, m, _ in rows:
        if m.held_by:
            by_rule.setdefault(m.held_by, {}).setdefault(cc.case.concurrency, []).append(m.metric)
    return [f"held by {rule}: " + "; ".join(f"c{c} {', '.join(ms)}" for c, ms in concs.items())
            for rule, concs in by_rule.items()]


def _delta_cell(m: Comparison, d: MetricDetail | None) -> Text:
    change, interval = delta_text(m, d)
    style = VERDICT_STYLE[m.verdict] if m.verdict in (Verdict.REGRESSION,
                                                       Verdict.IMPROVEMENT) else ""
    t = Text(change, style=style)
    t.append("\n" + interval, style="dim")
    return t


def _rows(cc: CaseComparison, verbose: bool) -> list[tuple[Comparison, MetricDetail | None]]:
    rows = [(m, cc.detail(m)) for m in cc.comparisons]
    if not verbose:
        rows = [r for r in rows if r[0].verdict is not Verdict.UNCHANGED]
    return rows


def _config_header(cc: CaseComparison) -> Text:
    t = Text(cc.case.config_id, style="bold")
    if cc.config_label and cc.config_label != cc.case.config_id:
        t.append(f" — {cc.config_label}")
    if cc.method:
        spec = f"{cc.method}"
        if cc.draft_model:
            spec += f", draft {cc.draft_model}"
        if cc.num_speculative_tokens is not None:
            spec += f", k={cc.num_speculative_tokens}"
        t.append(f" ({spec})", style="dim")
    return t


def _group_tables(cmp: RunComparison, verbose: bool
                  ) -> list[tuple[Text, Table | None, list[RenderableType]]]:
    groups: dict[str, list[CaseComparison]] = {}
    for cc in cmp.cases:
        groups.setdefault(cc.case.config_id, []).append(cc)

    def worst(ccs: list[CaseComparison]) -> int:
        return min((VERDICT_ORDER[v] for cc in ccs if (v := cc.worst) is not None), default=9)

    out = []
    for ccs in sorted(groups.values(), key=worst):
        table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False,
                      show_edge=False, padding=(0, 1))
        table.add_column("case", no_wrap=True)
        table.add_column("metric", overflow="fold", min_width=12)
        table.add_column("baseline", justify="right")
        table.add_column("current", justify="right")
        table.add_column(f"Δ ({ccs[0].comparisons[0].confidence * 100:g} % CI)"
                         if ccs[0].comparisons else "Δ", justify="right")
        table.add_column("verdict")
        footer: list[RenderableType] = []
        reasons: list[RenderableType] = []
        hidden = 0
        rows: list[tuple[CaseComparison, Comparison, MetricDetail | None]] = []
        for cc in sorted(ccs, key=lambda c: c.case.concurrency):
            visible = _rows(cc, verbose)
            hidden += len(cc.comparisons) - len(visible)
            rows.extend((cc, m, d) for m, d in visible)
            for note in cc.notes:
                footer.append(Padding(Text(f"note c{cc.case.concurrency}: {note}", style="dim"),
                                      (0, 0, 0, 2)))
        rows.sort(key=lambda r: (VERDICT_ORDER[r[1].verdict], r[0].case.concurrency))
        for cc, m, d in rows:
            table.add_row(
                Text(f"c{cc.case.concurrency}"),
                _metric_cell(m, d),
                _value_cell(m.baseline, d.unit if d else "", d.baseline_spread if d else None),
                _value_cell(m.current, d.unit if d else "", d.current_spread if d else None),
                _delta_cell(m, d),
                _verdict_cell(m),
            )
            if m.verdict is Verdict.REGRESSION or (verbose and m.verdict is not
                                                   Verdict.UNCHANGED):
                mark = "✗" if m.verdict is Verdict.REGRESSION else "·"
                reasons.append(Padding(
                    Text(f"{mark} c{cc.case.concurrency} {m.reason}",
                         style="red" if m.verdict is Verdict.REGRESSION else ""),
                    (0, 0, 0, 2)))
        footer[:0] = [*reasons, *(Padding(Text(line, style="yellow"), (0, 0, 0, 2))
                                  for line in _held_lines(rows))]
        if hidden:
            footer.append(Padding(Text(f"+ {hidden} unchanged metric{'s' if hidden != 1 else ''}"
                                       " (-v lists them)", style="dim"), (0, 0, 0, 2)))
        header = Text("")
        header.append_text(_config_header(ccs[0]))
        out.append((header, table if rows else None, footer))
    return out


def render_comparison(cmp: RunComparison, width: int | None = None,
                      color: bool | None = None, verbose: bool = False) -> str:
    """The diff, grouped by server config, regressions first and explained; unchanged
    metrics are counted, not listed, unless ``verbose``; one summary line at the end."""
    buf = io.StringIO()
    console = _console(buf, width, color)
    title = Text("specperf compare", style="bold")
    console.print(title)
    if cmp.run_label:
        console.print(Text(f"  run:      {cmp.run_label}"))
    if cmp.baseline_label:
        console.print(Text(f"  baseline: {cmp.baseline_label}"))
    # (a provisional side is said in the notes below)
    console.print(Text(f"  run:      {provenance_line(cmp.run_provenance, False)}",
                       style="dim"))
    console.print(Text(f"  baseline: {provenance_line(cmp.baseline_provenance, False)}",
                       style="dim"))
    for r in cmp.refusals:
        console.print(Text(f"REFUSED: {r}", style="bold red"))
    for n in cmp.notes:
        console.print(Text(f"note: {n}", style="yellow"))
    if cmp.cases:
        console.print(Text("↓ lower is better · ↑ higher is better · Δ = current vs baseline",
                           style="dim"))
    for header, table, footer in _group_tables(cmp, verbose):
        console.print()
        console.rule(header, align="left", style="dim")
        if table is not None:
            console.print(table)
        if footer:
            console.print(Group(*footer))
    if cmp.attributions:
        console.print()
        console.rule("acceptance loss vs step cost (real vs pinned-acceptance twin, each "
                     "against the baseline's)", align="left", style="dim")
        for a in cmp.attributions:
            style = "bold" if a.causes else ("yellow" if a.undecided else "")
            console.print(Text(a.summary(), style=style))
            if a.note:
                console.print(Text(f"  {a.note}", style="dim"))
    console.print()
    counts = cmp.counts()
    if cmp.refused or counts[Verdict.REGRESSION]:
        style = "bold red"
    elif counts[Verdict.INCONCLUSIVE]:
        style = "bold yellow"
    else:
        style = "bold green"
    console.print(Text(cmp.summary_line(), style=style))
    return _text(buf)
