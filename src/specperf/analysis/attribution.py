"""Acceptance loss vs step cost: a spec config's TPOT change split in two.

A spec config with a pinned-acceptance twin (``[[server_configs]] pinned_acceptance``,
``--perf-attribute``) is also measured on a server whose rejection sampler is vLLM's
synthetic one, pinned to the baseline's per-position acceptance rates. That twin drafts
and verifies exactly as the real server does — same draft, same k, same server version —
and only its acceptance is the baseline's. So, for TPOT (lower is better):

- **acceptance effect** = real run vs pinned run: only acceptance differs;
- **step cost effect** = pinned run vs the baseline's real run: the acceptance is the same
  (the baseline's, by construction), only what a step costs differs.

Each side is judged by the verdict rule every comparison uses
(:func:`specperf.analysis.stats.compare_samples`, with the profile's TPOT rule: its
``min_effect``, α, bootstrap), on per-trial medians when both sides have ``min_trials``
trials, else per request (whose interval understates run-to-run drift: said in the
note). A side whose interval straddles ``1 ± min_effect`` is INCONCLUSIVE; the causes
named are the sides decided REGRESSION (or IMPROVEMENT), and "no cause" when neither side
is decided a change. docs/attribution.md explains the method and its limits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specperf.analysis.samples import per_request, per_trial
from specperf.analysis.stats import Comparison, Verdict, between_run_spread, compare_samples
from specperf.config.rules import CompareRules
from specperf.schemas import CaseResult

__all__ = ["Attribution", "attribute", "pinned_rates"]

Cause = Literal["acceptance", "step cost"]

#: Decimal places of a pinned rate: far finer than any run's counters resolve (one draft
#: in a million), and a stable number in a server's argument list.
RATE_DIGITS = 6


def pinned_rates(cases: Sequence[CaseResult], k: int) -> list[float] | None:
    """The per-position rates to pin a config's twin to: the baseline cases' counters of
    that config pooled (accepted at position i / drafts, summed over its concurrencies),
    as vLLM's ``synthetic_acceptance_rates`` want them — ``k`` unconditional rates,
    non-increasing. None when the baseline has no drafts for it, or other k."""
    drafts = 0.0
    accepted = [0.0] * k
    for c in cases:
        acc = c.acceptance
        if acc is None or not acc.drafts or len(acc.accepted_per_position) != k:
            continue
        drafts += acc.drafts
        for i, a in enumerate(acc.accepted_per_position):
            accepted[i] += a
    if not drafts:
        return None
    rates: list[float] = []
    for a in accepted:
        r = min(max(a / drafts, 0.0), 1.0)
        # Counters make position i+1 ≤ position i exactly; the min only guards rounding.
        rates.append(round(min(r, rates[-1]) if rates else r, RATE_DIGITS))
    return rates


class Attribution(BaseModel):
    """One spec case's TPOT change against the baseline, split into its two causes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    case_id: str
    pinned_rates: list[float] = Field(description="the per-position rates the twin was pinned to")
    measured_rates: list[float] = Field(
        description="the twin's measured per-position rates (≈ pinned_rates)")
    total: Comparison = Field(description="TPOT: the real run vs the baseline")
    acceptance: Comparison = Field(description="TPOT: the real run vs the pinned run")
    step_cost: Comparison = Field(description="TPOT: the pinned run vs the baseline")
    causes: list[str] = Field(
        description="the sides decided a change: 'acceptance', 'step cost' (an improvement "
                    "is named '… (improvement)'); empty: no cause")
    undecided: bool = Field(description="a side is INCONCLUSIVE and neither is decided a change")
    samples: Literal["trials", "requests"]
    note: str | None = None

    def summary(self) -> str:
        """``TPOT +X% [a, b]: acceptance +Y% [..] (real vs pinned), step cost +Z% [..]
        (pinned vs baseline) — cause: …``"""
        return (f"{self.case_id}: TPOT {_pct(self.total)}: acceptance {_pct(self.acceptance)} "
                f"(real vs pinned), step cost {_pct(self.step_cost)} (pinned vs baseline) — "
                f"{self.cause_text()}")

    def cause_text(self) -> str:
        if self.causes:
            return "cause: " + " and ".join(self.causes)
        if self.undecided:
            return "cause undecided (INCONCLUSIVE: an interval straddles the minimum effect)"
        return "no cause (neither side changed beyond the minimum effect)"


