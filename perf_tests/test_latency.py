"""Every case's requests succeed; the paired TPOT gain over no-spec; TTFT, TPOT and E2E
against the baseline — each decided by the statistics of `specperf compare`."""

import pytest


@pytest.mark.perf_cases("requests")
def test_requests(perf, perf_case, benchmark):
    # Through pytest-benchmark too, so --benchmark-json/--benchmark-autosave archive
    # every case's figures (in extra_info) in the format people already keep.
    perf.assert_gate("requests", perf_case, benchmark=benchmark)


@pytest.mark.perf_cases("tpot_gain")
def test_tpot_gain(perf, perf_case):
    perf.assert_gate("tpot_gain", perf_case)


@pytest.mark.perf_cases("latency")
def test_latency(perf, perf_case):
    perf.assert_gate("latency", perf_case)
