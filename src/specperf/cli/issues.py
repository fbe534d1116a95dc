"""``specperf issues COMPARE.json``: tell the team — one GitHub issue per confirmed
regression of a nightly run, updated while it lasts, closed when a later run finds the
case back within its limits.

What to do is decided by specperf.report.issues from the comparison (`specperf compare
--json-out`) and the open issues labelled ``specperf-regression``; this module only talks
to the GitHub REST API (``GITHUB_API_URL``, token ``GITHUB_TOKEN``; the nightly workflow's
job has ``issues: write`` and nothing else). ``--dry-run`` lists the open issues and
prints the plan without writing anything.

Bounded: at most ``--cap`` (SPECPERF_ISSUES_CAP, default 10) regression issues of the
run's profile, hardware and branch open after the night (specperf.report.issues.plan
counts them), the rest in one summary issue. Resumable: after each request that changed something, what is done
is written to a state file (``--state``, default ``issues-state.json`` beside the
comparison); a rerun on the same comparison skips what is done and counts what it opened
against the cap, so a run cut off by GitHub's rate limit (403/429 with its rate-limit
headers) or by another error files nothing twice.

Exit codes (specperf.config.exits): 0 done (or nothing to do); 12 paused by GitHub's rate
limit (the state is written; rerun after the time printed); 2 bad input (the comparison
file, the state file, the repository, no token) or a request GitHub refused (its status
and message are printed; the state is written).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from specperf.analysis.judge.models import RunComparison
from specperf.cli import options
from specperf.config import settings
from specperf.config.exits import Exit
from specperf.report.issues import (
    LABEL,
    Action,
    IssueKey,
    RunLinks,
    check_ids,
    open_issues,
    plan,
)
from specperf.store.files import atomic_write_text

PROG = "specperf issues"
#: The label of the vLLM candidate job's findings (.github/workflows/vllm-candidate.yml):
#: an upgrade A/B's regressions are the candidate's, not the pinned engine's.
CANDIDATE_LABEL = "specperf-vllm-candidate"
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')

#: (method, url, JSON body or None) → (status, headers, parsed JSON body)
Send = Callable[[str, str, Any], tuple[int, dict[str, str], Any]]


class GitHubError(Exception):
    """A request GitHub answered with an error status; the message has it."""


class RateLimited(GitHubError):
    """GitHub's rate limit (primary or secondary) refused a request; try again later."""


def _header(headers: dict[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name), None)


def _rate_limited(status: int, headers: dict[str, str], message: object) -> bool:
    # docs.github.com, "Rate limits for the REST API": 403 or 429, with
    # x-ratelimit-remaining: 0 (primary) or retry-after (secondary).
    if status not in (403, 429):
        return False
    return (_header(headers, "x-ratelimit-remaining") == "0"
            or _header(headers, "retry-after") is not None
            or status == 429 or "rate limit" in str(message).lower())


def _when(headers: dict[str, str]) -> str:
    after, reset = _header(headers, "retry-after"), _header(headers, "x-ratelimit-reset")
    if after and after.isdigit():
        return f"retry after {after} s"
    if reset and reset.isdigit():
        return f"the limit resets at {datetime.fromtimestamp(int(reset), UTC):%Y-%m-%d %H:%M:%S} UTC"
    return "retry later"


def urllib_send(token: str, timeout_s: float = 30.0) -> Send:
    def send(method: str, url: str, payload: Any) -> tuple[int, dict[str, str], Any]:
        if not url.startswith("https://"):
            # The token goes in a header: never over plain HTTP, never to a file: URL.
            raise GitHubError(f"{url}: not an https URL — fix: set GITHUB_API_URL to the "
                              "https address of the GitHub API")
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(url, data=data, method=method, headers={  # noqa: S310 - https only (above)
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {token}",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "specperf",
            **({"Content-Type": "application/json"} if data is not None else {}),
        })
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - https only
                body = resp.read()
                return resp.status, dict(resp.headers), json.loads(body) if body else None
        except urllib.error.HTTPError as exc:
            body = exc.read()
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = {"message": body[:300].decode(errors="replace")}
            return exc.code, dict(exc.headers), parsed

    return send


