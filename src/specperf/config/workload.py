"""The prompts a profile sends and how it samples: its [workload] and [sampling] tables."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from specperf.config.strict import ProfileTable


class SyntheticWorkload(ProfileTable):
    """Prompts of pseudo-words generated from a seed: no dataset, same text everywhere."""

    kind: Literal["synthetic"] = "synthetic"
    seed: int = 0
    num_prompts: int = Field(32, ge=1)
    input_words: int = Field(32, ge=1, description="words per prompt (roughly tokens)")


class ShareGPTWorkload(ProfileTable):
    """ShareGPT-format JSON: a list of {"conversations": [{"from": "human", "value": ...}, ...]}."""

    kind: Literal["sharegpt"] = "sharegpt"
    path: str | None = Field(
        None, description="relative to the profile file; SPECPERF_SHAREGPT or --perf-dataset override"
    )
    seed: int = 0
    num_prompts: int = Field(1000, ge=1)
    max_input_chars: int = Field(8000, ge=1)


Workload = Annotated[SyntheticWorkload | ShareGPTWorkload, Field(discriminator="kind")]


class Sampling(ProfileTable):
    """Always sent explicitly: server and benchmark defaults change between vLLM versions."""

    temperature: float = Field(0.0, ge=0.0)
    seed: int = 0
    max_tokens: int = Field(64, ge=2)
    ignore_eos: bool = Field(True, description="fixed output lengths make runs comparable")

