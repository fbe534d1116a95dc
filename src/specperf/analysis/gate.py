"""The exact checks: pure functions from a measured case to GateChecks.

Requests and the acceptance floors are exact (counts, counters); everything else a perf
test asserts is a comparison of :mod:`specperf.analysis.compare` (against the baseline, or
the paired TPOT gain against its floor), turned into checks by the case's kind
(:func:`specperf.analysis.judge.kinds.from_comparison`). Each check says in plain words
which case, which metric, the current figure and the limit, so the message is the
explanation.
"""

from __future__ import annotations

from specperf.config.gates import AcceptanceGate
from specperf.config.load import Load
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


#: A spec config whose mean acceptance length is within this of 1 speculates in name only:
#: every step still yields ~one token (issue #15: acceptance "stuck at 1" after an upgrade).
#: Fixed, not a profile key: no floor — or its absence — may let it pass.
SILENT_OFF_MARGIN = 0.02


#: The metric of :func:`check_speculation_on` (the hold rule ``sampled_acceptance`` lets
#: its pass stand).
SPECULATION_ON_METRIC = "mean acceptance length"


def check_speculation_on(result: CaseResult, exact: bool = True) -> GateCheck:
    """Whether the server speculated at all during the case: it proposed drafts and
    accepted more than a trace of them (mean acceptance length more than
    :data:`SILENT_OFF_MARGIN` above 1). Exact counters, like the floors, and judged
    whatever the floors are. Not ``exact`` (sampled acceptance): drafts proposed but
    (almost) none accepted is not called "silently off" but said as measured; the hold
    rule ``sampled_acceptance`` (specperf.analysis.judge.rules) then holds it."""
    case = result.case
    acc = result.acceptance
    limit = 1.0 + SILENT_OFF_MARGIN

    def mk(current: float | None, ok: bool, msg: str) -> GateCheck:
        return GateCheck(case=case, gate="acceptance", metric=SPECULATION_ON_METRIC,
                         higher_is_better=True, current=current, threshold=limit,
                         outcome="pass" if ok else "fail", message=msg)

    if acc is None:
        return mk(None, False, f"case {case.id}: acceptance cannot be measured: the server "
                               "exposes no vllm:spec_decode counters")
    mal = acc.mean_acceptance_length
    if acc.missing and mal is None:
        # An older metric generation (Acceptance.missing): no drafts counter, so no mean
        # acceptance length; speculation is on when tokens were drafted and accepted (V0:
        # its lifetime efficiency gauge above the no-speculation floor 1 / (k + 1)).
        told = acc.accepted_tokens > 0 if "counts" not in acc.missing else (
            acc.lifetime_acceptance_rate is not None and acc.lifetime_acceptance_rate > 0)
        what = (f"{acc.accepted_tokens:g} of {acc.draft_tokens:g} draft tokens accepted"
                if "counts" not in acc.missing
                else f"lifetime acceptance rate {acc.lifetime_acceptance_rate}")
        return mk(None, told, f"case {case.id}: speculation {'on' if told else 'off'}: {what} "
                              f"(mean acceptance length unknown: the server's {acc.generation} "
                              f"metrics have no {' / '.join(acc.missing)} counter)")
    if mal is None:
        return mk(None, False, (
            f"case {case.id}: speculation was silently off: the server proposed no drafts "
            f"during the case ({result.n_requests} requests served without speculating) — "
            "check that the speculative config drafts at this concurrency (e.g. "
            "num_speculative_tokens_per_batch_size giving k = 0 at this batch size) and that "
            "its prompts can be matched (ngram, suffix)"))
    if mal <= limit + RATE_EPS:
        if not exact:
            return mk(mal, False, (
                f"case {case.id}: mean acceptance length {mal:.4f} is within "
                f"{SILENT_OFF_MARGIN:g} of 1 ({acc.accepted_tokens:g} of {acc.draft_tokens:g} "
                "draft tokens accepted)"))
        return mk(mal, False, (
            f"case {case.id}: speculation was silently off: mean acceptance length "
            f"{mal:.4f} is within {SILENT_OFF_MARGIN:g} of 1 ({acc.accepted_tokens:g} "
            f"draft tokens accepted over {acc.drafts:g} drafts of {acc.draft_tokens:g} "
            "tokens): every step still yields about one token — a draft that is never "
            "accepted (wrong weights, tokenizer or sampling path)"))
    return mk(mal, True, f"case {case.id}: speculation on: mean acceptance length {mal:.4f} "
                         f"over {acc.drafts:g} drafts (more than {limit:g})")