class GitHubIssues:
    """The four requests `specperf issues` makes, on one repository."""

    def __init__(self, api: str, repo: str, send: Send, label: str = LABEL) -> None:
        self.base = f"{api.rstrip('/')}/repos/{repo}"
        self.send = send
        #: Only issues of this label are listed, and new ones get it: the nightly's and
        #: the vLLM candidate job's (CANDIDATE_LABEL) never see, update or close each other's.
        self.label = label

    def _call(self, method: str, url: str, payload: Any = None,
              ok: tuple[int, ...] = (200, 201)) -> tuple[dict[str, str], Any]:
        status, headers, body = self.send(method, url, payload)
        if status not in ok:
            message = body.get("message") if isinstance(body, dict) else body
            text = f"{method} {url}: GitHub answered {status}: {message}"
            if _rate_limited(status, headers, message):
                raise RateLimited(f"{text} ({_when(headers)})")
            raise GitHubError(text)
        return headers, body

    def list_open(self) -> list[dict[str, Any]]:
        url: str | None = f"{self.base}/issues?state=open&labels={self.label}&per_page=100"
        items: list[dict[str, Any]] = []
        while url:
            headers, body = self._call("GET", url)
            if not isinstance(body, list):
                raise GitHubError(f"GET {url}: expected a list of issues, got "
                                  f"{type(body).__name__}")
            items += body
            link = next((v for k, v in headers.items() if k.lower() == "link"), "")
            m = _NEXT.search(link)
            url = m.group(1) if m else None
        return items

    def apply(self, action: Action) -> str:
        """Carry out one action; what was done, one line."""
        if action.kind == "open":
            _, body = self._call("POST", f"{self.base}/issues",
                                 {"title": action.title, "body": action.body, "labels": [self.label]})
            return f"opened #{body['number']} {action.title} ({body.get('html_url', '')})"
        if action.kind == "update":
            self._call("PATCH", f"{self.base}/issues/{action.number}", {"body": action.body})
            self._call("POST", f"{self.base}/issues/{action.number}/comments",
                       {"body": action.comment})
            return f"updated #{action.number} {action.title}"
        if action.kind == "close":
            self._call("POST", f"{self.base}/issues/{action.number}/comments",
                       {"body": action.comment})
            self._call("PATCH", f"{self.base}/issues/{action.number}",
                       {"state": "closed", "state_reason": action.state_reason})
            return f"closed #{action.number} {action.title}"
        return f"kept #{action.number} {action.title}: {action.why}"

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK, Exit.ISSUES_PAUSED)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "issues", help="open, update or close one GitHub issue per confirmed regression",
        description="From a comparison (`specperf compare --json-out`): open a GitHub issue "
                    "for each confirmed regression, update the open one while it lasts, close "
                    "it when the case is back within its limits; at most --cap open ones per "
                    "profile, hardware and branch, the rest in one summary issue. Needs "
                    "GITHUB_TOKEN with issues: write. Paused by GitHub's rate limit, a rerun "
                    "continues from the --state file; a request GitHub refused is bad input.")
    p.add_argument("comparison", help="the comparison JSON (specperf compare --json-out)")
    p.add_argument("--repo", metavar="OWNER/NAME", default=None,
                   help="the repository (default: $GITHUB_REPOSITORY)")
    p.add_argument("--dry-run", action="store_true",
                   help="list the open issues and print the plan; change nothing")
    p.add_argument("--cap", type=int, default=None, metavar="N",
                   help="at most N regression issues of the run's profile, hardware and "
                        "branch open after this run (the rest in one summary issue; "
                        "default: $SPECPERF_ISSUES_CAP, else 10)")
    p.add_argument("--close-superseded", action="store_true",
                   help="this is the scheduled nightly: close the open issues of its profile, "
                        "hardware and branch filed under an older vLLM version (no later "
                        "night checks them; a newer release's or a key without a version is "
                        "kept); without it a run on another vLLM closes none of them")
    p.add_argument("--branch", default=None,
                   help="the branch the run was made on, part of each issue's key "
                        "(default: $GITHUB_REF_NAME)")
    p.add_argument("--label", default=LABEL, choices=(LABEL, CANDIDATE_LABEL),
                   help=f"the issues this run files and reads: {LABEL} (the nightly, of the "
                        f"pinned vLLM; default) or {CANDIDATE_LABEL} (the candidate job's "
                        "upgrade A/B of a vLLM release not yet pinned), so neither updates or "
                        "closes the other's")
    p.add_argument("--state", metavar="PATH", default=None,
                   help="what is done, for a rerun to continue (default: issues-state.json "
                        "beside the comparison)")
    return p


class FilingState(BaseModel):
    """What `specperf issues` has done for one comparison (its file's sha256)."""

    comparison: str
    done: list[IssueKey] = []
    opened: list[IssueKey] = []
    finished: bool = False


