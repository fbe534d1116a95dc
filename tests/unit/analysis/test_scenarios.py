"""The scenarios' checks: the prefix-cache hit rate against the no-spec config's, the
paired TPOT gain on the scenario's prompts, and the segmented scenarios' acceptance per
bucket or category."""

from __future__ import annotations

from specperf.analysis.aggregate import case_result
from specperf.analysis.scenarios import (
    check_gain,
    check_hit_rate,
    check_segment_acceptance,
    hit_rate,
    prefix_cache_checks,
    prefix_counts,
    segmented_checks,
)
from specperf.config.rules import CompareRules
from specperf.config.scenarios import (
    CategoriesScenario,
    ContextBucket,
    ContextLengthScenario,
    PrefixCacheScenario,
)
from specperf.config.server_configs import ServerConfig
from specperf.schemas import Acceptance, Case, CaseResult, PrefixCacheCounts, ScenarioResult, ScenarioSegment
from tests.support import make_requests, make_trial_of

SPREAD = [0.97, 0.99, 1.0, 1.01, 1.03, 0.98, 1.02, 1.0]


def _case(config_id: str, tpot_ms: float, counts: list[tuple[float, float]] | None,
          *, contended: bool = False) -> CaseResult:
    """A case with one trial per (queries, hits) in ``counts`` (None: no counters)."""
    cfg = ServerConfig(id=config_id, speculative_config=None if config_id == "nospec" else
                       {"method": "draft_model", "model": "tiny:draft",
                        "num_speculative_tokens": 2})
    trials = []
    for i, qh in enumerate(counts or [None]):  # type: ignore[list-item]
        samples = [s for f in SPREAD for s in make_requests(1, tpot_s=tpot_ms * f / 1000)]
        t = make_trial_of(samples, index=i, outside_cores=0.9 if contended else 0.0)
        update: dict[str, object] = {"contended": contended}
        if qh is not None:
            update["prefix_cache"] = PrefixCacheCounts(queries=qh[0], hits=qh[1])
        trials.append(t.model_copy(update=update))
    return case_result(Case(config_id=config_id, concurrency=1), cfg, trials, "0.32.0", "h")


def test_hit_rate_is_summed_over_trials() -> None:
    c = _case("draft-k2", 20.0, [(1000, 800), (1000, 900)])
    assert prefix_counts(c) == PrefixCacheCounts(queries=2000, hits=1700)
    assert hit_rate(c) == 0.85
    assert hit_rate(_case("draft-k2", 20.0, None)) is None
    assert PrefixCacheCounts(queries=0, hits=0).hit_rate is None


def test_a_hit_rate_within_the_tolerance_passes_and_outside_it_fails_naming_the_config() -> None:
    nospec = _case("nospec", 30.0, [(2176, 1920)])
    same = check_hit_rate(_case("draft-k2", 20.0, [(2176, 1904)]), nospec, 0.05)
    assert same.outcome == "pass" and same.gate == "prefix_cache"
    assert same.current is not None and same.baseline is not None
    assert round(same.baseline - same.current, 4) == round(16 / 2176, 4)
    assert "draft-k2-c1: PASS" in same.message and "88.2 %" in same.message

    low = check_hit_rate(_case("draft-k2", 20.0, [(2176, 1000)]), nospec, 0.05)
    assert low.outcome == "fail"
    assert "config 'draft-k2'" in low.message and "below it by 42.3 points" in low.message
    assert "scenarios.prefix_cache.hit_rate_tolerance" in low.message
    assert low.threshold is not None and round(low.threshold, 4) == round(1920 / 2176 - 0.05, 4)


def test_caching_off_on_the_spec_server_fails_naming_the_config() -> None:
    """vLLM counts no lookups when caching is disabled: queries stay at 0."""
    nospec = _case("nospec", 30.0, [(2176, 1920)])
    off = check_hit_rate(_case("draft-k2", 20.0, [(0, 0), (0, 0)]), nospec, 0.05)
    assert off.outcome == "fail" and off.current is None
    assert "config 'draft-k2'" in off.message and "prefix caching is OFF" in off.message
    assert "over 2 trial(s)" in off.message and "--no-enable-prefix-caching" in off.message


def test_a_reference_without_caching_or_counters_cannot_be_judged() -> None:
    spec = _case("draft-k2", 20.0, [(2176, 1904)])
    off = check_hit_rate(spec, _case("nospec", 30.0, [(0, 0)]), 0.05)
    assert off.outcome == "fail" and "no-spec reference 'nospec'" in off.message
    unknown = check_hit_rate(_case("draft-k2", 20.0, None), _case("nospec", 30.0, [(1, 1)]),
                             0.05)
    assert unknown.outcome == "fail" and "served no vllm:prefix_cache_* counters" \
        in unknown.message


