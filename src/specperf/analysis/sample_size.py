"""Power and sample size: the robust CV of a metric's samples and what a number of trials
can detect under the verdict rule of :mod:`specperf.analysis.stats` (pure).

:func:`required_trials`, :func:`min_detectable_effect`, :func:`detectable_shift` and
:func:`trials_for_shift` are normal approximations scaled by Mann-Whitney's efficiency;
:func:`simulated_power` runs the real ``compare_samples`` on simulated trials to check a
plan. docs/statistics.md explains how the comparison and ``specperf power`` use them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import numpy as np
from scipy import stats as scipy_stats

from specperf.analysis.stats import Direction, Verdict, compare_samples

__all__ = [
    "MANN_WHITNEY_ARE",
    "cv",
    "detectable_shift",
    "min_detectable_effect",
    "pooled_cv",
    "required_trials",
    "simulated_power",
    "trials_for_shift",
]

# Asymptotic relative efficiency of Mann-Whitney U against the t-test under normal noise:
# it needs pi/3 (about 1.05x) as many trials as the t-test to reach the same power.
MANN_WHITNEY_ARE = 3.0 / math.pi

# Consistency constant that makes the median absolute deviation estimate the standard
# deviation of normal noise.
_MAD_TO_SD = 1.482602218505602


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
                     power: float = 0.9, confidence: float = 0.95,
                     spread_df: float | None = None) -> float:
    """The relative shift a comparison of ``n_base`` baseline and ``n_curr`` current trials
    detects with ``power`` at the two-sided false-alarm rate ``alpha``: the normal
    approximation of :func:`min_detectable_effect` with unequal sides, plus the
    between-run spread (log scale) of the current run and of the mean of
    ``baseline_runs`` baseline runs, which no number of trials in one run removes.
    ``spread_df``: its degrees of freedom when not ``baseline_runs - 1`` (moderated by
    other cases: :mod:`specperf.analysis.spread`)."""
    if min(n_base, n_curr) < 1 or baseline_runs < 1:
        raise ValueError("n_base, n_curr and baseline_runs must be >= 1")
    within = (cv_base**2 / n_base + cv_curr**2 / n_curr) / MANN_WHITNEY_ARE
    return _z_sum(alpha, power) * math.sqrt(within + _between_var(between_sd, baseline_runs,
                                                                  confidence, spread_df))


def _between_var(between_sd: float, baseline_runs: int, confidence: float,
                 spread_df: float | None = None) -> float:
    """The between-run variance as the gate weighs it: of the current run and the mean of
    ``baseline_runs`` runs, scaled by (t / z)^2 because the gate's interval uses Student's
    t with ``spread_df`` (default ``baseline_runs - 1``) degrees of freedom for it
    (:func:`compare_samples`)."""
    if between_sd <= 0:
        return 0.0
    var = between_sd**2 * (1 + 1 / baseline_runs)
    df = spread_df if spread_df is not None else baseline_runs - 1
    if df > 0:
        q = 0.5 + confidence / 2.0
        var *= (float(scipy_stats.t.ppf(q, df)) / float(scipy_stats.norm.ppf(q))) ** 2
    return var


def trials_for_shift(effect: float, cv_base: float, n_base: int, cv_curr: float, *,
                     between_sd: float = 0.0, baseline_runs: int = 1, alpha: float = 0.01,
                     power: float = 0.9, confidence: float = 0.95,
                     spread_df: float | None = None) -> int | None:
    """Current-run trials that make :func:`detectable_shift` reach ``effect`` against
    this baseline; ``None`` when the baseline's own noise and the between-run spread
    already exceed it (then only more or quieter baseline runs help)."""
    if effect <= 0 or n_base < 1 or baseline_runs < 1:
        raise ValueError("effect must be > 0, n_base and baseline_runs >= 1")
    room = ((effect / _z_sum(alpha, power)) ** 2
            - _between_var(between_sd, baseline_runs, confidence, spread_df)
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
    spread_df: float | None = None,
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
    :func:`specperf.analysis.compare.against_baseline` does from a baseline's kept runs
    (``spread_df``: its degrees of freedom when moderated by other cases).
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
            spread_df=spread_df,
        )
        regressions += comparison.verdict is Verdict.REGRESSION
    return regressions / trials
