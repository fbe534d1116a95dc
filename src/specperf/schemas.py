"""The pydantic models passed between pipeline stages.

profile → server → load → scrape → measure → gate → report: each stage takes and
returns these, so a stage can be tested, replaced or re-rendered on its own, and a run
file written on a GPU box can be reviewed on a laptop without vLLM.

Why one module past 600 lines: every model of the run and baseline files, so the JSON
Schema (`specperf schema`) and the schema golden test come from one module.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from specperf.config.rules import (  # noqa: F401 - re-exported: the run file records them
    DEFAULT_BUDGETS,
    METRIC_KEYS,
    CompareRules,
    Direction,
    MetricKey,
    MetricRule,
    default_metric_rules,
)

#: Bumped when a stored file (run or baseline) changes shape incompatibly.
SCHEMA_VERSION = 1
#: The oldest schema this specperf reads (there is no older one yet: 1 is the first; when
#: SCHEMA_VERSION is bumped, a migration from the previous one goes in
#: specperf.store.files and this stays, or the command that converts it is named there).
MIN_SCHEMA_VERSION = 1

#: Bounds every stored number obeys: a file that breaks them was hand-edited or corrupted,
#: and would otherwise drive a verdict (a NaN median compares as "unchanged", a negative
#: count makes a rate above 1). Non-finite floats are refused model-wide (allow_inf_nan).
NonNegative = Annotated[float, Field(ge=0)]
Count = Annotated[int, Field(ge=0)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: Rates compared with each other; tolerance for the float sums they are made of.
_RATE_SLACK = 1e-9


class _Model(BaseModel):
    # allow_inf_nan=False: Python's json reads `NaN`, `Infinity` and 1e999; none of them is
    # a measurement.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _without_unset(model: BaseModel, handler: SerializerFunctionWrapHandler,
                   names: tuple[str, ...]) -> Any:
    """Serialise, leaving out the optional fields in ``names`` that are None, False or an
    empty mapping: files written without the feature they record stay byte-identical to older
    ones."""
    data = handler(model)
    if isinstance(data, dict):
        for name in names:
            value = getattr(model, name)
            if value is None or value is False or (isinstance(value, (dict, list)) and not value):
                data.pop(name, None)
    return data


class Case(_Model):
    """One (server config × concurrency) cell of the matrix."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    config_id: str = Field(min_length=1)
    concurrency: int = Field(ge=1)

    @property
    def id(self) -> str:
        return f"{self.config_id}-c{self.concurrency}"

    def __str__(self) -> str:
        return self.id


# --- load ---------------------------------------------------------------------


class RequestSpecDecode(_Model):
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


class RequestSample(_Model):
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
        return _without_unset(self, handler, ("token_chunks", "spec"))

    @property
    def tpot_s(self) -> float | None:
        # Chunks carry several tokens and can stall then burst, so per-token time is
        # taken over the whole decode, counted from usage, not from chunk gaps.
        if not self.ok or self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


class LoadResult(_Model):
    concurrency: int = Field(ge=1)
    samples: list[RequestSample]
    duration_s: NonNegative
    warmup_requests: Count = 0


# --- scrape -------------------------------------------------------------------


#: Which family of spec-decode metrics a vLLM server exports (specperf.engine.scrape has
#: the names and docs/metric-generations.md what each can tell): "v1" the V1 engine's
#: counters (drafts, draft and accepted tokens, accepted per position — some early V1
#: releases lack the drafts or the per-position counter); "v0" the V0 engine's gauges and
#: counters (no drafts, no positions, and counters that cannot be differenced).
MetricGeneration = Literal["v1", "v0"]
#: A figure a generation's metrics cannot tell (Acceptance.missing).
Unknowable = Literal["drafts", "per_position", "counts"]


class SpecDecodeCounters(_Model):
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


