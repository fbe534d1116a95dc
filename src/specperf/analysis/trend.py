"""The time-structured scenarios judged (pure): a soak's trends, a ramp's phases.

**Soak.** Per window: the acceptance rate (exact counter deltas) and the median TPOT of
its requests. Each series' slope over the run's hours is estimated with its interval by
Theil-Sen (:func:`scipy.stats.theilslopes`: the median of the pairwise slopes, robust to
a few stalled windows, with Sen's distribution-free interval):

=========================================  =============
interval of the slope                      outcome
=========================================  =============
wholly beyond the allowed change           FAIL
wholly within it                           PASS
straddling it, or < min_windows windows    INCONCLUSIVE
=========================================  =============

Acceptance: the slope of the rate in points per hour, held to
``-max_acceptance_decay_per_hour``. TPOT: the slope of the window medians divided by the
run's median window (relative growth per hour), held to ``max_tpot_growth_per_hour``. At
temperature 0 each window's acceptance is exact, so flat acceptance has slope 0 with the
interval [0, 0] and PASSes. A TPOT series with a window above the contention guard's
limit is BUSY (other processes slow a window down exactly as a decay would).

**Ramp.** c = 1, a burst, c = 1 again. Speculation must be on in every phase
(:func:`specperf.analysis.gate.check_speculation_on` per phase: a dynamic-k schedule that
drafts nothing at the burst's batch size is caught here), and the phase after the burst
is held to the one before it with the profile's comparison rules (acceptance:
:func:`~specperf.analysis.stats.compare_rate` with ``[compare.metrics.acceptance_rate]``;
TPOT: :func:`~specperf.analysis.stats.compare_samples` on the requests' TPOTs with
``[compare.metrics.tpot]``), turned into outcomes by :mod:`specperf.analysis.judge.outcome`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as scipy_stats

from specperf.analysis import gate
from specperf.analysis.aggregate import case_result
from specperf.analysis.judge.outcome import outcome_of
from specperf.analysis.stats import Comparison, Direction, compare_rate, compare_samples
from specperf.config.rules import CompareRules
from specperf.config.scenarios import SoakScenario
from specperf.config.server_configs import ServerConfig
from specperf.schemas import (
    Case,
    GateCheck,
    RampResult,
    SoakResult,
    SoakWindow,
    TrendFit,
    Trial,
)

__all__ = ["MOSTLY_OFF_FRACTION", "acceptance_trend", "drafted_share", "ramp_checks", "soak_checks",
           "soak_fits", "theil_sen", "tpot_trend"]

#: Slopes of exact counters compared with float slack (as gate.RATE_EPS).
_EPS = 1e-9
_HOUR_S = 3600.0


def theil_sen(x: Sequence[float], y: Sequence[float],
              confidence: float) -> tuple[float, float, float]:
    """(slope, interval low, interval high) of y against x; ValueError for fewer than two
    distinct x."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.size < 2 or np.unique(xs).size < 2:
        raise ValueError("a slope needs at least two windows at different times")
    if np.all(ys == ys[0]):
        return 0.0, 0.0, 0.0  # every window the same: flat, exactly (exact counters)
    res = scipy_stats.theilslopes(ys, xs, alpha=confidence)
    return float(res.slope), float(res.low_slope), float(res.high_slope)


def _few(metric: str, unit: str, n: int, scenario: SoakScenario, limit: float,
         why: str) -> TrendFit:
    return TrendFit(metric=metric, unit=unit, n_windows=n,  # type: ignore[arg-type]
                    confidence=scenario.confidence, limit=limit, outcome="inconclusive",
                    reason=why)


def acceptance_trend(windows: Sequence[SoakWindow], scenario: SoakScenario) -> TrendFit | None:
    """The acceptance rate's slope per hour against the allowed decay; None when the
    server does no spec decoding."""
    if all(w.acceptance is None for w in windows):
        return None
    limit = -scenario.max_acceptance_decay_per_hour
    unit = "per hour"
    pts = [(w.mid_s / _HOUR_S, rate) for w in windows
           if w.acceptance is not None and (rate := w.acceptance.rate) is not None]
    if len(pts) < scenario.min_windows:
        return _few("acceptance_rate", unit, len(pts), scenario, limit,
                    f"{len(pts)} window(s) with drafts, but a trend needs at least "
                    f"{scenario.min_windows} (scenarios.soak.min_windows)")
    slope, lo, hi = theil_sen([x for x, _ in pts], [y for _, y in pts],
                              confidence=scenario.confidence)
    conf = f"{scenario.confidence:.0%}"
    span = (f"acceptance rate slope {slope:+.4g} per hour ({conf} interval [{lo:+.4g}, "
            f"{hi:+.4g}]) over {len(pts)} windows")
    allowed = f"the allowed decay of {scenario.max_acceptance_decay_per_hour:g} per hour"
    if hi < limit - _EPS:
        outcome, why = "fail", f"{span}: wholly below {allowed} — acceptance decays over the run"
    elif lo >= limit - _EPS:
        outcome, why = "pass", f"{span}: clears {allowed}"
    else:
        outcome, why = "inconclusive", f"{span}: straddles {allowed}"
    return TrendFit(metric="acceptance_rate", unit=unit, n_windows=len(pts), slope=slope,
                    ci_low=lo, ci_high=hi, confidence=scenario.confidence, limit=limit,
                    outcome=outcome, reason=why)  # type: ignore[arg-type]


