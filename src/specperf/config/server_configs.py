"""One server of a profile's matrix: the [[server_configs]] table (its speculative
config, arguments, environment, gates) and whether it can get a pinned-acceptance twin."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from specperf.config.boundaries import (
    VARIABLE_LENGTH_METHODS,
    check_serve_args,
    check_slug,
    check_speculative_config,
)
from specperf.config.gates import Gates
from specperf.config.strict import ProfileTable


class ServerConfig(ProfileTable):
    id: str = Field(description="short, used in test ids and file names: lower-case letters, "
                                "digits, . _ -")
    speculative_config: dict[str, Any] | None = Field(
        None, description="passed to vLLM verbatim as --speculative-config; none = no-spec baseline"
    )
    label: str | None = Field(None, description="legend label in plots (default: id)")
    serve_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    gates: Gates | None = None
    pinned_acceptance: bool = Field(
        False, description="also measure this spec config on a second server whose rejection "
                           "sampler is vLLM's synthetic one, pinned to the baseline's "
                           "per-position acceptance rates, so a TPOT change splits into "
                           "acceptance and step cost (docs/attribution.md); needs a fixed k")

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        return check_slug(v, "id")

    @field_validator("serve_args")
    @classmethod
    def _serve_args(cls, v: list[str]) -> list[str]:
        return check_serve_args(v)

    @field_validator("speculative_config")
    @classmethod
    def _spec(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            check_speculative_config(v)
        return v

    @model_validator(mode="after")
    def _pinnable(self) -> ServerConfig:
        if self.pinned_acceptance:
            why = pinning_refusal(self.speculative_config)
            if why is not None:
                raise ValueError(f"pinned_acceptance = true: {why} — fix: set it only on a "
                                 "spec config with a fixed num_speculative_tokens and the "
                                 "standard rejection sampler, or remove it")
        return self

    @property
    def is_spec(self) -> bool:
        return self.speculative_config is not None

    @property
    def num_speculative_tokens(self) -> int | None:
        if self.speculative_config is None:
            return None
        k = self.speculative_config.get("num_speculative_tokens")
        return int(k) if k is not None else None

    @property
    def draft_model(self) -> str | None:
        if self.speculative_config is None:
            return None
        m = self.speculative_config.get("model")
        return str(m) if m is not None else None

    @property
    def draft_revision(self) -> str | None:
        """The draft model's pinned commit: its speculative_config's `revision`, if a string."""
        rev = (self.speculative_config or {}).get("revision")
        return rev if isinstance(rev, str) else None



def pinning_refusal(spec: dict[str, Any] | None) -> str | None:
    """Why a server config cannot get a pinned-acceptance twin, or None if it can.

    vLLM's synthetic sampler takes one unconditional rate per position, so it needs a fixed
    k; a config that already sets the sampler, or proposes a varying number of tokens
    (k per batch size), has no single baseline rate per position to pin to."""
    if spec is None:
        return "a no-spec config has no acceptance to pin"
    if not isinstance(spec.get("num_speculative_tokens"), int):
        return "the speculative_config has no num_speculative_tokens"
    if spec.get("method") in VARIABLE_LENGTH_METHODS:
        return (f"method {spec['method']!r} proposes a varying number of tokens, so no single "
                "rate per position exists")
    if "num_speculative_tokens_per_batch_size" in spec:
        return ("num_speculative_tokens_per_batch_size varies k, so no single rate per "
                "position exists")
    if spec.get("rejection_sample_method", "standard") != "standard":
        return (f"its rejection_sample_method is {spec['rejection_sample_method']!r}; the "
                "pinned twin replaces the standard sampler")
    return None
