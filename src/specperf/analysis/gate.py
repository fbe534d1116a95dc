"""The gates: pure functions from measured cases (and baselines) to GateChecks.

Each check says in plain words which case, which metric, the baseline, the current
figure and the threshold, so the pytest failure message is the explanation.
"""

from __future__ import annotations

from specperf.config.profile import AcceptanceGate, BudgetGate, Load, TpotGainGate
from specperf.schemas import CaseResult, GateCheck

#: Acceptance figures are ratios of integer counters; this absorbs float round-off
#: without hiding a change of one token in a million.
RATE_EPS = 1e-9


def _pct(x: float) -> str:
    return f"{x * 100:.1f} %"


def check_requests(result: CaseResult, load: Load) -> GateCheck:
    rate = result.error_rate
    ok = rate <= load.error_budget + RATE_EPS and result.n_requests > result.n_errors
    if ok:
        msg = f"{result.n_requests - result.n_errors}/{result.n_requests} requests succeeded"
    else:
        first = result.errors[0] if result.errors else "unknown error"
        msg = (
            f"case {result.case.id}: {result.n_errors} of {result.n_requests} requests failed "
            f"({_pct(rate)}), over the error budget of {_pct(load.error_budget)}; first error: "
            f"{first}"
        )
    return GateCheck(
        case=result.case,
        gate="requests",
        metric="error_rate",
        higher_is_better=False,
        current=rate,
        threshold=load.error_budget,
        outcome="pass" if ok else "fail",
        message=msg,
    )


def check_acceptance(
    result: CaseResult, gate: AcceptanceGate, baseline: CaseResult | None
) -> list[GateCheck]:
    case = result.case
    acc = result.acceptance

    def mk(metric: str, current: float | None, threshold: float | None, base: float | None,
           ok: bool, msg: str) -> GateCheck:
        return GateCheck(
            case=case, gate="acceptance", metric=metric, higher_is_better=True,
            baseline=base, current=current, threshold=threshold,
            outcome="pass" if ok else "fail", message=msg,
        )

    if acc is None or acc.rate is None:
        why = (
            "the server exposes no vllm:spec_decode counters"
            if acc is None
            else "no draft tokens were proposed during the case"
        )
        return [mk("acceptance_rate", None, gate.min_rate, None, False,
                   f"case {case.id}: acceptance cannot be measured: {why}")]

    checks: list[GateCheck] = []
    rate = acc.rate
    base_acc = baseline.acceptance if baseline is not None else None
    base_rate = base_acc.rate if base_acc is not None else None
    if gate.min_rate is not None:
        ok = rate + RATE_EPS >= gate.min_rate
        checks.append(mk(
            "acceptance_rate", rate, gate.min_rate, base_rate, ok,
            f"case {case.id}: acceptance rate {rate:.4f} "
            + ("meets" if ok else "is below") + f" the floor {gate.min_rate:.4f}"
            + (f" (baseline {base_rate:.4f})" if base_rate is not None else ""),
        ))
    per_pos = acc.per_position_rate
    for i, floor in enumerate(gate.min_per_position or []):
        if i >= len(per_pos):
            checks.append(mk(f"acceptance_rate[pos {i}]", None, floor, None, False,
                             f"case {case.id}: no acceptance counter for draft position {i} "
                             f"(the server drafts {len(per_pos)} tokens)"))
            continue
        ok = per_pos[i] + RATE_EPS >= floor
        checks.append(mk(
            f"acceptance_rate[pos {i}]", per_pos[i], floor, None, ok,
            f"case {case.id}: acceptance at draft position {i} is {per_pos[i]:.4f}, "
            + ("meets" if ok else "below") + f" the floor {floor:.4f}",
        ))
    if base_acc is not None and base_rate is not None:
        tol = gate.baseline_tolerance
        ok = rate + tol + RATE_EPS >= base_rate
        checks.append(mk(
            "acceptance_rate vs baseline", rate, base_rate - tol, base_rate, ok,
            f"case {case.id}: acceptance rate {rate:.4f} vs baseline {base_rate:.4f} "
            f"(tolerance −{tol:.4f}): " + ("within" if ok else "REGRESSED beyond") + " tolerance",
        ))
        base_pp = base_acc.per_position_rate
        for i, (cur, base) in enumerate(zip(per_pos, base_pp, strict=False)):
            ok = cur + tol + RATE_EPS >= base
            checks.append(mk(
                f"acceptance_rate[pos {i}] vs baseline", cur, base - tol, base, ok,
                f"case {case.id}: acceptance at draft position {i} is {cur:.4f} vs baseline "
                f"{base:.4f} (tolerance −{tol:.4f})",
            ))
    return checks


