"""The case kinds (specperf.analysis.judge.kinds), on the CI profile's gates: the checks
of one item of each kind, what each kind asserts of a comparison, and what a baseline that
may not be compared does to it."""

from __future__ import annotations

import pytest

from specperf.analysis.judge.case import compare_cases
from specperf.analysis.judge.kinds import (
    ACCEPTANCE,
    CASE_KINDS,
    LATENCY,
    REQUESTS,
    THROUGHPUT,
    TPOT_GAIN,
    CaseKind,
    from_comparison,
    not_judged,
)
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from specperf.config.rules import CompareRules
from specperf.schemas import Acceptance, CaseResult, GateCheck
from tests.support import CPU_CI_PROFILE, make_case

#: Half the draft tokens accepted (k = 2): over draft-k2's floor (0.05), under self-k3's (0.99).
HALF = Acceptance(drafts=10, draft_tokens=20, accepted_tokens=10,
                  accepted_per_position=[6.0, 4.0])


@pytest.fixture
def profile() -> Profile:
    return load_profile(CPU_CI_PROFILE)


def checks(kind: CaseKind, result: CaseResult, profile: Profile, *, judged: object = None,
           mismatch: str | None = None) -> list[GateCheck]:
    return kind.checks(result.case, result, profile, judged=judged,  # type: ignore[arg-type]
                       no_baseline_reason="no baseline case: run --perf-update-baselines",
                       mismatch=mismatch)


def outcomes(found: list[GateCheck]) -> list[tuple[str, str]]:
    return [(c.metric, c.outcome) for c in found]


def test_requests_are_held_to_the_error_budget(profile: Profile) -> None:
    assert outcomes(checks(REQUESTS, make_case(), profile)) == [("error_rate", "pass")]
    [failed] = checks(REQUESTS, make_case(errors=4), profile)
    assert failed.outcome == "fail" and "4 of 8 requests failed" in failed.message


def test_acceptance_is_held_to_its_configs_own_floor(profile: Profile) -> None:
    draft = make_case("draft-k2", acceptance=HALF)
    assert outcomes(checks(ACCEPTANCE, draft, profile)) == [
        ("mean acceptance length", "pass"), ("acceptance_rate floor", "pass")]
    floor = checks(ACCEPTANCE, make_case("self-k3", acceptance=HALF), profile)[-1]
    assert floor.outcome == "fail" and floor.threshold == 0.99
    # Sampling at temperature > 0 ([compare] acceptance_exact = false): a floor is not exact.
    profile.compare.acceptance_exact = False
    on, held = checks(ACCEPTANCE, draft, profile)
    assert held.outcome == "inconclusive" and held.held_by == "sampled_acceptance"
    assert on.outcome == "pass" and on.held_by is None  # speculation on, on any start


def test_without_a_comparison_latency_and_throughput_say_why_and_the_gain_has_none(
        profile: Profile) -> None:
    result = make_case()
    for kind in (LATENCY, THROUGHPUT):
        [skip] = checks(kind, result, profile)
        assert (skip.gate, skip.outcome) == (kind.name, "skip")
        assert skip.message == "no baseline case: run --perf-update-baselines"
    assert checks(TPOT_GAIN, result, profile) == []


def test_a_comparison_gives_the_checks_specperf_compare_shows(profile: Profile) -> None:
    base, slower = make_case(tpot_s=0.02), make_case(tpot_s=0.04)
    judged = compare_cases(base, slower, profile.compare)
    assert judged is not None
    for kind in (LATENCY, THROUGHPUT):
        assert checks(kind, slower, profile, judged=judged) == from_comparison(kind, judged)
    assert {c.metric for c in checks(LATENCY, slower, profile, judged=judged)} >= {"TPOT"}


def test_a_baseline_that_may_not_be_compared_fails_what_would_have_compared(
        profile: Profile) -> None:
    why = "the baseline was recorded with other prompts — fix: --perf-update-baselines"
    result = make_case("draft-k2", acceptance=HALF)
    for kind in (ACCEPTANCE, LATENCY, THROUGHPUT):
        found = checks(kind, result, profile, mismatch=why)
        assert found[-1].outcome == "fail" and found[-1].message == why
        assert all(c.outcome != "skip" for c in found)
    # The exact checks stand beside it; the error budget and the gain are not the baseline's.
    assert [c.outcome for c in checks(ACCEPTANCE, result, profile, mismatch=why)][:-1] == [
        "pass", "pass"]
    assert outcomes(checks(REQUESTS, result, profile, mismatch=why)) == [("error_rate", "pass")]
    assert checks(TPOT_GAIN, result, profile, mismatch=why) == []


