"""The speculative-decoding advice as views: a rich renderable and a markdown section.

:func:`advice_console` is what ``specperf advise``, the terminal summary of a run and
report.txt print; :func:`advice_markdown` is the section report.md ends with. Both render a
:class:`~specperf.analysis.advice.RunAdvice` (the cost model fitted to a run); what the
columns mean is in their legends, the model itself in specperf.analysis.advice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from specperf.report.escape import md_escape

if TYPE_CHECKING:  # annotations only: the renderers never run the model (no scipy import)
    from specperf.analysis.advice import CaseAdvice, RunAdvice

__all__ = ["WIDE", "advice_console", "advice_markdown"]


# --------------------------------------------------------------------------- formatting


def _f(v: float | None, fmt: str = ".2f", none: str = "—") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return none
    return format(v, fmt)


def _gain(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def _predicted(a: CaseAdvice) -> str:
    if a.predicted_gain is None:
        return "—"
    if a.prediction_basis == "other-k":
        return f"{a.predicted_gain:.2f}× k={','.join(map(str, a.prediction_from_k))}"
    return f"{a.predicted_gain:.2f}× self"


def _signed_pct(x: float) -> str:
    v = round(x * 100)
    return f"{'+' if v >= 0 else '−'}{abs(v):.0f} %"


def _error(a: CaseAdvice) -> str:
    if a.prediction_error is None or a.prediction_basis != "other-k":
        return "—"
    return _signed_pct(a.prediction_error)


def _cost(a: CaseAdvice) -> str:
    if a.cost_ratio is None or a.costs_fit is False:
        return "no fit" if a.costs_fit is False else "—"
    return f"{a.cost_ratio:.3f}"


def _best_k(a: CaseAdvice) -> str:
    if a.best_k is None:
        return "—"
    if a.best_k == 0:
        return "0 don't"
    if a.best_k < a.k and a.best_k_speedup is not None:
        return f"{a.best_k} +{a.best_k_speedup * 100:.0f}%"
    return str(a.best_k)


def _break_even(a: CaseAdvice) -> str:
    if a.costs_fit is not True:
        return "—"
    return "never" if a.break_even_acceptance is None else f"{a.break_even_acceptance:.2f}"


def _crossover(advice: RunAdvice, config_id: str) -> str:
    cfg = advice.config(config_id)
    if cfg is None or len(cfg.gains) < 2:
        return "—"
    if cfg.crossover_concurrency is None:
        return "none in range"
    verb = "stops" if cfg.crossover_direction == "stops" else "starts"
    return f"c≈{cfg.crossover_concurrency:.1f} {verb}"


_COLUMNS = (
    ("case", "left"),
    ("k", "right"),
    ("tok/step", "right"),
    ("accept a", "right"),
    ("break-even a", "right"),
    ("measured gain", "right"),
    ("predicted gain", "right"),
    ("error", "right"),
    ("fitted c", "right"),
    ("best k'", "right"),
    ("crossover", "right"),
)

_LEGEND = (
    "tok/step = 1 + Σ p_i from the per-position counters; accept a = the i.i.d. acceptance "
    "giving that yield; gain = no-spec median TPOT / spec median TPOT at the same concurrency; "
    "predicted gain uses costs fitted on the OTHER k of the same draft (self = only one k, "
    "equals measured by construction); c = draft cost per token / target step (step = 1 + k·c "
    "target steps); best k' ≤ k from the counters (+x% = predicted speedup over k); "
    "crossover = concurrency where the measured gain crosses 1."
)


def _rows(advice: RunAdvice) -> list[list[str]]:
    rows = []
    seen: set[str] = set()
    for a in advice.cases:
        first = a.config_id not in seen
        seen.add(a.config_id)
        rows.append([
            a.case_id,
            str(a.k),
            _f(a.tokens_per_step),
            _f(a.iid_acceptance),
            _break_even(a),
            _gain(a.measured_gain),
            _predicted(a),
            _error(a),
            _cost(a),
            _best_k(a),
            _crossover(advice, a.config_id) if first else "",
        ])
    return rows


def _draft_name(method: str | None, draft_model: str | None) -> str:
    name = draft_model or method or "?"
    if draft_model and method and method != "draft_model":
        name = f"{method}: {draft_model}"
    return name


def _pcts(values: dict[int, float]) -> str:
    return " ".join(_signed_pct(v).removesuffix(" %") for _, v in sorted(values.items()))


def _fit_rows(advice: RunAdvice) -> list[list[str]]:
    rows = []
    for f in advice.fits:
        rows.append([
            _draft_name(f.method, f.draft_model) + (" (self)" if f.self_draft else ""),
            str(f.concurrency),
            ",".join(map(str, f.ks)),
            f"{f.target_ms:.1f}",
            f"{f.draft_ms:.2f}",
            f"{f.overhead_ms:.0f}" if f.implied_overhead_ratio is None
            else f"0 (self {f.implied_overhead_ratio * f.target_ms:+.1f})",
            f"{f.cost_ratio:.3f}",
            _pcts(f.residuals) if f.physical else "no fit",
            _pcts(f.held_out_errors) or "—",
        ])
    return rows


_FIT_COLUMNS = (
    "draft", "conc", "k", "t_target", "t_draft", "overhead", "c", "in-sample", "held-out",
)
_FIT_LEGEND = (
    "step = t_target + k·t_draft (ms): t_target = no-spec TPOT (one target step); t_draft = "
    "cost per draft token, c = t_draft / t_target fitted by least squares over the draft's k "
    "in units of each case's own no-spec step; overhead = fixed cost per step, 0 in the model "
    "(self: what the self-draft config implies, see its check); in-sample = fitted gain / "
    "measured − 1 per k (%); held-out = gain predicted from the other k / measured − 1 per k "
    "(%); no fit = a spec step measured cheaper than a no-spec step."
)


def _ci(v: tuple[float, float] | None) -> str:
    return "—" if v is None else f"{v[0]:.2f}–{v[1]:.2f}"


def _held_rows(advice: RunAdvice) -> list[list[str]]:
    return [
        [
            a.case_id,
            ", ".join(a.prediction_from),
            _f(a.prediction_cost_ratio, ".3f"),
            _f(a.tokens_per_step),
            _gain(a.predicted_gain),
            _gain(a.measured_gain),
            _ci(a.measured_gain_ci),
            _error(a),
        ]
        for a in advice.cases
        if a.prediction_basis == "other-k"
    ]


_HELD_COLUMNS = (
    "case", "fitted from", "c", "tok/step", "predicted", "measured", "95 % CI", "error",
)
_HELD_LEGEND = (
    "Each prediction uses c fitted only on the configs listed (the other k of the same draft, "
    "same concurrency) and the case's own tok/step from its counters: predicted = tok/step / "
    "(1 + k·c). 95 % CI = bootstrap interval of the measured gain (per-request TPOTs)."
)


def _checks(advice: RunAdvice) -> list[str]:
    return [f.sentence for f in advice.fits if f.implied_overhead_ratio is not None]


# --------------------------------------------------------------------------- console


#: Below this many columns the case table is split in two (gain | what to change).
WIDE = 120
_GAIN_COLS = ("case", "measured gain", "predicted gain", "error", "crossover")
_CHANGE_COLS = ("case", "tok/step", "accept a", "break-even a", "fitted c", "best k'")


def _case_table(advice: RunAdvice, title: str, columns: Sequence[str], caption: str | None
                ) -> Table:
    names = [n for n, _ in _COLUMNS]
    justify = dict(_COLUMNS)
    idx = [names.index(c) for c in columns]
    t = Table(title=title, caption=caption, header_style="bold")
    for c in columns:  # a figure folds onto a second line rather than lose digits
        t.add_column(c, justify=justify[c], no_wrap=c == "case",  # type: ignore[arg-type]
                     overflow="fold")
    for a, row in zip(advice.cases, _rows(advice), strict=True):
        style = "red" if a.measured_gain is not None and a.measured_gain < 1.0 else None
        t.add_row(*[row[i] for i in idx], style=style)
    return t


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], caption: str,
           left: set[str]) -> Table:
    t = Table(title=title, caption=caption, header_style="bold")
    for i, name in enumerate(columns):
        # The names (case ids, "tiny:target (self)", the configs a fit came from) keep
        # every word whole at 80 columns (they wrap at spaces); figures fold, never cut.
        whole = name in left
        longest = max((len(word) for row in rows for word in str(row[i]).split()), default=0)
        t.add_column(name, justify="left" if whole else "right",
                     min_width=longest if whole else None, overflow="fold")
    for row in rows:
        t.add_row(*row)
    return t


class _AdviceView:
    """Rich renderable: one wide case table, or two narrower ones under ``WIDE`` columns.
    ``brief`` (the pytest summary without -v): the case tables, the overhead findings and
    the notes; the cost-model tables and the sentence per case stay in report.txt/md."""

    def __init__(self, advice: RunAdvice, brief: bool = False) -> None:
        self.advice = advice
        self.brief = brief

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        advice = self.advice
        if advice.cases:
            if options.max_width >= WIDE:
                yield _case_table(advice, "speculative-decoding advice",
                                  [n for n, _ in _COLUMNS], _LEGEND)
            else:
                yield _case_table(advice, "speculative-decoding advice: gain", _GAIN_COLS, None)
                yield _case_table(advice, "speculative-decoding advice: what to change",
                                  _CHANGE_COLS, _LEGEND)
        if self.brief:
            if advice.cases:
                yield Text("the cost model per draft, its held-out predictions and a sentence "
                           "per case: report.txt and report.md (-v shows them here)", style="dim")
            yield from self._findings()
            return
        fits = _fit_rows(advice)
        if fits:
            yield _table("cost model per draft and concurrency", _FIT_COLUMNS, fits,
                         _FIT_LEGEND, left={"draft"})
        held = _held_rows(advice)
        if held:
            yield _table("held-out predictions: each gain from the other configs' costs",
                         _HELD_COLUMNS, held, _HELD_LEGEND, left={"case", "fitted from"})
        checks = _checks(advice)
        if checks:
            yield Text("\n".join(f"• {s}" for s in checks))
        lines = [a.sentence for a in advice.cases] + [c.sentence for c in advice.configs]
        if lines:
            yield Text("\n".join(f"• {s}" for s in lines))
        yield from self._findings()

    def _findings(self) -> RenderResult:
        advice = self.advice
        if advice.baseline is not None:
            if advice.findings:
                yield Text("overhead regressions", style="bold red")
                yield Text("\n".join(f"• {f.message}" for f in advice.findings), style="red")
            else:
                yield Text(
                    f"no overhead regression against {advice.baseline} (acceptance-unchanged "
                    "cases gain as the baseline's costs predict)",
                    style="green",
                )
        if advice.notes:
            yield Text("\n".join(f"note: {n}" for n in advice.notes), style="yellow")
        if not advice.cases and not advice.notes:
            yield Text("no speculative-decoding cases to advise on")


def advice_console(advice: RunAdvice, brief: bool = False) -> RenderableType:
    """The advice as one rich renderable (tables and sentences), for the console report.

    It adapts to the console width: one case table from 120 columns, two below.
    """
    return _AdviceView(advice, brief)


# --------------------------------------------------------------------------- markdown


def _md_cell(s: str) -> str:
    return md_escape(s)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    out = ["| " + " | ".join(_md_cell(h) for h in header) + " |"]
    rule = ("---:" if i in right else "---" for i in range(len(header)))
    out.append("| " + " | ".join(rule) + " |")
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out


def advice_markdown(advice: RunAdvice, heading: str = "##") -> str:
    """The advice as a GitHub-flavoured markdown section (starts with ``{heading} Advice``)."""
    lines = [f"{heading} Speculative-decoding advice", ""]
    if advice.cases:
        header = [n for n, _ in _COLUMNS]
        lines += _md_table(header, _rows(advice), set(range(1, len(header))))
        lines += ["", f"<sub>{_md_cell(_LEGEND)}</sub>", ""]
    fits = _fit_rows(advice)
    if fits:
        lines += [f"{heading}# Cost model per draft and concurrency", ""]
        lines += _md_table(_FIT_COLUMNS, fits, set(range(1, len(_FIT_COLUMNS))))
        lines += ["", f"<sub>{_md_cell(_FIT_LEGEND)}</sub>", ""]
    held = _held_rows(advice)
    if held:
        lines += [f"{heading}# Held-out predictions", ""]
        lines += _md_table(_HELD_COLUMNS, held, set(range(2, len(_HELD_COLUMNS))))
        lines += ["", f"<sub>{_md_cell(_HELD_LEGEND)}</sub>", ""]
    checks = _checks(advice)
    if checks:
        lines += [f"- {md_escape(s)}" for s in checks] + [""]
    sentences = [a.sentence for a in advice.cases] + [c.sentence for c in advice.configs]
    if sentences:
        lines += [f"- {md_escape(s)}" for s in sentences] + [""]
    if advice.baseline is not None:
        if advice.findings:
            lines += [f"{heading}# Overhead regressions", ""]
            lines += [f"- :red_circle: {md_escape(f.message)}" for f in advice.findings] + [""]
        else:
            lines += [f"No overhead regression against {md_escape(advice.baseline)}.", ""]
    if advice.notes:
        lines += [f"> note: {md_escape(n)}" for n in advice.notes] + [""]
    if not advice.cases:
        lines += ["No speculative-decoding cases to advise on.", ""]
    return "\n".join(lines)
