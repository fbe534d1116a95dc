"""c = 1, a burst at the highest concurrency, c = 1 again, on one server
([scenarios.ramp]): speculation on in every phase, and the phase after the burst matches
the one before it within the [compare] rules."""

import pytest


@pytest.mark.perf_cases("ramp")
def test_ramp(perf, perf_case):
    perf.assert_gate("ramp", perf_case)
