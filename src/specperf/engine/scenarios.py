"""A run's workload scenarios (config.scenarios): each on its own servers, with its own
prompts.

A scenario is measured whole when its first test asks for it, after the main matrix (the
plugin orders its items last), and its servers are stopped when it is done.
:class:`ScenarioRunner` is the loop the session asks: it holds what the run learns — each
scenario's result, its cases' checks or why they could not be measured, the servers' pools
— and hands the run's setting (specperf.engine.scenario_setting) to the measurer of the
kind asked for: the prefix-caching scenario's (specperf.engine.prefix_cache_scenario), or
the segmented scenarios', context length and categories
(specperf.engine.segmented_scenarios), whose shared pool it stops when the last of them
selected is done. Server logs go to ``<run dir>/scenarios/<pool>/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specperf.config.profile import Profile
from specperf.config.scenarios import SegmentedScenario
from specperf.engine.clock import RunClock
from specperf.engine.datasets import DatasetError
from specperf.engine.observer import RunObserver
from specperf.engine.prefix_cache_scenario import PrefixCacheMeasurer
from specperf.engine.scenario_setting import ScenarioMeasured, ScenarioSetting
from specperf.engine.segmented_scenarios import (
    SEGMENTED_KINDS,
    SegmentedMeasurer,
    scenario_segments,
    segmented_pool,
    segmented_pool_name,
)
from specperf.engine.server import stop_each
from specperf.engine.servers import ServerPool
from specperf.schemas import Case, GateCheck, ScenarioResult

__all__ = ["WORKLOAD_SCENARIO_KINDS", "ScenarioError", "ScenarioRunner"]

#: The scenario test kinds, in run order (after the main matrix's).
WORKLOAD_SCENARIO_KINDS = ("prefix_cache", *SEGMENTED_KINDS)


class ScenarioError(RuntimeError):
    """A scenario (or one of its cases) could not be measured; the message says why."""


@dataclass
class ScenarioRunner:
    profile: Profile
    run_dir: Path
    models_cache: Path
    repeats: int
    max_outside_cores: float
    busy_wait_s: float = 0.0
    say: Callable[[str], None] = print
    clock: RunClock = field(default_factory=RunClock)
    observer: RunObserver | None = None
    results: dict[str, ScenarioResult] = field(default_factory=dict)
    #: Per scenario kind, per spec case id: its checks (measured and judged).
    checks: dict[str, dict[str, list[GateCheck]]] = field(default_factory=dict)
    #: Per scenario kind, per case id: why it could not be measured.
    errors: dict[str, dict[str, str]] = field(default_factory=dict)
    #: The scenario's servers' records, for the run file.
    pools: dict[str, ServerPool] = field(default_factory=dict)
    #: Per scenario kind, the spec configs whose items were selected (a shard's, `-k`);
    #: absent: all of them.
    wanted: dict[str, set[str]] = field(default_factory=dict)
    #: --perf-dataset: the workload's file instead of the profile's (text = "workload").
    dataset: str | None = None

    def cases(self, kind: str) -> list[Case]:
        """The scenario's test cases: its spec configs at its concurrency."""
        spec = getattr(self.profile.scenarios, kind, None)
        if spec is None:
            return []
        return [Case(config_id=c.id, concurrency=spec.concurrency)
                for c in self.profile.server_configs if c.is_spec]

    def evaluate(self, kind: str, case: Case) -> list[GateCheck]:
        """The case's checks, measuring the whole scenario first if need be; raises
        ScenarioError or ServerError when the case could not be measured."""
        if kind not in self.results and kind not in self.errors:
            if kind == "prefix_cache":
                self._prefix_cache()
            elif kind in SEGMENTED_KINDS:
                self._segmented(kind)
            else:
                raise ValueError(f"unknown scenario {kind!r}; known: {WORKLOAD_SCENARIO_KINDS}")
        why = self.errors.get(kind, {}).get(case.id) or self.errors.get(kind, {}).get("*")
        if why is not None:
            raise ScenarioError(f"case {case.id}: {kind} scenario: {why}")
        checks = self.checks.get(kind, {}).get(case.id)
        if not checks:
            raise ScenarioError(f"case {case.id}: {kind} scenario: it was not measured")
        return checks

    def stop_all(self) -> None:
        stop_each([(name, pool.stop_all) for name, pool in self.pools.items()])

    def _setting(self) -> ScenarioSetting:
        return ScenarioSetting(self.profile, self.run_dir, self.models_cache, self.repeats,
                               self.max_outside_cores, self.busy_wait_s, self.say, self.clock,
                               self.observer, self.dataset)

    def _record(self, kind: str, measured: ScenarioMeasured | None) -> None:
        if measured is not None:
            self.results[kind], self.checks[kind] = measured

    def _prefix_cache(self) -> None:
        kind = "prefix_cache"
        measurer = PrefixCacheMeasurer(self._setting(), self.wanted.get(kind))
        self.pools[kind] = measurer.pool
        self._record(kind, measurer.measure(self.errors.setdefault(kind, {})))

    def _segmented(self, kind: str) -> None:
        spec = getattr(self.profile.scenarios, kind)
        assert isinstance(spec, SegmentedScenario)
        errors = self.errors.setdefault(kind, {})
        try:
            segments = scenario_segments(self.profile, self.dataset, spec)
        except DatasetError as exc:  # the dataset or the workload's file
            errors["*"] = str(exc)
            return
        name = segmented_pool_name(self.profile, kind)
        pool = self.pools.get(name)
        if pool is None:
            pool = self.pools[name] = segmented_pool(self._setting(), kind)
        try:
            measurer = SegmentedMeasurer(self._setting(), kind, segments, pool,
                                         self.wanted.get(kind))
            self._record(kind, measurer.measure(errors))
        finally:
            if self._pool_done(name):
                pool.stop_all()

    def _pool_done(self, name: str) -> bool:
        """Whether every selected segmented scenario of the pool has been measured (its
        servers may stop)."""
        kinds = [k for k in SEGMENTED_KINDS if getattr(self.profile.scenarios, k) is not None
                 and (not self.wanted or k in self.wanted)
                 and segmented_pool_name(self.profile, k) == name]
        return all(k in self.results or k in self.errors for k in kinds)
