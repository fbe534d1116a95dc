"""One self-contained, offline HTML report: provenance, the diff, charts, checks, numbers.

Self-contained means one file that opens from a CI artifact or an e-mail with no network:
the charts are embedded as ``data:image/png;base64`` URIs, the CSS is inline, there is no
JavaScript, no web font and no external reference of any kind, and a Content-Security-
Policy forbids the browser from fetching anything but those data URIs.
"""

from __future__ import annotations

import base64
import html
import math
import tempfile
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from specperf import __version__
from specperf.analysis import outside_load
from specperf.analysis.judge.models import VERDICT_ORDER, CaseComparison, RunComparison
from specperf.analysis.judge.outcome import OUTCOME_ORDER, outcomes_line
from specperf.analysis.stats import Comparison, Direction, Verdict
from specperf.report.console import delta_text, fmt_value, spec_lines, spread_text
from specperf.report.plots import write_plots
from specperf.report.scenarios import scenario_tables
from specperf.schemas import CaseResult, GateCheck, Provenance, RunResult
from specperf.store.files import atomic_write_text

__all__ = ["PLOT_TITLES", "render_html", "write_html"]

PLOT_TITLES = {
    "throughput": "Output throughput vs concurrency",
    "tpot": "Mean TPOT vs concurrency",
    "ttft": "Mean TTFT vs concurrency",
    "acceptance_vs_k": "Acceptance vs k",
    "acceptance_per_position": "Acceptance per draft position",
    "tpot_gain": "Paired TPOT gain vs no-spec (same run)",
    "soak": "Soak: acceptance and TPOT per window",
    "segments": "Scenarios: acceptance per bucket and per category",
}
ARROW = {Direction.LOWER_IS_BETTER: "↓", Direction.HIGHER_IS_BETTER: "↑"}
VERDICT_CLASS = {v: v.value for v in Verdict}

CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --soft:#f6f8fa;
  --red:#cf222e; --red-bg:#ffebe9; --green:#1a7f37; --green-bg:#dafbe1; --yellow:#9a6700;
  --yellow-bg:#fff8c5; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; color: var(--fg); background: var(--bg);
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  sans-serif; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 32px 0 8px; padding-bottom: 4px;
  border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 20px 0 6px; }
.muted, .sub { color: var(--muted); }
.badge { display: inline-block; padding: 2px 10px; border-radius: 999px; font-weight: 600;
  font-size: 13px; vertical-align: middle; margin-left: 8px; }
.badge.bad { background: var(--red-bg); color: var(--red); }
.badge.good { background: var(--green-bg); color: var(--green); }
.badge.warn { background: var(--yellow-bg); color: var(--yellow); }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left;
  vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td:first-child { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.why { color: var(--muted); font-size: 12px; border-top: none; }
tr.regression td { background: var(--red-bg); }
tr.improvement td { background: var(--green-bg); }
.v { font-weight: 600; white-space: nowrap; }
.v.regression, .fail { color: var(--red); }
.v.improvement, .pass { color: var(--green); }
.v.inconclusive, .skip, .inconclusive, .busy { color: var(--yellow); }
.v.unchanged { color: var(--muted); font-weight: 400; }
.spread { color: var(--muted); font-size: 11px; }
.held { color: var(--muted); font-size: 11px; display: block; }
.box { border-left: 4px solid var(--line); background: var(--soft); padding: 6px 12px;
  margin: 8px 0; }
.box.refused { border-color: var(--red); background: var(--red-bg); }
.box.note { border-color: #d4a72c; background: var(--yellow-bg); }
.box.provisional { border-color: var(--red); }
dl.prov { display: grid; grid-template-columns: max-content 1fr max-content 1fr; gap: 2px 16px;
  margin: 8px 0; }
dl.prov dt { color: var(--muted); } dl.prov dd { margin: 0; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr));
  gap: 8px 20px; }
