"""A Hugging Face model's config.json and weight sizes, where the hub cache on this
machine has them (read only; nothing is downloaded): what ``specperf plan`` sizes a
server's KV cache from.

The cache layout is huggingface_hub's: ``<cache>/models--<org>--<name>/snapshots/<commit>/``
holding config.json and the ``*.safetensors`` files (symlinks to blobs), the cache being
found by huggingface_hub's rule (specperf.store.hf_cache.hub_cache_dir: one home for it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specperf.store.hf_cache import hub_cache_dir

__all__ = ["CachedModel", "cached_model", "hub_cache_dir"]


@dataclass(frozen=True)
class CachedModel:
    ref: str
    config: dict[str, Any]
    #: Bytes of the *.safetensors files of the snapshot (None: none cached).
    weight_bytes: int | None
    where: Path


def _snapshot(ref: str, cache: Path, revision: str | None) -> Path | None:
    local = Path(ref).expanduser()
    if local.is_dir():
        return local
    if ref.count("/") != 1:
        return None
    snaps = cache / f"models--{ref.replace('/', '--')}" / "snapshots"
    if revision is not None and (snaps / revision / "config.json").is_file():
        return snaps / revision
    try:
        found = sorted((p for p in snaps.iterdir() if (p / "config.json").is_file()),
                       key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return found[-1] if found else None


def cached_model(ref: str, cache: Path | None = None, revision: str | None = None
                 ) -> CachedModel | None:
    """The model's config.json (and weight bytes) from a local directory or the hub
    cache, or None when neither has it (or it does not parse)."""
    cache = cache or hub_cache_dir(os.environ)
    assert cache is not None  # given an environment, the rule always names a directory
    snap = _snapshot(ref, cache, revision)
    if snap is None:
        return None
    try:
        config = json.loads((snap / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    sizes = []
    for f in snap.glob("*.safetensors"):
        try:
            sizes.append(f.stat().st_size)
        except OSError:
            continue
    return CachedModel(ref, config, sum(sizes) if sizes else None, snap)
