"""Output-throughput budgets at high concurrency against the stored baseline."""

import pytest


@pytest.mark.perf_cases("throughput_budget")
def test_throughput_budget(perf, perf_case):
    perf.assert_gate("throughput_budget", perf_case)