class PrefixCacheCounts(_Model):
    """Prompt tokens a server looked up in its prefix cache during one trial, and found
    there: deltas of vllm:prefix_cache_queries and vllm:prefix_cache_hits."""

    queries: NonNegative
    hits: NonNegative

    @model_validator(mode="after")
    def _hits_within_queries(self) -> PrefixCacheCounts:
        if self.hits > self.queries * (1 + _RATE_SLACK):
            raise ValueError(f"hits {self.hits:g} exceed queries {self.queries:g}: the hit "
                             "rate would be above 1")
        return self

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None


class Acceptance(_Model):
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
        if self.accepted_tokens > self.draft_tokens * (1 + _RATE_SLACK):
            raise ValueError(
                f"accepted_tokens {self.accepted_tokens:g} exceeds draft_tokens "
                f"{self.draft_tokens:g}: the acceptance rate would be "
                f"{self.accepted_tokens / self.draft_tokens if self.draft_tokens else float('inf'):.3g}"
                ", above 1")
        for i, a in enumerate(self.accepted_per_position):
            if self.drafts is not None and a > self.drafts * (1 + _RATE_SLACK):
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


# --- measure ------------------------------------------------------------------


class Summary(_Model):
    """Of a latency (ms): none of its figures is negative."""

    n: Count
    mean: NonNegative | None = None
    median: NonNegative | None = None
    p99: NonNegative | None = None
    min: NonNegative | None = None
    max: NonNegative | None = None
    stdev: NonNegative | None = None


class Trial(_Model):
    """One pass of a case's load, with the counter deltas measured around it."""

    index: Count
    started_at: datetime
    duration_s: NonNegative
    samples: list[RequestSample]
    output_tokens: Count
    output_throughput: NonNegative = Field(description="output tokens / s over the trial")
    request_throughput: NonNegative
    acceptance: Acceptance | None = None
    # The contention guard (specperf.engine.contention). Optional and additive: run files
    # written before it load unchanged, with the load unknown.
    outside_cores: NonNegative | None = Field(
        None, description="cores' worth of other processes (not the servers, not the suite) "
                          "that ran during the trial; None = unknown")
    remeasured_outside_cores: list[NonNegative] = Field(
        default_factory=list,
        description="outside load of the attempts this trial replaced (measured again because "
                    "it exceeded load.max_outside_cores)")
    contended: bool = Field(
        False, description="still above load.max_outside_cores after load.contended_retries "
                           "re-measurements; kept, and flagged in reports and compare")
    server_start: Count | None = Field(
        None, description="which start of its server measured it when the case was measured "
                          "on more than one (fresh-server confirmation): 0 the first, 1 the "
                          "fresh one; None = the only one")
    busy_wait_s: NonNegative | None = Field(
        None, description="seconds spent before this trial and its re-measurements checking "
                          "the outside load and waiting for it to fall below "
                          "load.max_outside_cores (at most load.busy_wait_s plus one window); "
                          "a quiet machine's check alone is a fraction of a second; None = "
                          "not checked (guard or wait off, load unknown, older files)")
    prefix_cache: PrefixCacheCounts | None = Field(
        None, description="prefix-cache counter deltas over the trial (scenarios.prefix_cache "
                          "only; None = not recorded)")
    interleaved: bool = Field(
        False, description="its requests alternated one by one with those of its paired trial "
                           "on the other server (load.pairing = \"requests\"): the i-th sample "
                           "of each ran the same prompt moments apart, and duration_s is the "
                           "time of its own requests")
    reference_block: Count | None = Field(
        None, description="a no-spec trial of a reference block (load.reference = \"bracket\"): "
                          "which block of the run measured it, 0 the first; the blocks run on "
                          "the no-spec server alone, before, between and after the spec "
                          "configs; None = not a block's trial")

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(self, handler, ("server_start", "busy_wait_s", "prefix_cache",
                                              "interleaved", "reference_block"))


