"""specperf.analysis.attribution: a TPOT change split into acceptance and step cost, on
synthetic cases whose effects are known."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specperf.analysis.aggregate import case_result
from specperf.analysis.attribution import attribute, pinned_rates
from specperf.analysis.judge.run import compare_runs
from specperf.analysis.stats import Verdict
from specperf.config.rules import CompareRules
from specperf.config.server_configs import ServerConfig
from specperf.report.console import render_comparison
from specperf.report.markdown import comparison_markdown
from specperf.schemas import Acceptance, Case, CaseResult
from tests.support import make_case, make_provenance, make_requests, make_run, make_trial_of

RULES = CompareRules()
CFG = ServerConfig(id="draft-k2", speculative_config={
    "method": "draft_model", "model": "tiny:draft", "num_speculative_tokens": 2})
#: A trial's TPOT moves by up to ±1 % around its centre: quiet-machine noise, far inside
#: the TPOT rule's minimum effect.
JITTER = (-0.01, 0.004, 0.0, 0.008, -0.006, 0.002, -0.003, 0.01)


def timed_case(tpot_ms: float, trials: int = 8, *, requests: int = 6,
               acceptance: Acceptance | None = None) -> CaseResult:
    """A draft-k2 case of ``trials`` trials whose TPOT sits at ``tpot_ms`` (± 1 %)."""
    ts = [make_trial_of(make_requests(requests, tpot_s=tpot_ms / 1000 * (1 + JITTER[i % 8])),
                        index=i, acceptance=acceptance) for i in range(trials)]
    return case_result(Case(config_id="draft-k2", concurrency=1), CFG, ts, "0.32.0", "abc")


def acc(drafts: float, per_position: list[float]) -> Acceptance:
    return Acceptance(drafts=drafts, draft_tokens=drafts * len(per_position),
                      accepted_tokens=sum(per_position), accepted_per_position=per_position)


RATES = [0.6, 0.35]


@pytest.mark.parametrize(("pinned_ms", "run_ms", "causes"), [
    (20.0, 20.0, []),                             # neither
    (26.0, 26.0, ["step cost"]),                  # a slower step, the same acceptance
    (20.0, 26.0, ["acceptance"]),                 # the same step, a lower acceptance
    (24.0, 30.0, ["acceptance", "step cost"]),    # both
    (16.0, 16.0, ["step cost (improvement)"]),    # a faster step
])
def test_known_effects_are_named(pinned_ms: float, run_ms: float, causes: list[str]) -> None:
    a = attribute(timed_case(20.0), timed_case(run_ms), timed_case(pinned_ms), RULES, RATES)
    assert a.causes == causes
    assert not a.undecided
    assert a.samples == "trials"
    assert a.acceptance.ratio == pytest.approx(run_ms / pinned_ms, rel=0.02)
    assert a.step_cost.ratio == pytest.approx(pinned_ms / 20.0, rel=0.02)
    assert a.total.ratio == pytest.approx(run_ms / 20.0, rel=0.02)
    assert a.pinned_rates == RATES


def test_the_summary_line_names_each_side_with_its_interval() -> None:
    a = attribute(timed_case(20.0), timed_case(26.0), timed_case(26.0), RULES, RATES)
    line = a.summary()
    assert line.startswith("draft-k2-c1: TPOT +30.")
    assert "acceptance +0." in line and "(real vs pinned)" in line
    assert "step cost +30." in line and "(pinned vs baseline)" in line
    assert "[" in line and "REGRESSION" in line
    assert line.endswith("cause: step cost")
    assert "no cause" in attribute(timed_case(20.0), timed_case(20.0), timed_case(20.0),
                                   RULES, RATES).summary()


def test_too_few_samples_is_undecided_not_no_cause() -> None:
    # Two requests in one trial a side: no interval, INCONCLUSIVE on both sides.
    def tiny(ms: float) -> CaseResult:
        return timed_case(ms, trials=1, requests=2)

    a = attribute(tiny(20.0), tiny(26.0), tiny(20.0), RULES, RATES)
    assert a.causes == []
    assert a.undecided
    assert a.samples == "requests"
    assert "cause undecided" in a.summary()
    assert a.note is not None and "requests" in a.note


def test_kept_runs_widen_the_sides_that_cross_runs_only() -> None:
    base, cur, pinned = timed_case(20.0), timed_case(21.0), timed_case(20.5)
    alone = attribute(base, cur, pinned, RULES, RATES)
    # An earlier kept run 10 % slower: run-to-run drift the baseline side now shows.
    widened = attribute(base, cur, pinned, RULES, RATES, earlier=[timed_case(22.0)])
    width = lambda c: c.ci_high - c.ci_low  # noqa: E731
    assert width(widened.step_cost) > width(alone.step_cost)
    assert width(widened.total) > width(alone.total)
    assert widened.acceptance == alone.acceptance  # same run, interleaved: no drift between
    assert alone.note is not None and "one baseline run" in alone.note


@settings(max_examples=25, deadline=None)
@given(step=st.sampled_from([1.0, 1.3, 1.6, 2.0]), loss=st.sampled_from([1.0, 1.3, 1.6]))
def test_each_injected_factor_is_found_on_its_own_side(step: float, loss: float) -> None:
    pinned = 20.0 * step
    a = attribute(timed_case(20.0), timed_case(pinned * loss), timed_case(pinned),
                  RULES, RATES)
    assert ("step cost" in a.causes) == (step > 1.0)
    assert ("acceptance" in a.causes) == (loss > 1.0)
    assert not a.undecided


#: What the synthetic sampler itself adds to a step (on CPU specperf's port of vLLM's
#: kernels is slower than vLLM's own sampler): the twin is this much slower at equal
#: acceptance and equal step cost.
SAMPLER = 1.2


@pytest.mark.parametrize(("step", "loss", "causes"), [
    (1.0, 1.0, []),
    (1.3, 1.0, ["step cost"]),
    (1.0, 1.3, ["acceptance"]),
    (1.3, 1.3, ["acceptance", "step cost"]),
])
def test_against_the_baselines_twin_the_samplers_own_cost_cancels(
        step: float, loss: float, causes: list[str]) -> None:
    base, base_twin = timed_case(20.0), timed_case(20.0 * SAMPLER)
    cur, twin = timed_case(20.0 * step * loss), timed_case(20.0 * SAMPLER * step)
    # Three kept runs, each with its twin (the step side needs 3), without drift.
    a = attribute(base, cur, twin, RULES, RATES, earlier=[base, base],
                  base_twins=[(base, base_twin)] * 3)
    assert a.reference == "baseline twin"
    assert a.causes == causes and not a.undecided
    assert a.step_cost.ratio == pytest.approx(step, rel=0.02)
    assert a.acceptance.ratio == pytest.approx(loss, rel=0.02)
    assert "(pinned vs the baseline's pinned)" in a.summary()
    # Against the baseline's real server alone, the sampler's cost reads as step cost.
    plain = attribute(base, cur, twin, RULES, RATES)
    assert plain.reference == "baseline" and "step cost" in plain.causes
    assert plain.note is not None and "synthetic sampler itself costs" in plain.note


def test_kept_twins_pool_and_widen_the_step_cost_side() -> None:
    base, base_twin = timed_case(20.0), timed_case(24.0)
    cur, twin = timed_case(21.0), timed_case(24.5)
    one = attribute(base, cur, twin, RULES, RATES, base_twins=[(base, base_twin)])
    # Fewer kept runs than the step side needs to know the run-to-run drift: no cause is
    # named from it (quiet, a twin judged against two kept runs read as a false 24 %
    # "improvement").
    assert one.step_cost.verdict is Verdict.INCONCLUSIVE and "not decided" in one.step_cost.reason
    assert one.note is not None and "step cost is not decided before 3" in one.note
    # Earlier kept pairs 10 % slower and 5 % faster on both servers: drift between runs.
    earlier = [timed_case(22.0), timed_case(19.0)]
    three = attribute(base, cur, twin, RULES, RATES, earlier=earlier,
                      base_twins=[(base, base_twin), (earlier[0], timed_case(26.4)),
                                  (earlier[1], timed_case(22.8))])
    width = lambda c: c.ci_high - c.ci_low  # noqa: E731
    assert width(three.step_cost) > width(one.step_cost)
    assert "estimated with 2 degrees of freedom" in three.step_cost.reason
    assert three.step_cost.verdict is Verdict.INCONCLUSIVE and "not decided" not in three.step_cost.reason
    two = attribute(base, cur, twin, RULES, RATES, earlier=earlier[:1],
                    base_twins=[(base, base_twin), (earlier[0], timed_case(26.4))])
    # Real ÷ twin is the same in both kept runs: the acceptance side is as sure as before.
    assert two.acceptance.verdict == one.acceptance.verdict
    # A kept pair of too few trials is not a reference: the plain split, said so.
    short = attribute(base, cur, twin, RULES, RATES,
                      base_twins=[(timed_case(20.0, trials=1), timed_case(24.0, trials=1))])
    assert short.reference == "baseline"

def test_one_kept_twin_takes_its_spread_from_the_real_runs() -> None:
    # Three real baseline runs 10 % apart, the newest with a twin; this run's twin sits
    # 15 % below it with nothing changed (its server start's offset, as seen quiet).
    runs = [timed_case(20.0), timed_case(22.0), timed_case(18.2)]
    a = attribute(runs[0], timed_case(20.0 * 0.85), timed_case(24.0 * 0.85), RULES, RATES,
                  earlier=runs[1:], base_twins=[(runs[0], timed_case(24.0))])
    assert a.reference == "baseline twin"
    assert a.step_cost.verdict is Verdict.INCONCLUSIVE  # within the real runs' spread
    assert a.causes == [] and a.undecided


def test_real_and_twin_runs_pool_their_spread() -> None:
    # Three real runs and two twins with the same run offsets: a doubled step cost is
    # decided with the spread estimated from both (t with 2 degrees of freedom), where the
    # two twin runs alone would leave 1 (t = 12.7) and an interval down to no change.
    offsets = [1.0, 1.1, 0.925]
    runs = [timed_case(20.0 * o) for o in offsets]
    twins = [(runs[0], timed_case(24.0)), (runs[1], timed_case(24.0 * 1.1))]
    a = attribute(runs[0], timed_case(40.0), timed_case(48.0), RULES, RATES,
                  earlier=runs[1:], base_twins=twins)
    assert a.step_cost.verdict is Verdict.REGRESSION
    assert "estimated with 2 degrees of freedom" in a.step_cost.reason
    assert a.causes == ["step cost"]


def test_pinned_rates_pool_the_baseline_cases() -> None:
    c1 = timed_case(20.0, trials=1, acceptance=acc(100, [60, 30]))
    c2 = timed_case(20.0, trials=1, acceptance=acc(300, [180, 120]))
    assert pinned_rates([c1, c2], 2) == [0.6, 0.375]


@given(st.lists(st.integers(0, 1000), min_size=3, max_size=3), st.integers(1, 1000))
def test_pinned_rates_are_what_vllm_accepts(counts: list[int], extra: int) -> None:
    # vLLM refuses rates outside [0, 1] or increasing with the position.
    drafts = max(counts) + extra
    per_pos = sorted(counts, reverse=True)
    rates = pinned_rates([timed_case(20.0, trials=1, acceptance=acc(drafts, per_pos))], 3)
    assert rates is not None and len(rates) == 3
    assert all(0.0 <= r <= 1.0 for r in rates)
    assert all(rates[i + 1] <= rates[i] for i in range(2))


def test_no_rates_without_drafts_or_with_another_k() -> None:
    assert pinned_rates([timed_case(20.0, trials=1)], 2) is None
    assert pinned_rates([timed_case(20.0, trials=1, acceptance=acc(100, [60, 30]))], 3) is None


def test_the_comparison_carries_and_renders_the_attribution() -> None:
    base = timed_case(20.0)
    cur, pinned = timed_case(26.0), timed_case(20.0, acceptance=acc(100, [55, 30]))
    prov = make_provenance()
    run = make_run([cur], provenance=prov, pinned_acceptance={"draft-k2-c1": pinned},
                   pinned_rates={"draft-k2": RATES})
    baseline = make_run([base], provenance=prov)
    cmp = compare_runs(run, baseline)
    assert [a.causes for a in cmp.attributions] == [["acceptance"]]
    assert cmp.attributions[0].measured_rates == [0.55, 0.3]
    assert cmp.attributions[0].reference == "baseline"  # the baseline kept no twin
    # A baseline that kept a twin at these rates is the reference; at other rates, not.
    kept = make_run([base], provenance=prov, pinned_acceptance={"draft-k2-c1": timed_case(20.0)},
                    pinned_rates={"draft-k2": RATES})
    assert [a.reference for a in compare_runs(run, kept).attributions] == ["baseline twin"]
    other = kept.model_copy(update={"pinned_rates": {"draft-k2": [0.5, 0.3]}})
    assert [a.reference for a in compare_runs(run, other).attributions] == ["baseline"]
    text = render_comparison(cmp, width=200, color=False)
    assert "acceptance loss vs step cost" in text
    assert "cause: acceptance" in text
    md = comparison_markdown(cmp)
    assert "Acceptance loss vs step cost (1)" in md and "cause: acceptance" in md
    # The run file keeps the twin's trials and rates; one without a twin stays as it was.
    again = type(run).model_validate_json(run.model_dump_json())
    assert again.pinned_rates == {"draft-k2": RATES}
    assert "pinned_acceptance" not in make_run([make_case()]).model_dump()
    assert compare_runs(make_run([cur], provenance=prov), baseline).attributions == []


def test_a_twin_a_partial_update_carried_over_is_one_kept_twin() -> None:
    """A `-k` update kept a case and its twin in the baseline; the kept run that measured
    them holds the same pair. It is one kept twin, not two that agree exactly."""
    from datetime import timedelta

    from specperf.analysis.judge.run import _kept_twins
    from specperf.schemas import Baseline

    real, twin = make_case(), make_case(tpot_s=0.024)
    prov = make_provenance()
    kept = Baseline(provenance=prov, cases=[real], pinned_acceptance={real.case.id: twin},
                    pinned_rates={real.case.config_id: [0.5]})
    later = prov.model_copy(update={"date": prov.date + timedelta(days=1)})
    baseline = kept.model_copy(update={"provenance": later})
    assert _kept_twins(real, [0.5], baseline, [kept]) == [(real, twin)]