def _load_state(path: Path, digest: str) -> FilingState:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return FilingState(comparison=digest)
    except OSError as exc:
        raise options.BadInput(f"{path}: cannot read the state file: "
                               f"{exc.strerror or exc}") from None
    try:
        state = FilingState.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(the file)"
        raise options.BadInput(f"{path}: not a `specperf issues` state file: field "
                               f"`{where}`: {first['msg']} — fix: delete it (the open "
                               "issues' markers keep reruns from opening duplicates) or "
                               "pass another --state") from None
    if state.comparison != digest:
        print(f"{PROG}: {path} is of another comparison: starting afresh")
        return FilingState(comparison=digest)
    return state


def _save_state(path: Path, state: FilingState) -> None:
    try:
        atomic_write_text(path, state.model_dump_json(indent=1) + "\n")
    except OSError as exc:
        raise options.BadInput(f"{path}: cannot write the state file: "
                               f"{exc.strerror or exc} — pass a writable --state") from None


def _comparison(path: str) -> tuple[RunComparison, str]:
    try:
        raw = Path(path).read_bytes()
        return RunComparison.model_validate_json(raw), hashlib.sha256(raw).hexdigest()
    except OSError as exc:
        raise options.BadInput(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(the file)"
        raise options.BadInput(f"{path}: not a comparison (`specperf compare --json-out`): "
                               f"field `{where}`: {first['msg']}") from None


def _links(env: settings.Settings) -> RunLinks:
    if env.github_server_url and env.github_repository and env.github_run_id:
        run = f"{env.github_server_url}/{env.github_repository}/actions/runs/{env.github_run_id}"
        return RunLinks(run=run, artifacts=f"{run}#artifacts")
    return RunLinks()


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    cmp, digest = _comparison(args.comparison)
    try:
        env = settings.current()
    except settings.SettingsError as exc:
        raise options.BadInput(options.one_line(str(exc))) from None
    repo = args.repo or env.github_repository
    if not repo or not _REPO.match(repo):
        raise options.BadInput(f"--repo {repo!r}: not OWNER/NAME — fix: pass --repo or set "
                               "GITHUB_REPOSITORY")
    cap = env.issues_cap if args.cap is None else args.cap
    if cap < 0:
        raise options.BadInput(f"--cap {cap}: give 0 or more open regression issues per "
                               "profile, hardware and branch")
    if env.github_token is None:
        raise options.BadInput("GITHUB_TOKEN is not set — fix: give the job "
                               "`permissions: issues: write` and GITHUB_TOKEN: "
                               "${{ github.token }}")
    branch = args.branch or env.github_ref_name
    try:
        check_ids(cmp, branch)
    except ValueError as exc:
        raise options.BadInput(f"{args.comparison}: {exc} — fix: issues are keyed by these; "
                               "compare run files specperf wrote, on a branch git accepts"
                               ) from None
    state_path = Path(args.state) if args.state else Path(args.comparison).with_name(
        "issues-state.json")
    state = _load_state(state_path, digest)
    gh = GitHubIssues(env.github_api_url, repo, urllib_send(env.github_token.get_secret_value()),
                      label=args.label)
    done = set(state.done)
    try:
        existing = open_issues(gh.list_open())
        actions = plan(cmp, existing, _links(env), branch=branch, cap=cap,
                       close_superseded=args.close_superseded,
                       opened_before=state.opened)
        if cmp.refused:
            print(f"{PROG}: the comparison was refused; no issue opened or closed")
        if not actions:
            print(f"{PROG}: no confirmed regression and no open regression issue: nothing to do")
        for action in actions:
            if action.kind != "keep" and action.key in done:
                print(f"already done by an earlier attempt ({state_path}): {action.kind} "
                      f"{action.title}")
            elif args.dry_run and action.kind != "keep":
                target = f"#{action.number}" if action.number else "(new)"
                print(f"would {action.kind} {target} {action.title}: {action.why}")
            else:
                print(gh.apply(action))  # a "keep" only says why
                if action.kind != "keep":
                    state.done.append(action.key)
                    done.add(action.key)
                    if action.kind == "open":
                        state.opened.append(action.key)
                    _save_state(state_path, state)
    except RateLimited as exc:
        if not args.dry_run:
            _save_state(state_path, state)
        print(f"{PROG}: paused by GitHub's rate limit after {len(state.done)} change(s): "
              f"{exc} — rerun the job then; it continues from {state_path}", file=sys.stderr)
        return Exit.ISSUES_PAUSED
    except GitHubError as exc:
        if not args.dry_run:
            _save_state(state_path, state)
        raise options.BadInput(f"{exc} (what was done before is in {state_path}; a rerun "
                               "continues from it)") from None
    if not args.dry_run:
        state.finished = True
        _save_state(state_path, state)
    return Exit.OK