def test_the_kinds_run_in_the_order_of_a_case_and_only_the_comparisons_are_judged() -> None:
    assert [k.name for k in CASE_KINDS] == ["requests", "acceptance", "tpot_gain", "latency",
                                           "throughput"]
    # Read wholly from the comparison: with confirm_after_matrix, after the matrix.
    assert [k.name for k in CASE_KINDS if k.judged] == ["tpot_gain", "latency", "throughput"]
    assert [k.name for k in CASE_KINDS if k.paired] == ["tpot_gain"]


def test_each_kind_has_the_cases_its_gates_give(profile: Profile) -> None:
    configs = profile.server_configs
    every = [f"{c.id}-c{n}" for c in configs for n in profile.concurrencies]
    for kind in (REQUESTS, LATENCY, THROUGHPUT):
        assert [c.id for c in kind.cases(profile, configs)] == every
    spec = [c for c in configs if c.is_spec]
    assert [c.id for c in ACCEPTANCE.cases(profile, configs)] == [
        f"{c.id}-c{n}" for c in spec for n in profile.concurrencies]
    gain = profile.gates.tpot_gain
    assert gain is not None
    assert [c.id for c in TPOT_GAIN.cases(profile, configs)] == [
        f"{c.id}-c{n}" for c in spec for n in profile.concurrencies if n <= gain.max_concurrency]


# -- one check per comparison a kind asserts ---------------------------------------------


def acc(drafts: float, accepted_per_pos: list[float]) -> Acceptance:
    k = len(accepted_per_pos)
    return Acceptance(drafts=drafts, draft_tokens=drafts * k,
                      accepted_tokens=sum(accepted_per_pos), accepted_per_position=accepted_per_pos)


def test_acceptance_vs_baseline_catches_one_token_in_a_thousand(build_case) -> None:
    # 1000 accepted of 1000 drafted (600 drafts: no position accepts more than were drafted)
    base = build_case(acceptance=Acceptance(drafts=600, draft_tokens=1000, accepted_tokens=1000,
                                            accepted_per_position=[600, 400]))
    cur = build_case(acceptance=Acceptance(drafts=600, draft_tokens=1000, accepted_tokens=999,
                                           accepted_per_position=[600, 399]))
    # One tolerance: the acceptance rule's min_effect (0.0005 by default).
    checks = from_comparison(ACCEPTANCE, compare_cases(base, cur, CompareRules()))
    overall = next(c for c in checks if c.metric == "acceptance_rate")
    assert overall.outcome == "fail"
    assert "FAIL" in overall.message and "draft-k2-c1" in overall.message
    same = from_comparison(ACCEPTANCE, compare_cases(base, base, CompareRules()))
    assert same and all(c.outcome == "pass" for c in same)


def test_latency_checks_are_the_comparison_outcomes(build_case) -> None:
    """test_latency asserts TTFT, TPOT and E2E with the verdicts `specperf compare` gives."""
    base = build_case(ttft_s=0.100)
    rules = CompareRules()
    cc = compare_cases(base, build_case(ttft_s=0.100), rules)
    checks = from_comparison(LATENCY, cc)
    assert {c.metric for c in checks} == {"TTFT", "TPOT", "E2E"}
    assert [cc.outcome(m) for m in cc.comparisons if m.metric in {"TTFT", "TPOT", "E2E"}] == \
        [c.outcome for c in checks]
    assert all(c.outcome == "pass" for c in checks)
    assert [c.metric for c in from_comparison(THROUGHPUT, cc)] == ["output throughput"]


def test_a_busy_case_is_not_measured(build_case) -> None:
    """Other processes slow a trial exactly like a regression: its timing checks are
    BUSY, never FAIL or PASS; acceptance is still judged."""
    base = build_case(ttft_s=0.100, acceptance=acc(100, [60, 30]))
    slow = build_case(ttft_s=0.300, tpot_s=0.06, acceptance=acc(100, [60, 30]))
    slow = slow.model_copy(update={"trials": [t.model_copy(update={"contended": True,
                                                                   "outside_cores": 0.64})
                                              for t in slow.trials]})
    cc = compare_cases(base, slow, CompareRules())
    latency = from_comparison(LATENCY, cc)
    assert latency and all(c.outcome == "busy" for c in latency)
    assert "not measured: machine busy (0.6 cores" in latency[0].message
    assert all(c.outcome == "pass" for c in from_comparison(ACCEPTANCE, cc))


def test_no_baseline_is_not_judged(build_case) -> None:
    c = not_judged(LATENCY, build_case().case, "no baseline here")
    assert c.outcome == "skip" and c.message == "no baseline here"
