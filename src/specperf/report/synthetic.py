"""Synthetic runs for tests, demos and looking at the renderers without a GPU.

The numbers follow the shape of the published A100 matrix (Qwen3-32B target, Qwen3-0.6B
and Qwen3-1.7B drafts, k = 1..5, concurrency 1..64; the table is in the comments of
perf_tests/profiles/a100-qwen3-32b.toml): spec decoding cuts TPOT at low concurrency, the
gain shrinks as the batch grows, TTFT always costs a little, and acceptance decays
geometrically with the draft position. They are a plausible cost model plus log-normal
noise, NOT measurements; every synthetic run says so in ``provenance.provisional``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import numpy as np

from specperf.schemas import (
    Acceptance,
    Baseline,
    Case,
    CaseResult,
    Provenance,
    RequestSample,
    RunResult,
    Summary,
    Trial,
)

__all__ = ["SynthConfig", "A100_CONFIGS", "synthetic_run", "scale_latency", "scale_throughput"]


@dataclass(frozen=True)
class SynthConfig:
    id: str
    label: str
    method: str | None = None
    draft_model: str | None = None
    k: int | None = None
    accept: float = 0.0  # i.i.d. per-token acceptance probability of the draft
    draft_ms: float = 0.0  # draft time per proposed token


def _a100_configs() -> tuple[SynthConfig, ...]:
    out = [SynthConfig("nospec", "no spec (baseline)")]
    for size, accept, draft_ms in (("0.6b", 0.72, 2.2), ("1.7b", 0.80, 4.5)):
        for k in range(1, 6):
            out.append(SynthConfig(
                f"qwen3-{size}-k{k}", f"Qwen3-{size.upper()} draft, k={k}", "draft_model",
                f"Qwen/Qwen3-{size.upper()}", k, accept, draft_ms,
            ))
    return tuple(out)


A100_CONFIGS = _a100_configs()
TARGET_TPOT_MS = 43.1


def _provenance(profile: str, hardware: str, hardware_id: str, vllm: str,
                when: datetime) -> Provenance:
    return Provenance(
        specperf_version="0.1.0",
        vllm_version=vllm,
        torch_version="2.13.0",
        hardware_id=hardware_id,
        hardware=hardware,
        accelerator="gpu",
        cuda_version="12.8",
        driver_version="570.86",
        python_version="3.11.7",
        date=when,
        git_commit="0123456789abcdef0123456789abcdef01234567",
        profile_name=profile,
        profile_hash="5ynth371c0ffee00",
        provisional="synthetic data (specperf.report.synthetic), not a measurement",
    )


def _summary(values: Sequence[float]) -> Summary:
    if not values:
        return Summary(n=0)
    a = np.asarray(values, dtype=float)
    return Summary(n=a.size, mean=float(a.mean()), median=float(np.median(a)),
                   p99=float(np.percentile(a, 99)), min=float(a.min()), max=float(a.max()),
                   stdev=float(a.std(ddof=1)) if a.size > 1 else 0.0)


def _expected(cfg: SynthConfig, c: int) -> tuple[float, float, float]:
    """(TPOT ms, TTFT ms, mean accepted tokens per step) of the cost model."""
    target = TARGET_TPOT_MS * (1.0 + 0.07 * math.log2(c))
    ttft = 55.0 * (1.0 + c / 6.0)
    if cfg.k is None:
        return target, ttft, 1.0
    a, k = cfg.accept, cfg.k
    tokens_per_step = (1.0 - a ** (k + 1)) / (1.0 - a)
    # Verifying k extra tokens costs more as the batch grows (compute-bound regime).
    verify = target * (1.0 + 0.02 * k * (1.0 + 1.2 * math.log2(c)))
    step = verify + k * cfg.draft_ms * (1.0 + 0.05 * math.log2(c))
    return step / tokens_per_step, ttft * 1.12 + 8.0 * k, tokens_per_step


def _case(cfg: SynthConfig, c: int, *, trials: int, requests: int, output_tokens: int,
          rng: np.random.Generator, start: datetime, run_cv: float, request_cv: float,
          accept_shift: float) -> CaseResult:
    tpot, ttft, tps = _expected(cfg, c)
    sig_run = math.sqrt(math.log1p(run_cv**2))
    sig_req = math.sqrt(math.log1p(request_cv**2))
    out_trials = []
    all_ok: list[RequestSample] = []
    acc_parts = []
    for t in range(trials):
        drift = rng.lognormal(-sig_run**2 / 2, sig_run)
        samples = []
        clock = 0.0
        for r in range(requests):
            tp = tpot * drift * rng.lognormal(-sig_req**2 / 2, sig_req) / 1000.0
            tt = ttft * drift * rng.lognormal(-sig_req**2 / 2, sig_req) / 1000.0
            e2e = tt + tp * (output_tokens - 1)
            samples.append(RequestSample(ok=True, start_s=clock, ttft_s=tt, e2e_s=e2e,
                                         output_tokens=output_tokens, prompt_tokens=200,
                                         chunks=output_tokens))
            if (r + 1) % c == 0:
                clock += e2e
        # Steady state: c streams busy all the time, so the trial lasts sum(e2e) / c.
        duration = sum(s.e2e_s or 0.0 for s in samples) / c if samples else 1.0
        tokens = sum(s.output_tokens for s in samples)
        acc = None
        if cfg.k is not None:
            steps = max(1.0, tokens / tps) if tokens else 100.0
            a = min(0.999, cfg.accept + accept_shift)
            per_pos = [float(round(steps * a ** (i + 1))) for i in range(cfg.k)]
            acc = Acceptance(drafts=float(round(steps)), draft_tokens=float(round(steps)) * cfg.k,
                             accepted_tokens=float(sum(per_pos)), accepted_per_position=per_pos)
            acc_parts.append(acc)
        out_trials.append(Trial(
            index=t, started_at=start + timedelta(minutes=t), duration_s=duration,
            samples=samples, output_tokens=tokens,
            output_throughput=tokens / duration if samples else c * 1000.0 / tpot,
            request_throughput=len(samples) / duration, acceptance=acc,
        ))
        all_ok.extend(samples)
    acceptance = None
    if acc_parts:
        acceptance = Acceptance(
            drafts=sum(p.drafts for p in acc_parts),
            draft_tokens=sum(p.draft_tokens for p in acc_parts),
            accepted_tokens=sum(p.accepted_tokens for p in acc_parts),
            accepted_per_position=[sum(p.accepted_per_position[i] for p in acc_parts)
                                   for i in range(len(acc_parts[0].accepted_per_position))],
        )
    return _with_summaries(CaseResult(
        case=Case(config_id=cfg.id, concurrency=c), config_label=cfg.label, method=cfg.method,
        draft_model=cfg.draft_model, num_speculative_tokens=cfg.k, vllm_version=None,
        trials=out_trials, n_requests=len(all_ok), n_errors=0,
        ttft_ms=Summary(n=0), tpot_ms=Summary(n=0), e2e_ms=Summary(n=0),
        output_throughput=0.0, request_throughput=0.0, acceptance=acceptance,
    ))


def _with_summaries(case: CaseResult) -> CaseResult:
    """Recompute the case-level figures from its trials (as measure.case_result does)."""
    ok = [s for t in case.trials for s in t.samples if s.ok]
    return case.model_copy(update={
        "ttft_ms": _summary([s.ttft_s * 1000 for s in ok if s.ttft_s is not None]),
        "tpot_ms": _summary([v * 1000 for s in ok if (v := s.tpot_s) is not None]),
        "e2e_ms": _summary([s.e2e_s * 1000 for s in ok if s.e2e_s is not None]),
        "output_throughput": float(np.mean([t.output_throughput for t in case.trials]))
        if case.trials else 0.0,
        "request_throughput": float(np.mean([t.request_throughput for t in case.trials]))
        if case.trials else 0.0,
    })


def synthetic_run(
    *,
    configs: Sequence[SynthConfig] = A100_CONFIGS,
    concurrencies: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    trials: int = 5,
    requests: int = 8,
    output_tokens: int = 128,
    seed: int = 0,
    run_cv: float = 0.03,
    request_cv: float = 0.08,
    accept_shift: float = 0.0,
    profile: str = "a100-qwen3-32b",
    hardware: str = "1 × NVIDIA A100-SXM4-80GB",
    hardware_id: str = "gpu-nvidia-a100-sxm4-80gb-x1",
    vllm_version: str = "0.32.0",
    run_dir: str = "synthetic-run",
    paired_max_concurrency: int | None = None,
) -> RunResult:
    """A deterministic (per ``seed``) synthetic run of the configs × concurrencies matrix.

    ``paired_max_concurrency``: also the no-spec trials a TPOT-gain gate pairs with each
    spec case at concurrencies up to it (``RunResult.paired_nospec``), drawn after the
    matrix so a seed gives the same cases with or without them."""
    rng = np.random.default_rng(seed)
    start = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
    cases = [
        _case(cfg, c, trials=trials, requests=requests, output_tokens=output_tokens, rng=rng,
              start=start, run_cv=run_cv, request_cv=request_cv, accept_shift=accept_shift)
        for cfg in configs for c in concurrencies
    ]
    cases = [c.model_copy(update={"vllm_version": vllm_version}) for c in cases]
    nospec = next((cfg for cfg in configs if cfg.k is None), None)
    paired: dict[str, CaseResult] = {}
    if paired_max_concurrency is not None and nospec is not None:
        for cfg in configs:
            for c in concurrencies:
                if cfg.k is None or c > paired_max_concurrency:
                    continue
                paired[Case(config_id=cfg.id, concurrency=c).id] = _case(
                    nospec, c, trials=trials, requests=requests, output_tokens=output_tokens,
                    rng=rng, start=start, run_cv=run_cv, request_cv=request_cv,
                    accept_shift=accept_shift,
                ).model_copy(update={"vllm_version": vllm_version})
    return RunResult(
        provenance=_provenance(profile, hardware, hardware_id, vllm_version, start),
        run_dir=run_dir, started_at=start, finished_at=start + timedelta(hours=1), cases=cases,
        paired_nospec=paired,
    )


def _selected(case: CaseResult, cases: Iterable[str] | None) -> bool:
    if cases is None:
        return True
    wanted = set(cases)
    return case.case.id in wanted or case.case.config_id in wanted


def scale_latency(result: RunResult | Baseline, factor: float, *, metric: str = "tpot",
                  cases: Iterable[str] | None = None) -> RunResult | Baseline:
    """The same result with one latency scaled by ``factor`` in every request of the
    selected cases (ids like ``nospec-c1``, or config ids), summaries recomputed.

    ``metric="tpot"`` stretches the decode (e2e - ttft), so E2E rises with it, as a real
    TPOT regression does; ``"ttft"`` delays the first token (and so the end).
    """
    if metric not in ("tpot", "ttft"):
        raise ValueError(f"metric must be 'tpot' or 'ttft', not {metric!r}")
    case_list = list(cases) if cases is not None else None
    new_cases = []
    for case in result.cases:
        if not _selected(case, case_list):
            new_cases.append(case)
            continue
        trials = []
        for t in case.trials:
            samples = []
            for s in t.samples:
                ttft, end = s.ttft_s, s.e2e_s
                if s.ok and ttft is not None and end is not None:
                    if metric == "tpot":
                        s = s.model_copy(update={"e2e_s": ttft + (end - ttft) * factor})
                    else:
                        shift = ttft * (factor - 1.0)
                        s = s.model_copy(update={"ttft_s": ttft + shift, "e2e_s": end + shift})
                samples.append(s)
            grow = factor if metric == "tpot" else 1.0
            trials.append(t.model_copy(update={
                "samples": samples,
                "duration_s": t.duration_s * grow,
                "output_throughput": t.output_throughput / grow,
                "request_throughput": t.request_throughput / grow,
            }))
        new_cases.append(_with_summaries(case.model_copy(update={"trials": trials})))
    return result.model_copy(update={"cases": new_cases})


def scale_throughput(result: RunResult | Baseline, factor: float, *,
                     cases: Iterable[str] | None = None) -> RunResult | Baseline:
    """The same result with every trial's throughput multiplied by ``factor``."""
    case_list = list(cases) if cases is not None else None
    new_cases = []
    for case in result.cases:
        if _selected(case, case_list):
            trials = [t.model_copy(update={"output_throughput": t.output_throughput * factor})
                      for t in case.trials]
            case = _with_summaries(case.model_copy(update={"trials": trials}))
        new_cases.append(case)
    return result.model_copy(update={"cases": new_cases})
