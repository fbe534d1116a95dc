"""The per-kind checks of one item (specperf.analysis.judge.item_checks), on the CI
profile's gates: what each kind asserts, and what a baseline that may not be compared
does to it."""

from __future__ import annotations

import pytest

from specperf.analysis import gate
from specperf.analysis.compare import compare_cases
from specperf.analysis.judge.item_checks import ITEM_KINDS, item_checks
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from specperf.schemas import Acceptance, CaseResult, GateCheck
from tests.support import CPU_CI_PROFILE, make_case

#: Half the draft tokens accepted (k = 2): over draft-k2's floor (0.05), under self-k3's (0.99).
HALF = Acceptance(drafts=10, draft_tokens=20, accepted_tokens=10,
                  accepted_per_position=[6.0, 4.0])


@pytest.fixture
def profile() -> Profile:
    return load_profile(CPU_CI_PROFILE)


def checks(kind: str, result: CaseResult, profile: Profile, *, judged: object = None,
           mismatch: str | None = None) -> list[GateCheck]:
    return item_checks(kind, result.case, result, profile, judged=judged,  # type: ignore[arg-type]
                       no_baseline_reason="no baseline case: run --perf-update-baselines",
                       mismatch=mismatch)


def outcomes(found: list[GateCheck]) -> list[tuple[str, str]]:
    return [(c.metric, c.outcome) for c in found]


def test_requests_are_held_to_the_error_budget(profile: Profile) -> None:
    assert outcomes(checks("requests", make_case(), profile)) == [("error_rate", "pass")]
    [failed] = checks("requests", make_case(errors=4), profile)
    assert failed.outcome == "fail" and "4 of 8 requests failed" in failed.message


def test_acceptance_is_held_to_its_configs_own_floor(profile: Profile) -> None:
    draft = make_case("draft-k2", acceptance=HALF)
    assert outcomes(checks("acceptance", draft, profile)) == [
        ("mean acceptance length", "pass"), ("acceptance_rate floor", "pass")]
    floor = checks("acceptance", make_case("self-k3", acceptance=HALF), profile)[-1]
    assert floor.outcome == "fail" and floor.threshold == 0.99
    # Sampling at temperature > 0 ([compare] acceptance_exact = false): a floor is not exact.
    profile.compare.acceptance_exact = False
    on, held = checks("acceptance", draft, profile)
    assert held.outcome == "inconclusive" and held.held_by == "sampled_acceptance"
    assert on.outcome == "pass" and on.held_by is None  # speculation on, on any start


def test_without_a_comparison_latency_and_throughput_say_why_and_the_gain_has_none(
        profile: Profile) -> None:
    result = make_case()
    for kind in ("latency", "throughput"):
        [skip] = checks(kind, result, profile)
        assert (skip.gate, skip.outcome) == (kind, "skip")
        assert skip.message == "no baseline case: run --perf-update-baselines"
    assert checks("tpot_gain", result, profile) == []


def test_a_comparison_gives_the_checks_specperf_compare_shows(profile: Profile) -> None:
    base, slower = make_case(tpot_s=0.02), make_case(tpot_s=0.04)
    judged = compare_cases(base, slower, profile.compare)
    assert judged is not None
    for kind in ("latency", "throughput"):
        assert checks(kind, slower, profile, judged=judged) == gate.from_comparison(kind, judged)
    assert {c.metric for c in checks("latency", slower, profile, judged=judged)} >= {"TPOT"}


def test_a_baseline_that_may_not_be_compared_fails_what_would_have_compared(
        profile: Profile) -> None:
    why = "the baseline was recorded with other prompts — fix: --perf-update-baselines"
    result = make_case("draft-k2", acceptance=HALF)
    for kind in ("acceptance", "latency", "throughput"):
        found = checks(kind, result, profile, mismatch=why)
        assert found[-1].outcome == "fail" and found[-1].message == why
        assert all(c.outcome != "skip" for c in found)
    # The exact checks stand beside it; the error budget and the gain are not the baseline's.
    assert [c.outcome for c in checks("acceptance", result, profile, mismatch=why)][:-1] == [
        "pass", "pass"]
    assert outcomes(checks("requests", result, profile, mismatch=why)) == [("error_rate", "pass")]
    assert checks("tpot_gain", result, profile, mismatch=why) == []


def test_an_unknown_kind_is_refused_naming_the_known_ones(profile: Profile) -> None:
    with pytest.raises(ValueError, match="unknown perf case kind 'latancy'") as err:
        checks("latancy", make_case(), profile)
    assert str(ITEM_KINDS) in str(err.value)
