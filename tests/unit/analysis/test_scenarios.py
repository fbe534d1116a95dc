"""The scenarios' checks: the prefix-cache hit rate against the no-spec config's, and the
paired TPOT gain on the scenario's prompts."""

from __future__ import annotations

from specperf.analysis.aggregate import case_result
from specperf.analysis.scenarios import (
    check_gain,
    check_hit_rate,
    hit_rate,
    prefix_cache_checks,
    prefix_counts,
)
from specperf.config.profile import ServerConfig
from specperf.config.scenarios import PrefixCacheScenario
from specperf.schemas import Case, CaseResult, CompareRules, PrefixCacheCounts, ScenarioResult
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
