"""The rich console view of a run: one row per case and metric."""

from __future__ import annotations

import io
import os

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specperf.schemas import CaseResult, GateCheck, RunResult

OUTCOME_STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}
OUTCOME_WORD = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    if unit == "ms":
        return f"{v:.2f}" if v < 100 else f"{v:.1f}"
    if unit in ("", "rate"):
        return f"{v:.4f}"
    return f"{v:.1f}"


def _delta(c: GateCheck) -> Text:
    d = c.delta
    if d is None:
        return Text("—")
    worse = (d < 0) if c.higher_is_better else (d > 0)
    return Text(f"{d * 100:+.1f} %", style="red" if worse and abs(d) > 1e-9 else "green")


def checks_table(run: RunResult) -> Table:
    t = Table(title="specperf gate checks", show_lines=False, header_style="bold")
    t.add_column("case", no_wrap=True)
    t.add_column("metric")
    t.add_column("baseline", justify="right")
    t.add_column("current", justify="right")
    t.add_column("Δ", justify="right")
    t.add_column("limit", justify="right")
    t.add_column("verdict", justify="center")
    order = {"fail": 0, "skip": 2, "pass": 1}
    for c in sorted(run.checks, key=lambda c: (order[c.outcome], c.case.config_id,
                                               c.case.concurrency)):
        unit = c.unit or ("rate" if "acceptance" in c.metric else "")
        metric = c.metric + (f" ({c.unit})" if c.unit else "")
        limit = c.threshold
        limit_txt = (f"≥ {limit:.2f}×" if c.gate == "tpot_gain" and limit is not None
                     else _fmt(limit, unit))
        t.add_row(c.case.id, metric, _fmt(c.baseline, unit), _fmt(c.current, unit), _delta(c),
                  limit_txt, Text(OUTCOME_WORD[c.outcome], style=OUTCOME_STYLE[c.outcome]))
    return t


def cases_table(run: RunResult) -> Table:
    t = Table(title="specperf measurements", header_style="bold")
    for col in ("case", "TTFT p50 ms", "TPOT p50 ms", "E2E p50 ms", "out tok/s", "accept",
                "accept per position", "err"):
        t.add_column(col, justify="left" if col == "case" else "right", no_wrap=col == "case")
    for r in run.cases:
        t.add_row(r.case.id, _fmt(r.ttft_ms.median, "ms"), _fmt(r.tpot_ms.median, "ms"),
                  _fmt(r.e2e_ms.median, "ms"), f"{r.output_throughput:.1f}", *_acc(r),
                  str(r.n_errors))
    return t


def _acc(r: CaseResult) -> tuple[str, str]:
    a = r.acceptance
    if a is None or a.rate is None:
        return ("—", "—") if r.acceptance is None else ("n/a", "n/a")
    return f"{a.rate:.3f}", " ".join(f"{x:.2f}" for x in a.per_position_rate)


def render_run(run: RunResult, width: int | None = None, color: bool | None = None) -> str:
    if color is None:
        color = "NO_COLOR" not in os.environ and (os.environ.get("FORCE_COLOR") is not None)
    buf = io.StringIO()
    console = Console(file=buf, width=width or 120, force_terminal=color, no_color=not color,
                      highlight=False)
    console.print(cases_table(run))
    if run.checks:
        console.print(checks_table(run))
    for s in run.servers:
        if s.error:
            console.print(Text(f"server {s.config_id}: {s.error} (log {s.log_path})", style="red"))
    if run.baseline_note:
        console.print(run.baseline_note)
    n_fail = len(run.failed)
    n_skip = sum(c.outcome == "skip" for c in run.checks)
    console.print(
        Text(f"{len(run.cases)} cases, {len(run.checks)} checks: {n_fail} failed, "
             f"{n_skip} skipped", style="bold red" if n_fail else "bold green")
    )
    return buf.getvalue()
