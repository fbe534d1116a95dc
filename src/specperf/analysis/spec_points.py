"""The spec cases of a run as points of the cost model (pure, no I/O).

Per spec case (server config × concurrency) a :class:`SpecPoint`: its median TPOT, the
no-spec TPOT it is measured against -- the case's *paired* no-spec trials
(``RunResult.paired_nospec``) when the run has them, else the no-spec config's case at the
same concurrency --, the per-position acceptance ``p_i`` and the tokens per step
``E = 1 + Σ p_i`` from the counters, and the bootstrap CI of the gain. A case the model
cannot use is an :class:`UnusableCase` saying why, with what was measured of it. The
advice (:mod:`specperf.analysis.advice`) and the overhead-regression finding
(:mod:`specperf.analysis.overhead_regression`) both read a run through these points.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from specperf.analysis import costmodel as cm
from specperf.analysis.samples import per_request
from specperf.analysis.stats import ratio_ci
from specperf.schemas import Baseline, CaseResult, RunResult

__all__ = [
    "Family",
    "SpecPoint",
    "UnusableCase",
    "by_family",
    "is_spec",
    "k_of",
    "nospec_config_id",
    "self_draft_ids",
    "spec_points",
]

#: Methods whose counters only count steps that carried a draft.
_LOOKUP_METHODS = {"ngram", "ngram_gpu", "suffix"}

#: Slack on "every draft carried k tokens" (counters are float deltas).
_FULL_DRAFT_SLACK = 1e-6


def _shorter_drafts_note(c: CaseResult, k: int) -> str | None:
    """Why a case with a model-based drafter (draft model, EAGLE head, MTP layer) has no
    fixed k: its drafts carried fewer than k tokens on average. Those drafters always
    propose k tokens unless vLLM picks k per step (num_speculative_tokens_per_batch_size);
    the model's step = 1 + k c then has no k to put in. Lookup methods (ngram, suffix)
    propose fewer whenever the match is short: their own note covers them."""
    acc = c.acceptance
    if c.method in _LOOKUP_METHODS or acc is None or not acc.drafts:
        return None
    mean_k = acc.draft_tokens / acc.drafts
    if mean_k >= k * (1 - _FULL_DRAFT_SLACK):
        return None
    return (f"its drafts carried {mean_k:.2f} of k={k} tokens on average (vLLM chose k per step, "
            "e.g. num_speculative_tokens_per_batch_size): no fixed k for the cost model")


@dataclass
class SpecPoint:
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


def is_spec(c: CaseResult) -> bool:
    return c.method is not None or c.num_speculative_tokens is not None or c.draft_model is not None


def nospec_config_id(cases: Sequence[CaseResult]) -> str | None:
    ids = [c.case.config_id for c in cases if not is_spec(c)]
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
class UnusableCase:
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


def k_of(c: CaseResult) -> int | None:
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


def spec_points(
    result: RunResult | Baseline,
) -> tuple[list[SpecPoint], dict[tuple[str, int], UnusableCase]]:
    """Usable spec points, and the reasons other spec cases are unusable.

    The no-spec TPOT of a spec case is its *paired* no-spec measurement (trials interleaved
    with its own, ``RunResult.paired_nospec``) when the run has one, else the no-spec
    config's case at the same concurrency.
    """
    cases = result.cases
    paired: dict[str, CaseResult] = dict(getattr(result, "paired_nospec", None) or {})
    nospec_id = nospec_config_id(cases)
    nospec = {
        c.case.concurrency: c for c in cases if nospec_id and c.case.config_id == nospec_id
    }
    points: list[SpecPoint] = []
    skipped: dict[tuple[str, int], UnusableCase] = {}
    for c in cases:
        if not is_spec(c):
            continue
        key = (c.case.config_id, c.case.concurrency)
        spec = _tpot(c)
        source: Literal["paired", "same-run"] = "paired"
        ref = paired.get(c.case.id)
        base = _tpot(ref)
        if base is None:
            source, ref = "same-run", nospec.get(c.case.concurrency)
            base = _tpot(ref)
        k = k_of(c)
        if k is None:
            skipped[key] = UnusableCase(["k (num_speculative_tokens) is unknown"], spec, base,
                                    source if base is not None else None)
            continue
        p, e, notes = _positions(c, k)
        notes = _tpot_note(c, ref) + notes
        shorter = _shorter_drafts_note(c, k)
        if shorter is not None:
            skipped[key] = UnusableCase([*notes, shorter], spec, base,
                                        source if base is not None else None)
            continue
        if spec is None:
            notes.append("no spec TPOT was measured")
        if base is None:
            notes.append(
                "no no-spec TPOT at this concurrency in this run"
                if nospec_id or paired
                else "the run has no no-spec config to compare with"
            )
        if e is None or spec is None or base is None:
            skipped[key] = UnusableCase(notes, spec, base, source if base is not None else None)
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
        points.append(SpecPoint(c, k, p, e, spec, base, source, notes, ci))
    return points, skipped


def _option(argv: Sequence[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def self_draft_ids(result: RunResult | Baseline) -> set[str]:
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


Family = tuple[str | None, str | None]  # (method, draft model)


def by_family(points: Iterable[SpecPoint]) -> dict[tuple[Family, int], list[SpecPoint]]:
    g: dict[tuple[Family, int], list[SpecPoint]] = defaultdict(list)
    for p in points:
        g[(p.family, p.concurrency)].append(p)
    return g
