"""The pydantic models passed between pipeline stages, and the run and baseline files'
schema they make up.

profile → server → load → scrape → measure → gate → report: each stage takes and
returns these, so a stage can be tested, replaced or re-rendered on its own, and a run
file written on a GPU box can be reviewed on a laptop without vLLM.

This module is the home of the stored files' top level (:class:`RunResult`,
:class:`Baseline`, their schema version); each stage's models have a module of this
package (base, load, scrape, measure, gate, records, scenarios) and are exported from
here too, under ``__all__``, because the file's schema is all of them (`specperf
schema`). Only the models: a function, constant or type alias is imported from its
module.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from specperf.config.rules import CompareRules
from specperf.schemas.base import Case, Positive, without_unset
from specperf.schemas.gate import GateCheck
from specperf.schemas.load import LoadResult, RequestSample, RequestSpecDecode
from specperf.schemas.measure import (
    CaseResult,
    FreshServerConfirmation,
    InconclusiveRetry,
    Summary,
    Trial,
    WithCases,
)
from specperf.schemas.records import InjectionRecord, Provenance, ServerRecord, TimeBreakdown
from specperf.schemas.scenarios import (
    RampPhase,
    RampResult,
    ScenarioResult,
    ScenarioSegment,
    SoakResult,
    SoakWindow,
    TimeScenarioResults,
    TrendFit,
)
from specperf.schemas.scrape import Acceptance, PrefixCacheCounts, SpecDecodeCounters

__all__ = [
    "MIN_SCHEMA_VERSION", "SCHEMA_VERSION", "recorded_rules",
    # The models of the files' schema, each from its stage's module:
    "Acceptance", "Baseline", "Case", "CaseResult", "FreshServerConfirmation", "GateCheck",
    "InconclusiveRetry", "InjectionRecord", "LoadResult", "PrefixCacheCounts", "Provenance",
    "RampPhase", "RampResult", "RequestSample", "RequestSpecDecode", "RunResult",
    "ScenarioResult", "ScenarioSegment", "ServerRecord", "SoakResult", "SoakWindow",
    "SpecDecodeCounters", "Summary", "TimeBreakdown", "TimeScenarioResults", "Trial",
    "TrendFit",
]

#: Bumped when a stored file (run or baseline) changes shape incompatibly.
SCHEMA_VERSION = 1
#: The oldest schema this specperf reads (there is no older one yet: 1 is the first; when
#: SCHEMA_VERSION is bumped, a migration from the previous one goes in
#: specperf.store.files and this stays, or the command that converts it is named there).
MIN_SCHEMA_VERSION = 1


class RunResult(WithCases):
    """The one result object every renderer (console, markdown, JSON, plots) views."""

    kind: Literal["specperf-run"] = "specperf-run"
    schema_version: int = Field(SCHEMA_VERSION, ge=MIN_SCHEMA_VERSION, le=SCHEMA_VERSION)
    provenance: Provenance
    run_dir: str
    started_at: datetime
    finished_at: datetime | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    checks: list[GateCheck] = Field(default_factory=list)
    servers: list[ServerRecord] = Field(default_factory=list)
    paired_nospec: dict[str, CaseResult] = Field(
        default_factory=dict,
        description="per spec case id: the no-spec trials interleaved with it (TPOT gain)",
    )
    baseline_path: str | None = None
    baseline_note: str | None = None
    compare_rules: CompareRules | None = Field(
        None, description="the profile's comparison rules ([compare]) this run was judged "
                          "with; `specperf compare` applies them (absent: the defaults)",
    )
    retry_inconclusive: int | None = Field(
        None, ge=0, description="the per-case trial cap of --perf-retry-inconclusive (None: off)"
    )
    time_breakdown: TimeBreakdown | None = Field(
        None, description="where the run's wall time went (absent: written before specperf "
                          "recorded it, or not by a perf run)")
    tpot_gain_floors: dict[str, Positive] = Field(
        default_factory=dict,
        description="per spec case id with a TPOT-gain gate: the floor its paired gain must be "
                    "significantly above (the profile's gates.tpot_gain), so `specperf compare` "
                    "judges the gain as the run did",
    )
    scenarios: list[ScenarioResult] = Field(
        default_factory=list, description="the profile's [scenarios] this run measured "
                                          "(docs/scenarios.md)")
    time_scenarios: TimeScenarioResults | None = Field(
        None, description="the soak and ramp scenarios' windows and phases (absent: none ran)")
    pinned_acceptance: dict[str, CaseResult] = Field(
        default_factory=dict,
        description="per spec case id: the trials of its pinned-acceptance twin (vLLM's "
                    "synthetic rejection sampler at the baseline's per-position rates), "
                    "interleaved with its own; the comparison splits TPOT with them",
    )
    pinned_rates: dict[str, list[Annotated[float, Field(ge=0.0, le=1.0)]]] = Field(
        default_factory=dict,
        description="per config id with a pinned-acceptance twin: the rates it was pinned to",
    )

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(self, handler, ("compare_rules", "retry_inconclusive",
                                              "time_breakdown", "tpot_gain_floors",
                                              "scenarios", "pinned_acceptance",
                                              "pinned_rates"))

    @property
    def failed(self) -> list[GateCheck]:
        return [c for c in self.checks if c.outcome == "fail"]


class Baseline(WithCases):
    kind: Literal["specperf-baseline"] = "specperf-baseline"
    schema_version: int = Field(SCHEMA_VERSION, ge=MIN_SCHEMA_VERSION, le=SCHEMA_VERSION)
    provenance: Provenance
    cases: list[CaseResult]
    paired_nospec: dict[str, CaseResult] = Field(
        default_factory=dict,
        description="per spec case id: the no-spec trials of the kept run's TPOT gain — this "
                    "hardware's gain, which a later run's gain is held to",
    )
    pinned_acceptance: dict[str, CaseResult] = Field(
        default_factory=dict,
        description="per spec case id: the kept run's pinned-acceptance twin trials — what a "
                    "later run's twin at the same rates is measured against, so that the "
                    "synthetic sampler's own cost cancels (docs/attribution.md)",
    )
    pinned_rates: dict[str, list[Annotated[float, Field(ge=0.0, le=1.0)]]] = Field(
        default_factory=dict,
        description="per config id with a kept twin: the rates that twin was pinned to",
    )

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(self, handler, ("paired_nospec", "pinned_acceptance",
                                              "pinned_rates"))


def recorded_rules(result: RunResult | Baseline) -> CompareRules:
    """The comparison rules ``result`` was judged with -- its profile's ``[compare]`` table,
    which a run file records -- else the defaults (a baseline, or an older run, records
    none)."""
    return (result.compare_rules if isinstance(result, RunResult) else None) or CompareRules()
