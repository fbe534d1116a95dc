"""The merged run files of a workflow's recent successful nightlies, from GitHub Actions.

A read-only client of these REST endpoints (stdlib ``urllib``; no new dependency):

* ``GET /repos/{repo}`` — the repository's own name and default branch;
* ``GET /repos/{repo}/actions/workflows/{id}`` — the workflow's file, when given by id;
* ``GET /repos/{repo}/actions/workflows/{workflow}/runs?status=success`` — the workflow's
  successful runs, newest first, paged;
* ``GET /repos/{repo}/compare/{default_branch}...{head_sha}`` — whether a run's commit is
  in the default branch's history (``status`` ``behind`` or ``identical``);
* ``GET /repos/{repo}/actions/runs/{run_id}/artifacts?name={artifact}`` — a run's artifact;
* ``GET {archive_download_url}`` — its zip (GitHub answers with a redirect to storage).

Only a *trusted* nightly's run file is kept (:func:`untrusted`, :func:`_unreachable`): a
run of the workflow's own file, started by its schedule or by hand on the default branch,
of the repository itself (not a fork), at a commit in the default branch's history (a
branch *name* is not enough: a tag ``main`` reports ``head_branch`` ``main``), whose run
file names the commit the API says the run checked out.
Anyone who can push a branch or open a pull request can make a successful run of the
workflow that uploads whatever it likes; its run file must never become a kept run that
judges a night or is promoted as the baseline. The rest are refused with their reasons,
before their artifact is downloaded where the API's answer suffices.

Each kept artifact's ``run.json`` is written to ``OUT/nightly-{run_number}-{run_id}/run.json``
(an existing one is kept: a cache, checked again), beside ``nightly.json`` naming the
workflow run it came from; ``OUT/nightlies.json`` records what was kept and refused, and
why. Nothing here decides what of the kept may be pooled: the directory is read by
:mod:`specperf.store.kept_runs` and the rule is :mod:`specperf.analysis.reference`'s.

Why it lives in ``store``: it is file I/O (artifacts in, run files out) and needs nothing
above ``store``; a network client below the engine keeps ``specperf fetch-nightlies``
free of vLLM, scipy and the report. The token is sent only to the API host: the
``Authorization`` header is *unredirected*, so urllib does not forward it to the storage
host an artifact download redirects to (whose URL is already signed).
"""

from __future__ import annotations

import io
import json
import re
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specperf.store.files import atomic_write_text

__all__ = ["DEFAULT_API_URL", "Fetched", "GitHubError", "Nightlies", "Refused", "Source",
           "fetch_nightlies", "untrusted"]

DEFAULT_API_URL = "https://api.github.com"
#: A merged run file is a few MB; anything far larger is not one (or is a zip bomb).
MAX_RUN_BYTES = 256 * 1024 * 1024
#: The largest artifact zip downloaded at all, whatever its ``size_in_bytes`` says (a
#: merged artifact is a run file, a comparison and a report: a few MB zipped).
MAX_ARTIFACT_BYTES = 512 * 1024 * 1024
#: The largest JSON answer read (a page of 50 workflow runs is ~0.3 MB).
MAX_ANSWER_BYTES = 32 * 1024 * 1024
_PER_PAGE = 50
#: The events a trusted nightly starts from: its schedule, or a person with write access
#: running it by hand (then on the default branch only: see :func:`untrusted`).
TRUSTED_EVENTS = ("schedule", "workflow_dispatch")
#: The record of one fetch, beside the run files (not a run file: kept_runs passes it over).
RECORD_NAME = "nightlies.json"


class GitHubError(RuntimeError):
    """The API refused or failed; the message names the URL and what to check.
    ``status``: the HTTP status GitHub answered, when it answered one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Fetched:
    """One nightly whose run file is now in the directory."""

    run_id: int
    run_number: int | None
    html_url: str | None
    path: Path
    cached: bool


@dataclass(frozen=True)
class Refused:
    """One workflow run whose run file is not kept, and why (each reason one phrase)."""

    run_id: int
    run_number: int | None
    html_url: str | None
    reasons: tuple[str, ...]

    def __str__(self) -> str:
        return f"run {self.run_id}: {'; '.join(self.reasons)}"


@dataclass(frozen=True)
class Nightlies:
    """What one fetch found: the kept run files (newest first), the runs refused as not
    trusted, and trusted runs passed over because their artifact is gone."""

    kept: list[Fetched]
    refused: list[Refused]
    skipped: list[Refused]


@dataclass(frozen=True)
class Source:
    """What a trusted nightly is a run of: the repository (its canonical ``OWNER/NAME``),
    its default branch and the workflow's file."""

    repo: str
    default_branch: str
    workflow_path: str


Opener = Callable[..., Any]


