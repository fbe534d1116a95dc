"""Explain a run: cost-model advice per server config and concurrency (pure, no I/O).

From one :class:`~specperf.schemas.RunResult` this builds a :class:`RunAdvice`:

* per spec case (server config × concurrency): the measured gain (no-spec median TPOT /
  spec median TPOT, same run and concurrency; the no-spec side is the case's *paired*
  no-spec trials, ``RunResult.paired_nospec``, when the run has them), the step yield
  ``E = 1 + Σ p_i`` from the per-position counters, the fitted cost ratio, a *predicted*
  gain, the break-even acceptance, the best ``k' ≤ k`` and a sentence saying all that;
* per server config: the crossover concurrency at which speculation stops beating the
  no-spec config (interpolated between measured concurrencies);
* per draft model and concurrency: the cost model fitted from all its ``k``, the residual
  of that fit at each ``k``, and -- for a self-draft config -- the fixed per-step overhead
  it implies;
* with a baseline: **overhead-regression** findings (acceptance unchanged but the gain
  fell below what the baseline's costs predict), naming what moved.

The cost model
--------------
(:mod:`specperf.analysis.costmodel` has the derivation.) In units of the case's own no-spec step
``t_target`` (its median TPOT at that concurrency, paired trials where the run has them),
a speculative step of ``k`` draft tokens measures ``s = spec_TPOT x E / t_target = E /
gain`` and is modelled as ``s = 1 + k c``: one target pass plus ``c`` per draft token,
where ``c = t_draft / t_target`` also carries the target's extra cost per extra verified
token (linear in ``k`` too). ``c`` is fitted per draft model and concurrency by least
squares over its ``k`` (:func:`specperf.analysis.costmodel.fit_draft_cost`); ``t_draft = c x
t_target`` in ms.

The model has no fixed per-step overhead ``o``, because the data do not support one and
fitting it hurts: ``o`` and ``c`` both fitted on the other two ``k`` make a line through
two noisy points, extrapolated; ``o`` taken from the self-draft config (the target
drafting for itself, so ``c = 1`` and ``E = k + 1`` are known: ``o = E / gain − 1 − k``)
grows with the tokens verified per step at higher concurrency, so it is not a fixed
per-step cost. The held-out errors of each choice on the cpu-tiny run are in
docs/validation.md ("Cost-model fit"). Each :class:`DraftFit` of a self-draft config
reports the ``o`` it implies, so every run repeats this check.

Honest predictions
------------------
Fitting the costs of a config from its own TPOT and then "predicting" its gain returns
the measured gain by construction. So the *predicted gain* of a config is computed from
``c`` fitted on the **other** ``k`` of the same draft model at the same concurrency
(leave-one-out, :func:`specperf.analysis.costmodel.held_out_predictions`): for draft k=1,2,3 the
k=3 prediction uses only the k=1 and k=2 gains, and its own measured acceptance. That
makes "predicted within 15 % of measured" a real test of the model. Where a draft model
was run with a single ``k`` there is nothing to hold out; the prediction is then marked
``basis="self"`` (tautological) and excluded from :meth:`RunAdvice.prediction_errors`.
The measured gain comes with a bootstrap 95 % CI (per-request TPOTs, ratio of medians) so
a prediction error can be read against the measurement's own noise.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specperf.analysis import costmodel as cm
from specperf.analysis.compare import per_request
from specperf.analysis.stats import ratio_ci
from specperf.schemas import Baseline, CaseResult, RunResult

__all__ = [
    "CaseAdvice",
    "ConfigAdvice",
    "DraftFit",
    "OverheadFinding",
    "RunAdvice",
    "advise",
    "overhead_findings",
]

#: Default relative tolerance of the overhead-regression finding (gain vs prediction).
DEFAULT_TOLERANCE = 0.15
#: Default absolute per-position tolerance for "acceptance unchanged" (as the acceptance
#: gate's ``baseline_tolerance``).
DEFAULT_ACCEPTANCE_TOLERANCE = 0.02
#: Methods whose counters only count steps that carried a draft.
_LOOKUP_METHODS = {"ngram", "suffix"}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- result models


class CaseAdvice(_Model):
    """Cost-model figures for one spec case (server config × concurrency)."""

    config_id: str
    config_label: str
    concurrency: int
    method: str | None = None
    draft_model: str | None = None
    k: int
    nospec_tpot_ms: float | None = Field(None, description="median, same run and concurrency")
    nospec_source: Literal["paired", "same-run"] | None = Field(
        None,
        description="paired: no-spec trials interleaved with this case's (RunResult."
        "paired_nospec); same-run: the no-spec config's case at this concurrency",
    )
    spec_tpot_ms: float | None = Field(None, description="median")
    positions: list[float] = Field(
        default_factory=list, description="p_i = Δaccepted_per_pos[i] / Δdrafts, i < k"
    )
    tokens_per_step: float | None = Field(None, description="E = 1 + Σ p_i")
    draft_acceptance_rate: float | None = Field(None, description="accepted / proposed = (E-1)/k")
    iid_acceptance: float | None = Field(None, description="i.i.d. a with E(a, k) = E")
    measured_gain: float | None = Field(None, description="no-spec TPOT / spec TPOT")
    measured_gain_ci: tuple[float, float] | None = Field(
        None,
        description="95 % bootstrap CI of the measured gain (per-request TPOTs, ratio of "
        "medians); None without >= 5 requests a side",
    )
    point_draft_ms: float | None = Field(
        None, description="t_draft fitted from this case alone (overhead folded in)"
    )
    point_cost_ratio: float | None = Field(None, description="point_draft_ms / no-spec TPOT")
    point_fit_physical: bool | None = None
    cost_ratio: float | None = Field(
        None, description="c = t_draft / t_target of the draft model's fit over all its k at "
        "this concurrency (step = 1 + k c target steps)"
    )
    overhead_ratio: float | None = Field(
        None, description="o / t_target: the model's fixed per-step overhead (0: not fitted)"
    )
    costs_fit: bool | None = Field(
        None, description="False when a spec step measured cheaper than a no-spec step"
    )
    predicted_gain: float | None = None
    prediction_basis: Literal["other-k", "self"] | None = Field(
        None,
        description="other-k: costs fitted on the other k of the same draft (a real "
        "prediction); self: fitted on this case's own TPOT (equals measured by construction)",
    )
    prediction_from_k: list[int] = Field(default_factory=list)
    prediction_from: list[str] = Field(
        default_factory=list, description="config ids whose TPOTs fitted the predicting costs"
    )
    prediction_cost_ratio: float | None = Field(
        None, description="c of the fit the prediction used (other k, or this case for self)"
    )
    prediction_error: float | None = Field(None, description="predicted / measured - 1")
    break_even_acceptance: float | None = Field(
        None, description="i.i.d. acceptance at which this k ties no-spec (None: never)"
    )
    best_k: int | None = Field(None, description="best k' <= k from the counters; 0 = don't")
    best_k_speedup: float | None = Field(
        None, description="predicted time(k) / time(best k') - 1 (0 when best k' = k)"
    )
    larger_k_bound: float | None = Field(
        None,
        description="upper bound on time(k) / time(k+1) - 1 if position k+1 were accepted "
        "as often as position k; <= 0 means a larger k cannot help",
    )
    notes: list[str] = Field(default_factory=list)
    sentence: str = ""

    @property
    def case_id(self) -> str:
        return f"{self.config_id}-c{self.concurrency}"


class ConfigAdvice(_Model):
    """Per spec server config: gain versus concurrency and where it crosses 1."""

    config_id: str
    config_label: str
    method: str | None = None
    draft_model: str | None = None
    k: int | None = None
    gains: list[tuple[int, float]] = Field(
        default_factory=list, description="(concurrency, measured gain), increasing concurrency"
    )
    crossover_concurrency: float | None = Field(
        None, description="where the measured gain crosses 1 (log2-interpolated); None: no crossing"
    )
    crossover_direction: Literal["stops", "starts"] | None = None
    sentence: str = ""


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


class RunAdvice(_Model):
    kind: Literal["specperf-advice"] = "specperf-advice"
    run_dir: str | None = None
    profile_name: str | None = None
    hardware: str | None = None
    vllm_version: str | None = None
    nospec_config_id: str | None = None
    cases: list[CaseAdvice] = Field(default_factory=list)
    configs: list[ConfigAdvice] = Field(default_factory=list)
    fits: list[DraftFit] = Field(default_factory=list)
    findings: list[OverheadFinding] = Field(default_factory=list)
    baseline: str | None = Field(None, description="what the findings compared against")
    notes: list[str] = Field(default_factory=list)

    def case(self, config_id: str, concurrency: int) -> CaseAdvice | None:
        return next(
            (c for c in self.cases if c.config_id == config_id and c.concurrency == concurrency),
            None,
        )

    def config(self, config_id: str) -> ConfigAdvice | None:
        return next((c for c in self.configs if c.config_id == config_id), None)

    def prediction_errors(self, concurrency: int | None = None) -> dict[str, float]:
        """case id -> predicted/measured - 1, for real (other-k) predictions only."""
        return {
            c.case_id: c.prediction_error
            for c in self.cases
            if c.prediction_basis == "other-k"
            and c.prediction_error is not None
            and (concurrency is None or c.concurrency == concurrency)
        }


# --------------------------------------------------------------------------- measurements


@dataclass
class _Point:
    """One spec case with everything the model needs, or the reason it cannot be used."""

    case: CaseResult
    k: int
    positions: list[float]
    tokens_per_step: float
    spec_tpot: float
    nospec_tpot: float
    nospec_source: Literal["paired", "same-run"]
    notes: list[str] = field(default_factory=list)
    gain_ci: tuple[float, float] | None = None

    @property
    def family(self) -> tuple[str | None, str | None]:
        return (self.case.method, self.case.draft_model)

    @property
    def concurrency(self) -> int:
        return self.case.case.concurrency

    @property
    def config_id(self) -> str:
        return self.case.case.config_id

    @property
    def step_ms(self) -> float:
        return self.spec_tpot * self.tokens_per_step

    @property
    def gain(self) -> float:
        return self.nospec_tpot / self.spec_tpot


def _is_spec(c: CaseResult) -> bool:
    return c.method is not None or c.num_speculative_tokens is not None or c.draft_model is not None


def _nospec_id(cases: Sequence[CaseResult]) -> str | None:
    ids = [c.case.config_id for c in cases if not _is_spec(c)]
    return ids[0] if ids else None


def _tpot(c: CaseResult | None) -> float | None:
    """Median TPOT; the mean where only that was recorded (published, provisional figures)."""
    if c is None:
        return None
    for v in (c.tpot_ms.median, c.tpot_ms.mean):
        if v is not None and math.isfinite(v) and v > 0:
            return float(v)
    return None


def _tpot_note(*cases: CaseResult | None) -> list[str]:
    if any(c is not None and c.tpot_ms.median is None and c.tpot_ms.mean for c in cases):
        return ["TPOT is a mean (no median was recorded, e.g. published figures)"]
    return []


@dataclass
class _Skipped:
    """A spec case the model cannot use, with what was measured of it."""

    notes: list[str]
    spec_tpot: float | None = None
    nospec_tpot: float | None = None
    nospec_source: Literal["paired", "same-run"] | None = None

    @property
    def gain(self) -> float | None:
        if self.spec_tpot is None or self.nospec_tpot is None:
            return None
        return self.nospec_tpot / self.spec_tpot


def _k_of(c: CaseResult) -> int | None:
    if c.num_speculative_tokens:
        return int(c.num_speculative_tokens)
    if c.acceptance is not None and c.acceptance.accepted_per_position:
        return len(c.acceptance.accepted_per_position)
    return None


def _positions(c: CaseResult, k: int) -> tuple[list[float], float | None, list[str]]:
    """(p_0..p_{k-1}, E, notes) from the case's counter deltas."""
    acc = c.acceptance
    notes: list[str] = []
    if acc is None:
        return [], None, ["no spec-decode counters were scraped for this case"]
    if not acc.drafts:
        return [], None, ["no drafts were proposed during this case"]
    raw = acc.per_position_rate
    problems = cm.check_positions(raw[:k])
    if problems:
        notes.append("per-position counters are inconsistent: " + "; ".join(problems))
    p = [min(max(x, 0.0), 1.0) for x in raw[:k]]
    if len(p) == k:
        e = 1.0 + math.fsum(p)
    else:
        notes.append(
            f"only {len(p)} of {k} per-position counters present; tokens/step taken from "
            "accepted/drafts"
        )
        e = 1.0 + acc.accepted_tokens / acc.drafts
    return p, min(max(e, 1.0), float(k + 1)), notes