def check_acceptance(result: CaseResult, gate: AcceptanceGate,
                     exact: bool = True) -> list[GateCheck]:
    """The acceptance kind's checks: speculation on (:func:`check_speculation_on`), then
    the floors. When speculation was off the floors are not judged: the one failure says
    why, whatever they are. ``exact`` is the profile's ``[compare] acceptance_exact``
    (false when it samples at temperature > 0): it words speculation on; which checks it
    then holds INCONCLUSIVE is the hold rule ``sampled_acceptance``'s
    (specperf.analysis.judge.rules.hold_checks)."""
    on = check_speculation_on(result, exact)
    if on.outcome != "pass":
        return [on]
    return [on, *check_acceptance_floors(result, gate)]


def check_acceptance_floors(result: CaseResult, gate: AcceptanceGate) -> list[GateCheck]:
    """The acceptance floors (overall and per draft position): exact counters, no interval
    needed. Against the baseline, acceptance is judged by the comparison
    (:func:`specperf.analysis.judge.kinds.from_comparison`) with the one tolerance of
    ``[compare.metrics.acceptance_rate]``."""
    case = result.case
    acc = result.acceptance

    def mk(metric: str, current: float | None, threshold: float | None, ok: bool,
           msg: str) -> GateCheck:
        return GateCheck(
            case=case, gate="acceptance", metric=metric, higher_is_better=True,
            current=current, threshold=threshold,
            outcome="pass" if ok else "fail", message=msg,
        )

    if acc is None or acc.rate is None:
        why = (
            "the server exposes no vllm:spec_decode counters"
            if acc is None
            else "the server's V0 metrics have no per-case counts (its counters add up "
                 "cumulative totals)" if "counts" in acc.missing
            else "no draft tokens were proposed during the case"
        )
        return [mk("acceptance_rate floor", None, gate.min_rate, False,
                   f"case {case.id}: acceptance cannot be measured: {why}")]

    checks: list[GateCheck] = []
    rate = acc.rate
    if gate.min_rate is not None:
        ok = rate + RATE_EPS >= gate.min_rate
        # "floor" in the name: the comparison against the baseline is "acceptance_rate".
        checks.append(mk(
            "acceptance_rate floor", rate, gate.min_rate, ok,
            f"case {case.id}: acceptance rate {rate:.4f} "
            + ("meets" if ok else "is below") + f" the floor {gate.min_rate:.4f}",
        ))
    mal = acc.mean_acceptance_length
    if gate.min_mean_length is not None and mal is not None:
        ok = mal + RATE_EPS >= gate.min_mean_length
        checks.append(mk(
            "mean acceptance length floor", mal, gate.min_mean_length, ok,
            f"case {case.id}: mean acceptance length {mal:.4f} "
            + ("meets" if ok else "is below") + f" the floor {gate.min_mean_length:.4f}",
        ))
    per_pos = acc.per_position_rate
    for i, floor in enumerate(gate.min_per_position or []):
        if i >= len(per_pos):
            checks.append(mk(f"acceptance_rate[pos {i}] floor", None, floor, False,
                             f"case {case.id}: no acceptance counter for draft position {i} "
                             f"(the server drafts {len(per_pos)} tokens)"))
            continue
        ok = per_pos[i] + RATE_EPS >= floor
        checks.append(mk(
            f"acceptance_rate[pos {i}] floor", per_pos[i], floor, ok,
            f"case {case.id}: acceptance at draft position {i} is {per_pos[i]:.4f}, "
            + ("meets" if ok else "below") + f" the floor {floor:.4f}",
        ))
    return checks
