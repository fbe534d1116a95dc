"""`specperf fetch-sharegpt DIR`: download the ShareGPT dataset the GPU profiles use.

The GPU profiles read ``ShareGPT_V3_unfiltered_cleaned_split.json`` (about 670 MB, the
file vLLM's own serving benchmarks use). A perf run never downloads it; this command
does, where the network allows, once per machine. The download goes to a temp file in
DIR and is renamed into place only when complete and verified, so an interrupted,
failed or substituted download never leaves a file a run would take for the dataset.

Pinned: from the hub, the file is fetched at a dataset *commit* (``--revision``, or
$SPECPERF_SHAREGPT_REVISION), never at ``main``, which anyone with write access to the
dataset can move; and every download needs its sha256 (``--sha256``, or
$SPECPERF_SHAREGPT_SHA256) — nothing is written that does not match it. A file already
in DIR is kept (checked against the sha256 when one is given); --force downloads again.
This code names no commit and checksum of its own yet (REVISION, SHA256: None): they are
to be set, once, by someone who can reach the hub (docs/gpu-and-ci.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from specperf.config import settings

FILENAME = "ShareGPT_V3_unfiltered_cleaned_split.json"
REPO = "anon8231489123/ShareGPT_Vicuna_unfiltered"
#: The dataset commit the file is fetched at, and the file's sha256 there. None: not
#: pinned in the code yet — no one who wrote this could reach the hub to read them; give
#: them with --revision / --sha256 (or the variables below) until they are set here.
REVISION: str | None = None
SHA256: str | None = None
#: The hub URL, at a revision (shown in --help with the placeholder).
URL = f"https://huggingface.co/datasets/{REPO}/resolve/REVISION/{FILENAME}"
#: Overrides the URL (a mirror, or a local server in tests).
URL_ENV = "SPECPERF_SHAREGPT_URL"
#: The dataset commit and the file's sha256, where the code pins none (the nightly's
#: repository variables).
REVISION_ENV = "SPECPERF_SHAREGPT_REVISION"
SHA256_ENV = "SPECPERF_SHAREGPT_SHA256"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A download that did not produce the file; the message says why and what to do."""


class NotPinned(FetchError):
    """No dataset commit or no sha256 to fetch by: a setting to give, not the network."""


def default_url(revision: str | None = None) -> str:
    """$SPECPERF_SHAREGPT_URL (a mirror), else the Hugging Face URL at ``revision`` (else
    $SPECPERF_SHAREGPT_REVISION, else :data:`REVISION`): a 40-digit commit id, never a
    branch or tag, which move. Raises :class:`NotPinned` without one."""
    env = settings.current()
    if env.sharegpt_url and revision is None:
        return env.sharegpt_url
    rev = revision or env.sharegpt_revision or REVISION
    if rev is None:
        raise NotPinned(
            f"the ShareGPT download is not pinned to a dataset commit — fix: pass --revision "
            f"COMMIT (the 40-digit commit of {REPO} on huggingface.co; or set {REVISION_ENV}) "
            f"with its --sha256, or --url a mirror")
    if not _COMMIT.match(rev):
        raise NotPinned(f"--revision {rev[:60]!r}: not a commit id (40 lower-case hex "
                        "digits); a branch or tag like main moves under the pin")
    return URL.replace("/REVISION/", f"/{rev}/")


def expected_sha256(sha256: str | None = None) -> str:
    """The sha256 a download must have: ``sha256``, else $SPECPERF_SHAREGPT_SHA256, else
    :data:`SHA256`; raises :class:`NotPinned` without one."""
    digest = sha256 or settings.current().sharegpt_sha256 or SHA256
    if digest is None:
        raise NotPinned(f"no sha256 to check the ShareGPT download against — fix: pass "
                        f"--sha256 HEX (or set {SHA256_ENV}); nothing is downloaded unchecked")
    if not _SHA256.match(digest):
        raise NotPinned(f"--sha256 {digest[:70]!r}: not a sha256 (64 hex digits)")
    return digest.lower()


