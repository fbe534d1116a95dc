"""The no-spec reference measured beside a spec config: how far the machine's own speed
moved between the baseline and the run while that config was measured (its paired no-spec
trials: the same no-spec config and prompts, in the same seconds as the config's own).
The hold rule ``beside_reference`` (:mod:`specperf.analysis.judge.rules`) reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specperf.analysis.samples import per_request, per_trial
from specperf.analysis.stats import Comparison, Direction, compare_samples
from specperf.config.rules import CompareRules
from specperf.schemas import Case, CaseResult

__all__ = ["BesideReference", "reference_change", "reference_for"]


@dataclass(frozen=True)
class BesideReference:
    """How far the TPOT of the no-spec trials measured beside a spec config moved, baseline
    → run (``change``, computed once per config): the paired trials of its case
    ``case_id``, the same no-spec config and prompts in the same seconds as the config's own
    trials. The no-spec config did not change, so that is how far the machine's own speed
    moved while the config was measured: the host of a VM ran them 0.55× to 1.87× their
    baseline TPOT on one day (docs/validation.md, "The machine's speed")."""

    case_id: str
    change: Comparison


def reference_for(config_id: str, baseline_paired: Mapping[str, CaseResult],
                  run_paired: Mapping[str, CaseResult],
                  rules: CompareRules) -> BesideReference | None:
    """The reference of server config ``config_id``: its lowest-concurrency case that has
    paired no-spec trials in both the baseline and the run (they run round-robin with the
    config's other cases, so they span the same minutes); None without one, or without
    TPOT samples on a side."""
    mine = sorted((nospec.case.concurrency, cid) for cid, nospec in run_paired.items()
                  if cid in baseline_paired
                  and cid == Case(config_id=config_id, concurrency=nospec.case.concurrency).id)
    if not mine:
        return None
    _, cid = mine[0]
    change = reference_change(cid, baseline_paired[cid], run_paired[cid], rules)
    if change is None:
        return None
    return BesideReference(case_id=cid, change=change)


def reference_change(case_id: str, baseline: CaseResult, current: CaseResult,
                     rules: CompareRules) -> Comparison | None:
    """How far the no-spec TPOT beside ``case_id`` moved, baseline → run: per trial with
    ``min_trials`` a side, else per request. None without samples on a side."""
    rule = rules.rule("tpot")
    by_trial = min(len(baseline.trials), len(current.trials)) >= rules.min_trials
    pick = per_trial if by_trial else per_request
    b, c = pick(baseline, "tpot"), pick(current, "tpot")
    if not b or not c:
        return None
    return compare_samples(f"no-spec TPOT beside {case_id}", b, c,
                           direction=Direction.LOWER_IS_BETTER, min_effect=rule.min_effect,
                           alpha=rules.alpha, confidence=rules.confidence,
                           n_resamples=rules.n_resamples, seed=rules.seed)
