"""A cost model for speculative decoding: pure functions, no I/O.

The physics
-----------
Per verification step the target model checks ``k`` draft tokens and emits the
accepted prefix of the draft plus one bonus token (the target's own token at the
first rejected position, or after the last draft token when all are accepted).

* With an i.i.d. per-token acceptance probability ``a`` (the probability that a
  draft token is accepted given that all earlier ones were), the expected number of
  tokens emitted per step is the geometric sum::

      E(a, k) = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)     (k + 1 at a = 1)

* Without the i.i.d. assumption, let ``p_i`` be the fraction of steps whose first
  ``i + 1`` draft tokens were all accepted (vLLM's per-position counters divided by
  the number of drafts).  Then ``E = 1 + sum_i p_i``, and truncating the sum to the
  first ``k'`` positions predicts the step yield of any smaller ``k' <= k`` from a
  single run at ``k`` (a draft's acceptance of position ``i`` does not depend on how
  many positions after it were proposed).

* One step costs ``t_target + k * t_draft (+ overhead)``; producing ``N`` tokens
  takes ``N / E`` steps, versus ``N * t_target`` for plain decoding.  With the cost
  ratio ``c = t_draft / t_target`` and ``o = overhead / t_target`` the time relative
  to plain decoding is ``(1 + k c + o) / E`` -- below 1 speculation wins.

A note on "acceptance rate"
---------------------------
The ``acceptance`` taken here is the *per-token conditional* (i.i.d.) probability
``a``.  vLLM's logged "draft acceptance rate" is ``accepted / proposed = (E - 1) / k``,
a different (smaller) number for the same run; see :func:`draft_acceptance_rate` and
:func:`iid_acceptance_from_tokens_per_step` to convert.

Everything is measured per request stream: ``t_target`` is the plain-decoding time
per output token (TPOT) *at the concurrency in question*, so fits and predictions are
per concurrency level (speculation that wins at concurrency 1 can lose at 64 because
the verification batch becomes compute bound).

Fitting the costs of a draft from measured runs
-----------------------------------------------
What a run measures per spec case is the gain ``G = TPOT_nospec / TPOT_spec`` (paired
no-spec trials where the run has them) and the step yield ``E`` (counters). Their ratio is
the measured *step ratio* ``s = E / G = (TPOT_spec * E) / TPOT_nospec``: one speculative
step in units of one plain step (:func:`step_ratio`). TPOT is ``(e2e - TTFT) / (tokens -
1)``, so the prefill -- and the first proposal, which vLLM drafts right after it -- are
not in it; every later step is one verification plus one proposal. The model is::

    s(k) = 1 + o + k * c

* ``1``: the target's pass over the step (a plain decode step, ``t_target``);
* ``k * c``: per draft token, ``c = t_draft / t_target``.  ``c`` is *effective*: it also
  carries whatever the target pays per extra verified token (verifying ``k + 1`` tokens
  instead of one costs ``t_target * (1 + beta * k)``; that ``beta`` is linear in ``k`` and
  indistinguishable from drafting cost, so it is part of ``c``);
* ``o``: a fixed per-step overhead (rejection sampling, proposer bookkeeping), optional.

:func:`fit_draft_cost` fits ``c`` by least squares over the ``k`` measured for one draft
at one concurrency, with ``o`` given (default 0), in units of each case's own plain step
(so machine drift that slows a case and its paired no-spec trials alike cancels).
:func:`held_out_predictions` predicts each ``k`` from the *other* ``k`` only.  Why ``o``
is not fitted as well: with two held-out points a two-parameter line goes exactly through
both and extrapolates their noise (predicting ``k = 3`` from ``k = 1, 2`` doubles the
``k = 2`` error); :func:`self_draft_overhead` measures ``o`` independently from a
self-draft run instead (the target as its own draft: ``c = 1`` and ``E = k + 1`` known).

Why one module past 600 lines: it is one derivation, the physics above and the fits
that use it (per draft, per concurrency, held-out): each function is a formula of the
text above, in the order the text derives it; the renderers are elsewhere
(report/advice.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import brentq

__all__ = [
    "DraftCostFit",
    "FittedCosts",
    "HeldOutPrediction",
    "Prediction",
    "best_k",
    "best_k_from_positions",
    "break_even_acceptance",
    "check_positions",
    "crossover_concurrency",
    "draft_acceptance_rate",
    "expected_tokens_from_positions",
    "expected_tokens_per_step",
    "fit_cost_ratio",
    "fit_draft_cost",
    "held_out_predictions",
    "iid_acceptance_from_tokens_per_step",
    "iid_positions",
    "positions_from_counters",
    "predict",
    "predict_from_tokens_per_step",
    "predicted_gain",
    "ratio_to_plain",
    "self_draft_overhead",
    "step_ratio",
]

# Relative tolerance used when comparing cost ratios (ties in best_k, "does it win").
_REL_TOL = 1e-12
# Slack for monotonicity / yield bounds checks on measured (float) data.
_POS_TOL = 1e-9


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- validation


def _check_acceptance(a: float, name: str = "acceptance") -> float:
    a = float(a)
    if not math.isfinite(a) or not 0.0 <= a <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {a!r}")
    return a


def _check_int(k: int, name: str, minimum: int) -> int:
    value: object = k
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {k!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_nonneg(x: float, name: str) -> float:
    x = float(x)
    if not math.isfinite(x) or x < 0.0:
        raise ValueError(f"{name} must be a finite number >= 0, got {x!r}")
    return x


def _check_pos(x: float, name: str) -> float:
    x = float(x)
    if not math.isfinite(x) or x <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    return x


def _check_tokens_per_step(e: float, k: int) -> float:
    e = float(e)
    if not math.isfinite(e) or e < 1.0 - _POS_TOL or e > k + 1 + _POS_TOL:
        raise ValueError(f"tokens_per_step must be in [1, k + 1] = [1, {k + 1}], got {e!r}")
    return min(max(e, 1.0), float(k + 1))


# --------------------------------------------------------------------------- step yield


def expected_tokens_per_step(a: float, k: int) -> float:
    """Expected tokens emitted per verification step with i.i.d. acceptance ``a``.

    ``E(a, k) = (1 - a^(k+1)) / (1 - a)``; exactly ``k + 1`` at ``a = 1`` and ``1`` at
    ``a = 0`` (or ``k = 0``).  Evaluated as ``-expm1((k+1) log a) / (1 - a)``: both
    numerator and denominator are computed to full relative precision (``1 - a`` is
    exact for ``a >= 0.5``), so there is no cancellation as ``a -> 1``.
    """
    a = _check_acceptance(a)
    k = _check_int(k, "k", 0)
    if k == 0 or a == 0.0:
        return 1.0
    if a == 1.0:
        return float(k + 1)
    e = -math.expm1((k + 1) * math.log(a)) / (1.0 - a)
    return min(max(e, 1.0), float(k + 1))


def iid_positions(a: float, k: int) -> list[float]:
    """Per-position yields ``p_i = a^(i+1)`` implied by i.i.d. acceptance ``a``."""
    a = _check_acceptance(a)
    k = _check_int(k, "k", 0)
    return [a ** (i + 1) for i in range(k)]


def positions_from_counters(accepted_per_pos: Sequence[float], num_drafts: float) -> list[float]:
    """``p_i = Δaccepted_per_pos[i] / Δdrafts`` from counter deltas over a window.

    ``num_drafts`` counts verification steps that carried a draft (vLLM's
    ``spec_decode_num_drafts``), not draft tokens.
    """
    n = _check_pos(num_drafts, "num_drafts")
    out = []
    for i, c in enumerate(accepted_per_pos):
        out.append(_check_nonneg(c, f"accepted_per_pos[{i}]") / n)
    return out


def _validated_positions(p: Sequence[float]) -> list[float]:
    vals = [float(x) for x in p]
    for i, x in enumerate(vals):
        if not math.isfinite(x) or x < 0.0 or x > 1.0 + _POS_TOL:
            raise ValueError(f"p[{i}] must be a fraction in [0, 1], got {x!r}")
    return [min(x, 1.0) for x in vals]


def check_positions(p: Sequence[float], tol: float = _POS_TOL) -> list[str]:
    """Report inconsistencies in per-position yields; an empty list means consistent.

    Because acceptance is a prefix (position ``i`` is only accepted when every earlier
    position was), ``1 >= p_0 >= p_1 >= ...`` must hold.  A violation means the
    counters were sampled inconsistently (e.g. deltas over different windows, a
    server restart, or mixing runs with different ``k``).  The estimators do not
    refuse such data; call this to decide whether to trust the numbers.
    """
    problems: list[str] = []
    vals = [float(x) for x in p]
    for i, x in enumerate(vals):
        if not math.isfinite(x):
            problems.append(f"p[{i}] is not finite ({x!r})")
        elif x < -tol or x > 1.0 + tol:
            problems.append(f"p[{i}] = {x:.6g} is outside [0, 1]")
    for i in range(1, len(vals)):
        prev, cur = vals[i - 1], vals[i]
        if math.isfinite(prev) and math.isfinite(cur) and cur > prev + tol:
            problems.append(
                f"p[{i}] = {cur:.6g} > p[{i - 1}] = {prev:.6g}: per-position yields must be "
                "non-increasing (a later position can only be accepted after the earlier ones)"
            )
    return problems


def expected_tokens_from_positions(p: Sequence[float], k_prime: int) -> float:
    """Expected tokens per step for ``k' <= len(p)`` draft tokens: ``1 + sum_{i<k'} p_i``.

    ``p_i`` is the fraction of steps whose first ``i + 1`` draft tokens were accepted
    (see :func:`positions_from_counters`).  No i.i.d. assumption is made.  Values must
    lie in [0, 1] (``ValueError`` otherwise); non-monotone ``p`` is *not* rejected --
    use :func:`check_positions` to detect it.
    """
    vals = _validated_positions(p)
    k_prime = _check_int(k_prime, "k_prime", 0)
    if k_prime > len(vals):
        raise ValueError(f"k_prime must be <= len(p) = {len(vals)}, got {k_prime}")
    return 1.0 + math.fsum(vals[:k_prime])


def draft_acceptance_rate(tokens_per_step: float, k: int) -> float:
    """vLLM's "draft acceptance rate": accepted draft tokens / proposed = ``(E - 1) / k``."""
    k = _check_int(k, "k", 1)
    e = _check_tokens_per_step(tokens_per_step, k)
    return (e - 1.0) / k


