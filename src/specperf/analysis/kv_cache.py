"""Whether a server's KV cache at its gpu_memory_utilization holds one max_model_len
sequence: on paper, from the models' config.json (pure; the files are read by
specperf.store.model_files).

vLLM sizes the KV cache as what is left of ``gpu_memory_utilization`` × the device after
the weights and the peak activations of its profiling run (vllm/v1/worker/gpu_worker.py,
determine_available_memory), and refuses to start when that cannot hold one sequence of
``max_model_len`` tokens ("… KV cache is needed, which is larger than the available KV
cache memory"). Per token and layer it stores a key and a value per KV head::

    bytes per token = 2 × num_layers × num_kv_heads × head_dim × dtype bytes

and a draft model (``method = "draft_model"``) keeps a cache of its own beside the
target's. EAGLE and MTP heads (a layer or two) are left out: small beside the target.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from specperf.analysis.device_memory import DeviceInventory, footprint, server_option
from specperf.config.profile import Profile
from specperf.config.server_configs import ServerConfig

__all__ = ["ACTIVATION_OVERHEAD_GIB", "KNOWN_CONFIGS", "ModelShape", "kv_warnings",
           "model_shape"]

GIB = 1 << 30
#: What vLLM's profiling run and CUDA graphs hold beside weights and KV cache: a stated
#: estimate (vLLM's "Available KV cache memory" log line is the real figure).
ACTIVATION_OVERHEAD_GIB = 2.0

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2,
                "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8_e4m3fn": 1}

#: The config.json fields that size them, for the shipped profiles' dense models, as their
#: Hugging Face config.json publish them: used when the hub cache here lacks the model
#: (the figure is then marked an estimate).
KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-32B": dict(hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                           num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                           vocab_size=151936, tie_word_embeddings=False,
                           torch_dtype="bfloat16", max_position_embeddings=40960),
    "Qwen/Qwen3-8B": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                          num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                          vocab_size=151936, tie_word_embeddings=False,
                          torch_dtype="bfloat16", max_position_embeddings=40960),
    "Qwen/Qwen3-1.7B": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                            num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                            vocab_size=151936, tie_word_embeddings=True,
                            torch_dtype="bfloat16", max_position_embeddings=40960),
    "Qwen/Qwen3-0.6B": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                            num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                            vocab_size=151936, tie_word_embeddings=True,
                            torch_dtype="bfloat16", max_position_embeddings=40960),
    "meta-llama/Llama-3.1-8B-Instruct": dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
        tie_word_embeddings=False, torch_dtype="bfloat16", max_position_embeddings=131072),
    "meta-llama/Llama-3.3-70B-Instruct": dict(
        hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
        num_attention_heads=64, num_key_value_heads=8, head_dim=128, vocab_size=128256,
        tie_word_embeddings=False, torch_dtype="bfloat16", max_position_embeddings=131072),
    "meta-llama/Llama-3.2-1B-Instruct": dict(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
        tie_word_embeddings=True, torch_dtype="bfloat16", max_position_embeddings=131072),
}


@dataclass(frozen=True)
class ModelShape:
    ref: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    weight_bytes: float
    max_position_embeddings: int | None
    #: Where the figures come from, and whether any is an estimate.
    source: str
    estimated: bool

    def kv_bytes_per_token(self, kv_dtype_bytes: int | None = None) -> int:
        return (2 * self.num_layers * self.num_kv_heads * self.head_dim
                * (kv_dtype_bytes or self.dtype_bytes))


def _dense_params(c: Mapping[str, Any], head_dim: int) -> float | None:
    """Parameters of a dense decoder from its config (attention, gated MLP, embeddings);
    None for a mixture of experts (their sizes vary too much to guess)."""
    if any(k in c for k in ("num_experts", "n_routed_experts", "num_local_experts")):
        return None
    try:
        h, inter, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
        heads, kvh, vocab = c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    except KeyError:
        return None
    attn = h * heads * head_dim * 2 + h * kvh * head_dim * 2
    per_layer = attn + 3 * h * inter
    emb = vocab * h * (1 if c.get("tie_word_embeddings") else 2)
    return float(layers * per_layer + emb)


def model_shape(ref: str, config: Mapping[str, Any] | None, weight_bytes: int | None
                ) -> ModelShape | None:
    """The figures that size a model's KV cache and weights: from its cached config.json
    (``config``; weights from its safetensors sizes, else from the config), else from
    :data:`KNOWN_CONFIGS` (an estimate); None when neither knows it."""
    estimated = config is None
    c = config if config is not None else KNOWN_CONFIGS.get(ref)
    if c is None:
        return None
    c = {**c, **(c.get("text_config") or {})}
    try:
        layers = int(c["num_hidden_layers"])
        heads = int(c["num_attention_heads"])
        kvh = int(c.get("num_key_value_heads") or heads)
        head_dim = int(c.get("head_dim") or c["hidden_size"] // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    dtype = _DTYPE_BYTES.get(str(c.get("torch_dtype") or c.get("dtype") or "bfloat16"), 2)
    source = "config.json in the hub cache" if config is not None else \
        "specperf's table of published config.json figures (not cached here)"
    if weight_bytes is not None:
        weights = float(weight_bytes)
        source += ", weights from its safetensors sizes"
    else:
        params = _dense_params(c, head_dim)
        if params is None:
            return None
        weights = params * dtype
        estimated = True
        source += ", weights estimated from its shape"
    mpe = c.get("max_position_embeddings")
    return ModelShape(ref, layers, kvh, head_dim, dtype, weights,
                      int(mpe) if isinstance(mpe, int) else None, source, estimated)


def _int(args: list[str], names: tuple[str, ...]) -> int | None:
    raw = server_option(args, names)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _kv_dtype_bytes(args: list[str]) -> int | None:
    raw = server_option(args, ("--kv-cache-dtype",))
    if raw is None or raw == "auto":
        return None
    return 1 if raw.startswith("fp8") else _DTYPE_BYTES.get(raw)


def kv_warnings(profile: Profile, inventory: DeviceInventory,
                shape_of: Callable[[str], ModelShape | None]) -> list[str]:
    """One warning per server config whose KV cache, at its gpu_memory_utilization, cannot
    hold one max_model_len sequence (and a note per model it could not size)."""
    out: list[str] = []
    target = shape_of(profile.target)
    if target is None:
        return [f"KV cache not checked: {profile.target}'s config.json is not cached here "
                "and specperf knows no figures for it"]
    for cfg in profile.server_configs:
        line = _kv_line(profile, cfg, inventory, target, shape_of)
        if line is not None:
            out.append(line)
    return out


def _kv_line(profile: Profile, cfg: ServerConfig, inventory: DeviceInventory,
             target: ModelShape, shape_of: Callable[[str], ModelShape | None]) -> str | None:
    args = [*profile.serve_args, *cfg.serve_args]
    fp = footprint(profile, cfg)
    tp = max(1, _int(args, ("--tensor-parallel-size", "-tp")) or 1)
    max_len = _int(args, ("--max-model-len",)) or target.max_position_embeddings
    if max_len is None:
        return None
    kv_bytes = _kv_dtype_bytes(args)
    per_token = target.kv_bytes_per_token(kv_bytes) / tp
    weights = target.weight_bytes / tp
    parts = [target]
    spec = cfg.speculative_config or {}
    draft_ref = cfg.draft_model
    if draft_ref is not None and spec.get("method") == "draft_model":
        draft = shape_of(draft_ref)
        if draft is None:
            return (f"{cfg.id}: KV cache not checked: the draft {draft_ref}'s config.json "
                    "is not cached here and specperf knows no figures for it")
        dtp = int(spec.get("draft_tensor_parallel_size") or tp)
        per_token += draft.kv_bytes_per_token(kv_bytes) / dtp
        weights += draft.weight_bytes / dtp
        parts.append(draft)
    budget = fp.utilization * inventory.memory_gib * GIB
    free = budget - weights - ACTIVATION_OVERHEAD_GIB * GIB
    need = max_len * per_token
    if free >= need:
        return None
    estimate = any(m.estimated for m in parts) or inventory.estimated
    return (f"{cfg.id}: at gpu_memory_utilization {fp.utilization:g} the KV cache gets "
            f"≈ {max(free, 0) / GIB:.1f} GiB ({fp.utilization:g} × {inventory.memory_gib:.1f} "
            f"GiB − {weights / GIB:.1f} GiB weights − ~{ACTIVATION_OVERHEAD_GIB:g} GiB "
            f"activations), below the {need / GIB:.2f} GiB one {max_len}-token sequence needs "
            f"({per_token / 1024:.0f} KiB/token); vLLM refuses to start it — fix: raise its "
            "--gpu-memory-utilization or lower --max-model-len"
            + (" (an estimate: " + "; ".join(dict.fromkeys(m.source for m in parts)) + ")"
               if estimate else ""))
