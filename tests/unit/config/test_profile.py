"""Profiles: the shipped ones validate; bad ones name the file, the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from specperf.config.profile import ProfileError
from specperf.config.profile_file import load_profile
from specperf.config.rules import CompareRules, Direction
from tests.support import CPU_CI_PROFILE, REPO_ROOT

REPO = REPO_ROOT
PROFILES = sorted((REPO / "perf_tests" / "profiles").glob("*.toml"))


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_shipped_profiles_validate(path: Path) -> None:
    p = load_profile(path)
    assert p.name == path.stem
    assert p.sampling.temperature == 0.0


def test_ci_profile_uses_cpu_tinys_models() -> None:
    """The CI profile must exercise exactly the models cpu-tiny ships with."""
    tiny = load_profile(REPO / "perf_tests" / "profiles" / "cpu-tiny.toml")
    ci = load_profile(REPO / "tests" / "profiles" / "cpu-ci.toml")
    assert ci.tiny == tiny.tiny
    assert ci.target == tiny.target


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    """The CI profile with its first ``old`` replaced by ``new``, in tmp_path."""
    path = tmp_path / "p.toml"
    path.write_text(CPU_CI_PROFILE.read_text().replace(old, new, 1))
    return path


#: cpu-ci's own [compare] table, which a written [compare] table must merge with (TOML
#: refuses a table twice).
CPU_CI_COMPARE_TABLE = "[compare]\nmin_baseline_runs = 2\n"


def _write(tmp_path: Path, text: str) -> Path:
    base = (REPO / "tests" / "profiles" / "cpu-ci.toml").read_text()
    if "[compare]\n" in text:
        base = base.replace(CPU_CI_COMPARE_TABLE, "")
        text = text.replace("[compare]\n", CPU_CI_COMPARE_TABLE, 1)
    path = tmp_path / "p.toml"
    path.write_text(base + "\n" + text)
    return path


def test_undefined_tiny_model_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "")
    text = path.read_text().replace('model = "tiny:draft"', 'model = "tiny:drfat"')
    path.write_text(text)
    with pytest.raises(ProfileError, match="drfat"):
        load_profile(path)


def test_duplicate_ids_and_two_nospec_configs_are_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, '[[server_configs]]\nid = "nospec"\n')
    with pytest.raises(ProfileError, match="unique"):
        load_profile(path)
    path = _write(tmp_path, '[[server_configs]]\nid = "nospec2"\n')
    with pytest.raises(ProfileError, match="at most one server config"):
        load_profile(path)


def test_gates_merge_per_config_and_do_not_change_hashes(tmp_path: Path) -> None:
    p = load_profile(REPO / "tests" / "profiles" / "cpu-ci.toml")
    draft = p.config("draft-k2")
    g = p.gates_for(draft)
    assert g.acceptance is not None and g.acceptance.min_rate == 0.05
    assert g.tpot_gain is not None and g.tpot_gain.min_ratio == p.gates.tpot_gain.min_ratio  # type: ignore[union-attr]
    stricter = tmp_path / "p.toml"
    stricter.write_text((REPO / "tests" / "profiles" / "cpu-ci.toml").read_text()
                        .replace("min_rate = 0.05", "min_rate = 0.5"))
    q = load_profile(stricter)
    assert q.hash() == p.hash()
    assert q.config_hash(q.config("draft-k2")) == p.config_hash(draft)


def test_measured_changes_change_only_that_configs_hash(tmp_path: Path) -> None:
    p = load_profile(REPO / "tests" / "profiles" / "cpu-ci.toml")
    changed = tmp_path / "p.toml"
    changed.write_text((REPO / "tests" / "profiles" / "cpu-ci.toml").read_text()
                       .replace("num_speculative_tokens = 2", "num_speculative_tokens = 4"))
    q = load_profile(changed)
    assert q.hash() != p.hash()
    assert q.config_hash(q.config("draft-k2")) != p.config_hash(p.config("draft-k2"))
    assert q.config_hash(q.config("nospec")) == p.config_hash(p.config("nospec"))


def test_a100_profile_encodes_the_published_matrix() -> None:
    p = load_profile(REPO / "perf_tests" / "profiles" / "a100-qwen3-32b.toml")
    assert p.concurrencies == [1, 2, 4, 8, 16, 32, 64]
    spec = [c for c in p.server_configs if c.is_spec]
    assert len(p.server_configs) == 11 and len(spec) == 10
    assert {c.draft_model for c in spec} == {"Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"}
    assert sorted({c.num_speculative_tokens for c in spec}) == [1, 2, 3, 4, 5]
    for c in spec:
        if c.draft_model == "Qwen/Qwen3-1.7B":
            assert "--gpu-memory-utilization" in c.serve_args
    raw = tomllib.loads((REPO / "perf_tests" / "profiles" / "a100-qwen3-32b.toml").read_text())
    assert raw["workload"]["num_prompts"] == 1000


# --------------------------------------------------------------------------- [compare]

COMPARE_TABLE = """
[compare]
alpha = 0.05
budget_tolerance = { output_throughput = 0.2 }

