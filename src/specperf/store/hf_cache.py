"""The Hugging Face models a profile loads, and which commit of each the local hub cache
holds: what `scripts/download_models.py` records and what a run's provenance carries.

The hub cache's layout is huggingface_hub's (``huggingface_hub.file_download``):
``<cache>/models--<org>--<name>/refs/<branch or tag>`` holds the 40-hex commit a
download of that branch resolved to, ``snapshots/<commit>/`` the files at that commit.
vLLM loads an unpinned model, offline, at ``refs/main``'s commit; a pinned one at its
commit. Read directly (two small files), never through the network.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specperf.config.profile import Profile
from specperf.config.remote_code import COMMIT, on_hub
from specperf.schemas.records import UNKNOWN_REVISION

__all__ = ["HubModel", "cached_commit", "cached_config", "hub_cache_dir",
           "hub_models", "model_revisions", "snapshot_dir", "tokenizer_args"]

@dataclass(frozen=True)
class HubModel:
    """A hub model a run of a profile loads: its id, the revision the profile asks for
    (None: the hub's main), and why it is loaded ("target", "draft of k3", ...)."""

    repo: str
    revision: str | None
    why: str


def hub_cache_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """The Hugging Face hub cache a process with environment ``env`` would use, by
    huggingface_hub's rule (HF_HUB_CACHE or HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else
    $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub).

    ``None`` (the default) means this process's own (``huggingface_hub.constants``).
    """
    if env is None:
        try:
            from huggingface_hub import constants
        except ImportError:  # pragma: no cover - comes with transformers
            return None
        return Path(constants.HF_HUB_CACHE)
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):  # the second: its older name
        if env.get(name):
            return Path(env[name]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    xdg = env.get("XDG_CACHE_HOME")
    root = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return root / "huggingface" / "hub"


def tokenizer_args(args: list[str]) -> list[str]:
    """The ``--tokenizer`` values of a list of serve_args, in order (argparse: the last
    wins)."""
    out = []
    for i, arg in enumerate(args):
        if arg == "--tokenizer" and i + 1 < len(args):
            out.append(args[i + 1])
        elif arg.startswith("--tokenizer="):
            out.append(arg.split("=", 1)[1])
    return out


def hub_models(profile: Profile) -> list[HubModel]:
    """The hub models a run of ``profile`` loads, each (id, revision) once, in the
    profile's order: the target at its `revision`, each speculative config's draft
    `model` at that config's `revision`, and any `--tokenizer` in serve_args at the
    profile's `tokenizer_revision` (None: main; specperf.engine.server passes it as
    --tokenizer-revision). Generated (tiny:) and local models are left out."""
    found = [HubModel(profile.target, profile.revision, "target")]
    for c in profile.server_configs:
        draft = c.draft_model
        if draft is not None:
            found.append(HubModel(draft, c.draft_revision, f"draft of {c.id}"))
    for where, args in profile.serve_args_lists():
        found += [HubModel(t, profile.tokenizer_revision, f"--tokenizer in {where}")
                  for t in tokenizer_args(args)]
    seen: set[tuple[str, str | None]] = set()
    out = []
    for m in found:
        if on_hub(m.repo) and (m.repo, m.revision) not in seen:
            seen.add((m.repo, m.revision))
            out.append(m)
    return out


def _repo_dir(cache: Path, repo: str) -> Path:
    # huggingface_hub.file_download.repo_folder_name for repo_type "model".
    return cache / ("models--" + repo.strip("/").replace("/", "--"))


def cached_commit(repo: str, revision: str | None, cache: Path | None) -> str | None:
    """The commit of ``repo`` at ``revision`` (None: main) that the cache holds: a
    commit is itself if its snapshot is there; a branch or tag is what its ref file
    says (the commit its last download resolved to). None when the cache cannot say."""
    if cache is None:
        return None
    root = _repo_dir(cache, repo)
    rev = revision or "main"
    if COMMIT.match(rev):
        return rev if (root / "snapshots" / rev).is_dir() else None
    if ".." in Path(rev).parts:
        return None
    try:
        text = (root / "refs" / rev).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if COMMIT.match(text) else None


def snapshot_dir(repo: str, revision: str | None, cache: Path | None) -> Path | None:
    """The cached snapshot directory of ``repo`` at ``revision`` (None: main), if any."""
    commit = cached_commit(repo, revision, cache)
    if commit is None or cache is None:
        return None
    path = _repo_dir(cache, repo) / "snapshots" / commit
    return path if path.is_dir() else None


def model_revisions(profile: Profile, cache: Path | None = None) -> dict[str, str]:
    """The commit each hub model of ``profile`` is served at, by model id: the profile's
    pin where it pins one (a 40-hex commit), else the commit the local hub cache resolves
    the asked revision to (``refs/main`` for an unpinned model), else ``"unknown"``.
    A model asked for at two revisions (two drafts pinned differently) gets both,
    comma-separated. ``cache`` defaults to this environment's hub cache (read now, so a
    test's or a job's HF_HOME counts)."""
    if cache is None:
        cache = hub_cache_dir(os.environ)
    out: dict[str, list[str]] = {}
    for m in hub_models(profile):
        if m.revision is not None and COMMIT.match(m.revision):
            rev = m.revision
        else:
            rev = cached_commit(m.repo, m.revision, cache) or UNKNOWN_REVISION
        revs = out.setdefault(m.repo, [])
        if rev not in revs:
            revs.append(rev)
    return {repo: ",".join(sorted(revs)) for repo, revs in out.items()}


def cached_config(repo: str, revision: str | None, cache: Path | None) -> dict[str, Any] | None:
    """``config.json`` of a directory, or of a hub model's cached snapshot; None when
    there is none or it is not a JSON object."""
    local = Path(repo).expanduser()
    where = local if local.is_dir() else snapshot_dir(repo, revision, cache)
    if where is None:
        return None
    try:
        data = json.loads((where / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None

