"""A night that finds the previous one missing says so (specperf.store.night_history):
over workflow runs of the shape GitHub lists (tests/data/github-api/workflow-runs.json)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from specperf.store.night_history import previous_night
from tests.support import GITHUB_API_DIR

ENTRY = json.loads((GITHUB_API_DIR / "workflow-runs.json").read_text())["workflow_runs"][0]
T = datetime(2026, 12, 7, 1, 17, tzinfo=UTC)


def _run(run_id: int, when: datetime, conclusion: str | None = "success",
         status: str = "completed") -> dict[str, object]:
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {**ENTRY, "id": run_id, "run_number": run_id, "created_at": stamp,
            "run_started_at": stamp, "conclusion": conclusion, "status": status}


def test_a_night_after_a_good_night_says_nothing() -> None:
    runs = [_run(12, T, None, "in_progress"), _run(11, T - timedelta(days=1))]
    assert previous_night(runs, 12, T + timedelta(hours=9)) is None


def test_a_missing_night_is_named_with_what_github_does_with_a_third_queued_run() -> None:
    # Two days since the last scheduled run: one night never ran (its pending run was
    # cancelled by a newer one in the concurrency group, which GitHub lists as nothing
    # of this run's own, or the schedule was skipped).
    runs = [_run(12, T, None, "in_progress"), _run(10, T - timedelta(days=2))]
    said = previous_night(runs, 12, T)
    assert said is not None and said.startswith("1 scheduled night(s) missing")
    assert "run #10 of 2026-12-05 01:17 UTC" in said and "cancels it when a newer one queues" in said


def test_a_cancelled_or_failed_or_unfinished_previous_night_is_said() -> None:
    for conclusion, words in (("cancelled", "ended cancelled (a newer run queued"),
                              ("failure", "ended failure: it is no kept run"),
                              ("<script>", "ended unknown")):
        runs = [_run(12, T, None, "in_progress"), _run(11, T - timedelta(days=1), conclusion)]
        assert words in (previous_night(runs, 12, T) or ""), conclusion
    # Still running (a night over its 24 h): this one queued behind it.
    runs = [_run(12, T, None, "in_progress"), _run(11, T - timedelta(days=1), None, "in_progress")]
    assert "is still in_progress" in (previous_night(runs, 12, T) or "")


def test_a_dispatched_report_asks_about_the_last_scheduled_night() -> None:
    # A dispatch is not among the scheduled runs: "now" is its time.
    runs = [_run(11, T - timedelta(days=1))]
    assert previous_night(runs, 999, T) is None
    assert "no earlier scheduled night" in (previous_night([], 999, T) or "")