def test_the_gain_on_the_scenario_prompts_is_judged_against_its_floor() -> None:
    rules = CompareRules()
    nospec = _case("nospec", 30.0, [(1, 1)])
    ok = check_gain(_case("draft-k2", 20.0, [(1, 1)]), nospec, 1.0, rules)
    assert ok.outcome == "pass" and ok.metric == "TPOT gain" and ok.threshold == 1.0
    assert ok.current is not None and round(ok.current, 2) == 1.5
    assert "prefix-cache scenario" in ok.message and "wholly above the floor" in ok.message
    slow = check_gain(_case("draft-k2", 45.0, [(1, 1)]), nospec, 1.0, rules)
    assert slow.outcome == "fail" and "wholly BELOW the floor" in slow.message
    close = check_gain(_case("draft-k2", 30.0, [(1, 1)]), nospec, 1.0, rules)
    assert close.outcome == "inconclusive"
    busy = check_gain(_case("draft-k2", 20.0, [(1, 1)], contended=True), nospec, 1.0, rules)
    assert busy.outcome == "busy" and "machine busy" in busy.message


def test_checks_per_spec_case_gain_only_where_there_is_a_floor() -> None:
    nospec = _case("nospec", 30.0, [(2176, 1920)])
    a = _case("draft-k2", 20.0, [(2176, 1904)])
    b = _case("draft-k1", 20.0, [(0, 0)])
    result = ScenarioResult(kind="prefix_cache", cases=[nospec, a, b],
                            paired_nospec={a.case.id: nospec, b.case.id: nospec})
    checks = prefix_cache_checks(result, PrefixCacheScenario(), {"draft-k2-c1": 1.0},
                                 CompareRules())
    assert sorted(checks) == ["draft-k1-c1", "draft-k2-c1"]
    assert [c.outcome for c in checks["draft-k2-c1"]] == ["pass", "pass"]
    assert [(c.metric, c.outcome) for c in checks["draft-k1-c1"]] == [
        ("prefix-cache hit rate", "fail")]


# --- segmented scenarios: context length, categories -----------------------------------


def _acc(drafted: float, accepted: float) -> Acceptance:
    return Acceptance(drafts=drafted / 2, draft_tokens=drafted, accepted_tokens=accepted,
                      accepted_per_position=[])


def _seg_case(config_id: str, tpot_ms: float, acc: Acceptance | None) -> CaseResult:
    """A case of one trial with these counter deltas (a draft config unless 'nospec')."""
    cfg = ServerConfig(id=config_id, speculative_config=None if config_id == "nospec" else
                       {"method": "draft_model", "model": "tiny:draft",
                        "num_speculative_tokens": 2})
    samples = [s for f in SPREAD for s in make_requests(1, tpot_s=tpot_ms * f / 1000)]
    trial = make_trial_of(samples, acceptance=acc)
    return case_result(Case(config_id=config_id, concurrency=1), cfg, [trial], "0.32.0", "h")


def _context(**kw: object) -> ContextLengthScenario:
    buckets = [ContextBucket(name="short", prompt_words=32, min_acceptance=0.4),
               ContextBucket(name="half-draft", prompt_words=128),
               ContextBucket(name="beyond-draft", prompt_words=400, min_acceptance=0.4)]
    return ContextLengthScenario(buckets=buckets, **kw)  # type: ignore[arg-type]


def test_a_bucket_below_its_floor_fails_naming_the_bucket_and_the_key() -> None:
    spec = _context()
    ok = check_segment_acceptance("context_length", spec, "short",
                                  _seg_case("draft-k2", 20, _acc(200, 120)))
    assert [(c.outcome, c.metric) for c in ok] == [("pass", "acceptance rate [bucket short]")]
    assert ok[0].current == 0.6 and ok[0].threshold == 0.4 and ok[0].gate == "context_length"
    low = check_segment_acceptance("context_length", spec, "beyond-draft",
                                   _seg_case("draft-k2", 20, _acc(200, 10)))
    [fail] = low
    assert fail.outcome == "fail" and fail.current == 0.05
    assert "acceptance collapses in bucket 'beyond-draft'" in fail.message
    assert "10 of 200 draft tokens accepted" in fail.message
    assert "scenarios.context_length.buckets[2].min_acceptance" in fail.message


