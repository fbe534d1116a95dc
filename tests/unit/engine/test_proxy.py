"""The delaying proxy (a fault injector) against the loopback calibration server (a
measuring stick, not a vLLM stand-in). Only lower bounds on time are asserted: a loaded
machine makes things slower, never faster."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from specperf.config.profile import Sampling
from specperf.engine.load import run_load
from specperf.engine.proxy import DelayProxy, delay_for_tpot, expected_tpot_rise
from specperf.lab.calibration import CalibrationConfig, CalibrationServer


def test_chunks_and_usage_survive_and_each_chunk_is_delayed() -> None:
    chunks, tpc, delay = 6, 4, 0.03
    cfg = CalibrationConfig(chunks=chunks, tokens_per_chunk=tpc)
    with CalibrationServer(cfg) as srv, DelayProxy(srv.base_url, delay) as proxy:
        res = run_load(proxy.base_url, "m", ["a", "b"], Sampling(max_tokens=24), 2, 4)
        stats = proxy.stats
    assert srv.stats.requests == 4
    assert stats.streams == 4 and stats.delayed_chunks == 4 * chunks
    for s in res.samples:
        assert s.ok, s.error
        assert s.chunks == chunks and s.output_tokens == chunks * tpc and s.prompt_tokens == 7
        assert s.ttft_s is not None and s.e2e_s is not None and s.tpot_s is not None
        # The k-th chunk (1-based) leaves no earlier than k delays after the request
        # started. (Differences such as E2E - TTFT are not lower-bounded: the first
        # chunk's own delivery can be the slower one; 10 % slack covers that jitter.)
        assert s.ttft_s >= delay
        assert s.e2e_s >= chunks * delay
        assert s.tpot_s >= 0.9 * expected_tpot_rise(delay, chunks, chunks * tpc)


def test_zero_delay_passes_streams_through() -> None:
    with CalibrationServer(CalibrationConfig(chunks=3)) as srv, \
            DelayProxy(srv.base_url, 0.0) as proxy:
        res = run_load(proxy.base_url, "m", ["a"], Sampling(), 1, 2)
    assert all(s.ok and s.chunks == 3 and s.output_tokens == 12 for s in res.samples)


def test_other_endpoints_and_errors_pass_through_untouched() -> None:
    with CalibrationServer(CalibrationConfig(status=503)) as srv, \
            DelayProxy(srv.base_url, 0.05) as proxy:
        req = urllib.request.Request(
            f"{proxy.base_url}/v1/completions?x=1", method="POST",
            data=json.dumps({"prompt": "a", "stream": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)  # noqa: S310
        assert err.value.code == 503 and err.value.read() == b"injected failure"
        # An endpoint the target lacks: its 404 comes back as it is.
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{proxy.base_url}/metrics", timeout=10)  # noqa: S310
        assert err.value.code == 404
        assert srv.stats.bodies == [{"prompt": "a", "stream": True}]
        assert proxy.stats.streams == 0 and proxy.stats.requests == 2


def test_delay_for_tpot_inverts_the_rise() -> None:
    d = delay_for_tpot(0.10, 0.020, chunks=11, tokens=32)
    assert expected_tpot_rise(d, 11, 32) == pytest.approx(0.002)
    with pytest.raises(ValueError):
        delay_for_tpot(0.1, 0.02, chunks=1, tokens=32)
