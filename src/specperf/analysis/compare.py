"""The statistics of a comparison: one case's metrics, baseline against current, with
:mod:`specperf.analysis.stats`. Which evidence a case is judged on, which rule decides or
holds each verdict and how a run's cases are judged is :mod:`specperf.analysis.judge`
(:func:`~specperf.analysis.judge.case.judge_case`, which calls :func:`against_baseline`,
and :func:`~specperf.analysis.judge.run.compare_runs`).

What this module decides, each explained once in docs/statistics.md:

* which samples a metric is compared on: one value per trial with ``min_trials`` a side,
  else pooled requests (latency) or the budget rule (:mod:`specperf.analysis.budget`:
  throughput; latency without samples), and acceptance from the counters with an absolute
  tolerance (:mod:`specperf.analysis.acceptance`);
* the between-run spread of the kept runs that widens the interval (the kept runs
  themselves are gathered with the rest of a case's evidence:
  :class:`specperf.analysis.judge.Against`);
* a case measured on more than one server start (fresh-server confirmation) is compared
  start by start (:func:`specperf.analysis.judge.fresh_start.replicated`; the hold it
  gives is a rule);
* what the trials can catch (``MetricDetail.detectable`` / ``trials_needed``, at
  :data:`DETECT_POWER`).

The rules are :class:`~specperf.config.rules.CompareRules`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

from specperf.analysis.acceptance import compare_acceptance
from specperf.analysis.budget import summary_budget, throughput_budget
from specperf.analysis.judge.fresh_start import replicated
from specperf.analysis.judge.models import CaseComparison, MetricDetail
from specperf.analysis.outside_load import comparison_note
from specperf.analysis.sample_size import cv, detectable_shift, pooled_cv, trials_for_shift
from specperf.analysis.samples import by_start, per_request, per_trial
from specperf.analysis.spread import KeptSpreads, Spread, own_spread, spread_args
from specperf.analysis.stats import Comparison, compare_samples
from specperf.config.rules import CompareRules, MetricRule
from specperf.schemas import CaseResult

__all__ = ["DETECT_POWER", "against_baseline"]


def _spread(values: list[float]) -> float | None:
    finite = [v for v in values if not math.isnan(v)]
    if len(finite) < 2:
        return None
    try:
        return cv(finite)
    except ValueError:
        return None



def against_baseline(out: CaseComparison, add: Callable[[Comparison, MetricDetail], None],
                     base: CaseResult, cur: CaseResult, rules: CompareRules,
                     earlier: Sequence[CaseResult],
                     labels: tuple[str, str] = ("the baseline", "the run"),
                     spreads: KeptSpreads | None = None) -> None:
    """Each enabled metric of ``cur`` against ``base`` pooled with its kept runs
    (``earlier``, up to ``rules.baseline_runs``), handed to ``add`` with its
    detail; what cannot be compared goes to ``out.notes``. ``labels`` name the two sides
    when a figure is not comparable because one side's metric generation cannot tell it."""
    spreads = spreads or KeptSpreads()
    runs = [base, *earlier][: rules.baseline_runs]
    by_trial = min(len(base.trials), len(cur.trials)) >= rules.min_trials
    # More than one: a fresh-server confirmation, whose flags each start must show.
    starts = by_start(cur)

    for key in ("ttft", "tpot", "e2e"):
        rule = rules.rule(key)  # type: ignore[arg-type]
        if not rule.enabled:
            continue
        if by_trial:
            add(*_trial_comparison(runs, cur, key, rule, rules, spreads, fallback="median"))
            continue
        b, c = per_request(base, key), per_request(cur, key)
        if not b or not c:
            budget = summary_budget(base, cur, key, rule, rules)
            if budget is None:
                out.notes.append(f"{rule.name} not compared: "
                                 f"{'the baseline' if not b else 'the run'} has no {rule.name} "
                                 "samples or summary")
                continue
            add(budget, MetricDetail(key=key, unit=rule.unit, samples="summary",  # type: ignore[arg-type]
                                     note=f"budget rule (±{rules.budget(key) * 100:g} %), "  # type: ignore[arg-type]
                                          "no interval: no samples on one side"))
            continue
        # The kept runs' requests join the baseline's, and the spread of their centres
        # beyond their request noise widens the interval, as trials do below.
        statistic: Literal["median", "mean"] = "mean" if rule.statistic == "mean" else "median"
        base_runs = [per_request(run, key) for run in runs]
        b = [v for values in base_runs for v in values]
        spread = spreads.for_case(key, "requests", base.case.id,
                                  own_spread(base_runs, statistic=statistic, kind="requests"))
        between = spread.sd if spread is not None else None

        def on_requests(current: list[float], n_starts: int, rule: MetricRule = rule,
                        b: list[float] = b, spread: Spread | None = spread,
                        statistic: Literal["median", "mean"] = statistic) -> Comparison:
            return compare_samples(
                rule.name, b, current, direction=rule.direction, min_effect=rule.min_effect,
                alpha=rules.alpha, statistic=statistic,
                confidence=rules.confidence, n_resamples=rules.n_resamples, seed=rules.seed,
                current_runs=n_starts, **spread_args(spread, len(runs)),  # type: ignore[arg-type]
            )

        comparison = on_requests(c, len(starts))
        if len(starts) > 1:
            comparison = replicated(comparison, [on_requests(per_request(s, key), 1)
                                                 for s in starts])
        comparison = comparison.model_copy(update={
            "reason": comparison.reason.rstrip(".") + f"; samples are requests, not trials "
            f"(fewer than {rules.min_trials} trials per side)"
            + ("." if between else ", so the interval understates run-to-run drift.")
        })
        add(comparison, MetricDetail(
            key=key, unit=rule.unit, samples="requests",  # type: ignore[arg-type]
            baseline_spread=_spread(b), current_spread=_spread(c),
            # The kept runs' requests were pooled too: say how many runs, as trials do.
            baseline_runs=len(runs), current_server_starts=len(starts),
            between_run_spread=between, **_spread_source(spread),
            note=(f"per-request samples (fewer than {rules.min_trials} trials per side): the "
                  + ("interval is widened by the kept runs' spread between server starts"
                     if between else "interval understates run-to-run drift"))))

    rule = rules.rule("output_throughput")
    if rule.enabled:
        if by_trial:
            add(*_trial_comparison(runs, cur, "output_throughput", rule, rules, spreads,
                                   fallback="mean"))
        else:
            b = [t.output_throughput for t in base.trials]
            c = [t.output_throughput for t in cur.trials]
            budget = throughput_budget(runs, cur, rule, rules, spreads)
            if len(starts) > 1:
                budget = replicated(budget, [throughput_budget(runs, one, rule, rules, spreads)
                                             for one in starts])
            add(budget,
                MetricDetail(key="output_throughput", unit=rule.unit, samples="trial_means",
                             baseline_spread=_spread(b), current_spread=_spread(c),
                             note=f"budget rule (±{rules.budget('output_throughput') * 100:g}"
                                  " %), no interval: too few trials"))

    rule = rules.rule("acceptance_rate")
    if rule.enabled:
        compare_acceptance(base, cur, rule, rules, out, add, labels)
    if cur.confirmation is not None:
        out.notes.append(f"current run: {cur.confirmation.summary_line()}")
    # Said, never acted on: the verdicts stay what the numbers say (a contended kept trial
    # makes the timing checks BUSY: CaseComparison.busy).
    busy = comparison_note(base.trials, cur.trials)
    if busy:
        out.notes.append(busy)


