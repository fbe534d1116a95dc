"""[scenarios]: each bad field is refused naming the file, the field and the fix; a scenario
does not change what the main matrix measures (the profile hash). The prefix-cache table,
then the soak and ramp tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.config.profile import ProfileError
from specperf.config.profile_file import load_profile
from specperf.config.scenarios import PrefixCacheScenario, Scenarios
from tests.support import CPU_CI_PROFILE, REPO_ROOT

PREFIX = "\n[scenarios.prefix_cache]\n"


def _with(tmp_path: Path, table: str, *, drop_nospec: bool = False) -> Path:
    text = CPU_CI_PROFILE.read_text()
    if drop_nospec:
        text = text.replace('[[server_configs]]\nid = "nospec"\n', "", 1)
    # Top-level tables go before the first [[server_configs]] array of tables.
    at = text.index("[[server_configs]]")
    path = tmp_path / "p.toml"
    path.write_text(text[:at] + table + "\n" + text[at:])
    return path


def test_a_prefix_cache_table_loads_with_its_defaults(tmp_path: Path) -> None:
    p = load_profile(_with(tmp_path, PREFIX + "requests = 4\n"))
    spec = p.scenarios.prefix_cache
    assert spec == PrefixCacheScenario(requests=4)
    assert spec.prefix_words == spec.system_words + spec.few_shot_words
    assert p.scenarios.kinds == ["prefix_cache"]
    assert load_profile(CPU_CI_PROFILE).scenarios == Scenarios()
    assert Scenarios().kinds == []


def test_a_scenario_leaves_the_profile_hash_alone(tmp_path: Path) -> None:
    """Baselines of the main matrix stay comparable when a scenario is added or tuned."""
    plain = load_profile(CPU_CI_PROFILE)
    with_it = load_profile(_with(tmp_path, PREFIX + "requests = 4\n"))
    assert with_it.hash() == plain.hash()
    assert all(with_it.config_hash(c) == plain.config_hash(c) for c in plain.server_configs)


@pytest.mark.parametrize(("body", "field", "says"), [
    ("hit_rate_tolernace = 0.1\n", "scenarios.prefix_cache.hit_rate_tolernace",
     "allowed here: seed, system_words"),
    ("hit_rate_tolerance = 1.5\n", "scenarios.prefix_cache.hit_rate_tolerance",
     "less than or equal to 1"),
    ("hit_rate_tolerance = nan\n", "scenarios.prefix_cache.hit_rate_tolerance", "finite"),
    ("requests = 0\n", "scenarios.prefix_cache.requests", "greater than or equal to 1"),
    ("concurrency = 0\n", "scenarios.prefix_cache.concurrency", "greater than or equal to 1"),
    ("system_words = 0\n", "scenarios.prefix_cache.system_words", "greater than or equal to 1"),
], ids=["typo", "tolerance-above-1", "tolerance-nan", "no-requests", "no-concurrency",
        "no-prefix"])
def test_a_bad_field_is_named(tmp_path: Path, body: str, field: str, says: str) -> None:
    path = _with(tmp_path, PREFIX + body)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert str(path) in msg and f"field `{field}`" in msg and says in msg, msg


def test_an_unknown_scenario_is_named(tmp_path: Path) -> None:
    path = _with(tmp_path, "\n[scenarios.prefix_caching]\nrequests = 4\n")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert "field `scenarios.prefix_caching`" in str(err.value)
    assert "allowed here: prefix_cache" in str(err.value)


def test_prefix_cache_needs_a_no_spec_reference(tmp_path: Path) -> None:
    path = _with(tmp_path, PREFIX + "requests = 4\n", drop_nospec=True)
    text = path.read_text().replace("[gates.tpot_gain]\nmax_concurrency = 1\nmin_ratio = 0.2\n",
                                    "")
    path.write_text(text)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert "scenarios.prefix_cache" in msg and "no-spec" in msg and "fix:" in msg, msg


# --- soak and ramp ------------------------------------------------------------

CPU_SOAK = REPO_ROOT / "perf_tests" / "profiles" / "cpu-soak.toml"

SOAK = """
[scenarios.soak]
config = "draft-k2"
duration_s = 60
window_s = 10
"""


def _with_time(tmp_path: Path, extra: str) -> Path:
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
    one = load_profile(_with_time(tmp_path, SOAK))
    assert one.scenarios is not None and len(one.scenarios.soak) == 1
    many = load_profile(_with_time(tmp_path, SOAK.replace("[scenarios.soak]", "[[scenarios.soak]]")
                              + SOAK.replace("[scenarios.soak]", "[[scenarios.soak]]")
                              .replace("draft-k2", "self-k3")))
    assert many.scenarios is not None
    assert [s.config for s in many.scenarios.soak] == ["draft-k2", "self-k3"]
    assert one.scenarios.ramp == []


def test_scenarios_leave_the_baselines_hash_alone(tmp_path: Path) -> None:
    """Scenarios are judged within their run: adding one keeps the matrix's baselines."""
    assert load_profile(_with_time(tmp_path, SOAK)).hash() == load_profile(CPU_CI_PROFILE).hash()


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
    path = _with_time(tmp_path, extra)
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    msg = str(exc.value)
    assert str(path) in msg and words in msg and f"field `{field}`" in msg, msg


