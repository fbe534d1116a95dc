"""A perf run, assembled: profile → servers → trials → cases → gate checks → run file.

:class:`PerfSession` is a thin facade over the collaborators that do the work, built
from the profile when first needed:

* :class:`~specperf.engine.servers.ServerPool` — one vLLM server per server config,
  started lazily, stopped when the caller says so;
* :class:`~specperf.engine.measurer.CaseMeasurer` — a config's cases by the trial plan
  (specperf.engine.trial_plan), memoised;
* :class:`~specperf.engine.baseline_context.BaselineContext` — the baseline and which of
  its cases compare;
* a :class:`~specperf.engine.observer.RunObserver` — whoever shows the run's progress.

It knows nothing of pytest: the plugin asks it for the case matrix, hands it the selected
items, asks for gate checks and the run file, and turns its errors into pytest outcomes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from specperf.analysis.judge.item_checks import ITEM_KINDS, item_checks
from specperf.config import settings
from specperf.config.profile import (
    Profile,
    ServerConfig,
    load_profile,
    pinning_refusal,
)
from specperf.engine import gpu_lock
from specperf.engine.baseline_context import BaselineContext
from specperf.engine.clock import RunClock
from specperf.engine.datasets import DatasetError, load_prompts, prompts_digest
from specperf.engine.measurer import CaseMeasurer, MeasureError
from specperf.engine.observer import LineObserver, RunObserver
from specperf.engine.scenarios import WORKLOAD_SCENARIO_KINDS, ScenarioRunner
from specperf.engine.server import ServerError, stop_each
from specperf.engine.servers import FaultInjection, ServerPool
from specperf.engine.soak import TimeScenarioRunner, ramp_case, soak_case
from specperf.engine.trial_plan import RETRY_BATCH, RETRY_CAP_FACTOR
from specperf.engine.trials import TrialRunner
from specperf.schemas import (
    Baseline,
    Case,
    CaseResult,
    GateCheck,
    Provenance,
    RunResult,
    ScenarioResult,
    ServerRecord,
    TimeScenarioResults,
    utcnow,
)
from specperf.store.provenance import collect_provenance

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "JUDGED_KINDS",
    "KINDS",
    "RETRY_BATCH",
    "SCENARIO_KINDS",
    "TIME_SCENARIO_KINDS",
    "RETRY_CAP_FACTOR",
    "MeasureError",
    "PerfOptions",
    "PerfSession",
    "SessionError",
    "default_run_dir",
]

#: Test kinds, in the order their items run within a case (the judge's, one home).
KINDS = ITEM_KINDS
#: Kinds whose checks are read from the case's comparison with the baseline (and its paired
#: gain): with [compare] confirm_after_matrix their items run after every config's cases,
#: once the flags raised meanwhile are measured again (PerfSession.judged_after_matrix).
JUDGED_KINDS = ("tpot_gain", "latency", "throughput")
#: Kinds that are a scenario of their own ([scenarios] in the profile), not measured by
#: the case measurer: the workload shapes on their own servers (specperf.engine.scenarios)
#: and the time-structured ones on their config's server (specperf.engine.soak).
TIME_SCENARIO_KINDS = ("soak", "ramp")
SCENARIO_KINDS = (*WORKLOAD_SCENARIO_KINDS, *TIME_SCENARIO_KINDS)


class SessionError(ValueError):
    """The run cannot go as asked (an option that contradicts the profile); the message
    says what to write instead."""


@dataclass
class PerfOptions:
    profile: str
    rootdir: Path
    run_dir: Path
    json_path: Path | None
    baselines_dir: Path
    update_baselines: bool
    force: bool
    repeats: int | None
    dataset: str | None
    models_cache: Path
    #: --perf-max-outside-cores: replaces the profile's load.max_outside_cores (≤ 0 = off).
    max_outside_cores: float | None = None
    #: --perf-busy-wait: replaces the profile's load.busy_wait_s (0 = don't wait).
    busy_wait_s: float | None = None
    #: --perf-retry-inconclusive: None off; 0 the default cap (RETRY_CAP_FACTOR × repeats);
    #: else the most trials a case may get.
    retry_inconclusive: int | None = 0
    #: Gate experiments only: load through a delaying proxy (SPECPERF_PROXY_DELAY_MS).
    fault: FaultInjection | None = None
    #: --perf-attribute: every spec config that can have one gets a pinned-acceptance twin.
    attribute: bool = False


@dataclass
class PerfSession:
    options: PerfOptions
    say: Callable[[str], None] = print
    #: What the user sees of servers starting and trials running (plain lines by default).
    progress: RunObserver | None = None
    #: Concurrencies selected per server config (set after collection).
    wanted: dict[str, set[int]] = field(default_factory=dict)
    #: Cases whose TPOT-gain test was selected (set after collection).
    tpot_gain_wanted: set[Case] = field(default_factory=set)
    #: Server configs with a selected item that is not judged (requests, acceptance): with
    #: confirm_after_matrix their cases are measured by those, in the matrix.
    matrix_configs: set[str] = field(default_factory=set)
    checks: list[GateCheck] = field(default_factory=list)
    started_at: object = field(default_factory=utcnow)
    #: Where the run's wall time goes (the pool, the trials and the measurer charge it).
    clock: RunClock = field(default_factory=RunClock)
    _baselines: BaselineContext | None = None
    _provenance: Provenance | None = None
    #: The GPU machine lock this run holds (:meth:`lock_machine`).
    _gpu_lock: Path | None = None
    _prompts: list[str] | None = None
    #: What the soak and ramp scenarios measured, in the order they ran.
    time_scenario_results: TimeScenarioResults = field(default_factory=TimeScenarioResults)

    def __post_init__(self) -> None:
        if self.progress is None:
            self.progress = LineObserver(self.say)

    @property
    def view(self) -> RunObserver:
        assert self.progress is not None
        return self.progress

    # -- the profile and its options ---------------------------------------------

    @cached_property
    def profile(self) -> Profile:
        return load_profile(self.options.profile, self.options.rootdir)

    @property
    def repeats(self) -> int:
        return self.options.repeats or self.profile.repeats

    @property
    def max_outside_cores(self) -> float:
        """The contention guard's limit: the option, else the profile's (≤ 0 = off)."""
        opt = self.options.max_outside_cores
        return self.profile.load.max_outside_cores if opt is None else opt

    @property
    def busy_wait_s(self) -> float:
        """Most seconds a trial waits for a quiet machine: the option, else the profile's."""
        opt = self.options.busy_wait_s
        return self.profile.load.busy_wait_s if opt is None else opt

    @property
    def retry_cap(self) -> int | None:
        """Most trials per case under --perf-retry-inconclusive; None when it is off."""
        opt = self.options.retry_inconclusive
        if opt is None:
            return None
        return opt or RETRY_CAP_FACTOR * self.repeats

    # -- collaborators ------------------------------------------------------------

    @cached_property
    def pool(self) -> ServerPool:
        return ServerPool(
            self.profile, self.options.run_dir, self.options.models_cache, say=self.say,
            observer=self.view, fault=self.options.fault, clock=self.clock,
            expected_acceptance=lambda cid: self.baselines.expected_acceptance(cid),
            cases_of=lambda cid: [Case(config_id=cid, concurrency=c)
                                  for c in sorted(self.wanted.get(cid, ()))],
        )

    @cached_property
    def measurer(self) -> CaseMeasurer:
        runner = TrialRunner(self.profile, self.pool, self.view, self.prompts,
                             self.max_outside_cores, busy_wait_s=self.busy_wait_s,
                             say=self.say, clock=self.clock)
        return CaseMeasurer(
            self.profile, self.pool, runner, self.view, lambda: self.baselines, self.repeats,
            retry_cap=self.retry_cap, say=self.say, wanted=self.wanted,
            tpot_gain_wanted=self.tpot_gain_wanted, clock=self.clock,
            attribute=self.attributed_configs(),
        )

    @cached_property
    def scenarios(self) -> ScenarioRunner:
        """The profile's [scenarios], each on its own servers (engine.scenarios)."""
        return ScenarioRunner(self.profile, self.options.run_dir, self.options.models_cache,
                              self.repeats, self.max_outside_cores, busy_wait_s=self.busy_wait_s,
                              say=self.say, clock=self.clock, dataset=self.options.dataset)

    def attributed_configs(self) -> set[str]:
        """Spec configs measured with a pinned-acceptance twin: those whose profile entry
        says pinned_acceptance, and under --perf-attribute every one that can have one
        (a fixed k, the standard sampler: config.profile.pinning_refusal)."""
        return {c.id for c in self.profile.server_configs
                if c.pinned_acceptance
                or (self.options.attribute and pinning_refusal(c.speculative_config) is None)}

    @property
    def baselines(self) -> BaselineContext:
        """The loaded baseline (:meth:`load_baseline`); before that, none."""
        if self._baselines is None:
            self._baselines = BaselineContext(self.profile)
        return self._baselines

    @baselines.setter
    def baselines(self, ctx: BaselineContext) -> None:
        self._baselines = ctx

    # -- the case matrix ----------------------------------------------------------

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
            return self.scenarios.cases(kind)
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
                self.scenarios.wanted.setdefault(kind, set()).add(case.config_id)
                continue
            self.wanted.setdefault(case.config_id, set()).add(case.concurrency)
            if kind == "tpot_gain":
                self.tpot_gain_wanted.add(case)
            if kind not in JUDGED_KINDS:
                self.matrix_configs.add(case.config_id)

    @property
    def judged_after_matrix(self) -> bool:
        """[compare] confirm_after_matrix: flags are measured again after every config's
        cases, so the items that read the comparison run after the matrix."""
        return self.profile.compare.confirm_after_matrix

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
        paired = nospec is not None and bool(self.measurer.paired_concurrencies(cfg, wanted))
        own = [case.config_id]
        if (self.judged_after_matrix and kind in JUDGED_KINDS
                and case.config_id in self.matrix_configs):
            own = []
        return own + ([nospec.id] if paired and nospec is not None else [])

    # -- before the first measurement -------------------------------------------

    def begin(self) -> None:
        """Load the baseline, make the run directory, say what the run will do; raises
        BaselineError, ProfileError or SessionError."""
        self.profile.check_remote_code()  # before any server: unpinned remote code is refused
        self.load_baseline()
        self.options.run_dir.mkdir(parents=True, exist_ok=True)
        self.say(f"specperf: profile {self.profile.name} ({self.profile.source}), run dir "
                 f"{self.options.run_dir}")
        self.say(f"specperf: {self.baselines.note}")
        self.view.set_cases_total(sum(len(cs) for cs in self.wanted.values()))
        self.check_options()
        self.lock_machine()
        cap = self.retry_cap
        if cap is None:
            return
        self.say(f"specperf: a case with an INCONCLUSIVE check gets +{RETRY_BATCH} trials "
                 f"at a time while its server is up, up to {cap} per case "
                 "(--perf-retry-inconclusive)")

    def check_options(self) -> None:
        """Options that contradict the profile; raises SessionError (the plugin calls this
        at collection, so `--co` already refuses them)."""
        cap = self.retry_cap
        if cap is not None and cap <= self.repeats:
            raise SessionError(
                f"--perf-retry-inconclusive={cap}: the cap is the most trials a case may "
                f"get, and every case already gets {self.repeats} (repeats) — give a larger "
                "cap, or none for the default "
                f"({RETRY_CAP_FACTOR} × repeats = {RETRY_CAP_FACTOR * self.repeats})")
        fault = self.options.fault
        if fault is not None and fault.config_ids:
            known = {c.id for c in self.profile.server_configs}
            unknown = sorted(set(fault.config_ids) - known)
            if unknown:
                raise SessionError(
                    f"environment variable SPECPERF_PROXY_CONFIGS names server config(s) "
                    f"{', '.join(unknown)} that profile {self.profile.name!r} does not have — "
                    f"fix: use ids of {', '.join(sorted(known))}, or unset it")

    def lock_machine(self) -> None:
        """A GPU run takes the machine's lock before its first server (held until
        :meth:`stop_all`); raises gpu_lock.GpuLocked when another run holds it."""
        if self._gpu_lock is not None or self.get_provenance().accelerator != "gpu":
            return
        env = settings.current()
        where = env.gpu_lock
        if where is not None and where.strip().lower() in {"off", "0", "false", "no"}:
            return
        path = Path(where).expanduser() if where else gpu_lock.DEFAULT_PATH
        gpu_lock.acquire(path, env.gpu_lock_wait_s, what=f"profile {self.profile.name}, "
                         f"run dir {self.options.run_dir}")
        self._gpu_lock = path
        self.say(f"specperf: GPU machine lock {path} taken (SPECPERF_GPU_LOCK)")

    def load_baseline(self) -> None:
        """Load this hardware's baseline; raises BaselineError on a bad file."""
        self.baselines = BaselineContext.load(self.profile, self.options.baselines_dir,
                                              self.get_provenance(), self.say)

    def get_provenance(self) -> Provenance:
        if self._provenance is None:
            prov = collect_provenance(self.profile, cwd=self.options.rootdir)
            try:
                digest: str | None = prompts_digest(self.prompts())
            except DatasetError:
                # A missing dataset fails each case with its own message when it runs.
                digest = None
            self._provenance = prov.model_copy(update={"prompts_hash": digest})
        return self._provenance

    def prompts(self) -> list[str]:
        if self._prompts is None:
            self._prompts = load_prompts(self.profile, self.options.dataset)
        return self._prompts

    # -- measuring and checking ---------------------------------------------------

    def measure(self, case: Case) -> CaseResult:
        """Every wanted case of this case's server config, measured once (see
        specperf.engine.measurer); raises ServerError or MeasureError."""
        return self.measurer.measure(case)

    def evaluate(self, kind: str, case: Case) -> list[GateCheck]:
        """The checks of one item (measuring its case first if need be); raises
        ServerError or MeasureError (a RuntimeError) when there is nothing to check.

        The per-kind rules are the judge's (specperf.analysis.judge.item_checks): requests
        and the acceptance floors exact, everything else the case's comparison (made by
        engine.measurer: against the baseline, and the paired TPOT gain) — what `specperf
        compare` shows for the run file."""
        if kind in SCENARIO_KINDS:
            scenario_checks = (self.evaluate_time_scenario(kind, case)
                               if kind in TIME_SCENARIO_KINDS
                               else self.scenarios.evaluate(kind, case))
            self.checks.extend(scenario_checks)
            return scenario_checks
        p = self.profile
        gates = p.gates_for(p.config(case.config_id))
        result = self.measure(case)
        if kind in JUDGED_KINDS and self.judged_after_matrix:
            self.measure_matrix_and_confirm()
            result = self.measure(case)  # on both starts, if it was flagged
        if kind == "tpot_gain" and case not in self.measurer.paired:
            why = self.measurer.paired_errors.get(case, "it was not measured")
            raise MeasureError(f"case {case.id}: the paired no-spec measurement failed: {why}")
        ctx = self.baselines
        checks = item_checks(kind, case, result, load=p.load, acceptance=gates.acceptance,
                             acceptance_exact=p.compare.acceptance_exact,
                             judged=self.measurer.comparisons.get(case),
                             no_baseline_reason=ctx.no_baseline_reason(case),
                             mismatch=ctx.mismatch(case))
        self.checks.extend(checks)
        return checks

    def measure_matrix_and_confirm(self) -> None:
        """Before a judged check under confirm_after_matrix: while a flag waits, every
        selected config not measured yet is measured now (its server stopped after, unless
        it is the no-spec one the others pair with), then every waiting flag is measured
        again on a fresh server. A config that cannot be measured is left to its own
        items, which say why."""
        if not self.measurer.pending:
            return
        nospec = self.profile.nospec
        for cfg in self.ordered_configs():
            concs = self.wanted.get(cfg.id)
            if not concs or self.measurer.measured(cfg.id):
                continue
            try:
                self.measure(Case(config_id=cfg.id, concurrency=min(concs)))
            except (ServerError, MeasureError):
                continue
            finally:
                if nospec is None or cfg.id != nospec.id:
                    self.pool.stop(cfg.id)
        self.measurer.confirm_pending()

    def abandon_pending(self, *, interrupted: bool) -> None:
        """At the end of the run: flags that no judged item came to measure again keep the
        first start's measurement, and their cases say why they were not confirmed."""
        if "measurer" not in self.__dict__:
            return
        self.measurer.abandon_pending(
            "the run was interrupted before the fresh start" if interrupted
            else "no selected check of the case ran after the matrix to measure it again")

    def evaluate_time_scenario(self, kind: str, case: Case) -> list[GateCheck]:
        """The profile's soak or ramp of this case, run on its server and judged."""
        runner = TimeScenarioRunner(self.profile, self.pool, self.prompts, say=self.say,
                                    clock=self.clock)
        return runner.run_and_judge(kind, case, self.max_outside_cores,
                                    self.time_scenario_results)

    # -- servers --------------------------------------------------------------------

    def stop_server(self, config_id: str) -> None:
        if "pool" in self.__dict__:  # never started one: nothing to stop
            self.pool.stop(config_id)

    def stop_all(self) -> None:
        # The scenarios' servers stop even if one of the matrix's would not.
        try:
            stop_each([(name, getattr(self, name).stop_all) for name in ("pool", "scenarios")
                       if name in self.__dict__])
        finally:
            if self._gpu_lock is not None:
                gpu_lock.release(self._gpu_lock)
                self._gpu_lock = None

    @property
    def server_errors(self) -> dict[str, ServerError]:
        return self.pool.errors if "pool" in self.__dict__ else {}

    @property
    def server_records(self) -> dict[str, ServerRecord]:
        return self.pool.records if "pool" in self.__dict__ else {}

    # -- the run file ---------------------------------------------------------------

    @property
    def time_scenarios_ran(self) -> bool:
        return bool(self.time_scenario_results.soak or self.time_scenario_results.ramp)

    @property
    def results(self) -> dict[Case, CaseResult]:
        return self.measurer.results if "measurer" in self.__dict__ else {}

    @property
    def scenario_results(self) -> list[ScenarioResult]:
        return list(self.scenarios.results.values()) if "scenarios" in self.__dict__ else []

    def run_result(self) -> RunResult:
        prov = self.get_provenance()
        versions = {r.vllm_version for r in self.results.values() if r.vllm_version}
        if versions:
            prov = prov.model_copy(update={"vllm_version": sorted(versions)[0]})
        order = {c.id: i for i, c in enumerate(self.ordered_configs())}
        cases = sorted(self.results.values(),
                       key=lambda r: (order.get(r.case.config_id, 99), r.case.concurrency))
        paired = self.measurer.paired if "measurer" in self.__dict__ else {}
        ctx = self.baselines
        return RunResult(
            provenance=prov,
            run_dir=str(self.options.run_dir),
            started_at=self.started_at,  # type: ignore[arg-type]
            finished_at=utcnow(),
            cases=cases,
            checks=self.checks,
            servers=[*self.server_records.values(), *self._scenario_servers()],
            paired_nospec={k.id: v for k, v in paired.items()},
            baseline_path=str(ctx.path) if ctx.path else None,
            baseline_note=ctx.note,
            compare_rules=self.profile.compare,
            retry_inconclusive=self.retry_cap,
            tpot_gain_floors={k.id: floor for k in paired
                              if (floor := self.measurer.gain_floor(k)) is not None},
            scenarios=self.scenario_results,
            time_scenarios=self.time_scenario_results if self.time_scenarios_ran else None,
            pinned_acceptance=({k.id: v for k, v in self.measurer.pinned.items()}
                               if "measurer" in self.__dict__ else {}),
            pinned_rates=(dict(self.measurer.pinned_rates)
                          if "measurer" in self.__dict__ else {}),
        )

    def _scenario_servers(self) -> list[ServerRecord]:
        """The scenarios' server starts, named ``<config>@<scenario>``."""
        if "scenarios" not in self.__dict__:
            return []
        return [r.model_copy(update={"config_id": f"{r.config_id}@{kind}"})
                for kind, pool in self.scenarios.pools.items() for r in pool.records.values()]

    def with_time_breakdown(self, run: RunResult) -> RunResult:
        """``run`` with where the wall time went so far (phases still open count up to now)."""
        return run.model_copy(update={"time_breakdown": self.clock.breakdown()})

    def updated_baseline(self, run: RunResult) -> Baseline:
        """The run's cases over the old baseline's (a `-k` subset keeps the rest)."""
        return self.baselines.updated_baseline(run)


def default_run_dir(rootdir: Path, profile: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = Path(profile).stem
    return rootdir / ".specperf" / "runs" / f"{stamp}-{name}-{os.getpid()}"
