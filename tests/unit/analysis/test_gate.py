"""The gates on real result models: plain-words failures naming case, metric, numbers."""

from __future__ import annotations

from specperf.analysis import gate
from specperf.config.profile import AcceptanceGate, BudgetGate, Load, TpotGainGate
from specperf.schemas import Acceptance


def acc(drafts: float, accepted_per_pos: list[float]) -> Acceptance:
    k = len(accepted_per_pos)
    return Acceptance(drafts=drafts, draft_tokens=drafts * k,
                      accepted_tokens=sum(accepted_per_pos), accepted_per_position=accepted_per_pos)


def test_acceptance_floor_pass_and_fail(build_case) -> None:
    r = build_case(acceptance=acc(100, [60, 30]))  # rate 90/200 = 0.45
    ok = gate.check_acceptance(r, AcceptanceGate(min_rate=0.4), None)
    assert [c.outcome for c in ok] == ["pass"]
    bad = gate.check_acceptance(r, AcceptanceGate(min_rate=0.5, min_per_position=[0.7, 0.2]), None)
    assert [c.outcome for c in bad] == ["fail", "fail", "pass"]
    assert "draft-k2-c1" in bad[0].message and "0.4500" in bad[0].message
    assert "position 0" in bad[1].message and "0.6000" in bad[1].message


def test_acceptance_vs_baseline_catches_one_token_in_a_thousand(build_case) -> None:
    # 1000 accepted of 1000 drafted (600 drafts: no position accepts more than were drafted)
    base = build_case(acceptance=Acceptance(drafts=600, draft_tokens=1000, accepted_tokens=1000,
                                            accepted_per_position=[600, 400]))
    cur = build_case(acceptance=Acceptance(drafts=600, draft_tokens=1000, accepted_tokens=999,
                                           accepted_per_position=[600, 399]))
    checks = gate.check_acceptance(cur, AcceptanceGate(baseline_tolerance=0.0), base)
    overall = next(c for c in checks if c.metric == "acceptance_rate vs baseline")
    assert overall.outcome == "fail"
    assert "baseline 1.0000" in overall.message and "0.9990" in overall.message
    same = gate.check_acceptance(base, AcceptanceGate(baseline_tolerance=0.0), base)
    assert all(c.outcome == "pass" for c in same)


def test_acceptance_without_counters_fails_clearly(build_case) -> None:
    r = build_case(acceptance=None)
    [c] = gate.check_acceptance(r, AcceptanceGate(min_rate=0.1), None)
    assert c.outcome == "fail" and "no vllm:spec_decode counters" in c.message


def test_tpot_gain_is_paired_with_nospec(build_case) -> None:
    nospec = build_case("nospec", tpot_s=0.030, spec=False)
    fast = build_case(tpot_s=0.015)
    slow = build_case(tpot_s=0.028)
    g = TpotGainGate(max_concurrency=1, min_ratio=1.3)
    assert gate.check_tpot_gain(fast, nospec, g).outcome == "pass"
    c = gate.check_tpot_gain(slow, nospec, g)
    assert c.outcome == "fail"
    assert "28.00 ms vs no-spec 30.00 ms" in c.message and "1.07×" in c.message
    assert "1.30×" in c.message
    assert gate.check_tpot_gain(slow, None, g).outcome == "fail"


def test_budgets_against_baseline(build_case) -> None:
    base = build_case(ttft_s=0.100)
    g = BudgetGate(min_concurrency=1, ttft_tolerance=0.2, throughput_tolerance=0.1)
    assert gate.check_ttft_budget(build_case(ttft_s=0.115), base, g, "").outcome == "pass"
    over = gate.check_ttft_budget(build_case(ttft_s=0.130), base, g, "")
    assert over.outcome == "fail" and "+30.0 %" in over.message and "OVER" in over.message
    skipped = gate.check_ttft_budget(build_case(), None, g, "no baseline here")
    assert skipped.outcome == "skip" and skipped.message == "no baseline here"
    slow = build_case(tpot_s=0.03)
    t = gate.check_throughput_budget(slow, base, g, "")
    assert t.outcome == "fail" and "BELOW" in t.message


def test_budget_falls_back_to_means_for_a_published_baseline(build_case) -> None:
    base = build_case(ttft_s=0.100)
    base = base.model_copy(update={"ttft_ms": base.ttft_ms.model_copy(update={"median": None})})
    c = gate.check_ttft_budget(build_case(ttft_s=0.105), base,
                               BudgetGate(min_concurrency=1, ttft_tolerance=0.1), "")
    assert c.outcome == "pass" and c.metric == "mean TTFT"


def test_error_budget(build_case) -> None:
    r = build_case(n=10, errors=1)
    c = gate.check_requests(r, Load(error_budget=0.0))
    assert c.outcome == "fail" and "1 of 10 requests failed" in c.message and "HTTP 500" in c.message
    assert gate.check_requests(r, Load(error_budget=0.1)).outcome == "pass"
