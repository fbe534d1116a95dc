"""Output throughput of every case against the stored baseline."""

import pytest


@pytest.mark.perf_cases("throughput")
def test_throughput(perf, perf_case):
    perf.assert_gate("throughput", perf_case)
