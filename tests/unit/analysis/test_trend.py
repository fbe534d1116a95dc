"""The soak's trends and the ramp's phases, judged (specperf.analysis.trend)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specperf.analysis import trend
from specperf.analysis.aggregate import summarise
from specperf.config.rules import CompareRules
from specperf.config.scenarios import SoakScenario
from specperf.config.server_configs import ServerConfig
from specperf.schemas import Acceptance, Case, RampPhase, RampResult, SoakResult, SoakWindow
from tests.support import make_requests, make_trial_of

CASE = Case(config_id="draft-k3", concurrency=1)
SPEC = ServerConfig(id="draft-k3", speculative_config={
    "method": "draft_model", "model": "tiny:draft", "num_speculative_tokens": 3})
#: One hour in 10 windows, TPOT may grow 50 % an hour, acceptance fall 0.02 an hour.
HOUR = SoakScenario(config="draft-k3", duration_s=3600, window_s=360,
                    max_tpot_growth_per_hour=0.5, max_acceptance_decay_per_hour=0.02)


def acc(rate: float, drafts: float = 1000.0) -> Acceptance:
    return Acceptance(drafts=drafts, draft_tokens=3 * drafts, accepted_tokens=3 * drafts * rate,
                      accepted_per_position=[drafts * rate] * 3)


def windows(tpot_ms: list[float], rates: list[float | None] | None = None,
            window_s: float = 360.0, outside: float | None = None) -> list[SoakWindow]:
    rates = rates if rates is not None else [0.4] * len(tpot_ms)
    return [SoakWindow(index=i, start_s=i * window_s, duration_s=window_s, n_requests=10,
                       n_errors=0, tpot_ms=summarise([t / 1000]),
                       acceptance=None if r is None else acc(r), outside_cores=outside)
            for i, (t, r) in enumerate(zip(tpot_ms, rates, strict=True))]


def test_flat_acceptance_passes_exactly() -> None:
    fit = trend.acceptance_trend(windows([30.0] * 10), HOUR)
    assert fit is not None and fit.outcome == "pass"
    assert (fit.slope, fit.ci_low, fit.ci_high) == (0.0, 0.0, 0.0)
    assert "clears the allowed decay of 0.02 per hour" in fit.reason


def test_decaying_acceptance_fails() -> None:
    rates = [0.40 - 0.1 * i / 10 for i in range(10)]  # 0.1 an hour, limit 0.02
    fit = trend.acceptance_trend(windows([30.0] * 10, rates), HOUR)
    assert fit is not None and fit.outcome == "fail"
    assert fit.ci_high is not None and fit.ci_high < -0.02
    assert "acceptance decays over the run" in fit.reason


def test_no_spec_server_has_no_acceptance_trend() -> None:
    assert trend.acceptance_trend(windows([30.0] * 10, [None] * 10), HOUR) is None
    assert [f.metric for f in trend.soak_fits(windows([30.0] * 10, [None] * 10), HOUR)] == [
        "tpot"]


def test_growing_tpot_fails_and_names_the_growth() -> None:
    tpot = [30.0 * (1 + i / 10) + (0.3 if i % 2 else -0.3) for i in range(10)]  # +100 %/h
    fit = trend.tpot_trend(windows(tpot), HOUR)
    assert fit.outcome == "fail" and fit.ci_low is not None and fit.ci_low > 0.5
    assert "wholly above the allowed growth of 50.0% per hour" in fit.reason


def test_few_windows_are_inconclusive() -> None:
    fit = trend.tpot_trend(windows([30.0, 60.0, 90.0, 120.0]), HOUR)
    assert fit.outcome == "inconclusive" and fit.slope is None
    assert "4 window(s)" in fit.reason and "min_windows" in fit.reason
    acc_fit = trend.acceptance_trend(windows([30.0] * 4, [0.4, 0.3, 0.2, 0.1]), HOUR)
    assert acc_fit is not None and acc_fit.outcome == "inconclusive"


def test_a_busy_window_makes_tpot_busy_but_not_acceptance() -> None:
    tpot = [30.0 * (1 + i / 10) for i in range(10)]
    fits = {f.metric: f for f in trend.soak_fits(windows(tpot, outside=0.8), HOUR,
                                                  max_outside_cores=0.25)}
    assert fits["tpot"].outcome == "busy" and "machine busy (0.80 cores" in fits["tpot"].reason
    assert fits["acceptance_rate"].outcome == "pass"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-0.05, 0.05), min_size=10, max_size=10))
def test_bounded_noise_never_fails(noise: list[float]) -> None:
    """±5 % noise per window over an hour can tilt a few pairs of windows, never most of
    them beyond a 50 %/h growth or a 0.02/h decay: no FAIL (PASS or INCONCLUSIVE)."""
    fits = trend.soak_fits(windows([30.0 * (1 + e) for e in noise],
                                   [0.4 + e / 10 for e in noise]), HOUR)
    assert [f.outcome for f in fits if f.outcome == "fail"] == []


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-0.02, 0.02), min_size=10, max_size=10))
def test_a_steep_growth_fails_through_noise(noise: list[float]) -> None:
    fit = trend.tpot_trend(windows([30.0 * (1 + 3 * i / 10 + e) for i, e in enumerate(noise)]),
                           HOUR)
    assert fit.outcome == "fail"


def test_soak_checks_are_one_per_fit_plus_requests() -> None:
    ws = windows([30.0] * 10)
    result = SoakResult(case=CASE, duration_s=3600, window_s=360, windows=ws,
                        fits=trend.soak_fits(ws, HOUR))
    checks = trend.soak_checks(result)
    assert [(c.gate, c.metric, c.outcome) for c in checks] == [
        ("soak", "error_rate", "pass"), ("soak", "acceptance_rate trend", "pass"),
        ("soak", "tpot trend", "pass")]
    failed = result.model_copy(update={"windows": [
        ws[0].model_copy(update={"n_errors": 2}), *ws[1:]]})
    assert trend.soak_checks(failed)[0].outcome == "fail"
    assert "2 of 100 requests failed" in trend.soak_checks(failed)[0].message


# --------------------------------------------------------------------------- the ramp


#: Output tokens of a phase of 8 requests of 33 tokens.
TOKENS = 8 * 33


def drafting(rate: float) -> Acceptance:
    """k = 3 drafted at every step of TOKENS tokens: each step yields 1 + accepted tokens,
    so drafts = TOKENS / (1 + 3 rate)."""
    return acc(rate, drafts=TOKENS / (1 + 3 * rate))


def ramp(before_tpot: float = 0.02, after_tpot: float = 0.02, burst_acc: Acceptance | None = None,
         after_rate: float = 0.4) -> RampResult:
    def phase(name: str, c: int, tpot: float, a: Acceptance) -> RampPhase:
        return RampPhase(name=name, concurrency=c,  # type: ignore[arg-type]
                         trial=make_trial_of(make_requests(8, tpot_s=tpot), acceptance=a))
    return RampResult(case=CASE, phases=[
        phase("before", 1, before_tpot, drafting(0.4)),
        phase("burst", 4, 0.03, burst_acc if burst_acc is not None else drafting(0.35)),
        phase("after", 1, after_tpot, drafting(after_rate))])


def outcomes(r: RampResult) -> dict[str, str]:
    return {c.metric: c.outcome for c in trend.ramp_checks(r, SPEC, CompareRules())}


def test_a_ramp_that_recovers_passes() -> None:
    assert outcomes(ramp()) == {
        "speculation on (before)": "pass", "speculation on (burst)": "pass",
        "speculation on (after)": "pass", "acceptance_rate (after vs before)": "pass",
        "TPOT (after vs before)": "pass"}


def test_speculation_off_in_the_burst_fails_naming_the_phase() -> None:
    none = Acceptance(drafts=0, draft_tokens=0, accepted_tokens=0, accepted_per_position=[])
    checks = trend.ramp_checks(ramp(burst_acc=none), SPEC, CompareRules())
    off = next(c for c in checks if c.metric == "speculation on (burst)")
    assert off.outcome == "fail" and off.gate == "ramp"
    assert off.message.startswith("ramp phase burst (c=4): case draft-k3-c4: speculation was "
                                  "silently off")
    assert outcomes(ramp(burst_acc=none))["speculation on (after)"] == "pass"


def test_a_burst_that_drafts_on_a_few_steps_only_fails_as_mostly_off() -> None:
    """As vLLM's dynamic k with k = 0 from batch size 2 really did: the burst drafted at the
    two steps where its batch had drained to one request (tests/e2e/test_scenarios_time.py)."""
    few = Acceptance(drafts=2, draft_tokens=6, accepted_tokens=1,
                     accepted_per_position=[1, 0, 0])
    checks = trend.ramp_checks(ramp(burst_acc=few), SPEC, CompareRules())
    off = next(c for c in checks if c.metric == "speculation on (burst)")
    assert off.outcome == "fail"
    assert ("speculation was mostly off: 2 of 263 decode steps carried a draft (0.8%), "
            "against 100.0% in the before phase at c=1") in off.message
    assert trend.drafted_share(ramp().phases[0].trial) == pytest.approx(1.0)


def test_acceptance_and_tpot_that_do_not_recover_fail() -> None:
    got = outcomes(ramp(after_tpot=0.03, after_rate=0.3))
    assert got["acceptance_rate (after vs before)"] == "fail"
    assert got["TPOT (after vs before)"] == "fail"


def test_a_busy_phase_leaves_tpot_unjudged() -> None:
    r = ramp(after_tpot=0.03)
    after = r.phases[2].model_copy(update={"trial": r.phases[2].trial.model_copy(
        update={"outside_cores": 0.9})})
    r = r.model_copy(update={"phases": [*r.phases[:2], after]})
    checks = trend.ramp_checks(r, SPEC, CompareRules(), max_outside_cores=0.25)
    tpot = next(c for c in checks if c.metric == "TPOT (after vs before)")
    assert tpot.outcome == "busy"


def test_a_no_spec_ramp_judges_tpot_only() -> None:
    nospec = ServerConfig(id="nospec")
    r = ramp()
    assert [c.metric for c in trend.ramp_checks(r, nospec, CompareRules())] == [
        "TPOT (after vs before)"]