def tpot_trend(windows: Sequence[SoakWindow], scenario: SoakScenario,
               max_outside_cores: float = 0.0) -> TrendFit:
    """The median TPOT's relative slope per hour against the allowed growth; BUSY when a
    window ran under more outside load than ``max_outside_cores`` (> 0)."""
    limit = scenario.max_tpot_growth_per_hour
    unit = "relative per hour"
    pts = [(w.mid_s / _HOUR_S, w.tpot_ms.median) for w in windows if w.tpot_ms.median]
    if len(pts) < scenario.min_windows:
        return _few("tpot", unit, len(pts), scenario, limit,
                    f"{len(pts)} window(s) with successful requests, but a trend needs at "
                    f"least {scenario.min_windows} (scenarios.soak.min_windows)")
    centre = float(np.median([y for _, y in pts]))
    slope, lo, hi = theil_sen([x for x, _ in pts], [y / centre for _, y in pts],
                              confidence=scenario.confidence)
    conf = f"{scenario.confidence:.0%}"
    span = (f"median TPOT slope {slope:+.1%} per hour of the run's {centre:.2f} ms "
            f"({conf} interval [{lo:+.1%}, {hi:+.1%}]) over {len(pts)} windows")
    allowed = f"the allowed growth of {limit:.1%} per hour"
    busiest = max((w.outside_cores for w in windows if w.outside_cores is not None),
                  default=None)
    if max_outside_cores > 0 and busiest is not None and busiest > max_outside_cores:
        outcome, why = "busy", (f"{span}; machine busy ({busiest:.2f} cores from other "
                                f"processes in a window, limit {max_outside_cores:g})")
    elif lo > limit + _EPS:
        outcome, why = "fail", f"{span}: wholly above {allowed} — TPOT grows over the run"
    elif hi <= limit + _EPS:
        outcome, why = "pass", f"{span}: within {allowed}"
    else:
        outcome, why = "inconclusive", f"{span}: straddles {allowed}"
    return TrendFit(metric="tpot", unit=unit, n_windows=len(pts), slope=slope, ci_low=lo,
                    ci_high=hi, confidence=scenario.confidence, limit=limit,
                    outcome=outcome, reason=why)  # type: ignore[arg-type]


def soak_fits(windows: Sequence[SoakWindow], scenario: SoakScenario,
              max_outside_cores: float = 0.0) -> list[TrendFit]:
    acc = acceptance_trend(windows, scenario)
    return [*([acc] if acc is not None else []),
            tpot_trend(windows, scenario, max_outside_cores)]


def soak_checks(result: SoakResult) -> list[GateCheck]:
    """The soak's checks: failed requests, then one per trend fit (``result.fits``)."""
    case = result.case
    n = sum(w.n_requests for w in result.windows)
    errors = sum(w.n_errors for w in result.windows)
    checks = [GateCheck(
        case=case, gate="soak", metric="error_rate", higher_is_better=False,
        current=errors / n if n else None, threshold=0.0,
        outcome="pass" if n and not errors else "fail",
        message=(f"case {case.id}: soak: {n - errors}/{n} requests over "
                 f"{len(result.windows)} windows succeeded" if n and not errors else
                 f"case {case.id}: soak: {errors} of {n} requests failed"))]
    for fit in result.fits:
        word = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE",
                "busy": "not measured"}[fit.outcome]
        checks.append(GateCheck(
            case=case, gate="soak", metric=f"{fit.metric} trend", unit=fit.unit,
            higher_is_better=fit.metric == "acceptance_rate",
            current=fit.slope, threshold=fit.limit, outcome=fit.outcome,
            message=f"case {case.id}: soak {word}: {fit.reason}"))
    return checks


# --- the ramp -------------------------------------------------------------------------


#: A phase whose share of drafted steps falls below this fraction of the phase before the
#: burst ran mostly without speculation (a dynamic-k schedule giving k = 0 at its batch
#: size still drafts for the few steps where the batch has drained to one request).
MOSTLY_OFF_FRACTION = 0.5


