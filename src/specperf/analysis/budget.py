"""The budget rule (docs/statistics.md, "The budget rule"): a point comparison without an
interval, for a metric with too few samples for a test — throughput with fewer than
``min_trials`` trials a side, a latency against a baseline of summary figures only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy import stats as scipy_stats

from specperf.analysis.spread import KeptSpreads, own_spread
from specperf.analysis.stats import Comparison, Direction, Verdict
from specperf.config.rules import CompareRules, MetricRule
from specperf.schemas import CaseResult, Summary

__all__ = ["budget_rule", "summary_budget", "throughput_budget"]


def budget_rule(rule: MetricRule, rules: CompareRules, b: float, c: float, *,
            statistic: Literal["median", "mean"], n_baseline: int, n_current: int,
            tolerance: float, why: str, advice: str, spread: float = 0.0) -> Comparison:
    """The budget rule (docs/statistics.md): a point comparison without an interval.

    One-sided, like the interval rule: worse by more than ``tolerance`` (never less than
    the rule's minimum effect): REGRESSION; worse by more than the minimum effect but
    within the budget: INCONCLUSIVE; otherwise UNCHANGED (better by more than the budget:
    IMPROVEMENT).

    ``spread``: how far one more run may land from the kept runs by their own spread. It
    widens the budget (``tolerance`` + ``spread``) and counts for a PASS too: UNCHANGED only when the
    change, worsened by it, still clears the minimum effect — a point inside the minimum
    effect says nothing when the runs themselves spread wider (measured: a 21 % drop read
    PASS against two kept runs 106 % apart by Student's t, docs/validation.md).
    """
    m = rule.min_effect
    tolerance = max(tolerance, m) + spread
    unit = f" {rule.unit}" if rule.unit else ""
    how = f"{why}, so there is no interval: judged against the ±{tolerance * 100:g} % budget"
    if not (math.isfinite(b) and math.isfinite(c)) or b <= 0:
        ratio = math.nan
        verdict = Verdict.INCONCLUSIVE
        reason = (f"{rule.name} baseline {statistic} is {b:.4g}{unit}, so a relative change "
                  "is undefined")
    else:
        ratio = c / b
        delta = ratio - 1.0
        moved = (f"{'rose' if delta > 0 else 'fell'} {abs(delta) * 100:.1f} %" if delta
                 else "did not move")
        moved += f" ({b:.4g} → {c:.4g}{unit})"
        worse_by = delta if rule.direction is Direction.LOWER_IS_BETTER else -delta
        if worse_by > tolerance:
            verdict = Verdict.REGRESSION
            tail = "beyond it"
        elif worse_by > m:
            verdict = Verdict.INCONCLUSIVE
            tail = (f"inside the budget but beyond the {m * 100:g} % minimum effect, so it may "
                    f"be noise; {advice}")
        elif -worse_by > tolerance:
            verdict = Verdict.IMPROVEMENT
            tail = "beyond it, for the better"
        elif worse_by + spread > m:
            verdict = Verdict.INCONCLUSIVE
            tail = (f"within the {m * 100:g} % minimum effect, but the kept runs spread "
                    f"±{spread * 100:.1f} %, which could hide a change beyond it; "
                    "more kept runs narrow that")
        else:
            verdict = Verdict.UNCHANGED
            tail = f"clear of the {m * 100:g} % minimum effect" + (
                f" by more than the kept runs' ±{spread * 100:.1f} % spread" if spread else "")
        reason = f"{rule.name} {statistic} {moved}; {how}, {tail}"
    return Comparison(
        metric=rule.name,
        direction=rule.direction,
        statistic=statistic,
        baseline=b,
        current=c,
        ratio=ratio,
        ci_low=math.nan,
        ci_high=math.nan,
        confidence=rules.confidence,
        p_value=None,
        alpha=rules.alpha,
        min_effect=tolerance,
        n_baseline=n_baseline,
        n_current=n_current,
        verdict=verdict,
        reason=reason + ".",
    )


def throughput_budget(runs: Sequence[CaseResult], cur: CaseResult, rule: MetricRule,
                       rules: CompareRules, spreads: KeptSpreads) -> Comparison:
    """Throughput with too few trials for a test (or a baseline with none): the mean of the
    kept runs' trials against the budget, widened by how far one more run's mean may land
    from theirs (Student's t: the prediction of one more run), with the spread of a run's
    mean moderated by the baseline's other cases (:mod:`specperf.analysis.spread`)."""
    base = runs[0]
    values = [[t.output_throughput for t in run.trials] or [run.output_throughput]
              for run in runs]
    b = float(np.mean([v for run in values for v in run]))
    c = float(np.mean([t.output_throughput for t in cur.trials])) if cur.trials else \
        cur.output_throughput
    nb, nc = sum(len(run.trials) for run in runs), len(cur.trials)
    widened, extra = "", 0.0
    spread = spreads.for_case("output_throughput", "means", base.case.id,
                              own_spread(values, statistic="mean", kind="means"))
    if spread is not None and spread.sd > 0:
        k = len(runs)
        df = spread.df if spread.cases > 1 else max(k - 1, 1)
        t = float(scipy_stats.t.ppf(0.5 + rules.confidence / 2, df))
        extra = t * spread.sd * math.sqrt(1 + 1 / k)
        seen = (f"of a run's mean, moderated by {spread.cases} cases' kept runs"
                if spread.cases > 1 else f"of {k} kept runs' means")
        widened = f", widened by {extra * 100:.1f} % for the spread {seen}"
    return budget_rule(
        rule, rules, b, c, statistic="mean", n_baseline=nb, n_current=nc,
        tolerance=rules.budget("output_throughput"),
        why=(f"{len(base.trials)} baseline and {nc} current trial{'s' if nc != 1 else ''} per "
             f"run, fewer than {rules.min_trials}{widened}"),
        advice=f"record ≥ {rules.min_trials} trials (--perf-repeats) to tell", spread=extra,
    )


_SUMMARY = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}


def summary_budget(base: CaseResult, cur: CaseResult, key: str, rule: MetricRule,
                    rules: CompareRules) -> Comparison | None:
    """A latency with no request samples on one side (e.g. a baseline from a published
    table: means only): the case summaries compared by the budget rule, medians when both
    sides have one, else means. None when a side has neither."""
    bs: Summary = getattr(base, _SUMMARY[key])
    cs: Summary = getattr(cur, _SUMMARY[key])
    statistic: Literal["median", "mean"]
    if bs.median is not None and cs.median is not None:
        statistic, b, c = "median", bs.median, cs.median
    elif bs.mean is not None and cs.mean is not None:
        statistic, b, c = "mean", bs.mean, cs.mean
    else:
        return None
    empty = "the baseline" if not bs.n else "the run"
    return budget_rule(
        rule, rules, b, c, statistic=statistic, n_baseline=bs.n, n_current=cs.n,
        tolerance=rules.budget(key),  # type: ignore[arg-type]
        why=f"{empty} has no request samples (only summary figures)",
        advice="record a baseline with samples (--perf-update-baselines) to tell",
    )