def iid_acceptance_from_tokens_per_step(tokens_per_step: float, k: int) -> float:
    """The i.i.d. acceptance ``a`` with ``E(a, k) == tokens_per_step`` (inverse of E)."""
    k = _check_int(k, "k", 1)
    e = _check_tokens_per_step(tokens_per_step, k)
    if e <= 1.0:
        return 0.0
    if e >= k + 1:
        return 1.0
    return float(brentq(lambda a: expected_tokens_per_step(a, k) - e, 0.0, 1.0, xtol=1e-15))


# --------------------------------------------------------------------------- timing


def ratio_to_plain(
    tokens_per_step: float, k: int, cost_ratio: float, overhead_ratio: float = 0.0
) -> float:
    """Speculative time / plain time = ``(1 + k c + o) / E`` (dimensionless; <1 wins)."""
    k = _check_int(k, "k", 1)
    e = _check_tokens_per_step(tokens_per_step, k)
    c = _check_nonneg(cost_ratio, "cost_ratio")
    o = _check_nonneg(overhead_ratio, "overhead_ratio")
    return (1.0 + k * c + o) / e


class Prediction(_Result):
    """Predicted cost of generating ``tokens`` output tokens with ``k`` draft tokens/step.

    Counts are expectations (floats).  ``ratio_to_plain < 1`` (equivalently
    ``speedup > 1``) means speculation is faster than plain decoding.
    """

    acceptance: float | None = Field(
        description="i.i.d. per-token acceptance a; None when tokens_per_step was given directly"
    )
    k: int = Field(description="draft tokens proposed per verification step")
    target_ms: float = Field(description="target forward time per step (= plain-decoding TPOT)")
    draft_ms: float = Field(description="draft time per proposed token")
    overhead_ms: float = Field(description="fixed extra time per verification step")
    tokens: int = Field(description="output tokens to generate")
    tokens_per_step: float = Field(description="expected tokens emitted per verification step")
    verification_steps: float = Field(description="expected verification steps = tokens / E")
    draft_tokens_proposed: float = Field(description="verification_steps * k")
    wasted_draft_tokens: float = Field(description="proposed draft tokens that were rejected")
    total_ms: float = Field(description="expected time with speculation")
    plain_ms: float = Field(description="time with plain decoding = tokens * target_ms")
    ratio_to_plain: float = Field(description="total_ms / plain_ms; < 1 means faster")
    speedup: float = Field(description="plain_ms / total_ms; > 1 means faster")


