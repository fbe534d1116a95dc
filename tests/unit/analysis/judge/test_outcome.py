"""One verdict (specperf.analysis.judge.outcome): the mapping every consumer of a comparison uses."""

from __future__ import annotations

import pytest

from specperf.analysis.judge import outcome
from specperf.analysis.stats import Verdict


class _C:
    def __init__(self, v: Verdict) -> None:
        self.verdict = v


@pytest.mark.parametrize(("v", "expected"), [
    (Verdict.REGRESSION, "fail"), (Verdict.INCONCLUSIVE, "inconclusive"),
    (Verdict.UNCHANGED, "pass"), (Verdict.IMPROVEMENT, "pass"),
])
def test_outcome_of_a_verdict(v: Verdict, expected: str) -> None:
    assert outcome.outcome_of(_C(v)) == expected
    assert outcome.outcome_of(_C(v), busy=True) == "busy"


@pytest.mark.parametrize(("outcomes", "status"), [
    ([], 0), (["pass", "skip"], 0), (["pass", "inconclusive"], 6), (["inconclusive", "busy"], 7),
    (["busy", "fail", "inconclusive"], 1),
])
def test_exit_status_fail_wins_then_busy_then_inconclusive(outcomes: list[str], status: int) -> None:
    assert outcome.exit_status(outcomes) == status


def test_outcomes_line_names_what_is_undecided() -> None:
    line = outcome.outcomes_line(["pass", "pass", "inconclusive", "busy", "skip"])
    assert line == ("2 passed, 1 inconclusive, 1 not measured (machine busy), "
                    "1 not judged (no baseline)")
    assert outcome.worst(["pass", "inconclusive", "busy"]) == "busy"
    assert outcome.worst([]) is None
