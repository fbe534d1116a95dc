"""What a run records about itself beside its measurements: where it came from
(:class:`Provenance`), the servers it started, and where its wall time went."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from specperf.schemas.base import NonNegative, StoredModel, utcnow, without_unset

UNKNOWN_REVISION = "unknown"


class Provenance(StoredModel):
    specperf_version: str
    vllm_version: str | None = None
    torch_version: str | None = None
    hardware_id: str
    hardware: str = Field(description="human-readable: GPU name × count, or CPU model and cores")
    accelerator: Literal["cpu", "gpu"]
    cuda_version: str | None = Field(
        None, description="the CUDA toolkit the run's torch was built with (torch.version.cuda)")
    driver_version: str | None = None
    # Additive: run files from before it load with None (unknown).
    driver_cuda_version: str | None = Field(
        None, description="the newest CUDA the GPU driver supports (nvidia-smi's header), "
                          "beside driver_version: a torch built for a newer CUDA than this "
                          "does not run")
    python_version: str
    date: datetime = Field(default_factory=utcnow)
    git_commit: str | None = None
    profile_name: str
    profile_hash: str
    # Additive: run files from before it load with None (unknown), which compares with
    # anything.
    prompts_hash: str | None = Field(
        None, description="hash of the prompts the run sent, in order (specperf.dataset."
                          "prompts_digest): the dataset's content, which the profile hash "
                          "does not cover")
    provisional: str | None = Field(
        None, description="set when not measured by this suite, e.g. 'published measurement'"
    )
    # Additive, and left out when empty (runs of generated or local models only): older
    # run files load with {} (not recorded).
    model_revisions: dict[str, str] = Field(
        default_factory=dict,
        description="the Hugging Face commit each hub model (target, drafts, --tokenizer) "
                    "was served at, by model id: the profile's pin, else the local hub "
                    "cache's resolved ref (refs/main), else 'unknown' "
                    "(specperf.store.hf_cache.model_revisions)")

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(self, handler, ("prompts_hash", "driver_cuda_version",
                                              "model_revisions"))


class InjectionRecord(StoredModel):
    """What a fault-injection proxy in front of a server was asked to do and, read off its
    own records, what it did (gate experiments only: SPECPERF_PROXY_*, specperf.engine.proxy)."""

    delay_ms: NonNegative = 0.0
    stretch: NonNegative = 0.0
    growth_ms_per_s: NonNegative = 0.0
    streams: int = Field(0, ge=0, description="streamed responses it forwarded")
    decode_ratio: NonNegative | None = Field(
        None, description="median over streams of the decode (first to last text chunk) as "
                          "forwarded over as it arrived from the server: 1 + stretch when "
                          "the stretch was delivered")
    decode_ratio_min: NonNegative | None = None
    decode_ratio_max: NonNegative | None = None


class ServerRecord(StoredModel):
    config_id: str
    argv: list[str]
    port: int | None = Field(None, ge=0, le=65535)
    log_path: str
    startup_s: NonNegative | None = None
    vllm_version: str | None = None
    error: str | None = None
    # Additive, and only written under fault injection.
    injection: InjectionRecord | None = None

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(self, handler, ("injection",))


class TimeBreakdown(StoredModel):
    """Where a run's wall time went, in seconds (specperf.engine.clock.RunClock). Each
    second is in one bucket: a warm-up is not also a trial; ``other_s`` is what no bucket
    claimed (pytest and collection, comparisons while measuring, loading the baseline)."""

    wall_s: NonNegative = Field(description="the run's wall time: pytest start to the run file")
    server_starts_s: NonNegative = Field(
        0.0, description="starting vLLM servers (tiny models and vocabulary preflight included)")
    trials_s: NonNegative = Field(0.0, description="measured trials (paired no-spec ones too)")
    warmups_s: NonNegative = Field(0.0, description="warm-up requests before a trial")
    remeasures_s: NonNegative = Field(
        0.0, description="attempts discarded for outside CPU load and measured again, whole")
    busy_waits_s: NonNegative = Field(
        0.0, description="waiting before an attempt for the outside CPU load to fall below "
                         "load.max_outside_cores (the contention guard's check, about a "
                         "quarter-second a trial on a quiet machine; in run files written "
                         "before this field, part of other_s)")
    restarts_s: NonNegative = Field(
        0.0, description="fresh-server confirmation: stopping and starting the server again")
    reports_s: NonNegative = Field(
        0.0, description="comparing with the baseline and writing the reports")
    shutdown_s: NonNegative = Field(0.0, description="stopping servers")
    other_s: NonNegative = Field(0.0, description="wall time no other bucket claimed")

    @property
    def quiet_s(self) -> float:
        """What a run costs on a quiet machine with nothing flagged: starts, trials,
        warm-ups."""
        return self.server_starts_s + self.trials_s + self.warmups_s

    @property
    def quiet_ratio(self) -> float | None:
        """Wall time over :attr:`quiet_s` (None when that is 0)."""
        return self.wall_s / self.quiet_s if self.quiet_s > 0 else None
