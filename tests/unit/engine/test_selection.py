"""The case matrix and the selection (specperf.engine.selection), as a session wires it:
the CI profile with the no-spec config listed last and one scenario of each sort, nothing
started."""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.analysis.judge.kinds import ACCEPTANCE, LATENCY, REQUESTS, THROUGHPUT, TPOT_GAIN
from specperf.config.profile import ProfileError
from specperf.engine.kinds import PREFIX_CACHE, RAMP, SOAK
from specperf.engine.session import PerfOptions, PerfSession
from specperf.schemas import Case
from tests.support import CPU_CI_PROFILE, REPO_ROOT

NOSPEC = '[[server_configs]]\nid = "nospec"\n\n'
SCENARIOS = """
[scenarios.prefix_cache]
requests = 3
concurrency = 2

[[scenarios.soak]]
config = "draft-k2"
duration_s = 50
window_s = 10

[[scenarios.ramp]]
config = "self-k3"

"""


def session(tmp_path: Path, *, attribute: bool = False) -> PerfSession:
    text = CPU_CI_PROFILE.read_text()
    assert NOSPEC in text
    at = text.index("[[server_configs]]")
    text = text[:at] + SCENARIOS + text[at:].replace(NOSPEC, "") + "\n" + NOSPEC
    path = tmp_path / "ci-nospec-last.toml"
    path.write_text(text)
    return PerfSession(options=PerfOptions(
        profile=str(path), rootdir=REPO_ROOT, run_dir=tmp_path / "run", json_path=None,
        baselines_dir=tmp_path / "baselines", update_baselines=False, force=False,
        repeats=None, dataset=None, models_cache=tmp_path / "models", attribute=attribute),
        say=lambda _m: None)


def ids(cases: list[Case]) -> list[str]:
    return [c.id for c in cases]


def test_each_kind_has_the_cases_its_gates_give_the_no_spec_config_first(
        tmp_path: Path) -> None:
    plan = session(tmp_path).plan
    assert [c.id for c in plan.profile.server_configs][-1] == "nospec"
    assert [c.id for c in plan.ordered_configs()] == ["nospec", "draft-k2", "self-k3"]
    every = ["nospec-c1", "nospec-c2", "draft-k2-c1", "draft-k2-c2", "self-k3-c1", "self-k3-c2"]
    assert ids(plan.cases_for(REQUESTS)) == every
    assert ids(plan.cases_for(LATENCY)) == ids(plan.cases_for(THROUGHPUT)) == every
    assert ids(plan.cases_for(ACCEPTANCE)) == every[2:]  # spec configs with a floor
    assert ids(plan.cases_for(TPOT_GAIN)) == ["draft-k2-c1", "self-k3-c1"]  # c ≤ 1
    # Scenarios: the spec configs at the scenario's concurrency; soak and ramp their own.
    assert ids(plan.cases_for(PREFIX_CACHE)) == ["draft-k2-c2", "self-k3-c2"]
    assert ids(plan.cases_for(SOAK)) == ["draft-k2-c1"]
    assert ids(plan.cases_for(RAMP)) == ["self-k3-c1"]


def test_the_selected_items_decide_what_is_measured(tmp_path: Path) -> None:
    ps = session(tmp_path)
    plan = ps.plan
    nospec1, draft1, self2 = (Case(config_id="nospec", concurrency=1),
                              Case(config_id="draft-k2", concurrency=1),
                              Case(config_id="self-k3", concurrency=2))
    plan.select([(REQUESTS, nospec1), (TPOT_GAIN, draft1), (LATENCY, self2),
                 (PREFIX_CACHE, Case(config_id="draft-k2", concurrency=2)),
                 (SOAK, draft1)])
    assert plan.wanted == {"nospec": {1}, "draft-k2": {1}, "self-k3": {2}}
    assert plan.tpot_gain_wanted == {draft1}
    # Only the requests item is measured in the matrix; the others read the comparison.
    assert ps.after_matrix.matrix_configs == {"nospec"}
    assert ps.scenarios.wanted == {"prefix_cache": {"draft-k2"}}
    assert plan.cases_of("self-k3") == [self2] and plan.cases_of("nospec-x") == []
    assert plan.cases_total == 3
    # What the measurer is built with is the selection itself, not a copy of it.
    assert ps.measurer.wanted is plan.wanted
    assert ps.measurer.tpot_gain_wanted is plan.tpot_gain_wanted


