"""The scenarios' engine side without servers: the servers' profile, the prompts, and which
prompts a re-measured attempt gets; the segmented scenarios' rounds with a stand-in for
the trials."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specperf.config.profile_file import load_profile
from specperf.config.scenarios import (
    CategoriesScenario,
    ContextBucket,
    ContextLengthScenario,
    PrefixCacheScenario,
)
from specperf.engine import scenarios
from specperf.engine.datasets import DatasetError
from specperf.engine.scenarios import (
    SEGMENTED_POOL,
    ScenarioError,
    ScenarioRunner,
    Segment,
    _RoundPrompts,
    category_segments,
    context_length_segments,
    prefix_cache_profile,
    prefix_cache_prompts,
    segmented_profile,
)
from specperf.schemas import Acceptance, Case
from tests.support import CPU_CI_PROFILE, make_requests, make_trial_of


def _profile(tmp_path: Path, extra_config: str = "", table: str = ""):
    text = CPU_CI_PROFILE.read_text()
    at = text.index("[[server_configs]]")
    table = table or "[scenarios.prefix_cache]\nrequests = 3\nconcurrency = 2\n\n"
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


# --- segmented scenarios: context length, categories ------------------------------------

CONTEXT_TABLE = """
[scenarios.context_length]
requests = 2
repeats = 2
max_relative_drop = 0.3
buckets = [{ name = "short", prompt_words = 16, min_acceptance = 0.4 },
           { name = "long", prompt_words = 200 }]
