"""The [scenarios] table's soak and ramp: what validates, and bad fields named with a fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.config.profile import ProfileError, load_profile
from tests.support import CPU_CI_PROFILE, REPO_ROOT

CPU_SOAK = REPO_ROOT / "perf_tests" / "profiles" / "cpu-soak.toml"

SOAK = """
[scenarios.soak]
config = "draft-k2"
duration_s = 60
window_s = 10
"""


def _with(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(CPU_CI_PROFILE.read_text() + extra)
    return path


def test_cpu_soak_carries_both_scenarios() -> None:
    p = load_profile(CPU_SOAK)
    assert p.scenarios is not None
    [soak] = p.scenarios.soak
    [ramp] = p.scenarios.ramp
    assert soak.config == ramp.config == "draft-k3"
    assert soak.duration_s >= soak.min_windows * soak.window_s


def test_one_table_or_several(tmp_path: Path) -> None:
    one = load_profile(_with(tmp_path, SOAK))
    assert one.scenarios is not None and len(one.scenarios.soak) == 1
    many = load_profile(_with(tmp_path, SOAK.replace("[scenarios.soak]", "[[scenarios.soak]]")
                              + SOAK.replace("[scenarios.soak]", "[[scenarios.soak]]")
                              .replace("draft-k2", "self-k3")))
    assert many.scenarios is not None
    assert [s.config for s in many.scenarios.soak] == ["draft-k2", "self-k3"]
    assert one.scenarios.ramp == []


def test_scenarios_leave_the_baselines_hash_alone(tmp_path: Path) -> None:
    """Scenarios are judged within their run: adding one keeps the matrix's baselines."""
    assert load_profile(_with(tmp_path, SOAK)).hash() == load_profile(CPU_CI_PROFILE).hash()


@pytest.mark.parametrize("extra, field, words", [
    (SOAK + "windw_s = 5\n", "scenarios.soak[0].windw_s", "allowed here: config, duration_s"),
    (SOAK.replace('"draft-k2"', '"draft-k9"'), "(top level)",
     "scenarios.soak[0].config = 'draft-k9' is not a server config"),
    (SOAK.replace("duration_s = 60", "duration_s = 30"), "scenarios.soak[0]",
     "fewer than min_windows = 5 windows"),
    (SOAK.replace("window_s = 10", "window_s = -1"), "scenarios.soak[0].window_s",
     "greater than 0"),
    (SOAK + "max_tpot_growth_per_hour = nan\n", "scenarios.soak[0].max_tpot_growth_per_hour",
     "finite"),
    (SOAK + "confidence = 1.5\n", "scenarios.soak[0].confidence", "less than 1"),
    (SOAK.replace("[scenarios.soak]", "[[scenarios.soak]]") * 2, "scenarios",
     "two soak scenarios on server config 'draft-k2' at concurrency 1"),
    ('\n[scenarios.ramp]\nconfig = "draft-k2"\nburst_concurrency = 1\n',
     "scenarios.ramp[0].burst_concurrency", "greater than or equal to 2"),
    ('\n[scenarios.ramp]\nconfig = "draft-k2"\nrequests = 0\n',
     "scenarios.ramp[0].requests", "greater than or equal to 1"),
])
def test_bad_scenario_fields_are_named_with_a_fix(tmp_path: Path, extra: str, field: str,
                                                  words: str) -> None:
    path = _with(tmp_path, extra)
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    msg = str(exc.value)
    assert str(path) in msg and words in msg and f"field `{field}`" in msg, msg


def test_a_ramp_needs_a_burst_above_one(tmp_path: Path) -> None:
    path = _with(tmp_path, '\n[scenarios.ramp]\nconfig = "draft-k2"\n')
    path.write_text(path.read_text().replace("concurrencies = [1, 2]", "concurrencies = [1]"))
    with pytest.raises(ProfileError, match="needs a burst above concurrency 1.*fix: set its "
                                           "burst_concurrency"):
        load_profile(path)
