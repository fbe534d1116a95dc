"""The case matrix of a profile, and what the run selected from it.

:class:`CaseSelection` answers the plugin's questions before anything is measured: which
cases a test kind has (:meth:`~CaseSelection.cases_for`, the parametrisation), in which
order the server configs run, which cases the selected items want measured
(:meth:`~CaseSelection.select`: a shard's, ``-k``'s), and which servers an item needs up
(:meth:`~CaseSelection.needed_configs`: when each may stop). The measurer and the pool
read what was selected from it; it starts nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property

from specperf.analysis.judge.item_checks import ITEM_KINDS
from specperf.config.profile import Profile
from specperf.config.server_configs import ServerConfig, pinning_refusal
from specperf.engine.scenarios import WORKLOAD_SCENARIO_KINDS, ScenarioRunner
from specperf.engine.soak import ramp_case, soak_case
from specperf.schemas import Case

__all__ = [
    "JUDGED_KINDS",
    "KINDS",
    "SCENARIO_KINDS",
    "TIME_SCENARIO_KINDS",
    "CaseSelection",
]

#: Test kinds, in the order their items run within a case (the judge's, one home).
KINDS = ITEM_KINDS
#: Kinds whose checks are read from the case's comparison with the baseline (and its paired
#: gain): with [compare] confirm_after_matrix their items run after every config's cases,
#: once the flags raised meanwhile are measured again (CaseSelection.judged_after_matrix).
JUDGED_KINDS = ("tpot_gain", "latency", "throughput")
#: Kinds that are a scenario of their own ([scenarios] in the profile), not measured by
#: the case measurer: the workload shapes on their own servers (specperf.engine.scenarios)
#: and the time-structured ones on their config's server (specperf.engine.soak).
TIME_SCENARIO_KINDS = ("soak", "ramp")
SCENARIO_KINDS = (*WORKLOAD_SCENARIO_KINDS, *TIME_SCENARIO_KINDS)


@dataclass
class CaseSelection:
    #: The run's profile, loaded when first asked for: selecting no perf item (a run of
    #: other tests with the plugin on) must not need one.
    load_profile: Callable[[], Profile]
    #: The run's workload scenarios (built on first use: most runs have none selected).
    scenarios: Callable[[], ScenarioRunner]
    #: Concurrencies at which a spec config runs paired no-spec trials, given the ones
    #: wanted (the measurer's rule: CaseMeasurer.paired_concurrencies).
    paired_concurrencies: Callable[[ServerConfig, list[int]], list[int]]
    #: --perf-attribute: every spec config that can have one gets a pinned-acceptance twin.
    attribute: bool = False
    #: Concurrencies selected per server config (set after collection).
    wanted: dict[str, set[int]] = field(default_factory=dict)
    #: Cases whose TPOT-gain test was selected (set after collection).
    tpot_gain_wanted: set[Case] = field(default_factory=set)
    #: Server configs with a selected item that is not judged (requests, acceptance): with
    #: confirm_after_matrix their cases are measured by those, in the matrix.
    matrix_configs: set[str] = field(default_factory=set)

    @cached_property
    def profile(self) -> Profile:
        return self.load_profile()

    def ordered_configs(self) -> list[ServerConfig]:
        # The no-spec config runs first: the paired TPOT gain of every spec config
        # needs its measurement at the same concurrency.
        return sorted(self.profile.server_configs, key=lambda c: c.is_spec)

    def cases_for(self, kind: str) -> list[Case]:
        p = self.profile
        if kind in SCENARIO_KINDS:
            if kind in TIME_SCENARIO_KINDS:
                if kind == "soak":
                    return [soak_case(s) for s in p.scenarios.soak]
                return [ramp_case(r) for r in p.scenarios.ramp]
            return self.scenarios().cases(kind)
        out: list[Case] = []
        for cfg in self.ordered_configs():
            gates = p.gates_for(cfg)
            for c in p.concurrencies:
                if kind == "requests":
                    keep = True
                elif kind == "acceptance":
                    keep = cfg.is_spec and gates.acceptance is not None
                elif kind == "tpot_gain":
                    keep = (cfg.is_spec and gates.tpot_gain is not None
                            and c <= gates.tpot_gain.max_concurrency)
                elif kind in ("latency", "throughput"):
                    keep = True  # every case, against the baseline ([compare] rules)
                else:
                    raise ValueError(f"unknown perf case kind {kind!r}; known: {KINDS}")
                if keep:
                    out.append(Case(config_id=cfg.id, concurrency=c))
        return out

    def select(self, items: Iterable[tuple[str, Case]]) -> None:
        """The (kind, case) of every selected perf item: which cases get measured."""
        for kind, case in items:
            if kind in TIME_SCENARIO_KINDS:
                continue  # its own load on its config's server (specperf.engine.soak)
            if kind in SCENARIO_KINDS:  # measured on the scenario's own servers
                self.scenarios().wanted.setdefault(kind, set()).add(case.config_id)
                continue
            self.wanted.setdefault(case.config_id, set()).add(case.concurrency)
            if kind == "tpot_gain":
                self.tpot_gain_wanted.add(case)
            if kind not in JUDGED_KINDS:
                self.matrix_configs.add(case.config_id)

    def attributed_configs(self) -> set[str]:
        """Spec configs measured with a pinned-acceptance twin: those whose profile entry
        says pinned_acceptance, and under --perf-attribute every one that can have one
        (a fixed k, the standard sampler: config.profile.pinning_refusal)."""
        return {c.id for c in self.profile.server_configs
                if c.pinned_acceptance
                or (self.attribute and pinning_refusal(c.speculative_config) is None)}

    def cases_of(self, config_id: str) -> list[Case]:
        """The selected cases of one server config, by concurrency."""
        return [Case(config_id=config_id, concurrency=c)
                for c in sorted(self.wanted.get(config_id, ()))]

    @property
    def cases_total(self) -> int:
        """How many cases the case measurer will measure."""
        return sum(len(cs) for cs in self.wanted.values())

    @property
    def judged_after_matrix(self) -> bool:
        """[compare] confirm_after_matrix, or load.reference = "bracket" (a gain needs the
        no-spec block after its config): flags are measured again after every config's
        cases, so the items that read the comparison run after the matrix."""
        return self.profile.judges_after_matrix

    def needed_configs(self, kind: str, case: Case) -> list[str]:
        """Server configs an item of this kind needs up: its own, and for the paired
        TPOT gain the no-spec config too; a scenario's items none (it starts and stops its
        own). A judged item after the matrix whose config the matrix measured needs only
        the no-spec server, which the configs' fresh starts pair with."""
        if kind in TIME_SCENARIO_KINDS:
            return [case.config_id]
        if kind in SCENARIO_KINDS:
            return []
        nospec = self.profile.nospec
        cfg = self.profile.config(case.config_id)
        wanted = sorted(self.wanted.get(cfg.id, set()) | {case.concurrency})
        # Bracketed, no item needs the no-spec server beside its own: the measurer runs the
        # no-spec blocks on it alone (engine.bracket).
        paired = (nospec is not None and self.profile.load.reference == "beside"
                  and bool(self.paired_concurrencies(cfg, wanted)))
        own = [case.config_id]
        if (self.judged_after_matrix and kind in JUDGED_KINDS
                and case.config_id in self.matrix_configs):
            own = []
        return own + ([nospec.id] if paired and nospec is not None else [])
