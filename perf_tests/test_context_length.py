"""Context length ([scenarios.context_length]): prompts in length buckets, each bucket in
its own trials. Per bucket, each spec config's acceptance reaches the bucket's floor and
stays within max_relative_drop of the shortest bucket's, and its paired TPOT gain holds
(docs/scenarios.md)."""

import pytest


@pytest.mark.perf_cases("context_length")
def test_context_length(perf, perf_case):
    perf.assert_gate("context_length", perf_case)
