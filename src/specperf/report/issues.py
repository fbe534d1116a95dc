"""One GitHub issue per confirmed regression of a nightly run: what to open, update or
close, decided from the run's comparison and the issues already open.

Pure: it reads a :class:`RunComparison` and the open issues as the GitHub REST API lists
them (``GET /repos/{owner}/{repo}/issues``), and returns :class:`Action` s; the requests
themselves are `specperf issues` (specperf.cli.issues). A regression is keyed by profile,
hardware, branch, vLLM version, case and metric; the key is kept in the issue body as a
hidden marker, so a renamed title does not lose the issue, and a run dispatched on
another branch never updates or closes the nightly's issues (nor they its). Issues keyed
before branch and vLLM were in the key are kept as they are.

When the scheduled night runs a newer vLLM than an open issue's (same profile, hardware
and branch, the night's comparison covering them; versions compared as versions), the
issue is closed: no later night of its key will come, and a regression still there is
this night's, filed under the new version's key. A newer release's issue (a dispatch
that tried a candidate) and a key without a version are never closed so.

The marker is the key's JSON in base64url, so nothing in a key (a branch may hold
``-->``) can close the HTML comment; the raw-JSON marker of issues opened before is still
read, and every key read is checked (:class:`IssueKey`).

At most ``cap`` open regression issues per profile, hardware and branch after the night
(so at most ``cap`` new ones a night, and no pile-up over many nights; worst regressions
first); the regressions that do not fit are listed in one summary issue of the run's
scope, updated while there are any and closed by the first night with none.

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
  and the reason said;
* an open issue of the same profile, hardware and branch filed under an older vLLM
  version, on the scheduled night → **close** it (``not_planned``) with a comment naming
  the vLLM that now runs.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from specperf.analysis.judge.models import CaseComparison, RunComparison
from specperf.analysis.stats import Comparison
from specperf.config.boundaries import check_slug
from specperf.report.escape import md_code, md_escape, title_text
from specperf.report.markdown import CMP_HEADERS, cmp_row, md_table

#: The label every issue filed here carries; the listing asks for it.
LABEL = "specperf-regression"
#: The hidden marker: the key's JSON as base64url (``A-Z a-z 0-9 - _``, no padding), so
#: no character of a key (a branch may hold ``-->``, ``<img>``, ``@name``) can end the
#: HTML comment and put the rest of it live in the issue.
_MARKER = re.compile(r"<!-- specperf-regression v2:([A-Za-z0-9_-]{1,2000}) -->")
#: The raw-JSON marker of issues opened before the key was encoded, still read so that
#: an issue open then keeps its key (updating it writes the encoded marker). Only what
#: passes :class:`IssueKey`'s checks is read from it; new markers are never written so.
_LEGACY_MARKER = re.compile(r"<!-- specperf-regression (\{[^\n]*?\}) -->")
#: GitHub's longest issue title.
MAX_TITLE = 256
#: GitHub refuses an issue body over 65536 characters.
MAX_BODY = 60000


#: The case and metric of the one summary issue of a scope (the regressions past the cap).
SUMMARY = "*"
#: How many of the regressions past the cap the summary issue lists by name.
SUMMARY_TOP = 50


#: A PEP 440 version's characters (epoch ``!``, local ``+``): a vLLM version, nothing else.
_VERSION = re.compile(r"^[0-9A-Za-z.+!_-]{1,64}$")
#: What git refuses in a ref name (git check-ref-format): control characters, blank,
#: ``~ ^ : ? * [ \``. A branch is the name the run was made on, and git's rule is its rule.
_REF_REFUSED = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


def _id(value: str, what: str) -> str:
    """A profile, hardware or case id: a slug (config.boundaries), or the summary's *."""
    return value if value == SUMMARY and what == "case" else check_slug(value, what)


def _version(value: str | None) -> str | None:
    if value is not None and not _VERSION.match(value):
        raise ValueError(f"{value[:60]!r} is not a vLLM version (PEP 440)")
    return value


def _branch(value: str | None) -> str | None:
    if value is not None and (not value or len(value) > 255 or _REF_REFUSED.search(value)):
        raise ValueError(f"{value[:60]!r} is not a git branch name (git check-ref-format)")
    return value


