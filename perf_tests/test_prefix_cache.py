"""Prefix caching ([scenarios.prefix_cache]): prompts sharing a long prefix, served with
prefix caching on. Each spec config's prefix-cache hit rate stays within the tolerance of
the no-spec config's on the same prompts, and its paired TPOT gain holds
(docs/scenarios.md)."""

import pytest


@pytest.mark.perf_cases("prefix_cache")
def test_prefix_cache(perf, perf_case):
    perf.assert_gate("prefix_cache", perf_case)
