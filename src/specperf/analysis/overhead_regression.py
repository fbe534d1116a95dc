"""Overhead regressions: acceptance unchanged against a baseline, but the gain fell below
what the baseline's costs predict (pure, no I/O).

:func:`overhead_findings` compares a run's spec points (:mod:`specperf.analysis.spec_points`)
with a baseline's, case by case, and names the side of the speculative step that moved:
drafting or verification. ``specperf advise --baseline`` and the advice of a run with a
baseline report them (:func:`specperf.analysis.advice.advise`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specperf.analysis.spec_points import SpecPoint, by_family, spec_points
from specperf.schemas import Baseline, RunResult

__all__ = [
    "DEFAULT_ACCEPTANCE_TOLERANCE",
    "DEFAULT_TOLERANCE",
    "OverheadFinding",
    "overhead_findings",
]

#: Default relative tolerance of the overhead-regression finding (gain vs prediction).
DEFAULT_TOLERANCE = 0.15
#: Default absolute per-position tolerance for "acceptance unchanged" (as the acceptance
#: gate's ``baseline_tolerance``).
DEFAULT_ACCEPTANCE_TOLERANCE = 0.02


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OverheadFinding(_Model):
    """Acceptance unchanged against the baseline, but the gain fell below prediction."""

    config_id: str
    concurrency: int
    k: int
    baseline_gain: float
    measured_gain: float
    predicted_gain: float = Field(
        description="gain the baseline's step cost predicts at today's acceptance"
    )
    shortfall: float = Field(description="measured / predicted - 1 (negative)")
    tolerance: float
    acceptance_max_delta: float = Field(description="max |Δ p_i| over positions")
    acceptance_tolerance: float
    moved: Literal["drafting", "verification"]
    draft_ms_baseline: float
    draft_ms_current: float
    verify_ms_baseline: float = Field(description="target-side cost per step: t + o")
    verify_ms_current: float
    nospec_tpot_ms_baseline: float
    nospec_tpot_ms_current: float
    separable: bool = Field(
        description="True when both runs had >= 2 k of this draft, so the verification "
        "overhead was fitted; False: it is taken as the no-spec TPOT"
    )
    message: str


# --------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class _Costs:
    target_ms: float  # the (mean) no-spec TPOT of the points fitted: for c and o ratios
    draft_ms: float
    overhead_ms: float
    separable: bool
    physical: bool

    @property
    def c(self) -> float:
        return self.draft_ms / self.target_ms

    @property
    def o(self) -> float:
        return self.overhead_ms / self.target_ms

    @property
    def verify_ms(self) -> float:
        return self.target_ms + self.overhead_ms


def _separable_fit(points: Sequence[SpecPoint]) -> _Costs:
    """Fit ``step_k - t_k = o + k d`` (o, d >= 0) over points; o = 0 with a single k.

    Only the overhead finding uses this: it splits each run's *measured* steps into a
    target side (t + o) and a drafting side to say which one moved between two runs. The
    advice's predictions use :func:`specperf.analysis.costmodel.fit_draft_cost` (no o), which
    extrapolates to a held-out k without amplifying the noise of two points.
    ``t_k`` is each point's own no-spec TPOT (paired measurements differ slightly).
    """
    target_ms = math.fsum(p.nospec_tpot for p in points) / len(points)
    ys = [p.step_ms - p.nospec_tpot for p in points]
    physical = all(y >= 0 for y in ys)
    ks = [p.k for p in points]
    if len(set(ks)) < 2:
        d = max(0.0, math.fsum(k * y for k, y in zip(ks, ys, strict=True)) / sum(k * k for k in ks))
        return _Costs(target_ms, d, 0.0, False, physical)
    import numpy as np
    from scipy.optimize import nnls

    a = np.array([[1.0, float(k)] for k in ks])
    (o, d), _ = nnls(a, np.array(ys, dtype=float))
    return _Costs(target_ms, float(d), float(o), True, physical)


# --------------------------------------------------------------------------- finding


def overhead_findings(
    run: RunResult,
    baseline: RunResult | Baseline,
    tolerance: float = DEFAULT_TOLERANCE,
    *,
    acceptance_tolerance: float = DEFAULT_ACCEPTANCE_TOLERANCE,
) -> list[OverheadFinding]:
    """Spec cases whose acceptance is unchanged but whose gain fell below prediction.

    For each spec case present (with a no-spec TPOT at its concurrency) in both runs:

    1. *Acceptance unchanged*: every per-position yield ``p_i`` within
       ``acceptance_tolerance`` (absolute) of the baseline's. A changed acceptance is the
       acceptance gate's business, not an overhead finding.
    2. *Prediction*: the baseline's measured speculative step cost, relative to its no-spec
       TPOT, at today's tokens/step: ``predicted = t_b · E_now / step_b`` (the baseline
       gain, corrected for the small acceptance change allowed by 1).
    3. *Finding* when ``measured < predicted × (1 − tolerance)``.
    4. *Attribution*: the step cost is split into a target side ``V = t + o``
       (verification: one target pass over k+1 tokens plus per-step overhead) and a
       drafting side ``k·d``, in both runs. Since the gain is ``E·t / (V + k·d)``, each side
       is measured in no-spec steps (divided by the same run's ``t``), and the finding names
       the side that grew more, with both numbers in ms and in no-spec steps. (A target
       that got slower everywhere, plain decoding included, moves neither and raises no
       finding: that is the TPOT gate's business.) With ≥ 2 k of the same draft model at
       that concurrency in both runs, ``o`` and ``d`` are fitted; otherwise ``V`` is taken
       as the no-spec TPOT and extra verification cost is indistinguishable from drafting
       (the message says so).
    """
    if not 0.0 <= tolerance < 1.0:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    cur_points, _ = spec_points(run)
    base_points, _ = spec_points(baseline)
    base_idx = {(p.config_id, p.concurrency): p for p in base_points}
    cur_groups, base_groups = by_family(cur_points), by_family(base_points)
    findings: list[OverheadFinding] = []
    for p in cur_points:
        b = base_idx.get((p.config_id, p.concurrency))
        if b is None or b.k != p.k or len(b.positions) != len(p.positions):
            continue
        deltas = [abs(x - y) for x, y in zip(p.positions, b.positions, strict=True)]
        max_delta = max(deltas, default=0.0)
        if not p.positions or max_delta > acceptance_tolerance + 1e-12:
            continue
        predicted = b.nospec_tpot * p.tokens_per_step / b.step_ms
        if p.gain >= predicted * (1.0 - tolerance):
            continue
        fam_c = cur_groups[(p.family, p.concurrency)]
        fam_b = base_groups.get((b.family, b.concurrency), [b])
        sep = len({q.k for q in fam_c}) >= 2 and len({q.k for q in fam_b}) >= 2
        cc, cb = (
            (_separable_fit(fam_c), _separable_fit(fam_b)) if sep
            else (_separable_fit([p]), _separable_fit([b]))
        )
        # this case's own plain step on each side: V = t + o
        cc, cb = replace(cc, target_ms=p.nospec_tpot), replace(cb, target_ms=b.nospec_tpot)
        # The gain is E·t / (V + k·d): what lowers it at unchanged E is a side of the step
        # growing relative to a plain target step t of the same run, so compare the two
        # sides in units of t (a target that got slower everywhere moves neither).
        d_verify = cc.verify_ms / cc.target_ms - cb.verify_ms / cb.target_ms
        d_draft = p.k * (cc.draft_ms / cc.target_ms - cb.draft_ms / cb.target_ms)
        moved: Literal["drafting", "verification"] = (
            "verification" if d_verify > d_draft else "drafting"
        )
        findings.append(
            OverheadFinding(
                config_id=p.config_id,
                concurrency=p.concurrency,
                k=p.k,
                baseline_gain=b.gain,
                measured_gain=p.gain,
                predicted_gain=predicted,
                shortfall=p.gain / predicted - 1.0,
                tolerance=tolerance,
                acceptance_max_delta=max_delta,
                acceptance_tolerance=acceptance_tolerance,
                moved=moved,
                draft_ms_baseline=cb.draft_ms,
                draft_ms_current=cc.draft_ms,
                verify_ms_baseline=cb.verify_ms,
                verify_ms_current=cc.verify_ms,
                nospec_tpot_ms_baseline=b.nospec_tpot,
                nospec_tpot_ms_current=p.nospec_tpot,
                separable=sep,
                message=_finding_message(p, b, predicted, max_delta, tolerance,
                                         acceptance_tolerance, moved, cb, cc, sep,
                                         _same_vllm(run, baseline)),
            )
        )
    return findings


def _same_vllm(run: RunResult, baseline: RunResult | Baseline) -> str | None:
    """The vLLM version both sides ran, when it is known and the same: then a step that got
    slower is not a vLLM release's doing, and the finding must not say it is."""
    mine, theirs = run.provenance.vllm_version, baseline.provenance.vllm_version
    return mine if mine and mine == theirs else None


def _rel(new: float, old: float) -> str:
    return f"{(new / old - 1.0) * 100:+.0f} %" if old > 0 else "n/a"


def _finding_message(
    p: SpecPoint, b: SpecPoint, predicted: float, max_delta: float, tol: float, acc_tol: float,
    moved: str, cb: _Costs, cc: _Costs, sep: bool, same_vllm: str | None = None,
) -> str:
    head = (
        f"overhead regression in {p.config_id} at c={p.concurrency}: measured gain "
        f"{p.gain:.2f}× is {abs(p.gain / predicted - 1) * 100:.0f} % below the "
        f"{predicted:.2f}× the baseline's costs predict at today's acceptance (baseline gain "
        f"{b.gain:.2f}×, tolerance {tol * 100:.0f} %), while acceptance is unchanged (max "
        f"per-position change {max_delta:.3f} ≤ {acc_tol:.3f})."
    )
    k = p.k
    draft = (
        f"drafting {cb.draft_ms:.2f} → {cc.draft_ms:.2f} ms per draft token "
        f"({_rel(cc.draft_ms, cb.draft_ms)}; k={k} of them = {k * cb.c:.2f} → {k * cc.c:.2f} "
        "no-spec steps)"
    )
    verify = (
        f"verification/target step {cb.verify_ms:.1f} → {cc.verify_ms:.1f} ms "
        f"({_rel(cc.verify_ms, cb.verify_ms)}; "
        + (
            f"{cb.verify_ms / cb.target_ms:.2f} → {cc.verify_ms / cc.target_ms:.2f} no-spec steps)"
            if sep
            else "taken as the no-spec TPOT)"
        )
    )
    plain = f"no-spec TPOT {b.nospec_tpot:.1f} → {p.nospec_tpot:.1f} ms"
    side, first, second = (("drafting", draft, verify) if moved == "drafting"
                           else ("verifying (the target-side step)", verify, draft))
    if same_vllm is None:
        who = f" vLLM got slower at {side}, not worse at accepting: "
    else:
        who = (f" The step got slower at {side} with the same vLLM {same_vllm} on both sides, "
               "so not a vLLM release's doing (the draft, the serving setup or the machine), "
               "and not worse at accepting: ")
    verdict = f"{who}{first}; {second}; {plain}."
    if not sep:
        verdict += (
            " (With one k of this draft per run the verification step is taken to be the "
            "no-spec TPOT, so extra verification overhead counts as drafting; measure a second "
            "k of the same draft to separate them.)"
        )
    return head + verdict
