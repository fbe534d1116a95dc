"""One GitHub issue per confirmed regression of a nightly run: what to open, update or
close, decided from the run's comparison and the issues already open.

Pure: it reads a :class:`RunComparison` and the open issues as the GitHub REST API lists
them (``GET /repos/{owner}/{repo}/issues``), and returns :class:`Action` s; the requests
themselves are `specperf issues` (specperf.cli.issues). A regression is keyed by profile,
hardware, case and metric; the key is kept in the issue body as a hidden marker, so a
renamed title does not lose the issue.

* a check that FAILs (a REGRESSION measured on a quiet machine, fresh-server
  confirmation included: :attr:`RunComparison.regressions`) with no open issue → **open**
  one (title names profile, case and metric; the body is the case's markdown diff and
  links to the run and its artifacts);
* the same with an open issue → **update** its body to this run's diff and comment that
  it is still there;
* an open issue whose case and metric this run compared and found back within its limits
  (the check passes) → **close** it with a comment;
* anything else (not measured in this run, inconclusive, measured on a busy machine,
  another profile or hardware, a refused comparison) → the issue is **kept** as it is,
  and the reason said.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from specperf.analysis.compare import CaseComparison, RunComparison
from specperf.analysis.stats import Comparison
from specperf.report.markdown import CMP_HEADERS, cmp_row, md_escape, md_table

#: The label every issue filed here carries; the listing asks for it.
LABEL = "specperf-regression"
_MARKER = re.compile(r"<!-- specperf-regression (\{[^\n]*?\}) -->")
#: GitHub refuses an issue body over 65536 characters.
MAX_BODY = 60000


class IssueKey(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: str
    hardware: str
    case: str
    metric: str

    def title(self) -> str:
        return f"Perf regression: {self.profile} {self.case} {self.metric} ({self.hardware})"

    def marker(self) -> str:
        return f"<!-- specperf-regression {self.model_dump_json()} -->"


class OpenIssue(BaseModel):
    number: int
    title: str
    key: IssueKey
    url: str


class RunLinks(BaseModel):
    """Where a reader finds the run: its workflow run and artifacts (None off GitHub)."""

    run: str | None = None
    artifacts: str | None = None
    label: str = "this run"

    def markdown(self) -> str:
        if self.run is None:
            return f"{md_escape(self.label)} (not a GitHub workflow run: no link)"
        parts = [f"[workflow run]({self.run})"]
        if self.artifacts:
            parts.append(f"[artifacts: run.json, report, server logs]({self.artifacts})")
        return " · ".join(parts)


class Action(BaseModel):
    kind: Literal["open", "update", "close", "keep"]
    key: IssueKey
    number: int | None = None
    title: str
    body: str | None = None
    comment: str | None = None
    why: str


def open_issues(listing: Iterable[dict[str, Any]]) -> list[OpenIssue]:
    """The open regression issues in a GitHub issues listing: pull requests (which the
    issues endpoint lists too) and issues without a marker are left out."""
    out = []
    for item in listing:
        if "pull_request" in item or item.get("state", "open") != "open":
            continue
        m = _MARKER.search(item.get("body") or "")
        if m is None:
            continue
        try:
            key = IssueKey.model_validate(json.loads(m.group(1)))
        except (ValueError, ValidationError):
            continue
        out.append(OpenIssue(number=int(item["number"]), title=str(item.get("title", "")),
                             key=key, url=str(item.get("html_url", ""))))
    return sorted(out, key=lambda i: i.number)


def _key(cmp: RunComparison, cc: CaseComparison, m: Comparison) -> IssueKey:
    p = cmp.run_provenance
    # The comparison's own name ("TPOT", "acceptance_rate[pos 1]"): unique in a case,
    # where the metric key is not (every position's check has key acceptance_rate).
    return IssueKey(profile=p.profile_name, hardware=p.hardware_id, case=cc.case.id,
                    metric=m.metric)


def _diff(cmp: RunComparison, cc: CaseComparison, m: Comparison) -> str:
    """The case's rows of the comparison (every metric of it) and why this one failed."""
    table = md_table(CMP_HEADERS, cc.comparisons, lambda x: cmp_row(cc, x), None, "")
    return f"{table}\n**{md_escape(m.metric)}**: {md_escape(m.reason)}\n"


