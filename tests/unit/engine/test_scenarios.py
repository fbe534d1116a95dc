"""The scenarios' engine side without servers: the servers' profile, the prompts, and which
prompts a re-measured attempt gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.config.profile import load_profile
from specperf.config.scenarios import PrefixCacheScenario
from specperf.engine.scenarios import (
    ScenarioError,
    ScenarioRunner,
    _RoundPrompts,
    prefix_cache_profile,
    prefix_cache_prompts,
)
from specperf.schemas import Case
from tests.support import CPU_CI_PROFILE


def _profile(tmp_path: Path, extra_config: str = ""):
    text = CPU_CI_PROFILE.read_text()
    at = text.index("[[server_configs]]")
    table = "[scenarios.prefix_cache]\nrequests = 3\nconcurrency = 2\n\n"
    path = tmp_path / "p.toml"
    path.write_text(text[:at] + table + text[at:] + extra_config)
    return load_profile(path)


def test_the_scenario_servers_get_prefix_caching_on_and_the_scenario_load(tmp_path: Path) -> None:
    off = ('\n[[server_configs]]\nid = "off"\nspeculative_config = { method = "ngram", '
           'num_speculative_tokens = 2, prompt_lookup_max = 3 }\n'
           'serve_args = ["--no-enable-prefix-caching"]\n')
    p = _profile(tmp_path, off)
    assert "--no-enable-prefix-caching" in p.serve_args
    q = prefix_cache_profile(p)
    assert "--no-enable-prefix-caching" not in q.serve_args
    assert q.serve_args[-1] == "--enable-prefix-caching"
    assert q.serve_args[:-1] == [a for a in p.serve_args if a != "--no-enable-prefix-caching"]
    assert q.load.requests_at(2) == 3
    # A config's own serve_args come after the profile's (build_argv): its "off" wins.
    assert q.config("off").serve_args == ["--no-enable-prefix-caching"]
    assert p.hash() != q.hash()  # the scenario's servers are not the matrix's


def test_prompts_share_the_prefix_and_never_repeat_a_question() -> None:
    spec = PrefixCacheScenario(system_words=20, few_shot_words=10, question_words=5)
    rounds = {r: prefix_cache_prompts(spec, r, 4) for r in (-1, 0, 1, 1000)}
    every = [p for ps in rounds.values() for p in ps]
    assert len(set(every)) == len(every) == 16
    prefix = every[0].rsplit("\n\n", 1)[0]
    assert all(p.rsplit("\n\n", 1)[0] == prefix for p in every)
    assert len(prefix.split()) == 30 and all(len(p.split()) == 35 for p in every)
    assert prefix_cache_prompts(spec, 0, 4) == rounds[0]  # deterministic
    assert prefix_cache_prompts(spec.model_copy(update={"seed": 1}), 0, 4) != rounds[0]
    assert len(prefix_cache_prompts(spec.model_copy(update={"few_shot_words": 0}), 0, 1)[0]
               .split()) == 25


def test_a_remeasured_attempt_gets_new_questions() -> None:
    """The server has the round's prompts cached after the first attempt: sent again,
    they would be found whole, inflating the hit rate."""
    spec = PrefixCacheScenario(requests=3)
    prompts = _RoundPrompts(spec)
    prompts.start(2)
    first, again = prompts(), prompts()
    assert first == prefix_cache_prompts(spec, 2, 3) and not set(first) & set(again)
    prompts.start(2)  # the next server of the round: the round's prompts again
    assert prompts() == first


def test_the_cases_are_the_spec_configs_at_the_scenarios_concurrency(tmp_path: Path) -> None:
    runner = ScenarioRunner(_profile(tmp_path), tmp_path, tmp_path, repeats=1,
                            max_outside_cores=0.0)
    assert runner.cases("prefix_cache") == [Case(config_id="draft-k2", concurrency=2),
                                            Case(config_id="self-k3", concurrency=2)]
    plain = ScenarioRunner(load_profile(CPU_CI_PROFILE), tmp_path, tmp_path, repeats=1,
                           max_outside_cores=0.0)
    assert plain.cases("prefix_cache") == []
    runner.errors["prefix_cache"] = {"*": "the no-spec reference 'nospec' could not be measured"}
    with pytest.raises(ScenarioError, match="draft-k2-c2: prefix_cache scenario: the no-spec"):
        runner.evaluate("prefix_cache", Case(config_id="draft-k2", concurrency=2))
