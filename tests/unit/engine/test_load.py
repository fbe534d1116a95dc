"""The load client against the loopback calibration server (specperf.lab.calibration): a
measuring stick for the client itself, not a vLLM stand-in. The client against real
vLLM is covered in test_e2e.py."""

from __future__ import annotations

from specperf.config.profile import Sampling
from specperf.engine.load import run_load
from specperf.lab.calibration import CalibrationConfig, CalibrationServer
from specperf.schemas import RequestSample


def test_tokens_come_from_usage_not_chunks() -> None:
    cfg = CalibrationConfig(chunks=5, tokens_per_chunk=7, first_chunk_delay_s=0.05,
                            chunk_delay_s=0.01)
    with CalibrationServer(cfg) as srv:
        res = run_load(srv.base_url, "m", ["a", "b"], Sampling(max_tokens=35), 1, 3)
    assert [s.output_tokens for s in res.samples] == [35, 35, 35]
    assert [s.chunks for s in res.samples] == [5, 5, 5]
    for s in res.samples:
        assert s.ok and s.ttft_s is not None and s.e2e_s is not None
        # The first text arrives after the injected delay, and TTFT cannot precede it.
        assert s.ttft_s >= 0.05 and s.e2e_s >= s.ttft_s + 4 * 0.01
        assert s.tpot_s == (s.e2e_s - s.ttft_s) / 34


def test_sampling_is_sent_explicitly_and_concurrency_is_bounded() -> None:
    cfg = CalibrationConfig(chunks=4, chunk_delay_s=0.02)
    with CalibrationServer(cfg) as srv:
        res = run_load(srv.base_url, "m", ["p0", "p1", "p2"], Sampling(seed=7, max_tokens=16), 2,
                       8, warmup_requests=2)
        stats = srv.stats
    assert stats.requests == 10 and len(res.samples) == 8
    assert stats.max_in_flight <= 2
    body = stats.bodies[-1]
    assert body["temperature"] == 0.0 and body["seed"] == 7 and body["max_tokens"] == 16
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    # Measured requests walk the prompt list in order; warmup used the end of it.
    assert [b["prompt"] for b in stats.bodies[:2]] == ["p2", "p1"]
    assert [b["prompt"] for b in stats.bodies[2:5]] == ["p0", "p1", "p2"]


def test_failures_are_samples_with_errors() -> None:
    with CalibrationServer(CalibrationConfig(status=500)) as srv:
        res = run_load(srv.base_url, "m", ["a"], Sampling(), 1, 2)
    assert all(not s.ok and s.error and s.error.startswith("HTTP 500") for s in res.samples)
    with CalibrationServer(CalibrationConfig(send_usage=False)) as srv:
        res = run_load(srv.base_url, "m", ["a"], Sampling(), 1, 1)
    assert res.samples[0].error == "stream ended without usage"


def test_unreachable_server_is_an_error_sample() -> None:
    res = run_load("http://127.0.0.1:9", "m", ["a"], Sampling(), 1, 1, request_timeout_s=5)
    assert not res.samples[0].ok and "ClientConnectorError" in (res.samples[0].error or "")


def test_on_request_sees_each_measured_request_as_it_finishes() -> None:
    seen: list[RequestSample] = []
    cfg = CalibrationConfig(chunks=3, chunk_delay_s=0.01)
    with CalibrationServer(cfg) as srv:
        res = run_load(srv.base_url, "m", ["p0", "p1", "p2"], Sampling(max_tokens=8), 2, 5,
                       warmup_requests=2, on_request=seen.append)
    # Warmup requests are not reported; every measured one is, once, with its sample.
    assert len(seen) == 5
    assert sorted(s.start_s for s in seen) == sorted(s.start_s for s in res.samples)
    assert all(s.ok for s in seen)