def test_a_ramp_needs_a_burst_above_one(tmp_path: Path) -> None:
    path = _with_time(tmp_path, '\n[scenarios.ramp]\nconfig = "draft-k2"\n')
    path.write_text(path.read_text().replace("concurrencies = [1, 2]", "concurrencies = [1]"))
    with pytest.raises(ProfileError, match="needs a burst above concurrency 1.*fix: set its "
                                           "burst_concurrency"):
        load_profile(path)


# --- context length and categories ---------------------------------------------------

CONTEXT = """
[scenarios.context_length]
requests = 2
max_relative_drop = 0.3
buckets = [{ name = "short", prompt_words = 32, min_acceptance = 0.4 },
           { name = "long", prompt_words = 400 }]
"""

CATEGORIES = """
[scenarios.categories]
dataset = "../../datasets/cpu-categories.jsonl"
categories = ["qa", "rag"]
min_acceptance = { rag = 0.3 }
default_min_acceptance = 0.2
"""


def test_context_length_and_categories_tables_load(tmp_path: Path) -> None:
    p = load_profile(_with_time(tmp_path, CONTEXT + CATEGORIES))
    ctx, cats = p.scenarios.context_length, p.scenarios.categories
    assert ctx is not None and cats is not None
    assert [b.name for b in ctx.buckets] == ["short", "long"] and ctx.reference_segment == "short"
    assert ctx.min_acceptance_of("short") == 0.4 and ctx.min_acceptance_of("long") is None
    assert cats.min_acceptance_of("rag") == 0.3 and cats.min_acceptance_of("qa") == 0.2
    assert p.scenarios.kinds == ["context_length", "categories"]
    assert p.hash() == load_profile(CPU_CI_PROFILE).hash()


@pytest.mark.parametrize(("extra", "field", "words"), [
    (CONTEXT.replace('"long"', '"short"'), "scenarios.context_length",
     "bucket name 'short' is used twice — fix"),
    (CONTEXT.replace("max_relative_drop = 0.3\n", "").replace(", min_acceptance = 0.4", ""),
     "scenarios.context_length", "no bucket's acceptance would be judged — fix: set "
                                 "max_relative_drop"),
    (CONTEXT.replace("max_relative_drop = 0.3", "max_relative_drop = 1.0"),
     "scenarios.context_length.max_relative_drop", "less than 1"),
    (CONTEXT.replace("min_acceptance = 0.4", "min_acceptance = 1.4"),
     "scenarios.context_length.buckets[0].min_acceptance", "less than or equal to 1"),
    (CONTEXT.replace('"short", prompt_words = 32', '"a b", prompt_words = 32'),
     "scenarios.context_length.buckets[0].name", "should match pattern"),
    (CONTEXT.replace('{ name = "long", prompt_words = 400 }', ""),
     "scenarios.context_length.buckets", "at least 2 items"),
    (CATEGORIES.replace("{ rag = 0.3 }", "{ math = 0.3 }"), "scenarios.categories",
     "min_acceptance names category 'math', which categories does not list"),
    (CATEGORIES.replace("{ rag = 0.3 }", "{ rag = 3 }"), "scenarios.categories.min_acceptance",
     "min_acceptance.rag = 3 is not an acceptance rate — fix"),
    (CATEGORIES.replace("min_acceptance = { rag = 0.3 }\ndefault_min_acceptance = 0.2\n", ""),
     "scenarios.categories", "no category's acceptance would be judged — fix"),
    (CATEGORIES.replace('dataset = "../../datasets/cpu-categories.jsonl"\n', ""),
     "scenarios.categories.dataset", "Field required"),
    # A scenario's serve_args follow the suite's --host on the command line (the last one
    # wins): the options the suite owns are refused as in the profile's own.
    (CONTEXT.replace("max_relative_drop = 0.3", 'max_relative_drop = 0.3\nserve_args = '
                     '["--max-model-len", "2048", "--host", "0.0.0.0"]'),
     "scenarios.context_length.serve_args", "--host is set by the suite"),
    (CATEGORIES.replace("default_min_acceptance = 0.2",
                        'default_min_acceptance = 0.2\nserve_args = ["--port=80"]'),
     "scenarios.categories.serve_args", "--port is set by the suite"),
], ids=["bucket-twice", "nothing-judged", "drop-1", "floor-above-1", "bad-name", "one-bucket",
        "floor-of-unlisted", "floor-not-a-rate", "no-floor", "no-dataset", "host", "port"])
def test_bad_segmented_fields_are_named_with_a_fix(tmp_path: Path, extra: str, field: str,
                                                   words: str) -> None:
    path = _with_time(tmp_path, extra)
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    msg = str(exc.value)
    assert str(path) in msg and words in msg and f"field `{field}`" in msg, msg


@pytest.mark.parametrize("table", [CONTEXT, CATEGORIES], ids=["context_length", "categories"])
def test_segmented_scenarios_need_a_no_spec_reference(tmp_path: Path, table: str) -> None:
    path = _with(tmp_path, table, drop_nospec=True)
    text = path.read_text().replace("[gates.tpot_gain]\nmax_concurrency = 1\nmin_ratio = 0.2\n",
                                    "")
    path.write_text(text)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert "pairs each spec trial with a no-spec trial" in msg and "fix:" in msg, msg
