"""What a run is judged against: the baseline file and its history, or the newest kept
runs of its own nightlies — and whether a set of kept runs agrees enough to be promoted
to the baseline (pure: the files are read by :mod:`specperf.store.kept_runs`).

The lifecycle it encodes (docs/baselines.md, "The nightly lifecycle"):

* no baseline and no kept run: nothing to compare (the report says so);
* a **provisional** baseline (published means, no samples) and fewer than ``min_runs``
  real kept runs: judged against the published figures, and the report says so plainly;
* a measured baseline and fewer than ``min_runs`` matching kept runs: judged against the
  baseline, the kept runs joining its history exactly as ``history/`` does;
* ``min_runs`` (default ``[compare] baseline_runs``) or more matching kept runs: judged
  against the newest ``baseline_runs`` of them — the newest is the reference, the others
  its kept runs — and a provisional baseline is no longer used.

A kept run matches the run judged when it has the same hardware id, profile hash, vLLM
version and prompts (:func:`specperf.analysis.samples.kept_runs`, the rule the baseline's
history is pooled by), is older than the run, was measured (not provisional), and its own
checks did not fail: a night that confirmed a regression never becomes a kept run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from specperf.analysis.judge.run import compare_runs
from specperf.analysis.samples import kept_runs, per_request, per_trial
from specperf.analysis.stats import between_run_spread
from specperf.config.rules import CompareRules
from specperf.schemas import Baseline, CaseResult, RunResult

__all__ = ["Labelled", "Reference", "choose_reference", "disagreements", "matching_kept",
           "regression_night"]

Result = RunResult | Baseline
#: A kept run and what a report names it by (its path, or its nightly).
Labelled = tuple[str, Result]

Stage = Literal["nothing", "provisional", "baseline", "kept-runs"]

#: The timings whose run-to-run spread a promotion checks against the profile's budgets.
_SPREAD_KEYS = ("ttft", "tpot", "e2e", "output_throughput")


@dataclass
class Reference:
    """The baseline a run is compared with, the history pooled with it, and the lines the
    report and job summary show about that choice."""

    stage: Stage
    baseline: Result | None
    baseline_label: str | None
    history: list[Result] = field(default_factory=list)
    #: The kept runs the comparison may pool (labels, newest first).
    pooled: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def regression_night(result: Result) -> bool:
    """A run whose own checks failed: it confirmed a regression (or broke), so it is never
    a kept run nor promoted."""
    return isinstance(result, RunResult) and bool(result.failed)


def _date(result: Result) -> str:
    return f"{result.provenance.date:%Y-%m-%d %H:%M}"


def matching_kept(run: Result, candidates: Sequence[Labelled]) -> tuple[list[Labelled], list[str]]:
    """The candidates the run may pool, newest first (each measurement once), and one line
    per regression night left out."""
    usable: list[Labelled] = []
    left_out: list[str] = []
    seen: set[str] = set()
    by_id = {id(r): (label, r) for label, r in candidates}
    older = [r for _, r in candidates
             if r.provenance.date < run.provenance.date and not r.provenance.provisional]
    for result in kept_runs(run, older):
        label, _ = by_id[id(result)]
        key = result.provenance.model_dump_json()
        if key in seen:
            continue
        seen.add(key)
        if regression_night(result):
            assert isinstance(result, RunResult)
            left_out.append(f"{label} ({_date(result)}): not pooled, its own checks failed "
                            f"({len(result.failed)}) — a regression night is never a kept run")
            continue
        usable.append((label, result))
    return usable, left_out


def _named(items: Sequence[Labelled]) -> str:
    return "; ".join(f"{label} ({_date(r)})" for label, r in items)


def choose_reference(run: Result, *, baseline: Result | None, baseline_label: str | None,
                     history: Sequence[Result], kept: Sequence[Labelled],
                     rules: CompareRules, min_runs: int | None = None) -> Reference:
    """The reference for ``run`` (module docstring); ``kept``: the candidate kept runs (any
    order, any provenance); ``history``: the baseline file's own kept history."""
    need = min_runs if min_runs is not None else rules.baseline_runs
    real_baseline = baseline is not None and not baseline.provenance.provisional
    candidates = list(kept)
    if real_baseline:
        assert baseline is not None
        candidates += [(f"{baseline_label} (the baseline)", baseline)]
        candidates += [(f"{baseline_label} history", h) for h in history]
    usable, left_out = matching_kept(run, candidates)
    if len(usable) >= need or (baseline is None and usable):
        chosen = usable[:rules.baseline_runs]
        ref = Reference("kept-runs", chosen[0][1], chosen[0][0],
                        history=[r for _, r in chosen[1:]], pooled=[lb for lb, _ in chosen])
        ref.notes.append(
            f"judged against the newest {len(chosen)} kept run{'s' if len(chosen) != 1 else ''} "
            f"of this profile, hardware and vLLM {run.provenance.vllm_version or '?'} that "
            f"passed their own checks: {_named(chosen)}")
        if baseline is not None and baseline.provenance.provisional:
            ref.notes.append(
                f"the provisional baseline {baseline_label} ({baseline.provenance.provisional}) "
                f"is no longer used: {len(usable)} real runs are kept (it is replaced from "
                f"{need} on)")
        elif baseline is not None and all(r is not baseline for _, r in chosen):
            ref.notes.append(f"the baseline file {baseline_label} is not among them (older, "
                             "or measured with another vLLM, profile or prompts)")
    elif baseline is None:
        ref = Reference("nothing", None, None)
        ref.notes.append("no baseline and no kept run of this profile, hardware and vLLM: "
                         "nothing to compare with — this run can become the first kept run")
    elif not real_baseline:
        ref = Reference("provisional", baseline, baseline_label, history=list(history))
        ref.notes.append(
            f"comparing means against published figures: the baseline {baseline_label} is "
            f"provisional ({baseline.provenance.provisional}; no samples, so only the budget "
            f"rule applies); {len(usable)} of the {need} real kept runs that replace it exist "
            "so far")
    else:
        assert baseline is not None
        # The baseline's history as today, and the matching kept runs beside it; one
        # measurement once (a promoted night is also in the history).
        labels = {id(r): lb for lb, r in usable}
        labels |= {id(h): f"{baseline_label} history" for h in history if id(h) not in labels}
        seen: set[str] = set()
        pool: list[Result] = []
        for r in [*(r for _, r in usable if r is not baseline), *history]:
            key = r.provenance.model_dump_json()
            if key not in seen:
                seen.add(key)
                pool.append(r)
        pooled = kept_runs(baseline, pool)[: rules.baseline_runs - 1]
        ref = Reference("baseline", baseline, baseline_label, history=pool,
                        pooled=[labels[id(r)] for r in pooled])
        ref.notes.append(
            f"judged against the baseline {baseline_label} ({_date(baseline)})"
            + (f" and {len(pooled)} kept run{'s' if len(pooled) != 1 else ''}: "
               + _named([(labels[id(r)], r) for r in pooled]) if pooled else "")
            + (f"; {len(usable)} of the {need} matching kept runs that take over exist"
               if len(usable) < need else ""))
    ref.notes.extend(left_out)
    return ref


