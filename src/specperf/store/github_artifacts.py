"""The merged run files of a workflow's recent successful nightlies, from GitHub Actions.

A read-only client of three REST endpoints (stdlib ``urllib``; no new dependency):

* ``GET /repos/{repo}/actions/workflows/{workflow}/runs?status=success`` — the workflow's
  successful runs, newest first, paged;
* ``GET /repos/{repo}/actions/runs/{run_id}/artifacts?name={artifact}`` — a run's artifact;
* ``GET {archive_download_url}`` — its zip (GitHub answers with a redirect to storage).

Each artifact's ``run.json`` is written to ``OUT/nightly-{run_number}-{run_id}/run.json``
(an existing one is kept: a cache), beside ``nightly.json`` naming the workflow run it came
from. Nothing here decides what may be pooled: the directory is read by
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
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specperf.store.files import atomic_write_text

__all__ = ["DEFAULT_API_URL", "Fetched", "GitHubError", "fetch_nightlies"]

DEFAULT_API_URL = "https://api.github.com"
#: A merged run file is a few MB; anything far larger is not one (or is a zip bomb).
MAX_RUN_BYTES = 256 * 1024 * 1024
_PER_PAGE = 50


class GitHubError(RuntimeError):
    """The API refused or failed; the message names the URL and what to check."""


@dataclass(frozen=True)
class Fetched:
    """One nightly whose run file is now in the directory."""

    run_id: int
    run_number: int | None
    html_url: str | None
    path: Path
    cached: bool


Opener = Callable[..., Any]


def _request(url: str, token: str | None, accept: str = "application/vnd.github+json"
             ) -> urllib.request.Request:
    if urllib.parse.urlsplit(url).scheme not in ("https", "http"):
        raise GitHubError(f"{url}: not an http(s) URL — give GITHUB_API_URL as https://…")
    req = urllib.request.Request(url, headers={  # noqa: S310 - http(s) only, checked above
        "Accept": accept, "X-GitHub-Api-Version": "2022-11-28",
        "User-Agent": "specperf-fetch-nightlies"})
    if token:
        # Unredirected: never forwarded to the storage host of an artifact's redirect.
        req.add_unredirected_header("Authorization", f"Bearer {token}")
    return req


def _open(opener: Opener, req: urllib.request.Request, timeout: float) -> bytes:
    try:
        with opener(req, timeout=timeout) as resp:
            return bytes(resp.read())
    except urllib.error.HTTPError as exc:
        hint = {401: "the token is missing or invalid",
                403: "the token may not read Actions (the job needs `permissions: actions: "
                     "read`), or the rate limit was hit",
                404: "no such repository or workflow, or the token cannot see it",
                410: "the artifact expired"}.get(exc.code, "")
        raise GitHubError(f"GET {req.full_url}: HTTP {exc.code} {exc.reason}"
                          + (f" — {hint}" if hint else "")) from None
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


def fetch_nightlies(repo: str, workflow: str, artifact: str, out: Path, *,
                    token: str | None, limit: int, api_url: str = DEFAULT_API_URL,
                    exclude_run_id: int | None = None, timeout: float = 60.0,
                    opener: Opener | None = None,
                    say: Callable[[str], None] = lambda _: None) -> list[Fetched]:
    """The run files of the newest ``limit`` successful runs of ``workflow`` that uploaded
    ``artifact``, into ``out``; newest first. ``exclude_run_id``: the run asking (its own
    artifact is not a kept run of itself)."""
    open_url = opener or urllib.request.urlopen
    api = api_url.rstrip("/")
    got: list[Fetched] = []
    # Made even when nothing is found: an empty directory says "looked, none kept yet".
    out.mkdir(parents=True, exist_ok=True)
    for seen, run in enumerate(_successful_runs(open_url, api, repo, workflow, token, timeout)):
        # Runs without the artifact are skipped; never page through a long history for them.
        if seen >= 5 * limit:
            break
        run_id = int(run["id"])
        # The query asked for successful runs; a run that did not succeed is never kept,
        # whatever a proxy or an older API answered.
        if run_id == exclude_run_id or run.get("conclusion") != "success":
            continue
        number = run.get("run_number")
        dest = out / f"nightly-{number}-{run_id}" / "run.json"
        fetched = Fetched(run_id, number, run.get("html_url"), dest, cached=dest.is_file())
        if not fetched.cached:
            query = urllib.parse.urlencode({"name": artifact})
            arts = _json(open_url, f"{api}/repos/{repo}/actions/runs/{run_id}/artifacts?{query}",
                         token, timeout).get("artifacts") or []
            art = next((a for a in arts if a.get("name") == artifact and not a.get("expired")),
                       None)
            if art is None:
                say(f"specperf: nightly {run.get('html_url') or run_id}: no unexpired artifact "
                    f"{artifact!r}; skipped")
                continue
            url = str(art["archive_download_url"])
            # The token goes to the API host only, never to a URL elsewhere an answer names.
            zipped = _open(open_url, _request(url, token if url.startswith(f"{api}/") else None,
                                              accept="application/zip"), timeout)
            atomic_write_text(dest, _run_json(zipped, f"artifact {artifact} of run {run_id}"))
        atomic_write_text(dest.parent / "nightly.json", json.dumps({
            "kind": "github-workflow-run", "run_id": run_id, "run_number": number,
            "html_url": run.get("html_url"), "head_sha": run.get("head_sha"),
            "created_at": run.get("created_at")}, indent=1) + "\n")
        got.append(fetched)
        if len(got) >= limit:
            break  # before asking for another page
    return got
