"""The load client against the loopback calibration server (specperf.lab.calibration): a
measuring stick for the client itself, not a vLLM stand-in. The client against real
vLLM is covered in tests/e2e/test_perf_runs.py.

What is asserted is what the client promises — which requests it sends, with what body,
how many at once, and what it records of each — never a duration: how long a request
takes is up to the machine (a benchmark's business, not a test's)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable

from aiohttp import web

from specperf.config.workload import Sampling
from specperf.engine.load import run_interleaved_load, run_load, spec_decode_of
from specperf.engine.loopback import LoopbackApp
from specperf.lab import calibration
from specperf.lab.calibration import CalibrationConfig, CalibrationServer, CalibrationStats
from specperf.schemas import RequestSample
from tests.support import need_module

#: How long the gate below waits for a full house before letting a request through alone.
GATE_TIMEOUT_S = 30.0


class GatedCalibrationServer(LoopbackApp):
    """The calibration server, but each measured request waits until ``width`` requests
    are in flight at once (after the first ``warmup`` requests, which come one by one).

    A client that sends ``width`` streams concurrently passes the gate at once; one that
    sends fewer waits out the timeout and the stats show fewer in flight. So the
    in-flight count the stats record is the client's, not a matter of timing."""

    def __init__(self, cfg: CalibrationConfig, width: int, warmup: int) -> None:
        self.stats = CalibrationStats()
        app = calibration.make_app(cfg, self.stats)
        seen = 0
        waiting = 0
        full = asyncio.Event()

        @web.middleware
        async def gate(request: web.Request,
                       handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                       ) -> web.StreamResponse:
            nonlocal seen, waiting
            seen += 1
            if seen > warmup and not full.is_set():
                waiting += 1
                if waiting >= width:
                    full.set()
                try:
                    await asyncio.wait_for(full.wait(), GATE_TIMEOUT_S)
                except asyncio.TimeoutError:
                    pass
            return await handler(request)

        app.middlewares.append(gate)
        super().__init__(app, name="specperf-gated-calibration")


def test_tokens_come_from_usage_not_chunks() -> None:
    cfg = CalibrationConfig(chunks=5, tokens_per_chunk=7)
    with CalibrationServer(cfg) as srv:
        res = run_load(srv.base_url, "m", ["a", "b"], Sampling(max_tokens=35), 1, 3)
    assert [s.output_tokens for s in res.samples] == [35, 35, 35]
    assert [s.chunks for s in res.samples] == [5, 5, 5]
    assert [s.prompt_tokens for s in res.samples] == [7, 7, 7]
    for s in res.samples:
        assert s.ok and s.ttft_s is not None and s.e2e_s is not None
        # The first token comes before the last, and TPOT spreads the rest over the tokens
        # after the first (usage's count, not the chunks').
        assert 0 < s.ttft_s <= s.e2e_s
        assert s.tpot_s == (s.e2e_s - s.ttft_s) / 34


def test_sampling_is_sent_explicitly_and_concurrency_is_bounded() -> None:
    prompts = ["p0", "p1", "p2"]
    with GatedCalibrationServer(CalibrationConfig(chunks=4, chunk_delay_s=0.02), width=2,
                                warmup=2) as srv:
        res = run_load(srv.base_url, "m", prompts, Sampling(seed=7, max_tokens=16), 2, 8,
                       warmup_requests=2)
        stats = srv.stats
    assert stats.requests == 10 and len(res.samples) == 8
    assert all(s.ok for s in res.samples)
    # Concurrency 2: two streams at once (the gate holds the first until the second
    # arrives), never three.
    assert stats.max_in_flight == 2
    for body in stats.bodies:
        assert body["temperature"] == 0.0 and body["seed"] == 7 and body["max_tokens"] == 16
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    # Warmup, one request at a time, used the end of the list (so it does not prime the
    # prefix cache for the first measured prompts).
    assert [b["prompt"] for b in stats.bodies[:2]] == ["p2", "p1"]
    # The 8 measured requests walk the list round-robin: p0, p1, p2, p0, … — which of two
    # waiting streams the server hears first is the event loop's business, so the prompts
    # are compared as a multiset, not as an order.
    measured = Counter(b["prompt"] for b in stats.bodies[2:])
    assert measured == Counter(prompts[i % 3] for i in range(8))


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


