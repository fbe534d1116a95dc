"""Vocabulary preflight: refuse a draft whose tokenizer does not match the target's.

A draft model proposes token *ids*; the target verifies those ids. When the two
tokenizers map text to ids differently, a proposed id means something else to the
target and is almost never accepted: the server starts (a minute or more), the case
runs, and acceptance reads near zero with nothing saying why. This check loads both
tokenizers offline, in well under a second for a local model directory, and compares
the token → id maps before any server is started.

Loading order, all offline (no network is ever touched):

1. a local directory with ``tokenizer.json`` → :mod:`tokenizers` (fast, no transformers);
2. a hub id whose ``tokenizer.json`` is in the local Hugging Face cache → the same;
3. otherwise ``transformers.AutoTokenizer.from_pretrained(ref, local_files_only=True)``
   (slow tokenizers, sentencepiece-only repositories).

If neither tokenizer can be loaded offline the report has ``ok=None`` and a reason: the
check does not block, vLLM decides. The heavy libraries are imported lazily.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specperf.store.hf_cache import hub_cache_dir

__all__ = [
    "DEFAULT_MIN_OVERLAP",
    "VocabReport",
    "check_vocabularies",
    "hub_cache_dir",
    "load_vocab",
    "preflight_spec",
    "wants_vocab_check",
]

#: Fraction of the target vocabulary that must map to the same id in the draft.
#: Identical tokenizers give 1.0; a handful of extra special tokens still passes.
DEFAULT_MIN_OVERLAP = 0.99

#: Methods whose draft is a separate model with its own tokenizer. EAGLE/Medusa/MTP heads
#: work on the target's own vocabulary; ngram/suffix have no model at all.
DRAFT_MODEL_METHODS = frozenset({"draft_model"})
NO_TOKENIZER_METHODS = frozenset(
    {"ngram", "suffix", "eagle", "eagle3", "medusa", "mlp_speculator", "mtp", "deepseek_mtp"}
)


class VocabUnavailable(Exception):
    """A tokenizer that cannot be loaded offline; the message says why."""


class VocabReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str
    draft: str
    ok: bool | None = Field(
        description="True: vocabularies match; False: mismatch, refuse; None: not checked"
    )
    reason: str | None = Field(None, description="why the check could not be made (ok=None)")
    target_size: int | None = None
    draft_size: int | None = None
    shared_same_id: int | None = Field(None, description="tokens present in both with the same id")
    shared_strings: int | None = Field(None, description="tokens present in both, any id")
    overlap: float | None = Field(None, description="shared_same_id / target_size")
    min_overlap: float = DEFAULT_MIN_OVERLAP
    acceptance: float | None = Field(
        None, description="acceptance with a matching draft, if known (e.g. from a baseline)"
    )
    acceptance_estimate: float | None = Field(
        None, description="rough: acceptance × overlap (None when acceptance is unknown)"
    )
    examples: list[str] = Field(
        default_factory=list, description="a few target tokens the draft maps differently"
    )
    target_source: str | None = None
    draft_source: str | None = None
    seconds: float = 0.0
    message: str = ""


# --------------------------------------------------------------------------- loading


def _vocab_from_tokenizer_json(path: Path) -> dict[str, int]:
    from tokenizers import Tokenizer

    try:
        return dict(Tokenizer.from_file(str(path)).get_vocab(with_added_tokens=True))
    except Exception as exc:  # noqa: BLE001 - a corrupt file is "unavailable", not a crash
        raise VocabUnavailable(f"cannot read {path}: {exc}") from None


def _hub_cached_tokenizer_json(ref: str, cache_dir: Path | None) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - comes with transformers
        return None
    try:
        found = try_to_load_from_cache(
            ref, "tokenizer.json", cache_dir=str(cache_dir) if cache_dir else None
        )
    except Exception:  # noqa: BLE001 - not a valid repo id, unreadable cache, ...
        return None
    return Path(found) if isinstance(found, str) else None


def _hub_repo_cached(ref: str, cache_dir: Path | None) -> bool | None:
    """Whether anything of hub repo ``ref`` is in the local cache (None: cannot tell)."""
    cache = cache_dir or hub_cache_dir()
    if cache is None or ref.count("/") > 1 or not ref.strip("/"):
        return None
    folder = "models--" + ref.strip("/").replace("/", "--")
    return (cache / folder).is_dir()


def load_vocab(ref: str, cache_dir: Path | None = None) -> tuple[dict[str, int], str]:
    """The token → id map of ``ref`` (a directory or hub id), offline; and where it came from.

    ``cache_dir`` is the Hugging Face hub cache to look in (default: this process's).

    Raises :class:`VocabUnavailable` when it cannot be loaded without the network.
    """
    path = Path(ref).expanduser()
    if path.is_file() and path.name.endswith(".json"):
        return _vocab_from_tokenizer_json(path), str(path)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        tj = path / "tokenizer.json"
        return _vocab_from_tokenizer_json(tj), str(tj)
    if not path.exists():
        if _hub_repo_cached(ref, cache_dir) is False:
            # Nothing to load offline: say so now rather than import transformers (seconds)
            # only to hear the same.
            raise VocabUnavailable(
                f"{ref}: not a local directory and not in the local Hugging Face cache"
            )
        cached = _hub_cached_tokenizer_json(ref, cache_dir)
        if cached is not None:
            return _vocab_from_tokenizer_json(cached), f"{cached} (local HF cache)"
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise VocabUnavailable(
            f"{ref}: no tokenizer.json found locally and transformers is not installed"
        ) from None
    try:
        tok = AutoTokenizer.from_pretrained(
            ref, local_files_only=True, cache_dir=str(cache_dir) if cache_dir else None
        )
        vocab = dict(tok.get_vocab())
    except Exception as exc:  # noqa: BLE001 - any loader failure means "not offline"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise VocabUnavailable(f"{ref}: no tokenizer available offline ({first})") from None
    if not vocab:
        raise VocabUnavailable(f"{ref}: the tokenizer has an empty vocabulary")
    return vocab, f"{ref} (transformers, local files only)"


# --------------------------------------------------------------------------- comparing


def _compare(
    target: Mapping[str, int], draft: Mapping[str, int]
) -> tuple[int, int, list[str]]:
    same = 0
    strings = 0
    examples: list[str] = []
    for tok, tid in sorted(target.items(), key=lambda kv: kv[1]):
        did = draft.get(tok)
        if did is None:
            continue
        strings += 1
        if did == tid:
            same += 1
        elif len(examples) < 5:
            examples.append(f"{tok!r}: target id {tid}, draft id {did}")
    if len(examples) < 5:
        for tok, tid in sorted(target.items(), key=lambda kv: kv[1]):
            if tok not in draft:
                examples.append(f"{tok!r}: target id {tid}, not in the draft")
                if len(examples) >= 5:
                    break
    return same, strings, examples


def _message(r: VocabReport) -> str:
    pair = f"target {r.target!r} and draft {r.draft!r}"
    if r.ok is None:
        return f"vocabulary preflight skipped for {pair}: {r.reason}; vLLM will decide"
    assert r.overlap is not None and r.target_size is not None and r.draft_size is not None
    sizes = f"{r.target_size} vs {r.draft_size} tokens"
    overlap = (
        f"{r.shared_same_id} tokens with the same id = {r.overlap * 100:.1f} % of the target "
        f"vocabulary"
    )
    if r.ok:
        return (
            f"vocabulary preflight passed for {pair} ({sizes}; {overlap}; "
            f"{r.seconds:.2f} s)"
        )
    if r.acceptance is not None and r.acceptance_estimate is not None:
        lost = (
            f"acceptance ≈ {r.acceptance:.2f} × {r.overlap:.2f} = {r.acceptance_estimate:.2f} "
            f"instead of {r.acceptance:.2f}"
        )
    else:
        lost = (
            f"acceptance ≈ {r.overlap:.2f} × what a draft with the target's tokenizer would get, "
            f"i.e. about {(1 - r.overlap) * 100:.0f} % of accepted tokens lost"
        )
    return (
        f"vocabulary mismatch: {pair} do not share a tokenizer ({sizes}; only {overlap}, "
        f"{r.shared_strings} share the token string; need ≥ {r.min_overlap * 100:.0f} %). "
        f"Rough model (a proposed id can only be accepted if it means the same token to both, "
        f"and every token is taken as equally likely): {lost}. "
        f"Refusing to start this config; use a draft trained with the target's tokenizer. "
        f"(checked in {r.seconds:.2f} s)"
    )


def check_vocabularies(
    target: str,
    draft: str,
    *,
    acceptance: float | None = None,
    min_overlap: float = DEFAULT_MIN_OVERLAP,
    cache_dir: Path | None = None,
) -> VocabReport:
    """Compare the tokenizers of ``target`` and ``draft`` (directories or hub ids), offline.

    ``ok`` is True when at least ``min_overlap`` of the target's tokens have the same id in
    the draft, False otherwise (refuse the config), None when a tokenizer cannot be loaded
    offline (``reason`` says which; do not block). ``acceptance``, if known (e.g. the
    baseline's rate for this config), turns the overlap into an acceptance estimate.
    """
    if not 0.0 <= min_overlap <= 1.0:
        raise ValueError(f"min_overlap must be in [0, 1], got {min_overlap!r}")
    t0 = time.monotonic()
    base: dict[str, Any] = {"target": target, "draft": draft, "min_overlap": min_overlap,
                            "acceptance": acceptance}
    vocabs: dict[str, tuple[dict[str, int], str]] = {}
    problems = []
    for role, ref in (("target", target), ("draft", draft)):
        try:
            vocabs[role] = load_vocab(ref, cache_dir)
        except VocabUnavailable as exc:
            problems.append(f"{role} tokenizer: {exc}")
    if problems:
        report = VocabReport(ok=None, reason="; ".join(problems),
                             seconds=time.monotonic() - t0, **base)
        report.message = _message(report)
        return report
    (tv, tsrc), (dv, dsrc) = vocabs["target"], vocabs["draft"]
    same, strings, examples = _compare(tv, dv)
    overlap = same / len(tv) if tv else 0.0
    report = VocabReport(
        ok=overlap >= min_overlap,
        target_size=len(tv),
        draft_size=len(dv),
        shared_same_id=same,
        shared_strings=strings,
        overlap=overlap,
        acceptance_estimate=None if acceptance is None else acceptance * overlap,
        examples=examples if overlap < 1.0 else [],
        target_source=tsrc,
        draft_source=dsrc,
        seconds=time.monotonic() - t0,
        **base,
    )
    report.message = _message(report)
    return report


# --------------------------------------------------------------------------- the hook


def wants_vocab_check(speculative_config: Mapping[str, Any] | None) -> bool:
    """True when the config names a separate draft model with its own tokenizer."""
    if not speculative_config or not isinstance(speculative_config.get("model"), str):
        return False
    method = speculative_config.get("method")
    if method is None:
        return True  # vLLM infers "draft_model" for a plain model name
    return str(method) in DRAFT_MODEL_METHODS or str(method) not in NO_TOKENIZER_METHODS


def _tokenizer_arg(serve_args: Sequence[str]) -> str | None:
    args = list(serve_args)
    for i, a in enumerate(args):
        if a == "--tokenizer" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--tokenizer="):
            return a.split("=", 1)[1]
    return None


def preflight_spec(
    target: str,
    speculative_config: Mapping[str, Any] | None,
    serve_args: Sequence[str] = (),
    *,
    acceptance: float | None = None,
    min_overlap: float = DEFAULT_MIN_OVERLAP,
    env: Mapping[str, str] | None = None,
) -> VocabReport | None:
    """The check for one server config, or None when it does not apply.

    ``target`` and ``speculative_config["model"]`` must already be resolved to what vLLM
    gets (directories for ``tiny:`` models); a ``--tokenizer`` in ``serve_args`` replaces the
    target's own tokenizer, as it does for vLLM. ``env`` is the server's environment, so a
    profile's ``HF_HOME``/``HF_HUB_CACHE`` is honoured (default: this process's).
    """
    if not wants_vocab_check(speculative_config):
        return None
    assert speculative_config is not None
    return check_vocabularies(
        _tokenizer_arg(serve_args) or target,
        str(speculative_config["model"]),
        acceptance=acceptance,
        min_overlap=min_overlap,
        cache_dir=hub_cache_dir(env) if env is not None else None,
    )
