"""A long run on one server ([scenarios.soak]): acceptance and TPOT per time window, each
trend's slope judged with its interval — a decay over the run FAILs, noise does not."""

import pytest


@pytest.mark.perf_cases("soak")
def test_soak(perf, perf_case):
    perf.assert_gate("soak", perf_case)
