"""Tiny Llama models generated locally, so the CPU profile needs no model hub.

Everything here is synthetic and deterministic:

* a pseudo-language of made-up words (:func:`synthetic_words`, :func:`synthetic_text`),
  drawn from a seeded RNG with a Zipf-like word frequency — no third-party text;
* a byte-level BPE tokenizer trained with the ``tokenizers`` library on that language,
  saved as a Hugging Face fast tokenizer (``tokenizer.json`` + ``tokenizer_config.json`` +
  ``special_tokens_map.json``) so vLLM loads it through ``AutoTokenizer``;
* a random-weight ``LlamaForCausalLM`` target whose layers past the first
  ``shallow_layers`` write only ``deep_scale`` of their usual amount into the residual
  stream, so a draft made of the target's first layer(s) agrees with it often;
* drafts that copy the target's embeddings, first layers, final norm and lm_head
  (optionally with Gaussian noise, for a weaker draft; optionally with a tokenizer
  trained from another seed, for a vocabulary mismatch);
* EAGLE and EAGLE-3 heads, and MTP layers saved with a MiMo-architecture target, made
  *by construction* from the target's first layer (:func:`_eagle_weights`,
  :func:`_eagle3_weights`, :func:`_mtp_weights`): each computes what the 1-layer draft
  computes, so it agrees with the target as often as that draft does, most at the first
  position and less at each later one. No training: nothing to tune, byte-identical output.

:func:`materialise` builds the models once per spec under ``cache_root/<spec hash>``,
atomically (temp dir + ``os.rename``) and under a lock file, so concurrent callers and
interrupted runs never see a half-written model.

torch, transformers, tokenizers and safetensors are imported lazily inside functions:
this module (its spec classes in particular) imports with pydantic alone.

Why one module past 600 lines: the tokenizer, the target and every kind of draft are
built from one another (a draft copies the target's layers, an EAGLE head is made from
its first layer), so they change together; each builder is one function.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import random
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specperf.config.tiny_models import TinyDraftSpec, TinyModelsSpec, TinyTargetSpec

#: Bumped whenever the generator's output for a given spec changes; part of the cache key.
GENERATOR_VERSION = 1

#: Special tokens, in id order: ids 0..3 in every generated tokenizer.
UNK_TOKEN, BOS_TOKEN, EOS_TOKEN, PAD_TOKEN = "<unk>", "<s>", "</s>", "<pad>"
SPECIAL_TOKENS = (UNK_TOKEN, BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)
UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 3

#: Standard deviation of the random weight init (embeddings, projections, lm_head).
INIT_STD = 0.02

_TARGET = "target"
_WEIGHTS = "model.safetensors"
_MANIFEST = "specperf-tiny.json"

# --------------------------------------------------------------------------------------
# The synthetic pseudo-language
# --------------------------------------------------------------------------------------

_ONSETS = (
    "b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
    "br", "dr", "gr", "kr", "pl", "st", "tr", "sk", "ch", "sh", "th",
)  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou", "ee")
_CODAS = ("", "", "", "", "n", "r", "s", "l", "m", "k", "nd", "st")

#: Size of each language's lexicon (distinct words).
LEXICON_SIZE = 6000


@functools.lru_cache(maxsize=8)
def _lexicon(language: int) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The words of a language (most frequent first) and their cumulative Zipf weights."""
    rng = random.Random(f"specperf-tiny-lexicon:{language}")
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < LEXICON_SIZE:
        rank = len(words)
        # frequent words are short, rare words long (1..4 syllables)
        max_syl = 1 + min(3, int(math.log10(rank + 2) * 1.2))
        n_syl = rng.randint(1, max_syl)
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(n_syl)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    cum: list[float] = []
    total = 0.0
    for rank in range(LEXICON_SIZE):
        total += 1.0 / (rank + 2.7) ** 1.07  # Zipf-Mandelbrot
        cum.append(total)
    return tuple(words), tuple(cum)


