"""The judgement's results: what one metric of one case was judged on and decided
(:class:`MetricDetail` beside each :class:`~specperf.analysis.stats.Comparison`), a case's
comparisons (:class:`CaseComparison`), and a run's (:class:`RunComparison`): the one object
every renderer views and every exit status is computed from."""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specperf.analysis.attribution import Attribution
from specperf.analysis.judge.outcome import TIMING_METRIC_KEYS, outcome_of
from specperf.analysis.stats import Comparison, Verdict
from specperf.config.rules import CompareRules, MetricKey
from specperf.schemas import Case, Provenance
from specperf.schemas.gate import Outcome, SampleKind

__all__ = ["VERDICT_ORDER", "CaseComparison", "MetricDetail", "RunComparison", "SampleKind"]

#: How renderers order verdicts: the ones that need a human first.
VERDICT_ORDER = {
    Verdict.REGRESSION: 0,
    Verdict.IMPROVEMENT: 1,
    Verdict.INCONCLUSIVE: 2,
    Verdict.UNCHANGED: 3,
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class MetricDetail(_Model):
    """What a Comparison alone does not say: unit, sample kind and spread."""

    key: MetricKey | Literal["tpot_gain"]
    unit: str
    samples: SampleKind = Field(description="what one sample was")
    baseline_spread: float | None = Field(
        None, description="robust CV (1.4826 MAD / median) of the baseline samples"
    )
    current_spread: float | None = None
    baseline_runs: int = Field(1, description="kept baseline runs whose trials were pooled")
    current_server_starts: int = Field(
        1, description="server starts the current trials came from (2 after a fresh-server "
                       "confirmation)")
    between_run_spread: float | None = Field(
        None, description="server-lifetime noise (log-scale SD) seen over those runs and "
                          "included in the interval; None with one run")
    between_run_df: float | None = Field(
        None, description="the degrees of freedom between_run_spread was estimated with "
                          "(Student's t of the widening)")
    between_run_cases: int | None = Field(
        None, description="how many cases' kept runs moderated between_run_spread "
                          "(analysis.spread); 1: this case's own alone")
    detectable: float | None = Field(
        None, description="relative shift these samples catch with 90 % power at the "
                          "rules' alpha (sample_size.detectable_shift); None without trials")
    trials_needed: int | None = Field(
        None, description="current-run trials that would catch the metric's minimum effect "
                          "(sample_size.trials_for_shift); None when trials alone cannot")
    note: str | None = None


class CaseComparison(_Model):
    case: Case
    config_label: str
    method: str | None = None
    draft_model: str | None = None
    num_speculative_tokens: int | None = None
    baseline_trials: int = 0
    current_trials: int = 0
    comparisons: list[Comparison] = Field(default_factory=list)
    details: dict[str, MetricDetail] = Field(
        default_factory=dict, description="by Comparison.metric"
    )
    notes: list[str] = Field(default_factory=list)
    busy: str | None = Field(
        None, description="why this case's timing checks were not measured (\"machine busy "
                          "(0.6 cores from other processes)\"); None: measured on a quiet machine")

    def outcome(self, comparison: Comparison) -> Outcome:
        """The check outcome of one of this case's comparisons (specperf.analysis.judge.outcome)."""
        detail = self.detail(comparison)
        timing = detail is None or detail.key in TIMING_METRIC_KEYS
        return outcome_of(comparison, busy=self.busy is not None and timing)

    @property
    def worst(self) -> Verdict | None:
        if not self.comparisons:
            return None
        return min((c.verdict for c in self.comparisons), key=VERDICT_ORDER.__getitem__)

    def detail(self, comparison: Comparison) -> MetricDetail | None:
        return self.details.get(comparison.metric)


class RunComparison(_Model):
    kind: Literal["specperf-comparison"] = "specperf-comparison"
    run_label: str | None = Field(None, description="where the run came from, e.g. its path")
    baseline_label: str | None = None
    run_provenance: Provenance
    baseline_provenance: Provenance
    rules: CompareRules = Field(default_factory=CompareRules)
    cases: list[CaseComparison] = Field(default_factory=list)
    refusals: list[str] = Field(default_factory=list, description="why it cannot be compared")
    notes: list[str] = Field(default_factory=list)
    only_in_run: list[Case] = Field(default_factory=list)
    only_in_baseline: list[Case] = Field(default_factory=list)
    attributions: list[Attribution] = Field(
        default_factory=list,
        description="per spec case with a pinned-acceptance twin: its TPOT change split "
                    "into acceptance and step cost (docs/attribution.md); "
                    "diagnosis only, no check reads it")

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    def all(self) -> list[tuple[CaseComparison, Comparison]]:
        return [(c, m) for c in self.cases for m in c.comparisons]

    def counts(self) -> dict[Verdict, int]:
        n = Counter(m.verdict for _, m in self.all())
        return {v: n.get(v, 0) for v in VERDICT_ORDER}

    @property
    def regressions(self) -> list[tuple[CaseComparison, Comparison]]:
        """The comparisons whose check FAILS (a REGRESSION measured on a quiet machine)."""
        return [(c, m) for c, m in self.all() if c.outcome(m) == "fail"]

    def outcomes(self) -> list[Outcome]:
        """Every comparison's check outcome, as the pytest run decides it."""
        return [c.outcome(m) for c, m in self.all()]

    def summary_line(self) -> str:
        """'3 cases: 1 regression, 0 improvements, 2 inconclusive, 14 unchanged'."""
        if self.refusals:
            return (f"comparison refused ({len(self.refusals)} problem"
                    f"{'s' if len(self.refusals) != 1 else ''}): nothing was compared")
        n = self.counts()
        reg = n[Verdict.REGRESSION]
        imp = n[Verdict.IMPROVEMENT]
        busy = sum(1 for c in self.cases if c.busy)
        return (
            f"{len(self.cases)} case{'s' if len(self.cases) != 1 else ''}: "
            f"{reg} regression{'s' if reg != 1 else ''}, "
            f"{imp} improvement{'s' if imp != 1 else ''}, "
            f"{n[Verdict.INCONCLUSIVE]} inconclusive, {n[Verdict.UNCHANGED]} unchanged"
            + (f"; {busy} case{'s' if busy != 1 else ''} not measured: machine busy"
               if busy else "")
        )