def check_tpot_gain(result: CaseResult, nospec: CaseResult | None, gate: TpotGainGate) -> GateCheck:
    case = result.case
    need = gate.ratio_at(case.concurrency)
    spec_tpot = result.tpot_ms.median
    base_tpot = nospec.tpot_ms.median if nospec is not None else None

    def mk(ok: bool | None, msg: str, current: float | None = spec_tpot) -> GateCheck:
        return GateCheck(
            case=case, gate="tpot_gain", metric="median TPOT vs no-spec (same run)", unit="ms",
            higher_is_better=False, baseline=base_tpot, current=current, threshold=need,
            outcome="skip" if ok is None else ("pass" if ok else "fail"), message=msg,
        )

    if nospec is None or base_tpot is None:
        return mk(False, f"case {case.id}: the no-spec server was not measured at concurrency "
                         f"{case.concurrency} in this run, so the TPOT gain cannot be computed")
    if spec_tpot is None or spec_tpot <= 0:
        return mk(False, f"case {case.id}: no TPOT was measured (every request failed or "
                         "produced fewer than 2 tokens)")
    gain = base_tpot / spec_tpot
    ok = gain + RATE_EPS >= need
    verb = "meets" if ok else "is below"
    return mk(ok, f"case {case.id}: median TPOT {spec_tpot:.2f} ms vs no-spec {base_tpot:.2f} ms "
                  f"in the same run: gain {gain:.2f}× {verb} the required {need:.2f}×")


def check_ttft_budget(result: CaseResult, baseline: CaseResult | None, gate: BudgetGate,
                      no_baseline_reason: str) -> GateCheck:
    case = result.case
    # A provisional baseline from published figures may carry only means; the budget
    # then compares means on both sides ("used only for the metrics it has").
    stat = "median"
    if baseline is not None and baseline.ttft_ms.median is None and baseline.ttft_ms.mean is not None:
        stat = "mean"
    cur = getattr(result.ttft_ms, stat)
    base = getattr(baseline.ttft_ms, stat) if baseline is not None else None
    common = dict(case=case, gate="ttft_budget", metric=f"{stat} TTFT", unit="ms",
                  higher_is_better=False, current=cur)
    if base is None:
        return GateCheck(**common, outcome="skip", message=no_baseline_reason)  # type: ignore[arg-type]
    limit = base * (1.0 + gate.ttft_tolerance)
    if cur is None:
        return GateCheck(**common, baseline=base, threshold=limit, outcome="fail",  # type: ignore[arg-type]
                         message=f"case {case.id}: no TTFT was measured (every request failed)")
    ok = cur <= limit
    return GateCheck(
        **common, baseline=base, threshold=limit, outcome="pass" if ok else "fail",  # type: ignore[arg-type]
        message=f"case {case.id}: {stat} TTFT {cur:.1f} ms vs baseline {base:.1f} ms "
                f"({(cur / base - 1) * 100:+.1f} %), budget ≤ {limit:.1f} ms "
                f"(+{gate.ttft_tolerance * 100:.0f} %): " + ("within" if ok else "OVER") + " budget",
    )


def check_throughput_budget(result: CaseResult, baseline: CaseResult | None, gate: BudgetGate,
                            no_baseline_reason: str) -> GateCheck:
    case = result.case
    cur = result.output_throughput
    base = baseline.output_throughput if baseline is not None else None
    common = dict(case=case, gate="throughput_budget", metric="output throughput", unit="tok/s",
                  higher_is_better=True, current=cur)
    if base is None:
        return GateCheck(**common, outcome="skip", message=no_baseline_reason)  # type: ignore[arg-type]
    floor = base * (1.0 - gate.throughput_tolerance)
    ok = cur >= floor
    return GateCheck(
        **common, baseline=base, threshold=floor, outcome="pass" if ok else "fail",  # type: ignore[arg-type]
        message=f"case {case.id}: output throughput {cur:.1f} tok/s vs baseline {base:.1f} tok/s "
                f"({(cur / base - 1) * 100:+.1f} %), floor ≥ {floor:.1f} tok/s "
                f"(−{gate.throughput_tolerance * 100:.0f} %): " + ("within" if ok else "BELOW") + " budget",
    )