def issue_body(cmp: RunComparison, cc: CaseComparison, m: Comparison, links: RunLinks) -> str:
    key = _key(cmp, cc, m)
    p, b = cmp.run_provenance, cmp.baseline_provenance
    body = (
        f"{key.marker()}\n"
        f"A nightly perf run confirmed a regression of **{md_escape(m.metric)}** in case "
        f"**{md_escape(cc.case.id)}** of profile **{md_escape(key.profile)}** on "
        f"`{md_escape(key.hardware)}` ({md_escape(cc.config_label)}).\n\n"
        f"- run: vLLM {md_escape(p.vllm_version)} — {links.markdown()}\n"
        f"- baseline: vLLM {md_escape(b.vllm_version)}, {md_escape(cmp.baseline_label or '?')}\n\n"
        f"{_diff(cmp, cc, m)}\n"
        "This issue is updated by every nightly run that still fails this check and closed "
        "by the first one that finds it back within its limits (`specperf issues`).\n")
    if len(body) > MAX_BODY:
        body = body[:MAX_BODY] + "\n\n_… cut (size limit); the full diff is in the artifacts._\n"
    return body


def plan(cmp: RunComparison, existing: Sequence[OpenIssue], links: RunLinks) -> list[Action]:
    """What to do with each regression and each open issue, in a stable order."""
    if cmp.refused:
        return [Action(kind="keep", key=i.key, number=i.number, title=i.title,
                       why="the comparison was refused: nothing was compared")
                for i in existing]
    by_key: dict[IssueKey, OpenIssue] = {}
    for issue in existing:
        by_key.setdefault(issue.key, issue)  # a duplicate (opened by hand) is left alone
    actions: list[Action] = []
    failing: set[IssueKey] = set()
    for cc, m in cmp.regressions:
        key = _key(cmp, cc, m)
        failing.add(key)
        body = issue_body(cmp, cc, m, links)
        found = by_key.get(key)
        if found is None:
            actions.append(Action(kind="open", key=key, title=key.title(), body=body,
                                  why="a confirmed regression with no open issue"))
        else:
            actions.append(Action(
                kind="update", key=key, number=found.number, title=found.title, body=body,
                comment=f"Still a regression in {links.markdown()}: {md_escape(m.metric)} "
                        f"{md_escape(m.reason)}",
                why="still a confirmed regression"))
    checks = {_key(cmp, cc, m): (cc, m) for cc, m in cmp.all()}
    for issue in existing:
        if issue.key in failing or by_key.get(issue.key) is not issue:
            continue
        pair = checks.get(issue.key)
        if pair is None:
            actions.append(Action(kind="keep", key=issue.key, number=issue.number,
                                  title=issue.title, why=_not_compared(cmp, issue.key)))
            continue
        cc, m = pair
        outcome = cc.outcome(m)
        if outcome == "pass":
            actions.append(Action(
                kind="close", key=issue.key, number=issue.number, title=issue.title,
                comment=(f"Back within its limits in {links.markdown()}:\n\n"
                         f"{_diff(cmp, cc, m)}\nClosed by `specperf issues`."),
                why="the case is back within its limits"))
        else:
            actions.append(Action(kind="keep", key=issue.key, number=issue.number,
                                  title=issue.title,
                                  why=f"this run's check is {outcome}, not a pass: "
                                      f"{m.reason}"))
    return actions


def _not_compared(cmp: RunComparison, key: IssueKey) -> str:
    p = cmp.run_provenance
    if (key.profile, key.hardware) != (p.profile_name, p.hardware_id):
        return (f"another profile or hardware ({key.profile} on {key.hardware}); this run is "
                f"{p.profile_name} on {p.hardware_id}")
    return f"this run did not compare {key.case} {key.metric} (not measured or not selected)"
