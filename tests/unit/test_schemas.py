"""The bounds of the stored models (specperf.schemas), as properties (hypothesis): any
non-finite or negative latency, duration, throughput or count is refused; any acceptance
rate outside [0, 1] is refused; every valid model survives a JSON round trip unchanged."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from specperf.schemas import (
    Acceptance,
    Baseline,
    RequestSample,
    RequestSpecDecode,
    RunResult,
    ScenarioResult,
    ScenarioSegment,
    Summary,
    TimeBreakdown,
)
from tests.support import make_baseline, make_case, make_run

finite = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)
#: Any float a corrupt or hand-edited file can carry that is not a measurement.
not_a_measurement = st.one_of(
    st.just(math.nan), st.just(math.inf), st.just(-math.inf),
    st.floats(max_value=-1e-12, allow_nan=False, allow_infinity=False))
LATENCIES = ("start_s", "ttft_s", "e2e_s")


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(LATENCIES), bad=not_a_measurement)
def test_any_non_finite_or_negative_latency_is_refused(field: str, bad: float) -> None:
    with pytest.raises(ValidationError) as err:
        RequestSample.model_validate({"ok": True, "start_s": 0.0, field: bad})
    assert err.value.errors()[0]["loc"] == (field,)


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(("mean", "median", "p99", "min", "max", "stdev")),
       bad=not_a_measurement)
def test_any_non_finite_or_negative_summary_figure_is_refused(field: str, bad: float) -> None:
    with pytest.raises(ValidationError):
        Summary.model_validate({"n": 3, field: bad})


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(("output_tokens", "prompt_tokens", "chunks")),
       bad=st.integers(max_value=-1))
def test_any_negative_count_is_refused(field: str, bad: int) -> None:
    with pytest.raises(ValidationError):
        RequestSample.model_validate({"ok": True, "start_s": 0.0, field: bad})


@settings(max_examples=80, deadline=None)
@given(drafted=st.floats(min_value=1, max_value=1e7), rate=st.floats(min_value=0, max_value=4))
def test_an_acceptance_rate_is_kept_exactly_when_within_0_and_1(drafted: float,
                                                                rate: float) -> None:
    data = {"drafts": drafted, "draft_tokens": drafted, "accepted_tokens": drafted * rate,
            "accepted_per_position": []}
    if rate <= 1:
        a = Acceptance.model_validate(data)
        assert a.rate is not None and 0 <= a.rate <= 1 + 1e-9
    elif rate > 1 + 1e-6:
        with pytest.raises(ValidationError, match="above 1"):
            Acceptance.model_validate(data)


@settings(max_examples=60, deadline=None)
@given(drafts=st.floats(min_value=1, max_value=1e6), over=st.floats(min_value=1.001,
                                                                   max_value=100))
def test_a_position_rate_above_1_is_refused(drafts: float, over: float) -> None:
    with pytest.raises(ValidationError, match=r"accepted_per_position\[1\]"):
        Acceptance(drafts=drafts, draft_tokens=drafts * 3, accepted_tokens=drafts,
                   accepted_per_position=[drafts * 0.5, drafts * over])


@settings(max_examples=100, deadline=None)
@given(ok=st.booleans(), start=finite, ttft=st.none() | finite, e2e=st.none() | finite,
       out=st.integers(0, 10**6), prompt=st.integers(0, 10**6), chunks=st.integers(0, 10**6),
       error=st.none() | st.text(max_size=20))
def test_valid_samples_round_trip_through_json(ok: bool, start: float, ttft: float | None,
                                               e2e: float | None, out: int, prompt: int,
                                               chunks: int, error: str | None) -> None:
    s = RequestSample(ok=ok, start_s=start, ttft_s=ttft, e2e_s=e2e, output_tokens=out,
                      prompt_tokens=prompt, chunks=chunks, error=error)
    assert RequestSample.model_validate_json(s.model_dump_json()) == s
    assert RequestSample.model_validate(json.loads(s.model_dump_json())) == s


@settings(max_examples=40, deadline=None)
@given(drafts=st.floats(min_value=0, max_value=1e6), frac=st.floats(min_value=0, max_value=1),
       positions=st.lists(st.floats(min_value=0, max_value=1), max_size=6))
def test_valid_acceptance_round_trips_through_json(drafts: float, frac: float,
                                                   positions: list[float]) -> None:
    a = Acceptance(drafts=drafts, draft_tokens=drafts * 2, accepted_tokens=drafts * 2 * frac,
                   accepted_per_position=[drafts * p for p in positions])
    assert Acceptance.model_validate_json(a.model_dump_json()) == a


def test_a_baseline_round_trips_and_refuses_a_duplicated_case() -> None:
    b = make_baseline()
    assert Baseline.model_validate_json(b.model_dump_json()) == b
    data = json.loads(b.model_dump_json())
    data["cases"].append(data["cases"][0])
    with pytest.raises(ValidationError, match="listed twice"):
        Baseline.model_validate(data)


@pytest.mark.parametrize("model", [RunResult, Baseline, ScenarioResult, ScenarioSegment])
def test_every_file_part_that_lists_cases_holds_each_once_and_finds_it(
        model: type[RunResult | Baseline | ScenarioResult | ScenarioSegment]) -> None:
    # The one rule (specperf.schemas.measure.WithCases) each of them inherits.
    fields = {RunResult: json.loads(make_run([]).model_dump_json()),
              Baseline: json.loads(make_baseline().model_dump_json()),
              ScenarioResult: {"kind": "prefix_cache"}, ScenarioSegment: {"name": "short"}}[model]
    one, other = make_case("draft-k2", 1), make_case("draft-k2", 4)
    data = {**fields, "cases": [json.loads(c.model_dump_json()) for c in (one, other)]}
    parsed = model.model_validate(data)
    assert parsed.case(other.case) == other and parsed.case(make_case("x", 1).case) is None
    data["cases"].append(data["cases"][0])
    with pytest.raises(ValidationError, match=r"case draft-k2-c1 .* listed twice, at cases.0 "
                                              r"and cases.2"):
        model.model_validate(data)


@pytest.mark.parametrize("version", [0, -1, 2, 99])
def test_a_schema_version_this_specperf_does_not_read_is_refused(version: int) -> None:
    data = json.loads(make_baseline().model_dump_json())
    data["schema_version"] = version
    with pytest.raises(ValidationError, match="schema_version"):
        Baseline.model_validate(data)


TIMES = TimeBreakdown(wall_s=412.0, server_starts_s=184.0, trials_s=156.0, warmups_s=21.0,
                      reports_s=6.0, shutdown_s=4.0, other_s=41.0)


def test_a_run_keeps_its_time_breakdown_through_json() -> None:
    run = make_run([make_case()], time_breakdown=TIMES)
    back = RunResult.model_validate_json(run.model_dump_json())
    assert back.time_breakdown == TIMES
    assert back.time_breakdown is not None and back.time_breakdown.quiet_ratio == 412 / 361


def test_a_run_without_a_time_breakdown_is_written_as_before() -> None:
    """Files written before the breakdown existed load, and a run without one is written
    without the key (byte-identical to an older specperf's)."""
    run = make_run([make_case()])
    data = json.loads(run.model_dump_json())
    assert "time_breakdown" not in data
    assert RunResult.model_validate(data).time_breakdown is None


@pytest.mark.parametrize("field", ["wall_s", "trials_s", "other_s"])
@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_a_negative_or_non_finite_time_is_refused(field: str, bad: float) -> None:
    data = {**TIMES.model_dump(), field: bad}
    with pytest.raises(ValidationError, match=field):
        TimeBreakdown.model_validate(data)


def test_per_request_spec_metrics_are_optional_and_checked() -> None:
    """Samples without per-request spec-decode metrics are written as before (no new
    keys); with them they round-trip; counts that contradict each other are refused."""
    plain = RequestSample(ok=True, start_s=0.0, output_tokens=5, chunks=5)
    assert "spec" not in plain.model_dump() and "token_chunks" not in plain.model_dump()
    spec = RequestSpecDecode(steps=3, draft_tokens=7, accepted_tokens=3,
                             accepted_histogram=[1, 1, 1], proposal_lengths=[0, 1, 0, 2])
    full = plain.model_copy(update={"token_chunks": 6, "spec": spec})
    assert RequestSample.model_validate_json(full.model_dump_json()) == full
    with pytest.raises(ValidationError, match="accepted_histogram sums to 2, not steps 3"):
        RequestSpecDecode(steps=3, draft_tokens=7, accepted_tokens=1, accepted_histogram=[1, 1])
    with pytest.raises(ValidationError, match="proposal_lengths sums to 2, not steps 1"):
        RequestSpecDecode(steps=1, draft_tokens=2, accepted_tokens=0, accepted_histogram=[1],
                          proposal_lengths=[0, 1, 1])