"""


def _segmented_profile(tmp_path: Path, table: str = CONTEXT_TABLE):
    path = tmp_path / "seg.toml"
    path.write_text(CPU_CI_PROFILE.read_text() + table)
    return load_profile(path)


def test_context_length_prompts_are_per_bucket_of_its_length_and_deterministic() -> None:
    spec = ContextLengthScenario(requests=3, max_relative_drop=0.2, buckets=[
        ContextBucket(name="short", prompt_words=10), ContextBucket(name="long", prompt_words=90)])
    short, long_ = context_length_segments(spec)
    assert (short.name, long_.name) == ("short", "long")
    assert [len(p.split()) for p in short.prompts] == [10, 10, 10]
    assert [len(p.split()) for p in long_.prompts] == [90, 90, 90]
    assert len(set(short.prompts + long_.prompts)) == 6
    assert context_length_segments(spec) == [short, long_]
    assert context_length_segments(spec.model_copy(update={"seed": 1}))[0] != short


def test_category_segments_take_each_categorys_first_prompts(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    lines = [{"question_id": i, "category": c, "turns": [f"{c} {i}", "second turn"]}
             for i, c in enumerate(["qa", "rag", "qa", "qa", "rag"])]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    spec = CategoriesScenario(dataset=str(path), requests=2, default_min_acceptance=0.1)
    assert category_segments(spec, path) == [Segment("qa", ["qa 0", "qa 2"]),
                                             Segment("rag", ["rag 1", "rag 4"])]
    only = spec.model_copy(update={"categories": ["rag"]})
    assert category_segments(only, path) == [Segment("rag", ["rag 1", "rag 4"])]
    with pytest.raises(DatasetError, match=r"scenarios.categories.categories names category "
                                           r"'math', which .* does not have \(it has qa, rag\)"):
        category_segments(spec.model_copy(update={"categories": ["math"]}), path)
    with pytest.raises(DatasetError, match="scenarios.categories.min_acceptance names category "
                                           "'code'"):
        category_segments(spec.model_copy(update={"min_acceptance": {"code": 0.2}}), path)


def test_segmented_trials_send_fewer_tokens_and_keep_the_servers(tmp_path: Path) -> None:
    p = _segmented_profile(tmp_path, CONTEXT_TABLE.replace("repeats = 2", "max_tokens = 5"))
    q = segmented_profile(p, p.scenarios.context_length)
    assert q.load.requests_at(1) == 2 and q.sampling.max_tokens == 5
    assert q.serve_args == p.serve_args and q.server_configs == p.server_configs


@dataclass
class _FakeServer:
    config_id: str
    version: str = "0.32.0"
    fresh: bool = False
    model: str = "tiny"


@dataclass
class _FakePool:
    started: list[str] = field(default_factory=list)
    stopped: bool = False
    log_dir: Path | None = None

    def server_for(self, config_id: str) -> _FakeServer:
        self.started.append(config_id)
        return _FakeServer(config_id)

    def stop_all(self) -> None:
        self.stopped = True


class _FakeTrials:
    """Stands in for TrialRunner: a trial's acceptance collapses on prompts past 100 words
    (a draft with a short context); records which server got which segment."""

    calls: list[tuple[str, int, bool]] = []

    def __init__(self, profile, pool, view, prompts, *args, **kwargs) -> None:
        self.profile, self.prompts = profile, prompts

    def trial(self, server, c, index, warmup):
        prompts = self.prompts()
        words = len(prompts[0].split())
        type(self).calls.append((server.config_id, words, warmup))
        n = self.profile.load.requests_at(c)
        samples = make_requests(n, tpot_s=0.03 if server.config_id == "nospec" else 0.02)
        acc = None if server.config_id == "nospec" else Acceptance(
            drafts=50, draft_tokens=100, accepted_tokens=60 if words <= 100 else 5,
            accepted_per_position=[])
        return make_trial_of(samples, index=index, acceptance=acc)


def test_each_segment_gets_its_own_paired_trials_and_its_own_checks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenarios, "TrialRunner", _FakeTrials)
    _FakeTrials.calls = []
    p = _segmented_profile(tmp_path)
    runner = ScenarioRunner(p, tmp_path, tmp_path, repeats=5, max_outside_cores=0.0,
                            say=lambda _: None)
    pool = _FakePool()
    runner.pools[SEGMENTED_POOL] = pool  # type: ignore[assignment]
    runner.wanted = {"context_length": {"draft-k2"}}
    case = Case(config_id="draft-k2", concurrency=1)
    assert case in runner.cases("context_length")
    checks = runner.evaluate("context_length", case)

    # Rounds (repeats = 2 from the table): per bucket the no-spec trial, then the spec's;
    # each server warmed up on its first trial only.
    assert _FakeTrials.calls == [("nospec", 16, True), ("draft-k2", 16, True),
                                 ("nospec", 200, False), ("draft-k2", 200, False),
                                 ("nospec", 16, False), ("draft-k2", 16, False),
                                 ("nospec", 200, False), ("draft-k2", 200, False)]
    assert pool.started == ["nospec", "draft-k2"] and pool.stopped
    result = runner.results["context_length"]
    assert [g.name for g in result.segments] == ["short", "long"]
    short, long_ = result.segments
    assert [len(c.trials) for c in short.cases] == [2, 2]
    assert long_.case(case).acceptance.accepted_tokens == 10  # its own trials only
    assert result.case(case).acceptance.accepted_tokens == 130  # all segments together
    outcomes = {c.metric: c.outcome for c in checks}
    assert outcomes["acceptance rate [bucket short]"] == "pass"
    assert outcomes["acceptance vs bucket short [bucket long]"] == "fail"
    failed = next(c for c in checks if c.outcome == "fail")
    assert "acceptance collapses in bucket 'long'" in failed.message
    assert {"TPOT gain [bucket short]", "TPOT gain [bucket long]"} <= set(outcomes)


def test_a_missing_category_dataset_fails_the_scenario_naming_the_field(tmp_path: Path) -> None:
    p = _segmented_profile(tmp_path, '\n[scenarios.categories]\ndataset = "nope.jsonl"\n'
                                     'default_min_acceptance = 0.2\n')
    runner = ScenarioRunner(p, tmp_path, tmp_path, repeats=1, max_outside_cores=0.0,
                            say=lambda _: None)
    [case, *_] = runner.cases("categories")
    with pytest.raises(ScenarioError, match=r"categories scenario: .*nope\.jsonl: category "
                                            r"dataset not found — check `scenarios.categories."
                                            r"dataset`"):
        runner.evaluate("categories", case)
    assert SEGMENTED_POOL not in runner.pools  # no server was started for it


def test_workload_text_cuts_each_buckets_prompts_from_the_workloads_words() -> None:
    spec = ContextLengthScenario(text="workload", requests=2, max_relative_drop=0.2, buckets=[
        ContextBucket(name="short", prompt_words=3), ContextBucket(name="long", prompt_words=50)])
    words = [f"w{i}" for i in range(60)]
    workload = [" ".join(words[:25]), " ".join(words[25:])]
    short, long_ = context_length_segments(spec, workload)
    assert all(len(p.split()) == 3 and set(p.split()) <= set(words) for p in short.prompts)
    # Each prompt a run of consecutive words (wrapping at the end), no word twice.
    assert all(len(set(p.split())) == 50 for p in long_.prompts)
    assert len(set(short.prompts + long_.prompts)) == 4
    with pytest.raises(DatasetError, match="bucket 'long' wants 50 words and the profile's "
                                           "workload prompts hold 9 — a prompt would repeat"):
        context_length_segments(spec, ["alpha beta gamma", "delta epsilon zeta eta theta iota"])
    with pytest.raises(DatasetError, match="text = 'workload', and the profile's workload gave "
                                           "no prompts — fix"):
        context_length_segments(spec, [])


@dataclass
class _RestartingPool(_FakePool):
    """A pool whose restart gives a fresh server (``fresh``: its trials are its own)."""

    restarted: list[str] = field(default_factory=list)

    def restart(self, config_id: str) -> _FakeServer:
        self.restarted.append(config_id)
        return _FakeServer(config_id, fresh=True)


class _SlowDraftTrials(_FakeTrials):
    """The draft's TPOT at 0.3 s on its first start (gain 0.03/0.3 = 0.1×, wholly below
    cpu-ci's floor of 0.2×) and at ``fresh_tpot_s`` on a fresh one; acceptance healthy."""

    fresh_tpot_s = 0.3

    def trial(self, server, c, index, warmup):
        self.prompts()
        type(self).calls.append((server.config_id, getattr(server, "fresh", False), warmup))
        tpot = (0.03 if server.config_id == "nospec"
                else self.fresh_tpot_s if getattr(server, "fresh", False) else 0.3)
        acc = None if server.config_id == "nospec" else Acceptance(
            drafts=50, draft_tokens=100, accepted_tokens=60, accepted_per_position=[])
        return make_trial_of(make_requests(self.profile.load.requests_at(c), tpot_s=tpot),
                             index=index, acceptance=acc)