def test_a_bucket_is_held_to_the_shortest_within_max_relative_drop() -> None:
    spec = _context(max_relative_drop=0.3)
    assert spec.reference_segment == "short"
    ref = ("short", _seg_case("draft-k2", 20, _acc(200, 120)))  # 0.60
    within = check_segment_acceptance("context_length", spec, "half-draft",
                                      _seg_case("draft-k2", 20, _acc(200, 90)), ref)  # 0.45
    assert [(c.outcome, c.metric) for c in within] == [
        ("pass", "acceptance vs bucket short [bucket half-draft]")]
    assert within[0].baseline == 0.6 and round(within[0].threshold or 0, 3) == 0.42
    beyond = check_segment_acceptance("context_length", spec, "half-draft",
                                      _seg_case("draft-k2", 20, _acc(200, 60)), ref)  # 0.30
    assert beyond[0].outcome == "fail"
    assert "acceptance collapses in bucket 'half-draft'" in beyond[0].message
    assert "50.0 % lower" in beyond[0].message and "max_relative_drop" in beyond[0].message
    # The reference bucket is not held to itself.
    same = check_segment_acceptance("context_length", spec, "short", ref[1], ref)
    assert [c.metric for c in same] == ["acceptance rate [bucket short]"]


def test_a_segment_without_drafts_fails_saying_speculation_was_off() -> None:
    [off] = check_segment_acceptance("categories", CategoriesScenario(
        dataset="x.jsonl", default_min_acceptance=0.2), "rag",
        _seg_case("draft-k2", 20, _acc(0, 0)))
    assert off.outcome == "fail" and "category 'rag'" in off.message
    assert "speculation was off there" in off.message
    [none] = check_segment_acceptance("categories", CategoriesScenario(
        dataset="x.jsonl", default_min_acceptance=0.2), "rag",
        _seg_case("draft-k2", 20, None))
    assert none.outcome == "fail" and "no spec-decode counters" in none.message


def test_a_category_floor_names_its_own_key_or_the_default() -> None:
    spec = CategoriesScenario(dataset="x.jsonl", min_acceptance={"qa": 0.5},
                              default_min_acceptance=0.2)
    [qa] = check_segment_acceptance("categories", spec, "qa",
                                    _seg_case("draft-k2", 20, _acc(100, 40)))
    assert qa.outcome == "fail" and "scenarios.categories.min_acceptance.qa" in qa.message
    [rag] = check_segment_acceptance("categories", spec, "rag",
                                     _seg_case("draft-k2", 20, _acc(100, 40)))
    assert rag.outcome == "pass" and "scenarios.categories.default_min_acceptance" in rag.message


def test_segmented_checks_give_every_segment_its_acceptance_and_gain() -> None:
    spec = _context(max_relative_drop=0.3)
    segments = []
    for name, accepted in (("short", 120), ("half-draft", 110), ("beyond-draft", 8)):
        nospec = _seg_case("nospec", 30, None)
        draft = _seg_case("draft-k2", 20, _acc(200, accepted))
        segments.append(ScenarioSegment(name=name, cases=[nospec, draft],
                                        paired_nospec={draft.case.id: nospec}))
    result = ScenarioResult(kind="context_length", segments=segments)
    checks = segmented_checks(result, spec, {"draft-k2-c1": 1.0}, CompareRules())
    got = [(c.metric, c.outcome) for c in checks["draft-k2-c1"]]
    assert got == [
        ("acceptance rate [bucket short]", "pass"), ("TPOT gain [bucket short]", "pass"),
        ("acceptance vs bucket short [bucket half-draft]", "pass"),
        ("TPOT gain [bucket half-draft]", "pass"),
        ("acceptance rate [bucket beyond-draft]", "fail"),
        ("acceptance vs bucket short [bucket beyond-draft]", "fail"),
        ("TPOT gain [bucket beyond-draft]", "pass"),
    ]
    gain = checks["draft-k2-c1"][1]
    assert gain.gate == "context_length" and "bucket 'short'" in gain.message
    # Without a floor, no gain check.
    plain = segmented_checks(result, spec, {}, CompareRules())
    assert not any(c.metric.startswith("TPOT gain") for c in plain["draft-k2-c1"])


def test_failed_requests_in_a_segment_fail_naming_the_likely_cause() -> None:
    case = _seg_case("draft-k2", 20, _acc(100, 60))
    broken = case.model_copy(update={"n_errors": 2, "errors": ["HTTP 400: too long"]})
    [fail] = check_segment_acceptance("context_length", _context(), "beyond-draft", broken)
    assert fail.outcome == "fail" and fail.metric == "requests [bucket beyond-draft]"
    assert "2 of 8 requests failed (first: HTTP 400: too long)" in fail.message
    assert "--max-model-len" in fail.message