def predict_from_tokens_per_step(
    tokens_per_step: float,
    k: int,
    target_ms: float,
    draft_ms: float,
    tokens: int,
    overhead_ms: float = 0.0,
    *,
    acceptance: float | None = None,
) -> Prediction:
    """:func:`predict` with the step yield given directly (e.g. from per-position data).

    ``acceptance`` is only recorded in the result; it does not enter the arithmetic.
    """
    k = _check_int(k, "k", 1)
    e = _check_tokens_per_step(tokens_per_step, k)
    t = _check_pos(target_ms, "target_ms")
    d = _check_nonneg(draft_ms, "draft_ms")
    o = _check_nonneg(overhead_ms, "overhead_ms")
    n = _check_int(tokens, "tokens", 1)
    if acceptance is not None:
        acceptance = _check_acceptance(acceptance)

    steps = n / e
    proposed = steps * k
    # Each step emits (accepted drafts) + 1, so accepted drafts = n - steps and
    # wasted = steps * k - (n - steps) = steps * (k + 1 - e).  Clamp rounding noise.
    wasted = max(0.0, steps * ((k + 1) - e))
    total = steps * (t + k * d + o)
    plain = n * t
    return Prediction(
        acceptance=acceptance,
        k=k,
        target_ms=t,
        draft_ms=d,
        overhead_ms=o,
        tokens=n,
        tokens_per_step=e,
        verification_steps=steps,
        draft_tokens_proposed=proposed,
        wasted_draft_tokens=wasted,
        total_ms=total,
        plain_ms=plain,
        ratio_to_plain=total / plain,
        speedup=plain / total,
    )


