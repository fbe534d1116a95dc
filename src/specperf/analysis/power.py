"""How much a baseline can see: per case and metric (TTFT median, TPOT median, output
throughput), the noise it shows (``cv``), the trials a given effect needs (``needed``),
the smallest effect its repeats catch (``detectable``), and the simulated power of the
real verdict rule (``simulated_power``). Pure functions; ``specperf power`` prints them.

docs/statistics.md ("Power: what the trials can catch") explains each figure and why the
simulated power is usually below the nominal one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specperf.analysis.sample_size import cv as robust_cv
from specperf.analysis.sample_size import (
    detectable_shift,
    pooled_cv,
    required_trials,
    simulated_power,
    trials_for_shift,
)
from specperf.analysis.samples import earlier_runs, per_request, per_trial
from specperf.analysis.spread import KeptSpreads, kept_spreads, own_spread
from specperf.config.rules import CompareRules
from specperf.schemas import Baseline, CaseResult, RunResult, recorded_rules

__all__ = [
    "MIN_TRIALS_FOR_CV",
    "METRICS",
    "CasePower",
    "MetricPower",
    "PowerReport",
    "power_lines",
    "power_report",
    "repeats_line",
]

#: A CV from fewer trial values than this is meaningless; per-request values are used then.
MIN_TRIALS_FOR_CV = 3

#: (compare key, display name) of the metrics planned for.
METRICS: list[tuple[str, str]] = [
    ("ttft", "TTFT"),
    ("tpot", "TPOT"),
    ("output_throughput", "output throughput"),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class MetricPower(_Model):
    key: str
    metric: str
    source: Literal["trials", "requests"] | None = Field(
        None, description="what one value was; None when the CV could not be estimated")
    n: int = Field(0, description="values per side the baseline has now (trials or requests)")
    cv: float | None = None
    min_effect: float = Field(description="the gate's minimum effect for this metric")
    needed: int | None = Field(None, description="units per side for `effect` at `power`")
    detectable: float | None = Field(None, description="relative shift n units catch")
    simulated_n: int | None = None
    simulated_power: float | None = None
    baseline_runs: int = Field(1, description="kept runs of this case the figures pool")
    between_run_spread: float | None = Field(
        None, description="log-scale SD of the kept runs' centres beyond trial noise")
    note: str | None = None


class CasePower(_Model):
    case: str
    trials: int
    metrics: list[MetricPower]


class PowerReport(_Model):
    kind: Literal["specperf-power"] = "specperf-power"
    source: str | None = None
    effect: float
    alpha: float
    power: float
    min_trials: int
    simulated: bool
    cases: list[CasePower]
    # The rules the figures plan by (minimum effects, confidence, trials), and where they
    # came from (a profile's [compare] table, a run's recorded rules, the defaults).
    rules: CompareRules | None = None
    rules_source: str | None = None


def _values(case: CaseResult, key: str) -> tuple[Literal["trials", "requests"] | None,
                                                 list[float]]:
    if len(case.trials) >= MIN_TRIALS_FOR_CV:
        vals = [v for v in per_trial(case, key) if not math.isnan(v)]
        return "trials", vals
    if key == "output_throughput":
        return None, []
    return "requests", per_request(case, key)


def _metric(case: CaseResult, key: str, name: str, *, effect: float, alpha: float,
            power: float, rules: CompareRules, simulate: bool, sim_trials: int,
            sim_resamples: int, seed: int, earlier: list[CaseResult],
            repeats: int | None, spreads: KeptSpreads) -> MetricPower:
    min_effect = rules.rule(key).min_effect  # type: ignore[arg-type]
    source, vals = _values(case, key)
    runs = [case, *earlier][: rules.baseline_runs] if source == "trials" else [case]
    stat = "mean" if rules.rule(key).statistic == "mean" else "median"  # type: ignore[arg-type]
    # The gate's spread: moderated by the baseline's other cases.
    spread = (spreads.for_case(key, "trials", case.case.id,
                               own_spread([per_trial(r, key) for r in runs], statistic=stat,
                                          kind="trials"))
              if source == "trials" else None)
    between = spread.sd if spread is not None else None
    df = spread.df if spread is not None and spread.cases > 1 else None
    tau, k = between or 0.0, len(runs)
    base = MetricPower(key=key, metric=name, min_effect=min_effect)
    if source is None:
        return base.model_copy(update={"note": (
            f"needs ≥ {MIN_TRIALS_FOR_CV} trials (has {len(case.trials)}): throughput has "
            "one value per trial")})
    if len(vals) < 2:
        return base.model_copy(update={"source": source, "n": len(vals), "note": (
            f"{len(vals)} {source} with a value: nothing to estimate noise from (a "
            "provisional baseline has summaries only)")})
    try:
        # Within-run noise from every kept run's trials (their levels differ by the
        # between-run spread, which is counted apart).
        c = (pooled_cv(per_trial(r, key) for r in runs) if len(runs) > 1
             else robust_cv(vals))
    except ValueError as exc:
        return base.model_copy(update={"source": source, "n": len(vals), "note": str(exc)})
    n = len(vals)
    notes = []
    if k > 1:
        # The gate pools the kept runs (k x n baseline trials) and widens for the spread
        # between them; a new run is planned with n trials.
        n_base = sum(len(per_trial(r, key)) for r in runs)
        needed = trials_for_shift(effect, c, n_base, c, between_sd=tau, baseline_runs=k,
                                  alpha=alpha, power=power, confidence=rules.confidence,
                                  spread_df=df)
        detectable = detectable_shift(c, n_base, c, repeats or n, between_sd=tau,
                                      baseline_runs=k, alpha=alpha, power=power,
                                      confidence=rules.confidence, spread_df=df)
        if needed is None:
            notes.append(f"the spread between the {k} kept runs ({tau * 100:.1f} %) and the "
                         "baseline's own noise exceed this effect: no number of trials in "
                         "one run catches it")
    else:
        needed = required_trials(c, effect, alpha=alpha, power=power)
        detectable = (detectable_shift(c, n, c, repeats or n, alpha=alpha, power=power)
                      if n else None)
        if source == "trials":
            notes.append("one run: the noise of a server restart is not included "
                         "(optimistic until the baseline has kept runs)")
    if source == "requests":
        notes.append(f"fewer than {MIN_TRIALS_FOR_CV} trials: CV of requests, which "
                     "understates run-to-run drift (optimistic)")
    if effect <= min_effect:
        notes.append(f"the effect is not above the gate's ±{min_effect * 100:g} % minimum "
                     "effect, so it mostly comes out INCONCLUSIVE")
    sim_n = sim_p = None
    if simulate:
        sim_n = repeats or max(needed or n, rules.min_trials)
        sim_p = simulated_power(c, effect, sim_n, alpha=alpha, min_effect=min_effect,
                                trials=sim_trials, n_resamples=sim_resamples, seed=seed,
                                between_sd=tau, baseline_runs=k,
                                n_baseline=n if repeats or k > 1 else None, spread_df=df)
    return MetricPower(
        key=key, metric=name, source=source, n=n, cv=c, min_effect=min_effect,
        needed=needed, detectable=detectable, simulated_n=sim_n, simulated_power=sim_p,
        baseline_runs=k, between_run_spread=between, note="; ".join(notes) or None,
    )


def power_report(result: Baseline | RunResult, effect: float, *, alpha: float | None = None,
                 power: float = 0.9, rules: CompareRules | None = None,
                 simulate: bool = True, sim_trials: int = 200, sim_resamples: int = 200,
                 seed: int = 0, source: str | None = None,
                 history: Sequence[Baseline | RunResult] = (),
                 repeats: int | None = None) -> PowerReport:
    """Power figures for every case of a baseline or run (docs/statistics.md).

    ``history``: the baseline's kept runs; as in the gate (``rules.baseline_runs``), the
    comparable ones are pooled and their between-run spread is part of the noise.
    ``repeats``: the trials a new run will have (default: as many as the baseline's) --
    what ``detectable`` and the simulated power are for. ``alpha`` unset: ``rules.alpha``."""
    if repeats is not None and repeats < 2:
        raise ValueError(f"repeats must be >= 2, got {repeats}")
    if not 0 < effect < 10:
        raise ValueError(f"effect is relative (0.05 = 5 %), got {effect}")
    # A run judged by its profile's [compare] table is planned by it too.
    rules = rules or recorded_rules(result)
    alpha = rules.alpha if alpha is None else alpha
    cases = []
    spreads = kept_spreads(result, history, rules)
    for case in result.cases:
        earlier = earlier_runs(case, result, history)
        metrics = [
            _metric(case, key, name, effect=effect, alpha=alpha, power=power, rules=rules,
                    simulate=simulate, sim_trials=sim_trials, sim_resamples=sim_resamples,
                    seed=seed, earlier=earlier, repeats=repeats, spreads=spreads)
            for key, name in METRICS
        ]
        cases.append(CasePower(case=case.case.id, trials=len(case.trials), metrics=metrics))
    return PowerReport(source=source, effect=effect, alpha=alpha, power=power,
                       min_trials=rules.min_trials, simulated=simulate, cases=cases,
                       rules=rules)


def _pct(x: float) -> str:
    return f"{x * 100:.1f} %".replace(".0 %", " %")


def power_lines(result: Baseline | RunResult, effect: float, *, alpha: float | None = None,
                power: float = 0.9) -> list[str]:
    """One line per case and metric a report can print, e.g.
    ``draft-k2-c1 TPOT: 10 trials catch ≥ 7.9 %; 5 % needs 24`` (no simulation: cheap)."""
    report = power_report(result, effect, alpha=alpha, power=power, simulate=False)
    lines = []
    for case in report.cases:
        for m in case.metrics:
            head = f"{case.case} {m.metric}"
            if m.cv is None or m.needed is None or m.detectable is None:
                lines.append(f"{head}: not estimated ({m.note or 'no values'})")
                continue
            unit = "trials" if m.source == "trials" else "requests"
            line = (f"{head}: {m.n} {unit} catch ≥ {_pct(m.detectable)}; "
                    f"{_pct(effect)} needs {m.needed}")
            if m.source == "requests":
                line += " (per-request CV: optimistic)"
            lines.append(line)
    return lines


def repeats_line(result: Baseline | RunResult, rules: CompareRules | None = None, *,
                 alpha: float | None = None, power: float = 0.9) -> str | None:
    """One sentence for a report: the smallest shift per metric this run's repeats catch
    against a run like it (90 % power), across its cases, beside the minimum effects --
    and a plain warning when they cannot see them. ``None`` without 3 trials a case."""
    rules = rules or recorded_rules(result)
    report = power_report(result, rules.rule("tpot").min_effect or 0.05, alpha=alpha,
                          power=power, rules=rules, simulate=False)
    alpha = report.alpha
    parts, blind = [], []
    trials = sorted({c.trials for c in report.cases})
    for key, name in METRICS:
        seen = [m.detectable for c in report.cases for m in c.metrics
                if m.key == key and m.source == "trials" and m.detectable is not None]
        if not seen:
            continue
        lo, hi = min(seen), max(seen)
        floor = rules.rule(key).min_effect  # type: ignore[arg-type]
        span = (_pct(lo) if abs(hi - lo) < 0.005
                else f"{lo * 100:.1f}–{hi * 100:.1f} %")
        parts.append(f"{name} {span} (minimum effect {_pct(floor)})")
        if hi > floor:
            blind.append(name)
    if not parts:
        return None
    n = "/".join(str(t) for t in trials)
    line = (f"Smallest change {n} trials a case catch (90 % power, α = {alpha:g}, against "
            "one run like this, server-restart noise not included), across the cases: "
            + "; ".join(parts) + ".")
    if blind:
        line += (f" Not every case can see the minimum effect of {', '.join(blind)}: a change "
                 "that size comes out INCONCLUSIVE there, not UNCHANGED — `specperf power "
                 "--baseline FILE --effect E` says how many trials would.")
    return line
