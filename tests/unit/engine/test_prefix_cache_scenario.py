"""The prefix-cache scenario without servers: its servers' profile, its prompts, which
prompts a re-measured attempt gets, and its fresh-server confirmation with stand-ins for
the pool and the trials."""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.config.scenarios import PrefixCacheScenario
from specperf.engine import prefix_cache_scenario, scenario_setting
from specperf.engine.prefix_cache_scenario import (
    _RoundPrompts,
    prefix_cache_profile,
    prefix_cache_prompts,
)
from specperf.engine.scenarios import ScenarioRunner
from specperf.schemas import Case
from tests.unit.engine.test_scenarios import _profile, _RestartingPool, _SlowDraftTrials


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


def test_prefix_cache_confirms_the_gain_and_never_the_hit_rate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefix-cache scenario carries out the same confirmation: the stand-in's trials
    serve no prefix-cache counters (its hit rate FAILs, from counters) and the draft's gain
    is 0.1×, on both starts. Only the gain triggers the fresh start, which is warmed with
    the shared prefix before its rounds; the FAIL stands, confirmed."""
    # Concurrency 1: cpu-ci's TPOT-gain gate holds up to there.
    profile = _profile(tmp_path, table="[scenarios.prefix_cache]\nrequests = 8\nconcurrency = 1\n\n")
    spec = profile.scenarios.prefix_cache
    assert spec is not None and profile.compare.confirm_on_fresh_server
    pool = _RestartingPool()
    pool.profile = prefix_cache_profile(profile)  # type: ignore[attr-defined]
    pool.load_url = lambda server: "http://127.0.0.1:1"  # type: ignore[attr-defined]
    warmed: list[int] = []
    monkeypatch.setattr(scenario_setting, "ServerPool", lambda *a, **k: pool)
    monkeypatch.setattr(prefix_cache_scenario, "run_load", lambda *a, **k: warmed.append(a[3]))
    monkeypatch.setattr(scenario_setting, "TrialRunner", _SlowDraftTrials)
    _SlowDraftTrials.calls, _SlowDraftTrials.fresh_tpot_s = [], 0.3
    runner = ScenarioRunner(profile, tmp_path, tmp_path, repeats=5, max_outside_cores=0.0,
                            say=lambda _: None)
    runner.wanted = {"prefix_cache": {"draft-k2"}}
    case = Case(config_id="draft-k2", concurrency=spec.concurrency)
    checks = {c.metric: c for c in runner.evaluate("prefix_cache", case)}

    assert checks["prefix-cache hit rate"].outcome == "fail"
    assert checks["prefix-cache hit rate"].samples == "counters"
    assert checks["TPOT gain"].outcome == "fail" and checks["TPOT gain"].samples is not None
    assert pool.restarted == ["draft-k2"]
    assert len(warmed) == 3  # no-spec, draft, and the draft's fresh server
    result = runner.results["prefix_cache"].case(case)
    rec = result.confirmation
    assert rec is not None and rec.triggered_by == ["TPOT gain"]
    assert rec.outcome == {"TPOT gain": "regression"} and rec.trials == 2 * rec.first_trials
    assert sorted(t.server_start for t in result.trials) == [0] * 5 + [1] * 5