def _pct(c: Comparison) -> str:
    if math.isnan(c.ratio):
        return "n/a"
    mid = f"{(c.ratio - 1) * 100:+.1f} %"
    if math.isnan(c.ci_low) or math.isnan(c.ci_high):
        return f"{mid} [no interval] {c.verdict.value.upper()}"
    return (f"{mid} [{(c.ci_low - 1) * 100:+.1f}, {(c.ci_high - 1) * 100:+.1f}] "
            f"{c.verdict.value.upper()}")


def attribute(base: CaseResult, cur: CaseResult, pinned: CaseResult, rules: CompareRules,
              rates: Sequence[float], earlier: Sequence[CaseResult] = ()) -> Attribution:
    """Split ``cur``'s TPOT change against ``base`` with its pinned-acceptance twin.

    ``earlier``: the baseline case's kept earlier runs. As in every comparison with the
    baseline (:mod:`specperf.analysis.compare`), up to ``baseline_runs`` runs are pooled on
    the baseline side and the spread between their centres widens the intervals that
    cross runs — total and step cost. The acceptance side compares two servers measured
    in the same run, trial by trial interleaved, so no run-to-run drift lies between them."""
    rule = rules.rule("tpot")
    runs = [base, *earlier][: rules.baseline_runs]
    by_trial = min(min(len(r.trials) for r in runs), len(cur.trials),
                   len(pinned.trials)) >= rules.min_trials
    values = per_trial if by_trial else per_request
    statistic: Literal["median", "mean"] = "mean" if rule.statistic == "mean" else "median"
    base_runs = [values(r, "tpot") for r in runs]
    between = between_run_spread(base_runs, statistic=statistic) if len(runs) > 1 else 0.0

    def judge(name: str, b: list[float], c: CaseResult, *, across_runs: bool) -> Comparison:
        return compare_samples(
            f"TPOT ({name})", b, values(c, "tpot"), direction=rule.direction,
            min_effect=rule.min_effect, alpha=rules.alpha, statistic=statistic,
            confidence=rules.confidence, n_resamples=rules.n_resamples, seed=rules.seed,
            between_run_sd=between if across_runs else 0.0,
            baseline_runs=len(runs) if across_runs else 1)

    pooled = [v for vs in base_runs for v in vs]
    total = judge("run vs baseline", pooled, cur, across_runs=True)
    acceptance = judge("run vs pinned", values(pinned, "tpot"), cur, across_runs=False)
    step_cost = judge("pinned vs baseline", pooled, pinned, across_runs=True)
    causes: list[str] = []
    for name, comparison in (("acceptance", acceptance), ("step cost", step_cost)):
        if comparison.verdict == Verdict.REGRESSION:
            causes.append(name)
        elif comparison.verdict == Verdict.IMPROVEMENT:
            causes.append(f"{name} (improvement)")
    undecided = not causes and Verdict.INCONCLUSIVE in (acceptance.verdict, step_cost.verdict)
    measured = pinned.acceptance.per_position_rate if pinned.acceptance is not None else []
    notes = []
    if not by_trial:
        notes.append(f"samples are requests (fewer than {rules.min_trials} trials on a "
                     "side): the intervals understate trial-to-trial drift")
    if len(runs) == 1:
        notes.append("one baseline run: the total and step-cost intervals show no "
                     "run-to-run drift (keep more runs in the baseline)")
    note = "; ".join(notes) or None
    return Attribution(case_id=cur.case.id, pinned_rates=list(rates), measured_rates=measured,
                       total=total, acceptance=acceptance, step_cost=step_cost, causes=causes,
                       undecided=undecided, samples="trials" if by_trial else "requests",
                       note=note)