def drafted_share(trial: Trial) -> float | None:
    """The share of the phase's decode steps (per request) that carried a draft: drafts /
    (output tokens − accepted tokens), each step yielding one token plus those accepted
    (the prefill's step drafts too: at k fixed the share is 1). None without counters."""
    acc = trial.acceptance
    if acc is None:
        return None
    steps = trial.output_tokens - acc.accepted_tokens
    return min(acc.drafts / steps, 1.0) if steps > 0 else None


def ramp_checks(result: RampResult, config: ServerConfig, rules: CompareRules,
                max_outside_cores: float = 0.0) -> list[GateCheck]:
    """Speculation on in every phase (speculative configs), then after vs before."""
    case = result.case
    phases = {p.name: p for p in result.phases}
    first = result.phases[0] if result.phases else None
    reference = drafted_share(first.trial) if first is not None else None
    checks: list[GateCheck] = []
    for p in result.phases:
        cr = case_result(Case(config_id=case.config_id, concurrency=p.concurrency), config,
                         [p.trial], None)
        if cr.n_errors:
            checks.append(GateCheck(
                case=case, gate="ramp", metric=f"error_rate ({p.name})", higher_is_better=False,
                current=cr.error_rate, threshold=0.0, outcome="fail",
                message=f"case {case.id}: ramp phase {p.name} (c={p.concurrency}): "
                        f"{cr.n_errors} of {cr.n_requests} requests failed; first error: "
                        f"{cr.errors[0] if cr.errors else '?'}"))
        if config.is_spec:
            on = gate.check_speculation_on(cr)
            share = drafted_share(p.trial)
            if (on.outcome == "pass" and p is not first and share is not None
                    and reference is not None and share < MOSTLY_OFF_FRACTION * reference):
                assert first is not None and cr.acceptance is not None
                on = on.model_copy(update={"outcome": "fail", "message": (
                    f"case {cr.case.id}: speculation was mostly off: "
                    f"{cr.acceptance.drafts:g} of {p.trial.output_tokens - cr.acceptance.accepted_tokens:g} "
                    f"decode steps carried a draft ({share:.1%}), against {reference:.1%} in "
                    f"the {first.name} phase at c={first.concurrency} — check that the "
                    "speculative config drafts at this batch size "
                    "(num_speculative_tokens_per_batch_size giving k = 0 there)")})
            checks.append(on.model_copy(update={
                "case": case, "gate": "ramp", "metric": f"speculation on ({p.name})",
                "message": f"ramp phase {p.name} (c={p.concurrency}): " + on.message}))
    before, after = phases.get("before"), phases.get("after")
    if before is None or after is None:
        return checks
    acc_rule = rules.metrics.get("acceptance_rate")
    b_acc, a_acc = before.trial.acceptance, after.trial.acceptance
    if (config.is_spec and acc_rule is not None and acc_rule.enabled and b_acc is not None
            and a_acc is not None and b_acc.rate is not None and a_acc.rate is not None):
        m = compare_rate(acc_rule.name, b_acc.rate, a_acc.rate, tolerance=acc_rule.min_effect)
        checks.append(_phase_check(case, "acceptance_rate (after vs before)", m,
                                   outcome_of(m)))
    tpot_rule = rules.metrics.get("tpot")
    if tpot_rule is not None and tpot_rule.enabled:
        b = [t for s in before.trial.samples if s.ok and (t := s.tpot_s) is not None]
        a = [t for s in after.trial.samples if s.ok and (t := s.tpot_s) is not None]
        m = compare_samples(
            tpot_rule.name, b, a, direction=tpot_rule.direction,
            min_effect=tpot_rule.min_effect, alpha=rules.alpha,
            statistic="mean" if tpot_rule.statistic == "mean" else "median",
            confidence=rules.confidence, n_resamples=rules.n_resamples, seed=rules.seed)
        loads = [x for x in (before.trial.outside_cores, after.trial.outside_cores)
                 if x is not None]
        busy = max_outside_cores > 0 and any(x > max_outside_cores for x in loads)
        checks.append(_phase_check(case, "TPOT (after vs before)", m,
                                   outcome_of(m, busy=busy), unit="ms",
                                   scale=1000.0))
    return checks


def _phase_check(case: Case, metric: str, m: Comparison, outcome: str, unit: str = "",
                 scale: float = 1.0) -> GateCheck:
    word = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE",
            "busy": "not measured (machine busy)"}[outcome]
    return GateCheck(
        case=case, gate="ramp", metric=metric, unit=unit,
        higher_is_better=m.direction is Direction.HIGHER_IS_BETTER,
        baseline=m.baseline * scale if math.isfinite(m.baseline) else None,
        current=m.current * scale if math.isfinite(m.current) else None,
        outcome=outcome,  # type: ignore[arg-type]
        message=f"case {case.id}: ramp {word}: the phase after the burst against the one "
                f"before it: {m.reason}")
