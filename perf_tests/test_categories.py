"""Task categories ([scenarios.categories]): a category-tagged dataset (Spec-Bench's
question.jsonl shape), each category in its own trials. Per category, each spec config's
acceptance reaches the category's floor and its paired TPOT gain holds
(docs/scenarios.md)."""

import pytest


@pytest.mark.perf_cases("categories")
def test_categories(perf, perf_case):
    perf.assert_gate("categories", perf_case)
