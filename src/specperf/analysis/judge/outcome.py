"""One verdict: how a comparison becomes a check's outcome, and a run's outcomes its exit
status — the one mapping the pytest run, ``specperf compare``, merge, upgrade and the
nightly report all use, so they cannot disagree (docs/statistics.md, "One verdict").

=================  =================================================================
verdict            outcome
=================  =================================================================
REGRESSION         FAIL: the interval lies wholly beyond the limit, significantly (and
                   for timings on samples, a fresh server start showed it too)
INCONCLUSIVE       INCONCLUSIVE: the interval straddles the limit after the trials the
                   plan allows — undecided, shown, not a failure
UNCHANGED          PASS: the interval clears the limit
IMPROVEMENT        PASS
=================  =================================================================

A timing check (TTFT, TPOT, E2E, throughput, TPOT gain) of a case whose kept trials ran
on a busy machine is BUSY ("not measured: machine busy …") whatever its numbers say:
other processes slow a trial down exactly as a regression would, and speed it up never.
Acceptance is counted exactly and judged regardless.

Exit statuses (a pytest run and ``specperf compare`` alike; the numbers are
specperf.config.exits'): OK every check passed (or had nothing to judge against), FAILED
a check failed, INCONCLUSIVE nothing failed but something is, BUSY nothing failed but the
machine was busy for some timing checks (BUSY wins over INCONCLUSIVE: the cure is a quiet
machine). Which outcomes a run's exit status is computed from (its checks, each one a
comparison makes again replaced by the comparison's outcome) is
:mod:`specperf.analysis.judge.exit_status`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Protocol

from specperf.config.exits import Exit
from specperf.schemas.gate import Outcome

__all__ = [
    "OUTCOME_ORDER",
    "TIMING_METRIC_KEYS",
    "exit_status",
    "outcome_counts",
    "outcome_of",
    "outcomes_line",
    "worst",
]

#: Metric keys (MetricDetail.key, rules.METRIC_KEYS) whose numbers a busy machine distorts.
TIMING_METRIC_KEYS = frozenset({"ttft", "tpot", "e2e", "output_throughput", "tpot_gain",
                                "tpot_vs_nospec"})

#: Worst first: the order an item's checks decide its outcome and reports list them.
OUTCOME_ORDER: dict[str, int] = {"fail": 0, "busy": 1, "inconclusive": 2, "pass": 3, "skip": 4}

_OF_VERDICT: dict[str, Outcome] = {
    "regression": "fail",
    "inconclusive": "inconclusive",
    "unchanged": "pass",
    "improvement": "pass",
}


class _HasVerdict(Protocol):
    @property
    def verdict(self) -> object: ...


def outcome_of(comparison: _HasVerdict, *, busy: bool = False) -> Outcome:
    """A comparison's outcome; ``busy``: the metric is a timing and the case's trials ran
    on a busy machine."""
    if busy:
        return "busy"
    verdict = comparison.verdict
    return _OF_VERDICT[getattr(verdict, "value", verdict)]  # type: ignore[index]


def worst(outcomes: Iterable[str]) -> Outcome | None:
    """The outcome an item (or case) with these outcomes has; None for none."""
    found = sorted(outcomes, key=OUTCOME_ORDER.__getitem__)
    return found[0] if found else None  # type: ignore[return-value]


def exit_status(outcomes: Iterable[str]) -> Exit:
    n = Counter(outcomes)
    if n["fail"]:
        return Exit.FAILED
    if n["busy"]:
        return Exit.BUSY
    if n["inconclusive"]:
        return Exit.INCONCLUSIVE
    return Exit.OK


def outcome_counts(outcomes: Iterable[str]) -> dict[str, int]:
    n = Counter(outcomes)
    return {o: n.get(o, 0) for o in OUTCOME_ORDER}


def outcomes_line(outcomes: Iterable[str]) -> str:
    """'14 passed, 1 failed, 2 inconclusive, 3 not measured (machine busy)' — zeros left
    out except passed."""
    n = outcome_counts(outcomes)
    parts = [f"{n['pass']} passed"]
    if n["fail"]:
        parts.append(f"{n['fail']} failed")
    if n["inconclusive"]:
        parts.append(f"{n['inconclusive']} inconclusive")
    if n["busy"]:
        parts.append(f"{n['busy']} not measured (machine busy)")
    if n["skip"]:
        parts.append(f"{n['skip']} not judged (no baseline)")
    return ", ".join(parts)

