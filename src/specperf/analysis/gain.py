"""The paired TPOT gain of a speculative case, judged by intervals (docs/statistics.md,
"The TPOT gain").

Two checks, both on the no-spec trials interleaved with the case's own in the same run
(specperf.engine.measurer), so both sides see the same drift:

* :func:`gain_vs_floor` — *portable*: the gain (no-spec median TPOT / spec median TPOT)
  must be significantly above a floor that holds on any hardware where speculation is
  meant to pay (1.0: "not slower"). PASS when the bootstrap interval of the gain lies
  wholly above the floor, FAIL when wholly below it, INCONCLUSIVE between.
* :func:`gain_vs_baseline` — *this hardware*: the gain may not drop by more than the
  minimum effect of ``[compare.metrics.tpot_vs_nospec]`` (unset: the TPOT rule's) against
  the gain kept in this hardware's baseline. Compared on the spec TPOT relative to the same
  run's no-spec TPOT ("TPOT vs no-spec" = 1 / gain), by
  :func:`specperf.analysis.stats.compare_samples`, like any latency.

Samples are per trial when both sides have ``min_trials`` trials, else per request
(which understates run-to-run drift; the reason says so). When the two sides ran
interleaved request by request (load.pairing = "requests"), the gain's interval resamples
them pair by pair, so the machine's speed, which moved both, cancels from it too. A case measured on more than
one server start (a fresh-server confirmation) is compared on every start
(:func:`specperf.analysis.judge.fresh_start.replicated`).

Under ``[load] reference = "bracket"`` the no-spec trials are not paired but the reference
blocks that bracket the config (:mod:`specperf.analysis.bracket`): the two sides are
resampled independently, the gain's interval is widened by half the drift between the
blocks, and each server start is judged against its own blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from specperf.analysis.bracket import (
    BlockDrift,
    blocks_of,
    bracketed,
    by_spec_start,
    pooled_level,
    starts_drift,
    widen,
)
from specperf.analysis.judge.fresh_start import replicated
from specperf.analysis.samples import (
    interleaved,
    paired_requests,
    per_request,
    per_trial,
    relative_tpot,
    starts_of,
)
from specperf.analysis.spread import KeptSpreads, own_spread, spread_args
from specperf.analysis.stats import (
    Comparison,
    Direction,
    Verdict,
    compare_samples,
    ratio_ci,
)
from specperf.config.rules import RELATIVE_TPOT, CompareRules
from specperf.schemas import CaseResult

__all__ = ["GAIN_METRIC", "RELATIVE_METRIC", "gain_drift", "gain_vs_baseline", "gain_vs_floor",
           "split_starts"]

GAIN_METRIC = "TPOT gain"
RELATIVE_METRIC = "TPOT vs no-spec"


def split_starts(spec: CaseResult, nospec: CaseResult) -> list[tuple[CaseResult, CaseResult]]:
    """The (spec, paired no-spec) trials of each server start of the spec case. A paired
    no-spec trial runs just before its spec trial, so the two lists align by position;
    bracketed, each start's blocks carry its start (analysis.bracket)."""
    if bracketed(nospec):
        return by_spec_start(spec, nospec)
    starts = starts_of(spec.trials)
    if len(set(starts)) < 2 or len(nospec.trials) != len(spec.trials):
        return [(spec, nospec)]
    out = []
    for start in sorted(set(starts)):
        idx = [i for i, s in enumerate(starts) if s == start]
        out.append((spec.model_copy(update={"trials": [spec.trials[i] for i in idx]}),
                    nospec.model_copy(update={"trials": [nospec.trials[i] for i in idx]})))
    return out


def _tpots(spec: CaseResult, nospec: CaseResult, rules: CompareRules
           ) -> tuple[list[float], list[float], str, bool]:
    """Spec and no-spec TPOTs, the kind of samples, and whether the i-th of each side ran
    beside the other (interleaved: trial i beside trial i, request i beside request i)."""
    paired = interleaved(spec, nospec)
    if bracketed(nospec):
        by_trial = _by_trial(spec, nospec, rules)
        pick = per_trial if by_trial else per_request
        return pick(spec, "tpot"), pick(nospec, "tpot"), "trials" if by_trial else "requests", False
    if min(len(spec.trials), len(nospec.trials)) >= rules.min_trials:
        return per_trial(spec, "tpot"), per_trial(nospec, "tpot"), "trials", paired
    if paired:
        return *paired_requests(spec, nospec, "tpot"), "requests", True
    return per_request(spec, "tpot"), per_request(nospec, "tpot"), "requests", False


