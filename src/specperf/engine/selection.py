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
from typing import TYPE_CHECKING

from specperf.analysis.judge.kinds import CaseKind
from specperf.config.profile import Profile
from specperf.config.server_configs import ServerConfig, pinning_refusal
from specperf.engine.kinds import TestKind, TimeScenarioKind, WorkloadScenarioKind
from specperf.engine.scenarios import ScenarioRunner
from specperf.schemas import Case

if TYPE_CHECKING:
    from specperf.engine.after_matrix import AfterMatrix

__all__ = ["CaseSelection"]


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
    #: What waits for every config's cases (engine.after_matrix): which items, and which
    #: configs the matrix's own items measure.
    after_matrix: Callable[[], AfterMatrix]
    #: --perf-attribute: every spec config that can have one gets a pinned-acceptance twin.
    attribute: bool = False
    #: Concurrencies selected per server config (set after collection).
    wanted: dict[str, set[int]] = field(default_factory=dict)
    #: Cases whose TPOT-gain test was selected (set after collection).
    tpot_gain_wanted: set[Case] = field(default_factory=set)

    @cached_property
    def profile(self) -> Profile:
        return self.load_profile()

    def ordered_configs(self) -> list[ServerConfig]:
        # The no-spec config runs first: the paired TPOT gain of every spec config
        # needs its measurement at the same concurrency.
        return sorted(self.profile.server_configs, key=lambda c: c.is_spec)

    def cases_for(self, kind: TestKind) -> list[Case]:
        """The cases of a test kind (specperf.engine.kinds): the parametrisation."""
        if isinstance(kind, CaseKind):
            return kind.cases(self.profile, self.ordered_configs())
        if isinstance(kind, WorkloadScenarioKind):
            return self.scenarios().cases(kind.name)
        return kind.cases(self.profile)

    def select(self, items: Iterable[tuple[TestKind, Case]]) -> None:
        """The (kind, case) of every selected perf item: which cases get measured."""
        for kind, case in items:
            if isinstance(kind, TimeScenarioKind):
                continue  # its own load on its config's server (specperf.engine.soak)
            if isinstance(kind, WorkloadScenarioKind):  # on the scenario's own servers
                self.scenarios().wanted.setdefault(kind.name, set()).add(case.config_id)
                continue
            self.wanted.setdefault(case.config_id, set()).add(case.concurrency)
            if kind.paired:
                self.tpot_gain_wanted.add(case)
            self.after_matrix().selected(kind, case)

    def attributed_configs(self) -> set[str]:
        """Spec configs measured with a pinned-acceptance twin: those whose profile entry
        says pinned_acceptance, and under --perf-attribute every one that can have one
        (a fixed k, the standard sampler: config.server_configs.pinning_refusal)."""
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

    def needed_configs(self, kind: TestKind, case: Case) -> list[str]:
        """Server configs an item of this kind needs up: its own, and for the paired
        TPOT gain the no-spec config too; a scenario's items none (it starts and stops its
        own). A judged item after the matrix whose config the matrix measured needs only
        the no-spec server, which the configs' fresh starts pair with."""
        if isinstance(kind, TimeScenarioKind):
            return [case.config_id]
        if isinstance(kind, WorkloadScenarioKind):
            return []
        nospec = self.profile.nospec
        cfg = self.profile.config(case.config_id)
        wanted = sorted(self.wanted.get(cfg.id, set()) | {case.concurrency})
        # Bracketed, no item needs the no-spec server beside its own: the measurer runs the
        # no-spec blocks on it alone (engine.bracket).
        paired = (nospec is not None and self.profile.load.reference == "beside"
                  and bool(self.paired_concurrencies(cfg, wanted)))
        own = [] if self.after_matrix().measured_before(kind, case) else [case.config_id]
        return own + ([nospec.id] if paired and nospec is not None else [])
