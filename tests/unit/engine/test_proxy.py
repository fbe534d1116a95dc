"""The delaying proxy (a fault injector) against the loopback calibration server (a
measuring stick, not a vLLM stand-in), and its re-timing schedule on a simulated clock.

No wall-clock time is asserted: through the real stack the test checks what passes and
what the proxy counts; the schedule (the k-th text chunk leaves no earlier than its
arrival + k delays) is checked against a clock the test advances itself."""

from __future__ import annotations

import asyncio
import json
import types
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import pytest

from specperf.config.workload import Sampling
from specperf.engine import proxy
from specperf.engine.load import run_load
from specperf.engine.proxy import DelayProxy, ProxyStats, delay_for_tpot, expected_tpot_rise
from specperf.lab.calibration import CalibrationConfig, CalibrationServer


def test_chunks_and_usage_survive_and_each_chunk_is_delayed() -> None:
    chunks, tpc, delay = 6, 4, 0.03
    cfg = CalibrationConfig(chunks=chunks, tokens_per_chunk=tpc)
    with CalibrationServer(cfg) as srv, DelayProxy(srv.base_url, delay) as proxy_:
        res = run_load(proxy_.base_url, "m", ["a", "b"], Sampling(max_tokens=24), 2, 4)
        stats = proxy_.stats
    assert srv.stats.requests == 4
    # Every text chunk of every stream was held back; the usage chunk and [DONE] passed.
    assert stats.requests == stats.streams == 4
    assert stats.delayed_chunks == 4 * chunks and stats.events == 4 * (chunks + 2)
    for s in res.samples:
        assert s.ok, s.error
        assert s.chunks == chunks and s.output_tokens == chunks * tpc and s.prompt_tokens == 7


# --------------------------------------------------------------------------- the schedule


def _text(i: int) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "text": f" t{i}"}]}).encode() + b"\n\n"


USAGE = b'data: {"choices": [], "usage": {"completion_tokens": 3}}\n\n'
DONE = b"data: [DONE]\n\n"


class _Simulated:
    """A clock only the proxy's sleeps move, an upstream that delivers each batch of
    bytes at a given time once the previous batch is written out, and a response that
    records when each event leaves."""

    def __init__(self, batches: list[tuple[float, bytes]], monkeypatch: pytest.MonkeyPatch):
        self.now = 0.0
        self.batches = batches
        self.sent: list[tuple[float, bytes]] = []
        self.slept: list[float] = []
        self._written = asyncio.Event()
        real_sleep = asyncio.sleep

        async def sleep(seconds: float) -> None:
            self.slept.append(seconds)
            self.now += seconds
            await real_sleep(0)

        fake_asyncio = types.ModuleType("asyncio")
        fake_asyncio.__dict__.update(vars(asyncio))
        fake_asyncio.sleep = sleep  # type: ignore[attr-defined]
        monkeypatch.setattr(proxy, "asyncio", fake_asyncio)
        monkeypatch.setattr(proxy, "time", types.SimpleNamespace(perf_counter=lambda: self.now))
        self.content = self

    async def iter_any(self) -> AsyncIterator[bytes]:
        due = 0
        for at, data in self.batches:
            assert at >= self.now, "a batch due before the proxy is done with the last one"
            self.now = at
            due += data.count(b"\n\n")
            self._written.clear()
            yield data
            while len(self.sent) < due:
                await self._written.wait()
                self._written.clear()

    async def write(self, event: bytes) -> None:
        self.sent.append((self.now, event))
        self._written.set()


def _retime(batches: list[tuple[float, bytes]], delay_s: float,
            monkeypatch: pytest.MonkeyPatch, stretch: float = 0.0
            ) -> tuple[_Simulated, ProxyStats]:
    sim = _Simulated(batches, monkeypatch)
    stats = ProxyStats()
    asyncio.run(proxy._retime(sim, sim, delay_s, stats, stretch=stretch))  # type: ignore[arg-type]
    return sim, stats


def test_kth_text_chunk_leaves_k_delays_after_the_stream_arrives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream that arrives all at once (time 0): its k-th text chunk (1-based) leaves at
    k delays; the usage chunk and [DONE] follow the last text chunk without a delay."""
    d = 0.25
    stream = _text(1) + _text(2) + _text(3) + USAGE + DONE
    sim, stats = _retime([(0.0, stream)], d, monkeypatch)
    assert [e for _, e in sim.sent] == [_text(1), _text(2), _text(3), USAGE, DONE]
    assert [t for t, _ in sim.sent] == [d, 2 * d, 3 * d, 3 * d, 3 * d]
    assert (stats.events, stats.delayed_chunks) == (5, 3)


def test_each_chunk_is_delayed_from_its_own_arrival(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow server: chunk 2 arrives long after chunk 1 was sent. It still leaves 2 delays
    after its arrival (a decode step ``delay`` slower each, as the docstring promises),
    not right away."""
    d = 0.25
    sim, stats = _retime([(0.0, _text(1)), (10.0, _text(2) + USAGE + DONE)], d, monkeypatch)
    assert [t for t, _ in sim.sent] == [d, 10.0 + 2 * d, 10.0 + 2 * d, 10.0 + 2 * d]
    assert stats.delayed_chunks == 2