#: The power the "catches ≥" figures are quoted at.
DETECT_POWER = 0.9

def _trial_comparison(runs: Sequence[CaseResult], cur: CaseResult, key: str,
                      rule: MetricRule, rules: CompareRules, spreads: KeptSpreads, *,
                      fallback: Literal["median", "mean"]) -> tuple[Comparison, MetricDetail]:
    """One metric on per-trial values: the kept baseline runs' trials pooled, the
    interval widened by the spread between those runs, and what these trials can catch
    (MetricDetail.detectable / trials_needed). Each run's values are computed once. A
    case measured on more than one server start is compared start by start
    (:func:`specperf.analysis.judge.fresh_start.replicated`)."""
    statistic: Literal["median", "mean"] = (
        rule.statistic if rule.statistic in ("median", "mean") else fallback)  # type: ignore[assignment]
    base_runs = [per_trial(run, key) for run in runs]
    b = [v for values in base_runs for v in values]
    c = per_trial(cur, key)
    spread = spreads.for_case(key, "trials", runs[0].case.id,
                              own_spread(base_runs, statistic=statistic, kind="trials"))
    between = spread.sd if spread is not None else None
    starts = [t.server_start or 0 for t in cur.trials]
    cur_runs = [[v for v, s in zip(c, starts, strict=True) if s == start]
                for start in sorted(set(starts))]

    def compare(current: list[float], current_runs: int) -> Comparison:
        return compare_samples(
            rule.name, b, current, direction=rule.direction, min_effect=rule.min_effect,
            alpha=rules.alpha, statistic=statistic,
            confidence=rules.confidence, n_resamples=rules.n_resamples, seed=rules.seed,
            current_runs=current_runs, **spread_args(spread, len(runs)),  # type: ignore[arg-type]
        )

    comparison = compare(c, len(cur_runs))
    if len(cur_runs) > 1:
        comparison = replicated(comparison, [compare(run, 1) for run in cur_runs])
    detail = MetricDetail(key=key, unit=rule.unit, samples="trials",  # type: ignore[arg-type]
                          baseline_spread=_spread(b), current_spread=_spread(c),
                          baseline_runs=len(runs), current_server_starts=len(cur_runs),
                          between_run_spread=between, **_spread_source(spread),
                          **_catchable(base_runs, c, rule, rules, spread))
    return comparison, detail


def _spread_source(spread: Spread | None) -> dict[str, float | int | None]:
    """MetricDetail's account of the between-run spread: its degrees of freedom and how
    many cases' kept runs it was pooled over (1: the case's own)."""
    if spread is None:
        return {}
    return {"between_run_df": spread.df, "between_run_cases": spread.cases}


def _catchable(base_runs: list[list[float]], current: list[float], rule: MetricRule,
               rules: CompareRules, spread: Spread | None) -> dict[str, float | int | None]:
    """What these trials can catch (MetricDetail.detectable / trials_needed)."""
    cur_vals = [v for v in current if not math.isnan(v)]
    try:
        cv_b = pooled_cv(base_runs)
        cv_c = cv(cur_vals)
    except ValueError:
        return {}
    n_base = sum(len(values) for values in base_runs)
    kw = dict(between_sd=spread.sd if spread is not None else 0.0,
              baseline_runs=len(base_runs), alpha=rules.alpha, power=DETECT_POWER,
              confidence=rules.confidence,
              spread_df=spread.df if spread is not None and spread.cases > 1 else None)
    return {
        "detectable": detectable_shift(cv_b, n_base, cv_c, len(cur_vals), **kw),  # type: ignore[arg-type]
        "trials_needed": (trials_for_shift(rule.min_effect, cv_b, n_base, cv_c, **kw)  # type: ignore[arg-type]
                          if rule.min_effect > 0 else None),
    }