class InconclusiveRetry(_Model):
    """What ``--perf-retry-inconclusive`` did to one case: extra trials, while its server
    was still up, because a metric compared INCONCLUSIVE against the baseline."""

    initial_trials: Count = Field(description="trials before the retries (the profile's repeats)")
    trials: Count = Field(description="trials after the retries (also len(trials))")
    cap: Count = Field(description="the most trials the case could get")
    batch: Count = Field(description="trials added per round")
    rounds: Count = Field(0, description="rounds of extra trials run")
    triggered_by: list[str] = Field(description="metrics INCONCLUSIVE after the planned trials")
    outcome: dict[str, str] = Field(
        default_factory=dict,
        description="per triggering metric: its verdict after the last round",
    )

    @property
    def still_inconclusive(self) -> list[str]:
        return [m for m, v in self.outcome.items() if v == "inconclusive"]

    def summary_line(self) -> str:
        """'3 → 7 trials (cap 9) for INCONCLUSIVE TPOT: now unchanged'."""
        head = (f"{self.initial_trials} → {self.trials} trials (cap {self.cap}) for "
                f"INCONCLUSIVE {', '.join(self.triggered_by)}")
        if not self.rounds:
            return head + ": no trials could be added"
        return head + ": " + ", ".join(
            f"{m} {'still inconclusive' if v == 'inconclusive' else 'now ' + v}"
            for m, v in self.outcome.items())


class FreshServerConfirmation(_Model):
    """What the fresh-server confirmation did to one case: a latency or throughput metric
    was flagged (REGRESSION or IMPROVEMENT) against the baseline, so the case's server was
    started again and the case measured on it too; its verdicts are then on both server
    starts together, with the spread between them in the interval."""

    triggered_by: list[str] = Field(description="metrics flagged after the first server start")
    first_trials: Count = Field(description="trials on the first server start")
    trials: Count = Field(description="trials on both (also len(trials))")
    outcome: dict[str, str] = Field(
        default_factory=dict, description="per triggering metric: its verdict on both starts")
    note: str | None = Field(None, description="why it could not be done, if it could not")
    # Written only when set: files of runs that confirmed at once stay byte-identical.
    later_by_s: NonNegative | None = Field(
        None, description="seconds from the flag to the fresh start, when the confirmation "
                          "waited for the other configs' cases ([compare] "
                          "confirm_after_matrix)")

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(self, handler, ("later_by_s",))

    @property
    def confirmed(self) -> list[str]:
        return [m for m, v in self.outcome.items() if v in ("regression", "improvement")]

    def summary_line(self) -> str:
        """'TPOT, E2E flagged: measured again on a fresh server (5 + 5 trials): TPOT
        confirmed regression, E2E now inconclusive'."""
        later = (f" {self.later_by_s / 60:.0f} min later, after the other configs"
                 if self.later_by_s is not None else "")
        head = (f"{', '.join(self.triggered_by)} flagged: measured again on a fresh server"
                f"{later} ({self.first_trials} + {self.trials - self.first_trials} trials)")
        if self.note:
            return head + f": {self.note}"
        if not self.outcome:
            return head
        return head + ": " + ", ".join(
            f"{m} {'confirmed ' + v if v in ('regression', 'improvement') else 'now ' + v}"
            for m, v in self.outcome.items())


class CaseResult(_Model):
    case: Case
    config_hash: str | None = Field(None, description="Profile.config_hash of its server config")
    config_label: str
    method: str | None = Field(None, description="speculative method, None for no-spec")
    draft_model: str | None = None
    num_speculative_tokens: int | None = Field(None, ge=1)
    vllm_version: str | None = None
    trials: list[Trial]
    n_requests: Count
    n_errors: Count
    errors: list[str] = Field(default_factory=list, description="distinct error messages")
    ttft_ms: Summary
    tpot_ms: Summary
    e2e_ms: Summary
    output_throughput: NonNegative = Field(description="tok/s, mean over trials")
    request_throughput: NonNegative
    acceptance: Acceptance | None = Field(None, description="summed over trials")
    retry: InconclusiveRetry | None = Field(
        None, description="set when --perf-retry-inconclusive added trials to this case"
    )
    confirmation: FreshServerConfirmation | None = Field(
        None, description="set when a flag was measured again on a fresh server "
                          "([compare] confirm_on_fresh_server)")

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(self, handler, ("retry", "confirmation"))

    @model_validator(mode="after")
    def _errors_within_requests(self) -> CaseResult:
        if self.n_errors > self.n_requests:
            raise ValueError(f"n_errors {self.n_errors} exceeds n_requests {self.n_requests}: "
                             "the error rate would be above 1")
        return self

    @property
    def error_rate(self) -> float:
        return self.n_errors / self.n_requests if self.n_requests else 0.0


