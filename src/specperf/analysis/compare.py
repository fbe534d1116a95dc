"""Compare a run against a baseline: per case present in both, per metric, with
:mod:`specperf.analysis.stats`.

``compare_runs(run, baseline)`` returns a :class:`RunComparison`; every renderer (console,
markdown, HTML) views that object, and ``RunComparison.exit_code`` is what
``specperf compare`` exits with: 0 no regression, 1 regression, 2 refused (bad input).
Either side may be a :class:`~specperf.schemas.RunResult` or a
:class:`~specperf.schemas.Baseline` (a baseline is a run that was kept).

What this module decides, each explained once in docs/statistics.md:

* which samples a metric is compared on: one value per trial with ``min_trials`` a side,
  else pooled requests (latency) or the budget rule (throughput; latency without
  samples), and acceptance from the counters with an absolute tolerance;
* which kept runs join the baseline (:mod:`specperf.analysis.samples` chooses them) and
  the between-run spread that widens the interval;
* a timing REGRESSION of a spec config that the machine's own slowdown explains, as the
  no-spec trials measured beside it show (:func:`reference_for`), is INCONCLUSIVE;
* a case measured on more than one server start (fresh-server confirmation) is decided
  by :func:`replicated`; :func:`flagged_metrics` names what a fresh start can confirm and
  :func:`inconclusive_metrics` what more trials can decide (the engine's trial plan,
  :mod:`specperf.engine.trial_plan`, acts on both);
* notes (outside load, rules that differ from the defaults, what the trials can catch)
  and refusals: another hardware id, profile hash or prompts hash refuses the whole run,
  a changed server config its cases; ``force=True`` turns refusals into notes.

The rules are :class:`~specperf.config.rules.CompareRules` (re-exported here); the run
records the rules it was judged with (``RunResult.compare_rules``), which
``compare_runs`` uses when it is given none.

It is one module past 600 lines because everything left in it is a step of that one
decision per case and metric, read in the order ``compare_runs`` and ``compare_cases``
take them; what other modules read on its own (a case's samples, the kept runs) is in
:mod:`specperf.analysis.samples`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats as scipy_stats

from specperf.analysis.attribution import Attribution, attribute, same_pin
from specperf.analysis.gain import gain_vs_baseline, gain_vs_floor
from specperf.analysis.outside_load import busy_reason, comparison_note
from specperf.analysis.sample_size import cv, detectable_shift, pooled_cv, trials_for_shift
from specperf.analysis.samples import (
    by_start,
    earlier_pairs,
    earlier_runs,
    kept_runs,
    per_request,
    per_trial,
)
from specperf.analysis.spread import KeptSpreads, Spread, kept_spreads, own_spread, spread_args
from specperf.analysis.stats import (
    Comparison,
    Direction,
    Verdict,
    compare_rate,
    compare_samples,
    replicated,
)
from specperf.analysis.verdict import TIMING_METRIC_KEYS, exit_status, outcome_of
from specperf.config.rules import RELATIVE_TPOT
from specperf.schemas import (
    DEFAULT_BUDGETS,
    Acceptance,
    Baseline,
    Case,
    CaseResult,
    CompareRules,
    MetricKey,
    MetricRule,
    Outcome,
    Provenance,
    RunResult,
    Summary,
    Unknowable,
    recorded_rules,
)

__all__ = [
    "DEFAULT_BUDGETS",
    "BesideReference",
    "CaseComparison",
    "CompareRules",
    "MetricDetail",
    "MetricKey",
    "MetricRule",
    "RunComparison",
    "VERDICT_ORDER",
    "as_run",
    "compare_cases",
    "compare_runs",
    "flagged_metrics",
    "inconclusive_metrics",
    "reference_change",
    "reference_for",
    "replicated",
]

#: How renderers order verdicts: the ones that need a human first.
VERDICT_ORDER = {
    Verdict.REGRESSION: 0,
    Verdict.IMPROVEMENT: 1,
    Verdict.INCONCLUSIVE: 2,
    Verdict.UNCHANGED: 3,
}

RECORD_HINT = (
    "record a new baseline on this machine with `nox -s perf -- --perf-profile {profile} "
    "--perf-update-baselines` (it writes baselines/{profile}/{hardware_id}.json), or compare "
    "against a baseline recorded with the same profile on the same hardware"
)

SampleKind = Literal["trials", "requests", "trial_means", "summary", "counters"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class MetricDetail(_Model):
    """What a Comparison alone does not say: unit, sample kind and spread."""

    key: MetricKey | Literal["tpot_gain"]
    unit: str
    samples: SampleKind = Field(description="what one sample was")
    baseline_spread: float | None = Field(
        None, description="robust CV (1.4826 MAD / median) of the baseline samples"
    )
    current_spread: float | None = None
    baseline_runs: int = Field(1, description="kept baseline runs whose trials were pooled")
    current_server_starts: int = Field(
        1, description="server starts the current trials came from (2 after a fresh-server "
                       "confirmation)")
    between_run_spread: float | None = Field(
        None, description="server-lifetime noise (log-scale SD) seen over those runs and "
                          "included in the interval; None with one run")
    between_run_df: float | None = Field(
        None, description="the degrees of freedom between_run_spread was estimated with "
                          "(Student's t of the widening)")
    between_run_cases: int | None = Field(
        None, description="how many cases' kept runs moderated between_run_spread "
                          "(analysis.spread); 1: this case's own alone")
    detectable: float | None = Field(
        None, description="relative shift these samples catch with 90 % power at the "
                          "rules' alpha (sample_size.detectable_shift); None without trials")
    trials_needed: int | None = Field(
        None, description="current-run trials that would catch the metric's minimum effect "
                          "(sample_size.trials_for_shift); None when trials alone cannot")
    note: str | None = None


class CaseComparison(_Model):
    case: Case
    config_label: str
    method: str | None = None
    draft_model: str | None = None
    num_speculative_tokens: int | None = None
    baseline_trials: int = 0
    current_trials: int = 0
    comparisons: list[Comparison] = Field(default_factory=list)
    details: dict[str, MetricDetail] = Field(
        default_factory=dict, description="by Comparison.metric"
    )
    notes: list[str] = Field(default_factory=list)
    busy: str | None = Field(
        None, description="why this case's timing checks were not measured (\"machine busy "
                          "(0.6 cores from other processes)\"); None: measured on a quiet machine")

    def outcome(self, comparison: Comparison) -> Outcome:
        """The check outcome of one of this case's comparisons (specperf.analysis.verdict)."""
        detail = self.detail(comparison)
        timing = detail is None or detail.key in TIMING_METRIC_KEYS
        return outcome_of(comparison, busy=self.busy is not None and timing)

    @property
    def worst(self) -> Verdict | None:
        if not self.comparisons:
            return None
        return min((c.verdict for c in self.comparisons), key=VERDICT_ORDER.__getitem__)

    def detail(self, comparison: Comparison) -> MetricDetail | None:
        return self.details.get(comparison.metric)


