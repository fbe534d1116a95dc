"""The cost model fitted over every ``k`` of one draft model at one concurrency (pure).

:func:`draft_fit` turns the least-squares fit of
:func:`specperf.analysis.costmodel.fit_draft_cost` over a draft family's spec points
(:mod:`specperf.analysis.spec_points`) into a :class:`DraftFit`: the step cost in ms, the
residual of the fit and the held-out error at each ``k``, and a sentence.

The model has no fixed per-step overhead ``o``, because the data do not support one and
fitting it hurts: ``o`` and ``c`` both fitted on the other two ``k`` make a line through
two noisy points, extrapolated; ``o`` taken from the self-draft config (the target
drafting for itself, so ``c = 1`` and ``E = k + 1`` are known: ``o = E / gain − 1 − k``)
grows with the tokens verified per step at higher concurrency, so it is not a fixed
per-step cost. The held-out errors of each choice on the cpu-tiny run are in
docs/validation.md ("Cost-model fit"). Each :class:`DraftFit` of a self-draft config
reports the ``o`` it implies, so every run repeats this check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from specperf.analysis import costmodel as cm
from specperf.analysis.spec_points import Family, SpecPoint

__all__ = ["DraftFit", "draft_fit"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DraftFit(_Model):
    """The cost model fitted over every k of one draft model at one concurrency.

    Step = ``t_target + k t_draft`` (``1 + k c`` target steps); see the module docstring.
    """

    method: str | None = None
    draft_model: str | None = None
    concurrency: int
    config_ids: list[str]
    ks: list[int]
    target_ms: float = Field(
        description="t_target = no-spec median TPOT (mean over the cases if paired)"
    )
    draft_ms: float = Field(description="t_draft = c x t_target per draft token (>= 0)")
    overhead_ms: float = Field(
        0.0, description="fixed per-step overhead in the model: 0 (not fitted; see self_draft)"
    )
    cost_ratio: float = Field(description="c = t_draft / t_target, least squares over the k")
    overhead_ratio: float = 0.0
    physical: bool = Field(
        description="False when some spec step measured cheaper than one no-spec step"
    )
    residuals: dict[int, float] = Field(
        default_factory=dict, description="k -> in-sample fitted gain / measured gain - 1"
    )
    held_out_errors: dict[int, float] = Field(
        default_factory=dict,
        description="k -> gain predicted from the other k / measured gain - 1",
    )
    self_draft: bool = Field(
        False, description="the draft is the target itself (its server argv says so)"
    )
    implied_overhead_ratio: float | None = Field(
        None,
        description="self-draft only: o = E / gain - 1 - k (mean over its k), the fixed "
        "per-step overhead in target steps if a target-as-draft token costs one target step",
    )
    implied_overhead_ci: tuple[float, float] | None = Field(
        None, description="o from the 95 % CI of the self-draft's measured gain"
    )
    sentence: str = ""


def draft_fit(
    family: Family, conc: int, fam: Sequence[SpecPoint], full: cm.DraftCostFit,
    held: Sequence[cm.HeldOutPrediction | None], self_ids: set[str],
) -> DraftFit:
    target_ms = math.fsum(p.nospec_tpot for p in fam) / len(fam)
    fit = DraftFit(
        method=family[0],
        draft_model=family[1],
        concurrency=conc,
        config_ids=[p.config_id for p in fam],
        ks=sorted({p.k for p in fam}),
        target_ms=target_ms,
        draft_ms=full.cost_ratio * target_ms,
        cost_ratio=full.cost_ratio,
        overhead_ratio=full.overhead_ratio,
        overhead_ms=full.overhead_ratio * target_ms,
        physical=full.physical,
        self_draft=bool(fam) and all(p.config_id in self_ids for p in fam),
    )
    for p, h in zip(fam, held, strict=True):
        fit.residuals[p.k] = full.predicted_gain(p.tokens_per_step, p.k) / p.gain - 1.0
        if h is not None:
            fit.held_out_errors[p.k] = h.error
    if fit.self_draft:
        fit.implied_overhead_ratio = math.fsum(
            cm.self_draft_overhead(p.tokens_per_step, p.gain, p.k) for p in fam
        ) / len(fam)
        p = fam[0]
        if len(fam) == 1 and p.gain_ci is not None:
            lo, hi = p.gain_ci
            fit.implied_overhead_ci = (
                cm.self_draft_overhead(p.tokens_per_step, hi, p.k),
                cm.self_draft_overhead(p.tokens_per_step, lo, p.k),
            )
    fit.sentence = _fit_sentence(fit)
    return fit


def _signed(v: float, fmt: str = ".2f") -> str:
    return ("−" if v < 0 else "+") + format(abs(v), fmt)


def _fit_sentence(fit: DraftFit) -> str:
    name = fit.draft_model or fit.method or "?"
    head = (
        f"{name}{' (self-draft)' if fit.self_draft else ''} at c={fit.concurrency}: step = "
        f"{fit.target_ms:.1f} ms + k × {fit.draft_ms:.2f} ms (c = {fit.cost_ratio:.3f}, "
        f"fitted on {', '.join(fit.config_ids)})"
    )
    if not fit.physical:
        head += "; a spec step measured cheaper than a no-spec step, so the fit is unreliable"
    o = fit.implied_overhead_ratio
    if o is None:
        return head + "."
    ci = fit.implied_overhead_ci
    ci_s = f", 95 % CI {_signed(ci[0])} to {_signed(ci[1])}" if ci else ""
    check = (
        f"; if a target-as-draft token costs one target step, the rest, E / gain − 1 − k = "
        f"{_signed(o)} target steps ({_signed(o * fit.target_ms, '.1f')} ms{ci_s}), is a fixed "
        "per-step overhead"
    )
    if ci is None:
        return head + check + " (no CI: too few requests to bootstrap)."
    if ci[0] <= 0.0 <= ci[1]:
        return head + check + ": consistent with none, as the model assumes."
    if o > 0:
        return head + check + (
            ": above none — here a target-as-draft token costs more than a plain step "
            "(verifying and drafting k + 1 tokens per sequence), which the model keeps in each "
            "draft's own c, not in a shared fixed overhead."
        )
    return head + check + ": below none — a draft pass costs less than a full engine step here."