def _by_trial(spec: CaseResult, nospec: CaseResult, rules: CompareRules) -> bool:
    """Bracketed: per trial when the spec case and each of its blocks have min_trials."""
    blocks = blocks_of(nospec)
    return bool(blocks) and min(len(spec.trials), *(len(b.trials) for b in blocks)) >= rules.min_trials


def gain_drift(spec: CaseResult, nospec: CaseResult | None,
               rules: CompareRules) -> BlockDrift | None:
    """The drift between the no-spec blocks bracketing the case (the widest of its
    starts'); None when its no-spec trials were measured beside it, not in blocks."""
    if nospec is None or not bracketed(nospec):
        return None
    return starts_drift(by_spec_start(spec, nospec), _by_trial(spec, nospec, rules))


def _finite(values: Sequence[float]) -> int:
    return sum(not math.isnan(v) for v in values)


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.median(finite)) if finite else math.nan


def _floor_once(spec: CaseResult, nospec: CaseResult, floor: float,
                rules: CompareRules) -> tuple[Comparison, str]:
    s, n, kind, paired = _tpots(spec, nospec, rules)
    gain = _median(n) / _median(s) if _median(s) > 0 else math.nan
    ci = ratio_ci(n, s, statistic="median", confidence=rules.confidence,
                  n_resamples=rules.n_resamples, seed=rules.seed, min_samples=5, paired=paired)
    drift = gain_drift(spec, nospec, rules)
    if ci is not None and drift is not None:
        ci = widen(ci, drift)
    pct = f"{rules.confidence * 100:g} %"
    if ci is None or not math.isfinite(gain):
        verdict = Verdict.INCONCLUSIVE
        lo = hi = math.nan
        reason = (f"{GAIN_METRIC} {gain:.2f}× from {_finite(s)} spec and {_finite(n)} no-spec "
                  f"{kind}: too few samples for an interval (5 a side)")
    else:
        lo, hi = ci
        how = f"{kind}, resampled pair by pair" if paired else kind
        if drift is not None:
            how = (f"{kind}, no-spec from the blocks bracketing the config ({drift.describe()}), "
                   "the interval widened by half that drift")
        head = (f"{GAIN_METRIC} {gain:.2f}× ({pct} CI {lo:.2f}–{hi:.2f}×; no-spec median TPOT "
                f"{_median(n):.2f} ms / spec {_median(s):.2f} ms, same run, {how})")
        if lo > floor:
            verdict, tail = Verdict.UNCHANGED, f"wholly above the floor {floor:g}×"
        elif hi < floor:
            verdict, tail = Verdict.REGRESSION, f"wholly BELOW the floor {floor:g}×"
        else:
            verdict, tail = Verdict.INCONCLUSIVE, (f"which crosses the floor {floor:g}×, so "
                                                   "it may or may not be below it; add trials")
        reason = f"{head}, {tail}"
        if kind == "requests":
            reason += (f"; samples are requests (fewer than {rules.min_trials} trials), so the "
                       "interval understates run-to-run drift")
    return Comparison(
        metric=GAIN_METRIC, direction=Direction.HIGHER_IS_BETTER, statistic="median",
        baseline=floor, current=gain, ratio=gain / floor if math.isfinite(gain) else math.nan,
        ci_low=lo / floor, ci_high=hi / floor, confidence=rules.confidence, p_value=None,
        alpha=rules.alpha, min_effect=0.0, n_baseline=_finite(s), n_current=_finite(n),
        verdict=verdict, reason=reason + ".",
    ), kind


