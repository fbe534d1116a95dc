"""The segmented scenarios (context length, categories) without servers: their prompts per
segment, their trials' profile, and their rounds and fresh-server confirmation with
stand-ins for the pool and the trials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specperf.config.scenarios import CategoriesScenario, ContextBucket, ContextLengthScenario
from specperf.engine import scenario_setting
from specperf.engine.datasets import DatasetError
from specperf.engine.scenarios import ScenarioRunner
from specperf.engine.segmented_scenarios import (
    SEGMENTED_POOL,
    Segment,
    category_segments,
    context_length_segments,
    segmented_profile,
)
from specperf.schemas import Case
from tests.unit.engine.test_scenarios import (
    CONTEXT_TABLE,
    _FakePool,
    _FakeTrials,
    _RestartingPool,
    _segmented_profile,
    _SlowDraftTrials,
)


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


def test_each_segment_gets_its_own_paired_trials_and_its_own_checks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenario_setting, "TrialRunner", _FakeTrials)
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


@pytest.mark.parametrize(("fresh_tpot_s", "stands"), [(0.3, True), (0.02, False)])
def test_a_segmented_gain_below_its_floor_is_confirmed_on_a_fresh_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_tpot_s: float,
        stands: bool) -> None:
    """The matrix's confirmation (engine.confirmation), carried out by the scenario: the
    gain's FAIL (samples from trials or requests) restarts the draft's server once, as many
    rounds again with new paired no-spec trials, and the case records what it did; the
    FAIL stands only when the fresh start shows it too."""
    monkeypatch.setattr(scenario_setting, "TrialRunner", _SlowDraftTrials)
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
    monkeypatch.setattr(scenario_setting, "TrialRunner", _FakeTrials)
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