def fetch(
    dest_dir: Path,
    url: str | None = None,
    *,
    revision: str | None = None,
    sha256: str | None = None,
    force: bool = False,
    timeout_s: float = 60.0,
    progress: Callable[[int, int | None], None] | None = None,
) -> Path:
    """Download the dataset into ``dest_dir``; return its path.

    An existing file is kept unless ``force`` (checked against the sha256 when one is
    given or set). A download needs a sha256 and, from the hub, a revision
    (:class:`NotPinned` before any request otherwise). Raises :class:`FetchError` naming
    the URL and the cause; no partial file remains.
    """
    dest = Path(dest_dir) / FILENAME
    if dest.exists() and not force:
        return _kept(dest, sha256 or settings.current().sharegpt_sha256 or SHA256)
    digest = expected_sha256(sha256)
    return fetch_file(dest_dir, FILENAME, url or default_url(revision), url_env=URL_ENV,
                      refusal=_not_a_json_list, sha256=digest, force=force,
                      timeout_s=timeout_s, progress=progress)


def _not_a_json_list(head: bytes) -> str | None:
    if head.startswith(b"["):
        return None
    return (f"the response is not a JSON list (starts {head[:20]!r}); a proxy or login page "
            "answered instead of the dataset")


def fetch_file(
    dest_dir: Path,
    filename: str,
    url: str,
    *,
    url_env: str,
    refusal: Callable[[bytes], str | None],
    sha256: str | None = None,
    force: bool = False,
    timeout_s: float = 60.0,
    progress: Callable[[int, int | None], None] | None = None,
) -> Path:
    """Download ``url`` to ``dest_dir/filename`` atomically; return its path.

    ``refusal`` gets the file's first bytes (leading whitespace stripped) and says why they
    are not the dataset, or None. An existing file is kept unless ``force`` (checked
    against ``sha256`` if given). Raises :class:`FetchError` naming the URL and the cause;
    no partial file remains."""
    if not _scheme_ok(url):
        raise FetchError(f"{url}: only http(s) URLs are fetched")
    dest_dir = Path(dest_dir)
    dest = dest_dir / filename
    if dest.exists() and not force:
        return _kept(dest, sha256)
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FetchError(f"{dest_dir}: cannot create the directory: {exc}") from None
    fd, tmp_name = tempfile.mkstemp(prefix=f".{filename}.", suffix=".part", dir=dest_dir)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            got, expected, digest = _download(url, out, timeout_s, progress, filename, url_env)
            out.flush()
            os.fsync(out.fileno())
        if expected is not None and got != expected:
            raise FetchError(
                f"{url}: download truncated: got {got} of {expected} bytes — try again"
            )
        if got == 0:
            raise FetchError(f"{url}: the server sent an empty file")
        if sha256 is not None and digest != sha256.lower():
            raise FetchError(f"{url}: sha256 is {digest}, expected {sha256}")
        with tmp.open("rb") as f:
            head = f.read(64).lstrip()
        why = refusal(head)
        if why is not None:
            raise FetchError(f"{url}: {why}")
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return dest


def _kept(dest: Path, sha256: str | None) -> Path:
    """The file already in place, kept: checked against ``sha256`` when one is known."""
    if sha256 is not None and _sha256(dest) != sha256.lower():
        raise FetchError(f"{dest}: exists but its sha256 is not {sha256} — delete it or pass "
                         "--force")
    return dest


def _download(
    url: str, out: object, timeout_s: float, progress: Callable[[int, int | None], None] | None,
    filename: str, url_env: str,
) -> tuple[int, int | None, str]:
    req = urllib.request.Request(url, headers={"User-Agent": "specperf-fetch"})  # noqa: S310
    h = hashlib.sha256()
    got = 0
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - http(s) only
            length = resp.headers.get("Content-Length")
            expected = int(length) if length and length.isdigit() else None
            while True:
                block = resp.read(CHUNK)
                if not block:
                    break
                out.write(block)  # type: ignore[attr-defined]
                h.update(block)
                got += len(block)
                if progress is not None:
                    progress(got, expected)
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FetchError(
            f"{url}: cannot download: {reason} — this machine may be offline or behind a "
            f"proxy; download {filename} elsewhere and copy it into place, or set "
            f"{url_env} to a reachable mirror"
        ) from None
    return got, expected, h.hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _scheme_ok(url: str) -> bool:
    return url.startswith(("https://", "http://"))