def test_per_request_spec_decode_metrics_are_read_as_vllm_writes_them() -> None:
    """The final usage chunk built by vLLM's own classes (what its completion server streams
    with --per-request-spec-decode-metrics detailed), read back by the client."""
    protocol = need_module("vllm.entrypoints.generate.base.protocol")
    stats = need_module("vllm.v1.metrics.stats")
    completion = need_module("vllm.entrypoints.openai.completion.protocol")
    m = stats.RequestSpecDecodeMetrics.new(3)
    for drafted, accepted in ((3, 2), (3, 0), (1, 1), (2, 2)):
        m.observe(drafted, accepted, detailed=True)
    chunk = completion.CompletionStreamResponse(
        id="cmpl-1", created=0, model="m", choices=[],
        usage={"prompt_tokens": 5, "completion_tokens": 10, "total_tokens": 15},
        metrics=protocol.PerRequestMetrics(
            speculative_decoding=protocol.SpeculativeDecodingMetrics(**m.to_dict())))
    event = json.loads(chunk.model_dump_json(exclude_unset=False, exclude_none=True))
    spec = spec_decode_of(event)
    assert spec is not None
    assert (spec.steps, spec.draft_tokens, spec.accepted_tokens) == (4, 9, 5)
    assert spec.accepted_histogram == [1, 1, 2, 0]
    assert spec.proposal_lengths == [0, 1, 1, 2]
    # `summary` leaves out the per-step arrays: no proposal lengths, the rest as before.
    m_summary = stats.RequestSpecDecodeMetrics.new(3)
    m_summary.observe(3, 2)
    event["metrics"]["speculative_decoding"] = m_summary.to_dict()
    spec = spec_decode_of(event)
    assert spec is not None and spec.proposal_lengths == [] and spec.steps == 1
    # A server that reports none (no flag, or no spec decoding): nothing.
    assert spec_decode_of({"usage": {"completion_tokens": 3}}) is None


def test_interleaved_load_sends_each_prompt_to_both_servers_in_turn() -> None:
    """load.pairing = "requests": one request at a time, the i-th prompt to both servers
    before the next, the order reversing each round (A B, B A, …); each side's duration
    is its own requests' time, not the other's."""
    prompts = ["p0", "p1", "p2"]
    cfg = CalibrationConfig(chunks=3, chunk_delay_s=0.005)
    with CalibrationServer(cfg) as a, CalibrationServer(cfg) as b:
        seen: list[RequestSample] = []
        res_a, res_b = run_interleaved_load([(a.base_url, "ma"), (b.base_url, "mb")], prompts,
                                            Sampling(max_tokens=8), 5, warmup_requests=1,
                                            on_request=seen.append)
        bodies_a, bodies_b = a.stats.bodies, b.stats.bodies
    # One warm-up each, from the end of the list; then the same prompts in the same order.
    assert [x["prompt"] for x in bodies_a] == ["p2", "p0", "p1", "p2", "p0", "p1"]
    assert [x["prompt"] for x in bodies_b] == [x["prompt"] for x in bodies_a]
    assert {x["model"] for x in bodies_a} == {"ma"} and {x["model"] for x in bodies_b} == {"mb"}
    assert len(res_a.samples) == len(res_b.samples) == 5 and len(seen) == 10
    assert all(s.ok for s in (*res_a.samples, *res_b.samples))
    # Serial, from one origin: A first in even rounds, B first in odd ones.
    for i, (x, y) in enumerate(zip(res_a.samples, res_b.samples, strict=True)):
        assert (x.start_s < y.start_s) == (i % 2 == 0)
    ends = [s.start_s + (s.e2e_s or 0) for s in (*res_a.samples, *res_b.samples)]
    for res in (res_a, res_b):
        assert res.concurrency == 1 and res.warmup_requests == 1
        own = sum(s.e2e_s or 0 for s in res.samples)
        assert own <= res.duration_s < max(ends)