# --- gate ---------------------------------------------------------------------

#: A check's outcome. "inconclusive": the interval straddles the limit even after the extra
#: trials the plan allows — undecided, not a failure. "busy": a timing check not measured
#: because other processes kept the machine busy (acceptance is still judged). "skip":
#: nothing to judge against (no baseline case).
Outcome = Literal["pass", "fail", "inconclusive", "busy", "skip"]
#: What one sample of a judged metric was. Trials and requests are measured again by a fresh
#: server start; counters (exactly repeatable) and a baseline's summary figures are not
#: (specperf.analysis.judge.follow_up.RE_MEASURABLE).
SampleKind = Literal["trials", "requests", "trial_means", "summary", "counters"]

#: The test kinds whose checks judge timings (a busy machine leaves them unmeasured).
TIMING_GATES = ("tpot_gain", "latency", "throughput", "ttft_budget", "throughput_budget")


class GateCheck(_Model):
    """One assertion on one metric of one case, with the words that explain it."""

    case: Case
    # ttft_budget / throughput_budget: run files written before one verdict (#13) used them.
    gate: Literal["requests", "acceptance", "tpot_gain", "latency", "throughput",
                  "ttft_budget", "throughput_budget", "prefix_cache", "soak", "ramp",
                  "context_length", "categories"]
    metric: str
    unit: str = ""
    higher_is_better: bool
    baseline: float | None = None
    current: float | None = None
    threshold: float | None = None
    outcome: Outcome
    message: str
    held_by: str | None = Field(
        None, description="the hold rule that made the comparison behind this check "
                          "INCONCLUSIVE (Comparison.held_by); None: its numbers decided")
    # Written only when set: run files of checks that do not record it stay byte-identical.
    samples: SampleKind | None = Field(
        None, description="what one sample of the check's numbers was (\"trials\", "
                          "\"requests\", \"counters\", …): whether a fresh server start can "
                          "confirm or clear its FAIL; None: not recorded")

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(self, handler, ("samples",))

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.current is None or self.baseline == 0:
            return None
        return self.current / self.baseline - 1.0


# --- provenance, baseline, run -------------------------------------------------


def _unique_cases(cases: list[CaseResult]) -> list[CaseResult]:
    """Each (config_id, concurrency) once: with two copies, which one is the result would
    depend on the reader (``case()`` takes the first, a dict the last)."""
    seen: dict[Case, int] = {}
    for i, c in enumerate(cases):
        if c.case in seen:
            raise ValueError(
                f"case {c.case.id} (config_id {c.case.config_id!r}, concurrency "
                f"{c.case.concurrency}) is listed twice, at cases.{seen[c.case]} and cases.{i}; "
                "keep one: a merged or hand-edited file must hold each case once")
        seen[c.case] = i
    return cases



#: A model revision that neither the profile pins nor the local hub cache resolves.
UNKNOWN_REVISION = "unknown"


class Provenance(_Model):
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
        return _without_unset(self, handler, ("prompts_hash", "driver_cuda_version",
                                              "model_revisions"))


class InjectionRecord(_Model):
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


class ServerRecord(_Model):
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
        return _without_unset(self, handler, ("injection",))


class TimeBreakdown(_Model):
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