def predict(
    acceptance: float,
    k: int,
    target_ms: float,
    draft_ms: float,
    tokens: int,
    overhead_ms: float = 0.0,
) -> Prediction:
    """Predict time and waste for ``tokens`` output tokens with i.i.d. acceptance."""
    a = _check_acceptance(acceptance)
    k = _check_int(k, "k", 1)
    return predict_from_tokens_per_step(
        expected_tokens_per_step(a, k), k, target_ms, draft_ms, tokens, overhead_ms, acceptance=a
    )


# --------------------------------------------------------------------------- decisions


def break_even_acceptance(k: int, cost_ratio: float, overhead_ratio: float = 0.0) -> float | None:
    """The i.i.d. acceptance at which speculation with ``k`` drafts exactly ties plain decoding.

    Solves ``E(a, k) = 1 + k c + o`` with :func:`scipy.optimize.brentq` (``E`` is strictly
    increasing in ``a`` on [0, 1] for ``k >= 1``).  Below the returned ``a`` speculation
    is slower than none.  Returns ``0.0`` when even ``a = 0`` ties (free drafts, no
    overhead), ``1.0`` when only perfect acceptance ties, and ``None`` when even
    ``a = 1`` is slower (``k c + o > k``).
    """
    k = _check_int(k, "k", 1)
    c = _check_nonneg(cost_ratio, "cost_ratio")
    o = _check_nonneg(overhead_ratio, "overhead_ratio")
    need = 1.0 + k * c + o  # tokens per step needed to break even
    if need <= 1.0:
        return 0.0
    if need > k + 1:
        return None
    if need == k + 1:
        return 1.0
    root = brentq(lambda a: expected_tokens_per_step(a, k) - need, 0.0, 1.0, xtol=1e-15, rtol=1e-15)
    return float(root)


