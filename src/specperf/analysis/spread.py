"""How far one server start moves each metric, each case's estimate helped by the
baseline's other cases.

Every trial of a run shares its server start's offset, so the comparison widens its
intervals by the spread of the kept runs' centres (:func:`specperf.analysis.stats.
compare_samples`, its between-run term). One case's kept runs estimate that spread poorly:
two kept runs give it one degree of freedom (Student's t = 12.7 at 95 %: measured, a
+26 % TPOT change read −58 … +279 %), and two runs may agree by chance (a spread of 0 that
widens nothing: measured, a no-spec server 0.1 % apart in its two kept runs, then FAILed;
docs/validation.md, #13). The cases of a profile are served the same way on the same
machine, so each case's estimate is moderated by the others'
(:func:`specperf.analysis.stats.moderated_spreads`, empirical Bayes): with few kept runs
and cases that agree, a case leans on the pool; as its own kept runs accumulate, or where
the cases plainly differ (measured on the cpu-ci nightlies: a no-spec server 12.7 % run to
run, self-drafting 0.9 %), it keeps its own.

It depends on the baseline and its kept runs only, never on the current run, so the run
judging as it goes (:mod:`specperf.engine.measurer`), the run's final comparison and an
offline ``specperf compare`` — of the whole run or of one shard — give a case the same
spread. docs/statistics.md, "Kept runs", explains it for users.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from specperf.analysis.samples import (
    earlier_pairs,
    earlier_runs,
    per_request,
    per_trial,
    relative_tpot,
)
from specperf.analysis.stats import moderated_spreads
from specperf.config.rules import RELATIVE_TPOT, CompareRules
from specperf.schemas import Baseline, CaseResult, RunResult

__all__ = ["KeptSpreads", "SampleKind", "Spread", "kept_spreads", "own_spread",
           "spread_args"]

#: What the spread is of: per-request values, per-trial values, or each run's mean (the
#: throughput budget rule, one value a trial).
SampleKind = Literal["requests", "trials", "means"]

class Spread(NamedTuple):
    """A server start's spread (log scale, ~ relative SD) and what it was estimated from."""

    sd: float
    df: float
    #: 1: the case's own kept runs; more: moderated by that many cases' kept runs.
    cases: int


def own_spread(runs: Sequence[Sequence[float]], *, statistic: Literal["median", "mean"],
               kind: SampleKind) -> Spread | None:
    """One case's spread from its own kept runs (None with fewer than 2 usable runs)."""
    found = moderated_spreads([runs], statistic=statistic,
                              subtract_sampling=kind != "means")[0][0]
    return None if found is None else Spread(found[0], found[1], 1)


def spread_args(spread: Spread | None, baseline_runs: int) -> dict[str, float | int | None]:
    """The keyword arguments of :func:`specperf.analysis.stats.compare_samples` that widen
    its interval by ``spread`` (the case's own: Student's t on its kept runs less one)."""
    if spread is None:
        return {"between_run_sd": 0.0, "baseline_runs": baseline_runs}
    moderated = spread.cases > 1
    return {"between_run_sd": spread.sd, "baseline_runs": baseline_runs,
            "spread_df": spread.df if moderated else None,
            "spread_cases": spread.cases if moderated else None}


def _statistic(rules: CompareRules, key: str, kind: SampleKind) -> Literal["median", "mean"]:
    """The centre the comparison uses for this metric and kind of sample."""
    if key == RELATIVE_TPOT:
        return "median"
    declared = rules.rule(key).statistic  # type: ignore[arg-type]
    if declared in ("median", "mean"):
        return declared  # type: ignore[return-value]
    return "mean" if key == "output_throughput" or kind == "means" else "median"


@dataclass(frozen=True)
class KeptSpreads:
    """Per (metric key, kind of sample, case id): the case's moderated spread."""

    by_case: dict[tuple[str, SampleKind, str], Spread] = field(default_factory=dict)

    def for_case(self, key: str, kind: SampleKind, case_id: str,
                 own: Spread | None) -> Spread | None:
        """The spread a case's interval is widened by: its moderated one when the
        baseline's cases gave one, else its own kept runs'."""
        return self.by_case.get((key, kind, case_id), own)


def kept_spreads(baseline: RunResult | Baseline, history: Sequence[RunResult | Baseline],
                 rules: CompareRules) -> KeptSpreads:
    """The moderated spreads of every metric the comparison widens, for every case of the
    baseline with its kept runs as :func:`specperf.analysis.compare.against_baseline` pools
    them (the newest ``rules.baseline_runs``)."""
    groups: dict[tuple[str, SampleKind], list[tuple[str, list[list[float]]]]] = {}

    def add(key: str, kind: SampleKind, case_id: str, runs: list[list[float]]) -> None:
        if len(runs) > 1:
            groups.setdefault((key, kind), []).append((case_id, runs))

    for base in baseline.cases:
        runs: list[CaseResult] = [base, *earlier_runs(base, baseline, history)]
        runs = runs[: rules.baseline_runs]
        cid = base.case.id
        for key in ("ttft", "tpot", "e2e"):
            add(key, "requests", cid, [per_request(r, key) for r in runs])
            add(key, "trials", cid, [per_trial(r, key) for r in runs])
        add("output_throughput", "trials", cid, [per_trial(r, "output_throughput") for r in runs])
        add("output_throughput", "means", cid,
            [[t.output_throughput for t in r.trials] or [r.output_throughput] for r in runs])
        paired = baseline.paired_nospec.get(cid)
        if paired is not None:
            pairs = [(base, paired), *earlier_pairs(base, baseline, history)]
            pairs = pairs[: rules.baseline_runs]
            for kind, by_trial in (("requests", False), ("trials", True)):
                add(RELATIVE_TPOT, kind, cid,  # type: ignore[arg-type]
                    [relative_tpot(s, n, by_trial) for s, n in pairs])
    by_case: dict[tuple[str, SampleKind, str], Spread] = {}
    for (key, kind), cases in groups.items():
        found, moderated = moderated_spreads([runs for _, runs in cases],
                                             statistic=_statistic(rules, key, kind),
                                             subtract_sampling=kind != "means")
        if not moderated:
            continue  # each case's own, as compare_cases computes it without us
        usable = sum(1 for f in found if f is not None)
        for (cid, _), spread in zip(cases, found, strict=True):
            if spread is not None and math.isfinite(spread[0]):
                by_case[(key, kind, cid)] = Spread(spread[0], spread[1], usable)
    return KeptSpreads(by_case)
