"""Turning load samples and counter deltas into a case's figures (pure)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from datetime import datetime

import numpy as np

from specperf.config.server_configs import ServerConfig
from specperf.schemas import (
    Acceptance,
    Case,
    CaseResult,
    LoadResult,
    PrefixCacheCounts,
    Summary,
    Trial,
)


def summarise(values_s: Sequence[float], scale: float = 1000.0) -> Summary:
    """mean/median/p99/min/max/stdev of seconds, reported in ms by default."""
    v = [x * scale for x in values_s]
    if not v:
        return Summary(n=0)
    arr = np.asarray(v, dtype=float)
    return Summary(
        n=len(v),
        mean=float(arr.mean()),
        median=float(np.median(arr)),
        p99=float(np.percentile(arr, 99)),
        min=float(arr.min()),
        max=float(arr.max()),
        stdev=float(statistics.stdev(v)) if len(v) > 1 else 0.0,
    )


def make_trial(
    index: int, started_at: datetime, load: LoadResult, acceptance: Acceptance | None,
    outside_cores: float | None = None,
) -> Trial:
    ok = [s for s in load.samples if s.ok]
    out_tokens = sum(s.output_tokens for s in ok)
    dur = load.duration_s if load.duration_s > 0 else float("nan")
    return Trial(
        index=index,
        started_at=started_at,
        duration_s=load.duration_s,
        samples=load.samples,
        output_tokens=out_tokens,
        output_throughput=out_tokens / dur,
        request_throughput=len(ok) / dur,
        acceptance=acceptance,
        outside_cores=outside_cores,
    )


def sum_acceptance(parts: Sequence[Acceptance | None]) -> Acceptance | None:
    real = [p for p in parts if p is not None]
    if not real:
        return None
    k = max(len(p.accepted_per_position) for p in real)
    # What any part cannot tell, the sum cannot either; a V0 part's lifetime gauges are
    # the last trial's (the server's ratios as of then).
    missing = sorted({m for p in real for m in p.missing})
    drafts = [p.drafts for p in real]
    return Acceptance(
        drafts=None if any(d is None for d in drafts) else sum(d for d in drafts if d is not None),
        draft_tokens=sum(p.draft_tokens for p in real),
        accepted_tokens=sum(p.accepted_tokens for p in real),
        accepted_per_position=[
            sum(p.accepted_per_position[i] for p in real if i < len(p.accepted_per_position))
            for i in range(k)
        ],
        generation="v0" if any(p.generation == "v0" for p in real) else "v1",
        missing=missing,  # type: ignore[arg-type]
        lifetime_acceptance_rate=real[-1].lifetime_acceptance_rate,
        lifetime_efficiency=real[-1].lifetime_efficiency,
    )


def sum_prefix_cache(parts: Sequence[PrefixCacheCounts | None]) -> PrefixCacheCounts | None:
    real = [p for p in parts if p is not None]
    if not real:
        return None
    return PrefixCacheCounts(queries=sum(p.queries for p in real), hits=sum(p.hits for p in real))


def case_result(
    case: Case,
    config: ServerConfig,
    trials: Sequence[Trial],
    vllm_version: str | None,
    config_hash: str | None = None,
) -> CaseResult:
    samples = [s for t in trials for s in t.samples]
    ok = [s for s in samples if s.ok]
    errors = sorted({s.error for s in samples if not s.ok and s.error})
    spec = config.speculative_config or {}
    return CaseResult(
        case=case,
        config_hash=config_hash,
        config_label=config.label or config.id,
        method=spec.get("method") if config.is_spec else None,
        draft_model=config.draft_model,
        num_speculative_tokens=config.num_speculative_tokens,
        vllm_version=vllm_version,
        trials=list(trials),
        n_requests=len(samples),
        n_errors=len(samples) - len(ok),
        errors=errors[:20],
        ttft_ms=summarise([s.ttft_s for s in ok if s.ttft_s is not None]),
        tpot_ms=summarise([t for s in ok if (t := s.tpot_s) is not None]),
        e2e_ms=summarise([s.e2e_s for s in ok if s.e2e_s is not None]),
        output_throughput=float(np.mean([t.output_throughput for t in trials])),
        request_throughput=float(np.mean([t.request_throughput for t in trials])),
        acceptance=sum_acceptance([t.acceptance for t in trials]) if config.is_spec else None,
    )