class RunComparison(_Model):
    kind: Literal["specperf-comparison"] = "specperf-comparison"
    run_label: str | None = Field(None, description="where the run came from, e.g. its path")
    baseline_label: str | None = None
    run_provenance: Provenance
    baseline_provenance: Provenance
    rules: CompareRules = Field(default_factory=CompareRules)
    cases: list[CaseComparison] = Field(default_factory=list)
    refusals: list[str] = Field(default_factory=list, description="why it cannot be compared")
    notes: list[str] = Field(default_factory=list)
    only_in_run: list[Case] = Field(default_factory=list)
    only_in_baseline: list[Case] = Field(default_factory=list)
    attributions: list[Attribution] = Field(
        default_factory=list,
        description="per spec case with a pinned-acceptance twin: its TPOT change split "
                    "into acceptance and step cost (docs/attribution.md); "
                    "diagnosis only, no check reads it")

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    def all(self) -> list[tuple[CaseComparison, Comparison]]:
        return [(c, m) for c in self.cases for m in c.comparisons]

    def counts(self) -> dict[Verdict, int]:
        n = Counter(m.verdict for _, m in self.all())
        return {v: n.get(v, 0) for v in VERDICT_ORDER}

    @property
    def regressions(self) -> list[tuple[CaseComparison, Comparison]]:
        """The comparisons whose check FAILS (a REGRESSION measured on a quiet machine)."""
        return [(c, m) for c, m in self.all() if c.outcome(m) == "fail"]

    def outcomes(self) -> list[Outcome]:
        """Every comparison's check outcome, as the pytest run decides it."""
        return [c.outcome(m) for c, m in self.all()]

    @property
    def exit_code(self) -> int:
        """0 passed, 1 a check failed, 2 refused, 6 inconclusive, 7 machine busy
        (specperf.analysis.verdict)."""
        if self.refusals:
            return 2
        return exit_status(self.outcomes())

    def summary_line(self) -> str:
        """'3 cases: 1 regression, 0 improvements, 2 inconclusive, 14 unchanged'."""
        if self.refusals:
            return (f"comparison refused ({len(self.refusals)} problem"
                    f"{'s' if len(self.refusals) != 1 else ''}): nothing was compared")
        n = self.counts()
        reg = n[Verdict.REGRESSION]
        imp = n[Verdict.IMPROVEMENT]
        busy = sum(1 for c in self.cases if c.busy)
        return (
            f"{len(self.cases)} case{'s' if len(self.cases) != 1 else ''}: "
            f"{reg} regression{'s' if reg != 1 else ''}, "
            f"{imp} improvement{'s' if imp != 1 else ''}, "
            f"{n[Verdict.INCONCLUSIVE]} inconclusive, {n[Verdict.UNCHANGED]} unchanged"
            + (f"; {busy} case{'s' if busy != 1 else ''} not measured: machine busy"
               if busy else "")
        )


# --------------------------------------------------------------------------- loading


