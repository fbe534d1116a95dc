"""What the scenarios' measurers share, without servers: where a scenario's server logs
go, which spec configs it measures when a server will not start, and the TPOT-gain floor
each of its cases is judged against. (Its fresh-server
confirmation is tested through both measurers: test_prefix_cache_scenario,
test_segmented_scenarios.)"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specperf.config.profile_file import load_profile
from specperf.config.server_configs import ServerConfig
from specperf.engine.clock import RunClock
from specperf.engine.scenario_setting import ScenarioSetting, gain_floors, started_spec_configs
from specperf.engine.server import ServerError
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


@dataclass
class _Measured:
    cfg: ServerConfig
    server: object = None


def test_each_selected_spec_config_is_started_and_one_that_will_not_start_is_recorded(
        tmp_path: Path) -> None:
    # cpu-ci: nospec (the reference, started by the measurer itself), draft-k2, self-k3.
    prof = _setting(tmp_path).profile
    started: list[str] = []

    refusal = ServerError("draft-k2", "exited before it was ready", tmp_path / "draft-k2.log",
                          "ValueError: the draft's vocabulary differs from the target's")

    def start(config_id: str) -> object:
        # A stand-in for the pool's start: vLLM cannot be made to refuse one config of two.
        started.append(config_id)
        if config_id == "draft-k2":
            raise refusal
        return f"server of {config_id}"

    errors: dict[str, str] = {}
    specs = started_spec_configs(prof, None, 4, _Measured, start, errors)  # type: ignore[arg-type]
    assert started == ["draft-k2", "self-k3"]
    assert [(s.cfg.id, s.server) for s in specs] == [("self-k3", "server of self-k3")]
    assert errors == {"draft-k2-c4": str(refusal)}
    assert "vLLM server for 'draft-k2' exited before it was ready" in errors["draft-k2-c4"]

    started.clear()
    errors.clear()
    specs = started_spec_configs(prof, {"self-k3"}, 1, _Measured, start, errors)  # type: ignore[arg-type]
    assert started == ["self-k3"] and errors == {}
    assert [s.cfg.id for s in specs] == ["self-k3"]
