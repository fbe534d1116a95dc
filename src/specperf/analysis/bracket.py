"""The no-spec reference measured in blocks that bracket the spec configs
(``[load] reference = "bracket"``, docs/statistics.md "The bracketed gain").

A spec case measured beside no-spec has a paired trial next to each of its own, so the
machine's speed moves both sides alike and cancels from their ratio. Bracketed, no-spec
ran on its own server before the config's server started and after it stopped (the
blocks, each trial marked with its block: ``Trial.reference_block``); what the machine
did while the spec config ran is known only as far as the two blocks agree. So:

* the no-spec side of the gain is the bracketing blocks' samples pooled (both blocks
  alike), against the spec case's own, resampled independently (there are no pairs);
* the **drift** between the blocks — the largest block median over the smallest, less
  one — is this config's machine-speed reference. If the speed moved monotonically
  between the blocks, the level during the config lay between the two block medians,
  at most half the (log) drift from the pooled centre: the gain's interval is widened
  by that half on each side (:func:`widen`), and a TPOT-vs-no-spec comparison carries it
  as one more offset of the run (in quadrature with the kept runs' spread);
* when the drift is larger than the effect being judged, or unknown (one block), the
  hold rule ``bracket_drift`` (:mod:`specperf.analysis.judge.rules`) keeps the check
  INCONCLUSIVE: the interval assumes a monotone drift, which the blocks cannot show.

A case measured on two server starts (a fresh-server confirmation) has blocks of its
own around each start (the no-spec trials carry the spec start they bracket in
``server_start``): each start is judged against its own blocks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specperf.analysis.samples import per_request, per_trial
from specperf.schemas import CaseResult

__all__ = ["BlockDrift", "block_drift", "blocks_of", "bracketed", "pooled_level", "widen"]


def bracketed(nospec: CaseResult | None) -> bool:
    """Whether these no-spec trials are reference blocks' (reference = "bracket"), not
    trials paired with the spec case's own."""
    return nospec is not None and any(t.reference_block is not None for t in nospec.trials)


def blocks_of(nospec: CaseResult) -> list[CaseResult]:
    """The no-spec case once per reference block, in block order."""
    ids = sorted({t.reference_block for t in nospec.trials if t.reference_block is not None})
    return [nospec.model_copy(update={"trials": [t for t in nospec.trials
                                                 if t.reference_block == b]}) for b in ids]


def _values(case: CaseResult, by_trial: bool) -> list[float]:
    values = per_trial(case, "tpot") if by_trial else per_request(case, "tpot")
    return [v for v in values if math.isfinite(v) and v > 0]


@dataclass(frozen=True)
class BlockDrift:
    """How far the no-spec blocks bracketing a case disagree: their block indices, each
    block's median TPOT (ms), and ``drift`` = largest / smallest − 1 (None: fewer than two
    blocks with samples, so the drift is unknown)."""

    blocks: tuple[int, ...]
    medians: tuple[float, ...]
    drift: float | None

    @property
    def half_log(self) -> float:
        """Half the drift in log space: how far the level during the config can lie from
        the pooled blocks' centre if the speed moved monotonically between them."""
        return 0.0 if self.drift is None else math.log1p(self.drift) / 2

    def describe(self) -> str:
        """'no-spec blocks 0 and 1: 4.10 / 4.26 ms median TPOT, drift 3.9 %'."""
        names = " and ".join(str(b) for b in self.blocks) or "none"
        meds = " / ".join(f"{m:.2f}" for m in self.medians)
        what = (f"drift {self.drift * 100:.1f} %" if self.drift is not None
                else "drift unknown (one block)")
        return (f"no-spec block{'s' if len(self.blocks) != 1 else ''} {names}: {meds} ms "
                f"median TPOT, {what}")


def block_drift(nospec: CaseResult, by_trial: bool) -> BlockDrift:
    """The drift between the reference blocks of ``nospec`` (a start's, or a case's)."""
    ids: list[int] = []
    medians: list[float] = []
    for block in blocks_of(nospec):
        values = _values(block, by_trial)
        if values:
            ids.append(block.trials[0].reference_block or 0)
            medians.append(float(np.median(values)))
    drift = max(medians) / min(medians) - 1 if len(medians) >= 2 else None
    return BlockDrift(tuple(ids), tuple(medians), drift)


def pooled_level(nospec: CaseResult, by_trial: bool) -> float:
    """The no-spec median TPOT of the blocks pooled (NaN without samples)."""
    values = _values(nospec, by_trial)
    return float(np.median(values)) if values else math.nan


def widen(ci: tuple[float, float], drift: BlockDrift) -> tuple[float, float]:
    """A gain's interval widened by half the blocks' drift on each side (log space)."""
    k = math.exp(drift.half_log)
    return ci[0] / k, ci[1] * k


def by_spec_start(spec: CaseResult, nospec: CaseResult) -> list[tuple[CaseResult, CaseResult]]:
    """(spec trials, their blocks) per spec server start; one pair for one start."""
    starts = sorted({t.server_start or 0 for t in spec.trials})
    if len(starts) < 2:
        return [(spec, nospec)]
    return [(spec.model_copy(update={"trials": [t for t in spec.trials
                                                if (t.server_start or 0) == s]}),
             nospec.model_copy(update={"trials": [t for t in nospec.trials
                                                  if (t.server_start or 0) == s]}))
            for s in starts]


def starts_drift(pairs: Sequence[tuple[CaseResult, CaseResult]], by_trial: bool) -> BlockDrift:
    """The widest drift of any start's blocks (unknown if any start's is): what the
    case's checks are held by."""
    drifts = [block_drift(n, by_trial) for _, n in pairs]
    unknown = next((d for d in drifts if d.drift is None), None)
    if unknown is not None:
        return unknown
    return max(drifts, key=lambda d: d.drift or 0.0)
