"""Compare a run against a baseline: per case present in both, per metric, with
:mod:`specperf.analysis.stats` — the comparison maths; which rule decides or holds each
verdict is :mod:`specperf.analysis.judge`.

``compare_runs(run, baseline)`` returns a :class:`RunComparison`; every renderer (console,
markdown, HTML) views that object, and what ``specperf compare`` exits with is
:func:`specperf.analysis.judge.exit_status.run_exit_status` of the run's checks and it
(the one exit table: :mod:`specperf.config.exits`).
Either side may be a :class:`~specperf.schemas.RunResult` or a
:class:`~specperf.schemas.Baseline` (a baseline is a run that was kept).

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
* refusals: another hardware id, profile hash or prompts hash refuses the whole run, a
  changed server config its cases; ``force=True`` turns refusals into notes
  (:mod:`specperf.analysis.judge.run_notes` holds them and the run's notes).

Then the hold rules (:data:`specperf.analysis.judge.HOLD_RULES`, in their order) may turn
a verdict INCONCLUSIVE and record which one did (``Comparison.held_by``).

The rules are :class:`~specperf.config.rules.CompareRules` (re-exported here); the run
records the rules it was judged with (``RunResult.compare_rules``), which
``compare_runs`` uses when it is given none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from specperf.analysis.acceptance import compare_acceptance, not_comparable
from specperf.analysis.attribution import Attribution, attribute, same_pin
from specperf.analysis.bracket import bracketed
from specperf.analysis.budget import summary_budget, throughput_budget
from specperf.analysis.gain import gain_drift, gain_vs_baseline, gain_vs_floor
from specperf.analysis.judge.evidence import Against, Evidence, side_labels
from specperf.analysis.judge.follow_up import flagged_metrics, inconclusive_metrics
from specperf.analysis.judge.fresh_start import replicated
from specperf.analysis.judge.machine_reference import (
    BesideReference,
    reference_change,
    reference_for,
)
from specperf.analysis.judge.models import (
    VERDICT_ORDER,
    CaseComparison,
    MetricDetail,
    RunComparison,
)
from specperf.analysis.judge.rules import HoldContext, apply_holds
from specperf.analysis.judge.run_notes import (
    RECORD_HINT,
    add_run_notes,
    provenance_notes,
    provenance_refusals,
)
from specperf.analysis.outside_load import busy_reason, comparison_note
from specperf.analysis.sample_size import cv, detectable_shift, pooled_cv, trials_for_shift
from specperf.analysis.samples import by_start, earlier_runs, kept_runs, per_request, per_trial
from specperf.analysis.spread import KeptSpreads, Spread, own_spread, spread_args
from specperf.analysis.stats import Comparison, compare_samples
from specperf.config.rules import DEFAULT_BUDGETS, RELATIVE_TPOT, CompareRules, MetricKey, MetricRule
from specperf.schemas import Baseline, Case, CaseResult, RunResult, recorded_rules

# The results' models, the reference and the follow-up questions live in the judge; they
# are re-exported here, where renderers and the engine have always found them.
__all__ = [
    "DEFAULT_BUDGETS",
    "VERDICT_ORDER",
    "BesideReference",
    "CaseComparison",
    "CompareRules",
    "MetricDetail",
    "MetricKey",
    "MetricRule",
    "RunComparison",
    "as_run",
    "compare_cases",
    "compare_runs",
    "flagged_metrics",
    "inconclusive_metrics",
    "judge_case",
    "not_comparable",
    "reference_change",
    "reference_for",
    "replicated",
]


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
    """:func:`judge_case` on evidence given piece by piece (each piece as
    :class:`~specperf.analysis.judge.Evidence` names it); ``base`` None: the gain alone."""
    return judge_case(Evidence(
        current=cur, baseline=base, earlier=earlier, paired=paired, base_paired=base_paired,
        earlier_paired=earlier_paired, gain_floor=gain_floor,
        spreads=spreads or KeptSpreads(), reference=reference, labels=labels,
    ), rules or CompareRules())


def judge_case(ev: Evidence, rules: CompareRules) -> CaseComparison:
    """Every enabled metric of one case, baseline against current, and its paired TPOT
    gain (:mod:`specperf.analysis.gain`) when the run has one: against the floor, and
    against the baseline's gain when the baseline has paired trials too; then the hold
    rules (:mod:`specperf.analysis.judge.rules`), in their order.

    The baseline's kept runs (``ev.earlier``: same hardware, profile and server config)
    are pooled with it: with per-trial samples the spread of the runs' centres beyond
    their trial noise (:func:`specperf.analysis.stats.between_run_spread`), moderated by
    the baseline's other cases (``ev.spreads``), widens the interval — a server restart
    shifts every trial of a run together, which one run's trials cannot show.
    ``ev.labels`` name the two sides in the notes when a figure is not comparable because
    one side's metric generation cannot tell it.
    """
    base, cur, paired = ev.baseline, ev.current, ev.paired
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

    if paired is not None and ev.gain_floor is not None and rules.rule("tpot").enabled:
        comparison, kind = gain_vs_floor(cur, paired, ev.gain_floor, rules)
        how = (f"bracketed by {len(paired.trials)} no-spec trials of the run's reference blocks"
               if bracketed(paired) else f"paired with {len(paired.trials)} no-spec trials")
        add(comparison, MetricDetail(key="tpot_gain", unit="×", samples=kind,  # type: ignore[arg-type]
                                     note=f"{how} of the same run; baseline column = the floor"))
        if (ev.base_paired is not None and base is not None
                and rules.rule(RELATIVE_TPOT).enabled):
            comparison, kind = gain_vs_baseline(cur, paired, base, ev.base_paired, rules,
                                                ev.earlier_paired, ev.spreads)
            add(comparison, MetricDetail(key=RELATIVE_TPOT, unit="", samples=kind,
                                         note="spec TPOT / the same run's no-spec TPOT "
                                              "(1 / gain), against the baseline's"))
    if base is not None:
        _against_baseline(out, add, base, cur, rules, ev.earlier, ev.labels, ev.spreads)
    apply_holds(out, HoldContext(
        rules=rules, current=cur, measured_baseline_runs=ev.measured_baseline_runs(rules),
        reference=ev.reference if base is not None else None,
        drift=gain_drift(cur, paired, rules) if ev.gain_floor is not None else None))
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
    hardware id, profile hash, vLLM version, prompts and model revisions
    (:func:`specperf.analysis.samples.kept_runs`), whose case has the same server config,
    join the baseline up to ``rules.baseline_runs`` runs per case (:func:`compare_cases`).

    ``rules`` default to the ones the run recorded (``RunResult.compare_rules``: its
    profile's ``[compare]`` table), so an offline ``specperf compare`` judges a run as
    the run itself did; a file without them (a baseline, an older run) gets the defaults.
    """
    if rules is None:
        rules = recorded_rules(run)
    rp, bp = run.provenance, baseline.provenance
    refusals = provenance_refusals(rp, bp)
    notes = provenance_notes(rp, bp)
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

    against = Against(baseline, history, rules,
                      labels=side_labels(bp.vllm_version, rp.vllm_version))
    per_request = False
    paired = run.paired_nospec if isinstance(run, RunResult) else {}
    floors = run.tpot_gain_floors if isinstance(run, RunResult) else {}
    # One per server config: its cases share the no-spec trials measured beside them.
    references = {cid: against.reference(cid, paired)
                  for cid in {case.config_id for case in run_cases}}
    for case, cur in run_cases.items():
        base = base_cases.get(case)
        gain = dict(paired=paired.get(case.id), gain_floor=floors.get(case.id))
        if base is None:
            if gain["paired"] is not None and gain["gain_floor"] is not None:
                # No baseline case, but the run's own paired gain is still judged.
                result.cases.append(judge_case(against.evidence(cur, base=None, **gain), rules))  # type: ignore[arg-type]
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
        cc = judge_case(against.evidence(cur, base=base, reference=references[case.config_id],
                                         **gain), rules)  # type: ignore[arg-type]
        if base.draft_model != cur.draft_model:
            cc.notes.append(f"draft model {base.draft_model} (baseline) → {cur.draft_model} (run)")
        per_request |= any(d.samples == "requests" for d in cc.details.values())
        result.cases.append(cc)
    if result.refusals:
        result.cases = []
        return result
    if isinstance(run, RunResult):
        result.attributions = _attributions(run, baseline, base_cases, rules, history)
    add_run_notes(result, rules, per_request=per_request)
    if not any(cc.case in base_cases for cc in result.cases):
        # A gate that compared nothing must not pass quietly.
        result.refusals.append(
            "nothing to compare: no case is present in both the run "
            f"({len(run.cases)} cases) and the baseline ({len(baseline.cases)} cases) — "
            "check that the files are the ones you meant, or "
            + RECORD_HINT.format(profile=rp.profile_name, hardware_id=rp.hardware_id))
    return result


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
        if (case is None or twin is None or kept_rates is None or (case, twin) in out
                or case.config_hash != base.config_hash or not same_pin(kept_rates, rates)):
            continue
        out.append((case, twin))
    return out