@pytest.mark.parametrize(("fresh_tpot_s", "stands"), [(0.3, True), (0.02, False)])
def test_a_segmented_gain_below_its_floor_is_confirmed_on_a_fresh_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_tpot_s: float,
        stands: bool) -> None:
    """The matrix's confirmation (engine.confirmation), carried out by the scenario: the
    gain's FAIL (samples from trials or requests) restarts the draft's server once, as many
    rounds again with new paired no-spec trials, and the case records what it did; the
    FAIL stands only when the fresh start shows it too."""
    monkeypatch.setattr(scenarios, "TrialRunner", _SlowDraftTrials)
    _SlowDraftTrials.calls, _SlowDraftTrials.fresh_tpot_s = [], fresh_tpot_s
    said: list[str] = []
    # 8 requests a trial: enough samples for the gain to be decided on one start.
    profile = _segmented_profile(tmp_path, CONTEXT_TABLE.replace("requests = 2", "requests = 8"))
    runner = ScenarioRunner(profile, tmp_path, tmp_path, repeats=5, max_outside_cores=0.0,
                            say=said.append)
    pool = _RestartingPool()
    runner.pools[SEGMENTED_POOL] = pool  # type: ignore[assignment]
    runner.wanted = {"context_length": {"draft-k2"}}
    case = Case(config_id="draft-k2", concurrency=1)
    checks = runner.evaluate("context_length", case)

    assert pool.restarted == ["draft-k2"]
    # 2 rounds × 2 buckets on each start, every draft trial beside its own no-spec one.
    fresh = [call for call in _SlowDraftTrials.calls if call[1]]
    assert len(fresh) == 4 and fresh[0][2] is True  # the fresh server warmed up once
    assert [c[0] for c in _SlowDraftTrials.calls].count("nospec") == 8
    result = runner.results["context_length"].case(case)
    # Pooled segment by segment: each bucket's two first-start trials, then its two fresh.
    assert [t.server_start for t in result.trials] == [0, 0, 1, 1] * 2
    rec = result.confirmation
    assert rec is not None and rec.first_trials == 4 and rec.trials == 8
    assert set(rec.triggered_by) == {"TPOT gain [bucket short]", "TPOT gain [bucket long]"}
    gains = {c.metric: c.outcome for c in checks if c.metric.startswith("TPOT gain")}
    assert set(gains.values()) == ({"fail"} if stands else {"inconclusive"})
    assert set(rec.outcome.values()) == ({"regression"} if stands else {"inconclusive"})
    assert any(line.startswith("specperf: scenario context_length: flagged as a regression")
               for line in said)


def test_a_counters_fail_alone_starts_no_fresh_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Acceptance collapsing in a bucket (counters: exactly repeatable) FAILs without a
    fresh start: another start could not change it."""
    monkeypatch.setattr(scenarios, "TrialRunner", _FakeTrials)
    _FakeTrials.calls = []
    runner = ScenarioRunner(_segmented_profile(tmp_path), tmp_path, tmp_path, repeats=5,
                            max_outside_cores=0.0, say=lambda _: None)
    pool = _RestartingPool()
    runner.pools[SEGMENTED_POOL] = pool  # type: ignore[assignment]
    runner.wanted = {"context_length": {"draft-k2"}}
    case = Case(config_id="draft-k2", concurrency=1)
    checks = runner.evaluate("context_length", case)
    assert any(c.outcome == "fail" and c.samples == "counters" for c in checks)
    assert pool.restarted == [] and runner.results["context_length"].case(case).confirmation is None


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
    monkeypatch.setattr(scenarios, "ServerPool", lambda *a, **k: pool)
    monkeypatch.setattr(scenarios, "run_load", lambda *a, **k: warmed.append(a[3]))
    monkeypatch.setattr(scenarios, "TrialRunner", _SlowDraftTrials)
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
