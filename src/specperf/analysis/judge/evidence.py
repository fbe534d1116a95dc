"""A case's evidence: everything one case is judged on, gathered by one function for the
run judging as it goes (the engine's measurer) and for ``specperf compare`` on the saved
run file alike, so both judge a case on the same samples.

:class:`Against` is the baseline side — the baseline, its kept earlier runs, and the
between-run spread moderated over its cases (computed once) — and
:meth:`Against.evidence` gathers one case's :class:`Evidence`: its trials, the baseline
case and its kept runs, the paired no-spec trials on both sides, the gain's floor, the
no-spec reference beside its server config, and the current case's fresh-start
confirmation (on ``Evidence.current``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from specperf.analysis.judge.machine_reference import BesideReference, reference_for
from specperf.analysis.samples import earlier_pairs, earlier_runs, kept_runs
from specperf.analysis.spread import KeptSpreads, kept_spreads
from specperf.config.rules import CompareRules
from specperf.schemas import Baseline, Case, CaseResult, RunResult

__all__ = ["Against", "Evidence", "side_labels"]

#: How the notes name the two sides when nothing more is known of them.
PLAIN_LABELS = ("the baseline", "the run")


def side_labels(baseline_vllm: str | None, run_vllm: str | None) -> tuple[str, str]:
    """How the notes name the two sides: "the baseline (vLLM 0.26.0)", "the run (vLLM …)"."""
    return (f"the baseline (vLLM {baseline_vllm or '?'})", f"the run (vLLM {run_vllm or '?'})")


@dataclass(frozen=True)
class Evidence:
    """What one case is judged on. ``baseline`` None: no comparable baseline case (the
    run's own paired gain alone is judged, against ``gain_floor``)."""

    current: CaseResult
    baseline: CaseResult | None = None
    #: The same case in the baseline's kept earlier runs (same server config), newest first.
    earlier: Sequence[CaseResult] = ()
    #: The no-spec trials paired with the case in this run, and in the baseline.
    paired: CaseResult | None = None
    base_paired: CaseResult | None = None
    earlier_paired: Sequence[tuple[CaseResult, CaseResult]] = ()
    gain_floor: float | None = None
    spreads: KeptSpreads = field(default_factory=KeptSpreads)
    reference: BesideReference | None = None
    labels: tuple[str, str] = PLAIN_LABELS

    def measured_baseline_runs(self, rules: CompareRules) -> int | None:
        """How many of the runs the baseline side pools (up to ``baseline_runs``) measured
        anything — a run with no trials is published means (a provisional baseline), which
        measured nothing on this hardware; None without a baseline."""
        if self.baseline is None:
            return None
        return sum(1 for r in [self.baseline, *self.earlier][: rules.baseline_runs] if r.trials)


@dataclass
class Against:
    """The baseline side of a judgement: the baseline (a run or a kept baseline), its kept
    earlier runs, and the rules. Without a baseline every case has only its own gain."""

    baseline: RunResult | Baseline | None
    history: Sequence[RunResult | Baseline] = ()
    rules: CompareRules = field(default_factory=CompareRules)
    labels: tuple[str, str] = PLAIN_LABELS

    @cached_property
    def spreads(self) -> KeptSpreads:
        """Each case's server-start spread moderated by the baseline's other cases — from
        the baseline and its kept runs only, so the run judging as it goes, this judgement
        and a shard's give each case the same spread."""
        if self.baseline is None:
            return KeptSpreads()
        return kept_spreads(self.baseline, self.history, self.rules)

    def kept(self) -> list[RunResult | Baseline]:
        """The kept runs the comparison may pool with the baseline."""
        return kept_runs(self.baseline, self.history) if self.baseline is not None else []

    def case(self, case: Case) -> CaseResult | None:
        return self.baseline.case(case) if self.baseline is not None else None

    def paired(self, case: Case) -> CaseResult | None:
        if self.baseline is None or self.baseline.case(case) is None:
            return None
        return self.baseline.paired_nospec.get(case.id)

    def earlier(self, base: CaseResult) -> list[CaseResult]:
        assert self.baseline is not None
        return earlier_runs(base, self.baseline, self.history)

    def earlier_paired(self, base: CaseResult) -> list[tuple[CaseResult, CaseResult]]:
        assert self.baseline is not None
        return earlier_pairs(base, self.baseline, self.history)

    def reference(self, config_id: str,
                  run_paired: Mapping[str, CaseResult]) -> BesideReference | None:
        """The no-spec reference of server config ``config_id``: the run's paired no-spec
        trials beside it against the baseline's (:func:`reference_for`). The one builder of
        it: the run judging as it goes (the engine's measurer, with its run's pairs so far)
        and ``compare_runs`` (with the run file's) both ask this."""
        if self.baseline is None:
            return None
        return reference_for(config_id, self.baseline.paired_nospec, run_paired, self.rules)

    def evidence(self, current: CaseResult, *, base: CaseResult | None,
                 paired: CaseResult | None = None, gain_floor: float | None = None,
                 reference: BesideReference | None = None) -> Evidence:
        """One case's evidence. ``base``: the comparable baseline case (the caller has
        decided comparability: the engine by config hash and prompts, ``compare_runs`` by
        refusals), None for the gain alone."""
        if base is None:
            return Evidence(current=current, paired=paired, gain_floor=gain_floor,
                            spreads=self.spreads, labels=self.labels)
        return Evidence(
            current=current, baseline=base, earlier=self.earlier(base), paired=paired,
            base_paired=self.paired(current.case), earlier_paired=self.earlier_paired(base),
            gain_floor=gain_floor, spreads=self.spreads, reference=reference,
            labels=self.labels)
