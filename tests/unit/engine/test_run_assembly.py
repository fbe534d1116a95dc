"""The run file put together (specperf.engine.run_assembly) from a session's real
collaborators, built from the CI profile and filled as a run fills them; no server."""

from __future__ import annotations

from pathlib import Path

from specperf.engine.clock import TRIALS, RunClock
from specperf.engine.run_assembly import assemble_run, with_time_breakdown
from specperf.engine.servers import ServerPool
from specperf.engine.session import PerfOptions, PerfSession
from specperf.schemas import (
    Case,
    RunResult,
    ScenarioResult,
    ServerRecord,
    TimeScenarioResults,
)
from tests.support import CPU_CI_PROFILE, REPO_ROOT, T0, make_case, make_provenance


def session(tmp_path: Path) -> PerfSession:
    return PerfSession(options=PerfOptions(
        profile=str(CPU_CI_PROFILE), rootdir=REPO_ROOT, run_dir=tmp_path / "run",
        json_path=None, baselines_dir=tmp_path / "baselines", update_baselines=False,
        force=False, repeats=None, dataset=None, models_cache=tmp_path / "models"),
        say=lambda _m: None)


def assembled(ps: PerfSession, *, built: bool) -> RunResult:
    return assemble_run(
        make_provenance(vllm_version="0.0.found-at-start"), run_dir=ps.options.run_dir,
        started_at=T0, checks=[], configs=ps.plan.ordered_configs(),
        measurer=ps.measurer if built else None, pool=ps.pool if built else None,
        scenarios=ps.scenarios if built else None, baselines=ps.baselines,
        compare_rules=ps.profile.compare, retry_cap=7,
        time_scenarios=TimeScenarioResults())


def record(config_id: str) -> ServerRecord:
    return ServerRecord(config_id=config_id, argv=["vllm", "serve"], log_path="x.log",
                        vllm_version="0.32.0")


def test_a_run_that_built_no_collaborator_has_only_its_options(tmp_path: Path) -> None:
    ps = session(tmp_path)
    run = assembled(ps, built=False)
    assert run.cases == [] and run.servers == [] and run.scenarios == []
    assert run.paired_nospec == {} and run.tpot_gain_floors == {} and run.pinned_rates == {}
    assert run.time_scenarios is None  # none ran: absent from the file, not empty
    assert run.provenance.vllm_version == "0.0.found-at-start"
    assert run.run_dir == str(tmp_path / "run") and run.started_at == T0
    assert run.retry_inconclusive == 7 and run.baseline_note == ps.baselines.note
    assert "measurer" not in ps.__dict__ and "pool" not in ps.__dict__  # none built to ask


def test_the_cases_in_the_order_they_ran_and_every_server_start(tmp_path: Path) -> None:
    ps = session(tmp_path)
    m = ps.measurer
    for config_id, c in (("draft-k2", 2), ("gone", 1), ("draft-k2", 1), ("nospec", 1)):
        m.results[Case(config_id=config_id, concurrency=c)] = make_case(
            config_id, c, spec=config_id != "nospec")
    draft1 = Case(config_id="draft-k2", concurrency=1)
    m.paired[draft1] = make_case("nospec", 1, spec=False)
    m.pinned[draft1] = make_case("draft-k2", 1)
    m.pinned_rates["draft-k2"] = [0.5, 0.25]
    ps.pool.records["nospec"] = record("nospec")
    scenario_pool = ServerPool(ps.profile, tmp_path / "s", tmp_path / "models")
    scenario_pool.records["draft-k2"] = record("draft-k2")
    ps.scenarios.pools["prefix_cache"] = scenario_pool
    ps.scenarios.results["prefix_cache"] = ScenarioResult(kind="prefix_cache")

    run = assembled(ps, built=True)
    # The no-spec config ran first, then the profile's order; a config the profile no
    # longer has goes last.
    assert [c.case.id for c in run.cases] == ["nospec-c1", "draft-k2-c1", "draft-k2-c2",
                                              "gone-c1"]
    assert run.provenance.vllm_version == "0.32.0"  # what the servers said they run
    assert [s.config_id for s in run.servers] == ["nospec", "draft-k2@prefix_cache"]
    assert scenario_pool.records["draft-k2"].config_id == "draft-k2"  # renamed in the file only
    assert list(run.paired_nospec) == ["draft-k2-c1"]
    assert run.tpot_gain_floors == {"draft-k2-c1": m.gain_floor(draft1)}
    assert run.tpot_gain_floors["draft-k2-c1"] == 0.2  # cpu-ci: min_ratio at c = 1
    assert list(run.pinned_acceptance) == ["draft-k2-c1"]
    assert run.pinned_rates == {"draft-k2": [0.5, 0.25]}
    assert [s.kind for s in run.scenarios] == ["prefix_cache"]


def test_the_time_breakdown_is_stamped_on_a_copy(tmp_path: Path) -> None:
    now = [0.0]
    clock = RunClock(now=lambda: now[0])
    with clock.phase(TRIALS):
        now[0] = 30.0
    now[0] = 40.0
    run = assembled(session(tmp_path), built=False)
    stamped = with_time_breakdown(run, clock)
    assert run.time_breakdown is None
    assert stamped.time_breakdown is not None
    assert (stamped.time_breakdown.wall_s, stamped.time_breakdown.trials_s,
            stamped.time_breakdown.other_s) == (40.0, 30.0, 10.0)
