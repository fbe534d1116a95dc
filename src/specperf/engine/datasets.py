"""Prompts for a run: synthetic pseudo-text from a seed, or a ShareGPT-format file; and
the category-tagged prompts of the categories scenario (JSON Lines, Spec-Bench's shape).

Prompts are fixed per profile (same seed, same order) so that runs compare like with
like; at temperature 0 the acceptance counters are then exactly repeatable.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specperf.config.profile import Profile
from specperf.config.workload import ShareGPTWorkload, SyntheticWorkload
from specperf.engine.prompt_fit import PromptFit, prompt_fit
from specperf.engine.tiny import synthetic_text


class DatasetError(ValueError):
    pass


def synthetic_prompts(workload: SyntheticWorkload) -> list[str]:
    return [
        synthetic_text(workload.seed * 100_003 + i, workload.input_words)
        for i in range(workload.num_prompts)
    ]


def sharegpt_prompts(workload: ShareGPTWorkload, path: Path,
                     fit: PromptFit | None = None) -> list[str]:
    """The workload's prompts of a ShareGPT-format file: the first human turns of at most
    ``max_input_chars``, shuffled by the seed, the first ``num_prompts`` of them — with
    ``fit``, the first ``num_prompts`` that fit the served context by tokens
    (:meth:`PromptFit.select`: the same prompts where none of them was too long)."""
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
    if fit is not None:
        return fit.select(prompts, workload.num_prompts)
    return prompts[: workload.num_prompts]


def prompts_digest(prompts: list[str]) -> str:
    """A short hash of the prompts a run sends, in order. The profile hash covers the
    workload's settings, not the text: an edited or regenerated dataset file, another
    ``--perf-dataset`` or a change in how synthetic prompts are made would otherwise
    compare with a baseline that measured other prompts."""
    blob = json.dumps(prompts, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_prompts(profile: Profile, dataset_override: str | None = None, *,
                 models_cache: Path | None = None,
                 say: Callable[[str], None] | None = None) -> list[str]:
    """The run's prompts. A ShareGPT workload's are selected so that each prompt's tokens
    plus ``max_tokens`` fit every matrix server's max_model_len
    (:mod:`specperf.engine.prompt_fit`; ``models_cache``: where the generated tiny models
    are, for their tokenizer); ``say`` hears what was left out, or why tokens could not be
    counted (prompts are then selected by characters)."""
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
    fit, why = prompt_fit(profile, models_cache)
    prompts = sharegpt_prompts(w, path, fit)
    line = why if fit is None else fit.report()
    if line and say is not None:
        say(f"specperf: {line}")
    return prompts


# --- category-tagged prompts ([scenarios.categories]) ---------------------------------


class CategoryItem(BaseModel):
    """One line of a category-tagged JSONL file: Spec-Bench's question.jsonl shape
    (``{"question_id": …, "category": …, "turns": [first prompt, …]}``) or a plain
    ``{"category": …, "prompt": …}``. Other keys (question_id, reference, …) are ignored."""

    model_config = ConfigDict(extra="ignore")

    category: str = Field(min_length=1)
    turns: list[str] | None = Field(None, min_length=1)
    prompt: str | None = None

    @model_validator(mode="after")
    def _one_prompt(self) -> CategoryItem:
        if (self.turns is None) == (self.prompt is None):
            raise ValueError("give the prompt as `turns` (a list, its first turn is sent) or "
                             "as `prompt`, exactly one of them")
        if not self.text.strip():
            raise ValueError("the prompt is empty")
        return self

    @property
    def text(self) -> str:
        return self.turns[0] if self.turns is not None else (self.prompt or "")


def category_prompts(path: Path) -> dict[str, list[str]]:
    """The file's prompts per category, categories in order of first appearance, prompts
    in file order; raises DatasetError naming the line and the field."""
    if not path.is_file():
        raise DatasetError(
            f"{path}: category dataset not found — check `scenarios.categories.dataset` "
            "(relative to the profile's directory); datasets are never downloaded during a "
            "run (`specperf fetch-specbench DIR` fetches Spec-Bench's question.jsonl)")
    out: dict[str, list[str]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not a readable UTF-8 text file: {exc}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = CategoryItem.model_validate_json(line)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "the line"
            raise DatasetError(f"{path}:{n}: field `{where}`: {err['msg']} — each line must be "
                               'a JSON object like {"category": "qa", "turns": ["…"]}') from None
        out.setdefault(item.category, []).append(item.text.strip())
    if not out:
        raise DatasetError(f"{path}: no prompts (expected JSON Lines with a category and turns "
                           "or prompt)")
    return out