class ScenarioSegment(_Model):
    """One segment of a segmented scenario (a prompt-length bucket, a task category): each
    config's trials on the segment's prompts alone, so their counter deltas are the
    segment's, and the no-spec trials paired with each spec case."""

    name: str
    cases: list[CaseResult] = Field(default_factory=list)
    paired_nospec: dict[str, CaseResult] = Field(
        default_factory=dict, description="per spec case id: the no-spec trials on the "
                                          "segment's prompts interleaved with it")

    @field_validator("cases")
    @classmethod
    def _each_case_once(cls, cases: list[CaseResult]) -> list[CaseResult]:
        return _unique_cases(cases)

    def case(self, case: Case) -> CaseResult | None:
        return next((c for c in self.cases if c.case == case), None)


class ScenarioResult(_Model):
    """One scenario of a run (config.scenarios): its cases, measured on the scenario's own
    servers with its own prompts, and the no-spec trials paired with each spec case. A
    segmented scenario (context_length, categories) also has its segments; its cases are
    then every segment's trials together."""

    kind: Literal["prefix_cache", "context_length", "categories"]
    cases: list[CaseResult] = Field(default_factory=list)
    paired_nospec: dict[str, CaseResult] = Field(
        default_factory=dict, description="per spec case id: the no-spec trials interleaved "
                                          "with it, on the same prompts")
    segments: list[ScenarioSegment] = Field(
        default_factory=list, description="context_length: per length bucket; categories: per "
                                          "category (in measuring order)")

    @field_validator("cases")
    @classmethod
    def _each_case_once(cls, cases: list[CaseResult]) -> list[CaseResult]:
        return _unique_cases(cases)

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(self, handler, ("segments",))

    def case(self, case: Case) -> CaseResult | None:
        return next((c for c in self.cases if c.case == case), None)


# --- time-structured scenarios (config/scenarios.py) ----------------------------------


class SoakWindow(_Model):
    """One window of a soak: whole prompt cycles, the counter deltas around them."""

    index: Count
    start_s: NonNegative = Field(description="seconds since the soak's first window began")
    duration_s: NonNegative
    n_requests: Count
    n_errors: Count
    tpot_ms: Summary
    acceptance: Acceptance | None = None
    outside_cores: NonNegative | None = Field(
        None, description="cores' worth of other processes during the window; None = unknown")

    @property
    def mid_s(self) -> float:
        return self.start_s + self.duration_s / 2


class TrendFit(_Model):
    """A series' slope over the run with its interval, against the allowed change."""

    metric: Literal["acceptance_rate", "tpot"]
    unit: str = Field(description="of the slope, e.g. 'per hour' or 'relative per hour'")
    n_windows: Count
    slope: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float = Field(gt=0.0, lt=1.0)
    limit: float = Field(description="the allowed slope: a decay (acceptance, ≤ 0) or a "
                                     "growth (TPOT, ≥ 0) per hour")
    outcome: Literal["pass", "fail", "inconclusive", "busy"]
    reason: str


class SoakResult(_Model):
    case: Case
    duration_s: NonNegative
    window_s: Positive
    windows: list[SoakWindow]
    fits: list[TrendFit] = Field(default_factory=list)


class RampPhase(_Model):
    """One phase of a ramp: its concurrency and its one trial."""

    name: Literal["before", "burst", "after"]
    concurrency: Annotated[int, Field(ge=1)]
    trial: Trial


class RampResult(_Model):
    case: Case
    phases: list[RampPhase]


class TimeScenarioResults(_Model):
    """What the time-structured scenarios measured (absent from runs that ran none)."""

    soak: list[SoakResult] = Field(default_factory=list)
    ramp: list[RampResult] = Field(default_factory=list)


