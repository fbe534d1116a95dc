"""The run's scenarios (config.scenarios) as report sections: one table per scenario — per
segment (length bucket, task category) for the segmented ones — for the console, markdown
and HTML. The checks themselves are in the run's gate-check tables."""

from __future__ import annotations

import statistics

from specperf.analysis.scenarios import SEGMENT_WORD, prefix_counts
from specperf.report.escape import md_escape
from specperf.schemas import CaseResult, RunResult, ScenarioResult

__all__ = ["SCENARIO_HEADERS", "confirmation_lines", "scenario_markdown", "scenario_rows", "scenario_tables",
           "scenario_text", "scenario_title", "segment_headers", "segment_rows"]

SCENARIO_HEADERS = ["config", "prefix-cache hit rate", "hit tokens / looked up", "acceptance",
                    "TPOT ms (median)", "TPOT gain vs no-spec", "trials"]

_TITLES = {"prefix_cache": "Scenario: prefix caching (shared prefix, caching on)",
           "context_length": "Scenario: context length (acceptance by prompt-length bucket)",
           "categories": "Scenario: task categories (acceptance by category)"}


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


def segment_headers(kind: str) -> list[str]:
    return ["config", SEGMENT_WORD[kind], "prompt tokens (mean)", "acceptance",
            "accepted / drafted", "mean acceptance length", "TPOT ms (median)",
            "TPOT gain vs no-spec", "trials"]


def _mean_prompt_tokens(r: CaseResult) -> str:
    tokens = [s.prompt_tokens for t in r.trials for s in t.samples if s.ok and s.prompt_tokens]
    return f"{statistics.fmean(tokens):.0f}" if tokens else "—"


def segment_rows(s: ScenarioResult) -> list[list[str]]:
    """One row per segment and config, segments in measuring order, the no-spec
    reference first within each."""
    rows = []
    for g in s.segments:
        for r in g.cases:
            acc = r.acceptance
            rate = acc.rate if acc is not None else None
            length = acc.mean_acceptance_length if acc is not None else None
            gain = "—"
            nospec = g.paired_nospec.get(r.case.id)
            if nospec is not None and nospec.tpot_ms.median and r.tpot_ms.median:
                gain = f"{nospec.tpot_ms.median / r.tpot_ms.median:.2f}×"
            rows.append([r.case.id, g.name, _mean_prompt_tokens(r),
                         "—" if rate is None else f"{rate:.3f}",
                         "—" if acc is None else f"{acc.accepted_tokens:.0f} / "
                                                 f"{acc.draft_tokens:.0f}",
                         "—" if length is None else f"{length:.2f}",
                         "—" if r.tpot_ms.median is None else f"{r.tpot_ms.median:.2f}", gain,
                         str(len(r.trials))])
    return rows


def scenario_tables(s: ScenarioResult) -> tuple[str, list[str], list[list[str]]]:
    """The scenario's title, column headers and rows."""
    if s.kind in SEGMENT_WORD:
        return scenario_title(s.kind), segment_headers(s.kind), segment_rows(s)
    return scenario_title(s.kind), SCENARIO_HEADERS, scenario_rows(s)


def confirmation_lines(s: ScenarioResult) -> list[str]:
    """'draft-k2-c1: TPOT gain flagged: measured again on a fresh server (5 + 5 trials):
    …': what the fresh-server confirmation did to each of the scenario's cases."""
    return [f"{r.case.id}: {r.confirmation.summary_line()}" for r in s.cases
            if r.confirmation is not None]


def scenario_text(run: RunResult) -> list[str]:
    """Plain lines: a title and an aligned table per scenario (none without scenarios),
    then what a fresh-server confirmation did there."""
    out: list[str] = []
    for s in run.scenarios:
        title, headers, body = scenario_tables(s)
        rows = [headers, *body]
        widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
        out.append(title)
        out += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                .rstrip() for row in rows]
        out += ["  " + line for line in confirmation_lines(s)]
    return out


def scenario_markdown(run: RunResult, heading: str = "###") -> str:
    """A section per scenario (empty without scenarios). Every cell and title is escaped
    (specperf.report.escape): case ids, segment and category names come from the profile
    and the dataset."""
    out = []
    for s in run.scenarios:
        title, headers, body = scenario_tables(s)
        out.append(f"{heading} {md_escape(title)}\n")
        out.append("| " + " | ".join(md_escape(h) for h in headers) + " |")
        out.append("|" + "---|" * len(headers))
        out += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in body]
        out.append("")
        if lines := confirmation_lines(s):
            out += [*(f"- {md_escape(line)}" for line in lines), ""]
    return "\n".join(out)
