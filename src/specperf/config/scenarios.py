"""Scenarios: workloads of a particular shape, run beside a profile's main matrix.

A profile's optional ``[scenarios]`` table holds one sub-table per scenario. Each scenario
measures the profile's server configs again on its own servers, with its own prompts,
and is asserted by its own test in ``perf_tests/`` (docs/scenarios.md). The main matrix
does not depend on them: they are left out of the profile hash, so adding a scenario keeps
a baseline comparable.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PREFIX_CACHE_ON", "PrefixCacheScenario", "Scenarios"]

#: The serve_args a prefix-cache scenario's servers get instead of the profile's
#: ``--no-enable-prefix-caching`` (a server config's own serve_args still come after them).
PREFIX_CACHE_ON = "--enable-prefix-caching"
PREFIX_CACHE_OFF = "--no-enable-prefix-caching"


class _Strict(BaseModel):
    # As config.profile's: unknown keys, nan and inf are errors (a nan tolerance turns a
    # gate off).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class PrefixCacheScenario(_Strict):
    """Prompts that share a long prefix (a system prompt and a few-shot block), served
    with vLLM's prefix caching on. Each spec config's prefix-cache hit rate must stay
    within ``hit_rate_tolerance`` of the no-spec config's on the same prompts, and its
    paired TPOT gain must hold (the config's ``gates.tpot_gain`` floor)."""

    seed: int = 0
    system_words: int = Field(160, ge=1, description="words of the shared system prompt "
                                                     "(roughly tokens)")
    few_shot_words: int = Field(96, ge=0, description="words of the shared few-shot block "
                                                      "after it")
    question_words: int = Field(16, ge=1, description="words of each prompt's own question "
                                                      "after the shared prefix")
    concurrency: int = Field(1, ge=1, description="the scenario's one concurrency")
    requests: int = Field(8, ge=1, le=10_000, description="measured requests per trial (each trial "
                                               "sends new questions after the same prefix)")
    repeats: int | None = Field(None, ge=1, description="trials per config (default: the "
                                                        "profile's repeats)")
    hit_rate_tolerance: float = Field(
        0.05, ge=0.0, le=1.0, description="a spec config's hit rate may differ from the "
                                          "no-spec config's by at most this (absolute)")

    @property
    def prefix_words(self) -> int:
        return self.system_words + self.few_shot_words


class Scenarios(_Strict):
    """The ``[scenarios]`` table: every sub-table is optional."""

    prefix_cache: PrefixCacheScenario | None = None

    @property
    def kinds(self) -> list[str]:
        """The scenario test kinds this table turns on, in run order."""
        return [name for name in type(self).model_fields if getattr(self, name) is not None]