def _shown(value: object) -> str:
    """A value from an API answer, quoted and bounded: a branch or repository name is
    anyone's text, and is printed into CI logs."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def untrusted(run: dict[str, Any], source: Source) -> tuple[str, ...]:
    """Why a workflow run (an entry of the API's ``workflow_runs``) is not a trusted nightly
    of ``source``; empty when it is one. Every check that fails is named."""
    reasons = []
    event, branch = run.get("event"), run.get("head_branch")
    if event not in TRUSTED_EVENTS:
        reasons.append(f"event {_shown(event)}, not schedule or workflow_dispatch on "
                       f"{source.default_branch}")
    if branch != source.default_branch:
        reasons.append(f"branch {_shown(branch)}, not the default branch "
                       f"{source.default_branch}")
    head = run.get("head_repository")
    head_name = head.get("full_name") if isinstance(head, dict) else None
    if not isinstance(head_name, str) or head_name.lower() != source.repo.lower():
        reasons.append(f"head repository {_shown(head_name)}, not {source.repo} (a fork or "
                       "another repository)")
    if run.get("path") != source.workflow_path:
        reasons.append(f"workflow {_shown(run.get('path'))}, not {source.workflow_path}")
    return tuple(reasons)


#: A commit id as the API names one (SHA-1; a SHA-256 repository's ids are 64 digits).
_COMMIT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
#: What ``GET /compare/{default_branch}...{head_sha}`` answers when ``head_sha`` is in the
#: default branch's history: the head is behind the base, or is the base itself.
REACHABLE = ("behind", "identical")


def _unreachable(opener: Opener, api: str, source: Source, head_sha: object,
                 token: str | None, timeout: float) -> tuple[str, ...]:
    """Why the run's commit is not one the default branch holds; empty when it is.

    The run's ``head_branch`` is a *name*: a tag ``refs/tags/main`` reports ``main`` too,
    and a tag may be pushed at any commit, with a workflow copy of its own. What makes a
    nightly trusted is that its commit was reviewed into the default branch — in its
    history (GitHub's compare API: ``behind`` or ``identical``), whatever ref started it."""
    if not isinstance(head_sha, str) or not _COMMIT_ID.match(head_sha):
        return (f"head_sha {_shown(head_sha)} is not a commit id",)
    url = (f"{api}/repos/{source.repo}/compare/"
           f"{urllib.parse.quote(source.default_branch, safe='')}...{head_sha}")
    try:
        status = _json(opener, url, token, timeout).get("status")
    except GitHubError as exc:
        if exc.status not in (404, 422):  # anything but "no such commit here" stops the fetch
            raise
        status = f"HTTP {exc.status}"
    if status in REACHABLE:
        return ()
    return (f"commit {_shown(head_sha)} is not in the history of {source.default_branch} "
            f"(compare {source.default_branch}...{head_sha[:12]}: {_shown(status)}, not "
            "behind or identical): a tag or branch at an unreviewed commit",)


def _commit_mismatch(run_text: str, head_sha: object) -> str | None:
    """Why the run file does not belong to the workflow run it came from (its
    ``provenance.git_commit`` is not the run's ``head_sha``); None when it does."""
    try:
        data = json.loads(run_text)
    except (ValueError, RecursionError):
        data = None
    provenance = data.get("provenance") if isinstance(data, dict) else None
    commit = provenance.get("git_commit") if isinstance(provenance, dict) else None
    if not isinstance(commit, str) or not isinstance(head_sha, str):
        return (f"its run.json's provenance.git_commit is {_shown(commit)}, not the run's "
                f"head_sha {_shown(head_sha)}")
    if commit.lower() != head_sha.lower():
        return (f"its run.json's provenance.git_commit {_shown(commit)} is not the run's "
                f"head_sha {_shown(head_sha)}")
    return None


#: Hosts plain http may reach: this machine's loopback only (a local stand-in of the API,
#: as the tests run one); anything else is https, or the token could be read on the way.
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _request(url: str, token: str | None, accept: str = "application/vnd.github+json"
             ) -> urllib.request.Request:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "https" and not (parts.scheme == "http"
                                        and parts.hostname in _LOOPBACK):
        raise GitHubError(f"{url}: not an https URL (plain http only to 127.0.0.1) — give "
                          "GITHUB_API_URL as https://…")
    req = urllib.request.Request(url, headers={  # noqa: S310 - https (or loopback http) only
        "Accept": accept, "X-GitHub-Api-Version": "2022-11-28",
        "User-Agent": "specperf-fetch-nightlies"})
    if token:
        # Unredirected: never forwarded to the storage host of an artifact's redirect.
        req.add_unredirected_header("Authorization", f"Bearer {token}")
    return req


def _open(opener: Opener, req: urllib.request.Request, timeout: float,
          limit: int = MAX_ANSWER_BYTES, what: str | None = None) -> bytes:
    """The answer's body, never more than ``limit`` bytes read (more: an error)."""
    try:
        with opener(req, timeout=timeout) as resp:
            body = bytes(resp.read(limit + 1))
            if len(body) > limit:
                raise GitHubError(f"GET {req.full_url}: "
                                  f"{what or f'the answer is more than {limit} bytes'} — "
                                  "not what GitHub sends here")
            return body
    except urllib.error.HTTPError as exc:
        hint = {401: "the token is missing or invalid",
                403: "the token may not read Actions (the job needs `permissions: actions: "
                     "read`), or the rate limit was hit",
                404: "no such repository or workflow, or the token cannot see it",
                410: "the artifact expired"}.get(exc.code, "")
        raise GitHubError(f"GET {req.full_url}: HTTP {exc.code} {exc.reason}"
                          + (f" — {hint}" if hint else ""), status=exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise GitHubError(f"GET {req.full_url}: {reason}") from None


def _json(opener: Opener, url: str, token: str | None, timeout: float) -> dict[str, Any]:
    raw = _open(opener, _request(url, token), timeout)
    try:
        data = json.loads(raw)
    except ValueError:
        raise GitHubError(f"GET {url}: the answer is not JSON") from None
    if not isinstance(data, dict):
        raise GitHubError(f"GET {url}: expected a JSON object")
    return data


def _successful_runs(opener: Opener, api: str, repo: str, workflow: str, token: str | None,
                     timeout: float) -> Iterator[dict[str, Any]]:
    """The workflow's successful runs, newest first, page after page."""
    page = 1
    while True:
        query = urllib.parse.urlencode({"status": "success", "per_page": _PER_PAGE, "page": page})
        url = (f"{api}/repos/{repo}/actions/workflows/"
               f"{urllib.parse.quote(workflow, safe='')}/runs?{query}")
        runs = _json(opener, url, token, timeout).get("workflow_runs") or []
        yield from runs
        if len(runs) < _PER_PAGE:
            return
        page += 1


def _run_json(zip_bytes: bytes, source: str) -> str:
    """The artifact's top-level run.json (the merged run), as text."""
    try:
        with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
            # Only that name is read: no member is extracted to a path of its own choosing.
            info = next((i for i in zf.infolist() if i.filename == "run.json"), None)
            if info is None:
                raise GitHubError(f"{source}: the artifact holds no top-level run.json")
            if info.file_size > MAX_RUN_BYTES:
                raise GitHubError(f"{source}: run.json is {info.file_size} bytes, more than "
                                  "a run file can be")
            return zf.read(info).decode("utf-8")
    except (zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise GitHubError(f"{source}: not a zip with a UTF-8 run.json ({exc})") from None


def _source(opener: Opener, api: str, repo: str, workflow: str, token: str | None,
            timeout: float) -> Source:
    """The repository's canonical name and default branch, and the workflow's file, as
    the API answers them (a workflow given by file name is that file; by id, asked)."""
    data = _json(opener, f"{api}/repos/{repo}", token, timeout)
    name, branch = data.get("full_name"), data.get("default_branch")
    if not isinstance(name, str) or not isinstance(branch, str):
        raise GitHubError(f"GET {api}/repos/{repo}: the answer names no full_name and "
                          "default_branch — is GITHUB_API_URL GitHub's REST API?")
    if workflow.isdigit():
        path = _json(opener, f"{api}/repos/{repo}/actions/workflows/{workflow}", token,
                     timeout).get("path")
        if not isinstance(path, str):
            raise GitHubError(f"GET {api}/repos/{repo}/actions/workflows/{workflow}: the "
                              "answer names no path")
    else:
        path = f".github/workflows/{workflow}"
    return Source(repo=name, default_branch=branch, workflow_path=path)


def _refused(run: dict[str, Any], reasons: tuple[str, ...]) -> Refused:
    return Refused(int(run["id"]), run.get("run_number"), run.get("html_url"), reasons)


def _forget(dest: Path) -> None:
    """Remove an earlier fetch's copy of a run now refused, so the directory's reader
    never pools it."""
    dest.unlink(missing_ok=True)
    (dest.parent / "nightly.json").unlink(missing_ok=True)


def _write_record(out: Path, source: Source, artifact: str, found: Nightlies) -> None:
    def entry(r: Fetched | Refused) -> dict[str, Any]:
        row: dict[str, Any] = {"run_id": r.run_id, "run_number": r.run_number,
                               "html_url": r.html_url}
        if isinstance(r, Fetched):
            row.update(path=r.path.relative_to(out).as_posix(), cached=r.cached)
        else:
            row["reasons"] = list(r.reasons)
        return row

    atomic_write_text(out / RECORD_NAME, json.dumps({
        "kind": "specperf-nightlies", "repository": source.repo,
        "default_branch": source.default_branch, "workflow": source.workflow_path,
        "artifact": artifact, "kept": [entry(k) for k in found.kept],
        "refused": [entry(r) for r in found.refused],
        "skipped": [entry(r) for r in found.skipped]}, indent=1) + "\n")


def fetch_nightlies(repo: str, workflow: str, artifact: str, out: Path, *,
                    token: str | None, limit: int, api_url: str = DEFAULT_API_URL,
                    exclude_run_id: int | None = None, timeout: float = 60.0,
                    opener: Opener | None = None,
                    say: Callable[[str], None] = lambda _: None) -> Nightlies:
    """The run files of the newest ``limit`` trusted successful runs of ``workflow`` that
    uploaded ``artifact``, into ``out``; newest first, with the runs refused and why
    (also recorded in ``out/nightlies.json``). ``exclude_run_id``: the run asking (its
    own artifact is not a kept run of itself)."""
    open_url = opener or urllib.request.urlopen
    api = api_url.rstrip("/")
    # Made even when nothing is found: an empty directory says "looked, none kept yet".
    out.mkdir(parents=True, exist_ok=True)
    source = _source(open_url, api, repo, workflow, token, timeout)
    found = Nightlies(kept=[], refused=[], skipped=[])
    for seen, run in enumerate(_successful_runs(open_url, api, repo, workflow, token, timeout)):
        # Runs without the artifact are skipped; never page through a long history for them.
        if seen >= 5 * limit:
            break
        run_id = int(run["id"])
        # The query asked for successful runs; a run that did not succeed is never kept,
        # whatever a proxy or an older API answered.
        if run_id == exclude_run_id or run.get("conclusion") != "success":
            continue
        # Both become a path: numbers only, whatever the answer held.
        number = run.get("run_number") if isinstance(run.get("run_number"), int) else None
        dest = out / f"nightly-{number}-{run_id}" / "run.json"
        # The API's word first; then the commit's place, before any artifact or cached
        # copy of it is read.
        reasons = (untrusted(run, source)
                   or _unreachable(open_url, api, source, run.get("head_sha"), token, timeout))
        if reasons:  # its artifact is never downloaded
            _forget(dest)
            found.refused.append(_refused(run, reasons))
            continue
        fetched = Fetched(run_id, number, run.get("html_url"), dest, cached=dest.is_file())
        if fetched.cached:
            text = dest.read_text(encoding="utf-8", errors="replace")
        else:
            query = urllib.parse.urlencode({"name": artifact})
            arts = _json(open_url, f"{api}/repos/{repo}/actions/runs/{run_id}/artifacts?{query}",
                         token, timeout).get("artifacts") or []
            art = next((a for a in arts if a.get("name") == artifact and not a.get("expired")),
                       None)
            if art is None:
                say(f"specperf: nightly {run.get('html_url') or run_id}: no unexpired artifact "
                    f"{artifact!r}; skipped")
                found.skipped.append(_refused(run, (f"no unexpired artifact {artifact!r}",)))
                continue
            size = art.get("size_in_bytes")
            if not isinstance(size, int) or not 0 < size <= MAX_ARTIFACT_BYTES:
                say(f"specperf: nightly {run.get('html_url') or run_id}: artifact {artifact!r} "
                    f"size_in_bytes {_shown(size)}, not 1..{MAX_ARTIFACT_BYTES}; skipped")
                found.skipped.append(_refused(run, (
                    f"artifact {artifact!r} size_in_bytes {_shown(size)}, not 1.."
                    f"{MAX_ARTIFACT_BYTES}: not downloaded",)))
                continue
            url = str(art["archive_download_url"])
            # The token goes to the API host only, never to a URL elsewhere an answer names.
            # The download stops at the size the listing gave: never more is read.
            zipped = _open(open_url, _request(url, token if url.startswith(f"{api}/") else None,
                                              accept="application/zip"), timeout,
                           limit=size, what=f"the download is more than the artifact's "
                                            f"size_in_bytes {size}")
            text = _run_json(zipped, f"artifact {artifact} of run {run_id}")
        mismatch = _commit_mismatch(text, run.get("head_sha"))
        if mismatch:  # a run file made elsewhere, uploaded by this run: never written
            _forget(dest)
            found.refused.append(_refused(run, (mismatch,)))
            continue
        if not fetched.cached:
            atomic_write_text(dest, text)
        atomic_write_text(dest.parent / "nightly.json", json.dumps({
            "kind": "github-workflow-run", "run_id": run_id, "run_number": number,
            "html_url": run.get("html_url"), "head_sha": run.get("head_sha"),
            "event": run.get("event"), "head_branch": run.get("head_branch"),
            "created_at": run.get("created_at")}, indent=1) + "\n")
        found.kept.append(fetched)
        if len(found.kept) >= limit:
            break  # before asking for another page
    _write_record(out, source, artifact, found)
    return found
