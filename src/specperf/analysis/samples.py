"""The samples a comparison reads (pure, no I/O): a case's values per trial or per request,
and the same case in the kept runs that join the baseline.

:func:`per_trial` (one value per trial) and :func:`per_request` (pooled requests) are what
:mod:`specperf.analysis.compare`, :mod:`specperf.analysis.power` and the advice compare
on; :func:`kept_runs` and :func:`earlier_runs` choose the baseline's history that widens
the interval (docs/statistics.md). None of it needs scipy, so the engine reads the kept
runs without loading it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from specperf.schemas import Baseline, CaseResult, Provenance, RequestSample, RunResult, Trial

__all__ = ["by_start", "earlier_pairs", "earlier_runs", "interleaved", "kept_runs",
           "paired_requests", "per_request", "per_trial", "relative_tpot", "starts_of"]


def _latency_ms(s: RequestSample, key: str) -> float | None:
    if not s.ok:
        return None
    if key == "ttft":
        v = s.ttft_s
    elif key == "e2e":
        v = s.e2e_s
    else:
        v = s.tpot_s
    return None if v is None else v * 1000.0


def _trial_values(trial: Trial, key: str) -> list[float]:
    return [v for s in trial.samples if (v := _latency_ms(s, key)) is not None]


def per_trial(case: CaseResult, key: str) -> list[float]:
    """One value per trial: the trial's median latency (NaN for a trial with none), or its
    output throughput."""
    if key == "output_throughput":
        return [t.output_throughput for t in case.trials]
    out = []
    for t in case.trials:
        v = _trial_values(t, key)
        out.append(float(np.median(v)) if v else math.nan)
    return out


def per_request(case: CaseResult, key: str) -> list[float]:
    return [v for t in case.trials for v in _trial_values(t, key)]


def starts_of(trials: Sequence[Trial]) -> list[int]:
    """The server start each trial ran on (0 when unmarked: the only start)."""
    return [t.server_start or 0 for t in trials]


def by_start(case: CaseResult) -> list[CaseResult]:
    """The case once per server start its trials came from, in start order (one element
    for a case measured on one start): a fresh-server confirmation is judged per start."""
    starts = starts_of(case.trials)
    return [case.model_copy(update={"trials": [t for t, s in zip(case.trials, starts,
                                                                  strict=True) if s == start]})
            for start in sorted(set(starts))]


def kept_runs(baseline: RunResult | Baseline,
              history: Sequence[RunResult | Baseline]) -> list[RunResult | Baseline]:
    """The kept runs that may join the baseline: same hardware id, profile hash, vLLM
    version, prompts and model revisions (where both record them), not the baseline
    itself; newest first. (A run kept before an accepted upgrade
    measured another engine: pooling it would count the upgrade's shift as restart
    noise.)"""
    bp = baseline.provenance
    same = (bp.hardware_id, bp.profile_hash, bp.vllm_version)
    return [kept for kept in sorted(history, key=lambda h: h.provenance.date, reverse=True)
            if kept.provenance != bp
            and (kept.provenance.hardware_id, kept.provenance.profile_hash,
                 kept.provenance.vllm_version) == same
            and _same_prompts(kept.provenance, bp) and _same_models(kept.provenance, bp)]


def _same_prompts(a: Provenance, b: Provenance) -> bool:
    """Unknown (a run file from before prompts were hashed) matches anything."""
    return a.prompts_hash is None or b.prompts_hash is None or a.prompts_hash == b.prompts_hash


def _same_models(a: Provenance, b: Provenance) -> bool:
    """Other model revisions are other weights, as another vLLM is another engine: not
    restart noise. None recorded (a run file from before they were) matches anything."""
    return not a.model_revisions or not b.model_revisions or a.model_revisions == b.model_revisions


def earlier_runs(base: CaseResult, baseline: RunResult | Baseline,
                 history: Sequence[RunResult | Baseline]) -> list[CaseResult]:
    """The case in the :func:`kept_runs` whose server config is the baseline case's;
    newest first. Each measurement once: a case a `-k` update carried over into the
    baseline is also in the kept run that measured it (and, in histories written before
    updates filed only what they measured, in later entries too); counted again it would
    look like a second server start that agreed exactly, and shrink the between-run
    spread."""
    out: list[CaseResult] = []
    for kept in kept_runs(baseline, history):
        case = next((c for c in kept.cases if c.case == base.case), None)
        if (case is None or case.config_hash != base.config_hash or case.method != base.method
                or case.num_speculative_tokens != base.num_speculative_tokens
                or _seen(case, base, out)):
            continue
        out.append(case)
    return out


def _seen(case: CaseResult, base: CaseResult, taken: Sequence[CaseResult]) -> bool:
    """Whether ``case`` is the measurement ``base`` or one already in ``taken`` (the same
    trials: two measurements never share their samples and start times)."""
    return case == base or any(case == t for t in taken)


def earlier_pairs(base: CaseResult, baseline: RunResult | Baseline,
                  history: Sequence[RunResult | Baseline]) -> list[tuple[CaseResult, CaseResult]]:
    """The case and its paired no-spec trials in the :func:`kept_runs` that kept them
    (same server config as the baseline case); newest first."""
    out: list[tuple[CaseResult, CaseResult]] = []
    for kept in kept_runs(baseline, history):
        case = next((c for c in kept.cases if c.case == base.case), None)
        paired = kept.paired_nospec.get(base.case.id)
        if (case is None or paired is None or case.config_hash != base.config_hash
                or _seen(case, base, [c for c, _ in out])):
            continue
        out.append((case, paired))
    return out


def relative_tpot(spec: CaseResult, nospec: CaseResult, by_trial: bool) -> list[float]:
    """Spec TPOT / the same run's no-spec TPOT: per trial (each against its paired
    trial), or per request — each against the no-spec request it was interleaved with
    (load.pairing = "requests": the same prompt, moments apart, so the machine's speed
    cancels), else against the no-spec median."""
    if not by_trial and interleaved(spec, nospec):
        return [s / n for s, n in zip(*paired_requests(spec, nospec, "tpot"), strict=True)
                if not math.isnan(s) and n > 0]  # a NaN n is not > 0
    if by_trial:
        s, n = per_trial(spec, "tpot"), per_trial(nospec, "tpot")
        return [a / b for a, b in zip(s, n, strict=False)
                if math.isfinite(a) and math.isfinite(b) and b > 0]
    finite = [v for v in per_request(nospec, "tpot") if not math.isnan(v)]
    ref = float(np.median(finite)) if finite else math.nan
    if not ref > 0:
        return []
    return [v / ref for v in per_request(spec, "tpot")]


def paired_requests(spec: CaseResult, nospec: CaseResult, key: str
                    ) -> tuple[list[float], list[float]]:
    """Two interleaved cases' request latencies side by side, NaN where a request failed or
    has none, so the i-th values of the two lists ran moments apart on the same prompt.
    Only for cases where :func:`interleaved` holds."""
    s_out: list[float] = []
    n_out: list[float] = []
    for a, b in zip(spec.trials, nospec.trials, strict=True):
        for x, y in zip(a.samples, b.samples, strict=True):
            for out, v in ((s_out, _latency_ms(x, key)), (n_out, _latency_ms(y, key))):
                out.append(math.nan if v is None else v)
    return s_out, n_out


def interleaved(spec: CaseResult, nospec: CaseResult) -> bool:
    """Whether every trial of ``spec`` ran interleaved request by request with the trial of
    ``nospec`` at the same position (sample i of each is the same prompt, moments apart)."""
    return (len(spec.trials) == len(nospec.trials) > 0
            and all(a.interleaved and b.interleaved and len(a.samples) == len(b.samples)
                    for a, b in zip(spec.trials, nospec.trials, strict=True)))