def _argmin_ratio(ratios: Sequence[float]) -> int:
    """1-based index of the smallest ratio (smallest k on near-ties), 0 if none is < 1."""
    best_i, best_r = 0, 1.0
    for i, r in enumerate(ratios, start=1):
        if r < best_r * (1.0 - _REL_TOL):
            best_i, best_r = i, r
    return best_i


def best_k(
    acceptance: float, cost_ratio: float, k_max: int = 16, overhead_ratio: float = 0.0
) -> int:
    """The ``k`` in ``1..k_max`` minimising time per token; ``0`` means don't speculate.

    Returns 0 when no ``k`` is strictly faster than plain decoding.  On (near-)ties the
    smaller ``k`` wins -- it wastes fewer draft tokens for the same time.
    """
    a = _check_acceptance(acceptance)
    k_max = _check_int(k_max, "k_max", 1)
    c = _check_nonneg(cost_ratio, "cost_ratio")
    o = _check_nonneg(overhead_ratio, "overhead_ratio")
    return _argmin_ratio(
        [(1.0 + k * c + o) / expected_tokens_per_step(a, k) for k in range(1, k_max + 1)]
    )


def best_k_from_positions(
    p: Sequence[float], cost_ratio: float, overhead_ratio: float = 0.0
) -> int:
    """Like :func:`best_k` but from measured per-position yields; the result is ``<= len(p)``."""
    vals = _validated_positions(p)
    c = _check_nonneg(cost_ratio, "cost_ratio")
    o = _check_nonneg(overhead_ratio, "overhead_ratio")
    ratios = []
    cum = 1.0
    for k, pk in enumerate(vals, start=1):
        cum += pk
        ratios.append((1.0 + k * c + o) / cum)
    return _argmin_ratio(ratios)


# --------------------------------------------------------------------------- fitting


class FittedCosts(_Result):
    """Per-step costs inferred from one (no-spec, spec) TPOT pair at one concurrency.

    ``draft_ms`` is the *effective* per-draft-token cost: from a single measurement the
    draft cost and a fixed per-step overhead cannot be separated, so unless
    ``overhead_ms`` was supplied the overhead is folded into ``draft_ms``.  When the fit
    is non-physical (``physical`` is False) ``draft_ms``/``cost_ratio`` hold the raw,
    negative solution and ``reason`` explains.
    """

    nospec_tpot_ms: float
    spec_tpot_ms: float
    tokens_per_step: float
    k: int
    overhead_ms: float
    target_ms: float = Field(description="t_target = no-spec TPOT at this concurrency")
    draft_ms: float = Field(description="t_draft = (spec_tpot * E - t_target - overhead) / k")
    cost_ratio: float = Field(description="c = t_draft / t_target")
    measured_gain: float = Field(description="nospec_tpot / spec_tpot")
    physical: bool
    reason: str | None = None

    def predicted_gain(self, tokens_per_step: float, k: int) -> float:
        """Gain these costs predict for another ``(E, k)`` -- e.g. a smaller ``k'``.

        Raises ``ValueError`` for a non-physical fit (there are no costs to predict with).
        """
        if not self.physical:
            raise ValueError(f"cannot predict from this fit: {self.reason}")
        return predicted_gain(self.target_ms, self.draft_ms, tokens_per_step, k, self.overhead_ms)


