"""PNG charts of a run (and of a run against its baseline), in the style of the published
spec-decode charts: one line per server config, no-spec in black, concurrency on a log2
axis, acceptance against k per draft model, acceptance per draft position as grouped bars,
and the paired TPOT gain (each spec config against the no-spec trials interleaved with it).

Colours: each (method, draft model) family gets one hue and its configs get darker shades
as k grows, so "more speculative tokens" reads left-to-right in the legend and darker on
the chart. A baseline is drawn in the same colour, dashed, with hollow markers.

matplotlib is used through ``matplotlib.figure.Figure`` and the Agg canvas only (no
pyplot, no global state, no display), so this works headless and from several threads.

Why one module past 600 lines: one function per chart, all sharing the colour families
and the axis conventions above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specperf.analysis.aggregate import sum_acceptance
from specperf.schemas import Acceptance, Baseline, CaseResult, Provenance, RunResult

__all__ = [
    "PLOT_FILES",
    "PairedGain",
    "paired_gains",
    "plot_acceptance_per_position",
    "plot_acceptance_vs_k",
    "plot_segment_acceptance",
    "plot_soak_over_time",
    "plot_tpot_gain",
    "plot_vs_concurrency",
    "write_plots",
]

Result = RunResult | Baseline

#: key → file name, in the order a report shows them.
PLOT_FILES = {
    "throughput": "throughput_vs_concurrency.png",
    "tpot": "tpot_vs_concurrency.png",
    "ttft": "ttft_vs_concurrency.png",
    "acceptance_vs_k": "acceptance_vs_k.png",
    "acceptance_per_position": "acceptance_per_position.png",
    "tpot_gain": "tpot_gain.png",
}
#: The soak scenario's chart (one run's own windows: no baseline overlay).
SOAK_FILE = "soak_over_time.png"
#: The segmented scenarios' chart: acceptance per bucket and per category.
SEGMENTS_FILE = "scenario_acceptance_by_segment.png"
#: Charts of one run's own measurements that have no baseline overlay.
SAME_RUN_ONLY = frozenset({"tpot_gain"})
DPI = 110
_FAMILY_MAPS = ("Blues", "Oranges", "Greens", "Purples", "Reds", "YlOrBr", "PuRd", "GnBu")
_FAMILY_MARKERS = ("s", "^", "D", "v", "P", "X", "*", "h")
NOSPEC_COLOR = "black"


@dataclass(frozen=True)
class _Style:
    color: Any
    marker: str
    label: str
    order: tuple[int, int, str]


@dataclass(frozen=True)
class _Metric:
    title: str
    ylabel: str
    value: Callable[[CaseResult], float | None]
    trial_values: Callable[[CaseResult], list[float]]


def _trial_mean(case: CaseResult, attr: str) -> list[float]:
    out = []
    for t in case.trials:
        vals = []
        for s in t.samples:
            if not s.ok:
                continue
            v = s.tpot_s if attr == "tpot" else s.ttft_s
            if v is not None:
                vals.append(v * 1000.0)
        if vals:
            out.append(float(np.mean(vals)))
    return out


METRICS = {
    "throughput": _Metric(
        "Output throughput vs concurrency", "output throughput (tok/s)",
        lambda c: c.output_throughput, lambda c: [t.output_throughput for t in c.trials]),
    "tpot": _Metric(
        "Mean TPOT vs concurrency", "mean time per output token, TPOT (ms)",
        lambda c: c.tpot_ms.mean, lambda c: _trial_mean(c, "tpot")),
    "ttft": _Metric(
        "Mean TTFT vs concurrency", "mean time to first token, TTFT (ms)",
        lambda c: c.ttft_ms.mean, lambda c: _trial_mean(c, "ttft")),
}


# --------------------------------------------------------------------------- helpers


def _family(case: CaseResult) -> tuple[str, str] | None:
    if case.method is None:
        return None
    return (case.method, case.draft_model or "")


def _family_label(family: tuple[str, str]) -> str:
    method, draft = family
    return f"{draft} ({method})" if draft else method


def _styles(*results: Result | None) -> dict[str, _Style]:
    """One style per config id, stable across the run and its baseline."""
    from matplotlib import colormaps

    cases: dict[str, CaseResult] = {}
    for r in results:
        if r is None:
            continue
        for c in r.cases:
            cases.setdefault(c.case.config_id, c)
    families: dict[tuple[str, str], list[CaseResult]] = {}
    for c in cases.values():
        fam = _family(c)
        if fam is not None:
            families.setdefault(fam, []).append(c)
    out: dict[str, _Style] = {}
    for cid, c in cases.items():
        if _family(c) is None:
            out[cid] = _Style(NOSPEC_COLOR, "o", c.config_label or cid, (0, 0, cid))
    for fi, members in enumerate(families.values()):
        cmap = colormaps[_FAMILY_MAPS[fi % len(_FAMILY_MAPS)]]
        members.sort(key=lambda c: (c.num_speculative_tokens or 0, c.case.config_id))
        n = len(members)
        for i, c in enumerate(members):
            shade = 0.75 if n == 1 else 0.45 + 0.5 * i / (n - 1)
            out[c.case.config_id] = _Style(
                cmap(shade), _FAMILY_MARKERS[fi % len(_FAMILY_MARKERS)],
                c.config_label or c.case.config_id, (1 + fi, c.num_speculative_tokens or 0, cid))
    return out


def _subtitle(run: Provenance, baseline: Provenance | None) -> str:
    s = f"profile {run.profile_name} · {run.hardware} · vLLM {run.vllm_version or '?'}"
    if baseline is not None:
        s += (f"\nbaseline (dashed): vLLM {baseline.vllm_version or '?'}, "
              f"{baseline.date:%Y-%m-%d}")
        if baseline.hardware_id != run.hardware_id:
            s += f", {baseline.hardware}"
    return s


def _figure(title: str, run: Provenance, baseline: Provenance | None,
            ncols: int = 1, width: float = 9.0) -> tuple[Any, list[Any]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    height = 5.4
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)  # render with Agg, whatever backend pyplot would pick
    axes = fig.subplots(1, ncols, squeeze=False)[0].tolist()
    sub = _subtitle(run, baseline)
    notes = [f"PROVISIONAL {side}: {p.provisional}" if baseline is not None
             else f"PROVISIONAL: {p.provisional}"
             for side, p in (("run", run), ("baseline", baseline))
             if p is not None and p.provisional]
    n_lines = sub.count("\n") + 1 + len(notes)
    # The suptitle reserves the room (constrained layout sees only it); the subtitle lines
    # are drawn into that room, under the title's first line.
    fig.suptitle(title + "\n" * n_lines, fontsize=13, fontweight="bold", linespacing=1.0)
    top = 0.98 - 14.5 / (height * 72)
    fig.text(0.5, top, sub, ha="center", va="top", fontsize=8.5, color="0.3",
             transform=fig.transFigure, linespacing=1.25)
    if notes:
        fig.text(0.5, top - (sub.count("\n") + 1) * 8.5 * 1.3 / (height * 72),
                 "\n".join(notes), ha="center", va="top", fontsize=8.5, linespacing=1.25,
                 color="firebrick", fontweight="bold", transform=fig.transFigure)
    for ax in axes:
        ax.grid(True, which="major", alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    return fig, axes


def _legend(fig: Any, ax: Any, handles: list[Any], baseline: bool) -> None:
    from matplotlib.lines import Line2D

    handles = list(handles)
    if baseline:
        handles += [Line2D([], [], color="0.3", linestyle="-", label="current"),
                    Line2D([], [], color="0.3", linestyle="--", marker="o",
                           markerfacecolor="none", label="baseline")]
    if not handles:
        return
    if len(handles) > 7:
        fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    else:
        ax.legend(handles=handles, loc="best", fontsize=8, framealpha=0.9)


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    return path


def _log2_axis(ax: Any, xs: Sequence[int]) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ticks = sorted(set(xs))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    if ticks:
        ax.set_xlim(ticks[0] / 1.35, ticks[-1] * 1.35)


def _by_config(result: Result) -> dict[str, list[CaseResult]]:
    out: dict[str, list[CaseResult]] = {}
    for c in result.cases:
        out.setdefault(c.case.config_id, []).append(c)
    for v in out.values():
        v.sort(key=lambda c: c.case.concurrency)
    return out


def _ok(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


# --------------------------------------------------------------------------- charts


def plot_vs_concurrency(run: Result, metric: str, path: Path | str,
                        baseline: Result | None = None) -> Path | None:
    """``metric`` one of 'throughput', 'tpot', 'ttft'; error bars span the trials."""
    from matplotlib.lines import Line2D

    m = METRICS[metric]
    styles = _styles(run, baseline)
    fig, (ax,) = _figure(m.title, run.provenance,
                         baseline.provenance if baseline is not None else None)
    xs_all: list[int] = []
    handles = []
    drew = False
    sides = [(run, False)] + ([(baseline, True)] if baseline is not None else [])
    for result, is_base in sides:
        assert result is not None
        for cid, cases in sorted(_by_config(result).items(), key=lambda kv: styles[kv[0]].order):
            st = styles[cid]
            pts = [(c.case.concurrency, m.value(c), m.trial_values(c)) for c in cases]
            pts = [(x, y, tv) for x, y, tv in pts if _ok(y)]
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ys = [float(p[1]) for p in pts]  # type: ignore[arg-type]
            spans = [(min(tv), max(tv)) if len(tv) > 1 else (y, y)
                     for (_, _, tv), y in zip(pts, ys, strict=True)]
            lo = [y - s[0] for s, y in zip(spans, ys, strict=True)]
            hi = [s[1] - y for s, y in zip(spans, ys, strict=True)]
            xs_all += xs
            nospec = st.color == NOSPEC_COLOR
            kw = dict(color=st.color, marker=st.marker, markersize=5.5,
                      linewidth=2.4 if nospec else 1.7, zorder=3 if nospec else 2)
            if is_base:
                kw.update(linestyle="--", markerfacecolor="none", alpha=0.75, linewidth=1.3)
            if any(lo) or any(hi):
                # Lists of floats, not arrays: matplotlib takes the first entry of yerr
                # as a scalar, and a 1-element array (one concurrency) is a NumPy
                # DeprecationWarning there, an error in a later NumPy (issue #55).
                ax.errorbar(xs, ys, yerr=[[max(v, 0.0) for v in lo], [max(v, 0.0) for v in hi]],
                            capsize=2.5, elinewidth=0.8, **kw)
            else:
                ax.plot(xs, ys, **kw)
            drew = True
            if not is_base:
                handles.append(Line2D([], [], color=st.color, marker=st.marker,
                                      linewidth=2.4 if nospec else 1.7, label=st.label))
    if not drew:
        return None
    _log2_axis(ax, xs_all)
    ax.set_xlabel("concurrency (parallel streamed requests, log2 scale)")
    ax.set_ylabel(m.ylabel)
    ax.set_ylim(bottom=0)
    _legend(fig, ax, handles, baseline is not None)
    return _save(fig, Path(path))


def _sum_acceptance(cases: Sequence[CaseResult]) -> Acceptance | None:
    # Cases that proposed no drafts carry no acceptance information; the sum is the
    # same one a case's trials are summed with.
    return sum_acceptance([c.acceptance for c in cases
                           if c.acceptance is not None and c.acceptance.drafts])


def _acceptance_by_config(result: Result) -> dict[str, tuple[CaseResult, Acceptance]]:
    out = {}
    for cid, cases in _by_config(result).items():
        acc = _sum_acceptance(cases)
        if acc is not None and acc.rate is not None:
            out[cid] = (cases[0], acc)
    return out


def plot_acceptance_vs_k(run: Result, path: Path | str,
                         baseline: Result | None = None) -> Path | None:
    """Acceptance rate and mean acceptance length against k, one line per draft model
    (counters summed over the concurrencies of each config)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import PercentFormatter

    cur = _acceptance_by_config(run)
    if not cur:
        return None
    base = _acceptance_by_config(baseline) if baseline is not None else {}
    styles = _styles(run, baseline)
    fig, (ax_rate, ax_len) = _figure("Draft acceptance vs number of speculative tokens (k)",
                                     run.provenance,
                                     baseline.provenance if baseline is not None else None,
                                     ncols=2, width=11.0)
    handles: list[Any] = []
    ks: list[int] = []
    for data, is_base in ((cur, False), (base, True)):
        families: dict[tuple[str, str], list[tuple[int, Acceptance, str]]] = {}
        for cid, (case, acc) in data.items():
            fam = _family(case)
            if fam is None or case.num_speculative_tokens is None:
                continue
            families.setdefault(fam, []).append((case.num_speculative_tokens, acc, cid))
        for fam, pts in families.items():
            # by k, then config id: two configs of a family may share k (a fixed k=3 and a
            # k chosen per batch size up to 3), and Acceptance has no order
            pts.sort(key=lambda p: (p[0], p[2]))
            ks += [p[0] for p in pts]
            # the family's colour: its middle shade
            st = styles[pts[len(pts) // 2][2]]
            kw = dict(color=st.color, marker=st.marker, markersize=6, linewidth=1.8)
            if is_base:
                kw.update(linestyle="--", markerfacecolor="none", alpha=0.75, linewidth=1.3)
            x = [p[0] for p in pts]
            rates = [p[1].rate for p in pts]
            lengths = [p[1].mean_acceptance_length for p in pts]
            ax_rate.plot(x, rates, **kw)
            ax_len.plot(x, lengths, **kw)
            if baseline is None and len(data) <= 12:
                # Label the points; alternate above/below between families so neighbours'
                # labels do not collide.
                dy = 7 if len(handles) % 2 else -13
                for xi, r, n in zip(x, rates, lengths, strict=True):
                    ax_rate.annotate(f"{r:.1%}", (xi, r), textcoords="offset points",
                                     xytext=(0, dy), ha="center", fontsize=7.5, color=st.color)
                    ax_len.annotate(f"{n:.2f}", (xi, n), textcoords="offset points",
                                    xytext=(0, dy), ha="center", fontsize=7.5, color=st.color)
            if not is_base:
                handles.append(Line2D([], [], color=st.color, marker=st.marker, linewidth=1.8,
                                      label=_family_label(fam)))
    if not ks:
        return None
    kticks = sorted(set(ks))
    for ax in (ax_rate, ax_len):
        ax.set_xlabel("num_speculative_tokens (k)")
        ax.set_xticks(kticks, [str(k) for k in kticks])
        ax.set_xlim(min(ks) - 0.5, max(ks) + 0.5)
    # The most a step can yield is k + 1 tokens (every draft accepted, plus the bonus).
    ax_len.plot(kticks, [k + 1 for k in kticks], color="0.6", linestyle=":", linewidth=1.2,
                label="_ideal")
    ax_len.text(kticks[-1] + 0.05, kticks[-1] + 1, " ideal k+1", color="0.45", fontsize=8,
                va="center", ha="left", clip_on=False)
    ax_rate.set_ylabel("draft acceptance rate (accepted / drafted tokens)")
    ax_rate.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax_rate.set_ylim(0, 1.05)
    ax_rate.set_title("acceptance rate", fontsize=10)
    ax_len.set_ylabel("mean acceptance length (tokens per verification step)")
    ax_len.set_ylim(1.0, max(kticks) + 1.3)
    ax_len.set_title("tokens per step = 1 + accepted / drafts", fontsize=10)
    _legend(fig, ax_rate, handles, baseline is not None)
    return _save(fig, Path(path))


def plot_acceptance_per_position(run: Result, path: Path | str,
                                 baseline: Result | None = None) -> Path | None:
    """Per draft position, the fraction of drafts whose token at that position was
    accepted: grouped bars, one per spec config; the baseline as dashed outlines."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import PercentFormatter

    cur = _acceptance_by_config(run)
    if not cur:
        return None
    base = _acceptance_by_config(baseline) if baseline is not None else {}
    styles = _styles(run, baseline)
    cids = sorted(set(cur) | set(base), key=lambda c: styles[c].order)
    kmax = max(len(acc.per_position_rate) for d in (cur, base) for _, acc in d.values())
    if kmax == 0:
        return None
    width = 0.84 / len(cids)
    fig, (ax,) = _figure("Acceptance per draft position", run.provenance,
                         baseline.provenance if baseline is not None else None,
                         width=max(9.0, min(12.0, 4.0 + 0.2 * kmax * len(cids))))
    handles = []
    for i, cid in enumerate(cids):
        st = styles[cid]
        offset = (i - (len(cids) - 1) / 2) * width
        if cid in cur:
            rates = cur[cid][1].per_position_rate
            ax.bar(np.arange(len(rates)) + offset, rates, width=width * 0.95, color=st.color,
                   edgecolor="white", linewidth=0.4, zorder=2)
            handles.append(Patch(facecolor=st.color, label=st.label))
        if cid in base:
            rates = base[cid][1].per_position_rate
            ax.bar(np.arange(len(rates)) + offset, rates, width=width * 0.95, fill=False,
                   edgecolor=st.color, linestyle="--", linewidth=1.1, zorder=3)
    ax.set_xticks(range(kmax), [str(p) for p in range(kmax)])
    ax.set_xlabel("draft position (0 = first drafted token)")
    ax.set_ylabel("accepted at this position (fraction of drafts)")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(0, 1.05)
    if baseline is not None:
        handles.append(Patch(fill=False, edgecolor="0.3", linestyle="--", label="baseline"))
    if len(handles) > 7:
        fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    else:
        ax.legend(handles=handles, loc="upper right", fontsize=8, framealpha=0.9)
    return _save(fig, Path(path))


@dataclass(frozen=True)
class PairedGain:
    """One spec case against the no-spec trials run interleaved with it (the TPOT-gain
    gate's two sides). TPOT in ms; gain = no-spec median TPOT / spec median TPOT."""

    case: CaseResult
    nospec: CaseResult
    spec_tpot_ms: float
    nospec_tpot_ms: float
    #: Per-trial TPOT medians (ms), in trial order, for the spread of each side.
    spec_trials_ms: list[float]
    nospec_trials_ms: list[float]
    #: Gain of each trial pair (trial r of the spec config with the no-spec trial r run
    #: just before it), so the spread shows how much the pairs agree.
    pair_gains: list[float]
    #: The gate's required ratio, when the run checked this case.
    required: float | None

    @property
    def gain(self) -> float:
        return self.nospec_tpot_ms / self.spec_tpot_ms


def _trial_tpot_medians(case: CaseResult) -> dict[int, float]:
    out = {}
    for t in case.trials:
        vals = [v * 1000.0 for s in t.samples if (v := s.tpot_s) is not None]
        if vals:
            out[t.index] = float(np.median(vals))
    return out


def paired_gains(run: RunResult) -> list[PairedGain]:
    """Every spec case of the run that has paired no-spec trials with a TPOT on both
    sides, in the order the charts list configs (by family and k), then concurrency."""
    required = {c.case.id: c.threshold for c in run.checks if c.gate == "tpot_gain"}
    out = []
    for case in run.cases:
        nospec = run.paired_nospec.get(case.case.id)
        if nospec is None or not (_ok(case.tpot_ms.median) and case.tpot_ms.median
                                  and _ok(nospec.tpot_ms.median)):
            continue
        spec_t, nospec_t = _trial_tpot_medians(case), _trial_tpot_medians(nospec)
        pairs = [nospec_t[i] / spec_t[i] for i in sorted(spec_t) if i in nospec_t and spec_t[i]]
        out.append(PairedGain(
            case=case, nospec=nospec, spec_tpot_ms=float(case.tpot_ms.median),
            nospec_tpot_ms=float(nospec.tpot_ms.median),
            spec_trials_ms=[spec_t[i] for i in sorted(spec_t)],
            nospec_trials_ms=[nospec_t[i] for i in sorted(nospec_t)],
            pair_gains=pairs, required=required.get(case.case.id),
        ))
    styles = _styles(run)
    out.sort(key=lambda g: (styles[g.case.case.config_id].order, g.case.case.concurrency))
    return out


def _spread(values: Sequence[float], centre: float) -> tuple[float, float]:
    """(below, above) the centre to the min and max of the values (0 with fewer than 2)."""
    if len(values) < 2:
        return 0.0, 0.0
    return max(centre - min(values), 0.0), max(max(values) - centre, 0.0)


def plot_tpot_gain(run: RunResult, path: Path | str) -> Path | None:
    """Per spec case with paired no-spec trials: median TPOT of both sides as bars (no-spec
    black), and the gain no-spec / spec with the spread of its trial pairs, against the
    1.0× line and the gate's required ratio. None when the run has no paired trials."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    gains = paired_gains(run)
    if not gains:
        return None
    styles = _styles(run)
    n = len(gains)
    fig, (ax_tpot, ax_gain) = _figure(
        "Paired TPOT gain: each spec config vs the no-spec trials interleaved with it",
        run.provenance, None, ncols=2, width=max(11.0, min(16.0, 6.0 + 0.55 * n)))
    x = np.arange(n)
    half = 0.38
    annotate = n <= 12
    handles: dict[str, Any] = {"nospec": Patch(facecolor=NOSPEC_COLOR,
                                               label="no-spec (paired trials)")}
    for i, g in enumerate(gains):
        st = styles[g.case.case.config_id]
        for dx, tpot, trials, color in ((-half / 2, g.nospec_tpot_ms, g.nospec_trials_ms,
                                         NOSPEC_COLOR),
                                        (half / 2, g.spec_tpot_ms, g.spec_trials_ms, st.color)):
            lo, hi = _spread(trials, tpot)
            ax_tpot.bar(x[i] + dx, tpot, width=half * 0.95, color=color, edgecolor="white",
                        linewidth=0.4, zorder=2,
                        yerr=[[lo], [hi]] if lo or hi else None, capsize=2.5,
                        error_kw={"elinewidth": 0.8, "ecolor": "0.35"})
            if annotate:
                ax_tpot.annotate(f"{tpot:.1f}", (x[i] + dx, tpot + hi), textcoords="offset points",
                                 xytext=(0, 3), ha="center", fontsize=7, color="0.25")
        lo, hi = _spread(g.pair_gains, g.gain)
        ax_gain.errorbar([x[i]], [g.gain], yerr=[[lo], [hi]] if lo or hi else None,
                         color=st.color, marker=st.marker, markersize=7, linestyle="none",
                         capsize=3, elinewidth=1.0, zorder=3)
        if annotate:
            ax_gain.annotate(f"{g.gain:.2f}×", (x[i], g.gain), textcoords="offset points",
                             xytext=(9, -3), ha="left", fontsize=7.5, color=st.color)
        if g.required is not None:
            ax_gain.plot([x[i] - 0.3, x[i] + 0.3], [g.required] * 2, color="firebrick",
                         linestyle="--", linewidth=1.2, zorder=2)
        handles.setdefault(g.case.case.config_id, Patch(facecolor=st.color, label=st.label))
    ax_gain.axhline(1.0, color=NOSPEC_COLOR, linewidth=1.4, zorder=1)
    # Few cases: "config / c=N" on two lines; many (a GPU matrix has ~50): the case ids,
    # upright, so every tick keeps its label.
    many = n > 8
    labels = [g.case.case.id if many else f"{g.case.case.config_id}\nc={g.case.case.concurrency}"
              for g in gains]
    pad = max(0.0, (3 - n) / 2)  # one or two cases: keep the bars from filling the axes
    for ax in (ax_tpot, ax_gain):
        ax.set_xticks(x, labels, rotation=90 if many else 0, fontsize=7 if many else 8)
        ax.set_xlim(-0.6 - pad, n - 0.4 + pad)
        ax.set_xlabel("spec config and concurrency (paired cases)")
        ax.grid(False, axis="x")
    ax_tpot.set_ylabel("median time per output token, TPOT (ms)")
    ax_tpot.set_ylim(bottom=0)
    ax_tpot.set_title("median TPOT, paired trials (whiskers: range of trial medians)",
                      fontsize=10)
    ax_gain.set_ylabel("TPOT gain = no-spec TPOT / spec TPOT (×)")
    ax_gain.set_title("gain (whiskers: range over trial pairs); above 1× = faster", fontsize=10)
    lo_y, hi_y = ax_gain.get_ylim()
    ax_gain.set_ylim(min(lo_y, 0.9), max(hi_y, 1.1))
    gain_handles = [Line2D([], [], color=NOSPEC_COLOR, linewidth=1.4, label="no-spec = 1×")]
    if any(g.required is not None for g in gains):
        gain_handles.append(Line2D([], [], color="firebrick", linestyle="--", linewidth=1.2,
                                   label="required gain (gate)"))
    ax_gain.legend(handles=gain_handles, loc="best", fontsize=8, framealpha=0.9)
    _legend(fig, ax_tpot, list(handles.values()), False)
    return _save(fig, Path(path))


def write_plots(run: Result, out_dir: Path | str,
                baseline: Result | None = None) -> dict[str, Path]:
    """Every chart that has data, as PNG files in ``out_dir``; with a baseline, also the
    overlays (``vs_baseline_*.png``). Returns key → path (keys as in PLOT_FILES, overlays
    prefixed ``vs_baseline_``)."""
    out_dir = Path(out_dir)
    written: dict[str, Path] = {}
    variants: list[tuple[str, Result | None]] = [("", None)]
    if baseline is not None:
        variants.append(("vs_baseline_", baseline))
    for prefix, base in variants:
        for key, name in PLOT_FILES.items():
            path = out_dir / f"{prefix}{name}"
            if key in SAME_RUN_ONLY:
                # The paired gain compares two sides of the same run; a baseline adds
                # nothing to it, and a Baseline file holds no paired trials.
                if base is not None or not isinstance(run, RunResult):
                    continue
                p = plot_tpot_gain(run, path)
            elif key in METRICS:
                p = plot_vs_concurrency(run, key, path, base)
            elif key == "acceptance_vs_k":
                p = plot_acceptance_vs_k(run, path, base)
            else:
                p = plot_acceptance_per_position(run, path, base)
            if p is not None:
                written[prefix + key] = p
    if isinstance(run, RunResult):
        p = plot_soak_over_time(run, out_dir / SOAK_FILE)
        if p is not None:
            written["soak"] = p
        p = plot_segment_acceptance(run, out_dir / SEGMENTS_FILE)
        if p is not None:
            written["segments"] = p
    return written


def plot_segment_acceptance(run: RunResult, path: Path | str) -> Path | None:
    """A panel per segmented scenario (context length, categories): each spec config's
    acceptance rate per segment, in measuring order; None without such a scenario."""
    scenarios = [s for s in run.scenarios if s.segments]
    if not scenarios:
        return None
    titles = {"context_length": "acceptance per prompt-length bucket",
              "categories": "acceptance per task category"}
    fig, axes = _figure("Scenarios: acceptance by segment", run.provenance, None,
                        ncols=len(scenarios), width=5.5 * len(scenarios))
    for ax, scenario in zip(axes, scenarios, strict=True):
        names = [g.name for g in scenario.segments]
        configs = sorted({c.case.id for g in scenario.segments for c in g.cases
                          if c.acceptance is not None})
        for cid in configs:
            ys = []
            for g in scenario.segments:
                r = next((c for c in g.cases if c.case.id == cid), None)
                rate = r.acceptance.rate if r is not None and r.acceptance is not None else None
                ys.append(rate if _ok(rate) else np.nan)
            ax.plot(range(len(names)), ys, marker="o", label=cid)
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
        ax.set_ylim(0.0, 1.0)
        ax.set_title(titles.get(scenario.kind, scenario.kind))
        ax.set_ylabel("acceptance rate")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8, framealpha=0.9)
    return _save(fig, Path(path))


def plot_soak_over_time(run: RunResult, path: Path | str) -> Path | None:
    """Acceptance and median TPOT per window of each soak, against minutes since it began,
    with each trend's fitted slope drawn through the windows' median; None without a soak."""
    soaks = run.time_scenarios.soak if run.time_scenarios is not None else []
    if not soaks:
        return None
    fig, (ax_acc, ax_tpot) = _figure("Soak: acceptance and TPOT over time", run.provenance,
                                     None, ncols=2, width=11.0)
    for soak in soaks:
        fits = {f.metric: f for f in soak.fits}
        series = {
            "acceptance_rate": (ax_acc, [(w.mid_s, w.acceptance.rate) for w in soak.windows
                                         if w.acceptance is not None]),
            "tpot": (ax_tpot, [(w.mid_s, w.tpot_ms.median) for w in soak.windows]),
        }
        for metric, (ax, pts) in series.items():
            pts = [(x / 60, y) for x, y in pts if _ok(y)]
            if not pts:
                continue
            xs, ys = [x for x, _ in pts], [y for _, y in pts]
            ax.plot(xs, ys, marker="o", label=soak.case.id)
            fit = fits.get(metric)
            if fit is not None and fit.slope is not None:
                # The slope is per hour (TPOT: relative to the windows' median).
                centre = float(np.median(ys))
                per_min = fit.slope / 60 * (centre if metric == "tpot" else 1.0)
                mid = float(np.median(xs))
                ax.plot([xs[0], xs[-1]], [centre + per_min * (xs[0] - mid),
                                          centre + per_min * (xs[-1] - mid)],
                        linestyle="--", color="0.4",
                        label=f"slope {fit.slope:+.3g}/h ({fit.outcome})")
    ax_acc.set_title("acceptance rate per window")
    ax_acc.set_xlabel("minutes since the soak began")
    ax_acc.set_ylabel("acceptance rate")
    ax_tpot.set_title("median TPOT per window")
    ax_tpot.set_xlabel("minutes since the soak began")
    ax_tpot.set_ylabel("TPOT (ms)")
    for ax in (ax_acc, ax_tpot):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8, framealpha=0.9)
    return _save(fig, Path(path))
