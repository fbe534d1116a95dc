"""Which dataset prompts fit the served context: a prompt whose tokens plus the profile's
``max_tokens`` exceed a matrix server's ``max_model_len`` is left out of the selection.

vLLM (0.32, ``entrypoints/serve/utils/api_utils.get_max_tokens`` and
``renderers/params``) refuses a prompt longer than ``max_model_len`` and cuts
``max_tokens`` down to what is left of the context for a shorter one: either the case
fails a request (its error budget is 0) or the request yields fewer tokens than every
other, so a prompt fits only when ``prompt tokens + max_tokens <= max_model_len``.
Characters (``max_input_chars``) do not bound tokens across scripts: 8000 characters of
English are some 2000 tokens; of Chinese about one per character with a tokenizer that
has CJK tokens, up to three (one per UTF-8 byte) with one that has not; code and
whitespace runs vary as much.

Per matrix server config (the profile's serve_args, then the config's, the last option
winning as in argparse):

* ``max_model_len``: its ``--max-model-len``; else what the target's ``config.json``
  says (the smallest of vLLM's length keys, and the tokenizer's ``model_max_length``:
  ``transformers_utils/model_arch_config_convertor.derive_max_model_len_and_key``;
  RoPE scaling, which only lengthens it, is not applied: a stricter limit), from the
  local hub cache or a generated model's spec; never downloaded.
* the tokenizer: its ``--tokenizer`` (at main), else the target's (at the profile's
  ``revision``), loaded by ``transformers.AutoTokenizer`` from local files only — the
  hub cache, a model directory, or the generated tiny models (built on first need);
  counted with special tokens, as ``/v1/completions`` sends a prompt.

Tokens are counted only where bytes cannot settle it: every token of a byte-level BPE or
SentencePiece tokenizer covers at least one byte of the text, so a prompt of
``b`` UTF-8 bytes has at most ``b`` tokens plus the few the tokenizer adds
(:data:`ADDED_TOKENS_BOUND`). Where no limit or no tokenizer is found offline, prompts are
selected by characters as before, and the run says why.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specperf.config.profile import Profile
from specperf.config.tiny_models import TINY_PREFIX
from specperf.store.hf_cache import cached_config, hub_cache_dir, snapshot_dir, tokenizer_args

__all__ = ["ADDED_TOKENS_BOUND", "ContextLimit", "PromptFit", "max_model_len_arg",
           "prompt_fit"]

#: Tokens a tokenizer adds to a prompt beyond the text's own (BOS, a SentencePiece
#: prefix space, a template's markers): a bound, for the byte shortcut only.
ADDED_TOKENS_BOUND = 8

#: vLLM's keys for a model's context length in config.json (derive_max_model_len_and_key).
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
               "model_max_length", "max_target_positions", "max_sequence_length",
               "max_seq_length", "seq_len")

_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


class TokenizerUnavailable(Exception):
    """A tokenizer that cannot be loaded from local files; the message says why."""


def max_model_len_arg(args: Sequence[str]) -> int | None:
    """The last ``--max-model-len`` of a list of serve_args, parsed as vLLM parses it
    (``vllm.utils.argparse_utils.human_readable_int_or_auto``: ``8192``, ``8k`` = 8000,
    ``8K`` = 8192); None when absent, ``-1``/``auto`` (vLLM fits it to memory) or
    unparseable (vLLM will refuse it)."""
    value = None
    for i, arg in enumerate(args):
        name, eq, rest = arg.partition("=")
        if name.replace("_", "-") == "--max-model-len":
            value = rest if eq else (args[i + 1] if i + 1 < len(args) else None)
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    m = _HUMAN_INT.fullmatch(value)
    if m is None:
        return None
    number, suffix = m.groups()
    if suffix.islower():
        return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
    if "." in number:
        return None
    return int(number) * 2 ** (10 * "KMGT".index(suffix) + 10)


def _config_length(config: dict[str, object] | None) -> int | None:
    if config is None:
        return None
    # A multimodal model keeps its language model's keys under text_config.
    text = config.get("text_config")
    where = text if isinstance(text, dict) else config
    found = [v for k in LENGTH_KEYS if isinstance(v := where.get(k), int) and v > 0]
    return min(found) if found else None


@dataclass(frozen=True)
class ContextLimit:
    """One matrix server's context: its max_model_len, where that came from, and the
    tokenizer (a path or hub id, at a revision) its prompts are counted with."""

    max_model_len: int
    source: str
    tokenizer: str
    revision: str | None
    config_ids: tuple[str, ...]


@dataclass
class PromptFit:
    """The limits a profile's prompts must fit, with the tokenizers to count them by
    (loaded on first need). :meth:`select` is the selection."""

    limits: list[ContextLimit]
    max_tokens: int
    #: Turns a limit's tokenizer reference into something AutoTokenizer loads (the
    #: generated tiny models' directory), raising TokenizerUnavailable.
    resolve: Callable[[str], str]
    hub_cache: Path | None = None
    counters: dict[tuple[str, str | None], Callable[[str], int]] = field(default_factory=dict)
    #: Set by :meth:`select`: what was left out, and why counting was given up, if it was.
    left_out: list[tuple[str, int, ContextLimit]] = field(default_factory=list)
    unavailable: str | None = None

    def _counter(self, limit: ContextLimit) -> Callable[[str], int]:
        key = (limit.tokenizer, limit.revision)
        if key not in self.counters:
            self.counters[key] = _load_counter(self.resolve(limit.tokenizer), limit.revision,
                                               self.hub_cache)
        return self.counters[key]

    def too_long(self, text: str) -> tuple[int, ContextLimit] | None:
        """(tokens, limit) of the first limit ``text`` exceeds, or None when it fits."""
        nbytes = len(text.encode("utf-8"))
        for limit in self.limits:
            room = limit.max_model_len - self.max_tokens
            if nbytes + ADDED_TOKENS_BOUND <= room:
                continue
            tokens = self._counter(limit)(text)
            if tokens > room:
                return tokens, limit
        return None

    def select(self, candidates: Sequence[str], n: int) -> list[str]:
        """The first ``n`` of ``candidates`` (in their order) that fit: the same list as
        ``candidates[:n]`` when none of those is too long. Where a tokenizer cannot be
        loaded the rest are taken by characters (:attr:`unavailable` says why)."""
        out: list[str] = []
        for i, text in enumerate(candidates):
            if len(out) == n:
                break
            try:
                over = self.too_long(text)
            except TokenizerUnavailable as exc:
                self.unavailable = str(exc)
                return out + list(candidates[i:i + n - len(out)])
            if over is None:
                out.append(text)
            else:
                self.left_out.append((text, *over))
        return out

    def report(self) -> str | None:
        """One line on what :meth:`select` left out or could not check, if anything."""
        if self.unavailable is not None:
            return (f"prompts selected by characters only, not by tokens: {self.unavailable}"
                    " — a prompt longer than the context will fail its request")
        if not self.left_out:
            return None
        tokens, limit = max(((t, lim) for _, t, lim in self.left_out), key=lambda x: x[0])
        return (f"{len(self.left_out)} dataset prompt(s) left out: their tokens + max_tokens "
                f"{self.max_tokens} exceed max_model_len {limit.max_model_len} ({limit.source};"
                f" the longest {tokens} tokens by {limit.tokenizer}'s tokenizer); the next "
                "ones in the seeded order are taken instead")


def _load_counter(ref: str, revision: str | None,
                  hub_cache: Path | None) -> Callable[[str], int]:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise TokenizerUnavailable(f"{ref}: transformers is not installed") from None
    try:
        tok = AutoTokenizer.from_pretrained(
            ref, revision=revision, local_files_only=True,
            cache_dir=str(hub_cache) if hub_cache else None)
    except Exception as exc:  # noqa: BLE001 - any loader failure means "not offline"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TokenizerUnavailable(f"no tokenizer of {ref} in local files ({first})") from None

    def count(text: str) -> int:
        # verbose=False: transformers warns of every text longer than model_max_length,
        # which is what is being found out here.
        return len(tok(text, add_special_tokens=True, verbose=False)["input_ids"])
    return count


def prompt_fit(profile: Profile, models_cache: Path | None,
               hub_cache: Path | None = None) -> tuple[PromptFit | None, str | None]:
    """The limits the matrix's prompts must fit, or (None, why not) when some config's
    max_model_len cannot be found offline. ``models_cache``: where the generated tiny
    models are (or get) built; None: a tiny tokenizer is not available."""
    cache = hub_cache if hub_cache is not None else hub_cache_dir(os.environ)
    groups: dict[tuple[int, str, str, str | None], list[str]] = {}
    for cfg in profile.server_configs:
        args = [*profile.serve_args, *cfg.serve_args]
        toks = tokenizer_args(args)
        tokenizer = toks[-1] if toks else profile.target
        revision = None if toks else profile.revision
        length = max_model_len_arg(args)
        source = ("--max-model-len in the profile's serve_args"
                  if max_model_len_arg(cfg.serve_args) is None
                  else f"--max-model-len in {cfg.id}'s serve_args")
        if length is None:
            length, source = _derived_length(profile, cache)
            if length is None:
                return None, (f"prompts selected by characters only, not by tokens: server "
                              f"config {cfg.id!r} has no --max-model-len and {source}")
        groups.setdefault((length, source, tokenizer, revision), []).append(cfg.id)
    limits = [ContextLimit(length, source, tok, rev, tuple(ids))
              for (length, source, tok, rev), ids in groups.items()]

    def resolve(ref: str) -> str:
        if not ref.startswith(TINY_PREFIX):
            return ref
        if profile.tiny is None or models_cache is None:
            raise TokenizerUnavailable(f"{ref}: no generated models here (no models cache)")
        from specperf.engine.tiny import materialise

        try:
            paths = materialise(profile.tiny, models_cache)
        except Exception as exc:  # noqa: BLE001 - torch missing, a build failure
            raise TokenizerUnavailable(f"{ref}: cannot build the generated models "
                                       f"({type(exc).__name__}: {exc})") from None
        name = ref[len(TINY_PREFIX):]
        if name not in paths:
            raise TokenizerUnavailable(f"{ref}: no such generated model")
        return str(paths[name])

    return PromptFit(limits, profile.sampling.max_tokens, resolve, cache), None


def _derived_length(profile: Profile, cache: Path | None) -> tuple[int | None, str]:
    """The target's max_model_len as vLLM derives it without --max-model-len, and where
    it came from (or why it could not be found)."""
    target = profile.target
    if target.startswith(TINY_PREFIX):
        if profile.tiny is None:
            return None, f"{target} has no [tiny] table"
        return (profile.tiny.target.max_position_embeddings,
                f"{target}'s max_position_embeddings")
    config = cached_config(target, profile.revision, cache)
    length = _config_length(config)
    if length is None:
        return None, (f"{target}'s config.json is not in local files (its context length "
                      "is unknown: run scripts/download_models.py, or set --max-model-len)")
    where = Path(target).expanduser()
    snap = where if where.is_dir() else snapshot_dir(target, profile.revision, cache)
    tok_length = None
    if snap is not None:
        tok_length = _config_length(_read_json(snap / "tokenizer_config.json"))
    if tok_length is not None and tok_length < length:
        return tok_length, f"{target}'s tokenizer_config.json model_max_length"
    return length, f"{target}'s config.json"


def _read_json(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