def fit_cost_ratio(
    nospec_tpot_ms: float,
    spec_tpot_ms: float,
    tokens_per_step: float,
    k: int,
    overhead_ms: float = 0.0,
) -> FittedCosts:
    """Infer ``t_target`` and ``t_draft`` from measured TPOTs at one concurrency.

    ``t_target`` is the no-spec TPOT; since ``spec_tpot ~= (t_target + k t_draft + o) / E``,
    ``t_draft = (spec_tpot * E - t_target - o) / k``.  A negative ``t_draft`` (the
    speculative step appears cheaper than one target pass) is flagged, not raised: it
    usually means the two runs are not comparable (different load, warm-up, batch
    composition) or ``tokens_per_step`` is overestimated.
    """
    nospec = _check_pos(nospec_tpot_ms, "nospec_tpot_ms")
    spec = _check_pos(spec_tpot_ms, "spec_tpot_ms")
    k = _check_int(k, "k", 1)
    e = _check_tokens_per_step(tokens_per_step, k)
    o = _check_nonneg(overhead_ms, "overhead_ms")

    step_ms = spec * e
    draft = (step_ms - nospec - o) / k
    reason = None
    if draft < 0.0:
        reason = (
            f"non-physical: spec TPOT x tokens/step = {step_ms:.4g} ms is less than the "
            f"no-spec TPOT{' + overhead' if o else ''} = {nospec + o:.4g} ms, so the draft "
            "cost would be negative; the runs are likely not comparable or tokens_per_step "
            "is overestimated"
        )
    return FittedCosts(
        nospec_tpot_ms=nospec,
        spec_tpot_ms=spec,
        tokens_per_step=e,
        k=k,
        overhead_ms=o,
        target_ms=nospec,
        draft_ms=draft,
        cost_ratio=draft / nospec,
        measured_gain=nospec / spec,
        physical=reason is None,
        reason=reason,
    )


def predicted_gain(
    nospec_tpot_ms: float,
    draft_ms: float,
    tokens_per_step: float,
    k: int,
    overhead_ms: float = 0.0,
) -> float:
    """``nospec_tpot / predicted spec TPOT`` with spec TPOT = ``(t_target + k t_draft + o) / E``.

    ``> 1`` means speculation is predicted to be faster.  Equals ``1 / ratio_to_plain``.
    """
    t = _check_pos(nospec_tpot_ms, "nospec_tpot_ms")
    d = _check_nonneg(draft_ms, "draft_ms")
    o = _check_nonneg(overhead_ms, "overhead_ms")
    k = _check_int(k, "k", 1)
    e = _check_tokens_per_step(tokens_per_step, k)
    return t / ((t + k * d + o) / e)


def step_ratio(tokens_per_step: float, gain: float) -> float:
    """One speculative step in plain steps: ``s = E / G`` (= spec TPOT x E / no-spec TPOT).

    ``gain`` is the measured ``no-spec TPOT / spec TPOT``. ``s < 1`` is non-physical (a
    speculative step, which includes a target pass, measured cheaper than a plain one).
    """
    e = float(tokens_per_step)
    if not math.isfinite(e) or e < 1.0 - _POS_TOL:
        raise ValueError(f"tokens_per_step must be a finite number >= 1, got {e!r}")
    g = _check_pos(gain, "gain")
    return max(e, 1.0) / g


