"""Acceptance-ratio floors (overall and per draft position) and tolerance vs baseline."""

import pytest


@pytest.mark.perf_cases("acceptance")
def test_acceptance(perf, perf_case):
    perf.assert_gate("acceptance", perf_case)