def _points(
    result: RunResult | Baseline,
) -> tuple[list[_Point], dict[tuple[str, int], _Skipped]]:
    """Usable spec points, and the reasons other spec cases are unusable.

    The no-spec TPOT of a spec case is its *paired* no-spec measurement (trials interleaved
    with its own, ``RunResult.paired_nospec``) when the run has one, else the no-spec
    config's case at the same concurrency.
    """
    cases = result.cases
    paired: dict[str, CaseResult] = dict(getattr(result, "paired_nospec", None) or {})
    nospec_id = _nospec_id(cases)
    nospec = {
        c.case.concurrency: c for c in cases if nospec_id and c.case.config_id == nospec_id
    }
    points: list[_Point] = []
    skipped: dict[tuple[str, int], _Skipped] = {}
    for c in cases:
        if not _is_spec(c):
            continue
        key = (c.case.config_id, c.case.concurrency)
        spec = _tpot(c)
        source: Literal["paired", "same-run"] = "paired"
        ref = paired.get(c.case.id)
        base = _tpot(ref)
        if base is None:
            source, ref = "same-run", nospec.get(c.case.concurrency)
            base = _tpot(ref)
        k = _k_of(c)
        if k is None:
            skipped[key] = _Skipped(["k (num_speculative_tokens) is unknown"], spec, base,
                                    source if base is not None else None)
            continue
        p, e, notes = _positions(c, k)
        notes = _tpot_note(c, ref) + notes
        if spec is None:
            notes.append("no spec TPOT was measured")
        if base is None:
            notes.append(
                "no no-spec TPOT at this concurrency in this run"
                if nospec_id or paired
                else "the run has no no-spec config to compare with"
            )
        if e is None or spec is None or base is None:
            skipped[key] = _Skipped(notes, spec, base, source if base is not None else None)
            continue
        if c.method in _LOOKUP_METHODS:
            notes.append(
                f"{c.method} proposes only when it finds a match: counters cover steps with a "
                "draft, so tokens/step overstates the yield and the fitted draft cost absorbs it"
            )
        ci = None
        if c.tpot_ms.median is not None and ref is not None and ref.tpot_ms.median is not None:
            # the gain is a ratio of medians of per-request TPOTs: bootstrap it the same way
            ci = ratio_ci(per_request(ref, "tpot"), per_request(c, "tpot"))
        points.append(_Point(c, k, p, e, spec, base, source, notes, ci))
    return points, skipped