def _fit_points(
    ks: Sequence[int], tokens_per_step: Sequence[float], gains: Sequence[float]
) -> tuple[list[int], list[float], list[float]]:
    if not (len(ks) == len(tokens_per_step) == len(gains)):
        raise ValueError(
            f"ks, tokens_per_step and gains must have the same length, got {len(ks)}, "
            f"{len(tokens_per_step)} and {len(gains)}"
        )
    if not ks:
        raise ValueError("at least one measured point (k, tokens_per_step, gain) is needed")
    kk = [_check_int(k, f"ks[{i}]", 1) for i, k in enumerate(ks)]
    ee = [_check_tokens_per_step(e, k) for e, k in zip(tokens_per_step, kk, strict=True)]
    gg = [_check_pos(g, f"gains[{i}]") for i, g in enumerate(gains)]
    return kk, ee, gg


class DraftCostFit(_Result):
    """``c`` of one draft at one concurrency, fitted over its measured ``k`` (``o`` given).

    Model: one speculative step = ``1 + o + k c`` plain steps. See the module docstring.
    """

    ks: list[int] = Field(description="k of the points fitted")
    step_ratios: list[float] = Field(description="measured s = E / gain per point")
    overhead_ratio: float = Field(description="o = fixed per-step overhead / t_target (given)")
    cost_ratio: float = Field(
        description="c = t_draft / t_target, least squares over the points, clamped at 0"
    )
    physical: bool = Field(
        description="False when some point's step measured cheaper than 1 + o plain steps"
    )

    def step(self, k: int) -> float:
        """Modelled step ratio ``1 + o + k c`` for ``k`` draft tokens."""
        return 1.0 + self.overhead_ratio + _check_int(k, "k", 1) * self.cost_ratio

    def predicted_gain(self, tokens_per_step: float, k: int) -> float:
        """``E / (1 + o + k c)``: the gain these costs predict at yield ``E`` and ``k``."""
        k = _check_int(k, "k", 1)
        return _check_tokens_per_step(tokens_per_step, k) / self.step(k)


def fit_draft_cost(
    ks: Sequence[int],
    tokens_per_step: Sequence[float],
    gains: Sequence[float],
    overhead_ratio: float = 0.0,
) -> DraftCostFit:
    """Fit ``c`` in ``s(k) = 1 + o + k c`` over measured points of one draft, one concurrency.

    Each point is a spec case: its ``k``, its yield ``E`` (counters) and its measured gain;
    its step ratio is ``s = E / gain``. With ``o`` given, least squares gives
    ``c = sum k (s_k - 1 - o) / sum k^2``, clamped at 0. One point gives the point fit
    ``c = (s - 1 - o) / k``, which reproduces that point's gain exactly.
    """
    kk, ee, gg = _fit_points(ks, tokens_per_step, gains)
    o = _check_nonneg(overhead_ratio, "overhead_ratio")
    s = [step_ratio(e, g) for e, g in zip(ee, gg, strict=True)]
    excess = [x - 1.0 - o for x in s]
    c = math.fsum(k * y for k, y in zip(kk, excess, strict=True)) / math.fsum(k * k for k in kk)
    return DraftCostFit(
        ks=kk,
        step_ratios=s,
        overhead_ratio=o,
        cost_ratio=max(0.0, c),
        physical=all(y >= -_POS_TOL for y in excess),
    )


class HeldOutPrediction(_Result):
    """The gain of one ``k`` predicted from costs fitted on the other ``k`` only."""

    k: int
    from_ks: list[int] = Field(description="the k whose measurements fitted the costs")
    cost_ratio: float = Field(description="c fitted on from_ks")
    overhead_ratio: float
    physical: bool = Field(description="the fit of from_ks is physical")
    tokens_per_step: float = Field(description="this k's own measured yield E")
    predicted_gain: float
    measured_gain: float
    error: float = Field(description="predicted / measured - 1")


