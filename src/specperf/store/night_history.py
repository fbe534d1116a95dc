"""Did the previous scheduled night run? Read from the workflow's own run history.

A night that never ran leaves nothing behind: no artifact, no issue, no failed job —
GitHub keeps one pending run per concurrency group and cancels it when a newer one
queues there (`cancel-in-progress: false` does not queue more than one), and a schedule
can be skipped. So each night's report asks GitHub for the workflow's recent scheduled
runs (``GET /repos/{repo}/actions/workflows/{workflow}/runs?event=schedule``, read-only,
the job's ``actions: read``) and says when the one before it is missing, was cancelled,
failed or is still running (:func:`previous_night`, pure, over that listing).
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from datetime import datetime, timedelta
from typing import Any

from specperf.store.github_artifacts import DEFAULT_API_URL, GitHubError, Opener, _json

__all__ = ["previous_night", "scheduled_runs", "GitHubError"]

#: A conclusion GitHub reports (its documented values), shown as is; anything else is
#: shown as "unknown" (the text goes to a log and a job summary).
_CONCLUSIONS = {"success", "failure", "cancelled", "skipped", "timed_out", "action_required",
                "neutral", "stale", "startup_failure"}


def _when(run: dict[str, Any]) -> datetime | None:
    text = run.get("run_started_at") or run.get("created_at")
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def _name(run: dict[str, Any]) -> str:
    number = run.get("run_number") if isinstance(run.get("run_number"), int) else "?"
    when = _when(run)
    return f"run #{number} of {when:%Y-%m-%d %H:%M} UTC" if when else f"run #{number}"


def previous_night(runs: list[dict[str, Any]], this_run_id: int | None, now: datetime,
                   night_hours: float = 24.0) -> str | None:
    """What is wrong with the night before this one (None: it ran and succeeded, on time).
    ``runs``: the workflow's scheduled runs as GitHub lists them; ``this_run_id``: the run
    asking (its start is "now" when it is not among them); ``night_hours``: the schedule's
    period. A gap of more than 1.5 periods is a missing night."""
    dated = [(w, r) for r in runs if (w := _when(r)) is not None]
    dated.sort(key=lambda p: p[0], reverse=True)
    this = next((w for w, r in dated if r.get("id") == this_run_id), now)
    earlier = [(w, r) for w, r in dated if w < this and r.get("id") != this_run_id]
    if not earlier:
        return "no earlier scheduled night on record (the first, or its runs were deleted)"
    when, prev = earlier[0]
    period = timedelta(hours=night_hours)
    notes = []
    if this - when > 1.5 * period:
        missing = int((this - when) / period) - 1 or 1
        notes.append(f"{missing} scheduled night(s) missing: none ran between {_name(prev)} "
                     f"and this one ({this:%Y-%m-%d %H:%M} UTC) — GitHub keeps one pending "
                     "run per concurrency group and cancels it when a newer one queues, "
                     "and may skip a schedule")
    status, conclusion = prev.get("status"), prev.get("conclusion")
    if status != "completed":
        notes.append(f"the previous night ({_name(prev)}) is still {status or 'pending'}")
    elif conclusion != "success":
        shown = conclusion if conclusion in _CONCLUSIONS else "unknown"
        why = (" (a newer run queued in its concurrency group, or it was cancelled by hand)"
               if conclusion == "cancelled" else "")
        notes.append(f"the previous night ({_name(prev)}) ended {shown}{why}: it is no kept run")
    return "; ".join(notes) or None


def scheduled_runs(repo: str, workflow: str, *, token: str | None,
                   api_url: str = DEFAULT_API_URL, timeout: float = 60.0,
                   opener: Opener | None = None, per_page: int = 10) -> list[dict[str, Any]]:
    """The workflow's newest scheduled runs, any status (one page)."""
    query = urllib.parse.urlencode({"event": "schedule", "per_page": per_page})
    url = (f"{api_url.rstrip('/')}/repos/{repo}/actions/workflows/"
           f"{urllib.parse.quote(workflow, safe='')}/runs?{query}")
    runs = _json(opener or urllib.request.urlopen, url, token, timeout).get("workflow_runs")
    return [r for r in runs or [] if isinstance(r, dict)]