def _option(argv: Sequence[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def _self_draft_ids(result: RunResult | Baseline) -> set[str]:
    """Config ids whose server drafts with the target itself (``--model`` = spec ``model``).

    Read from the run's server argv; a baseline records none, so it has no self-draft.
    """
    out: set[str] = set()
    for srv in getattr(result, "servers", None) or []:
        model = _option(srv.argv, "--model")
        spec = _option(srv.argv, "--speculative-config")
        if model is None or spec is None:
            continue
        try:
            draft = json.loads(spec).get("model")
        except (ValueError, AttributeError):
            continue
        if isinstance(draft, str) and draft.rstrip("/") == model.rstrip("/"):
            out.add(srv.config_id)
    return out


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


def _separable_fit(points: Sequence[_Point]) -> _Costs:
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


_Family = tuple[str | None, str | None]  # (method, draft model)


def _groups(points: Iterable[_Point]) -> dict[tuple[_Family, int], list[_Point]]:
    g: dict[tuple[_Family, int], list[_Point]] = defaultdict(list)
    for p in points:
        g[(p.family, p.concurrency)].append(p)
    return g


# --------------------------------------------------------------------------- wording


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def _pct(v: float) -> str:
    r = round(v * 100)
    return f"{'+' if r >= 0 else '−'}{abs(r):.0f} %"


def _ks(ks: Sequence[int]) -> str:
    return ",".join(str(k) for k in ks)


def _sentence(a: CaseAdvice) -> str:
    head = f"{a.config_id} at c={a.concurrency}: "
    if a.tokens_per_step is None or a.measured_gain is None:
        why = "; ".join(a.notes) or "missing measurements"
        if a.measured_gain is not None:
            return f"{head}measured gain {_x(a.measured_gain)}; no cost model: {why}."
        return f"{head}no advice: {why}."
    parts = [
        f"k={a.k} accepts {a.tokens_per_step - 1:.2f} draft tokens/step "
        f"({a.tokens_per_step:.2f} tokens/step with the bonus token)"
    ]
    if a.costs_fit is False:
        parts.append(
            "costs do not fit (a speculative step measured cheaper than a no-spec step: noisy "
            "or non-comparable TPOTs)"
        )
    elif a.cost_ratio is not None:
        parts.append(f"drafting costs {a.cost_ratio:.2f}× a target step per draft token")
    if a.iid_acceptance is not None and a.costs_fit:
        if a.break_even_acceptance is None:
            parts.append(
                f"acceptance {a.iid_acceptance:.2f}, but no acceptance breaks even at this k"
            )
        else:
            parts.append(
                f"acceptance {a.iid_acceptance:.2f} vs break-even {a.break_even_acceptance:.2f}"
            )
    g = f"measured gain {_x(a.measured_gain)}"
    if a.measured_gain_ci is not None:
        g += f" (95 % CI {a.measured_gain_ci[0]:.2f}–{a.measured_gain_ci[1]:.2f})"
    if a.predicted_gain is not None and a.prediction_basis == "other-k":
        g += (
            f" vs {_x(a.predicted_gain)} predicted from k={_ks(a.prediction_from_k)}"
            f" ({', '.join(a.prediction_from)}; {_pct(a.prediction_error or 0.0)})"
        )
    parts.append(g)
    if a.best_k is not None:
        if a.best_k == 0:
            parts.append(f"no k' ≤ {a.k} beats no-spec here: don't speculate at this concurrency")
        elif a.best_k < a.k and a.best_k_speedup is not None:
            parts.append(f"best k'={a.best_k} would be {a.best_k_speedup * 100:.0f} % faster")
        else:
            tail = f"k={a.k} is the best k' ≤ {a.k}"
            if a.larger_k_bound is not None and a.larger_k_bound > 0.005:
                tail += f"; k={a.k + 1} could be up to {a.larger_k_bound * 100:.0f} % faster"
            parts.append(tail)
    return head + "; ".join(parts) + "."


def _config_sentence(cfg: ConfigAdvice) -> str:
    head = f"{cfg.config_id}: "
    if not cfg.gains:
        return head + "no measured gain at any concurrency."
    lo, hi = cfg.gains[0], cfg.gains[-1]
    span = f"gain {lo[1]:.2f}× at c={lo[0]}" + (
        f" → {hi[1]:.2f}× at c={hi[0]}" if len(cfg.gains) > 1 else ""
    )
    if cfg.crossover_concurrency is not None:
        verb = "stops beating" if cfg.crossover_direction == "stops" else "starts beating"
        return f"{head}{verb} no-spec at concurrency ≈ {cfg.crossover_concurrency:.1f} ({span})."
    cs = [c for c, _ in cfg.gains]
    rng = f"{cs[0]}–{cs[-1]}" if len(cs) > 1 else f"{cs[0]}"
    if all(g > 1 for _, g in cfg.gains):
        return (
            f"{head}beats no-spec at every measured concurrency ({rng}; {span}); "
            "no crossover in range."
        )
    if all(g < 1 for _, g in cfg.gains):
        return f"{head}slower than no-spec at every measured concurrency ({rng}; {span})."
    return f"{head}{span}."


# --------------------------------------------------------------------------- advice


def _case_advice(
    p: _Point,
    fam: Sequence[_Point],
    full: cm.DraftCostFit,
    held: cm.HeldOutPrediction | None,
) -> CaseAdvice:
    """Advice for point ``p`` of draft family ``fam``: ``full`` is the fit over all its k,
    ``held`` the prediction of ``p`` from the family's other k (None: no other k)."""
    c = p.case
    a = CaseAdvice(
        config_id=p.config_id,
        config_label=c.config_label,
        concurrency=p.concurrency,
        method=c.method,
        draft_model=c.draft_model,
        k=p.k,
        nospec_tpot_ms=p.nospec_tpot,
        spec_tpot_ms=p.spec_tpot,
        positions=p.positions,
        tokens_per_step=p.tokens_per_step,
        draft_acceptance_rate=cm.draft_acceptance_rate(p.tokens_per_step, p.k),
        iid_acceptance=cm.iid_acceptance_from_tokens_per_step(p.tokens_per_step, p.k),
        measured_gain=p.gain,
        measured_gain_ci=p.gain_ci,
        notes=list(p.notes),
    )
    point = cm.fit_cost_ratio(p.nospec_tpot, p.spec_tpot, p.tokens_per_step, p.k)
    a.point_draft_ms, a.point_cost_ratio = point.draft_ms, point.cost_ratio
    a.point_fit_physical = point.physical
    if not point.physical and point.reason:
        a.notes.append(point.reason)
    a.nospec_source = p.nospec_source
    c_full, o_full = full.cost_ratio, full.overhead_ratio
    a.cost_ratio, a.overhead_ratio, a.costs_fit = c_full, o_full, full.physical

    if held is not None:
        a.predicted_gain = held.predicted_gain
        a.prediction_basis = "other-k"
        a.prediction_from_k = held.from_ks
        a.prediction_from = [q.config_id for q in fam if q.k != p.k]
        a.prediction_cost_ratio = held.cost_ratio
        if not held.physical:
            a.notes.append(
                f"the k={_ks(a.prediction_from_k)} TPOTs imply a negative draft cost (clamped "
                "to 0): the prediction is unreliable"
            )
    elif full.physical:
        a.predicted_gain = full.predicted_gain(p.tokens_per_step, p.k)
        a.prediction_basis = "self"
        a.prediction_from = [q.config_id for q in fam]
        a.prediction_cost_ratio = c_full
    if a.predicted_gain is not None:
        a.prediction_error = a.predicted_gain / p.gain - 1.0

    if not full.physical:
        # A step measured cheaper than a plain target step: the clamped costs are no basis
        # for what-ifs (they would say "drafting is free").
        a.notes.append(
            "costs do not fit: a speculative step measured cheaper than one no-spec step "
            "(noisy or non-comparable TPOTs); break-even and best k' are not computed"
        )
        a.sentence = _sentence(a)
        return a
    a.break_even_acceptance = cm.break_even_acceptance(p.k, c_full, o_full)
    if len(p.positions) == p.k:
        best = cm.best_k_from_positions(p.positions, c_full, o_full)
        a.best_k = best
        if best:
            r_k = cm.ratio_to_plain(p.tokens_per_step, p.k, c_full, o_full)
            e_b = cm.expected_tokens_from_positions(p.positions, best)
            r_b = cm.ratio_to_plain(e_b, best, c_full, o_full)
            a.best_k_speedup = max(0.0, r_k / r_b - 1.0)
            if best == p.k:
                e_next = p.tokens_per_step + (p.positions[-1] if p.positions else 0.0)
                r_next = (1.0 + (p.k + 1) * c_full + o_full) / e_next
                a.larger_k_bound = r_k / r_next - 1.0
    a.sentence = _sentence(a)
    return a


def _draft_fit(
    family: _Family, conc: int, fam: Sequence[_Point], full: cm.DraftCostFit,
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


def _config_advice(
    cases: Sequence[CaseResult],
    points: Sequence[_Point],
    skipped: dict[tuple[str, int], _Skipped],
) -> list[ConfigAdvice]:
    # the gain needs only the two TPOTs: cases without counters still place the crossover
    by_cfg: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for p in points:
        by_cfg[p.config_id].append((p.concurrency, p.gain))
    for (cid, conc), sk in skipped.items():
        if sk.gain is not None:
            by_cfg[cid].append((conc, sk.gain))
    out: list[ConfigAdvice] = []
    seen: set[str] = set()
    for c in cases:
        cid = c.case.config_id
        if not _is_spec(c) or cid in seen:
            continue
        seen.add(cid)
        gains = sorted(by_cfg.get(cid, []))
        cfg = ConfigAdvice(
            config_id=cid,
            config_label=c.config_label,
            method=c.method,
            draft_model=c.draft_model,
            k=_k_of(c),
            gains=gains,
        )
        if len(gains) >= 2:
            x = cm.crossover_concurrency(cfg.gains)
            cfg.crossover_concurrency = x
            if x is not None:
                first = cfg.gains[0][1]
                cfg.crossover_direction = "stops" if first >= 1.0 else "starts"
        cfg.sentence = _config_sentence(cfg)
        out.append(cfg)
    return out


def advise(
    run: RunResult,
    baseline: RunResult | Baseline | None = None,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    acceptance_tolerance: float = DEFAULT_ACCEPTANCE_TOLERANCE,
    baseline_name: str | None = None,
) -> RunAdvice:
    """Cost-model advice for a run; with ``baseline``, overhead-regression findings too."""
    points, skipped = _points(run)
    advice = RunAdvice(
        run_dir=run.run_dir,
        profile_name=run.provenance.profile_name,
        hardware=run.provenance.hardware,
        vllm_version=run.provenance.vllm_version,
        nospec_config_id=_nospec_id(run.cases),
    )
    if advice.nospec_config_id is None:
        advice.notes.append(
            "the run has no no-spec config: gains and costs need its TPOT at each concurrency"
        )
    by_key: dict[tuple[str, int], CaseAdvice] = {}
    self_ids = _self_draft_ids(run)
    for (family, conc), group in _groups(points).items():
        fam = sorted(group, key=lambda p: p.k)
        args = ([p.k for p in fam], [p.tokens_per_step for p in fam], [p.gain for p in fam])
        full = cm.fit_draft_cost(*args)
        held = cm.held_out_predictions(*args)
        advice.fits.append(_draft_fit(family, conc, fam, full, held, self_ids))
        for p, h in zip(fam, held, strict=True):
            by_key[(p.config_id, p.concurrency)] = _case_advice(p, fam, full, h)
    for (cid, conc), sk in skipped.items():
        c = next(x for x in run.cases if x.case.config_id == cid and x.case.concurrency == conc)
        a = CaseAdvice(
            config_id=cid,
            config_label=c.config_label,
            concurrency=conc,
            method=c.method,
            draft_model=c.draft_model,
            k=_k_of(c) or 0,
            nospec_tpot_ms=sk.nospec_tpot,
            nospec_source=sk.nospec_source,
            spec_tpot_ms=sk.spec_tpot,
            measured_gain=sk.gain,
            notes=sk.notes,
        )
        a.sentence = _sentence(a)
        by_key[(cid, conc)] = a
    order = {c.case.config_id: i for i, c in enumerate(run.cases)}
    advice.cases = sorted(by_key.values(), key=lambda a: (order[a.config_id], a.concurrency))
    advice.fits.sort(key=lambda f: (f.method or "", f.draft_model or "", f.concurrency))
    advice.configs = _config_advice(run.cases, points, skipped)
    if baseline is not None:
        advice.findings = overhead_findings(
            run, baseline, tolerance, acceptance_tolerance=acceptance_tolerance
        )
        advice.baseline = baseline_name or _describe_baseline(baseline)
    return advice


def _describe_baseline(b: RunResult | Baseline) -> str:
    p = b.provenance
    when = f"{p.date:%Y-%m-%d}" if p.date else "?"
    return f"{p.profile_name} on {p.hardware_id}, vLLM {p.vllm_version or '?'}, {when}"


# --------------------------------------------------------------------------- overhead finding


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
    cur_points, _ = _points(run)
    base_points, _ = _points(baseline)
    base_idx = {(p.config_id, p.concurrency): p for p in base_points}
    cur_groups, base_groups = _groups(cur_points), _groups(base_points)
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
                                         acceptance_tolerance, moved, cb, cc, sep),
            )
        )
    return findings


def _rel(new: float, old: float) -> str:
    return f"{(new / old - 1.0) * 100:+.0f} %" if old > 0 else "n/a"


def _finding_message(
    p: _Point, b: _Point, predicted: float, max_delta: float, tol: float, acc_tol: float,
    moved: str, cb: _Costs, cc: _Costs, sep: bool,
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
    if moved == "drafting":
        verdict = (
            f" vLLM got slower at drafting, not worse at accepting: {draft}; {verify}; {plain}."
        )
    else:
        verdict = (
            f" vLLM got slower at verifying (the target-side step), not worse at accepting: "
            f"{verify}; {draft}; {plain}."
        )
    if not sep:
        verdict += (
            " (With one k of this draft per run the verification step is taken to be the "
            "no-spec TPOT, so extra verification overhead counts as drafting; measure a second "
            "k of the same draft to separate them.)"
        )
    return head + verdict
