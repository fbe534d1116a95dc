"""What the load generator records: each streamed request, and a trial's requests."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from specperf.schemas.base import Count, NonNegative, StoredModel, without_unset


class RequestSpecDecode(StoredModel):
    """The server's own spec-decode figures of one request: the response's
    ``metrics.speculative_decoding`` (vLLM ≥ 0.32 with ``--per-request-spec-decode-metrics
    summary|detailed``), the per-request counterpart of the ``vllm:spec_decode_*``
    counters. Only steps that carried a draft count."""

    steps: Count = Field(description="verify steps that carried a draft (num_spec_steps)")
    draft_tokens: Count
    accepted_tokens: Count
    accepted_histogram: list[Count] = Field(
        description="index j: steps that accepted exactly j draft tokens")
    proposal_lengths: list[Count] = Field(
        default_factory=list,
        description="index n: steps whose draft had n tokens (from per_step_drafted, "
                    "`detailed` only; empty with `summary`)")

    @model_validator(mode="after")
    def _consistent(self) -> RequestSpecDecode:
        if sum(self.accepted_histogram) != self.steps:
            raise ValueError(f"accepted_histogram sums to {sum(self.accepted_histogram)}, "
                             f"not steps {self.steps}")
        if self.proposal_lengths and sum(self.proposal_lengths) != self.steps:
            raise ValueError(f"proposal_lengths sums to {sum(self.proposal_lengths)}, "
                             f"not steps {self.steps}")
        if self.accepted_tokens > self.draft_tokens:
            raise ValueError(f"accepted_tokens {self.accepted_tokens} exceeds draft_tokens "
                             f"{self.draft_tokens}")
        return self


class RequestSample(StoredModel):
    """One streamed request. Times in seconds, relative to the start of its trial."""

    ok: bool
    start_s: NonNegative
    ttft_s: NonNegative | None = None
    e2e_s: NonNegative | None = None
    output_tokens: Count = 0
    prompt_tokens: Count = 0
    chunks: Count = 0
    error: str | None = None
    # Recorded only when the server reports per-request spec-decode metrics: files
    # written without them stay byte-identical.
    token_chunks: Count | None = Field(
        None, description="streamed chunks that carried tokens, with or without text (a "
                          "token of an incomplete UTF-8 character streams with empty text): "
                          "one per engine step unless the stream merged steps")
    spec: RequestSpecDecode | None = Field(
        None, description="the server's per-request spec-decode metrics, when it reports them")

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(self, handler, ("token_chunks", "spec"))

    @property
    def tpot_s(self) -> float | None:
        # Chunks carry several tokens and can stall then burst, so per-token time is
        # taken over the whole decode, counted from usage, not from chunk gaps.
        if not self.ok or self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


class LoadResult(StoredModel):
    concurrency: int = Field(ge=1)
    samples: list[RequestSample]
    duration_s: NonNegative
    warmup_requests: Count = 0