def _metric(value: str) -> str:
    if not value or len(value) > 200 or not value.isprintable():
        raise ValueError(f"{value[:60]!r} is not a metric name (printable, at most 200 "
                         "characters)")
    return value


class IssueKey(BaseModel):
    """What an issue is about; read back from its hidden marker. Every field is checked
    when a key is made or read: ids are slugs, the version a version, the branch a git
    ref name, the metric printable text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: str
    hardware: str
    #: The branch the run was made on (GITHUB_REF_NAME); None: not known, or an issue
    #: filed before the branch was in the key.
    branch: str | None = None
    #: The run's vLLM version; None: not recorded, or filed before it was in the key.
    vllm: str | None = None
    case: str
    metric: str

    @field_validator("profile", "hardware", "case")
    @classmethod
    def _ids(cls, value: str, info: Any) -> str:
        return _id(value, str(info.field_name))

    @field_validator("vllm")
    @classmethod
    def _vllm(cls, value: str | None) -> str | None:
        return _version(value)

    @field_validator("branch")
    @classmethod
    def _ref(cls, value: str | None) -> str | None:
        return _branch(value)

    @field_validator("metric")
    @classmethod
    def _name(cls, value: str) -> str:
        return value if value == SUMMARY else _metric(value)

    def scope(self) -> tuple[str, str, str | None, str | None]:
        return self.profile, self.hardware, self.branch, self.vllm

    def title(self) -> str:
        """The issue's title: plain text on one line (a mention or reference in a branch
        or metric name is broken, as in the body), at most GitHub's 256 characters."""
        where = f"{self.hardware}, vLLM {self.vllm or '?'}, {self.branch or '?'}"
        if self.case == SUMMARY:
            text = f"Perf regressions past the issue cap: {self.profile} ({where})"
        else:
            text = f"Perf regression: {self.profile} {self.case} {self.metric} ({where})"
        return title_text(text, MAX_TITLE)

    def marker(self) -> str:
        encoded = base64.urlsafe_b64encode(self.model_dump_json().encode()).rstrip(b"=")
        return f"<!-- specperf-regression v2:{encoded.decode('ascii')} -->"

    @classmethod
    def from_body(cls, body: str) -> IssueKey | None:
        """The key of an issue body's marker (the encoded one, else an old raw-JSON one);
        None when there is none, or it does not decode to a valid key."""
        m = _MARKER.search(body)
        try:
            if m is not None:
                text = base64.urlsafe_b64decode(m.group(1) + "=" * (-len(m.group(1)) % 4))
            else:
                legacy = _LEGACY_MARKER.search(body)
                if legacy is None:
                    return None
                text = legacy.group(1).encode()
            return cls.model_validate(json.loads(text))
        except (ValueError, ValidationError, binascii.Error, RecursionError):
            return None


