"""What measuring a case records: its trials, the retries and fresh-server confirmation
that added trials to it, and the case's result (:class:`CaseResult`)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from specperf.schemas.base import Case, Count, NonNegative, StoredModel, without_unset
from specperf.schemas.load import RequestSample
from specperf.schemas.scrape import Acceptance, PrefixCacheCounts


class Summary(StoredModel):
    """Of a latency (ms): none of its figures is negative."""

    n: Count
    mean: NonNegative | None = None
    median: NonNegative | None = None
    p99: NonNegative | None = None
    min: NonNegative | None = None
    max: NonNegative | None = None
    stdev: NonNegative | None = None


class Trial(StoredModel):
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
        return without_unset(self, handler, ("server_start", "busy_wait_s", "prefix_cache",
                                              "interleaved", "reference_block"))


class InconclusiveRetry(StoredModel):
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


class FreshServerConfirmation(StoredModel):
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
        return without_unset(self, handler, ("later_by_s",))

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


class CaseResult(StoredModel):
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
        return without_unset(self, handler, ("retry", "confirmation"))

    @model_validator(mode="after")
    def _errors_within_requests(self) -> CaseResult:
        if self.n_errors > self.n_requests:
            raise ValueError(f"n_errors {self.n_errors} exceeds n_requests {self.n_requests}: "
                             "the error rate would be above 1")
        return self

    @property
    def error_rate(self) -> float:
        return self.n_errors / self.n_requests if self.n_requests else 0.0


def unique_cases(cases: list[CaseResult]) -> list[CaseResult]:
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




class WithCases(StoredModel):
    """A stored model that lists cases (a run, a baseline, a scenario, a segment): each case
    at most once (:func:`unique_cases`), looked up with :meth:`case`.

    The ``cases`` field itself is each subclass's own, declared where its place in the
    file's field order is (a field declared here would come first and reorder every stored
    file and the schema goldens)."""

    if TYPE_CHECKING:
        cases: list[CaseResult]

    @field_validator("cases", check_fields=False)
    @classmethod
    def _each_case_once(cls, cases: list[CaseResult]) -> list[CaseResult]:
        return unique_cases(cases)

    def case(self, case: Case) -> CaseResult | None:
        return next((c for c in self.cases if c.case == case), None)
