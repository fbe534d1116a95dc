"""Acceptance loss vs step cost: a spec config's TPOT change split in two.

A spec config with a pinned-acceptance twin (``[[server_configs]] pinned_acceptance``,
``--perf-attribute``) is also measured on a server whose rejection sampler is vLLM's
synthetic one, pinned to the baseline's per-position acceptance rates. That twin drafts
and verifies exactly as the real server does — same draft, same k, same server version —
and only its acceptance is the baseline's. But its sampler is not the real server's: the
synthetic sampler costs what it costs (on CPU, specperf's port of vLLM's kernels; on GPU,
vLLM's synthetic kernels in place of its rejection sampler). So each side is measured
against the same pair in the baseline — a twin kept with the baseline at the same rates —
and that cost cancels. For TPOT (lower is better):

- **step cost effect** = this run's twin vs the baseline's twin: the same sampler and the
  same acceptance (pinned), only what a step costs differs;
- **acceptance effect** = real ÷ twin, trial by trial, in this run vs in the baseline's
  runs: the gap between the real server and its pinned twin moves only with acceptance
  (the twin's trial follows each real trial on the same machine, so run drift cancels too).

A baseline recorded without a twin at these rates (its first run: there is nothing to pin
to yet) leaves the plain split — acceptance = real vs twin in this run, step cost = twin vs
the baseline's real server — in which the synthetic sampler's own cost counts as step
cost; the attribution's ``reference`` and note say so.

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
from specperf.analysis.stats import (
    Comparison,
    Verdict,
    between_run_spread,
    compare_samples,
    pooled_between_run_spread,
)
from specperf.config.rules import CompareRules
from specperf.schemas import CaseResult

__all__ = ["MIN_RUNS_FOR_STEP_COST", "Attribution", "attribute", "pinned_rates", "same_pin"]

Cause = Literal["acceptance", "step cost"]

#: Kept baseline runs the step-cost side needs before it may name a cause. Its reference
#: is another server start, so only the run-to-run drift tells a change from a start's
#: own offset, and that drift is estimated from the kept runs: from one there is none,
#: and two can agree by chance (quiet on a 2-core VM, two kept runs 1 % apart, the third
#: 19 % faster: judged against the first two, its twin read as a 24 % "improvement").
MIN_RUNS_FOR_STEP_COST = 3

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


def same_pin(a: Sequence[float], b: Sequence[float]) -> bool:
    """Two twins pinned to the same rates (to the digits a pin is written with)."""
    return len(a) == len(b) and all(abs(x - y) <= 10 ** -RATE_DIGITS
                                    for x, y in zip(a, b, strict=True))


class Attribution(BaseModel):
    """One spec case's TPOT change against the baseline, split into its two causes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    case_id: str
    pinned_rates: list[float] = Field(description="the per-position rates the twin was pinned to")
    measured_rates: list[float] = Field(
        description="the twin's measured per-position rates (≈ pinned_rates)")
    total: Comparison = Field(description="TPOT: the real run vs the baseline")
    acceptance: Comparison = Field(
        description="reference 'baseline twin': real ÷ pinned TPOT per trial, this run vs the "
                    "baseline's; reference 'baseline': TPOT, the real run vs the pinned run")
    step_cost: Comparison = Field(
        description="TPOT: the pinned run vs the baseline's pinned runs (reference 'baseline "
                    "twin') or vs the baseline's real runs (reference 'baseline')")
    reference: Literal["baseline twin", "baseline"] = Field(
        "baseline", description="what both sides are measured against: the baseline's own "
                                "twin at the same rates (the synthetic sampler's cost "
                                "cancels), or the baseline's real server only")
    causes: list[str] = Field(
        description="the sides decided a change: 'acceptance', 'step cost' (an improvement "
                    "is named '… (improvement)'); empty: no cause")
    undecided: bool = Field(description="a side is INCONCLUSIVE and neither is decided a change")
    samples: Literal["trials", "requests"]
    note: str | None = None

    def summary(self) -> str:
        """``TPOT +X% [a, b]: acceptance +Y% [..] (real ÷ pinned vs the baseline's), step
        cost +Z% [..] (pinned vs the baseline's pinned) — cause: …``"""
        if self.reference == "baseline twin":
            sides = ("real ÷ pinned vs the baseline's", "pinned vs the baseline's pinned")
        else:
            sides = ("real vs pinned", "pinned vs baseline")
        return (f"{self.case_id}: TPOT {_pct(self.total)}: acceptance {_pct(self.acceptance)} "
                f"({sides[0]}), step cost {_pct(self.step_cost)} ({sides[1]}) — "
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
              rates: Sequence[float], earlier: Sequence[CaseResult] = (),
              base_twins: Sequence[tuple[CaseResult, CaseResult]] = ()) -> Attribution:
    """Split ``cur``'s TPOT change against ``base`` with its pinned-acceptance twin.

    ``earlier``: the baseline case's kept earlier runs. As in every comparison with the
    baseline (:mod:`specperf.analysis.compare`), up to ``baseline_runs`` runs are pooled on
    the baseline side and the spread between their centres widens the intervals that
    cross runs. ``base_twins``: (real, twin) of the baseline's kept runs whose twin was
    pinned to these same rates, newest first; with them the split is measured against the
    baseline's own pair (the module's docstring), else against its real server only."""
    rule = rules.rule("tpot")
    runs = [base, *earlier][: rules.baseline_runs]
    by_trial = min(len(r.trials) for r in [*runs, cur, pinned]) >= rules.min_trials
    # The twin-referenced split pairs trials (a real one, then its twin's): whole pairs only.
    twins = [(r, t) for r, t in base_twins
             if len(r.trials) == len(t.trials) >= rules.min_trials][: rules.baseline_runs]
    values = per_trial if by_trial else per_request
    statistic: Literal["median", "mean"] = "mean" if rule.statistic == "mean" else "median"

    def judge(name: str, b_runs: list[list[float]], c: list[float],
              spread: tuple[float, int] | None = None) -> Comparison:
        """``c`` against the pooled ``b_runs``, widened by their spread when they cross
        runs (``spread``: the spread and its degrees of freedom, when estimated otherwise)."""
        if spread is None and len(b_runs) > 1:
            between = between_run_spread(b_runs, statistic=statistic) or 0.0
            df = None
        else:
            between, df = spread if spread is not None else (0.0, None)
        return compare_samples(
            f"TPOT ({name})", [v for vs in b_runs for v in vs], c, direction=rule.direction,
            min_effect=rule.min_effect, alpha=rules.alpha, statistic=statistic,
            confidence=rules.confidence, n_resamples=rules.n_resamples, seed=rules.seed,
            between_run_sd=between, baseline_runs=len(b_runs), spread_df=df)

    total = judge("run vs baseline", [values(r, "tpot") for r in runs], values(cur, "tpot"))
    notes = []
    if twins and by_trial:
        reference: Literal["baseline twin", "baseline"] = "baseline twin"
        twin_runs = [per_trial(t, "tpot") for _, t in twins]
        # A twin is a server started once per run like the real one, so its centre moves
        # from run to run by the same server-start offset: the spread is estimated from
        # the real and the twin runs together, each around its own level (the sampler's
        # cost sets the twin's). The two servers of one run share that run's machine state
        # (quiet, a low run was low on both), so they are not independent looks at it: the
        # degrees of freedom are capped at the baseline's runs less one.
        spread = pooled_between_run_spread([[per_trial(r, "tpot") for r in runs], twin_runs],
                                           statistic=statistic)
        kept = max(len(runs), len(twins))
        step_cost = judge("pinned vs the baseline's pinned", twin_runs,
                          per_trial(pinned, "tpot"),
                          None if spread is None else (spread[0], min(spread[1], kept - 1)))
        if kept < MIN_RUNS_FOR_STEP_COST:
            step_cost = step_cost.model_copy(update={
                "verdict": Verdict.INCONCLUSIVE,
                "reason": step_cost.reason.rstrip(".") + f"; not decided: {kept} kept "
                          f"baseline run{'s' if kept != 1 else ''}, the step side needs "
                          f"{MIN_RUNS_FOR_STEP_COST} to know the run-to-run drift."})
            notes.append(f"{kept} kept baseline run{'s' if kept != 1 else ''}: step cost is "
                         f"not decided before {MIN_RUNS_FOR_STEP_COST} (keep more runs in the "
                         "baseline)")
        # Within one run the real/twin gap has no run offset to carry (the twin's trial
        # follows each real one), so the baseline's runs pool as one, no spread added.
        acceptance = judge("real ÷ pinned, run vs baseline",
                           [[v for r, t in twins for v in _ratios(r, t)]], _ratios(cur, pinned))
    else:
        reference = "baseline"
        acceptance = judge("run vs pinned", [values(pinned, "tpot")], values(cur, "tpot"))
        step_cost = judge("pinned vs baseline", [values(r, "tpot") for r in runs],
                          values(pinned, "tpot"))
        notes.append("the baseline kept no twin at these rates: step cost is the twin vs the "
                     "baseline's real server, so what the synthetic sampler itself costs "
                     "counts as step cost (record the baseline with the twin: "
                     "--perf-attribute --perf-update-baselines)")
        if len(runs) == 1:
            notes.append("one baseline run: the total and step-cost intervals show no "
                         "run-to-run drift (keep more runs in the baseline)")
    causes: list[str] = []
    for name, comparison in (("acceptance", acceptance), ("step cost", step_cost)):
        if comparison.verdict == Verdict.REGRESSION:
            causes.append(name)
        elif comparison.verdict == Verdict.IMPROVEMENT:
            causes.append(f"{name} (improvement)")
    undecided = not causes and Verdict.INCONCLUSIVE in (acceptance.verdict, step_cost.verdict)
    measured = pinned.acceptance.per_position_rate if pinned.acceptance is not None else []
    if not by_trial:
        notes.insert(0, f"samples are requests (fewer than {rules.min_trials} trials on a "
                        "side): the intervals understate trial-to-trial drift")
    note = "; ".join(notes) or None
    return Attribution(case_id=cur.case.id, pinned_rates=list(rates), measured_rates=measured,
                       total=total, acceptance=acceptance, step_cost=step_cost,
                       reference=reference, causes=causes, undecided=undecided,
                       samples="trials" if by_trial else "requests", note=note)


def _ratios(real: CaseResult, twin: CaseResult) -> list[float]:
    """Per trial: the real server's median TPOT ÷ its twin's in the trial that followed
    (a real trial without a twin's, e.g. a fresh-server confirmation's, has no ratio)."""
    return [r / t for r, t in zip(per_trial(real, "tpot"), per_trial(twin, "tpot"), strict=False)
            if t > 0 and math.isfinite(r) and math.isfinite(t)]