def check_ids(cmp: RunComparison, branch: str | None = None) -> None:
    """Raise ValueError naming the first field of ``cmp`` (or the branch) that cannot be
    part of an issue key: a comparison of a hand-edited run file, refused before anything
    is filed rather than opened under a key no later night reads back."""
    p = cmp.run_provenance
    fields: list[tuple[str, object, Callable[[Any], object]]] = [
        ("run_provenance.profile_name", p.profile_name, lambda v: _id(v, "profile")),
        ("run_provenance.hardware_id", p.hardware_id, lambda v: _id(v, "hardware")),
        ("run_provenance.vllm_version", p.vllm_version, _version),
        ("--branch", branch, _branch)]
    for i, cc in enumerate(cmp.cases):
        fields.append((f"cases[{i}].case", cc.case.id, lambda v: check_slug(v, "case id")))
        fields += [(f"cases[{i}].comparisons[{j}].metric", m.metric, _metric)
                   for j, m in enumerate(cc.comparisons)]
    for where, value, check in fields:
        try:
            check(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None


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
    #: How a close is recorded: ``completed`` (back within its limits) or ``not_planned``
    #: (superseded: the nightly moved to another vLLM, nothing was found fixed).
    state_reason: Literal["completed", "not_planned"] = "completed"
    why: str


def open_issues(listing: Iterable[dict[str, Any]]) -> list[OpenIssue]:
    """The open regression issues in a GitHub issues listing: pull requests (which the
    issues endpoint lists too) and issues without a marker are left out."""
    out = []
    for item in listing:
        if "pull_request" in item or item.get("state", "open") != "open":
            continue
        key = IssueKey.from_body(str(item.get("body") or ""))
        if key is None:
            continue
        out.append(OpenIssue(number=int(item["number"]), title=str(item.get("title", "")),
                             key=key, url=str(item.get("html_url", ""))))
    return sorted(out, key=lambda i: i.number)


def _key(cmp: RunComparison, cc: CaseComparison | None, m: Comparison | None,
         branch: str | None) -> IssueKey:
    p = cmp.run_provenance
    # The comparison's own name ("TPOT", "acceptance_rate[pos 1]"): unique in a case,
    # where the metric key is not (every position's check has key acceptance_rate).
    return IssueKey(profile=p.profile_name, hardware=p.hardware_id, branch=branch,
                    vllm=p.vllm_version, case=cc.case.id if cc else SUMMARY,
                    metric=m.metric if m else SUMMARY)


def severity(m: Comparison) -> float:
    """How far the metric moved, either way (|log ratio|; NaN last): worst first."""
    return abs(math.log(m.ratio)) if m.ratio > 0 and math.isfinite(m.ratio) else -1.0


def _diff(cmp: RunComparison, cc: CaseComparison, m: Comparison) -> str:
    """The case's rows of the comparison (every metric of it) and why this one failed."""
    table = md_table(CMP_HEADERS, cc.comparisons, lambda x: cmp_row(cc, x), None, "")
    return f"{table}\n**{md_escape(m.metric)}**: {md_escape(m.reason)}\n"


def issue_body(cmp: RunComparison, cc: CaseComparison, m: Comparison, links: RunLinks,
               branch: str | None = None) -> str:
    key = _key(cmp, cc, m, branch)
    p, b = cmp.run_provenance, cmp.baseline_provenance
    body = (
        f"{key.marker()}\n"
        f"A nightly perf run confirmed a regression of **{md_escape(m.metric)}** in case "
        f"**{md_escape(cc.case.id)}** of profile **{md_escape(key.profile)}** on "
        f"{md_code(key.hardware)} ({md_escape(cc.config_label)}).\n\n"
        f"- run: vLLM {md_escape(p.vllm_version)}, branch {md_escape(branch or '?')} — "
        f"{links.markdown()}\n"
        f"- baseline: vLLM {md_escape(b.vllm_version)}, {md_escape(cmp.baseline_label or '?')}\n\n"
        f"{_diff(cmp, cc, m)}\n"
        "This issue is updated by every nightly run that still fails this check and closed "
        "by the first one that finds it back within its limits (`specperf issues`).\n")
    if len(body) > MAX_BODY:
        body = body[:MAX_BODY] + "\n\n_… cut (size limit); the full diff is in the artifacts._\n"
    return body


def summary_body(cmp: RunComparison, over: Sequence[tuple[CaseComparison, Comparison]],
                 cap: int, links: RunLinks, branch: str | None, already: int = 0) -> str:
    """The one issue for the regressions past the cap: how many, of which metrics, and the
    worst :data:`SUMMARY_TOP` by name. ``already``: the scope's regression issues open
    after this night (the summary not counted)."""
    key = _key(cmp, None, None, branch)
    by_metric: dict[str, int] = {}
    for _, m in over:
        by_metric[m.metric] = by_metric.get(m.metric, 0) + 1
    counts = ", ".join(f"{md_escape(k)}: {n}" for k, n in sorted(
        by_metric.items(), key=lambda kv: (-kv[1], kv[0])))
    top = "".join(f"- **{md_escape(cc.case.id)} {md_escape(m.metric)}** "
                  f"({m.ratio:.3f}×): {md_escape(m.reason)}\n" for cc, m in over[:SUMMARY_TOP])
    left = len(over) - min(len(over), SUMMARY_TOP)
    body = (f"{key.marker()}\n"
            f"{len(over)} more confirmed regression{'s' if len(over) != 1 else ''} of profile "
            f"**{md_escape(key.profile)}** on {md_code(key.hardware)} (vLLM "
            f"{md_escape(key.vllm or '?')}, branch {md_escape(key.branch or '?')}) than fit "
            f"under the cap of {cap} open regression issue{'s' if cap != 1 else ''} of this "
            f"profile, hardware and branch ({already} open; SPECPERF_ISSUES_CAP / --cap) — "
            f"{links.markdown()}.\n\n"
            f"By metric: {counts}.\n\nWorst first:\n\n{top}"
            + (f"\n_… and {left} more; every one is in the run's comparison (compare.md, "
               "compare.json in the artifacts)._\n" if left else "")
            + "\nUpdated by every nightly with regressions past the cap, closed by the first "
              "with none.\n")
    if len(body) > MAX_BODY:
        body = body[:MAX_BODY] + "\n\n_… cut (size limit); the full list is in the artifacts._\n"
    return body


def plan(cmp: RunComparison, existing: Sequence[OpenIssue], links: RunLinks, *,
         branch: str | None = None, cap: int | None = None,
         opened_before: Iterable[IssueKey] = (),
         close_superseded: bool = False) -> list[Action]:
    """What to do with each regression and each open issue, in a stable order.

    ``branch``: the run's branch (part of the key). ``cap``: at most this many regression
    issues of the run's profile, hardware and branch open after this night (None: no
    cap), counting those that stay open, those opened now and ``opened_before`` (those an
    earlier attempt at this same comparison opened, from the state file); the rest go in
    one summary issue, which is not counted. ``close_superseded``: this run is the
    scheduled nightly, so the issues of its profile, hardware and branch filed under
    an older vLLM version are closed (no later night checks their key); a dispatched run
    with another vLLM never closes main's issues."""
    if cmp.refused:
        return [Action(kind="keep", key=i.key, number=i.number, title=i.title,
                       why="the comparison was refused: nothing was compared")
                for i in existing]
    by_key: dict[IssueKey, OpenIssue] = {}
    for issue in existing:
        by_key.setdefault(issue.key, issue)  # a duplicate (opened by hand) is left alone
    checks = {_key(cmp, cc, m, branch): (cc, m) for cc, m in cmp.all()}
    superseded = {i.number for i in existing if close_superseded and by_key.get(i.key) is i
                  and _moved_on(cmp, i.key, branch)}
    closing = superseded | {i.number for i in existing if by_key.get(i.key) is i
                            and _passes(checks.get(i.key))}
    earlier = set(opened_before)
    # The cap counts what is open when the night is done: the scope's issues not closed
    # now (updated, kept, hand-made duplicates) and those an earlier attempt opened but
    # the listing does not show yet. Counting only a night's new issues would let them
    # pile up over nights without bound.
    scope = _key(cmp, None, None, branch).scope()[:3]
    staying = [i for i in existing if i.key.scope()[:3] == scope
               and i.key.case != SUMMARY and i.number not in closing]
    already = len(staying) + len(earlier - {i.key for i in staying})
    budget = None if cap is None else max(0, cap - already)
    actions: list[Action] = []
    failing: set[IssueKey] = set()
    over: list[tuple[CaseComparison, Comparison]] = []
    # Worst first, so that the cap leaves the smallest regressions to the summary.
    for cc, m in sorted(cmp.regressions, key=lambda p: -severity(p[1])):
        key = _key(cmp, cc, m, branch)
        found = by_key.get(key)
        if found is None and key not in earlier:
            if budget is not None and budget <= 0:
                over.append((cc, m))
                continue
            if budget is not None:
                budget -= 1
                already += 1
        failing.add(key)
        body = issue_body(cmp, cc, m, links, branch)
        if found is None:
            actions.append(Action(kind="open", key=key, title=key.title(), body=body,
                                  why="a confirmed regression with no open issue"))
        else:
            actions.append(Action(
                kind="update", key=key, number=found.number, title=found.title, body=body,
                comment=f"Still a regression in {links.markdown()}: {md_escape(m.metric)} "
                        f"{md_escape(m.reason)}",
                why="still a confirmed regression"))
    summary_key = _key(cmp, None, None, branch)
    summary = by_key.get(summary_key)
    if over:
        failing.add(summary_key)
        body = summary_body(cmp, over, cap or 0, links, branch, already)
        why = (f"{len(over)} confirmed regression(s) past the cap of {cap} open issues "
               f"({already} open)")
        if summary is None:
            actions.append(Action(kind="open", key=summary_key, title=summary_key.title(),
                                  body=body, why=why))
        else:
            actions.append(Action(kind="update", key=summary_key, number=summary.number,
                                  title=summary.title, body=body, why=why,
                                  comment=f"Still {len(over)} regression(s) past the cap in "
                                          f"{links.markdown()}."))
    elif summary is not None:
        failing.add(summary_key)
        actions.append(Action(kind="close", key=summary_key, number=summary.number,
                              title=summary.title,
                              comment=f"No regression past the cap in {links.markdown()}. "
                                      "Closed by `specperf issues`.",
                              why="no regression past the cap this run"))
    for issue in existing:
        if issue.key in failing or by_key.get(issue.key) is not issue:
            continue
        if issue.number in superseded:
            now = cmp.run_provenance.vllm_version
            actions.append(Action(
                kind="close", key=issue.key, number=issue.number, title=issue.title,
                state_reason="not_planned",
                comment=(f"The nightly of {md_escape(issue.key.profile)} on "
                         f"{md_code(issue.key.hardware)}, branch "
                         f"{md_escape(issue.key.branch or '?')}, now runs vLLM "
                         f"{md_escape(now or '?')} (this issue: vLLM "
                         f"{md_escape(issue.key.vllm or '?')}), in {links.markdown()}. No "
                         "later night will check this key; a regression still present is "
                         f"filed under vLLM {md_escape(now or '?')}'s key. Closed by "
                         "`specperf issues`."),
                why=f"the nightly moved on to vLLM {now} (this issue: vLLM {issue.key.vllm})"))
            continue
        pair = checks.get(issue.key)
        if pair is None:
            actions.append(Action(kind="keep", key=issue.key, number=issue.number,
                                  title=issue.title,
                                  why=_not_compared(cmp, issue.key, branch)))
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


def _passes(pair: tuple[CaseComparison, Comparison] | None) -> bool:
    return pair is not None and pair[0].outcome(pair[1]) == "pass"


def _older(release: str | None, than: str | None) -> bool:
    """Whether vLLM ``release`` is an older version than ``than`` (as versions, PEP 440:
    0.9.0 < 0.32.0rc1 < 0.32.0); False when either is unknown or not a version."""
    if release is None or than is None:
        return False
    try:
        return Version(release) < Version(than)
    except InvalidVersion:
        return False


def _moved_on(cmp: RunComparison, key: IssueKey, branch: str | None) -> bool:
    """Whether ``key`` is of this night's profile, hardware and (known) branch under an
    *older* vLLM version: a key no later night of this nightly checks again (the nightly
    moves forward). Never a newer release's issue (a dispatch that tried a candidate
    filed it; a later night on that release checks it), never a key without a version,
    and only when this night compared something there (a refused or empty comparison
    covers nothing), never an issue of another branch or hardware."""
    p = cmp.run_provenance
    return (bool(cmp.cases) and not cmp.refused and branch is not None
            and (key.profile, key.hardware, key.branch) == (p.profile_name, p.hardware_id, branch)
            and _older(key.vllm, p.vllm_version))


def _not_compared(cmp: RunComparison, key: IssueKey, branch: str | None) -> str:
    p = cmp.run_provenance
    if (key.profile, key.hardware) != (p.profile_name, p.hardware_id):
        return (f"another profile or hardware ({key.profile} on {key.hardware}); this run is "
                f"{p.profile_name} on {p.hardware_id}")
    if key.branch is None and key.vllm is None:
        return ("filed before the branch and vLLM version were in the key: this run "
                "neither updates nor closes it (close it by hand once it is fixed)")
    if (key.branch, key.vllm) != (branch, p.vllm_version):
        return (f"another branch or vLLM (branch {key.branch}, vLLM {key.vllm}); this run "
                f"is branch {branch}, vLLM {p.vllm_version}")
    return f"this run did not compare {key.case} {key.metric} (not measured or not selected)"
