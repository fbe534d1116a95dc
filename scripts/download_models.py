"""Download a profile's Hugging Face models into the local hub cache, before a perf run.

The nightly (.github/workflows/nightly-perf.yml) runs this in a step of its own, the only
step that holds HF_TOKEN (gated models need it); the perf run after it is offline
(HF_HUB_OFFLINE=1) and its servers never see the token (specperf.engine.server_env).
This step runs nothing but huggingface_hub and specperf's own code (its profile loader,
its hub-cache reader and its atomic file writer: pydantic and the standard library), in a
job-local venv holding exactly .github/requirements/token.txt (hash-locked), so neither a
package the install step pulled in (vLLM and its tree) nor anything left in the runner's
persistent Python runs where the token is.

What it downloads: the profile's target at its `revision`, each speculative config's
draft `model` at that config's `revision`, and any `--tokenizer` named in serve_args at
the profile's `tokenizer_revision` (specperf.store.hf_cache.hub_models); generated
(tiny:) and local models are skipped. An unpinned model is downloaded at the hub's
current main, with a warning. Where a repository has safetensors weights, the other
weight formats (and Meta's original/ checkpoints) are left out, as vLLM itself loads them.

What it records: the commit each model was fetched at, read off the snapshot
huggingface_hub returns (``snapshots/<commit>``; the same commit ``refs/main`` then names
for an unpinned model, which is what an offline run serves) and checked against the hub's
answer for that revision (``HfApi.model_info(...).sha``). Each is printed, and all are
written, atomically, to a JSON manifest: ``--manifest PATH``, by default
``<hub cache>/../specperf-models/<profile>.json`` (beside the hub cache, so it describes
what that cache holds; docs/gpu-and-ci.md). A run reads the revisions it serves from the
hub cache itself (its provenance's ``model_revisions``), not from this file.

    python scripts/download_models.py --profile a100-qwen3-32b [--dry-run] [--manifest PATH]

Exit 0: every model is in the cache; 2: bad input (the profile, named); 8: a download
failed (specperf.config.exits).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from specperf.config.exits import Exit  # noqa: E402 - after the path above
from specperf.config.profile import Profile, ProfileError  # noqa: E402
from specperf.config.profile_file import load_profile  # noqa: E402
from specperf.config.remote_code import COMMIT  # noqa: E402
from specperf.store.files import atomic_write_text  # noqa: E402
from specperf.store.hf_cache import HubModel, hub_models  # noqa: E402

#: Weight formats vLLM does not load where safetensors exist (vllm's model loader).
OTHER_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack", "original/*")

#: The manifest's format: bumped when its keys change meaning.
MANIFEST_VERSION = 1


def models_of(profile: Profile) -> list[HubModel]:
    """The hub models a run of ``profile`` loads, each once, in the profile's order."""
    return hub_models(profile)


def ignore_patterns(files: list[str]) -> list[str]:
    """What not to download of a repository with these files."""
    return list(OTHER_WEIGHTS) if any(f.endswith(".safetensors") for f in files) else []


def download(model: HubModel) -> tuple[Path, str | None]:
    """Fetch ``model``; (its snapshot directory, the commit the hub names for the asked
    revision)."""
    from huggingface_hub import HfApi, snapshot_download

    info = HfApi().model_info(model.repo, revision=model.revision, files_metadata=False)
    files = [s.rfilename for s in (info.siblings or [])]
    # At the asked revision, not at info.sha: a download of main writes refs/main, which
    # is what an offline run (and vLLM) resolves the unpinned model to.
    where = Path(snapshot_download(model.repo, revision=model.revision,
                                   ignore_patterns=ignore_patterns(files) or None))
    return where, info.sha


def commit_of(snapshot: Path) -> str:
    """The commit a snapshot directory holds: its name (``snapshots/<commit>``)."""
    if not COMMIT.match(snapshot.name) or snapshot.parent.name != "snapshots":
        raise ValueError(f"{snapshot} is not a hub cache snapshot (snapshots/<commit>)")
    return snapshot.name


def default_manifest(profile: Profile) -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).parent / "specperf-models" / f"{profile.name}.json"


def write_manifest(path: Path, profile: Profile, records: list[dict[str, str]]) -> None:
    """The fetched models and their commits, written atomically (never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({
        "manifest_version": MANIFEST_VERSION,
        "profile": profile.name,
        "profile_hash": profile.hash(),
        "downloaded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "models": records,
    }, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--profile", required=True, help="profile name or path")
    ap.add_argument("--dry-run", action="store_true", help="list the models, download nothing")
    ap.add_argument("--manifest", type=Path, default=None,
                    help="where to write the fetched commits (default: "
                         "<hub cache>/../specperf-models/<profile>.json)")
    args = ap.parse_args(argv)
    try:
        profile = load_profile(args.profile, rootdir=ROOT)
    except ProfileError as exc:
        print(f"download_models: {exc}", file=sys.stderr)
        return int(Exit.BAD_INPUT)
    models = models_of(profile)
    if not models:
        print(f"download_models: profile {profile.name} loads no model from the hub")
    records: list[dict[str, str]] = []
    for m in models:
        pin = m.revision or "main (NOT pinned: set the profile's revision, docs/profiles.md)"
        print(f"download_models: {m.repo} at {pin} ({m.why})", flush=True)
        if args.dry_run:
            continue
        try:
            where, hub_sha = download(m)
            commit = commit_of(where)
        except Exception as exc:  # noqa: BLE001 - any hub failure is a failed download
            print(f"download_models: {m.repo}: download failed: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            return int(Exit.FETCH_FAILED)
        if hub_sha is not None and hub_sha != commit:
            # The branch moved between the two calls: the snapshot is what was fetched.
            print(f"download_models: {m.repo}: the hub named {hub_sha} for "
                  f"{m.revision or 'main'}, the snapshot fetched is {commit} (it moved "
                  "meanwhile); recording the snapshot's", flush=True)
        records.append({"repo": m.repo, "asked": m.revision or "main", "commit": commit,
                        "why": m.why, "snapshot": str(where)})
        print(f"download_models: {m.repo} -> {where} (commit {commit})", flush=True)
    if records:
        path = args.manifest or default_manifest(profile)
        try:
            write_manifest(path, profile, records)
        except OSError as exc:
            print(f"download_models: {path}: cannot write the manifest: {exc}", file=sys.stderr)
            return int(Exit.FETCH_FAILED)
        print(f"download_models: commits recorded in {path}", flush=True)
    return int(Exit.OK)


if __name__ == "__main__":
    sys.exit(main())