class RunResult(_Model):
    """The one result object every renderer (console, markdown, JSON, plots) views."""

    kind: Literal["specperf-run"] = "specperf-run"
    schema_version: int = Field(SCHEMA_VERSION, ge=MIN_SCHEMA_VERSION, le=SCHEMA_VERSION)
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
    compare_rules: CompareRules | None = Field(
        None, description="the profile's comparison rules ([compare]) this run was judged "
                          "with; `specperf compare` applies them (absent: the defaults)",
    )
    retry_inconclusive: int | None = Field(
        None, ge=0, description="the per-case trial cap of --perf-retry-inconclusive (None: off)"
    )
    time_breakdown: TimeBreakdown | None = Field(
        None, description="where the run's wall time went (absent: written before specperf "
                          "recorded it, or not by a perf run)")
    tpot_gain_floors: dict[str, Positive] = Field(
        default_factory=dict,
        description="per spec case id with a TPOT-gain gate: the floor its paired gain must be "
                    "significantly above (the profile's gates.tpot_gain), so `specperf compare` "
                    "judges the gain as the run did",
    )
    scenarios: list[ScenarioResult] = Field(
        default_factory=list, description="the profile's [scenarios] this run measured "
                                          "(docs/scenarios.md)")
    time_scenarios: TimeScenarioResults | None = Field(
        None, description="the soak and ramp scenarios' windows and phases (absent: none ran)")
    pinned_acceptance: dict[str, CaseResult] = Field(
        default_factory=dict,
        description="per spec case id: the trials of its pinned-acceptance twin (vLLM's "
                    "synthetic rejection sampler at the baseline's per-position rates), "
                    "interleaved with its own; the comparison splits TPOT with them",
    )
    pinned_rates: dict[str, list[Annotated[float, Field(ge=0.0, le=1.0)]]] = Field(
        default_factory=dict,
        description="per config id with a pinned-acceptance twin: the rates it was pinned to",
    )

    @field_validator("cases")
    @classmethod
    def _each_case_once(cls, cases: list[CaseResult]) -> list[CaseResult]:
        return _unique_cases(cases)

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(self, handler, ("compare_rules", "retry_inconclusive",
                                              "time_breakdown", "tpot_gain_floors",
                                              "scenarios", "pinned_acceptance",
                                              "pinned_rates"))

    def case(self, case: Case) -> CaseResult | None:
        return next((c for c in self.cases if c.case == case), None)

    @property
    def failed(self) -> list[GateCheck]:
        return [c for c in self.checks if c.outcome == "fail"]


class Baseline(_Model):
    kind: Literal["specperf-baseline"] = "specperf-baseline"
    schema_version: int = Field(SCHEMA_VERSION, ge=MIN_SCHEMA_VERSION, le=SCHEMA_VERSION)
    provenance: Provenance
    cases: list[CaseResult]
    paired_nospec: dict[str, CaseResult] = Field(
        default_factory=dict,
        description="per spec case id: the no-spec trials of the kept run's TPOT gain — this "
                    "hardware's gain, which a later run's gain is held to",
    )
    pinned_acceptance: dict[str, CaseResult] = Field(
        default_factory=dict,
        description="per spec case id: the kept run's pinned-acceptance twin trials — what a "
                    "later run's twin at the same rates is measured against, so that the "
                    "synthetic sampler's own cost cancels (docs/attribution.md)",
    )
    pinned_rates: dict[str, list[Annotated[float, Field(ge=0.0, le=1.0)]]] = Field(
        default_factory=dict,
        description="per config id with a kept twin: the rates that twin was pinned to",
    )

    @field_validator("cases")
    @classmethod
    def _each_case_once(cls, cases: list[CaseResult]) -> list[CaseResult]:
        return _unique_cases(cases)

    @model_serializer(mode="wrap")
    def _serialise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(self, handler, ("paired_nospec", "pinned_acceptance",
                                              "pinned_rates"))

    def case(self, case: Case) -> CaseResult | None:
        return next((c for c in self.cases if c.case == case), None)


def recorded_rules(result: RunResult | Baseline) -> CompareRules:
    """The comparison rules ``result`` was judged with -- its profile's ``[compare]`` table,
    which a run file records -- else the defaults (a baseline, or an older run, records
    none)."""
    return (result.compare_rules if isinstance(result, RunResult) else None) or CompareRules()