[compare.metrics.tpot]
min_effect = 0.08
direction = "lower"

[compare.metrics.e2e]
enabled = false
"""


def test_compare_table_overrides_only_what_it_names(tmp_path: Path) -> None:
    p = load_profile(_write(tmp_path, COMPARE_TABLE))
    rules = p.compare
    assert rules.alpha == 0.05
    tpot = rules.rule("tpot")
    # Named fields from the table, the rest from TPOT's defaults.
    assert (tpot.min_effect, tpot.direction) == (0.08, Direction.LOWER_IS_BETTER)
    assert (tpot.name, tpot.unit, tpot.statistic) == ("TPOT", "ms", "median")
    assert rules.rule("e2e").enabled is False
    assert rules.rule("ttft") == CompareRules().rule("ttft")
    assert rules.budget("output_throughput") == 0.2
    assert rules.budget("ttft") == CompareRules().budget("ttft")
    # cpu-ci.toml's own acceptance tolerance (0) is kept: the table only adds.
    assert rules.changes() == [
        "TPOT minimum effect 8 % (default 5 %)", "E2E not compared",
        "acceptance_rate minimum effect 0 (default 0.0005)",
        "alpha 0.05 (default 0.01)", "output_throughput budget 20 % (default 15 %)",
    ]


CPU_CI_COMPARE = "[compare.metrics.acceptance_rate]\nmin_effect = 0.0\n"


def test_a_profile_without_compare_gets_the_defaults(tmp_path: Path) -> None:
    text = CPU_CI_PROFILE.read_text()
    assert CPU_CI_COMPARE in text and CPU_CI_COMPARE_TABLE in text  # its [compare] entries
    path = _edited(tmp_path, CPU_CI_COMPARE, "")
    path.write_text(path.read_text().replace(CPU_CI_COMPARE_TABLE, ""))
    p = load_profile(path)
    assert p.compare == CompareRules()
    assert p.compare.changes() == []
    ci = load_profile(CPU_CI_PROFILE)
    assert ci.compare.changes() == ["acceptance_rate minimum effect 0 (default 0.0005)"]


@pytest.mark.parametrize(("table", "field", "fix"), [
    ("[compare.metrics.tpot]\nmin_efect = 0.08\n", "compare.metrics.tpot.min_efect",
     "allowed here: name, unit, direction, statistic, min_effect, enabled"),
    ("[compare]\nalpah = 0.05\n", "compare.alpah", "allowed here: metrics, per_position, alpha"),
    ("[compare.metrics.tpott]\nmin_effect = 0.08\n", "compare",
     "unknown metric(s) tpott under `metrics` — fix: use ttft, tpot, e2e"),
    ('[compare.metrics.tpot]\ndirection = "down"\n', "compare.metrics.tpot.direction",
     'fix: use "lower" or "higher"'),
    ("[compare.metrics.ttft]\nmin_effect = -0.1\n", "compare.metrics.ttft.min_effect",
     "greater than or equal to 0"),
    # Named under its own field, not under the rule that follows it.
    ("[compare.metrics.tpot]\nmin_effect = -0.1\n", "compare.metrics.tpot.min_effect",
     "greater than or equal to 0"),
    ('[compare.metrics.tpot_vs_nospec]\ndirection = "higher"\n', "compare.metrics",
     "spec TPOT / no-spec TPOT, where lower is better — fix: set only its min_effect or "
     "enabled"),
])
def test_bad_compare_table_names_file_field_and_fix(tmp_path: Path, table: str, field: str,
                                                    fix: str) -> None:
    path = _write(tmp_path, table)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: invalid profile (1 problem(s))")
    assert f"field `{field}`:" in msg
    assert fix in msg


def test_tpot_vs_nospec_has_its_own_rule_and_follows_tpot_when_unset(tmp_path: Path) -> None:
    """The gain against this hardware's baseline (spec TPOT / the same run's no-spec TPOT)
    has its own minimum effect; unset — in a profile or in a run file recorded before the
    rule existed — it is the TPOT rule's, so older files are judged as they were."""
    p = load_profile(_write(tmp_path, COMPARE_TABLE))  # TPOT 8 %, no tpot_vs_nospec
    relative = p.compare.rule("tpot_vs_nospec")
    assert (relative.name, relative.min_effect, relative.enabled) == ("TPOT vs no-spec", 0.08, True)
    recorded = {"metrics": {"tpot": {**CompareRules().rule("tpot").model_dump(mode="json"),
                                     "min_effect": 0.15, "enabled": False}}}
    old = CompareRules.model_validate(recorded).rule("tpot_vs_nospec")
    assert (old.min_effect, old.enabled) == (0.15, False)
    own = load_profile(_write(tmp_path, COMPARE_TABLE + "[compare.metrics.tpot_vs_nospec]\n"
                                                        "min_effect = 0.1\n"))
    assert own.compare.rule("tpot_vs_nospec").min_effect == 0.1
    # A table that sets only the switch keeps following TPOT's minimum effect.
    switched = CompareRules.model_validate({"metrics": {"tpot": {"min_effect": 0.2},
                                                        "tpot_vs_nospec": {"enabled": True}}})
    assert switched.rule("tpot_vs_nospec").min_effect == 0.2
    assert own.compare.rule("tpot").min_effect == 0.08
    assert "TPOT vs no-spec minimum effect 10 % (default: TPOT's, 8 %)" in own.compare.changes()
    assert own.hash() == p.hash()
    # A round trip through a run file keeps it.
    assert CompareRules.model_validate_json(own.compare.model_dump_json()) == own.compare


