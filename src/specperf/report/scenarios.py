"""The run's scenarios (config.scenarios) as report sections: one table per scenario, for
the console and for markdown. The checks themselves are in the run's gate-check tables."""

from __future__ import annotations

from specperf.analysis.scenarios import prefix_counts
from specperf.schemas import CaseResult, RunResult, ScenarioResult

__all__ = ["SCENARIO_HEADERS", "scenario_markdown", "scenario_rows", "scenario_text",
           "scenario_title"]

SCENARIO_HEADERS = ["config", "prefix-cache hit rate", "hit tokens / looked up", "acceptance",
                    "TPOT ms (median)", "TPOT gain vs no-spec", "trials"]

_TITLES = {"prefix_cache": "Scenario: prefix caching (shared prefix, caching on)"}


def scenario_title(kind: str) -> str:
    return _TITLES.get(kind, f"Scenario: {kind}")


def _hits(r: CaseResult) -> tuple[str, str]:
    counts = prefix_counts(r)
    if counts is None:
        return "—", "—"
    rate = counts.hit_rate
    return ("off (no lookups)" if rate is None else f"{rate * 100:.1f} %",
            f"{counts.hits:.0f} / {counts.queries:.0f}")


def scenario_rows(s: ScenarioResult) -> list[list[str]]:
    """One row per case: the no-spec reference first, then each spec config."""
    rows = []
    for r in s.cases:
        rate, counts = _hits(r)
        acc = r.acceptance.rate if r.acceptance is not None else None
        gain = "—"
        nospec = s.paired_nospec.get(r.case.id)
        if nospec is not None and nospec.tpot_ms.median and r.tpot_ms.median:
            gain = f"{nospec.tpot_ms.median / r.tpot_ms.median:.2f}×"
        rows.append([r.case.id, rate, counts, "—" if acc is None else f"{acc:.3f}",
                     "—" if r.tpot_ms.median is None else f"{r.tpot_ms.median:.2f}", gain,
                     str(len(r.trials))])
    return rows


def scenario_text(run: RunResult) -> list[str]:
    """Plain lines: a title and an aligned table per scenario (none without scenarios)."""
    out: list[str] = []
    for s in run.scenarios:
        rows = [SCENARIO_HEADERS, *scenario_rows(s)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(SCENARIO_HEADERS))]
        out.append(scenario_title(s.kind))
        out += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                .rstrip() for row in rows]
    return out


def scenario_markdown(run: RunResult, heading: str = "###") -> str:
    """A section per scenario (empty without scenarios)."""
    out = []
    for s in run.scenarios:
        out.append(f"{heading} {scenario_title(s.kind)}\n")
        out.append("| " + " | ".join(SCENARIO_HEADERS) + " |")
        out.append("|" + "---|" * len(SCENARIO_HEADERS))
        out += ["| " + " | ".join(row) + " |" for row in scenario_rows(s)]
        out.append("")
    return "\n".join(out)
