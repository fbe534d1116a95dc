"""What judging a case records: one check per assertion, with its outcome."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from specperf.schemas.base import Case, StoredModel, without_unset

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


class GateCheck(StoredModel):
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
        return without_unset(self, handler, ("samples",))

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.current is None or self.baseline == 0:
            return None
        return self.current / self.baseline - 1.0