def gain_vs_floor(spec: CaseResult, nospec: CaseResult, floor: float,
                  rules: CompareRules) -> tuple[Comparison, str]:
    """The gain against the floor, and the kind of samples ("trials" or "requests").
    ``Comparison.baseline`` is the floor, ``current`` the gain."""
    pooled, kind = _floor_once(spec, nospec, floor, rules)
    return _replicate(pooled, split_starts(spec, nospec),
                      lambda s, n: _floor_once(s, n, floor, rules)[0]), kind


def gain_vs_baseline(spec: CaseResult, nospec: CaseResult, base_spec: CaseResult,
                     base_nospec: CaseResult, rules: CompareRules,
                     earlier: Sequence[tuple[CaseResult, CaseResult]] = (),
                     spreads: KeptSpreads | None = None) -> tuple[Comparison, str]:
    """The case's TPOT relative to its paired no-spec, against the baseline's: a rise
    beyond the minimum effect of the TPOT-vs-no-spec rule is the gain dropping on this
    hardware.

    ``earlier``: the (spec, paired no-spec) of the baseline's kept runs, newest first. Their
    relative values join the baseline's and the spread of the runs' centres widens the
    interval (stats.compare_samples' between-run term): drift cancels within a run, but
    each run's spec server start has its own offset, which one run cannot show.
    ``spreads``: that spread moderated by the baseline's other cases
    (:mod:`specperf.analysis.spread`); without it, the case's own kept runs'."""
    rule = rules.rule(RELATIVE_TPOT)
    runs = [(base_spec, base_nospec), *earlier][: rules.baseline_runs]
    by_trial = min(len(spec.trials), len(nospec.trials),
                   *(min(len(s.trials), len(n.trials)) for s, n in runs)) >= rules.min_trials
    kind = "trials" if by_trial else "requests"
    base_runs = [_relative(s, n, by_trial) for s, n in runs]
    base = [v for values in base_runs for v in values]
    spread = (spreads or KeptSpreads()).for_case(
        RELATIVE_TPOT, kind, base_spec.case.id,
        own_spread(base_runs, statistic="median", kind=kind))

    def once(s: CaseResult, n: CaseResult, n_starts: int = 1) -> Comparison:
        args = spread_args(spread, len(base_runs))
        drift = gain_drift(s, n, rules)
        if drift is not None:
            # The no-spec level during the config is known to half the blocks' drift: one
            # more offset of the run's relative values, beside the kept runs' spread.
            args["between_run_sd"] = math.hypot(float(args["between_run_sd"] or 0.0),
                                                drift.half_log)
        c = compare_samples(RELATIVE_METRIC, base, _relative(s, n, by_trial),
                            direction=Direction.LOWER_IS_BETTER, min_effect=rule.min_effect,
                            alpha=rules.alpha, statistic="median", confidence=rules.confidence,
                            n_resamples=rules.n_resamples, seed=rules.seed,
                            current_runs=n_starts, **args)  # type: ignore[arg-type]
        gains = ""
        if c.baseline > 0 and c.current > 0:
            gains = f" (gain {1 / c.baseline:.2f}× in the baseline → {1 / c.current:.2f}×)"
        return c.model_copy(update={"reason": c.reason.rstrip(".") + gains + "."})

    pairs = split_starts(spec, nospec)
    return _replicate(once(spec, nospec, len(pairs)), pairs, once), kind


def _relative(spec: CaseResult, nospec: CaseResult, by_trial: bool) -> list[float]:
    """Spec TPOT / no-spec TPOT: against the paired trials (samples.relative_tpot), or,
    bracketed, against the pooled blocks' median (there are no pairs)."""
    if not bracketed(nospec):
        return relative_tpot(spec, nospec, by_trial)
    ref = pooled_level(nospec, by_trial)
    if not ref > 0:
        return []
    values = per_trial(spec, "tpot") if by_trial else per_request(spec, "tpot")
    return [v / ref for v in values if math.isfinite(v)]


def _replicate(pooled: Comparison, pairs: list[tuple[CaseResult, CaseResult]],
               judge: Callable[[CaseResult, CaseResult], Comparison]) -> Comparison:
    if len(pairs) < 2:
        return pooled
    return replicated(pooled, [judge(s, n) for s, n in pairs])