def _values(case_runs: Sequence[CaseResult], key: str, rules: CompareRules) -> list[list[float]]:
    """Each run's values of a metric on the samples the comparison would use: per trial
    when every run has ``min_trials`` trials, else per request (throughput: per trial)."""
    by_trial = key == "output_throughput" or all(len(c.trials) >= rules.min_trials
                                                 for c in case_runs)
    return [per_trial(c, key) if by_trial else per_request(c, key) for c in case_runs]


def disagreements(runs: Sequence[Labelled], rules: CompareRules) -> list[str]:
    """Why these kept runs (newest first, one profile, hardware, vLLM and prompts) should not
    become the baseline together; empty when they agree.

    They agree when none failed its own checks, none regresses against the others pooled
    (each judged by the same verdict as a nightly, the others as its baseline and kept
    runs), and each timing's run-to-run spread (:func:`specperf.analysis.stats.
    between_run_spread`, ~relative SD) is within the profile's budget for it
    (``[compare] budget_tolerance``): a baseline noisier than its budget would blur every
    later verdict.
    """
    problems: list[str] = []
    if len(runs) < 2:
        return [f"only {len(runs)} run: agreement needs at least 2"]
    for label, result in runs:
        if regression_night(result):
            assert isinstance(result, RunResult)
            problems.append(f"{label} ({_date(result)}): its own checks failed "
                            f"({len(result.failed)}); a regression night is never promoted")
    for i, (label, result) in enumerate(runs):
        others = [r for j, (_, r) in enumerate(runs) if j != i]
        cmp = compare_runs(result, others[0], rules, history=others[1:])
        problems.extend(f"{label} ({_date(result)}) against the other {len(others)}: "
                        f"comparison refused: {r}" for r in cmp.refusals)
        problems.extend(
            f"{label} ({_date(result)}) against the other {len(others)}: {cc.case.id} "
            f"{m.metric} regressed ({m.reason.rstrip('.')})" for cc, m in cmp.regressions)
    newest = runs[0][1]
    for case in newest.cases:
        same = [c for _, r in runs if (c := r.case(case.case)) is not None
                and c.config_hash == case.config_hash]
        if len(same) < 2:
            continue
        for key in _SPREAD_KEYS:
            rule = rules.rule(key)  # type: ignore[arg-type]
            if not rule.enabled:
                continue
            statistic = "mean" if rule.statistic == "mean" else "median"
            spread = between_run_spread(_values(same, key, rules), statistic=statistic)
            limit = rules.budget(key)  # type: ignore[arg-type]
            if spread is not None and spread > limit:
                problems.append(
                    f"{case.case.id} {rule.name}: the runs spread by ~{spread * 100:.1f} % "
                    f"run to run, beyond the profile's {limit * 100:g} % budget "
                    f"([compare] budget_tolerance.{key}) — a noisier runner than the profile "
                    "allows; quieten or pin it, or widen the budget")
    return problems
