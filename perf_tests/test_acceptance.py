"""Acceptance floors (overall and per draft position) and acceptance against the baseline
(exact counters, one tolerance: [compare.metrics.acceptance_rate] min_effect)."""

import pytest


@pytest.mark.perf_cases("acceptance")
def test_acceptance(perf, perf_case):
    perf.assert_gate("acceptance", perf_case)
