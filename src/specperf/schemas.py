"""The pydantic models passed between pipeline stages.

profile → server → load → scrape → measure → gate → report: each stage takes and
returns these, so a stage can be tested, replaced or re-rendered on its own, and a run
file written on a GPU box can be reviewed on a laptop without vLLM.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: Bumped when a stored file (run or baseline) changes shape incompatibly.
SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Case(_Model):
    """One (server config × concurrency) cell of the matrix."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config_id: str
    concurrency: int

    @property
    def id(self) -> str:
        return f"{self.config_id}-c{self.concurrency}"

    def __str__(self) -> str:
        return self.id


# --- load ---------------------------------------------------------------------


class RequestSample(_Model):
    """One streamed request. Times in seconds, relative to the start of its trial."""

    ok: bool
    start_s: float
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int = 0
    prompt_tokens: int = 0
    chunks: int = 0
    error: str | None = None

    @property
    def tpot_s(self) -> float | None:
        # Chunks carry several tokens and can stall then burst, so per-token time is
        # taken over the whole decode, counted from usage, not from chunk gaps.
        if not self.ok or self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


class LoadResult(_Model):
    concurrency: int
    samples: list[RequestSample]
    duration_s: float
    warmup_requests: int = 0


# --- scrape -------------------------------------------------------------------


class SpecDecodeCounters(_Model):
    """Cumulative vllm:spec_decode_* counters at one instant (summed over engines)."""

    present: bool = False
    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    accepted_per_position: dict[int, float] = Field(default_factory=dict)


class Acceptance(_Model):
    """Spec-decode figures over one case: deltas of the counters before and after it."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: list[float]

    @property
    def rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def per_position_rate(self) -> list[float]:
        if not self.drafts:
            return []
        return [a / self.drafts for a in self.accepted_per_position]


# --- measure ------------------------------------------------------------------


class Summary(_Model):
    n: int
    mean: float | None = None
    median: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None
    stdev: float | None = None


class Trial(_Model):
    """One pass of a case's load, with the counter deltas measured around it."""

    index: int
    started_at: datetime
    duration_s: float
    samples: list[RequestSample]
    output_tokens: int
    output_throughput: float = Field(description="output tokens / s over the trial")
    request_throughput: float
    acceptance: Acceptance | None = None
    # The contention guard (specperf.contention). Optional and additive: run files
    # written before it load unchanged, with the load unknown.
    outside_cores: float | None = Field(
        None, description="cores' worth of other processes (not the servers, not the suite) "
                          "that ran during the trial; None = unknown")
    remeasured_outside_cores: list[float] = Field(
        default_factory=list,
        description="outside load of the attempts this trial replaced (measured again because "
                    "it exceeded load.max_outside_cores)")
    contended: bool = Field(
        False, description="still above load.max_outside_cores after load.contended_retries "
                           "re-measurements; kept, and flagged in reports and compare")


class CaseResult(_Model):
    case: Case
    config_hash: str | None = Field(None, description="Profile.config_hash of its server config")
    config_label: str
    method: str | None = Field(None, description="speculative method, None for no-spec")
    draft_model: str | None = None
    num_speculative_tokens: int | None = None
    vllm_version: str | None = None
    trials: list[Trial]
    n_requests: int
    n_errors: int
    errors: list[str] = Field(default_factory=list, description="distinct error messages")
    ttft_ms: Summary
    tpot_ms: Summary
    e2e_ms: Summary
    output_throughput: float = Field(description="tok/s, mean over trials")
    request_throughput: float
    acceptance: Acceptance | None = Field(None, description="summed over trials")

    @property
    def error_rate(self) -> float:
        return self.n_errors / self.n_requests if self.n_requests else 0.0


# --- gate ---------------------------------------------------------------------

Outcome = Literal["pass", "fail", "skip"]


class GateCheck(_Model):
    """One assertion on one metric of one case, with the words that explain it."""

    case: Case
    gate: Literal["requests", "acceptance", "tpot_gain", "ttft_budget", "throughput_budget"]
    metric: str
    unit: str = ""
    higher_is_better: bool
    baseline: float | None = None
    current: float | None = None
    threshold: float | None = None
    outcome: Outcome
    message: str

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.current is None or self.baseline == 0:
            return None
        return self.current / self.baseline - 1.0


# --- provenance, baseline, run -------------------------------------------------


class Provenance(_Model):
    specperf_version: str
    vllm_version: str | None = None
    torch_version: str | None = None
    hardware_id: str
    hardware: str = Field(description="human-readable: GPU name × count, or CPU model and cores")
    accelerator: Literal["cpu", "gpu"]
    cuda_version: str | None = None
    driver_version: str | None = None
    python_version: str
    date: datetime = Field(default_factory=utcnow)
    git_commit: str | None = None
    profile_name: str
    profile_hash: str
    provisional: str | None = Field(
        None, description="set when not measured by this suite, e.g. 'published measurement'"
    )


class ServerRecord(_Model):
    config_id: str
    argv: list[str]
    port: int | None = None
    log_path: str
    startup_s: float | None = None
    vllm_version: str | None = None
    error: str | None = None


class RunResult(_Model):
    """The one result object every renderer (console, markdown, JSON, plots) views."""

    kind: Literal["specperf-run"] = "specperf-run"
    schema_version: int = SCHEMA_VERSION
    provenance: Provenance
    run_dir: str
    started_at: datetime
    finished_at: datetime | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    checks: list[GateCheck] = Field(default_factory=list)
    servers: list[ServerRecord] = Field(default_factory=list)
    paired_nospec: dict[str, CaseResult] = Field(
        default_factory=dict,
        description="per spec case id: the no-spec trials interleaved with it (TPOT gain)",
    )
    baseline_path: str | None = None
    baseline_note: str | None = None

    def case(self, case: Case) -> CaseResult | None:
        return next((c for c in self.cases if c.case == case), None)

    @property
    def failed(self) -> list[GateCheck]:
        return [c for c in self.checks if c.outcome == "fail"]


class Baseline(_Model):
    kind: Literal["specperf-baseline"] = "specperf-baseline"
    schema_version: int = SCHEMA_VERSION
    provenance: Provenance
    cases: list[CaseResult]

    def case(self, case: Case) -> CaseResult | None:
        return next((c for c in self.cases if c.case == case), None)
