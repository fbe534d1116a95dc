"""The statistics of the regression gate: pure functions and frozen result models.

:func:`compare_samples` judges one metric's samples with a two-sided Mann-Whitney U test
*and* a percentile-bootstrap CI of the ratio of centres against ``1 ± min_effect``,
widened by the between-run spread of the baseline's kept runs (Student's t); the answer
is REGRESSION, IMPROVEMENT, UNCHANGED or INCONCLUSIVE. :func:`compare_rate` holds
acceptance rates to an absolute tolerance. What a number of trials can see under this
rule is :mod:`specperf.analysis.sample_size`.

docs/statistics.md explains the verdict rule (its table, why the percentile bootstrap,
why a change below the minimum effect is never a REGRESSION); the comments here say why
the code is written the way it is.

Why one module past 600 lines: the statistics live in one small-API module, as
docs/statistics.md explains them in one page: the two tests, the bootstrap and the kept-
runs widening are one rule.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field
from scipy import special
from scipy import stats as scipy_stats

# Direction lives with the comparison rules (a profile and a run file name it without
# loading scipy); it is re-exported here, where the verdict rule uses it.
from specperf.config.rules import Direction

__all__ = [
    "Comparison",
    "Direction",
    "Verdict",
    "between_run_spread",
    "compare_rate",
    "pooled_between_run_spread",
    "moderated_spreads",
    "ratio_ci",
    "compare_samples",
    "widen_ci",
]

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
    held_by: str | None = Field(
        default=None,
        description="the hold rule (specperf.analysis.judge.HOLD_RULES, by name) that made this "
                    "comparison INCONCLUSIVE although its numbers alone said REGRESSION; None "
                    "when the numbers decided",
    )
    starts: tuple[Verdict, ...] = Field(
        default=(), exclude=True,
        description="each server start's verdict, compared alone, when the case was measured "
                    "on more than one (specperf.analysis.judge.fresh_start.replicated); not "
                    "written: the reason tells them",
    )

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
    spread_df: float | None = None,
    spread_cases: int | None = None,
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
    ``spread_df``: the degrees of freedom the spread was estimated with, when not
    ``baseline_runs - 1`` (:func:`pooled_between_run_spread`,
    :func:`moderated_spreads`); ``spread_cases``: over how many cases it was
    pooled, for the reason.
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
        df = baseline_runs - 1 if spread_df is None else spread_df
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
            metric, statistic, ratio, ci, confidence, p_value, alpha, min_effect, why,
            direction,
        ) + _between_note(between_run_sd, baseline_runs, current_runs, spread_df,
                          spread_cases),
    )


def _between_note(between_run_sd: float, baseline_runs: int, current_runs: int = 1,
                  spread_df: float | None = None, spread_cases: int | None = None) -> str:
    if between_run_sd <= 0:
        return ""
    starts = (f", averaged over this run's {current_runs} server starts" if current_runs > 1
              else "")
    if spread_df is None:
        seen = f"seen over {baseline_runs} baseline run{'s' if baseline_runs != 1 else ''}"
    elif spread_cases and spread_cases > 1:
        seen = (f"moderated by {spread_cases} cases' kept runs ({spread_df:.3g} degrees of "
                "freedom)")
    else:
        seen = f"estimated with {spread_df:.3g} degrees of freedom"
    return (f"; the interval includes a between-run spread of {between_run_sd * 100:.1f} % "
            f"{seen}{starts}")


def widen_ci(ratio: float, ci: tuple[float, float], extra_sd: float,
             confidence: float, df: float | None = None) -> tuple[float, float]:
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
    pooled = pooled_between_run_spread([runs], statistic=statistic)
    return None if pooled is None else pooled[0]


def pooled_between_run_spread(groups: Iterable[Iterable[Iterable[float]]], *,
                              statistic: Literal["median", "mean"] = "median",
                              ) -> tuple[float, int] | None:
    """:func:`between_run_spread` from several groups of runs whose centres differ by a
    fixed amount between groups (e.g. a server and its pinned twin, each started once per
    run): each group's centres vary around that group's own mean, and the variances pool
    with their degrees of freedom, ``sum(n_g - 1)``. Returns (spread, degrees of freedom),
    or ``None`` when no group has 2 runs with 2 positive values."""
    squares, df, sampling = 0.0, 0, []
    for runs in groups:
        centres = []
        for run in runs:
            found = _run_centre(run, statistic, subtract_sampling=True)
            if found is not None:
                centres.append(found[0])
                sampling.append(found[1])
        if len(centres) >= 2:
            squares += float(np.var(centres, ddof=1)) * (len(centres) - 1)
            df += len(centres) - 1
    if not df:
        return None
    excess = squares / df - float(np.mean(sampling))
    return (math.sqrt(excess) if excess > 0 else 0.0), df


def moderated_spreads(cases: Sequence[Sequence[Iterable[float]]], *,
                      statistic: Literal["median", "mean"] = "median",
                      subtract_sampling: bool = True,
                      ) -> tuple[list[tuple[float, float] | None], bool]:
    """Each case's server-start spread (log scale, ~ relative SD) and its degrees of
    freedom, from its own kept runs moderated by the other cases' (empirical Bayes:
    Smyth 2004, the moderated variance of limma). ``cases``: per case, its runs' values,
    newest run first. ``None`` for a case with fewer than 2 usable runs. The flag says
    whether the cases moderated each other (False: each has its own estimate).

    A case's variance of run centres ``s²`` on ``d`` = runs − 1 degrees of freedom is
    combined with a prior ``s0²`` on ``d0``, both fitted to how the cases' variances
    spread: ``(d0·s0² + d·s²) / (d0 + d)`` on ``d0 + d`` degrees of freedom. Cases that
    agree as well as one variance sampled ``d`` times would (``d0`` large) lean on the
    pool — two kept runs, one degree of freedom, borrow the others' — while cases that
    differ more (``d0`` small) keep their own. ``d0`` is capped by what the cases can say
    together (:func:`_table_df`): when whole runs move, every case moves at once and
    many cases count as one. With ``subtract_sampling`` the centres' own sampling
    variance (as in :func:`between_run_spread`) is taken off afterwards, floored at 0.
    One case alone: its own estimate, :func:`between_run_spread` on ``runs - 1``."""
    rows: list[list[tuple[float, float]] | None] = []
    for runs in cases:
        row = [c for run in runs
               if (c := _run_centre(run, statistic, subtract_sampling)) is not None]
        rows.append(row if len(row) >= 2 else None)
    own = [(float(np.var([c for c, _ in row], ddof=1)), len(row) - 1,
            float(np.mean([v for _, v in row]))) if row else None for row in rows]
    prior = _variance_prior([o for o in own if o is not None],
                            _table_df([row for row in rows if row]))
    out: list[tuple[float, float] | None] = []
    for o in own:
        if o is None:
            out.append(None)
            continue
        gross, d, sampling = o
        if prior is None:
            net, df = gross - sampling, float(d)
        else:
            s0, d0 = prior
            net, df = (d0 * s0 + d * gross) / (d0 + d) - sampling, d0 + d
        out.append((math.sqrt(net) if net > 0 else 0.0, df))
    return out, prior is not None


def _run_centre(run: Iterable[float], statistic: Literal["median", "mean"],
                subtract_sampling: bool) -> tuple[float, float] | None:
    """One run's centre on the log scale and its sampling variance (``s^2 / n`` for a
    mean, about ``pi/2 * s^2 / n`` for a median), from its positive finite values; None
    with fewer than 2 of them (1 without ``subtract_sampling``: then the log of the
    centre, sampling variance 0)."""
    values = np.asarray(list(run), dtype=np.float64).ravel()
    values = values[np.isfinite(values) & (values > 0)]
    centre = np.median if statistic == "median" else np.mean
    if not subtract_sampling:
        return (math.log(float(centre(values))), 0.0) if values.size else None
    if values.size < 2:
        return None
    logs = np.log(values)
    factor = math.pi / 2.0 if statistic == "median" else 1.0
    return float(centre(logs)), factor * float(np.var(logs, ddof=1)) / values.size


def _variance_prior(own: list[tuple[float, int, float]], cap: float | None
                    ) -> tuple[float, float] | None:
    """(s0², d0) fitted to the cases' variances (limma's fitFDist, by moments of log s²),
    d0 capped at ``cap``; None with fewer than 2 cases with a variance above 0."""
    seen = [(gross, d) for gross, d, _ in own if gross > 0]
    if len(seen) < 2 or cap is None:
        return None
    d = np.array([d for _, d in seen], dtype=np.float64)
    e = np.log([g for g, _ in seen]) - special.digamma(d / 2) + np.log(d / 2)
    excess = float(np.var(e, ddof=1)) - float(np.mean(special.polygamma(1, d / 2)))
    d0 = 2 * _trigamma_inverse(excess) if excess > 0 else math.inf
    s0 = float(np.exp(np.mean(e) + (special.digamma(d0 / 2) - math.log(d0 / 2)
                                    if math.isfinite(d0) else 0.0)))
    return s0, min(d0, cap)


def _trigamma_inverse(y: float) -> float:
    """x with trigamma(x) = y (Newton's method as in limma's trigammaInverse)."""
    if y > 1e7:
        return 1.0 / math.sqrt(y)
    if y < 1e-6:
        return 1.0 / y
    x = 0.5 + 1.0 / y
    for _ in range(50):
        tri = float(special.polygamma(1, x))
        step = tri * (1.0 - tri / y) / float(special.polygamma(2, x))
        x += step
        if -step / x < 1e-8:
            break
    return x


def _table_df(rows: list[list[tuple[float, float]]]) -> float | None:
    """How many degrees of freedom the cases' run centres give one shared variance:
    the cases with the most common number of runs (newest first, so position r is the
    same kept run for each) form a cases × runs table, whose two-way analysis of variance
    splits what a whole run shares (``runs − 1`` degrees of freedom however many cases)
    from what each start has on its own (``(runs − 1)(cases − 1)``); Satterthwaite's
    degrees of freedom of their sum lie between ``runs − 1`` (whole runs move) and
    ``cases × (runs − 1)`` (starts move on their own). None with fewer than 2 cases."""
    if len(rows) < 2:
        return None
    counts = Counter(len(row) for row in rows)
    m = max(counts, key=lambda n: (counts[n], n))
    table = np.array([[c for c, _ in row[:m]] for row in rows if len(row) >= m])
    n_cases = table.shape[0]
    if n_cases < 2:
        return None
    run_means = table.mean(axis=0)
    shared = float(np.var(run_means, ddof=1))  # = MS(runs) / cases
    resid = table - table.mean(axis=1, keepdims=True) - run_means + table.mean()
    df_resid = (m - 1) * (n_cases - 1)
    own = (1.0 - 1.0 / n_cases) * float((resid ** 2).sum()) / df_resid
    spread = shared ** 2 / (m - 1) + own ** 2 / df_resid
    df = (shared + own) ** 2 / spread if spread > 0 else float(n_cases * (m - 1))
    return min(max(df, float(m - 1)), float(n_cases * (m - 1)))


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
    paired: bool = False,
) -> tuple[float, float]:
    """Percentile bootstrap CI of centre(curr)/centre(base), resampling each side alone or,
    ``paired``, the pairs (base[i], curr[i]) together."""
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
            paired=paired,
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
    paired: bool = False,
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of ``centre(numerator) / centre(denominator)``.

    Each side is resampled on its own (independent samples, e.g. per-request TPOTs of a
    no-spec and a spec case), or with ``paired`` the i-th values of the two sides together
    (requests that ran moments apart on the same prompt, load.pairing = "requests"): what
    moved both, such as the host's speed, then cancels from the interval as it does from
    the pair. A pair with a NaN on either side is dropped. ``None`` when a side has fewer
    than ``min_samples`` values after dropping NaNs. Deterministic for a given ``seed``.
    """
    if statistic not in ("median", "mean"):
        raise ValueError(f"statistic must be 'median' or 'mean', not {statistic!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if min_samples < 2:
        raise ValueError(f"min_samples must be >= 2, got {min_samples}")
    if paired:
        numerator, denominator = list(numerator), list(denominator)
        if len(numerator) != len(denominator):
            raise ValueError(f"paired samples must align: {len(numerator)} numerator and "
                             f"{len(denominator)} denominator values")
        pairs = [(a, b) for a, b in zip(numerator, denominator, strict=True)
                 if not (math.isnan(a) or math.isnan(b))]
        numerator, denominator = [a for a, _ in pairs], [b for _, b in pairs]
    num, _ = _clean(numerator, "numerator")
    den, _ = _clean(denominator, "denominator")
    if num.size < min_samples or den.size < min_samples:
        return None
    return _bootstrap_ratio_ci(
        den, num, statistic=statistic, confidence=confidence, n_resamples=n_resamples, seed=seed,
        paired=paired,
    )


# Which case of the truth table applied; the reason sentence is written from it.
_Why = Literal["beyond", "beyond_not_significant", "improved", "clears", "straddles",
               "undefined"]


def _decide(
    ci: tuple[float, float],
    p_value: float,
    *,
    alpha: float,
    min_effect: float,
    direction: Direction,
) -> tuple[Verdict, _Why]:
    """The verdict rule (docs/statistics.md), for a CI of the ratio and a p-value.

    One-sided about the regression limit (``1 + min_effect`` for a lower-is-better
    metric, ``1 - min_effect`` for a higher-is-better one), because that limit is what a
    check asserts: REGRESSION when the whole interval lies beyond it and the test is
    significant; UNCHANGED ("no change that matters") when the whole interval clears it;
    IMPROVEMENT when it also lies wholly beyond the opposite boundary, significantly;
    INCONCLUSIVE when it straddles the limit (or lies beyond it without significance).
    """
    lo, hi = ci
    if math.isnan(lo) or math.isnan(hi):
        return Verdict.INCONCLUSIVE, "undefined"
    lower_is_better = direction is Direction.LOWER_IS_BETTER
    limit = 1.0 + min_effect if lower_is_better else 1.0 - min_effect
    worse = lo >= limit if lower_is_better else hi <= limit
    clears = hi < limit if lower_is_better else lo > limit
    if worse:
        if p_value >= alpha:
            return Verdict.INCONCLUSIVE, "beyond_not_significant"
        return Verdict.REGRESSION, "beyond"
    if clears:
        better = hi <= 1.0 - min_effect if lower_is_better else lo >= 1.0 + min_effect
        if better and p_value < alpha:
            return Verdict.IMPROVEMENT, "improved"
        return Verdict.UNCHANGED, "clears"
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
    direction: Direction = Direction.LOWER_IS_BETTER,
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
    worse_word = "+" if direction is Direction.LOWER_IS_BETTER else "−"
    if why == "beyond":
        return f"{head}, wholly beyond the {worse_word}{m} limit; {test} < {alpha:g}"
    if why == "beyond_not_significant":
        return (
            f"{head}, beyond the {worse_word}{m} limit, but {test} is not below {alpha:g}, "
            "so the call is withheld; add trials"
        )
    if why == "improved":
        return f"{head}, wholly beyond the minimum effect on the good side; {test} < {alpha:g}"
    if why == "clears":
        return f"{head}, which clears the {worse_word}{m} limit, so no change that matters ({test})"
    if why == "straddles":
        return (
            f"{head}, which crosses the {worse_word}{m} limit, so it may or may not be a "
            f"regression ({test}); add trials"
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
