"""The statistics of the regression gate: pure functions and frozen result models.

:func:`compare_samples` judges one metric's samples with a two-sided Mann-Whitney U test
*and* a percentile-bootstrap CI of the ratio of centres against ``1 ± min_effect``,
widened by the between-run spread of the baseline's kept runs (Student's t); the answer
is REGRESSION, IMPROVEMENT, UNCHANGED or INCONCLUSIVE. :func:`compare_rate` holds
acceptance rates to an absolute tolerance. :func:`required_trials`,
:func:`detectable_shift` and :func:`simulated_power` say what a number of trials can see.

docs/statistics.md explains the verdict rule (its table, why the percentile bootstrap,
why a change below the minimum effect is never a REGRESSION); the comments here say why
the code is written the way it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import Enum
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats as scipy_stats

# Direction lives with the comparison rules (a profile and a run file name it without
# loading scipy); it is re-exported here, where the verdict rule uses it.
from specperf.schemas import Direction

__all__ = [
    "Comparison",
    "Direction",
    "Verdict",
    "between_run_spread",
    "compare_rate",
    "ratio_ci",
    "compare_samples",
    "cv",
    "detectable_shift",
    "min_detectable_effect",
    "required_trials",
    "simulated_power",
    "trials_for_shift",
    "widen_ci",
]

# Asymptotic relative efficiency of Mann-Whitney U against the t-test under normal noise:
# it needs pi/3 (about 1.05x) as many trials as the t-test to reach the same power.
MANN_WHITNEY_ARE = 3.0 / math.pi

# Consistency constant that makes the median absolute deviation estimate the standard
# deviation of normal noise.
_MAD_TO_SD = 1.482602218505602

# Slack for comparing rates with an absolute tolerance, relative to the rates' magnitude.
# 0.7 - 0.699 is 0.0010000000000000009 in binary floating point, so without it a change of
# exactly the tolerance would be called a regression. 1e-9 is far below the finest real
# step (one accepted token in a million is 1e-6) and far above double rounding (~1e-16).
_RATE_EPSILON = 1e-9

Statistic = Literal["median", "mean", "rate"]


class Verdict(str, Enum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"


class Comparison(BaseModel):
    """One metric, baseline against current, with the verdict and the evidence for it.

    Undefined numbers (the ratio when the baseline centre is 0, the CI when there are too
    few samples) are NaN; they serialise to JSON as the string "NaN" and load back.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")

    metric: str
    direction: Direction
    statistic: Statistic
    baseline: float = Field(description="centre of the baseline samples (median/mean/rate)")
    current: float = Field(description="centre of the current samples")
    ratio: float = Field(description="current / baseline")
    ci_low: float = Field(description="lower end of the confidence interval of the ratio")
    ci_high: float = Field(description="upper end of the confidence interval of the ratio")
    confidence: float = Field(gt=0.0, le=1.0)
    p_value: float | None = Field(
        default=None, ge=0.0, le=1.0, description="two-sided Mann-Whitney U; None if untested"
    )
    alpha: float = Field(ge=0.0, lt=1.0)
    min_effect: float = Field(
        ge=0.0, description="relative for samples; the absolute tolerance for rates"
    )
    n_baseline: int = Field(ge=0)
    n_current: int = Field(ge=0)
    verdict: Verdict
    reason: str

    @property
    def delta(self) -> float:
        """Relative change: +0.25 means the current centre is 25 % above the baseline."""
        return self.ratio - 1.0


# ---------------------------------------------------------------------------------------
# Sample comparison
# ---------------------------------------------------------------------------------------