def as_run(result: RunResult | Baseline, source: Path | str | None = None) -> RunResult:
    """A baseline viewed as a run (for renderers that take a RunResult)."""
    if isinstance(result, RunResult):
        return result
    where = Path(source).parent if source is not None else Path(".")
    return RunResult(
        provenance=result.provenance,
        run_dir=str(where),
        started_at=result.provenance.date,
        cases=result.cases,
        baseline_note=f"a baseline shown as a run{f' ({source})' if source else ''}",
    )


def _spread(values: list[float]) -> float | None:
    finite = [v for v in values if not math.isnan(v)]
    if len(finite) < 2:
        return None
    try:
        return cv(finite)
    except ValueError:
        return None


# --------------------------------------------------------------------------- comparing


def _budget(rule: MetricRule, rules: CompareRules, b: float, c: float, *,
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


def _throughput_budget(runs: Sequence[CaseResult], cur: CaseResult, rule: MetricRule,
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
    return _budget(
        rule, rules, b, c, statistic="mean", n_baseline=nb, n_current=nc,
        tolerance=rules.budget("output_throughput"),
        why=(f"{len(base.trials)} baseline and {nc} current trial{'s' if nc != 1 else ''} per "
             f"run, fewer than {rules.min_trials}{widened}"),
        advice=f"record ≥ {rules.min_trials} trials (--perf-repeats) to tell", spread=extra,
    )


_SUMMARY = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}


def _summary_budget(base: CaseResult, cur: CaseResult, key: str, rule: MetricRule,
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
    return _budget(
        rule, rules, b, c, statistic=statistic, n_baseline=bs.n, n_current=cs.n,
        tolerance=rules.budget(key),  # type: ignore[arg-type]
        why=f"{empty} has no request samples (only summary figures)",
        advice="record a baseline with samples (--perf-update-baselines) to tell",
    )


def compare_cases(base: CaseResult | None, cur: CaseResult,
                  rules: CompareRules | None = None,
                  earlier: Sequence[CaseResult] = (), *,
                  paired: CaseResult | None = None,
                  base_paired: CaseResult | None = None,
                  gain_floor: float | None = None,
                  earlier_paired: Sequence[tuple[CaseResult, CaseResult]] = (),
                  labels: tuple[str, str] = ("the baseline", "the run"),
                  spreads: KeptSpreads | None = None,
                  reference: BesideReference | None = None,
                  ) -> CaseComparison:
    """Every enabled metric of one case, baseline against current, and its paired TPOT
    gain (:mod:`specperf.analysis.gain`) when the run has one: against ``gain_floor``, and
    against the baseline's gain when ``base_paired`` is given. ``base`` None: the gain alone
    (a case without a baseline).

    ``earlier``: the same case in other kept runs of the baseline (same hardware, profile
    and server config; see :func:`compare_runs`). With per-trial samples their trials are
    pooled with the baseline's, and the spread of the runs' centres beyond their trial
    noise (:func:`specperf.analysis.stats.between_run_spread`) widens the interval: a server
    restart shifts every trial of a run together, which one run's trials cannot show.
    ``spreads``: that spread moderated by the baseline's other cases
    (:func:`specperf.analysis.spread.kept_spreads`, what :func:`compare_runs` passes);
    without it, each case's own kept runs estimate it.

    ``labels``: how the notes name the two sides (e.g. "the baseline (vLLM 0.26.0)") when
    a figure is not comparable because one side's metric generation cannot tell it.

    ``reference``: the no-spec trials measured beside this case's server config, in the
    baseline and in the run (:func:`reference_for`); a timing REGRESSION that the machine's
    own slowdown, seen on them, can explain is INCONCLUSIVE (:func:`_beside_reference`).
    """
    rules = rules or CompareRules()
    spreads = spreads or KeptSpreads()
    out = CaseComparison(
        case=cur.case,
        config_label=cur.config_label,
        method=cur.method,
        draft_model=cur.draft_model,
        num_speculative_tokens=cur.num_speculative_tokens,
        baseline_trials=len(base.trials) if base is not None else 0,
        current_trials=len(cur.trials),
        busy=busy_reason(cur.trials, paired.trials if paired is not None else ()),
    )

    def add(comparison: Comparison, detail: MetricDetail) -> None:
        out.comparisons.append(comparison)
        out.details[comparison.metric] = detail

    if paired is not None and gain_floor is not None and rules.rule("tpot").enabled:
        comparison, kind = gain_vs_floor(cur, paired, gain_floor, rules)
        add(comparison, MetricDetail(key="tpot_gain", unit="×", samples=kind,  # type: ignore[arg-type]
                                     note=f"paired with {len(paired.trials)} no-spec trials of "
                                          "the same run; baseline column = the floor"))
        if base_paired is not None and base is not None and rules.rule(RELATIVE_TPOT).enabled:
            comparison, kind = gain_vs_baseline(cur, paired, base, base_paired, rules,
                                                earlier_paired, spreads)
            add(comparison, MetricDetail(key=RELATIVE_TPOT, unit="", samples=kind,
                                         note="spec TPOT / the same run's no-spec TPOT "
                                              "(1 / gain), against the baseline's"))
    if base is not None:
        _against_baseline(out, add, base, cur, rules, earlier, labels, spreads)
        if reference is not None:
            _beside_reference(out, reference, rules)
    _not_measured_again(out, cur)
    return out


def _against_baseline(out: CaseComparison, add: Callable[[Comparison, MetricDetail], None],
                      base: CaseResult, cur: CaseResult, rules: CompareRules,
                      earlier: Sequence[CaseResult],
                      labels: tuple[str, str] = ("the baseline", "the run"),
                      spreads: KeptSpreads | None = None) -> None:
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
            budget = _summary_budget(base, cur, key, rule, rules)
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
            budget = _throughput_budget(runs, cur, rule, rules, spreads)
            if len(starts) > 1:
                budget = replicated(budget, [_throughput_budget(runs, one, rule, rules, spreads)
                                             for one in starts])
            add(budget,
                MetricDetail(key="output_throughput", unit=rule.unit, samples="trial_means",
                             baseline_spread=_spread(b), current_spread=_spread(c),
                             note=f"budget rule (±{rules.budget('output_throughput') * 100:g}"
                                  " %), no interval: too few trials"))

    rule = rules.rule("acceptance_rate")
    if rule.enabled:
        _compare_acceptance(base, cur, rule, rules, out, add, labels)
    if cur.confirmation is not None:
        out.notes.append(f"current run: {cur.confirmation.summary_line()}")
    # A run with no trials is published means (a provisional baseline): it measured
    # nothing on this hardware, so it counts as no kept run here — a timing change against
    # it alone stays INCONCLUSIVE and cannot fail a first nightly (which would then never
    # become a kept run: docs/baselines.md, the nightly lifecycle).
    measured = sum(1 for r in runs if r.trials)
    if measured < max(rules.min_baseline_runs, 1):
        _unproven_timing(out, measured, rules)
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
    case measured on more than one server start is decided by :func:`replicated`."""
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


#: What each figure needs from a metric generation (Acceptance.missing), and its name.
_FIGURE_NEEDS: tuple[tuple[str, str, Unknowable], ...] = (
    ("acceptance rate", "per-case counts of draft and accepted tokens", "counts"),
    ("per-position acceptance", "per-position counter", "per_position"),
    ("per-position acceptance", "drafts counter", "drafts"),
    ("mean acceptance length", "drafts counter", "drafts"),
)


def not_comparable(ba: Acceptance, ca: Acceptance,
                   labels: tuple[str, str] = ("the baseline", "the run")) -> dict[str, str]:
    """Figure → "not comparable: FIGURE, because SIDE has no Y" for each acceptance figure
    one side's metric generation cannot tell (Acceptance.missing); empty when both tell
    everything. A figure is named once, for the first reason that applies."""
    out: dict[str, str] = {}
    for figure, what, need in _FIGURE_NEEDS:
        if figure in out:
            continue
        sides = [(label, acc.generation) for label, acc in zip(labels, (ba, ca), strict=True)
                 if need in acc.missing]
        if sides:
            who = " and ".join(label for label, _ in sides)
            gens = "/".join(sorted({gen for _, gen in sides}))
            out[figure] = (f"not comparable: {figure}, because {who} "
                           f"{'has' if len(sides) == 1 else 'have'} no {what} ({gens} metrics)")
    return out


def _compare_acceptance(base: CaseResult, cur: CaseResult, rule: MetricRule,
                        rules: CompareRules, out: CaseComparison, add,  # type: ignore[no-untyped-def]
                        labels: tuple[str, str] = ("the baseline", "the run")) -> None:
    ba, ca = base.acceptance, cur.acceptance
    if ba is None and ca is None:
        return
    if ba is None or ca is None:
        which = "current run" if ba is None else "baseline"
        out.notes.append(f"acceptance was measured only in the {which}; not compared")
        return
    unknown = not_comparable(ba, ca, labels)
    out.notes.extend(unknown.values())
    if "acceptance rate" in unknown:
        return
    if ba.rate is None or ca.rate is None:
        which = "baseline" if ba.rate is None else "current run"
        out.notes.append(f"no draft tokens were proposed in the {which}; acceptance not compared")
        return

    def detail(note: str | None = None) -> MetricDetail:
        return MetricDetail(key="acceptance_rate", unit=rule.unit, samples="counters", note=note)

    def rate(metric: str, b: float, c: float) -> Comparison:
        judged = compare_rate(metric, b, c, tolerance=rule.min_effect, direction=rule.direction)
        if rules.acceptance_exact:
            return judged
        # Sampled at temperature > 0: the counters of one server start are not the
        # release's (they moved 0 → 82 of ~600 between two starts), so neither a
        # difference nor an equality is evidence.
        return _held(judged, "; not decided: sampled at temperature > 0, acceptance varies "
                             "between server starts (judged exactly at temperature 0 only).")

    add(rate(rule.name, ba.rate, ca.rate),
        detail(f"{ba.accepted_tokens:g}/{ba.draft_tokens:g} → "
               f"{ca.accepted_tokens:g}/{ca.draft_tokens:g} draft tokens accepted"))
    if not rules.per_position or "per-position acceptance" in unknown:
        return
    bp, cp = ba.per_position_rate, ca.per_position_rate
    for i, (b, c) in enumerate(zip(bp, cp, strict=False)):
        add(rate(f"{rule.name}[pos {i}]", b, c), detail())
    if len(bp) != len(cp):
        out.notes.append(f"the baseline has acceptance counters for {len(bp)} draft positions, "
                         f"the run for {len(cp)}; compared the first {min(len(bp), len(cp))}")


def _held(m: Comparison, why: str) -> Comparison:
    """``m`` as INCONCLUSIVE, its reason extended by ``why`` (which starts with "; "):
    the figures stand as measured, only the verdict waits for what ``why`` says is missing."""
    return m.model_copy(update={"verdict": Verdict.INCONCLUSIVE,
                                "reason": m.reason.rstrip(".") + why})


def _hold_timing_regressions(out: CaseComparison, why: str, *,
                             skip: tuple[str, ...] = ()) -> None:
    """Every timing REGRESSION of ``out`` (not the exact acceptance counters, nor the
    metrics in ``skip``) made INCONCLUSIVE with ``why``, in place."""
    for i, m in enumerate(out.comparisons):
        detail = out.detail(m)
        if (m.verdict is not Verdict.REGRESSION or detail is None
                or detail.samples == "counters" or detail.key in skip):
            continue
        out.comparisons[i] = _held(m, why)


def _not_measured_again(out: CaseComparison, cur: CaseResult) -> None:
    """A timing REGRESSION of a case flagged on its first server start whose fresh start
    was never measured (the server did not start again, the run was interrupted before it,
    or nothing came after the matrix to measure it: ``confirmation.note`` says which) is
    INCONCLUSIVE: ruling out one start's own offset is what the fresh start is for
    (:func:`specperf.analysis.stats.replicated`), and it did not happen. The first start's
    figures stand as measured; only the verdict waits. Acceptance counters need no second
    start."""
    confirmation = cur.confirmation
    if confirmation is None or confirmation.note is None:
        return
    _hold_timing_regressions(
        out, f"; flagged on the first server start, {confirmation.note.rstrip('.')}.")


def _unproven_timing(out: CaseComparison, n_runs: int, rules: CompareRules) -> None:
    """A timing REGRESSION against a baseline of fewer than ``min_baseline_runs`` kept runs
    is INCONCLUSIVE: how far a whole run moves on its own (its servers' starts, the
    machine's speed that hour; measured: docs/validation.md) cannot be told from one run,
    and a fresh-server confirmation re-measures only the current side. The gain against
    its floor is judged within the run, so it is not held."""
    _hold_timing_regressions(
        out, f"; but the baseline holds {n_runs} measured run"
        f"{'s' if n_runs != 1 else ''}, fewer than the {max(rules.min_baseline_runs, 1)} "
        "(min_baseline_runs) a timing change needs to tell itself from one run's own "
        "offset — keep more runs with --perf-update-baselines.", skip=("tpot_gain",))


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


def _beside_reference(out: CaseComparison, ref: BesideReference, rules: CompareRules) -> None:
    """A timing REGRESSION (latency, throughput) measured while the machine itself ran
    decidedly slower — the no-spec reference beside the config slowed, its interval
    wholly above 1 — stands only if it is still wholly beyond its limit once that
    slowdown is taken out at its largest (the regression's nearer bound over the
    reference's farther one); otherwise it is INCONCLUSIVE. One run cannot tell the
    machine's hour from vLLM's change; the checks taken within the run (the TPOT gain and
    TPOT vs no-spec) are not touched, and a vLLM that slowed no-spec itself still fails
    no-spec's own cases, which have no reference. Measured: docs/validation.md."""
    slowed = ref.change
    if (not math.isfinite(slowed.ci_low) or not math.isfinite(slowed.ci_high)
            or slowed.ci_low <= 1.0):
        return
    moved = (f"{(slowed.ratio - 1) * 100:+.0f} % TPOT ({rules.confidence * 100:g} % CI "
             f"{(slowed.ci_low - 1) * 100:+.0f} … {(slowed.ci_high - 1) * 100:+.0f} %)")
    explained = False
    for i, m in enumerate(out.comparisons):
        detail = out.detail(m)
        if (m.verdict is not Verdict.REGRESSION or detail is None
                or detail.key not in ("ttft", "tpot", "e2e", "output_throughput")):
            continue
        if m.direction is Direction.LOWER_IS_BETTER:
            near = m.ci_low if math.isfinite(m.ci_low) else m.ratio
            beyond = near / slowed.ci_high > 1.0 + m.min_effect
        else:  # throughput: a slower machine lowers it by the same factor
            near = m.ci_high if math.isfinite(m.ci_high) else m.ratio
            beyond = near * slowed.ci_high < 1.0 - m.min_effect
        if beyond:
            continue
        explained = True
        out.comparisons[i] = _held(
            m, f"; but the machine itself ran slower: the no-spec server measured beside "
            f"this config ({ref.case_id}'s paired trials) took {moved} against the same "
            "pairing in the baseline, and with that taken out the change is not wholly "
            "beyond the limit — a baseline kept in the same hour, or TPOT vs no-spec, "
            "tells the machine from vLLM.")
    if explained:
        out.notes.append(f"timings measured while the machine ran slower: the no-spec trials "
                         f"beside {ref.case_id} took {moved} against the baseline's")


def _provenance_refusals(run: Provenance, base: Provenance) -> list[str]:
    hint = RECORD_HINT.format(profile=run.profile_name, hardware_id=run.hardware_id)
    out = []
    if run.hardware_id != base.hardware_id:
        out.append(
            f"hardware differs: the baseline was measured on {base.hardware} (hardware_id "
            f"{base.hardware_id!r}), the run on {run.hardware} ({run.hardware_id!r}); latency "
            f"and throughput only compare on the same hardware — {hint}"
        )
    if run.profile_hash != base.profile_hash:
        names = (f"profile {run.profile_name!r}" if run.profile_name == base.profile_name
                 else f"profiles {base.profile_name!r} (baseline) and {run.profile_name!r} (run)")
        out.append(
            f"the profile differs: {names} hash to {base.profile_hash} (baseline) and "
            f"{run.profile_hash} (run), so the two measured different things (matrix, workload, "
            f"sampling or server arguments) — {hint}"
        )
    if run.prompts_hash and base.prompts_hash and run.prompts_hash != base.prompts_hash:
        out.append(
            f"the prompts differ: the baseline sent prompts hashing to {base.prompts_hash}, "
            f"the run {run.prompts_hash} (a changed dataset file, another --perf-dataset, or "
            f"synthetic prompts made differently) — {hint}"
        )
    return out


def _provenance_notes(run: Provenance, base: Provenance) -> list[str]:
    notes = []
    if run.vllm_version != base.vllm_version:
        notes.append(f"vLLM {base.vllm_version or '?'} (baseline) → "
                     f"{run.vllm_version or '?'} (run)")
    if run.torch_version != base.torch_version and run.torch_version and base.torch_version:
        notes.append(f"torch {base.torch_version} (baseline) → {run.torch_version} (run)")
    if run.driver_version != base.driver_version and run.driver_version and base.driver_version:
        notes.append(f"driver {base.driver_version} (baseline) → {run.driver_version} (run)")
    if base.provisional:
        notes.append(f"the baseline is provisional: {base.provisional}")
    if run.provisional:
        notes.append(f"the run is provisional: {run.provisional}")
    return notes


def compare_runs(
    run: RunResult | Baseline,
    baseline: RunResult | Baseline,
    rules: CompareRules | None = None,
    *,
    run_label: str | None = None,
    baseline_label: str | None = None,
    force: bool = False,
    history: Sequence[RunResult | Baseline] = (),
) -> RunComparison:
    """Compare every case present in both, after checking the provenance is comparable.

    ``history``: the baseline's kept earlier runs (:func:`specperf.store.baselines.load_history`,
    any order; a copy of the baseline itself is skipped). The newest ones of the same
    hardware id, profile hash and vLLM version, whose case has the same server config,
    join the baseline up to ``rules.baseline_runs`` runs per case (:func:`compare_cases`).

    ``rules`` default to the ones the run recorded (``RunResult.compare_rules``: its
    profile's ``[compare]`` table), so an offline ``specperf compare`` judges a run as
    the run itself did; a file without them (a baseline, an older run) gets the defaults.
    """
    if rules is None:
        rules = recorded_rules(run)
    rp, bp = run.provenance, baseline.provenance
    refusals = _provenance_refusals(rp, bp)
    notes = _provenance_notes(rp, bp)
    changed_rules = rules.changes()
    if changed_rules:
        notes.append("rules differ from the defaults: " + "; ".join(changed_rules))
    result = RunComparison(
        run_label=run_label, baseline_label=baseline_label, run_provenance=rp,
        baseline_provenance=bp, rules=rules, notes=notes,
    )
    base_cases = {c.case: c for c in baseline.cases}
    run_cases = {c.case: c for c in run.cases}
    result.only_in_run = [c for c in run_cases if c not in base_cases]
    result.only_in_baseline = [c for c in base_cases if c not in run_cases]
    if refusals and not force:
        result.refusals = refusals
        return result
    if refusals:
        result.notes[:0] = [f"compared despite: {r.split(' — ')[0]}" for r in refusals]

    labels = (f"the baseline (vLLM {bp.vllm_version or '?'})",
              f"the run (vLLM {rp.vllm_version or '?'})")
    per_request = False
    paired = run.paired_nospec if isinstance(run, RunResult) else {}
    floors = run.tpot_gain_floors if isinstance(run, RunResult) else {}
    base_paired = baseline.paired_nospec
    # From the baseline and its kept runs only: the run judging as it goes, this
    # comparison and a shard's give each case the same spread.
    spreads = kept_spreads(baseline, history, rules)
    # One per server config: its cases share the no-spec trials measured beside them.
    references = {cid: reference_for(cid, base_paired, paired, rules)
                  for cid in {case.config_id for case in run_cases}}
    for case, cur in run_cases.items():
        base = base_cases.get(case)
        gain = dict(paired=paired.get(case.id), gain_floor=floors.get(case.id),
                    base_paired=base_paired.get(case.id) if base is not None else None)
        if base is None:
            if gain["paired"] is not None and gain["gain_floor"] is not None:
                # No baseline case, but the run's own paired gain is still judged.
                result.cases.append(compare_cases(None, cur, rules, spreads=spreads, **gain))  # type: ignore[arg-type]
            continue
        changed = []
        if base.config_hash and cur.config_hash and base.config_hash != cur.config_hash:
            changed.append(f"config hash {base.config_hash} → {cur.config_hash}")
        if base.method != cur.method:
            changed.append(f"speculative method {base.method} → {cur.method}")
        if base.num_speculative_tokens != cur.num_speculative_tokens:
            changed.append(f"k {base.num_speculative_tokens} → {cur.num_speculative_tokens}")
        if changed:
            msg = (f"case {case.id}: the server config changed between the baseline and the run "
                   f"({', '.join(changed)}), so its numbers do not compare — "
                   + RECORD_HINT.format(profile=rp.profile_name, hardware_id=rp.hardware_id))
            if not force:
                result.refusals.append(msg)
                continue
            result.notes.append(f"compared despite: {msg.split(' — ')[0]}")
        cc = compare_cases(base, cur, rules, earlier=earlier_runs(base, baseline, history),
                           earlier_paired=earlier_pairs(base, baseline, history),
                           labels=labels, spreads=spreads,
                           reference=references[case.config_id],
                           **gain)  # type: ignore[arg-type]
        if base.draft_model != cur.draft_model:
            cc.notes.append(f"draft model {base.draft_model} (baseline) → {cur.draft_model} (run)")
        per_request |= any(d.samples == "requests" for d in cc.details.values())
        result.cases.append(cc)
    if result.refusals:
        result.cases = []
        return result
    if isinstance(run, RunResult):
        result.attributions = _attributions(run, baseline, base_cases, rules, history)
    # A note that many cases share (e.g. "E2E not compared: the baseline has no E2E ...")
    # is said once for the run.
    shared = Counter(n for cc in result.cases for n in set(cc.notes))
    for note, count in shared.items():
        if count > 1:
            result.notes.append(f"{note} ({count} cases)")
    for cc in result.cases:
        cc.notes = [n for n in cc.notes if shared[n] <= 1]
    runs_used = Counter(d.baseline_runs for cc in result.cases for d in cc.details.values()
                        if d.samples == "trials")
    if runs_used:
        most = max(runs_used)
        if most > 1:
            result.notes.append(
                f"baseline: trials of up to {most} kept runs pooled (rule baseline_runs = "
                f"{rules.baseline_runs}); the intervals include the spread between them")
        elif rules.baseline_runs > 1:
            result.notes.append(
                "baseline: one run, so the intervals show trial-to-trial noise only, not the "
                "noise of a server restart — keep accepting runs into the baseline "
                "(--perf-update-baselines) until its history holds "
                f"{rules.baseline_runs} runs")
    blind = [(cc, d) for cc in result.cases for d in cc.details.values()
             if d.detectable is not None and d.detectable > rules.rule(d.key).min_effect]
    if blind:
        worst = max(blind, key=lambda x: x[1].detectable / rules.rule(x[1].key).min_effect)  # type: ignore[operator]
        cc, d = worst
        rule = rules.rule(d.key)
        need = (f"{d.trials_needed} trials per run would" if d.trials_needed
                else "no number of trials in one run would (the baseline's noise and the "
                     "between-run spread alone exceed it: keep more runs, or quieten the "
                     "machine)")
        result.notes.append(
            f"these repeats cannot see every minimum effect: {len(blind)} of "
            f"{sum(1 for _ in result.all())} metric×case comparisons catch (90 % power) only "
            f"shifts larger than their minimum effect — worst {cc.case.id} {rule.name}: "
            f"≥ {d.detectable * 100:.0f} % against a {rule.min_effect * 100:g} % minimum; "  # type: ignore[operator]
            f"{need}")
    moved = _machine_moved(result, rp, bp, rules)
    if moved:
        result.notes.append(moved)
    if per_request:
        result.notes.append(
            f"some cases have fewer than {rules.min_trials} trials per side: their latencies "
            "were compared per request, which understates run-to-run drift, and their "
            f"throughput against the ±{rules.budget('output_throughput') * 100:g} % budget; "
            f"record ≥ {rules.min_trials} trials (--perf-repeats) for a real interval"
        )
    if result.only_in_run:
        result.notes.append(f"{len(result.only_in_run)} case(s) only in the run, not compared: "
                            + _case_list(result.only_in_run))
    if result.only_in_baseline:
        result.notes.append(f"{len(result.only_in_baseline)} case(s) only in the baseline, not "
                            "compared: " + _case_list(result.only_in_baseline))
    if not any(cc.case in base_cases for cc in result.cases):
        # A gate that compared nothing must not pass quietly.
        result.refusals.append(
            "nothing to compare: no case is present in both the run "
            f"({len(run.cases)} cases) and the baseline ({len(baseline.cases)} cases) — "
            "check that the files are the ones you meant, or "
            + RECORD_HINT.format(profile=rp.profile_name, hardware_id=rp.hardware_id))
    return result


def _machine_moved(result: RunComparison, run: Provenance, base: Provenance,
                   rules: CompareRules) -> str | None:
    """A note when the no-spec cases' TPOT moved, decidedly, with nothing of the software
    changed (same vLLM and torch): no-spec runs no draft, so what moved it is the machine —
    a VM's host can run it tens of percent faster or slower from one day to the next (the
    EPYC VM of docs/validation.md ran cpu-tiny's no-spec at a 34 % lower TPOT on 2026-12-03
    than when its baseline was kept, hours before). The verdicts stay what the numbers say;
    the note tells the reader that this run's other absolute timing changes may be the
    machine's too, and which figures are not."""
    if run.vllm_version != base.vllm_version or run.torch_version != base.torch_version:
        return None  # an upgrade may move no-spec itself
    tpot = rules.rule("tpot").name
    moves = [(cc.case, c) for cc in result.cases if cc.method is None and not cc.busy
             for c in cc.comparisons if c.metric == tpot
             and c.verdict in (Verdict.IMPROVEMENT, Verdict.REGRESSION)]
    if not moves:
        return None
    moves.sort(key=lambda m: m[0].concurrency)
    shown = ", ".join(f"{(c.ratio - 1) * 100:+.0f} % at c{case.concurrency}" for case, c in moves)
    return (f"no-spec's {tpot} moved with the same vLLM {run.vllm_version or '?'} ({shown}, "
            "decided): no draft runs there, so this machine ran faster or slower than when "
            "the baseline was recorded, and the other absolute timing changes of this run "
            "may be the machine's too; TPOT vs no-spec and the TPOT gain, taken within the "
            "run, are not")


def _attributions(run: RunResult, baseline: RunResult | Baseline,
                  base_cases: dict[Case, CaseResult], rules: CompareRules,
                  history: Sequence[RunResult | Baseline]) -> list[Attribution]:
    """Each compared spec case with a pinned-acceptance twin, its TPOT change split."""
    out = []
    for cur in run.cases:
        pinned = run.pinned_acceptance.get(cur.case.id)
        base = base_cases.get(cur.case)
        if pinned is None or base is None:
            continue
        rates = run.pinned_rates.get(cur.case.config_id, [])
        out.append(attribute(base, cur, pinned, rules, rates,
                             earlier=earlier_runs(base, baseline, history),
                             base_twins=_kept_twins(base, rates, baseline, history)))
    return out


def _kept_twins(base: CaseResult, rates: Sequence[float], baseline: RunResult | Baseline,
                history: Sequence[RunResult | Baseline]) -> list[tuple[CaseResult, CaseResult]]:
    """(real, twin) of the baseline and its kept runs whose twin of this case was pinned to
    ``rates`` (same server config as the baseline case); newest first."""
    out = []
    for kept in [baseline, *kept_runs(baseline, history)]:
        case = kept.case(base.case)
        twin = kept.pinned_acceptance.get(base.case.id)
        kept_rates = kept.pinned_rates.get(base.case.config_id)
        if (case is None or twin is None or kept_rates is None
                or case.config_hash != base.config_hash or not same_pin(kept_rates, rates)):
            continue
        out.append((case, twin))
    return out


def _case_list(cases: list[Case], limit: int = 8) -> str:
    ids = [c.id for c in cases[:limit]]
    more = f" and {len(cases) - limit} more" if len(cases) > limit else ""
    return ", ".join(ids) + more


# --------------------------------------------------------------------------- retries


def inconclusive_metrics(cc: CaseComparison) -> list[str]:
    """The metrics of a case that more trials of this run can decide: INCONCLUSIVE on
    samples. A latency judged against a baseline's summary figures alone (no samples
    there, e.g. a provisional baseline) is left out: its band between the minimum effect
    and the budget does not narrow with trials on this side."""
    out: list[str] = []
    if cc.busy:
        # Its contended trials stay in the case: more would not make its timings count.
        return out
    for m in cc.comparisons:
        detail = cc.detail(m)
        if m.verdict is Verdict.INCONCLUSIVE and (detail is None or detail.samples
                                                  not in ("summary", "counters")):
            out.append(m.metric)
    return out


def flagged_metrics(cc: CaseComparison) -> list[str]:
    """The metrics of a case a fresh server start can confirm or clear: a REGRESSION
    measured in this run (trials or requests, the TPOT gain). Acceptance (counters,
    exactly repeatable) and comparisons against a baseline's summary figures are left out:
    another server start would not change them."""
    if cc.busy:
        # Not measured on a busy machine either way: a fresh start would not change that.
        return []
    return [m.metric for m in cc.comparisons
            if m.verdict is Verdict.REGRESSION
            and (d := cc.detail(m)) is not None and d.samples not in ("counters", "summary")]