def test_a_stretch_slows_the_decode_by_its_fraction_at_any_speed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks one step apart leave (1 + stretch) steps apart after the first, which is not
    held back: TTFT as it was, E2E − TTFT (and TPOT) +50 % — on a server twice as fast
    too, where a fixed delay would be twice the slowdown."""
    for step in (1.0, 0.5):
        arrivals = [(i * step, _text(i + 1)) for i in range(4)]
        arrivals[-1] = (3 * step, _text(4) + USAGE + DONE)
        sim, stats = _retime(arrivals, 0.0, monkeypatch, stretch=0.5)
        sent = [t for t, _ in sim.sent]
        assert sent == pytest.approx([0.0, 1.5 * step, 3.0 * step, 4.5 * step, 4.5 * step,
                                      4.5 * step])
        assert (sent[3] - sent[0]) / (3 * step) == pytest.approx(1.5)
        assert stats.delayed_chunks == 4


def test_the_stats_keep_each_streams_decode_as_received_and_as_forwarded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What a stretch delivered is read off the proxy's records, not assumed: the first to
    the last text chunk as they arrived and as they left, per stream — 1.5 under a 0.5
    stretch, 1 through a proxy that only forwards (the reference)."""
    arrivals = [(i * 0.5, _text(i + 1)) for i in range(4)]
    arrivals[-1] = (1.5, _text(4) + USAGE + DONE)
    for stretch, ratio in ((0.5, 1.5), (0.0, 1.0)):
        _, stats = _retime(arrivals, 0.0, monkeypatch, stretch=stretch)
        assert stats.decode_spans == [pytest.approx((1.5, 1.5 * ratio))]
        assert stats.decode_ratios() == [pytest.approx(ratio)]


def test_a_stream_of_one_text_chunk_has_no_decode_to_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, stats = _retime([(0.0, _text(1) + USAGE + DONE)], 0.0, monkeypatch, stretch=0.5)
    assert stats.decode_spans == [] and stats.decode_ratios() == []


def test_a_negative_stretch_is_refused() -> None:
    with pytest.raises(ValueError, match="stretch must be >= 0"):
        proxy.make_app("http://127.0.0.1:1", 0.0, stretch=-0.1)


def test_zero_delay_never_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    sim, stats = _retime([(0.0, _text(1) + _text(2) + USAGE + DONE)], 0.0, monkeypatch)
    assert [t for t, _ in sim.sent] == [0.0] * 4 and sim.slept == []
    assert (stats.events, stats.delayed_chunks) == (4, 0)


# --------------------------------------------------------------------------- pass-through


def test_zero_delay_passes_streams_through() -> None:
    with CalibrationServer(CalibrationConfig(chunks=3)) as srv, \
            DelayProxy(srv.base_url, 0.0) as proxy_:
        res = run_load(proxy_.base_url, "m", ["a"], Sampling(), 1, 2)
    assert all(s.ok and s.chunks == 3 and s.output_tokens == 12 for s in res.samples)


def test_other_endpoints_and_errors_pass_through_untouched() -> None:
    with CalibrationServer(CalibrationConfig(status=503)) as srv, \
            DelayProxy(srv.base_url, 0.05) as proxy_:
        req = urllib.request.Request(
            f"{proxy_.base_url}/v1/completions?x=1", method="POST",
            data=json.dumps({"prompt": "a", "stream": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)  # noqa: S310
        assert err.value.code == 503 and err.value.read() == b"injected failure"
        # An endpoint the target lacks: its 404 comes back as it is.
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{proxy_.base_url}/metrics", timeout=10)  # noqa: S310
        assert err.value.code == 404
        assert srv.stats.bodies == [{"prompt": "a", "stream": True}]
        assert proxy_.stats.streams == 0 and proxy_.stats.requests == 2


def test_delay_for_tpot_inverts_the_rise() -> None:
    d = delay_for_tpot(0.10, 0.020, chunks=11, tokens=32)
    assert expected_tpot_rise(d, 11, 32) == pytest.approx(0.002)
    with pytest.raises(ValueError):
        delay_for_tpot(0.1, 0.02, chunks=1, tokens=32)


# --------------------------------------------------------------------------- growing delay


def test_a_growing_delay_rises_with_the_proxys_age(monkeypatch: pytest.MonkeyPatch) -> None:
    """With growth, a stream that starts t seconds after the proxy was made is re-timed
    with delay + growth × t (the soak's stand-in). The proxy's clock is the test's; each
    stream is forwarded without waiting, and the delay it was given is recorded."""
    now = [100.0]
    monkeypatch.setattr(proxy, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    given: list[float] = []
    original = proxy._retime

    async def recording(upstream, resp, delay_s, stats, stall_after=None, stretch=0.0):  # type: ignore[no-untyped-def]
        given.append(delay_s)
        await original(upstream, resp, 0.0, stats, stall_after=stall_after, stretch=stretch)

    monkeypatch.setattr(proxy, "_retime", recording)
    with CalibrationServer(CalibrationConfig(chunks=3)) as srv, \
            DelayProxy(srv.base_url, 0.010, growth_s_per_s=0.002) as proxy_:
        for t in (110.0, 130.0):
            now[0] = t
            [sample] = run_load(proxy_.base_url, "m", ["a"], Sampling(), 1, 1).samples
            assert sample.ok and sample.chunks == 3
    assert given == pytest.approx([0.010 + 0.002 * 10, 0.010 + 0.002 * 30])


def test_a_negative_growth_is_refused() -> None:
    with pytest.raises(ValueError, match="growth_s_per_s must be >= 0"):
        proxy.make_app("http://127.0.0.1:1", 0.0, growth_s_per_s=-1.0)