def compare_samples(
    metric: str,
    baseline: Iterable[float],
    current: Iterable[float],
    *,
    direction: Direction,
    min_effect: float,
    alpha: float = 0.01,
    statistic: Literal["median", "mean"] = "median",
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    min_samples: int = 5,
    between_run_sd: float = 0.0,
    baseline_runs: int = 1,
    current_runs: int = 1,
) -> Comparison:
    """Compare per-run values of one metric (one value per trial) with the verdict rule.

    NaNs are dropped (and counted in the reason). Samples must be finite and non-negative:
    a ratio of centres means nothing for values that can change sign. Deterministic for a
    given ``seed``.

    ``between_run_sd`` (log scale, from :func:`between_run_spread` of the baseline's kept
    runs) is the server-lifetime noise the trials of one run cannot show: every trial of a
    run shares its run's offset. The bootstrap interval is widened by it, in log space,
    as ``t * between_run_sd * sqrt(1 + 1/baseline_runs)`` (the current run's own offset
    plus that of the mean of ``baseline_runs`` baseline runs), added in quadrature; ``t``
    is Student's quantile with ``baseline_runs - 1`` degrees of freedom, because the
    spread comes from that few run centres (the prediction interval of one more run).
    When the current side spans ``current_runs`` server starts (a flag measured again on
    a fresh server), their offsets average too: ``sqrt(1/current_runs + 1/baseline_runs)``.
    """
    if between_run_sd < 0 or not math.isfinite(between_run_sd):
        raise ValueError(f"between_run_sd must be finite and >= 0, got {between_run_sd}")
    if baseline_runs < 1 or current_runs < 1:
        raise ValueError(f"baseline_runs and current_runs must be >= 1, got {baseline_runs} "
                         f"and {current_runs}")
    if statistic not in ("median", "mean"):
        raise ValueError(f"statistic must be 'median' or 'mean', not {statistic!r}")
    if min_effect < 0:
        raise ValueError(f"min_effect must be >= 0, got {min_effect}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if min_samples < 2:
        # The bootstrap needs two values per side to resample anything.
        raise ValueError(f"min_samples must be >= 2, got {min_samples}")
    direction = Direction(direction)

    base, base_nans = _clean(baseline, "baseline")
    curr, curr_nans = _clean(current, "current")
    centre = np.median if statistic == "median" else np.mean
    dropped = _dropped_note(base_nans, curr_nans)

    def result(
        *,
        base_centre: float,
        curr_centre: float,
        ratio: float,
        ci: tuple[float, float],
        p_value: float | None,
        verdict: Verdict,
        reason: str,
    ) -> Comparison:
        return Comparison(
            metric=metric,
            direction=direction,
            statistic=statistic,
            baseline=base_centre,
            current=curr_centre,
            ratio=ratio,
            ci_low=ci[0],
            ci_high=ci[1],
            confidence=confidence,
            p_value=p_value,
            alpha=alpha,
            min_effect=min_effect,
            n_baseline=base.size,
            n_current=curr.size,
            verdict=verdict,
            reason=reason + dropped + ".",
        )

    base_centre = float(centre(base)) if base.size else math.nan
    curr_centre = float(centre(curr)) if curr.size else math.nan
    nan_ci = (math.nan, math.nan)

    if base.size < min_samples or curr.size < min_samples:
        return result(
            base_centre=base_centre,
            curr_centre=curr_centre,
            ratio=_safe_ratio(curr_centre, base_centre),
            ci=nan_ci,
            p_value=None,
            verdict=Verdict.INCONCLUSIVE,
            reason=(
                f"{metric} has {base.size} baseline and {curr.size} current samples, but a "
                f"verdict needs at least {min_samples} on each side"
            ),
        )

    combined = np.concatenate([base, curr])
    if np.all(combined == combined[0]):
        # Every run gave the same number: nothing changed, and no test is needed (any rank
        # test of exchangeable samples gives p = 1). Covers all-zero samples too.
        return result(
            base_centre=base_centre,
            curr_centre=curr_centre,
            ratio=1.0,
            ci=(1.0, 1.0),
            p_value=1.0,
            verdict=Verdict.UNCHANGED,
            reason=f"{metric}: every baseline and current sample equals {combined[0]:g}",
        )

    if base_centre == 0.0:
        return result(
            base_centre=base_centre,
            curr_centre=curr_centre,
            ratio=math.nan,
            ci=nan_ci,
            p_value=None,
            verdict=Verdict.INCONCLUSIVE,
            reason=f"{metric} baseline {statistic} is 0, so a relative change is undefined",
        )

    ratio = curr_centre / base_centre
    ci = _bootstrap_ratio_ci(
        base, curr, statistic=statistic, confidence=confidence, n_resamples=n_resamples, seed=seed
    )
    if between_run_sd > 0:
        # The spread was estimated from baseline_runs run centres: with 3 of them its
        # uncertainty is large, hence t with baseline_runs - 1 degrees of freedom (the
        # prediction interval of one more run's centre) rather than the normal quantile.
        df = baseline_runs - 1
        ci = widen_ci(ratio, ci,
                      between_run_sd * math.sqrt(1.0 / current_runs + 1.0 / baseline_runs),
                      confidence, df=df if df > 0 else None)
    p_value = float(scipy_stats.mannwhitneyu(base, curr, alternative="two-sided").pvalue)
    if math.isnan(p_value):
        p_value = 1.0  # only when there is no variation at all; handled above, kept as a guard
    verdict, why = _decide(ci, p_value, alpha=alpha, min_effect=min_effect, direction=direction)
    return result(
        base_centre=base_centre,
        curr_centre=curr_centre,
        ratio=ratio,
        ci=ci,
        p_value=p_value,
        verdict=verdict,
        reason=_sample_reason(
            metric, statistic, ratio, ci, confidence, p_value, alpha, min_effect, why
        ) + _between_note(between_run_sd, baseline_runs, current_runs),
    )


def _between_note(between_run_sd: float, baseline_runs: int, current_runs: int = 1) -> str:
    if between_run_sd <= 0:
        return ""
    starts = (f", averaged over this run's {current_runs} server starts" if current_runs > 1
              else "")
    return (f"; the interval includes a between-run spread of {between_run_sd * 100:.1f} % "
            f"seen over {baseline_runs} baseline run{'s' if baseline_runs != 1 else ''}{starts}")


def widen_ci(ratio: float, ci: tuple[float, float], extra_sd: float,
             confidence: float, df: int | None = None) -> tuple[float, float]:
    """``ci`` of ``ratio`` widened by a further independent log-normal error of ``extra_sd``
    (log scale): each end's log distance from the ratio and ``q * extra_sd`` add in
    quadrature, so a CI that was already wide barely moves and a narrow one grows. ``q``
    is the normal quantile, or Student's t with ``df`` degrees of freedom when
    ``extra_sd`` was estimated from ``df + 1`` values."""
    lo, hi = ci
    if not (math.isfinite(lo) and math.isfinite(hi)) or ratio <= 0 or lo <= 0:
        return ci
    q = 0.5 + confidence / 2.0
    z = float(scipy_stats.t.ppf(q, df) if df else scipy_stats.norm.ppf(q))
    extra = z * extra_sd
    down = math.log(ratio / lo) if lo < ratio else 0.0
    up = math.log(hi / ratio) if hi > ratio else 0.0
    return (ratio * math.exp(-math.hypot(down, extra)), ratio * math.exp(math.hypot(up, extra)))


def between_run_spread(runs: Iterable[Iterable[float]], *,
                       statistic: Literal["median", "mean"] = "median") -> float | None:
    """The server-lifetime noise of a metric, from several runs' trial values: the standard
    deviation (log scale, ~ relative) of the runs' centres beyond what their trials' own
    noise explains, floored at 0.

    The variance of run centres is the run effect's variance plus each centre's sampling
    variance (``s^2 / n`` for a mean, about ``pi/2 * s^2 / n`` for a median of normal
    noise); the latter is subtracted. ``None`` when fewer than 2 runs have 2 positive
    values (nothing to tell a run effect from)."""
    centre = np.median if statistic == "median" else np.mean
    factor = math.pi / 2.0 if statistic == "median" else 1.0
    centres, sampling = [], []
    for run in runs:
        values = np.asarray(list(run), dtype=np.float64).ravel()
        values = values[np.isfinite(values) & (values > 0)]
        if values.size < 2:
            continue
        logs = np.log(values)
        centres.append(float(centre(logs)))
        sampling.append(factor * float(np.var(logs, ddof=1)) / values.size)
    if len(centres) < 2:
        return None
    excess = float(np.var(centres, ddof=1)) - float(np.mean(sampling))
    return math.sqrt(excess) if excess > 0 else 0.0


def _clean(samples: Iterable[float], side: str) -> tuple[NDArray[np.float64], int]:
    """The samples as a 1-D float array without NaNs, and how many NaNs were dropped."""
    values = np.asarray(list(samples), dtype=np.float64).ravel()
    nans = np.isnan(values)
    values = values[~nans]
    if np.isinf(values).any():
        raise ValueError(f"{side} samples contain an infinite value")
    if (values < 0).any():
        raise ValueError(f"{side} samples must be non-negative for a ratio comparison")
    return values, int(nans.sum())


def _dropped_note(base_nans: int, curr_nans: int) -> str:
    counts = ((base_nans, "baseline"), (curr_nans, "current"))
    parts = [f"{n} NaN from the {side} samples" for n, side in counts if n]
    return f"; dropped {' and '.join(parts)}" if parts else ""


def _safe_ratio(numerator: float, denominator: float) -> float:
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0.0:
        return math.nan
    return numerator / denominator


def _bootstrap_ratio_ci(
    base: NDArray[np.float64],
    curr: NDArray[np.float64],
    *,
    statistic: Literal["median", "mean"],
    confidence: float,
    n_resamples: int,
    seed: int,
) -> tuple[float, float]:
    """Percentile bootstrap CI of centre(curr)/centre(base), resampling each side alone."""
    centre = np.median if statistic == "median" else np.mean

    def ratio_of_centres(
        b: NDArray[np.float64], c: NDArray[np.float64], axis: int = -1
    ) -> NDArray[np.float64]:
        # A resampled baseline centre of 0 gives inf or NaN; the CI then reaches infinity or
        # is NaN, which the verdict rule reads as "can't tell".
        with np.errstate(divide="ignore", invalid="ignore"):
            return centre(c, axis=axis) / centre(b, axis=axis)

    # errstate: SciPy also takes the standard error of the resampled ratios, which warns
    # when some of them are infinite; the interval itself is still well defined.
    with np.errstate(divide="ignore", invalid="ignore"):
        res = scipy_stats.bootstrap(
            (base, curr),
            ratio_of_centres,
            n_resamples=n_resamples,
            vectorized=True,
            paired=False,
            axis=-1,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def ratio_ci(
    numerator: Iterable[float],
    denominator: Iterable[float],
    *,
    statistic: Literal["median", "mean"] = "median",
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    min_samples: int = 5,
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of ``centre(numerator) / centre(denominator)``.

    Each side is resampled on its own (independent samples, e.g. per-request TPOTs of a
    no-spec and a spec case). ``None`` when a side has fewer than ``min_samples`` values
    after dropping NaNs. Deterministic for a given ``seed``.
    """
    if statistic not in ("median", "mean"):
        raise ValueError(f"statistic must be 'median' or 'mean', not {statistic!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if min_samples < 2:
        raise ValueError(f"min_samples must be >= 2, got {min_samples}")
    num, _ = _clean(numerator, "numerator")
    den, _ = _clean(denominator, "denominator")
    if num.size < min_samples or den.size < min_samples:
        return None
    return _bootstrap_ratio_ci(
        den, num, statistic=statistic, confidence=confidence, n_resamples=n_resamples, seed=seed
    )


# Which case of the truth table applied; the reason sentence is written from it.
_Why = Literal["beyond", "beyond_not_significant", "within", "straddles", "undefined"]


def _decide(
    ci: tuple[float, float],
    p_value: float,
    *,
    alpha: float,
    min_effect: float,
    direction: Direction,
) -> tuple[Verdict, _Why]:
    """The verdict rule (docs/statistics.md), for a CI of the ratio and a p-value."""
    lo, hi = ci
    if math.isnan(lo) or math.isnan(hi):
        return Verdict.INCONCLUSIVE, "undefined"
    rose = lo >= 1.0 + min_effect
    fell = hi <= 1.0 - min_effect
    if rose or fell:
        if p_value >= alpha:
            return Verdict.INCONCLUSIVE, "beyond_not_significant"
        worse = rose if direction is Direction.LOWER_IS_BETTER else fell
        return (Verdict.REGRESSION if worse else Verdict.IMPROVEMENT), "beyond"
    if 1.0 - min_effect < lo and hi < 1.0 + min_effect:
        return Verdict.UNCHANGED, "within"
    return Verdict.INCONCLUSIVE, "straddles"


def _sample_reason(
    metric: str,
    statistic: str,
    ratio: float,
    ci: tuple[float, float],
    confidence: float,
    p_value: float,
    alpha: float,
    min_effect: float,
    why: _Why,
) -> str:
    """One sentence, e.g. 'TPOT median rose 27.1 % (95 % CI +18.0 … +36.2 %), beyond ...'."""
    lo, hi = ci
    delta = ratio - 1.0
    # One decimal normally; two when the CI is under a percent wide so its ends differ.
    digits = 2 if math.isfinite(hi - lo) and (hi - lo) < 0.01 else 1
    if delta > 0:
        moved = f"rose {delta * 100:.{digits}f} %"
    elif delta < 0:
        moved = f"fell {-delta * 100:.{digits}f} %"
    else:
        moved = "did not move"
    ci_text = f"{confidence * 100:g} % CI {_signed_pct(lo, digits)} … {_signed_pct(hi, digits)} %"
    m = f"{min_effect * 100:g} %"
    test = f"Mann-Whitney p={p_value:.2g}"
    head = f"{metric} {statistic} {moved} ({ci_text})"
    if why == "beyond":
        return f"{head}, beyond the {m} minimum effect; {test} < {alpha:g}"
    if why == "beyond_not_significant":
        return (
            f"{head}, beyond the {m} minimum effect, but {test} is not below {alpha:g}, "
            "so the call is withheld; add trials"
        )
    if why == "within":
        return f"{head}, inside the ±{m} minimum effect, so no change that matters ({test})"
    if why == "straddles":
        could_rise = lo < 1.0 + min_effect < hi
        could_fall = lo < 1.0 - min_effect < hi
        which = (
            f"both ±{m} boundaries"
            if could_rise and could_fall
            else f"the {'+' if could_rise else '-'}{m} boundary"
        )
        return (
            f"{head}, which crosses {which} of the minimum effect, so the change may or may "
            f"not matter ({test}); add trials"
        )
    return f"{head}: the interval is undefined (a resampled baseline {statistic} was 0)"


def _signed_pct(ratio: float, digits: int) -> str:
    if not math.isfinite(ratio):
        return "+inf" if ratio > 0 else "nan"
    return f"{(ratio - 1.0) * 100:+.{digits}f}"


# ---------------------------------------------------------------------------------------
# Rate comparison
# ---------------------------------------------------------------------------------------


def compare_rate(
    metric: str,
    baseline_rate: float,
    current_rate: float,
    *,
    tolerance: float,
    direction: Direction = Direction.HIGHER_IS_BETTER,
) -> Comparison:
    """Compare two near-deterministic rates (e.g. draft acceptance at temperature 0).

    The verdict is by absolute difference: beyond ``tolerance`` in the bad direction is a
    REGRESSION, in the good direction an IMPROVEMENT, otherwise UNCHANGED; a difference of
    exactly ``tolerance`` (up to float rounding) is UNCHANGED. No rank test is run
    (``p_value`` is None); the "CI" is the point ratio at confidence 1.
    """
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    if not (math.isfinite(baseline_rate) and math.isfinite(current_rate)):
        raise ValueError(f"{metric}: rates must be finite, got {baseline_rate} and {current_rate}")
    direction = Direction(direction)

    difference = current_rate - baseline_rate
    slack = tolerance + _RATE_EPSILON * max(1.0, abs(baseline_rate), abs(current_rate))
    if abs(difference) <= slack:
        verdict = Verdict.UNCHANGED
    else:
        worse = (difference > 0) == (direction is Direction.LOWER_IS_BETTER)
        verdict = Verdict.REGRESSION if worse else Verdict.IMPROVEMENT

    if difference == 0:
        moved = f"stayed at {baseline_rate:.6g}"
    else:
        verb = "rose" if difference > 0 else "fell"
        moved = f"{verb} by {abs(difference):.6g} ({baseline_rate:.6g} → {current_rate:.6g})"
    where = "within" if verdict is Verdict.UNCHANGED else "beyond"
    ratio = _safe_ratio(current_rate, baseline_rate)
    return Comparison(
        metric=metric,
        direction=direction,
        statistic="rate",
        baseline=baseline_rate,
        current=current_rate,
        ratio=ratio,
        ci_low=ratio,
        ci_high=ratio,
        confidence=1.0,
        p_value=None,
        alpha=0.0,
        min_effect=tolerance,
        n_baseline=1,
        n_current=1,
        verdict=verdict,
        reason=f"{metric} {moved}, {where} the ±{tolerance:.6g} absolute tolerance.",
    )


# ---------------------------------------------------------------------------------------
# Power and sample size
# ---------------------------------------------------------------------------------------


def cv(samples: Iterable[float]) -> float:
    """Robust coefficient of variation: 1.4826 * MAD / |median|, NaNs dropped.

    MAD rather than std/mean because one stalled run (a GC pause, a noisy neighbour) should
    not inflate the number of trials planned for every later run. For the usual noise it
    estimates the same thing as std/mean. Falls back to std/|mean| when more than half the
    values tie so the MAD is 0 but the values still vary.
    """
    values = np.asarray(list(samples), dtype=np.float64).ravel()
    values = values[~np.isnan(values)]
    if values.size < 2:
        raise ValueError(f"cv needs at least 2 non-NaN samples, got {values.size}")
    median = float(np.median(values))
    if median == 0.0:
        raise ValueError("cv is undefined for samples with median 0")
    mad = float(np.median(np.abs(values - median)))
    if mad > 0.0:
        return _MAD_TO_SD * mad / abs(median)
    return float(np.std(values, ddof=1)) / abs(float(np.mean(values)))


def pooled_cv(runs: Iterable[Iterable[float]]) -> float:
    """The within-run :func:`cv` of several runs' values: each value divided by its own
    run's median, pooled, so the runs' different levels (the between-run spread) do not
    count and every run's trials add to the estimate. NaNs are dropped; runs with fewer
    than 2 values are skipped."""
    ratios: list[float] = []
    for run in runs:
        values = np.asarray(list(run), dtype=np.float64).ravel()
        values = values[~np.isnan(values)]
        if values.size < 2:
            continue
        median = float(np.median(values))
        if median == 0.0:
            continue
        ratios.extend((values / median).tolist())
    return cv(ratios)


def _z_sum(alpha: float, power: float) -> float:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power}")
    normal = scipy_stats.norm
    return float(normal.ppf(1.0 - alpha / 2.0) + normal.ppf(power))


def required_trials(cv: float, effect: float, *, alpha: float = 0.01, power: float = 0.9) -> int:
    """Trials per side for a two-sided Mann-Whitney test to detect a relative shift ``effect``.

    Normal approximation for two equal groups, n = 2 (z_{1-alpha/2} + z_power)^2 cv^2 /
    effect^2, divided by Mann-Whitney's efficiency 3/pi; rounded up, at least 2. This is
    detection against *no* change; the gate's REGRESSION call also needs the CI to clear
    ``min_effect``, so check a plan with ``simulated_power`` when ``min_effect > 0``. The
    normal approximation is also optimistic below about 15 trials (simulated: power 0.7,
    not 0.9, at n = 8 for cv 5 % and a 10 % shift).
    """
    if cv < 0:
        raise ValueError(f"cv must be >= 0, got {cv}")
    if effect == 0:
        raise ValueError("effect must be non-zero")
    trials = 2.0 * _z_sum(alpha, power) ** 2 * cv**2 / effect**2 / MANN_WHITNEY_ARE
    # The tolerance keeps a value that is an integer up to rounding (as min_detectable_effect
    # produces) from being rounded up to the next one.
    return max(2, math.ceil(trials - 1e-9))


def min_detectable_effect(cv: float, n: int, *, alpha: float = 0.01, power: float = 0.9) -> float:
    """The relative shift that ``n`` trials per side detect; the inverse of required_trials."""
    if cv < 0:
        raise ValueError(f"cv must be >= 0, got {cv}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return _z_sum(alpha, power) * cv * math.sqrt(2.0 / (n * MANN_WHITNEY_ARE))


def detectable_shift(cv_base: float, n_base: int, cv_curr: float, n_curr: int, *,
                     between_sd: float = 0.0, baseline_runs: int = 1, alpha: float = 0.01,
                     power: float = 0.9, confidence: float = 0.95) -> float:
    """The relative shift a comparison of ``n_base`` baseline and ``n_curr`` current trials
    detects with ``power`` at the two-sided false-alarm rate ``alpha``: the normal
    approximation of :func:`min_detectable_effect` with unequal sides, plus the
    between-run spread (log scale) of the current run and of the mean of
    ``baseline_runs`` baseline runs, which no number of trials in one run removes."""
    if min(n_base, n_curr) < 1 or baseline_runs < 1:
        raise ValueError("n_base, n_curr and baseline_runs must be >= 1")
    within = (cv_base**2 / n_base + cv_curr**2 / n_curr) / MANN_WHITNEY_ARE
    return _z_sum(alpha, power) * math.sqrt(within + _between_var(between_sd, baseline_runs,
                                                                  confidence))


def _between_var(between_sd: float, baseline_runs: int, confidence: float) -> float:
    """The between-run variance as the gate weighs it: of the current run and the mean of
    ``baseline_runs`` runs, scaled by (t / z)^2 because the gate's interval uses Student's
    t with ``baseline_runs - 1`` degrees of freedom for it (:func:`compare_samples`)."""
    if between_sd <= 0:
        return 0.0
    var = between_sd**2 * (1 + 1 / baseline_runs)
    if baseline_runs > 1:
        q = 0.5 + confidence / 2.0
        var *= (float(scipy_stats.t.ppf(q, baseline_runs - 1))
                / float(scipy_stats.norm.ppf(q))) ** 2
    return var


def trials_for_shift(effect: float, cv_base: float, n_base: int, cv_curr: float, *,
                     between_sd: float = 0.0, baseline_runs: int = 1, alpha: float = 0.01,
                     power: float = 0.9, confidence: float = 0.95) -> int | None:
    """Current-run trials that make :func:`detectable_shift` reach ``effect`` against
    this baseline; ``None`` when the baseline's own noise and the between-run spread
    already exceed it (then only more or quieter baseline runs help)."""
    if effect <= 0 or n_base < 1 or baseline_runs < 1:
        raise ValueError("effect must be > 0, n_base and baseline_runs >= 1")
    room = ((effect / _z_sum(alpha, power)) ** 2
            - _between_var(between_sd, baseline_runs, confidence)
            - cv_base**2 / (MANN_WHITNEY_ARE * n_base))
    if room <= 0:
        return None
    return max(2, math.ceil(cv_curr**2 / MANN_WHITNEY_ARE / room - 1e-9))


def simulated_power(
    cv: float,
    effect: float,
    n: int,
    *,
    alpha: float = 0.01,
    min_effect: float,
    trials: int = 500,
    seed: int = 0,
    statistic: Literal["median", "mean"] = "median",
    n_resamples: int = 400,
    min_samples: int = 5,
    between_sd: float = 0.0,
    baseline_runs: int = 1,
    n_baseline: int | None = None,
) -> float:
    """Fraction of simulated experiments that ``compare_samples`` calls a REGRESSION.

    Each experiment draws ``n`` baseline and ``n`` current values of a lower-is-better
    metric with mean-1 log-normal noise of coefficient of variation ``cv``; the current
    values are scaled by ``1 + effect`` (so ``effect > 0`` is a regression). They go through
    the real ``compare_samples`` so the verdict rule itself is what is measured. To stay
    cheap the bootstrap uses ``n_resamples`` = 400 by default instead of 2000: that jitters
    each 95 % CI end by about 0.13 of the ratio's standard error (vs 0.06), which changes
    the power far less than its own Monte-Carlo error (about +/-0.013 at 0.9, 500 trials).
    With fewer than ``min_samples`` per side the gate never decides, so the power is 0.

    ``between_sd`` (log scale) adds the server-lifetime noise trials cannot show: each of
    the ``baseline_runs`` baseline runs (``n_baseline`` trials each, default ``n``) and the
    current run get their own log-normal offset, and the gate is told that spread, as
    :func:`specperf.analysis.compare.compare_cases` does from a baseline's kept runs.
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if n < 2:
        raise ValueError(f"n must be >= 2 (the bootstrap resamples each side), got {n}")
    if cv < 0:
        raise ValueError(f"cv must be >= 0, got {cv}")
    rng = np.random.default_rng(seed)
    # Log-normal with mean 1 and the given cv: sigma^2 = ln(1 + cv^2), mu = -sigma^2 / 2.
    sigma = math.sqrt(math.log1p(cv**2))
    mu = -0.5 * sigma**2
    regressions = 0
    nb = n if n_baseline is None else n_baseline
    for _ in range(trials):
        offsets = np.exp(rng.normal(0.0, between_sd, baseline_runs + 1)) if between_sd else (
            np.ones(baseline_runs + 1))
        base = np.concatenate([offsets[i] * rng.lognormal(mu, sigma, nb)
                               for i in range(baseline_runs)])
        curr = (1.0 + effect) * offsets[-1] * rng.lognormal(mu, sigma, n)
        comparison = compare_samples(
            "simulated",
            base,
            curr,
            direction=Direction.LOWER_IS_BETTER,
            min_effect=min_effect,
            alpha=alpha,
            statistic=statistic,
            n_resamples=n_resamples,
            seed=int(rng.integers(2**32)),
            min_samples=min_samples,
            between_run_sd=between_sd,
            baseline_runs=baseline_runs,
        )
        regressions += comparison.verdict is Verdict.REGRESSION
    return regressions / trials
