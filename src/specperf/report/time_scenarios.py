"""The time-structured scenarios as rows and lines, for the console and markdown views.

A soak is shown window by window (acceptance and TPOT over time) with each trend's slope
and interval; a ramp's three phases side by side. One home for what the columns hold:
the console (report.console) and markdown (report.markdown) views render these rows.
"""

from __future__ import annotations

import statistics

from specperf.analysis.trend import drafted_share
from specperf.schemas import RampResult, RunResult, SoakResult, TrendFit

__all__ = ["RAMP_HEADERS", "SOAK_HEADERS", "fit_line", "has_scenarios", "ramp_rows",
           "ramp_title", "soak_rows", "soak_title"]

SOAK_HEADERS = ["window", "start s>", "requests>", "errors>", "TPOT p50 ms>", "acceptance>",
                "mean acc. length>", "outside cores>"]
RAMP_HEADERS = ["phase", "c>", "requests>", "errors>", "TPOT p50 ms>", "acceptance>",
                "mean acc. length>", "drafted steps>", "outside cores>"]

_WORD = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE",
         "busy": "not measured (machine busy)"}


def _f(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def soak_title(soak: SoakResult) -> str:
    return (f"soak {soak.case.id}: {len(soak.windows)} windows of ≥ {soak.window_s:g} s "
            f"over {soak.duration_s:.0f} s")


def soak_rows(soak: SoakResult) -> list[list[str]]:
    rows = []
    for w in soak.windows:
        acc = w.acceptance
        rows.append([str(w.index + 1), f"{w.start_s:.0f}", str(w.n_requests), str(w.n_errors),
                     _f(w.tpot_ms.median, ".2f"), _f(acc.rate if acc else None, ".4f"),
                     _f(acc.mean_acceptance_length if acc else None, ".3f"),
                     _f(w.outside_cores, ".2f")])
    return rows


def fit_line(fit: TrendFit) -> str:
    """'acceptance_rate trend: PASS — slope +0 per hour (95 % interval [+0, +0]) …'"""
    return f"{fit.metric} trend: {_WORD[fit.outcome]} — {fit.reason}"


def ramp_title(ramp: RampResult) -> str:
    return "ramp " + ramp.case.config_id + ": " + " → ".join(
        f"c={p.concurrency}" for p in ramp.phases)


def ramp_rows(ramp: RampResult) -> list[list[str]]:
    rows = []
    for p in ramp.phases:
        t = p.trial
        ok = [s for s in t.samples if s.ok]
        tpots = [x * 1000 for s in ok if (x := s.tpot_s) is not None]
        median = statistics.median(tpots) if tpots else None
        acc = t.acceptance
        rows.append([p.name, str(p.concurrency), str(len(t.samples)),
                     str(len(t.samples) - len(ok)), _f(median, ".2f"),
                     _f(acc.rate if acc else None, ".4f"),
                     _f(acc.mean_acceptance_length if acc else None, ".3f"),
                     _f(drafted_share(t), ".1%"), _f(t.outside_cores, ".2f")])
    return rows


def has_scenarios(run: RunResult) -> bool:
    t = run.time_scenarios
    return t is not None and bool(t.soak or t.ramp)
