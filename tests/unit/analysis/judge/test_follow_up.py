"""What a fresh server start can change: one rule, read from what each check or comparison
says its samples were, never from a metric's name."""

from __future__ import annotations

import pytest

from specperf.analysis.judge.follow_up import RE_MEASURABLE, follow_up_of_checks
from specperf.schemas import Case, GateCheck

CASE = Case(config_id="draft-k2", concurrency=1)


def _check(metric: str, outcome: str, samples: str | None) -> GateCheck:
    return GateCheck(case=CASE, gate="prefix_cache", metric=metric, higher_is_better=True,
                     outcome=outcome, message=f"{metric}: {outcome}", samples=samples)  # type: ignore[arg-type]


@pytest.mark.parametrize("samples", ["trials", "requests", "trial_means", "counters",
                                     "summary", None])
def test_a_fail_is_flagged_by_its_samples_whatever_its_name(samples: str | None) -> None:
    # Names swapped on purpose: a "hit rate" measured from trials is flagged, a "TPOT gain"
    # from counters is not.
    checks = [_check("prefix-cache hit rate", "fail", samples), _check("TPOT gain", "fail", samples)]
    up = follow_up_of_checks(checks, trials=5)
    assert up.flagged == (("prefix-cache hit rate", "TPOT gain") if samples in RE_MEASURABLE
                          else ())
    assert up.trials == 5 and up.verdicts == {"prefix-cache hit rate": "regression",
                                              "TPOT gain": "regression"}


def test_only_fails_are_flagged_and_outcomes_read_as_verdicts() -> None:
    checks = [_check("a", "pass", "trials"), _check("b", "inconclusive", "trials"),
              _check("c", "busy", "trials"), _check("d", "fail", "requests")]
    up = follow_up_of_checks(checks, trials=3)
    assert up.flagged == ("d",)
    assert up.verdicts == {"a": "unchanged", "b": "inconclusive", "c": "busy", "d": "regression"}


def test_a_check_without_samples_is_written_as_before() -> None:
    assert "samples" not in _check("a", "pass", None).model_dump(mode="json")
    assert _check("a", "pass", "counters").model_dump(mode="json")["samples"] == "counters"
