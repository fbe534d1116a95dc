"""The run file, assembled from what a session's collaborators measured.

A collaborator the run never needed (no case selected, no scenario) was never built and
is passed as None: it adds nothing, and nothing is built to ask it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from specperf.config.rules import CompareRules
from specperf.config.server_configs import ServerConfig
from specperf.engine.baseline_context import BaselineContext
from specperf.engine.clock import RunClock
from specperf.engine.measurer import CaseMeasurer
from specperf.engine.scenarios import ScenarioRunner
from specperf.engine.servers import ServerPool
from specperf.schemas import (
    Case,
    CaseResult,
    GateCheck,
    Provenance,
    RunResult,
    ScenarioResult,
    ServerRecord,
    TimeScenarioResults,
)
from specperf.schemas.base import utcnow

__all__ = [
    "assemble_run",
    "measured_cases",
    "scenario_results",
    "scenario_servers",
    "time_scenarios_ran",
    "with_time_breakdown",
]


def measured_cases(measurer: CaseMeasurer | None) -> dict[Case, CaseResult]:
    return measurer.results if measurer is not None else {}


def scenario_results(scenarios: ScenarioRunner | None) -> list[ScenarioResult]:
    return list(scenarios.results.values()) if scenarios is not None else []


def scenario_servers(scenarios: ScenarioRunner | None) -> list[ServerRecord]:
    """The scenarios' server starts, named ``<config>@<scenario>``."""
    if scenarios is None:
        return []
    return [r.model_copy(update={"config_id": f"{r.config_id}@{kind}"})
            for kind, pool in scenarios.pools.items() for r in pool.records.values()]


def time_scenarios_ran(results: TimeScenarioResults) -> bool:
    return bool(results.soak or results.ramp)


def assemble_run(provenance: Provenance, *, run_dir: Path, started_at: datetime,
                 checks: list[GateCheck], configs: Sequence[ServerConfig],
                 measurer: CaseMeasurer | None, pool: ServerPool | None,
                 scenarios: ScenarioRunner | None, baselines: BaselineContext,
                 compare_rules: CompareRules, retry_cap: int | None,
                 time_scenarios: TimeScenarioResults) -> RunResult:
    """The run file: the cases in ``configs`` order (the order they ran in), then by
    concurrency; the vLLM version the servers reported over the one found at start."""
    results = measured_cases(measurer)
    versions = {r.vllm_version for r in results.values() if r.vllm_version}
    if versions:
        provenance = provenance.model_copy(update={"vllm_version": sorted(versions)[0]})
    order = {c.id: i for i, c in enumerate(configs)}
    cases = sorted(results.values(),
                   key=lambda r: (order.get(r.case.config_id, 99), r.case.concurrency))
    paired: dict[Case, CaseResult] = {}
    floors: dict[str, float] = {}
    pinned: dict[str, CaseResult] = {}
    rates: dict[str, list[float]] = {}
    if measurer is not None:
        paired = measurer.paired
        floors = {k.id: floor for k in paired if (floor := measurer.gain_floor(k)) is not None}
        pinned = {k.id: v for k, v in measurer.pinned.items()}
        rates = dict(measurer.pinned_rates)
    return RunResult(
        provenance=provenance,
        run_dir=str(run_dir),
        started_at=started_at,
        finished_at=utcnow(),
        cases=cases,
        checks=checks,
        servers=[*(pool.records.values() if pool is not None else ()),
                 *scenario_servers(scenarios)],
        paired_nospec={k.id: v for k, v in paired.items()},
        baseline_path=str(baselines.path) if baselines.path else None,
        baseline_note=baselines.note,
        compare_rules=compare_rules,
        retry_inconclusive=retry_cap,
        tpot_gain_floors=floors,
        scenarios=scenario_results(scenarios),
        time_scenarios=time_scenarios if time_scenarios_ran(time_scenarios) else None,
        pinned_acceptance=pinned,
        pinned_rates=rates,
    )


def with_time_breakdown(run: RunResult, clock: RunClock) -> RunResult:
    """``run`` with where the wall time went so far (phases still open count up to now)."""
    return run.model_copy(update={"time_breakdown": clock.breakdown()})
