"""What the metrics scrape records: the spec-decode and prefix-cache counters of a server,
and a case's acceptance figures (their deltas)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from specperf.schemas.base import RATE_SLACK, Count, NonNegative, StoredModel

#: Which family of spec-decode metrics a vLLM server exports (specperf.engine.scrape has
#: the names and docs/metric-generations.md what each can tell): "v1" the V1 engine's
#: counters (drafts, draft and accepted tokens, accepted per position — some early V1
#: releases lack the drafts or the per-position counter); "v0" the V0 engine's gauges and
#: counters (no drafts, no positions, and counters that cannot be differenced).
MetricGeneration = Literal["v1", "v0"]
#: A figure a generation's metrics cannot tell (Acceptance.missing).
Unknowable = Literal["drafts", "per_position", "counts"]


class SpecDecodeCounters(StoredModel):
    """Cumulative vllm:spec_decode_* counters at one instant (summed over engines)."""

    present: bool = False
    num_drafts: NonNegative = 0.0
    num_draft_tokens: NonNegative = 0.0
    num_accepted_tokens: NonNegative = 0.0
    accepted_per_position: dict[Count, NonNegative] = Field(default_factory=dict)
    generation: MetricGeneration = "v1"
    has_drafts: bool = True
    has_per_position: bool = True
    # V0 only: its counter of tokens emitted (accepted + bonus) and its two gauges, ratios
    # over the server's lifetime as of its last 5-s metrics log.
    num_emitted_tokens: NonNegative = 0.0
    draft_acceptance_rate: NonNegative | None = None
    efficiency: NonNegative | None = None
    # vllm:prefix_cache_queries / _hits (prompt tokens looked up in the prefix cache, and
    # found there). A server with prefix caching off serves both and never moves them.
    prefix_cache_present: bool = False
    prefix_cache_queries: NonNegative = 0.0
    prefix_cache_hits: NonNegative = 0.0


class PrefixCacheCounts(StoredModel):
    """Prompt tokens a server looked up in its prefix cache during one trial, and found
    there: deltas of vllm:prefix_cache_queries and vllm:prefix_cache_hits."""

    queries: NonNegative
    hits: NonNegative

    @model_validator(mode="after")
    def _hits_within_queries(self) -> PrefixCacheCounts:
        if self.hits > self.queries * (1 + RATE_SLACK):
            raise ValueError(f"hits {self.hits:g} exceed queries {self.queries:g}: the hit "
                             "rate would be above 1")
        return self

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None


class Acceptance(StoredModel):
    """Spec-decode figures over one case: deltas of the counters before and after it.

    What the server's metric generation cannot tell is named in ``missing`` (and the
    figures that follow from it are None): no drafts counter → no mean acceptance length,
    no per-position rates, no mean proposal length; no per-position counter → no
    per-position rates; "counts" (vLLM V0, whose Prometheus counters add up cumulative
    totals) → no per-case counts at all: draft_tokens and accepted_tokens stay 0 and only
    the V0 gauges (lifetime ratios) are kept. The mean acceptance length is the one
    definition vLLM uses since #17908 (0.9.0): tokens per verification step *including*
    the bonus token, 1 + accepted / drafts; vLLM ≤ 0.8.5's V1 log line printed accepted /
    drafts, one less — specperf computes it from the counters, never reads the logged one.
    """

    drafts: NonNegative | None
    draft_tokens: NonNegative
    accepted_tokens: NonNegative
    accepted_per_position: list[NonNegative]
    generation: MetricGeneration = "v1"
    missing: list[Unknowable] = Field(default_factory=list)
    # V0 only (generation "v0"): the server's gauges after the case, ratios over its
    # lifetime — not the case's own figures when the server served anything before it.
    lifetime_acceptance_rate: NonNegative | None = None
    lifetime_efficiency: NonNegative | None = None

    @model_validator(mode="after")
    def _rates_within_one(self) -> Acceptance:
        # The acceptance rate (accepted / drafted) and each position's rate (accepted at
        # position i / drafts) are fractions: above 1, a file is corrupt, not fast.
        if self.accepted_tokens > self.draft_tokens * (1 + RATE_SLACK):
            raise ValueError(
                f"accepted_tokens {self.accepted_tokens:g} exceeds draft_tokens "
                f"{self.draft_tokens:g}: the acceptance rate would be "
                f"{self.accepted_tokens / self.draft_tokens if self.draft_tokens else float('inf'):.3g}"
                ", above 1")
        for i, a in enumerate(self.accepted_per_position):
            if self.drafts is not None and a > self.drafts * (1 + RATE_SLACK):
                raise ValueError(
                    f"accepted_per_position[{i}] {a:g} exceeds drafts {self.drafts:g}: that "
                    "position's acceptance rate would be above 1")
        return self

    @property
    def rate(self) -> float | None:
        if "counts" in self.missing:
            return None
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def per_position_rate(self) -> list[float]:
        if not self.drafts or "per_position" in self.missing:
            return []
        return [a / self.drafts for a in self.accepted_per_position]

    @property
    def mean_proposal_length(self) -> float | None:
        """Draft tokens per draft: k for a fixed-k method, less where proposals vary
        (ngram, suffix, dynamic k)."""
        return self.draft_tokens / self.drafts if self.drafts else None

    @property
    def accepted_per_draft(self) -> list[float]:
        """Index j: drafts that accepted exactly j tokens. Acceptance stops at the first
        rejected token, so position i's counter counts the drafts that accepted more than
        i tokens, and the differences of consecutive positions are the distribution."""
        if not self.drafts or "per_position" in self.missing:
            return []
        at_least = [self.drafts, *self.accepted_per_position, 0.0]
        return [max(at_least[j] - at_least[j + 1], 0.0) for j in range(len(at_least) - 1)]