def test_judged_items_after_the_matrix_keep_only_the_no_spec_server_up(tmp_path: Path) -> None:
    plan = session(tmp_path).plan
    c1 = Case(config_id="draft-k2", concurrency=1)
    plan.select([(REQUESTS, c1), (TPOT_GAIN, c1), (LATENCY, c1)])
    at_once = {k.name: plan.needed_configs(k, c1) for k in (REQUESTS, TPOT_GAIN, LATENCY)}
    assert at_once == {k: ["draft-k2", "nospec"] for k in at_once}
    plan.profile.compare.confirm_after_matrix = True
    assert plan.after_matrix().applies
    later = {k.name: plan.needed_configs(k, c1) for k in (REQUESTS, TPOT_GAIN, LATENCY)}
    # The matrix item measures draft-k2; the judged ones need only the no-spec server its
    # fresh start would pair with.
    assert later == {"requests": ["draft-k2", "nospec"], "tpot_gain": ["nospec"],
                     "latency": ["nospec"]}
    # A config only judged items select is measured by them: they need its server.
    alone = session(tmp_path).plan
    alone.profile.compare.confirm_after_matrix = True
    alone.select([(LATENCY, c1)])
    assert alone.needed_configs(LATENCY, c1) == ["draft-k2"]
    # A config with no paired TPOT gain selected needs no no-spec server.
    self1 = Case(config_id="self-k3", concurrency=1)
    assert alone.needed_configs(REQUESTS, self1) == ["self-k3"]


def test_bracketed_no_item_needs_the_no_spec_server_beside_a_spec_one(tmp_path: Path) -> None:
    """[load] reference = "bracket": the measurer runs the no-spec blocks on that server
    alone, so no spec item keeps it up; the judged items run after the matrix (their
    gains need the block after their config) whatever confirm_after_matrix says."""
    plan = session(tmp_path).plan
    # Load is frozen: the profile's own copy, as a profile with the key would load it.
    load = plan.profile.load.model_copy(update={"reference": "bracket"})
    object.__setattr__(plan.profile, "load", load)
    assert not plan.profile.compare.confirm_after_matrix and plan.after_matrix().applies
    c1 = Case(config_id="draft-k2", concurrency=1)
    plan.select([(REQUESTS, c1), (TPOT_GAIN, c1), (LATENCY, c1)])
    needed = {k.name: plan.needed_configs(k, c1) for k in (REQUESTS, TPOT_GAIN, LATENCY)}
    assert needed == {"requests": ["draft-k2"], "tpot_gain": [], "latency": []}
    # The paired concurrencies are still the bracketed ones: the blocks measure there.
    assert plan.paired_concurrencies(plan.profile.config("draft-k2"), [1, 2]) == [1]


def test_a_scenario_item_needs_its_config_or_no_server_of_the_matrix(tmp_path: Path) -> None:
    plan = session(tmp_path).plan
    draft2 = Case(config_id="draft-k2", concurrency=2)
    assert plan.needed_configs(SOAK, Case(config_id="draft-k2", concurrency=1)) == ["draft-k2"]
    assert plan.needed_configs(PREFIX_CACHE, draft2) == []  # starts and stops its own


def test_attribute_gives_every_fixed_k_spec_config_a_twin(tmp_path: Path) -> None:
    # cpu-ci: draft-k2 and self-k3 are fixed-k spec configs; nospec has nothing to pin.
    assert session(tmp_path, attribute=True).plan.attributed_configs() == {"draft-k2",
                                                                           "self-k3"}
    assert session(tmp_path).plan.attributed_configs() == set()


def test_selecting_no_perf_item_needs_no_profile(tmp_path: Path) -> None:
    """Other tests run with the plugin on: the plugin hands over an empty selection."""
    ps = PerfSession(options=PerfOptions(
        profile="no-such-profile", rootdir=tmp_path, run_dir=tmp_path / "run", json_path=None,
        baselines_dir=tmp_path / "b", update_baselines=False, force=False, repeats=None,
        dataset=None, models_cache=tmp_path / "m"), say=lambda _m: None)
    ps.plan.select([])
    assert ps.plan.cases_total == 0 and ps.plan.wanted == {}
    with pytest.raises(ProfileError, match="no profile named 'no-such-profile'"):
        ps.plan.ordered_configs()
