"""What the workload scenarios' measurers share (specperf.engine.prefix_cache_scenario,
specperf.engine.segmented_scenarios): the run's setting that
:class:`~specperf.engine.scenarios.ScenarioRunner` hands them, and what they do alike with
it — a scenario's server pool, its trial runner, the fresh-server confirmation of one spec
case, and the cases' TPOT-gain floors.

Fresh-server confirmation is the matrix's (specperf.engine.confirmation, carried out by
:meth:`ScenarioSetting.confirm`): a spec case's FAIL that a fresh start can change (its
TPOT gain, measured from trials; never its hit rate or acceptance, which are counters) is
measured again on a fresh start of its server, with new paired no-spec trials, and the case
records what it did (``CaseResult.confirmation``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from specperf.analysis.judge.follow_up import FollowUp, follow_up_of_checks
from specperf.config.profile import Profile
from specperf.config.server_configs import ServerConfig
from specperf.engine.clock import RESTARTS, RunClock
from specperf.engine.confirmation import confirm_on_fresh_server
from specperf.engine.observer import LineObserver, RunObserver
from specperf.engine.plan_steps import TrialSpec, carry_out
from specperf.engine.server import ServerError, VllmServer
from specperf.engine.servers import ServerPool
from specperf.engine.trials import TrialRunner
from specperf.schemas import Case, FreshServerConfirmation, GateCheck, ScenarioResult

__all__ = ["ScenarioMeasured", "ScenarioSetting", "gain_floors", "started_spec_configs"]

#: A scenario measured: its result and, per spec case id, its checks.
ScenarioMeasured = tuple[ScenarioResult, dict[str, list[GateCheck]]]


@dataclass(frozen=True)
class ScenarioSetting:
    """The run's setting every workload scenario is measured with."""

    profile: Profile
    run_dir: Path
    models_cache: Path
    repeats: int
    max_outside_cores: float
    busy_wait_s: float
    say: Callable[[str], None]
    clock: RunClock
    observer: RunObserver | None
    #: --perf-dataset: the workload's file instead of the profile's (text = "workload").
    dataset: str | None

    def view(self) -> RunObserver:
        """Where the scenario's servers and trials report: the run's observer, else lines."""
        return self.observer or LineObserver(self.say)

    def pool(self, prof: Profile, name: str, view: RunObserver) -> ServerPool:
        """A pool of servers started from ``prof``: logs in the scenario's own directory
        (``<run dir>/scenarios/<name>/servers/``); caches and temp files in the run's, as
        the main servers' (specperf.engine.server.server_tmpdir keeps TMPDIR short
        enough)."""
        logs = self.run_dir / "scenarios" / name / "servers"
        return ServerPool(prof, self.run_dir, self.models_cache, say=self.say, observer=view,
                          clock=self.clock, log_dir=logs)

    def trials(self, prof: Profile, pool: ServerPool, view: RunObserver,
               prompts: Callable[[], list[str]], *,
               record_prefix_cache: bool = False) -> TrialRunner:
        """The scenario's trials: ``prof``'s load on ``pool``'s servers, each trial sending
        ``prompts()``, under the run's contention guard."""
        return TrialRunner(prof, pool, view, prompts, self.max_outside_cores,
                           busy_wait_s=self.busy_wait_s, say=self.say, clock=self.clock,
                           record_prefix_cache=record_prefix_cache)

    def confirm(self, kind: str, config_id: str, c: int, per_round: int, *,
                restart: Callable[[], None], run_rounds: Callable[[int], None],
                judge: Callable[[], list[GateCheck]],
                trials: Callable[[], int]) -> FreshServerConfirmation | None:
        """The matrix's fresh-server confirmation (specperf.engine.confirmation) for one
        spec config of a scenario: judged now, and when a FAIL a fresh start can change
        stands, its server started again (``restart``), measured again for as many
        rounds (``run_rounds``; a round is ``per_round`` trials) and judged on both
        starts. Returns the record for the config's case (None: nothing was flagged)."""

        def judged(concs: tuple[int, ...]) -> Mapping[int, FollowUp | None]:
            return {c: follow_up_of_checks(judge(), trials())}

        def restarted(concs: tuple[int, ...]) -> str | None:
            try:
                with self.clock.phase(RESTARTS, whole=True):
                    restart()
            except (ServerError, RuntimeError) as exc:
                return exc.cause if isinstance(exc, ServerError) else str(exc)
            return None

        def measured(specs: tuple[TrialSpec, ...]) -> None:
            # The plan asks for as many trials as the first start had; a round is
            # ``per_round`` of them (one a segment).
            run_rounds(max(len(specs) // per_round, 1))

        done = carry_out(
            confirm_on_fresh_server(config_id, (c,)), run_trials=measured, judge=judged,
            restart=restarted,
            say=lambda line: self.say(line.replace("specperf: ", f"specperf: scenario {kind}: ",
                                                   1)))
        return done.get(c)


class _OnServer(Protocol):
    server: VllmServer | None


_Measured = TypeVar("_Measured", bound=_OnServer)


def started_spec_configs(prof: Profile, wanted: set[str] | None, concurrency: int,
                         measured: Callable[[ServerConfig], _Measured],
                         start: Callable[[str], VllmServer],
                         errors: dict[str, str]) -> list[_Measured]:
    """Each spec config of ``prof`` the run selected (``wanted``; None: all), as
    ``measured(config)`` with its server started by ``start(config id)``. A config whose
    server does not start is left out, its error recorded under its case's id: the others
    are still measured (one bad draft does not cost the scenario)."""
    started = []
    for cfg in prof.server_configs:
        if not cfg.is_spec or (wanted is not None and cfg.id not in wanted):
            continue
        run = measured(cfg)
        try:
            run.server = start(cfg.id)
        except (ServerError, RuntimeError) as exc:
            errors[Case(config_id=cfg.id, concurrency=concurrency).id] = str(exc)
            continue
        started.append(run)
    return started


def gain_floors(prof: Profile, result: ScenarioResult) -> dict[str, float | None]:
    """Per case id of ``result``, the TPOT-gain floor its config's gates set at its
    concurrency (None: a no-spec case, or no gain gate up to there)."""
    floors: dict[str, float | None] = {}
    for cr in result.cases:
        cfg = prof.config(cr.case.config_id)
        g = prof.gates_for(cfg).tpot_gain
        floors[cr.case.id] = (g.ratio_at(cr.case.concurrency)
                              if cfg.is_spec and g is not None
                              and cr.case.concurrency <= g.max_concurrency else None)
    return floors