def synthetic_words(seed: int, n: int, *, language: int = 0) -> list[str]:
    """``n`` pseudo-words of a synthetic language, deterministic in ``(seed, language)``.

    ``language`` picks the lexicon (6000 made-up lowercase ASCII words such as ``"brado"``
    or ``"kesh"``, with Zipf-like frequencies); ``seed`` picks the word sequence.
    The tokenizer of a :class:`TinyModelsSpec` is trained on ``language=spec.tokenizer_seed``,
    so build prompts with that language to get text the tokenizer splits into few tokens.
    Uses its own ``random.Random``: never touches global RNG state.
    """
    words, cum = _lexicon(language)
    rng = random.Random(f"specperf-tiny-text:{language}:{seed}")
    return rng.choices(words, cum_weights=cum, k=n)


def synthetic_text(seed: int, n_words: int, *, language: int = 0) -> str:
    """``n_words`` pseudo-words (see :func:`synthetic_words`) as sentences.

    Words are separated by single spaces; sentences of 4-14 words end with ``"."``
    (attached to their last word). Deterministic in ``(seed, language)``; pure ASCII.
    """
    words = synthetic_words(seed, n_words, language=language)
    rng = random.Random(f"specperf-tiny-sentences:{language}:{seed}")
    out: list[str] = []
    left = rng.randint(4, 14)
    for i, word in enumerate(words):
        left -= 1
        if left == 0 or i == len(words) - 1:
            word += "."
            left = rng.randint(4, 14)
        out.append(word)
    return " ".join(out)


# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------

_CORPUS_WORDS = 120_000
_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def _corpus(language: int) -> Iterator[str]:
    text = synthetic_text(seed=language, n_words=_CORPUS_WORDS, language=language)
    # lines of ~1000 chars so the trainer sees many independent sequences
    start = 0
    while start < len(text):
        end = text.find(" ", start + 1000)
        end = len(text) if end < 0 else end
        yield text[start:end]
        start = end


def _train_tokenizer(language: int, vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(language), trainer=trainer)
    for token, want in zip(SPECIAL_TOKENS, (UNK_ID, BOS_ID, EOS_ID, PAD_ID), strict=True):
        got = tok.token_to_id(token)
        if got != want:  # pragma: no cover - tokenizers keeps special tokens first
            raise RuntimeError(f"special token {token!r} got id {got}, expected {want}")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
        special_tokens=[(BOS_TOKEN, BOS_ID)],
    )
    return tok


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _save_tokenizer(tok: Any, out: Path, model_max_length: int) -> None:
    tok.save(str(out / "tokenizer.json"), pretty=True)
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "unk_token": UNK_TOKEN,
            "pad_token": PAD_TOKEN,
            "add_bos_token": True,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": model_max_length,
            "chat_template": _CHAT_TEMPLATE,
        },
    )
    _write_json(
        out / "special_tokens_map.json",
        {
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "unk_token": UNK_TOKEN,
            "pad_token": PAD_TOKEN,
        },
    )


# --------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------

_LAYER_PARAMS = (
    ("input_layernorm.weight", "norm"),
    ("self_attn.q_proj.weight", "q"),
    ("self_attn.k_proj.weight", "k"),
    ("self_attn.v_proj.weight", "v"),
    ("self_attn.o_proj.weight", "o"),
    ("post_attention_layernorm.weight", "norm"),
    ("mlp.gate_proj.weight", "gate"),
    ("mlp.up_proj.weight", "up"),
    ("mlp.down_proj.weight", "down"),
)


def _shape(kind: str, t: TinyTargetSpec) -> tuple[int, ...]:
    h, i = t.hidden, t.intermediate
    return {
        "norm": (h,),
        "q": (h, h),
        "k": (h, h),
        "v": (h, h),
        "o": (h, h),
        "gate": (i, h),
        "up": (i, h),
        "down": (h, i),
    }[kind]