def held_out_predictions(
    ks: Sequence[int],
    tokens_per_step: Sequence[float],
    gains: Sequence[float],
    overhead_ratio: float = 0.0,
) -> list[HeldOutPrediction | None]:
    """Leave-one-k-out: each point's gain from :func:`fit_draft_cost` on the other ``k``.

    A prediction uses the point's own yield ``E`` (acceptance is measured exactly by the
    counters) but none of its timing, so ``error`` tests the cost model, not the fit.
    One entry per point, in input order; ``None`` where no other ``k`` was measured
    (every point of the same ``k`` is held out together).
    """
    kk, ee, gg = _fit_points(ks, tokens_per_step, gains)
    o = _check_nonneg(overhead_ratio, "overhead_ratio")
    out: list[HeldOutPrediction | None] = []
    for k, e, g in zip(kk, ee, gg, strict=True):
        idx = [i for i, j in enumerate(kk) if j != k]
        if not idx:
            out.append(None)
            continue
        fit = fit_draft_cost([kk[i] for i in idx], [ee[i] for i in idx], [gg[i] for i in idx], o)
        pred = fit.predicted_gain(e, k)
        out.append(
            HeldOutPrediction(
                k=k,
                from_ks=sorted({kk[i] for i in idx}),
                cost_ratio=fit.cost_ratio,
                overhead_ratio=o,
                physical=fit.physical,
                tokens_per_step=e,
                predicted_gain=pred,
                measured_gain=g,
                error=pred / g - 1.0,
            )
        )
    return out


def self_draft_overhead(tokens_per_step: float, gain: float, k: int) -> float:
    """Fixed per-step overhead ``o`` (in plain steps) implied by a self-draft measurement.

    With the target as its own draft every drafted token costs one target step (``c = 1``
    by construction), so ``s = 1 + o + k`` and ``o = E / gain - 1 - k``. This rests on the
    assumption that a draft pass of the target costs exactly a plain decode step; a
    negative value means it costs less (no engine scheduling or output around it), a value
    far above 0 that something grows with the drafted/verified tokens (which a fixed ``o``
    cannot describe). Monotone decreasing in ``gain``: a CI of the gain maps to one of ``o``.
    """
    k = _check_int(k, "k", 1)
    e = _check_tokens_per_step(tokens_per_step, k)
    return step_ratio(e, gain) - 1.0 - k


def crossover_concurrency(points: Sequence[tuple[int, float]]) -> float | None:
    """Concurrency at which the measured gain reaches 1.0 (speculation stops/starts paying).

    ``points`` are ``(concurrency, gain)`` pairs, gain = no-spec TPOT / spec TPOT (or a
    throughput ratio), sorted by strictly increasing concurrency (``ValueError``
    otherwise).  Scanning from the lowest concurrency, the first adjacent pair whose
    gains straddle 1.0 is interpolated linearly in ``log2(concurrency)`` (concurrency
    sweeps are usually powers of two, and gain is roughly linear in log-concurrency);
    the result is ``2 ** x``.  A point whose gain is exactly 1.0 is returned as is.
    The crossing may go either way (usually from > 1 to < 1).  Returns ``None`` when
    the gain never reaches 1.0 within the measured range -- no extrapolation.
    """
    pts = [(float(c), float(g)) for c, g in points]
    for i, (c, g) in enumerate(pts):
        if not math.isfinite(c) or c <= 0:
            raise ValueError(f"points[{i}]: concurrency must be > 0, got {c!r}")
        if not math.isfinite(g) or g <= 0:
            raise ValueError(f"points[{i}]: gain must be a finite number > 0, got {g!r}")
        if i and c <= pts[i - 1][0]:
            raise ValueError("points must be sorted by strictly increasing concurrency")
    for i, (c, g) in enumerate(pts):
        if g == 1.0:
            return c
        if i + 1 < len(pts):
            c1, g1 = pts[i + 1]
            if (g - 1.0) * (g1 - 1.0) < 0.0:
                x0, x1 = math.log2(c), math.log2(c1)
                t = (1.0 - g) / (g1 - g)
                return float(2.0 ** (x0 + t * (x1 - x0)))
    return None
