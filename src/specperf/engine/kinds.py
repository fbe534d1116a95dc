"""Every test kind a perf test asserts, in one registry: :data:`KINDS`, in run order.

A perf test names its kind (``@pytest.mark.perf_cases("latency")``,
``perf.assert_gate("latency", perf_case)``); the plugin looks the name up here once
(:func:`kind_named`) and from then on the selection, the session and the plugin ask the
kind object — which cases it has, what measures it, when its items run. Each layer
registers what it knows:

* the case kinds (:class:`~specperf.analysis.judge.kinds.CaseKind`: requests,
  acceptance, tpot_gain, latency, throughput) are the judge's — their cases in the matrix,
  the comparisons they assert, their checks — and the case measurer measures them;
* the workload scenarios (:class:`WorkloadScenarioKind`: prefix_cache, context_length,
  categories) are measured by :class:`~specperf.engine.scenarios.ScenarioRunner` on
  their own servers, after the matrix;
* the time scenarios (:class:`TimeScenarioKind`: soak, ramp) by
  :class:`~specperf.engine.soak.TimeScenarioRunner` on their config's server, after its
  cases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specperf.analysis.judge.kinds import CASE_KINDS, CaseKind
from specperf.config.profile import Profile
from specperf.engine.soak import TimeScenarioRunner, ramp_case, soak_case
from specperf.schemas import Case, GateCheck, TimeScenarioResults

__all__ = ["CATEGORIES", "CONTEXT_LENGTH", "KINDS", "PREFIX_CACHE", "RAMP", "SOAK", "TestKind",
           "TimeScenarioKind", "WorkloadScenarioKind", "kind_named", "kind_names"]


@dataclass(frozen=True)
class WorkloadScenarioKind:
    """A workload scenario ([scenarios.<name>] in the profile): its cases are its spec
    configs at its concurrency (ScenarioRunner.cases), measured whole on its own servers
    when its first item asks (ScenarioRunner.evaluate)."""

    name: str
    #: Why a profile can have no case of it, and what would give it some.
    no_cases: str


@dataclass(frozen=True)
class TimeScenarioKind:
    """A time-structured scenario (soak windows, ramp phases) on its config's own server,
    after that config's cases."""

    name: str
    no_cases: str
    #: Its cases in a profile, one per scenario entry.
    cases: Callable[[Profile], list[Case]]
    #: Runs the scenario of a case on its server and judges it (TimeScenarioRunner).
    run_and_judge: Callable[[TimeScenarioRunner, Case, float, TimeScenarioResults],
                            list[GateCheck]]


#: Any test kind.
TestKind = CaseKind | WorkloadScenarioKind | TimeScenarioKind

PREFIX_CACHE = WorkloadScenarioKind(
    "prefix_cache",
    "it has no [scenarios.prefix_cache] table (and a speculative server config) — add one "
    "to run the prefix-caching scenario (docs/scenarios.md)")
CONTEXT_LENGTH = WorkloadScenarioKind(
    "context_length",
    "it has no [scenarios.context_length] table (and a speculative server config) — add one "
    "to measure acceptance per prompt-length bucket (docs/scenarios.md)")
CATEGORIES = WorkloadScenarioKind(
    "categories",
    "it has no [scenarios.categories] table (and a speculative server config) — add one to "
    "measure acceptance per task category (docs/scenarios.md)")
SOAK = TimeScenarioKind(
    "soak",
    "the profile has no [scenarios.soak] table — add one to run a long-run (drift) case "
    "(docs/scenarios.md)",
    cases=lambda p: [soak_case(s) for s in p.scenarios.soak],
    run_and_judge=TimeScenarioRunner.soak_and_judge)
RAMP = TimeScenarioKind(
    "ramp",
    "the profile has no [scenarios.ramp] table — add one to run the concurrency ramp "
    "(docs/scenarios.md)",
    cases=lambda p: [ramp_case(r) for r in p.scenarios.ramp],
    run_and_judge=TimeScenarioRunner.ramp_and_judge)

#: Every test kind, in run order: within a case the case kinds' (in the order of
#: CASE_KINDS), the time scenarios after their config's cases, the workload scenarios
#: after the matrix. The one list: the plugin's marker, its item order and the lookup
#: of a perf test's kind name read it.
KINDS: tuple[TestKind, ...] = (*CASE_KINDS, PREFIX_CACHE, CONTEXT_LENGTH, CATEGORIES, SOAK, RAMP)

_BY_NAME = {k.name: k for k in KINDS}


def kind_names() -> tuple[str, ...]:
    """The names of every kind, in run order."""
    return tuple(_BY_NAME)


def kind_named(name: str) -> TestKind:
    """The kind a perf test names; raises ValueError naming the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown perf case kind {name!r}; known: {kind_names()}") from None