def test_compare_table_does_not_change_hashes(tmp_path: Path) -> None:
    """Comparison rules judge measurements; they are not measurement conditions, so a
    baseline recorded before a [compare] edit stays comparable (like gates)."""
    p = load_profile(REPO / "tests" / "profiles" / "cpu-ci.toml")
    q = load_profile(_write(tmp_path, COMPARE_TABLE))
    assert q.compare != p.compare
    assert q.hash() == p.hash()
    for cfg in p.server_configs:
        assert q.config_hash(q.config(cfg.id)) == p.config_hash(cfg)


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_shipped_profiles_state_their_compare_rules(path: Path) -> None:
    """Every shipped profile writes its [compare] table out (tests/profiles/cpu-ci.toml
    relies on the defaults but for acceptance)."""
    raw = tomllib.loads(path.read_text())
    stated = set(raw["compare"]["metrics"])
    assert stated - {"tpot_vs_nospec"} == {"ttft", "tpot", "e2e", "output_throughput",
                                           "acceptance_rate"}
    rules = load_profile(path).compare
    # TPOT vs no-spec is stated where its own figure was measured, else it is TPOT's.
    if "tpot_vs_nospec" not in stated:
        assert rules.rule("tpot_vs_nospec").min_effect == rules.rule("tpot").min_effect
    # The acceptance tolerance (the former gates.acceptance.baseline_tolerance) is stated,
    # and absolute: a few tokens in a thousand on a GPU, one in 2000 on a CPU.
    stated = raw["compare"]["metrics"]["acceptance_rate"]["min_effect"]
    assert rules.rule("acceptance_rate").min_effect == stated
    assert 0 < stated <= 0.02
    assert all(rules.rule(k).direction == Direction.LOWER_IS_BETTER
               for k in ("ttft", "tpot", "e2e"))


# --------------------------------------------------------------------------- [load] guard


def test_profile_guard_keys_default_and_leave_the_hashes_alone(tmp_path: Path) -> None:
    p = load_profile(CPU_CI_PROFILE)
    assert p.load.max_outside_cores == 0.25 and p.load.contended_retries == 2
    assert p.load.busy_wait_s == 60.0
    q = load_profile(_edited(tmp_path, "[load]\n", "[load]\nmax_outside_cores = 1.5\n"
                             "contended_retries = 0\nbusy_wait_s = 0\n"))
    assert (q.load.max_outside_cores, q.load.contended_retries, q.load.busy_wait_s) == (1.5, 0, 0)
    # The guard picks which attempts are kept, not what one measures: baselines stay valid.
    assert q.hash() == p.hash()
    assert q.config_hash(q.config("draft-k2")) == p.config_hash(p.config("draft-k2"))


def test_request_pairing_changes_the_spec_configs_hashes_only(tmp_path: Path) -> None:
    """load.pairing = "requests" changes how a spec case and its paired no-spec trial are
    measured at c = 1, not what the no-spec config's own cases measure; left at its default
    it changes no hash (baselines from before the key stay valid)."""
    p = load_profile(CPU_CI_PROFILE)
    assert p.load.pairing == "trials" and not p.load.interleaves(1)
    same = load_profile(_edited(tmp_path, "[load]\n", '[load]\npairing = "trials"\n'))
    assert same.hash() == p.hash()
    q = load_profile(_edited(tmp_path, "[load]\n", '[load]\npairing = "requests"\n'))
    assert q.load.interleaves(1) and not q.load.interleaves(2)
    assert q.config_hash(q.config("nospec")) == p.config_hash(p.config("nospec"))
    assert q.config_hash(q.config("draft-k2")) != p.config_hash(p.config("draft-k2"))
    assert q.hash() != p.hash()


