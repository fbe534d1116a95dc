"""The ``[tiny]`` table of a CPU profile: the locally generated models it describes.

The generator itself is :mod:`specperf.engine.tiny`; these specs import with pydantic
alone, so a profile validates without torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


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
    dtype: Literal["bfloat16", "float32"] = Field(
        "bfloat16",
        description=(
            "dtype of the saved weights and config.json. vLLM's --dtype auto runs bf16 either way"
            " (it downcasts float32 configs); on AVX2-only CPUs serve with --dtype float32"
        ),
    )


class TinyDraftSpec(_Strict):
    layers: int = Field(
        1, ge=1, description="how many of the target's first layers the draft copies"
    )
    noise: float = Field(
        0.0, ge=0.0, description="std of noise added to the copied weights (a weaker draft)"
    )
    tokenizer_seed: int | None = Field(
        None, description="train its own tokenizer with this seed (a vocabulary mismatch)"
    )


class TinyModelsSpec(_Strict):
    tokenizer_seed: int = 0
    target: TinyTargetSpec = TinyTargetSpec()
    drafts: dict[str, TinyDraftSpec] = {}