figure { margin: 8px 0 16px; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 12px; }
details > summary { cursor: pointer; color: var(--muted); margin: 6px 0; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  background: var(--soft); padding: 1px 4px; border-radius: 4px; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _prov_rows(p: Provenance) -> list[tuple[str, str]]:
    rows = [
        ("profile", f"{p.profile_name} ({p.profile_hash})"),
        ("prompts", p.prompts_hash or "—"),
        ("hardware", f"{p.hardware} ({p.hardware_id})"),
        ("accelerator", p.accelerator),
        ("vLLM", p.vllm_version or "?"),
        ("torch", p.torch_version or "—"),
        ("CUDA / driver", f"{p.cuda_version or '—'} / {p.driver_version or '—'}"),
        ("Python", p.python_version),
        ("specperf", p.specperf_version),
        ("date", f"{p.date:%Y-%m-%d %H:%M:%S %Z}".strip()),
        ("git commit", p.git_commit or "—"),
    ]
    if p.model_revisions:  # hub models only: a run of generated models shows as before
        rows.append(("model revisions", ", ".join(f"{m} at {r}" for m, r in
                                                  sorted(p.model_revisions.items()))))
    return rows


def _prov_html(p: Provenance, title: str) -> str:
    cells = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in _prov_rows(p))
    extra = (f'<div class="box provisional"><b>Provisional:</b> {_e(p.provisional)}</div>'
             if p.provisional else "")
    return f"<h3>{_e(title)}</h3><dl class=\"prov\">{cells}</dl>{extra}"