def test_an_unknown_pairing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="load.pairing"):
        load_profile(_edited(tmp_path, "[load]\n", '[load]\npairing = "request"\n'))


def test_negative_retries_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="load.contended_retries"):
        load_profile(_edited(tmp_path, "[load]\n", "[load]\ncontended_retries = -1\n"))


@pytest.mark.parametrize("value", ["-1", "-0.5", "nan", "inf", '"60 s"'])
def test_bad_busy_wait_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(ProfileError, match="load.busy_wait_s"):
        load_profile(_edited(tmp_path, "[load]\n", f"[load]\nbusy_wait_s = {value}\n"))


# --- pinned_acceptance (the acceptance / step-cost split, docs/attribution.md) ---------


def test_pinned_acceptance_leaves_the_hashes_alone(tmp_path: Path) -> None:
    p = load_profile(CPU_CI_PROFILE)
    path = _edited(tmp_path, 'gates.acceptance = { min_rate = 0.05 }',
                   'gates.acceptance = { min_rate = 0.05 }\npinned_acceptance = true')
    q = load_profile(path)
    assert q.config("draft-k2").pinned_acceptance
    assert not p.config("draft-k2").pinned_acceptance
    assert q.hash() == p.hash()
    assert q.config_hash(q.config("draft-k2")) == p.config_hash(p.config("draft-k2"))


@pytest.mark.parametrize(("config", "why"), [
    ('id = "x"', "a no-spec config has no acceptance to pin"),
    ('id = "x"\nspeculative_config = { method = "ngram", num_speculative_tokens = 3, '
     'prompt_lookup_max = 3 }', "method 'ngram' proposes a varying number of tokens"),
    ('id = "x"\nspeculative_config = { method = "draft_model", model = "tiny:draft" }',
     "no num_speculative_tokens"),
    ('id = "x"\nspeculative_config = { method = "draft_model", model = "tiny:draft", '
     'num_speculative_tokens = 3, num_speculative_tokens_per_batch_size = [[1, 3]] }',
     "num_speculative_tokens_per_batch_size varies k"),
    ('id = "x"\nspeculative_config = { method = "draft_model", model = "tiny:draft", '
     'num_speculative_tokens = 2, rejection_sample_method = "synthetic", '
     'synthetic_acceptance_length = 2.0 }', "rejection_sample_method is 'synthetic'"),
])
def test_pinned_acceptance_where_nothing_can_be_pinned_is_refused(
        tmp_path: Path, config: str, why: str) -> None:
    text = CPU_CI_PROFILE.read_text().replace('[[server_configs]]\nid = "nospec"\n', "", 1)
    path = tmp_path / "p.toml"
    path.write_text(text + f"\n[[server_configs]]\n{config}\npinned_acceptance = true\n")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert str(path) in msg
    assert "(id 'x')" in msg and "pinned_acceptance = true" in msg
    assert why in msg
    assert "fix: set it only on a spec config with a fixed num_speculative_tokens" in msg


def test_pinned_acceptance_must_be_a_boolean(tmp_path: Path) -> None:
    path = _edited(tmp_path, 'gates.acceptance = { min_rate = 0.05 }',
                   'gates.acceptance = { min_rate = 0.05 }\npinned_acceptance = "sometimes"')
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert "server_configs[1] (id 'draft-k2').pinned_acceptance" in str(err.value)


def test_a_sampled_profile_records_inexact_acceptance() -> None:
    from specperf.config.profile import Profile

    head = dict(name="p", target="m", concurrencies=[1], server_configs=[{"id": "nospec"}])
    assert Profile.model_validate(head).compare.acceptance_exact
    sampled = Profile.model_validate({**head, "sampling": {"temperature": 0.8}})
    assert not sampled.compare.acceptance_exact
    # Said outright (e.g. an engine measured to repeat sampled acceptance), it stands.
    told = Profile.model_validate({**head, "sampling": {"temperature": 0.8},
                                   "compare": {"acceptance_exact": True}})
    assert told.compare.acceptance_exact
    # The rules are not part of what is measured: the profile hash stays the temperature's.
    assert sampled.hash() == Profile.model_validate(
        {**head, "sampling": {"temperature": 0.8}, "compare": {"acceptance_exact": False}}
    ).hash()
