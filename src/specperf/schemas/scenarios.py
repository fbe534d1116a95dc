"""What the scenarios beside the main matrix record (config/scenarios.py): the segmented
and prefix-cache scenarios' cases, and the soak's windows and the ramp's phases."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from specperf.schemas.base import Case, Count, NonNegative, Positive, StoredModel, without_unset
from specperf.schemas.measure import CaseResult, Summary, Trial, WithCases
from specperf.schemas.scrape import Acceptance


class ScenarioSegment(WithCases):
    """One segment of a segmented scenario (a prompt-length bucket, a task category): each
    config's trials on the segment's prompts alone, so their counter deltas are the
    segment's, and the no-spec trials paired with each spec case."""

    name: str
    cases: list[CaseResult] = Field(default_factory=list)
    paired_nospec: dict[str, CaseResult] = Field(
        default_factory=dict, description="per spec case id: the no-spec trials on the "
                                          "segment's prompts interleaved with it")


class ScenarioResult(WithCases):
    """One scenario of a run (config.scenarios): its cases, measured on the scenario's own
    servers with its own prompts, and the no-spec trials paired with each spec case. A
    segmented scenario (context_length, categories) also has its segments; its cases are
    then every segment's trials together."""

    kind: Literal["prefix_cache", "context_length", "categories"]
    cases: list[CaseResult] = Field(default_factory=list)
    paired_nospec: dict[str, CaseResult] = Field(
        default_factory=dict, description="per spec case id: the no-spec trials interleaved "
                                          "with it, on the same prompts")
    segments: list[ScenarioSegment] = Field(
        default_factory=list, description="context_length: per length bucket; categories: per "
                                          "category (in measuring order)")

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(self, handler, ("segments",))


# --- time-structured scenarios (config/scenarios.py) ----------------------------------


class SoakWindow(StoredModel):
    """One window of a soak: whole prompt cycles, the counter deltas around them."""

    index: Count
    start_s: NonNegative = Field(description="seconds since the soak's first window began")
    duration_s: NonNegative
    n_requests: Count
    n_errors: Count
    tpot_ms: Summary
    acceptance: Acceptance | None = None
    outside_cores: NonNegative | None = Field(
        None, description="cores' worth of other processes during the window; None = unknown")

    @property
    def mid_s(self) -> float:
        return self.start_s + self.duration_s / 2


class TrendFit(StoredModel):
    """A series' slope over the run with its interval, against the allowed change."""

    metric: Literal["acceptance_rate", "tpot"]
    unit: str = Field(description="of the slope, e.g. 'per hour' or 'relative per hour'")
    n_windows: Count
    slope: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float = Field(gt=0.0, lt=1.0)
    limit: float = Field(description="the allowed slope: a decay (acceptance, ≤ 0) or a "
                                     "growth (TPOT, ≥ 0) per hour")
    outcome: Literal["pass", "fail", "inconclusive", "busy"]
    reason: str


class SoakResult(StoredModel):
    case: Case
    duration_s: NonNegative
    window_s: Positive
    windows: list[SoakWindow]
    fits: list[TrendFit] = Field(default_factory=list)


class RampPhase(StoredModel):
    """One phase of a ramp: its concurrency and its one trial."""

    name: Literal["before", "burst", "after"]
    concurrency: Annotated[int, Field(ge=1)]
    trial: Trial


class RampResult(StoredModel):
    case: Case
    phases: list[RampPhase]


class TimeScenarioResults(StoredModel):
    """What the time-structured scenarios measured (absent from runs that ran none)."""

    soak: list[SoakResult] = Field(default_factory=list)
    ramp: list[RampResult] = Field(default_factory=list)
