"""Prompts for a run: synthetic pseudo-text from a seed, or a ShareGPT-format file.

Prompts are fixed per profile (same seed, same order) so that runs compare like with
like; at temperature 0 the acceptance counters are then exactly repeatable.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from specperf.config.profile import Profile, ShareGPTWorkload, SyntheticWorkload
from specperf.engine.tiny import synthetic_text


class DatasetError(ValueError):
    pass


def synthetic_prompts(workload: SyntheticWorkload) -> list[str]:
    return [
        synthetic_text(workload.seed * 100_003 + i, workload.input_words)
        for i in range(workload.num_prompts)
    ]


def sharegpt_prompts(workload: ShareGPTWorkload, path: Path) -> list[str]:
    if not path.exists():
        raise DatasetError(
            f"{path}: ShareGPT dataset not found — set workload.path in the profile, "
            "SPECPERF_SHAREGPT, or --perf-dataset (datasets are never downloaded during a run)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: not a readable JSON file: {exc}") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of conversations, got {type(data).__name__}")
    prompts: list[str] = []
    for i, item in enumerate(data):
        conv = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(conv, list) or not conv:
            continue
        first = conv[0]
        if not isinstance(first, dict) or not isinstance(first.get("value"), str):
            raise DatasetError(f"{path}: item [{i}].conversations[0].value is not a string")
        text = first["value"].strip()
        if text and len(text) <= workload.max_input_chars:
            prompts.append(text)
    if not prompts:
        raise DatasetError(f"{path}: no usable conversations (need conversations[0].value)")
    rng = random.Random(workload.seed)
    rng.shuffle(prompts)
    return prompts[: workload.num_prompts]


def prompts_digest(prompts: list[str]) -> str:
    """A short hash of the prompts a run sends, in order. The profile hash covers the
    workload's settings, not the text: an edited or regenerated dataset file, another
    ``--perf-dataset`` or a change in how synthetic prompts are made would otherwise
    compare with a baseline that measured other prompts."""
    blob = json.dumps(prompts, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_prompts(profile: Profile, dataset_override: str | None = None) -> list[str]:
    w = profile.workload
    if isinstance(w, SyntheticWorkload):
        return synthetic_prompts(w)
    path = profile.dataset_path(dataset_override)
    if path is None:
        raise DatasetError(
            f"{profile.source}: field `workload.path` is not set — give the ShareGPT JSON path "
            "there, in SPECPERF_SHAREGPT, or with --perf-dataset"
        )
    if not path.exists():
        # Say where the path came from: a relative `workload.path` is resolved against the
        # profile's directory, not the working directory, which is easy to get wrong.
        if dataset_override:
            origin = "given by --perf-dataset or SPECPERF_SHAREGPT"
            fix = "point the option or the variable at the ShareGPT JSON file"
        else:
            origin = (f"field `workload.path` = {w.path!r} in {profile.source}, resolved "
                      "relative to that file's directory")
            fix = ("fix the path (relative to the profile file), or pass --perf-dataset / "
                   "set SPECPERF_SHAREGPT")
        raise DatasetError(
            f"{path}: ShareGPT dataset not found ({origin}) — {fix}; datasets are never "
            "downloaded during a run (`specperf fetch-sharegpt DIR` fetches ShareGPT)"
        )
    return sharegpt_prompts(w, path)