def _seed_int(*parts: object) -> int:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def _target_weights(t: TinyTargetSpec) -> dict[str, Any]:
    """Random target weights as a {name: tensor} state dict (in the storage dtype)."""
    import torch

    dtype = getattr(torch, t.dtype)
    gen = torch.Generator().manual_seed(_seed_int("specperf-tiny-target", t.seed))

    def normal(shape: tuple[int, ...], std: float) -> Any:
        return torch.empty(shape, dtype=torch.float32).normal_(0.0, std, generator=gen)

    sd: dict[str, Any] = {"model.embed_tokens.weight": normal((t.vocab_size, t.hidden), INIT_STD)}
    for layer in range(t.layers):
        for name, kind in _LAYER_PARAMS:
            shape = _shape(kind, t)
            if kind == "norm":
                w = torch.ones(shape, dtype=torch.float32)
            else:
                w = normal(shape, INIT_STD)
                if kind in ("o", "down") and layer >= t.shallow_layers:
                    w.mul_(t.deep_scale)
            sd[f"model.layers.{layer}.{name}"] = w
    sd["model.norm.weight"] = torch.ones((t.hidden,), dtype=torch.float32)
    sd["lm_head.weight"] = normal((t.vocab_size, t.hidden), INIT_STD)
    return {k: v.to(dtype).contiguous() for k, v in sd.items()}


def _draft_weights(
    target_sd: dict[str, Any], t: TinyTargetSpec, name: str, d: TinyDraftSpec
) -> dict[str, Any]:
    import torch

    keep = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    keep += [f"model.layers.{i}.{p}" for i in range(d.layers) for p, _ in _LAYER_PARAMS]
    sd = {k: target_sd[k].clone() for k in keep}
    if d.noise > 0:
        gen = torch.Generator().manual_seed(
            _seed_int("specperf-tiny-draft", t.seed, name, d.model_dump_json())
        )
        for k in keep:  # fixed order: deterministic
            w = sd[k]
            noise = torch.empty(w.shape, dtype=torch.float32).normal_(0.0, d.noise, generator=gen)
            sd[k] = (w.float() + noise).to(w.dtype).contiguous()
    for i in range(d.layers, d.layers + d.idle_layers):
        # An idle layer: the last copied layer's weights, but its attention and MLP outputs
        # are projected by zeros, so the residual stream passes through unchanged (exactly:
        # x + 0) while the layer still costs its full matmuls.
        src = d.layers - 1
        for p, kind in _LAYER_PARAMS:
            w = sd[f"model.layers.{src}.{p}"]
            sd[f"model.layers.{i}.{p}"] = (torch.zeros_like(w) if kind in ("o", "down")
                                           else w.clone())
    return sd


# --------------------------------------------------------------------------------------
# EAGLE / EAGLE-3 heads and MTP layers, by construction
#
# The target's logits are, up to the deep layers' small writes (deep_scale), those of its
# first layer: lm_head(norm(e + A(norm(e)) + M(...))) with e the token's embedding. Each
# head below is wired so that it computes that same first layer on the token it is fed,
# with its own KV cache over the earlier tokens, and ignores the hidden state vLLM hands it
# (those inputs are multiplied by zero weights, so vLLM still computes them at full cost).
# What differs from the 1-layer draft is only where each architecture has no RMSNorm and
# the scale factors below stand in for one.
# --------------------------------------------------------------------------------------

#: RMSNorm's epsilon in every generated config (rms_norm_eps).
RMS_EPS = 1e-5


def _rms_divisor(embed: Any) -> Any:
    """Per token: what RMSNorm divides its embedding by, sqrt(mean(e²) + eps)."""
    return (embed.float().pow(2).mean(dim=-1) + RMS_EPS).sqrt()