def _table(headers: list[tuple[str, bool]], rows: list[str]) -> str:
    right = ' style="text-align:right"'
    head = "".join(f"<th{right if num else ''}>{_e(h)}</th>" for h, num in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


# --------------------------------------------------------------------------- diff


CMP_HEADERS = [("config", False), ("conc.", True), ("metric", False), ("baseline", True),
               ("current", True), ("Δ", True), ("interval", False), ("verdict", False)]


def _value(v: float, unit: str, spread: float | None) -> str:
    s = _e(fmt_value(v, unit))
    if spread is not None:
        s += f' <span class="spread">{_e(spread_text(spread))}</span>'
    return s


def _cmp_row(cc: CaseComparison, m: Comparison, expand: bool) -> str:
    d = cc.detail(m)
    unit = d.unit if d else ""
    change, interval = delta_text(m, d)
    cls = VERDICT_CLASS[m.verdict]
    metric = f"{ARROW[m.direction]} {m.metric}" + (f" ({unit})" if unit else "")
    held = f' <span class="held">held by {_e(m.held_by)}</span>' if m.held_by else ""
    row = (
        f'<tr class="{cls}" title="{_e(m.reason)}"><td>{_e(cc.case.config_id)}</td>'
        f'<td class="num">{cc.case.concurrency}</td><td>{_e(metric)}</td>'
        f'<td class="num">{_value(m.baseline, unit, d.baseline_spread if d else None)}</td>'
        f'<td class="num">{_value(m.current, unit, d.current_spread if d else None)}</td>'
        f'<td class="num">{_e(change)}</td><td>{_e(interval)}</td>'
        f'<td><span class="v {cls}">{_e(m.verdict.value.upper())}</span>{held}</td></tr>'
    )
    if expand:
        row += f'<tr><td></td><td class="why" colspan="7">{_e(m.reason)}</td></tr>'
    return row


def _comparison_html(cmp: RunComparison) -> str:
    out = ["<h2>Comparison against the baseline</h2>"]
    if cmp.run_label or cmp.baseline_label:
        out.append(f'<p class="muted">run <code>{_e(cmp.run_label or "?")}</code> against '
                   f'baseline <code>{_e(cmp.baseline_label or "?")}</code></p>')
    for r in cmp.refusals:
        out.append(f'<div class="box refused"><b>Refused:</b> {_e(r)}</div>')
    for n in cmp.notes:
        out.append(f'<div class="box note"><b>Note:</b> {_e(n)}</div>')
    out.append(f"<p><b>{_e(cmp.summary_line())}</b></p>")
    if not cmp.cases:
        return "".join(out)
    out.append(
        '<p class="muted">↓ lower is better · ↑ higher is better · Δ = current vs baseline; '
        f"interval = {cmp.rules.confidence * 100:g} % bootstrap CI of the change (rates: the "
        "absolute tolerance; budget: single runs, no CI); ± = robust spread (CV) of the "
        "samples. Hover a row for the full reason.</p>")
    groups: dict[Verdict, list[tuple[CaseComparison, Comparison]]] = {v: [] for v in
                                                                      VERDICT_ORDER}
    for cc, m in cmp.all():
        groups[m.verdict].append((cc, m))
    titles = {Verdict.REGRESSION: "Regressions", Verdict.IMPROVEMENT: "Improvements",
              Verdict.INCONCLUSIVE: "Inconclusive — can't tell yet, add trials",
              Verdict.UNCHANGED: "Unchanged"}
    for verdict, pairs in groups.items():
        if not pairs:
            continue
        pairs.sort(key=lambda p: (p[0].case.config_id, p[0].case.concurrency))
        expand = verdict is Verdict.REGRESSION
        table = _table(CMP_HEADERS, [_cmp_row(cc, m, expand) for cc, m in pairs])
        title = f"{titles[verdict]} ({len(pairs)})"
        if verdict is Verdict.UNCHANGED:
            out.append(f"<details><summary>{_e(title)}</summary>{table}</details>")
        else:
            out.append(f'<h3 class="v {VERDICT_CLASS[verdict]}">{_e(title)}</h3>{table}')
    notes = [(cc, n) for cc in cmp.cases for n in cc.notes]
    if notes:
        items = "".join(f"<li><code>{_e(cc.case.id)}</code>: {_e(n)}</li>" for cc, n in notes)
        out.append(f"<details><summary>Case notes ({len(notes)})</summary><ul>{items}</ul>"
                   "</details>")
    return "".join(out)


# --------------------------------------------------------------------------- run


def _num(v: float | None, unit: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return fmt_value(v, "" if unit in ("", "rate") else unit)


def _check_row(c: GateCheck) -> str:
    d = c.delta
    limit = (f"≥ {c.threshold:.2f}×" if c.gate == "tpot_gain" and c.threshold is not None
             else _num(c.threshold, c.unit))
    metric = c.metric + (f" ({c.unit})" if c.unit else "")
    held = f' <span class="held">held by {_e(c.held_by)}</span>' if c.held_by else ""
    return (f"<tr><td>{_e(c.case.id)}</td><td>{_e(c.gate)}</td><td>{_e(metric)}</td>"
            f'<td class="num">{_e(_num(c.baseline, c.unit))}</td>'
            f'<td class="num">{_e(_num(c.current, c.unit))}</td>'
            f'<td class="num">{"—" if d is None else _e(f"{d * 100:+.1f} %")}</td>'
            f'<td class="num">{_e(limit)}</td>'
            f'<td class="v {c.outcome}">{_e(c.outcome.upper())}{held}</td><td>{_e(c.message)}</td>'
            "</tr>")


CHECK_HEADERS = [("case", False), ("gate", False), ("metric", False), ("baseline", True),
                 ("current", True), ("Δ", True), ("limit", True), ("outcome", False),
                 ("message", False)]
CASE_HEADERS = [("case", False), ("config", False), ("method / draft / k", False),
                ("TTFT p50 ms", True), ("TPOT p50 ms", True), ("E2E p50 ms", True),
                ("TPOT mean ms", True), ("out tok/s", True), ("acceptance", True),
                ("per position", True), ("trials", True), ("requests", True),
                ("errors", True)]


def _checks_html(run: RunResult) -> str:
    if not run.checks:
        return ""
    # Failed, then undecided (machine busy, inconclusive) in the open; the rest folded.
    failed = sorted((c for c in run.checks if c.outcome in ("fail", "busy", "inconclusive")),
                    key=lambda c: (OUTCOME_ORDER[c.outcome], c.case.config_id, c.case.concurrency))
    rest = sorted((c for c in run.checks if c not in failed),
                  key=lambda c: (c.outcome != "skip", c.case.config_id, c.case.concurrency))
    out = [f"<h2>Gate checks: {_e(outcomes_line(c.outcome for c in run.checks))}</h2>"]
    busy = outside_load.run_busy_summary(run.cases, run.paired_nospec)
    if busy:
        out.append(f'<p class="busy"><b>{_e(busy)}</b></p>')
    if failed:
        out.append(_table(CHECK_HEADERS, [_check_row(c) for c in failed]))
    if rest:
        out.append(f"<details><summary>Passed and skipped checks ({len(rest)})</summary>"
                   f"{_table(CHECK_HEADERS, [_check_row(c) for c in rest])}</details>")
    return "".join(out)


def _cases_html(run: RunResult) -> str:
    rows = []
    # Other processes' CPU during the trials (the contention guard); not shown for run
    # files written before it.
    outside = outside_load.known(run.cases, run.paired_nospec)
    for r in run.cases:
        a = r.acceptance
        rate = "—" if a is None else ("n/a" if a.rate is None else f"{a.rate:.3f}")
        pos = "—" if a is None or a.rate is None else " / ".join(
            f"{x:.2f}" for x in a.per_position_rate)
        spec = "no spec" if r.method is None else " / ".join(
            str(x) for x in (r.method, r.draft_model or "—", r.num_speculative_tokens))
        rows.append(
            f"<tr><td>{_e(r.case.id)}</td><td>{_e(r.config_label)}</td><td>{_e(spec)}</td>"
            + "".join(f'<td class="num">{_e(v)}</td>' for v in (
                _num(r.ttft_ms.median, "ms"), _num(r.tpot_ms.median, "ms"),
                _num(r.e2e_ms.median, "ms"), _num(r.tpot_ms.mean, "ms"),
                f"{r.output_throughput:.1f}", rate, pos, len(r.trials), r.n_requests,
                r.n_errors))
            + (_outside_cell(r, run) if outside else "")
            + "</tr>")
    if not rows:
        return "<h2>Measurements</h2><p class=\"muted\">No case was measured.</p>"
    notes = "".join(f"<li><code>{_e(r.case.id)}</code>: {_e(line)}</li>" for r in run.cases
                    if (line := outside_load.case_sentence(r, run.paired_nospec)))
    box = (f'<div class="box note"><b>Outside CPU load:</b><ul>{notes}</ul></div>'
           if notes else "")
    spec = "".join(f"<li>{_e(line)}</li>" for line in spec_lines(run.cases))
    if spec:
        box += f'<div class="box note"><b>Proposals and counters:</b><ul>{spec}</ul></div>'
    headers = [*CASE_HEADERS, ("outside cores", True)] if outside else CASE_HEADERS
    return f"<h2>Measurements ({len(rows)} cases)</h2>" + box + _table(headers, rows)


def _scenarios_html(run: RunResult) -> str:
    """A table per scenario of the run (report.scenarios); none without."""
    out = []
    num = ' class="num"'
    for s in run.scenarios:
        title, headers, body = scenario_tables(s)
        # A segmented table's second column (the bucket or category) is a name, not a number.
        names = {0, 1} if s.segments else {0}
        rows = ["<tr>" + "".join(f"<td{'' if i in names else num}>{_e(v)}</td>"
                                 for i, v in enumerate(row)) + "</tr>"
                for row in body]
        out.append(f"<h2>{_e(title)}</h2>"
                   + _table([(h, i not in names) for i, h in enumerate(headers)], rows))
    return "".join(out)


def _outside_cell(r: CaseResult, run: RunResult) -> str:
    load = outside_load.case_load(r, run.paired_nospec)
    cls = "num fail" if load.contended else "num"
    return f'<td class="{cls}">{_e(outside_load.load_cell(load))}</td>'


def _servers_html(run: RunResult) -> str:
    if not run.servers:
        return ""
    rows = []
    for s in run.servers:
        rows.append(
            f"<tr><td>{_e(s.config_id)}</td><td>{_e(s.vllm_version or '—')}</td>"
            f'<td class="num">{"—" if s.startup_s is None else f"{s.startup_s:.1f}"}</td>'
            f"<td><code>{_e(s.log_path)}</code></td>"
            f'<td class="{"fail" if s.error else ""}">{_e(s.error or "")}</td></tr>')
    return ("<details><summary>Servers</summary>" + _table(
        [("config", False), ("vLLM", False), ("startup s", True), ("log", False),
         ("error", False)], rows) + "</details>")


def _plots_html(plots: Mapping[str, Path | bytes], prefix: str, heading: str,
                caption: str) -> str:
    figs = []
    for key, title in PLOT_TITLES.items():
        src = plots.get(prefix + key)
        if src is None:
            continue
        data = src if isinstance(src, bytes) else Path(src).read_bytes()
        cap = f"<figcaption>{_e(title)}{_e(caption)}</figcaption>" if caption else ""
        figs.append(f'<figure><img alt="{_e(title)}" src="{_png_uri(data)}">{cap}</figure>')
    return f'<h2>{_e(heading)}</h2><div class="charts">{"".join(figs)}</div>' if figs else ""


# --------------------------------------------------------------------------- page


def render_html(run: RunResult, comparison: RunComparison | None = None,
                plots: Mapping[str, Path | bytes] | None = None, *,
                make_plots: bool = True, baseline: object | None = None) -> str:
    """The report as one HTML string. ``plots`` maps plot keys (as returned by
    :func:`specperf.report.plots.write_plots`) to PNG paths or bytes; when it is None and
    ``make_plots`` is true the charts are drawn here (``baseline``, a RunResult or
    Baseline, adds the overlays)."""
    if plots is None and make_plots:
        with tempfile.TemporaryDirectory(prefix="specperf-plots-") as tmp:
            paths = write_plots(run, tmp, baseline)  # type: ignore[arg-type]
            loaded: dict[str, Path | bytes] = {k: p.read_bytes() for k, p in paths.items()}
        return render_html(run, comparison, loaded, make_plots=False)
    plots = plots or {}
    p = run.provenance
    if comparison is not None and comparison.refused:
        badge = '<span class="badge bad">comparison refused</span>'
    elif comparison is not None and comparison.regressions:
        n = len(comparison.regressions)
        badge = f'<span class="badge bad">{n} regression{"s" if n != 1 else ""}</span>'
    elif run.failed:
        badge = f'<span class="badge bad">{len(run.failed)} check(s) failed</span>'
    elif any(c.outcome == "busy" for c in run.checks):
        badge = '<span class="badge warn">machine busy: some checks not measured</span>'
    elif any(c.outcome == "inconclusive" for c in run.checks):
        badge = '<span class="badge warn">no failure; some checks inconclusive</span>'
    elif comparison is not None and comparison.counts()[Verdict.INCONCLUSIVE]:
        badge = '<span class="badge warn">no regression found; some inconclusive</span>'
    else:
        badge = '<span class="badge good">no regression</span>'
    title = f"specperf · {p.profile_name} · {p.hardware}"
    body = [
        f"<h1>{_e(title)}{badge}</h1>",
        f'<p class="sub">vLLM {_e(p.vllm_version or "?")} · {len(run.cases)} cases · run '
        f"started {_e(f'{run.started_at:%Y-%m-%d %H:%M:%S %Z}'.strip())} · run dir "
        f"<code>{_e(run.run_dir)}</code></p>",
    ]
    if comparison is not None:
        body.append(_comparison_html(comparison))
    body.append(_plots_html(plots, "", "Charts", ""))
    if comparison is not None or any(k.startswith("vs_baseline_") for k in plots):
        body.append(_plots_html(plots, "vs_baseline_", "Charts against the baseline",
                                " — current solid, baseline dashed"))
    body.append(_checks_html(run))
    if run.baseline_note:
        body.append(f'<p class="muted">{_e(run.baseline_note)}</p>')
    body.append(_cases_html(run))
    body.append(_scenarios_html(run))
    body.append(_servers_html(run))
    body.append("<h2>Provenance</h2>")
    body.append(_prov_html(p, "run"))
    if comparison is not None:
        body.append(_prov_html(comparison.baseline_provenance, "baseline"))
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    body.append(f"<footer>Generated by specperf {_e(__version__)} at {_e(generated)}. "
                "This page is self-contained: it loads nothing from the network.</footer>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "img-src data:; style-src 'unsafe-inline'\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(b for b in body if b)
        + "\n</body></html>\n"
    )


def write_html(path: Path | str, run: RunResult, comparison: RunComparison | None = None,
               plots: Mapping[str, Path | bytes] | None = None, **kwargs: object) -> Path:
    path = Path(path)
    atomic_write_text(path, render_html(run, comparison, plots, **kwargs))  # type: ignore[arg-type]
    return path
