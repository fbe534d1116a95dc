"""Download a profile's Hugging Face models into the local hub cache, before a perf run.

The nightly (.github/workflows/nightly-perf.yml) runs this in a step of its own, the only
step that holds HF_TOKEN (gated models need it); the perf run after it is offline
(HF_HUB_OFFLINE=1) and its servers never see the token (specperf.engine.server_env).
This step runs nothing but huggingface_hub and specperf's profile loader, in a job-local
venv holding exactly .github/requirements/token.txt (hash-locked), so neither a package
the install step pulled in (vLLM and its tree) nor anything left in the runner's
persistent Python runs where the token is.

What it downloads: the profile's target at its `revision`, each speculative config's
draft `model` at that config's `revision`, and any `--tokenizer` named in serve_args at
the profile's `tokenizer_revision`;
generated (tiny:) and local models are skipped. An unpinned model is downloaded at the
hub's current main, with a warning. Where a repository has safetensors weights, the
other weight formats (and Meta's original/ checkpoints) are left out, as vLLM itself
loads them.

    python scripts/download_models.py --profile a100-qwen3-32b [--dry-run]

Exit 0: every model is in the cache; 2: bad input (the profile, named); 8: a download
failed (specperf.config.exits).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from specperf.config.exits import Exit  # noqa: E402 - after the path above
from specperf.config.profile import Profile, ProfileError, load_profile, on_hub  # noqa: E402

#: Weight formats vLLM does not load where safetensors exist (vllm's model loader).
OTHER_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack", "original/*")


@dataclass(frozen=True)
class Model:
    repo: str
    revision: str | None
    why: str


def _tokenizers(args: list[str]) -> list[str]:
    out = []
    for i, arg in enumerate(args):
        if arg == "--tokenizer" and i + 1 < len(args):
            out.append(args[i + 1])
        elif arg.startswith("--tokenizer="):
            out.append(arg.split("=", 1)[1])
    return out


def models_of(profile: Profile) -> list[Model]:
    """The hub models a run of ``profile`` loads, each once, in the profile's order."""
    found: list[Model] = [Model(profile.target, profile.revision, "target")]
    for c in profile.server_configs:
        draft = c.draft_model
        if draft is not None:
            found.append(Model(draft, c.draft_revision, f"draft of {c.id}"))
    for where, args in profile.serve_args_lists():
        found += [Model(t, profile.tokenizer_revision, f"--tokenizer in {where}")
                  for t in _tokenizers(args)]
    seen: set[tuple[str, str | None]] = set()
    out = []
    for m in found:
        if on_hub(m.repo) and (m.repo, m.revision) not in seen:
            seen.add((m.repo, m.revision))
            out.append(m)
    return out


def ignore_patterns(files: list[str]) -> list[str]:
    """What not to download of a repository with these files."""
    return list(OTHER_WEIGHTS) if any(f.endswith(".safetensors") for f in files) else []


def download(model: Model) -> str:
    from huggingface_hub import HfApi, snapshot_download

    files = HfApi().list_repo_files(model.repo, revision=model.revision)
    return str(snapshot_download(model.repo, revision=model.revision,
                                 ignore_patterns=ignore_patterns(files) or None))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--profile", required=True, help="profile name or path")
    ap.add_argument("--dry-run", action="store_true", help="list the models, download nothing")
    args = ap.parse_args(argv)
    try:
        profile = load_profile(args.profile, rootdir=ROOT)
    except ProfileError as exc:
        print(f"download_models: {exc}", file=sys.stderr)
        return int(Exit.BAD_INPUT)
    models = models_of(profile)
    if not models:
        print(f"download_models: profile {profile.name} loads no model from the hub")
    for m in models:
        pin = m.revision or "main (NOT pinned: set the profile's revision, docs/profiles.md)"
        print(f"download_models: {m.repo} at {pin} ({m.why})", flush=True)
        if args.dry_run:
            continue
        try:
            where = download(m)
        except Exception as exc:  # noqa: BLE001 - any hub failure is a failed download
            print(f"download_models: {m.repo}: download failed: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            return int(Exit.FETCH_FAILED)
        print(f"download_models: {m.repo} -> {where}", flush=True)
    return int(Exit.OK)


if __name__ == "__main__":
    sys.exit(main())
