"""A perf run, phase by phase: profile → servers → trials → cases → gate checks → run file.

:class:`PerfSession` orchestrates the phases the plugin hands it (as pytest-benchmark's
session does: collection, the selected items, each item's checks, the end); the work is
its collaborators', built from the profile when first needed:

* :class:`~specperf.engine.selection.CaseSelection` — the case matrix, what the run
  selected from it, which servers an item needs;
* :class:`~specperf.engine.servers.ServerPool` — one vLLM server per server config,
  started lazily, stopped when the caller says so;
* :class:`~specperf.engine.measurer.CaseMeasurer` — a config's cases by the trial plan
  (specperf.engine.trial_plan), memoised;
* :class:`~specperf.engine.after_matrix.AfterMatrix` — what waits for every config's
  cases ([compare] confirm_after_matrix, load.reference = "bracket"), and running it;
* :class:`~specperf.engine.scenarios.ScenarioRunner` and
  :class:`~specperf.engine.soak.TimeScenarioRunner` — the profile's [scenarios];
* :class:`~specperf.engine.baseline_context.BaselineContext` — the baseline and which of
  its cases compare;
* a :class:`~specperf.engine.observer.RunObserver` — whoever shows the run's progress.

An item's kind (specperf.engine.kinds) says what measures it and, for a case kind, its
checks (specperf.analysis.judge.kinds); the run file is put together by
specperf.engine.run_assembly. It knows nothing of pytest: the plugin asks
it for the case matrix, hands it the selected items, asks for gate checks and the run
file, and turns its errors into pytest outcomes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specperf.analysis.judge.kinds import CaseKind
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from specperf.engine import gpu_lock, run_assembly
from specperf.engine.after_matrix import AfterMatrix
from specperf.engine.baseline_context import BaselineContext
from specperf.engine.clock import RunClock
from specperf.engine.datasets import DatasetError, load_prompts, prompts_digest
from specperf.engine.device_fit import memory_refusal
from specperf.engine.kinds import TestKind, TimeScenarioKind
from specperf.engine.measurer import CaseMeasurer, MeasureError
from specperf.engine.observer import LineObserver, RunObserver
from specperf.engine.scenarios import ScenarioRunner
from specperf.engine.selection import CaseSelection
from specperf.engine.server import ServerError, stop_each
from specperf.engine.servers import FaultInjection, ServerPool
from specperf.engine.soak import TimeScenarioRunner
from specperf.engine.trial_plan import RETRY_BATCH, RETRY_CAP_FACTOR
from specperf.engine.trials import TrialRunner
from specperf.schemas import (
    Case,
    CaseResult,
    GateCheck,
    Provenance,
    RunResult,
    ScenarioResult,
    TimeScenarioResults,
)
from specperf.schemas.base import utcnow
from specperf.store.hf_cache import model_revisions
from specperf.store.provenance import collect_provenance

if TYPE_CHECKING:
    from datetime import datetime

__all__ = [
    "RETRY_BATCH",
    "RETRY_CAP_FACTOR",
    "MeasureError",
    "PerfOptions",
    "PerfSession",
    "SessionError",
    "default_run_dir",
]


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
    checks: list[GateCheck] = field(default_factory=list)
    started_at: datetime = field(default_factory=utcnow)
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

    # -- collaborators (built when first needed; `_built` says whether they were) ----

    @cached_property
    def plan(self) -> CaseSelection:
        """The case matrix and what the plugin selected from it (engine.selection)."""
        # Callables: the measurer and the scenarios read the selection, so they are built
        # after it, when the selection first asks for them.
        return CaseSelection(
            lambda: self.profile, scenarios=lambda: self.scenarios,
            paired_concurrencies=lambda cfg, cs: self.measurer.paired_concurrencies(cfg, cs),
            after_matrix=lambda: self.after_matrix, attribute=self.options.attribute)

    @cached_property
    def after_matrix(self) -> AfterMatrix:
        """What waits for every config's cases, and running it (engine.after_matrix)."""
        return AfterMatrix(lambda: self.profile, say=self.say)

    @cached_property
    def pool(self) -> ServerPool:
        return ServerPool(
            self.profile, self.options.run_dir, self.options.models_cache, say=self.say,
            observer=self.view, fault=self.options.fault, clock=self.clock,
            expected_acceptance=lambda cid: self.baselines.expected_acceptance(cid),
            cases_of=self.plan.cases_of,
        )

    @cached_property
    def measurer(self) -> CaseMeasurer:
        runner = TrialRunner(self.profile, self.pool, self.view, self.prompts,
                             self.max_outside_cores, busy_wait_s=self.busy_wait_s,
                             say=self.say, clock=self.clock)
        return CaseMeasurer(
            self.profile, self.pool, runner, self.view, lambda: self.baselines, self.repeats,
            retry_cap=self.retry_cap, say=self.say, wanted=self.plan.wanted,
            tpot_gain_wanted=self.plan.tpot_gain_wanted, clock=self.clock,
            attribute=self.plan.attributed_configs(), after_matrix=self.after_matrix,
        )

    @cached_property
    def scenarios(self) -> ScenarioRunner:
        """The profile's [scenarios], each on its own servers (engine.scenarios)."""
        return ScenarioRunner(self.profile, self.options.run_dir, self.options.models_cache,
                              self.repeats, self.max_outside_cores, busy_wait_s=self.busy_wait_s,
                              say=self.say, clock=self.clock, dataset=self.options.dataset)

    def _built(self, name: str) -> Any:
        """The collaborator ``name`` if the run has needed it, else None (not built now)."""
        return self.__dict__.get(name)

    @property
    def baselines(self) -> BaselineContext:
        """The loaded baseline (:meth:`load_baseline`); before that, none."""
        if self._baselines is None:
            self._baselines = BaselineContext(self.profile)
        return self._baselines

    @baselines.setter
    def baselines(self, ctx: BaselineContext) -> None:
        self._baselines = ctx

    # -- before the first measurement -------------------------------------------

    def begin(self) -> None:
        """Load the baseline, make the run directory, say what the run will do; raises
        BaselineError, ProfileError or SessionError."""
        # The pool refuses unpinned remote code at every server start (every road);
        # here the same check ends a pytest run before anything runs, as a usage error.
        self.profile.check_remote_code()
        self.load_baseline()
        self.options.run_dir.mkdir(parents=True, exist_ok=True)
        self.say(f"specperf: profile {self.profile.name} ({self.profile.source}), run dir "
                 f"{self.options.run_dir}")
        self.say(f"specperf: {self.baselines.note}")
        revisions = self.get_provenance().model_revisions
        if revisions:
            self.say("specperf: hub models: " + ", ".join(
                f"{m} at {r}" for m, r in revisions.items()) + " (the profile's pin, else "
                "the local hub cache's refs/main; docs/profiles.md)")
        self.view.set_cases_total(self.plan.cases_total)
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
        if self.options.attribute and self.profile.load.reference == "bracket":
            raise SessionError(
                f"--perf-attribute: profile {self.profile.name!r} sets [load] reference = "
                "\"bracket\" (one vLLM server at a time), and a pinned-acceptance twin runs "
                "beside its config's server — fix: drop --perf-attribute, or use reference = "
                "\"beside\"")
        # Before any server starts: servers that would be up together on one device and
        # cannot both reserve their share of it (specperf.engine.device_fit).
        why = memory_refusal(self.profile, self.options.baselines_dir,
                             attributed=self.plan.attributed_configs())
        if why is not None:
            raise SessionError(why)
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
        if self._gpu_lock is None and self.get_provenance().accelerator == "gpu":
            self._gpu_lock = gpu_lock.take_for_run(
                f"profile {self.profile.name}, run dir {self.options.run_dir}", self.say)

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
            self._prompts = load_prompts(self.profile, self.options.dataset,
                                         models_cache=self.options.models_cache, say=self.say)
        return self._prompts

    # -- measuring and checking ---------------------------------------------------

    def measure(self, case: Case) -> CaseResult:
        """Every wanted case of this case's server config, measured once (see
        specperf.engine.measurer); raises ServerError or MeasureError."""
        return self.measurer.measure(case)

    def evaluate(self, kind: TestKind, case: Case) -> list[GateCheck]:
        """The checks of one item (measuring its case first if need be); raises
        ServerError or MeasureError (a RuntimeError) when there is nothing to check.

        A case kind's rules are the judge's (specperf.analysis.judge.kinds): requests and
        the acceptance floors exact, everything else the case's comparison (made by
        engine.measurer: against the baseline, and the paired TPOT gain) — what `specperf
        compare` shows for the run file. A scenario kind is measured and judged by its
        runner (specperf.engine.kinds)."""
        if not isinstance(kind, CaseKind):
            scenario_checks = (self.evaluate_time_scenario(kind, case)
                               if isinstance(kind, TimeScenarioKind)
                               else self.scenarios.evaluate(kind.name, case))
            self.checks.extend(scenario_checks)
            return scenario_checks
        result = self.measure(case)
        if self.after_matrix.waits(kind):
            self.after_matrix.run(self.measurer, self.plan)
            result = self.measure(case)  # on both starts, if it was flagged
        if kind.paired and case not in self.measurer.paired:
            why = self.measurer.paired_errors.get(case, "it was not measured")
            raise MeasureError(f"case {case.id}: the paired no-spec measurement failed: {why}")
        ctx = self.baselines
        checks = kind.checks(case, result, self.profile,
                             judged=self.measurer.comparisons.get(case),
                             no_baseline_reason=ctx.no_baseline_reason(case),
                             mismatch=ctx.mismatch(case))
        self.checks.extend(checks)
        return checks

    def abandon_pending(self, *, interrupted: bool) -> None:
        """At the end of the run: flags that no judged item came to measure again keep the
        first start's measurement, and their cases say why (AfterMatrix.abandon)."""
        if self._built("measurer") is not None:
            self.after_matrix.abandon(self.measurer.results, interrupted=interrupted)

    def evaluate_time_scenario(self, kind: TimeScenarioKind, case: Case) -> list[GateCheck]:
        """The profile's soak or ramp of this case, run on its server and judged."""
        runner = TimeScenarioRunner(self.profile, self.pool, self.prompts, say=self.say,
                                    clock=self.clock)
        return kind.run_and_judge(runner, case, self.max_outside_cores,
                                  self.time_scenario_results)

    # -- servers --------------------------------------------------------------------

    def stop_server(self, config_id: str) -> None:
        if self._built("pool") is not None:  # never started one: nothing to stop
            self.pool.stop(config_id)

    def stop_all(self) -> None:
        # The scenarios' servers stop even if one of the matrix's would not.
        try:
            stop_each([(name, getattr(self, name).stop_all) for name in ("pool", "scenarios")
                       if self._built(name) is not None])
        finally:
            if self._gpu_lock is not None:
                gpu_lock.release(self._gpu_lock)
                self._gpu_lock = None

    @property
    def server_errors(self) -> dict[str, ServerError]:
        pool = self._built("pool")
        return pool.errors if pool is not None else {}

    # -- the run file (engine.run_assembly) ------------------------------------------

    @property
    def time_scenarios_ran(self) -> bool:
        return run_assembly.time_scenarios_ran(self.time_scenario_results)

    @property
    def results(self) -> dict[Case, CaseResult]:
        return run_assembly.measured_cases(self._built("measurer"))

    @property
    def scenario_results(self) -> list[ScenarioResult]:
        return run_assembly.scenario_results(self._built("scenarios"))

    def run_result(self) -> RunResult:
        # Read again now: on a run that is not offline, a server's start may have fetched
        # an unpinned model's main and moved refs/main since the run began.
        provenance = self.get_provenance().model_copy(
            update={"model_revisions": model_revisions(self.profile)})
        return run_assembly.assemble_run(
            provenance, run_dir=self.options.run_dir, started_at=self.started_at,
            checks=self.checks, configs=self.plan.ordered_configs(),
            measurer=self._built("measurer"), pool=self._built("pool"),
            scenarios=self._built("scenarios"), baselines=self.baselines,
            compare_rules=self.profile.compare, retry_cap=self.retry_cap,
            time_scenarios=self.time_scenario_results)

    def with_time_breakdown(self, run: RunResult) -> RunResult:
        """``run`` with where the wall time went so far (phases still open count up to now)."""
        return run_assembly.with_time_breakdown(run, self.clock)


def default_run_dir(rootdir: Path, profile: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = Path(profile).stem
    return rootdir / ".specperf" / "runs" / f"{stamp}-{name}-{os.getpid()}"
