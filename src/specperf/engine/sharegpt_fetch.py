"""`specperf fetch-sharegpt DIR`: download the ShareGPT dataset the GPU profiles use.

The GPU profiles read ``ShareGPT_V3_unfiltered_cleaned_split.json`` (about 670 MB, the
file vLLM's own serving benchmarks use). A perf run never downloads it; this command
does, where the network allows, once per machine. The download goes to a temp file in
DIR and is renamed into place only when complete (and, with ``--sha256``, verified), so
an interrupted or failed download never leaves a file a run would take for the dataset.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from specperf.config import settings

FILENAME = "ShareGPT_V3_unfiltered_cleaned_split.json"
REPO = "anon8231489123/ShareGPT_Vicuna_unfiltered"
URL = f"https://huggingface.co/datasets/{REPO}/resolve/main/{FILENAME}"
#: Overrides the URL (a mirror, or a local server in tests).
URL_ENV = "SPECPERF_SHAREGPT_URL"
CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A download that did not produce the file; the message says why and what to do."""


def default_url() -> str:
    """$SPECPERF_SHAREGPT_URL (a mirror), else the Hugging Face URL."""
    return settings.current().sharegpt_url or URL


def fetch(
    dest_dir: Path,
    url: str | None = None,
    *,
    sha256: str | None = None,
    force: bool = False,
    timeout_s: float = 60.0,
    progress: Callable[[int, int | None], None] | None = None,
) -> Path:
    """Download the dataset into ``dest_dir``; return its path.

    An existing file is kept unless ``force`` (checked against ``sha256`` if given).
    Raises :class:`FetchError` naming the URL and the cause; no partial file remains.
    """
    return fetch_file(dest_dir, FILENAME, url or default_url(), url_env=URL_ENV,
                      refusal=_not_a_json_list, sha256=sha256, force=force,
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
        if sha256 is not None and _sha256(dest) != sha256.lower():
            raise FetchError(
                f"{dest}: exists but its sha256 is not {sha256} — delete it or pass --force"
            )
        return dest
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
