"""benchmarks/proxy_stretch.py without vLLM: one side's figures from its requests and its
proxy's own records (the A/B itself needs two real servers: docs/validation.md, "What the
stretch delivers")."""

from __future__ import annotations

from types import ModuleType

import pytest

from specperf.engine.load import LoadResult, RequestSample
from specperf.engine.proxy import DelayProxy
from tests.support import REPO_ROOT, load_script


@pytest.fixture(scope="module")
def ps() -> ModuleType:
    return load_script(REPO_ROOT / "benchmarks" / "proxy_stretch.py")


def _sample(ttft: float, e2e: float, tokens: int = 11, ok: bool = True) -> RequestSample:
    return RequestSample(ok=ok, start_s=0.0, ttft_s=ttft, e2e_s=e2e, output_tokens=tokens,
                         chunks=tokens)


def test_tpot_is_each_good_requests_decode_per_token(ps: ModuleType) -> None:
    result = LoadResult(concurrency=1, duration_s=1.0, samples=[
        _sample(0.1, 1.1), _sample(0.2, 0.7), RequestSample(ok=False, start_s=0.0, error="x")])
    assert ps.tpots_ms(result) == pytest.approx([100.0, 50.0])


def test_a_failed_request_drops_its_pair_so_the_rest_stay_side_by_side(ps: ModuleType) -> None:
    failed = RequestSample(ok=False, start_s=0.0, error="x")
    spec = LoadResult(concurrency=1, duration_s=1.0,
                      samples=[_sample(0.1, 1.1), failed, _sample(0.1, 0.6)])
    nospec = LoadResult(concurrency=1, duration_s=1.0,
                        samples=[_sample(0.1, 2.1), _sample(0.1, 3.1), _sample(0.1, 1.1)])
    assert ps.paired_tpots_ms(spec, nospec) == (pytest.approx([100.0, 50.0]),
                                                pytest.approx([200.0, 100.0]))


def test_a_side_pairs_each_spec_request_with_the_no_spec_one_beside_it(ps: ModuleType) -> None:
    proxy = DelayProxy("http://127.0.0.1:1", 0.0, stretch=0.25)  # never started
    proxy.stats.streams = 3
    proxy.stats.decode_spans = [(1.0, 1.25), (2.0, 2.5), (0.8, 1.0)]
    side = ps.side([20.0, 30.0, 24.0], [40.0, 40.0, 30.0], proxy, tokens=101)
    assert side["tpot_vs_nospec"] == pytest.approx(0.75)      # median of 0.5, 0.75, 0.8
    assert side["spec_tpot_ms"] == 24.0 and side["nospec_tpot_ms"] == 40.0
    assert side["forwarded_over_received"] == pytest.approx(1.25)
    assert side["received_decode_ms_per_token"] == pytest.approx(10.0)  # 1.0 s / 100
    assert (side["requests"], side["streams"]) == (3, 3)