def _layer0(sd: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The first layer's weights of a draft state dict, renamed under ``prefix``."""
    return {f"{prefix}{p}": sd[f"model.layers.0.{p}"] for p, _ in _LAYER_PARAMS}


def _eagle_weights(sd: dict[str, Any], t: TinyTargetSpec) -> dict[str, Any]:
    """An EAGLE-1 head (vLLM's ``EagleLlamaForCausalLM``) from a 1-layer draft's weights.

    vLLM feeds ``fc([embed(token); target hidden])`` to a layer without input RMSNorm and
    applies the target's lm_head to the result without a final norm. ``fc = [I | 0]`` keeps
    the embedding (so the residual stream starts as the target's does) and drops the
    hidden state; q/k/v are scaled by the mean 1/RMS of the embeddings, standing in for the
    missing input norm (exact up to the spread of the rows' RMS, ~2.5 % at hidden 768).
    The missing final norm only scales the logits, which leaves greedy choices unchanged.
    """
    import torch

    h = t.hidden
    embed = sd["model.embed_tokens.weight"]
    scale = (1.0 / _rms_divisor(embed)).mean().item()
    out = {"embed_tokens.weight": embed}
    out["fc.weight"] = torch.cat([torch.eye(h), torch.zeros(h, h)], dim=1).to(embed.dtype)
    for name, w in _layer0(sd, "layers.0.").items():
        if name.endswith("input_layernorm.weight"):
            continue  # vLLM replaces the first layer's input norm by Identity
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            w = (w.float() * scale).to(w.dtype)
        out[name] = w
    return {k: v.contiguous() for k, v in out.items()}


#: Scale of the EAGLE-3 head's first-layer queries: each position then attends to itself
#: (score ~8·this against ~N(0, this²) for other tokens, per 64-wide head).
_SELF_ATTENTION_SCALE = 4.0


def _eagle3_weights(sd: dict[str, Any], t: TinyTargetSpec) -> dict[str, Any]:
    """A two-layer EAGLE-3 head (vLLM's ``Eagle3LlamaForCausalLM``) from a 1-layer draft.

    vLLM's first head layer takes ``[norm(embed); hidden_norm(h)]`` into q/k/v (2·hidden
    wide) and, with ``norm_before_residual``, starts the residual stream from
    ``hidden_norm(h)``; ``h`` is ``fc`` of three target layers' hidden states at the first
    step and the head's own output after. ``hidden_norm`` weights of zero cut ``h`` out of
    both. That layer then only puts the token's embedding into the residual stream: q = c·x,
    k = x make each position attend to itself, v = s·x (s the embeddings' mean RMS) is about
    the raw embedding, o is the identity and the MLP writes nothing. The second layer is the
    target's first, reading that stream exactly as the target does.
    """
    import torch

    h = t.hidden
    embed = sd["model.embed_tokens.weight"]
    dtype = embed.dtype
    rms = _rms_divisor(embed).mean().item()
    eye, zeros = torch.eye(h), torch.zeros(h, h)

    def embed_half(w: Any) -> Any:
        return torch.cat([w, zeros], dim=1).to(dtype)

    out = {
        "embed_tokens.weight": embed,
        "fc.weight": torch.zeros(h, 3 * h, dtype=dtype),
        "layers.0.hidden_norm.weight": torch.zeros(h, dtype=dtype),
        "layers.0.input_layernorm.weight": torch.ones(h, dtype=dtype),
        "layers.0.self_attn.q_proj.weight": embed_half(eye * _SELF_ATTENTION_SCALE),
        "layers.0.self_attn.k_proj.weight": embed_half(eye),
        "layers.0.self_attn.v_proj.weight": embed_half(eye * rms),
        "layers.0.self_attn.o_proj.weight": eye.to(dtype),
        "layers.0.post_attention_layernorm.weight": torch.ones(h, dtype=dtype),
        "layers.0.mlp.gate_proj.weight": torch.zeros(t.intermediate, h, dtype=dtype),
        "layers.0.mlp.up_proj.weight": torch.zeros(t.intermediate, h, dtype=dtype),
        "layers.0.mlp.down_proj.weight": torch.zeros(h, t.intermediate, dtype=dtype),
        # vLLM builds hidden_norm in every head layer; only the first one reads it
        "layers.1.hidden_norm.weight": torch.ones(h, dtype=dtype),
        "norm.weight": sd["model.norm.weight"],
        "lm_head.weight": sd["lm_head.weight"],
    }
    out.update(_layer0(sd, "layers.1."))
    return {k: v.contiguous() for k, v in out.items()}


def _mtp_weights(target_sd: dict[str, Any], t: TinyTargetSpec) -> dict[str, Any]:
    """MiMo MTP layers (vLLM's ``MiMoMTP``) built from the target's first layer.

    vLLM computes ``input_proj([hidden_norm(h); token_norm(embed)])``, one Qwen2 layer and a
    final norm, then the target's lm_head. ``input_proj = [0 | s·I]`` with ``s`` the mean
    RMS of the embeddings turns the normalised embedding back into (about) the raw one, so
    the layer's residual stream starts as the target's does; the target's hidden state is
    dropped.
    """
    import torch

    h = t.hidden
    embed = target_sd["model.embed_tokens.weight"]
    dtype = embed.dtype
    scale = _rms_divisor(embed).mean().item()
    out: dict[str, Any] = {}
    for i in range(t.mtp_layers):
        pre = f"model.mtp_layers.{i}."
        out[pre + "token_layernorm.weight"] = torch.ones(h, dtype=dtype)
        out[pre + "hidden_layernorm.weight"] = torch.ones(h, dtype=dtype)
        out[pre + "input_proj.weight"] = torch.cat(
            [torch.zeros(h, h), torch.eye(h) * scale], dim=1
        ).to(dtype)
        out[pre + "final_layernorm.weight"] = target_sd["model.norm.weight"]
        out.update(_layer0(target_sd, pre))
        for p in ("q", "k", "v"):
            out[f"{pre}self_attn.{p}_proj.bias"] = torch.zeros(h, dtype=dtype)
    return {k: v.clone().contiguous() for k, v in out.items()}


def _qwen2_biases(t: TinyTargetSpec, dtype: Any) -> dict[str, Any]:
    """Zero q/k/v biases: Qwen2 layers have them, and with zeros they are Llama layers."""
    import torch

    return {
        f"model.layers.{layer}.self_attn.{p}_proj.bias": torch.zeros(t.hidden, dtype=dtype)
        for layer in range(t.layers)
        for p in ("q", "k", "v")
    }


def _mimo_config(t: TinyTargetSpec) -> dict[str, Any]:
    """The target as vLLM's ``MiMoForCausalLM``: Qwen2 layers plus ``mtp_layers``."""
    config = _llama_config(t, t.layers)
    for llama_only in ("attention_bias", "mlp_bias", "pretraining_tp"):
        del config[llama_only]
    config.update({
        "architectures": ["MiMoForCausalLM"],
        "model_type": "qwen2",
        "num_nextn_predict_layers": t.mtp_layers,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": t.layers,
    })
    return config


def _eagle3_config(t: TinyTargetSpec) -> dict[str, Any]:
    config = _llama_config(t, 2)
    config.update({
        "norm_before_residual": True,
        "draft_vocab_size": t.vocab_size,
        "target_hidden_size": t.hidden,
    })
    return config


def _llama_config(t: TinyTargetSpec, layers: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": t.vocab_size,
        "hidden_size": t.hidden,
        "intermediate_size": t.intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": t.heads,
        "num_key_value_heads": t.heads,
        "head_dim": t.hidden // t.heads,
        "hidden_act": "silu",
        "max_position_embeddings": t.max_position_embeddings,
        "initializer_range": INIT_STD,
        "rms_norm_eps": RMS_EPS,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "dtype": t.dtype,
        "torch_dtype": t.dtype,
    }


def _draft_config(t: TinyTargetSpec, d: TinyDraftSpec) -> dict[str, Any]:
    """A draft_model draft's config: the target's shape, its own layer count, and the
    context limits the spec gives it (a shorter rotary table, a sliding window)."""
    config = _llama_config(t, d.layers + d.idle_layers)
    if d.max_position_embeddings is not None:
        config["max_position_embeddings"] = d.max_position_embeddings
    if d.sliding_window is not None:
        # vLLM's Llama reads a per-layer window from layer_types (models/llama.py).
        config["layer_types"] = ["sliding_attention"] * config["num_hidden_layers"]
        config["sliding_window"] = d.sliding_window
    return config


def _write_model(
    out: Path, sd: dict[str, Any], config: dict[str, Any], tok: Any, t: TinyTargetSpec
) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    save_file(sd, str(out / _WEIGHTS), metadata={"format": "pt"})
    os.chmod(out / _WEIGHTS, 0o644)  # safetensors creates it 0600; a cache may be shared
    _write_json(out / "config.json", config)
    _write_json(
        out / "generation_config.json",
        {
            "bos_token_id": BOS_ID,
            "eos_token_id": EOS_ID,
            "pad_token_id": PAD_ID,
            "do_sample": False,
        },
    )
    _save_tokenizer(tok, out, t.max_position_embeddings)


# --------------------------------------------------------------------------------------
# materialise: cache, atomic build, lock
# --------------------------------------------------------------------------------------


def spec_key(spec: TinyModelsSpec) -> str:
    """The cache key of a spec: a hash of its JSON and of :data:`GENERATOR_VERSION`."""
    blob = json.dumps(
        {"generator": GENERATOR_VERSION, "spec": spec.model_dump(mode="json")},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _check_names(spec: TinyModelsSpec) -> None:
    t = spec.target
    if t.hidden % t.heads:
        raise ValueError(f"hidden ({t.hidden}) must be a multiple of heads ({t.heads})")
    if (t.hidden // t.heads) % 2:
        raise ValueError("head_dim (hidden // heads) must be even for rotary embeddings")
    for name, d in spec.drafts.items():
        if name == _TARGET or not name or name.startswith(".") or any(c in name for c in "/\\:"):
            raise ValueError(f"bad draft name {name!r}")
        if d.layers > t.layers:
            raise ValueError(f"draft {name!r} copies {d.layers} layers; target has {t.layers}")


def _paths(root: Path, spec: TinyModelsSpec) -> dict[str, Path]:
    return {_TARGET: root / _TARGET, **{name: root / name for name in spec.drafts}}


def _build(spec: TinyModelsSpec, out: Path) -> None:
    t = spec.target
    target_tok = _train_tokenizer(spec.tokenizer_seed, t.vocab_size)
    target_sd = _target_weights(t)
    if t.mtp_layers:
        dtype = target_sd["model.embed_tokens.weight"].dtype
        mimo_sd = {**target_sd, **_qwen2_biases(t, dtype), **_mtp_weights(target_sd, t)}
        _write_model(out / _TARGET, mimo_sd, _mimo_config(t), target_tok, t)
    else:
        _write_model(out / _TARGET, target_sd, _llama_config(t, t.layers), target_tok, t)
    other_toks: dict[int, Any] = {}
    for name, d in sorted(spec.drafts.items()):
        tok = target_tok
        if d.tokenizer_seed is not None and d.tokenizer_seed != spec.tokenizer_seed:
            if d.tokenizer_seed not in other_toks:
                other_toks[d.tokenizer_seed] = _train_tokenizer(d.tokenizer_seed, t.vocab_size)
            tok = other_toks[d.tokenizer_seed]
        sd = _draft_weights(target_sd, t, name, d)
        if d.kind == "eagle":
            _write_model(out / name, _eagle_weights(sd, t), _llama_config(t, 1), tok, t)
        elif d.kind == "eagle3":
            _write_model(out / name, _eagle3_weights(sd, t), _eagle3_config(t), tok, t)
        else:
            _write_model(out / name, sd, _draft_config(t, d), tok, t)
    _write_json(
        out / _MANIFEST,
        {
            "generator": GENERATOR_VERSION,
            "key": spec_key(spec),
            "spec": spec.model_dump(mode="json"),
        },
    )


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[bool]:
    """An exclusive advisory lock (fcntl); yields False where fcntl does not exist."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: rely on the rename race alone
        yield False
        return
    with open(lock_path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def materialise(spec: TinyModelsSpec, cache_root: Path) -> dict[str, Path]:
    """Generate (or reuse from cache) the models; returns {"target": dir, <draft name>: dir}.

    The models live in ``cache_root/<spec_key(spec)>/{target,<draft name>}``. A cache
    directory only ever appears complete: it is built in a sibling temp dir and renamed
    into place. Concurrent callers serialise on ``cache_root/<key>.lock``; the second
    one finds the finished directory. A build killed midway leaves only a ``.tmp-*`` dir,
    which the next builder of the same key removes.
    """
    _check_names(spec)
    cache_root = Path(cache_root)
    key = spec_key(spec)
    final = cache_root / key
    if (final / _MANIFEST).is_file():
        return _paths(final, spec)
    cache_root.mkdir(parents=True, exist_ok=True)
    with _locked(cache_root / f"{key}.lock") as have_lock:
        if (final / _MANIFEST).is_file():
            return _paths(final, spec)
        if have_lock:  # we are the only builder of this key: leftovers are stale
            for stale in cache_root.glob(f".tmp-{key}-*"):
                shutil.rmtree(stale, ignore_errors=True)
        tmp = cache_root / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            _build(spec, tmp)
            try:
                os.rename(tmp, final)
            except OSError:
                # lost a race (no lock on this platform) or a manifest-less leftover
                if not (final / _MANIFEST).is_file():
                    shutil.rmtree(final, ignore_errors=True)
                    os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return _paths(final, spec)
