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
  fell below what the baseline's costs predict), naming what moved
  (:mod:`specperf.analysis.overhead_regression`).

A run is read through its spec points (:mod:`specperf.analysis.spec_points`); the fit per
draft model is :mod:`specperf.analysis.draft_fit`.

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

The model has no fixed per-step overhead ``o``; why, and the check each self-draft config
repeats, is in :mod:`specperf.analysis.draft_fit`.

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

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from specperf.analysis import costmodel as cm
from specperf.analysis.draft_fit import DraftFit, draft_fit
from specperf.analysis.overhead_regression import (
    DEFAULT_ACCEPTANCE_TOLERANCE,
    DEFAULT_TOLERANCE,
    OverheadFinding,
    overhead_findings,
)
from specperf.analysis.spec_points import (
    SpecPoint,
    UnusableCase,
    by_family,
    is_spec,
    k_of,
    nospec_config_id,
    self_draft_ids,
    spec_points,
)
from specperf.analysis.stats import Verdict
from specperf.schemas import Baseline, CaseResult, RunResult

if TYPE_CHECKING:
    from specperf.analysis.judge.models import RunComparison

__all__ = ["CaseAdvice", "ConfigAdvice", "RunAdvice", "advise"]


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


# --------------------------------------------------------------------------- wording


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def _pct(v: float) -> str:
    r = round(v * 100)
    return f"{'+' if r >= 0 else '−'}{abs(r):.0f} %"


def _ks(ks: Sequence[int]) -> str:
    return ",".join(str(k) for k in ks)


#: Who drafts, per method, for the sentence. The cost model is the same for each (one
#: drafter pass per draft token, fitted per method and draft model), but what the fitted
#: cost is the cost *of* differs: a separate model that keeps its own KV cache, a head of
#: a layer or two that reads the target's hidden states, an MTP layer shipped with the
#: target, or a lookup with no model at all, whose fitted cost is the verification of the
#: extra tokens alone.
_DRAFTER = {
    "draft_model": "drafting with the draft model",
    "eagle": "the EAGLE head",
    "eagle3": "the EAGLE-3 head",
    "mtp": "the MTP layer",
    "ngram": "an ngram lookup (no model: verification only)",
    "ngram_gpu": "an ngram lookup (no model: verification only)",
    "suffix": "a suffix-tree lookup (no model: verification only)",
}


def _drafter(method: str | None) -> str:
    if method is not None and method.endswith("_mtp"):
        method = "mtp"  # vLLM's older spellings of mtp
    return _DRAFTER.get(method or "", "drafting")


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
        parts.append(f"{_drafter(a.method)} costs {a.cost_ratio:.2f}× a target step per draft "
                     "token")
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
    p: SpecPoint,
    fam: Sequence[SpecPoint],
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


def _config_advice(
    cases: Sequence[CaseResult],
    points: Sequence[SpecPoint],
    skipped: dict[tuple[str, int], UnusableCase],
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
        if not is_spec(c) or cid in seen:
            continue
        seen.add(cid)
        gains = sorted(by_cfg.get(cid, []))
        cfg = ConfigAdvice(
            config_id=cid,
            config_label=c.config_label,
            method=c.method,
            draft_model=c.draft_model,
            k=k_of(c),
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
    comparison: RunComparison | None = None,
) -> RunAdvice:
    """Cost-model advice for a run; with ``baseline``, overhead-regression findings too —
    with ``comparison`` (the run judged against that baseline), only those its verdicts
    back (:func:`_backed_by_verdicts`); the others are named in a note."""
    points, skipped = spec_points(run)
    advice = RunAdvice(
        run_dir=run.run_dir,
        profile_name=run.provenance.profile_name,
        hardware=run.provenance.hardware,
        vllm_version=run.provenance.vllm_version,
        nospec_config_id=nospec_config_id(run.cases),
    )
    if advice.nospec_config_id is None:
        advice.notes.append(
            "the run has no no-spec config: gains and costs need its TPOT at each concurrency"
        )
    by_key: dict[tuple[str, int], CaseAdvice] = {}
    self_ids = self_draft_ids(run)
    for (family, conc), group in by_family(points).items():
        fam = sorted(group, key=lambda p: p.k)
        args = ([p.k for p in fam], [p.tokens_per_step for p in fam], [p.gain for p in fam])
        full = cm.fit_draft_cost(*args)
        held = cm.held_out_predictions(*args)
        advice.fits.append(draft_fit(family, conc, fam, full, held, self_ids))
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
            k=k_of(c) or 0,
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
        findings = overhead_findings(
            run, baseline, tolerance, acceptance_tolerance=acceptance_tolerance
        )
        if comparison is not None:
            findings, within_noise = _backed_by_verdicts(findings, comparison)
            if within_noise:
                advice.notes.append(
                    f"not reported as overhead regressions: {', '.join(within_noise)} — the "
                    f"gain fell more than {tolerance * 100:g} % below the baseline's prediction "
                    "in this run's point estimates, but no timing check of the case was a "
                    "decided regression (the comparison's verdicts), so it is within the noise "
                    "or the machine's")
        advice.findings = findings
        advice.baseline = baseline_name or _describe_baseline(baseline)
    return advice


#: The comparisons whose decided REGRESSION backs an overhead finding: what a costlier
#: speculative step moves (MetricDetail keys).
_STEP_COST_KEYS = frozenset({"tpot", "e2e", "output_throughput", "tpot_gain", "tpot_vs_nospec"})


def _backed_by_verdicts(findings: list[OverheadFinding], comparison: RunComparison
                        ) -> tuple[list[OverheadFinding], list[str]]:
    """The findings whose case the comparison calls a decided REGRESSION of a metric the
    step's cost moves (not BUSY), and the ids of the others. A finding is a point estimate
    of one run against a 15 % tolerance; at c4/c8 the gain of one cpu-tiny run moves more
    than that on its own (3–8 findings in every quiet run on the EPYC VM, none of them
    backed by a verdict: docs/validation.md), so the advice explains the verdicts rather
    than making its own."""
    by_case = {(cc.case.config_id, cc.case.concurrency): cc for cc in comparison.cases}
    backed, within_noise = [], []
    for f in findings:
        cc = by_case.get((f.config_id, f.concurrency))
        decided = cc is not None and not cc.busy and any(
            c.verdict is Verdict.REGRESSION and (d := cc.detail(c)) is not None
            and d.key in _STEP_COST_KEYS for c in cc.comparisons)
        if decided:
            backed.append(f)
        else:
            within_noise.append(f"{f.config_id}-c{f.concurrency}")
    return backed, within_noise


def _describe_baseline(b: RunResult | Baseline) -> str:
    p = b.provenance
    when = f"{p.date:%Y-%m-%d}" if p.date else "?"
    return f"{p.profile_name} on {p.hardware_id}, vLLM {p.vllm_version or '?'}, {when}"
