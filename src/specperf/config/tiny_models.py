"""The ``[tiny]`` table of a CPU profile: the locally generated models it describes.

The generator itself is :mod:`specperf.engine.tiny`; these specs import with pydantic
alone, so a profile validates without torch.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from specperf.config.strict import ProfileTable

#: How a profile names a model generated locally (``tiny:target``, ``tiny:<draft>``)
#: where a Hugging Face id or a path would go.
TINY_PREFIX = "tiny:"


class _Strict(ProfileTable):
    #: Keys added after profiles were baselined, with the default that means "as before".
    #: A key at that default is left out of the dump, which is both the profile hash and
    #: the models' cache key: existing profiles keep their hash, baselines and cached models.
    _LATER_KEYS: ClassVar[dict[str, Any]] = {}

    @model_serializer(mode="wrap")
    def _without_later_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for key, default in self._LATER_KEYS.items():
                if key in data and data[key] == default:
                    del data[key]
        return data


class TinyTargetSpec(_Strict):
    layers: int = Field(12, ge=1)
    hidden: int = Field(768, ge=16)
    intermediate: int = Field(2048, ge=16)
    heads: int = Field(12, ge=1)
    vocab_size: int = Field(4096, ge=256)
    max_position_embeddings: int = Field(2048, ge=64)
    deep_scale: float = Field(
        0.05, ge=0.0, description="scale of residual writes of layers past the first"
    )
    seed: int = 0
    shallow_layers: int = Field(
        1,
        ge=0,
        description="how many first layers keep full-size residual writes (not deep_scale'd)",
    )
    mtp_layers: int = Field(
        0,
        ge=0,
        description=(
            "multi-token-prediction layers saved with the target; above 0 the target is a MiMo"
            " model (Qwen2 layers with zero q/k/v biases: the same function as the Llama one),"
            " served with method 'mtp'"
        ),
    )
    dtype: Literal["bfloat16", "float32"] = Field(
        "bfloat16",
        description=(
            "dtype of the saved weights and config.json. vLLM's --dtype auto runs bf16 either way"
            " (it downcasts float32 configs); on AVX2-only CPUs serve with --dtype float32"
        ),
    )

    _LATER_KEYS: ClassVar[dict[str, Any]] = {"mtp_layers": 0}


class TinyDraftSpec(_Strict):
    kind: Literal["draft_model", "eagle", "eagle3"] = Field(
        "draft_model",
        description=(
            "draft_model: a small Llama cut from the target; eagle / eagle3: an EAGLE or"
            " EAGLE-3 head (method 'eagle' / 'eagle3') built from the target's first layer"
        ),
    )
    layers: int = Field(
        1, ge=1, description="how many of the target's first layers the draft copies"
    )
    noise: float = Field(
        0.0, ge=0.0, description="std of noise added to the copied weights (a weaker draft)"
    )
    tokenizer_seed: int | None = Field(
        None, description="train its own tokenizer with this seed (a vocabulary mismatch)"
    )
    idle_layers: int = Field(
        0, ge=0,
        description=(
            "layers appended after the copied ones that write nothing into the residual stream"
            " (o_proj and down_proj are zeros): the same draft, token for token, at a higher"
            " cost per step — a slower draft with identical acceptance"
        ),
    )

    max_position_embeddings: int | None = Field(
        None, ge=16,
        description=(
            "the draft's own max_position_embeddings (default: the target's); shorter than"
            " the prompts it drafts for, a draft_model draft is fed positions past its"
            " rotary table (vLLM does not stop it: docs/scenarios.md, context length)"
        ),
    )
    sliding_window: int | None = Field(
        None, ge=1,
        description=(
            "give every layer of the draft sliding-window attention over this many tokens"
            " (config layer_types + sliding_window): a draft that sees only the end of a long"
            " prompt"
        ),
    )

    _LATER_KEYS: ClassVar[dict[str, Any]] = {"kind": "draft_model", "idle_layers": 0,
                                             "max_position_embeddings": None,
                                             "sliding_window": None}

    @model_validator(mode="after")
    def _head_shape(self) -> TinyDraftSpec:
        if self.kind != "draft_model":
            if self.layers != 1:
                raise ValueError(
                    f"an {self.kind} head copies one layer of the target, its first — fix: "
                    "layers = 1")
            if self.idle_layers:
                raise ValueError(
                    f"an {self.kind} head has no idle layers — fix: remove idle_layers")
            if self.tokenizer_seed is not None:
                raise ValueError(
                    f"an {self.kind} head works on the target's vocabulary — fix: remove "
                    "tokenizer_seed")
            if self.max_position_embeddings is not None or self.sliding_window is not None:
                raise ValueError(
                    f"vLLM gives an {self.kind} head the target's positions — fix: remove "
                    "max_position_embeddings and sliding_window (draft_model drafts only)")
        return self


class TinyModelsSpec(_Strict):
    tokenizer_seed: int = 0
    target: TinyTargetSpec = TinyTargetSpec()
    drafts: dict[str, TinyDraftSpec] = {}
