"""What the scenarios' measurers share, without servers: where a scenario's server logs
go, and the TPOT-gain floor each of its cases is judged against. (Its fresh-server
confirmation is tested through both measurers: test_prefix_cache_scenario,
test_segmented_scenarios.)"""

from __future__ import annotations

from pathlib import Path

from specperf.config.profile_file import load_profile
from specperf.engine.clock import RunClock
from specperf.engine.scenario_setting import ScenarioSetting, gain_floors
from specperf.schemas import ScenarioResult
from tests.support import CPU_CI_PROFILE, make_case


def _setting(tmp_path: Path) -> ScenarioSetting:
    return ScenarioSetting(load_profile(CPU_CI_PROFILE), tmp_path / "run", tmp_path / "models",
                           repeats=1, max_outside_cores=0.0, busy_wait_s=0.0,
                           say=lambda _: None, clock=RunClock(), observer=None, dataset=None)


def test_a_scenarios_servers_log_in_its_own_directory_beside_the_runs(tmp_path: Path) -> None:
    setting = _setting(tmp_path)
    pool = setting.pool(setting.profile, "segmented", setting.view())
    assert pool.log_dir == tmp_path / "run" / "scenarios" / "segmented" / "servers"
    assert pool.run_dir == tmp_path / "run" and pool.profile is setting.profile


def test_only_spec_cases_within_the_gain_gates_concurrency_get_a_floor(tmp_path: Path) -> None:
    # cpu-ci: [gates.tpot_gain] min_ratio = 0.2 up to max_concurrency = 1.
    prof = _setting(tmp_path).profile
    result = ScenarioResult(kind="prefix_cache", cases=[
        make_case("nospec", 1, spec=False), make_case("draft-k2", 1), make_case("draft-k2", 2)])
    assert gain_floors(prof, result) == {"nospec-c1": None, "draft-k2-c1": 0.2,
                                         "draft-k2-c2": None}
