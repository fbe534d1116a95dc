"""The checks of a run's scenarios (config.scenarios): pure functions from a measured
:class:`~specperf.schemas.ScenarioResult` to GateChecks.

Prefix caching (``prefix_cache``): a spec config must use the prefix cache as the no-spec
config does on the same prompts — its hit rate (Δ vllm:prefix_cache_hits /
Δ vllm:prefix_cache_queries over its trials) within ``hit_rate_tolerance`` of the no-spec
config's — and its paired TPOT gain must stay significantly above the config's
``gates.tpot_gain`` floor (:func:`specperf.analysis.gain.gain_vs_floor`, the main
matrix's rule). The counters are exact (the same prompts, the prefix primed by a warm-up
before the first trial), so the hit rate is a comparison of two numbers, not of intervals;
the gain is a timing, judged by its interval: INCONCLUSIVE when undecided.

Segmented scenarios (``context_length``, ``categories``): per segment — a prompt-length
bucket, a task category — each spec config's acceptance rate (Σ accepted / Σ drafted
tokens over the segment's trials: exact counters, so a comparison of numbers) against the
segment's floor, and for context length against the shortest bucket's acceptance
(``max_relative_drop``); and its paired TPOT gain on the segment's prompts by the main
matrix's rule. Every message names the segment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from specperf.analysis.aggregate import sum_prefix_cache
from specperf.analysis.gain import gain_vs_floor
from specperf.analysis.judge.models import MetricDetail
from specperf.analysis.judge.outcome import outcome_of
from specperf.analysis.judge.rules import HoldContext, first_hold, held, rule_named
from specperf.analysis.outside_load import busy_reason
from specperf.config.rules import CompareRules
from specperf.config.scenarios import (
    CategoriesScenario,
    ContextLengthScenario,
    PrefixCacheScenario,
    SegmentedScenario,
)
from specperf.schemas import CaseResult, GateCheck, PrefixCacheCounts, ScenarioResult

__all__ = ["SEGMENT_WORD", "check_gain", "check_hit_rate", "check_segment_acceptance",
           "hit_rate", "prefix_cache_checks", "segmented_checks"]

#: What a segment of each segmented scenario is called in messages.
SEGMENT_WORD = {"context_length": "bucket", "categories": "category"}

#: Where the tolerance comes from, for messages.
TOLERANCE_KEY = "scenarios.prefix_cache.hit_rate_tolerance"


def prefix_counts(result: CaseResult) -> PrefixCacheCounts | None:
    """The case's prefix-cache counter deltas summed over its trials; None when no trial
    recorded them."""
    return sum_prefix_cache([t.prefix_cache for t in result.trials])


def hit_rate(result: CaseResult) -> float | None:
    counts = prefix_counts(result)
    return counts.hit_rate if counts is not None else None


def _pct(x: float) -> str:
    return f"{x * 100:.1f} %"


def _off(result: CaseResult, counts: PrefixCacheCounts | None) -> str | None:
    """Why the case's server used no prefix cache, or None when it did."""
    n = len(result.trials)
    if counts is None:
        return (f"its server served no vllm:prefix_cache_* counters over {n} trial(s), so "
                "its prefix-cache use is unknown")
    if counts.queries == 0:
        return (f"prefix caching is OFF on its server: vllm:prefix_cache_queries did not move "
                f"over {n} trial(s) (vLLM counts no lookups when caching is disabled) — "
                "check its serve_args and env for --no-enable-prefix-caching")
    return None


def check_hit_rate(spec: CaseResult, nospec: CaseResult, tolerance: float) -> GateCheck:
    """The spec case's hit rate against the no-spec case's on the same prompts."""
    case = spec.case
    s_counts, n_counts = prefix_counts(spec), prefix_counts(nospec)

    def mk(outcome: str, msg: str, current: float | None = None,
           baseline: float | None = None) -> GateCheck:
        return GateCheck(case=case, gate="prefix_cache", metric="prefix-cache hit rate",
                         samples="counters", higher_is_better=True, baseline=baseline,
                         current=current,
                         threshold=None if baseline is None else max(baseline - tolerance, 0.0),
                         outcome=outcome, message=msg)  # type: ignore[arg-type]

    why = _off(spec, s_counts)
    if why is not None:
        return mk("fail", f"case {case.id}: FAIL: prefix-cache hit rate: config "
                          f"{case.config_id!r}: {why}.")
    why = _off(nospec, n_counts)
    if why is not None:
        return mk("fail", f"case {case.id}: FAIL: prefix-cache hit rate cannot be judged: the "
                          f"no-spec reference {nospec.case.config_id!r}: {why}.")
    assert s_counts is not None and n_counts is not None
    h, h0 = s_counts.hit_rate, n_counts.hit_rate
    assert h is not None and h0 is not None
    diff = h - h0
    head = (f"prefix-cache hit rate {_pct(h)} ({s_counts.hits:.0f} of {s_counts.queries:.0f} "
            f"prompt tokens) vs the no-spec config's {_pct(h0)} ({n_counts.hits:.0f} of "
            f"{n_counts.queries:.0f}) on the same prompts")
    if abs(diff) <= tolerance + 1e-12:
        return mk("pass", f"case {case.id}: PASS: {head}: within {_pct(tolerance)} "
                          f"({TOLERANCE_KEY}).", h, h0)
    return mk("fail", f"case {case.id}: FAIL: config {case.config_id!r}: {head}: "
                      f"{'below' if diff < 0 else 'above'} it by {abs(diff) * 100:.1f} "
                      f"points, more than the tolerance {_pct(tolerance)} ({TOLERANCE_KEY}).",
              h, h0)


#: The hold rules a scenario's TPOT gain check is offered (in HOLD_RULES' order): the
#: fresh start's disagreement, which its start-by-start gain held before the rules were
#: named. Not ``not_confirmed``: a scenario's gain FAIL whose fresh start never came has
#: stood as measured (its confirmation is shown under the scenario's table).
SCENARIO_HOLDS = (rule_named("fresh_start_disagreed"),)


def check_gain(spec: CaseResult, nospec: CaseResult, floor: float,
               rules: CompareRules, *, gate: str = "prefix_cache",
               where: str = "prefix-cache scenario", segment: str | None = None) -> GateCheck:
    """The spec case's paired TPOT gain on the scenario's prompts against its floor;
    ``segment`` (e.g. "bucket long") goes into the metric's name."""
    comparison, samples = gain_vs_floor(spec, nospec, floor, rules)
    hit = first_hold(lambda rule: rule.holds(comparison, MetricDetail(
        key="tpot_gain", unit="×", samples=samples), HoldContext(rules=rules, current=spec)),  # type: ignore[arg-type]
        SCENARIO_HOLDS)
    if hit is not None:
        comparison = held(comparison, hit[1], hit[0].name)
    busy = busy_reason(spec.trials, nospec.trials)
    outcome = outcome_of(comparison, busy=busy is not None)
    if outcome == "busy":
        message = f"case {spec.case.id}: {where}: TPOT gain not measured: {busy}"
    else:
        word = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}[outcome]
        message = f"case {spec.case.id}: {word}: {where}: {comparison.reason}"
    current = comparison.current if math.isfinite(comparison.current) else None
    metric = comparison.metric if segment is None else f"{comparison.metric} [{segment}]"
    return GateCheck(case=spec.case, gate=gate, metric=metric,  # type: ignore[arg-type]
                     samples=samples, unit="×", higher_is_better=True, current=current,  # type: ignore[arg-type]
                     threshold=floor, held_by=comparison.held_by,
                     outcome=outcome, message=message)


def prefix_cache_checks(result: ScenarioResult, spec: PrefixCacheScenario,
                        floors: Mapping[str, float | None],
                        rules: CompareRules) -> dict[str, list[GateCheck]]:
    """Per spec case id: its hit-rate check, and its gain check where ``floors`` (per
    spec case id) has a floor."""
    out: dict[str, list[GateCheck]] = {}
    for case_id, nospec in result.paired_nospec.items():
        spec_case = next((c for c in result.cases if c.case.id == case_id), None)
        if spec_case is None:
            continue
        checks = [check_hit_rate(spec_case, nospec, spec.hit_rate_tolerance)]
        floor = floors.get(case_id)
        if floor is not None:
            checks.append(check_gain(spec_case, nospec, floor, rules))
        out[case_id] = checks
    return out


# --- segmented scenarios: context length, categories ---------------------------------


def _floor_key(kind: str, spec: SegmentedScenario, segment: str) -> str:
    """Where a segment's acceptance floor is set, for messages."""
    if isinstance(spec, ContextLengthScenario):
        i = next(i for i, b in enumerate(spec.buckets) if b.name == segment)
        return f"scenarios.{kind}.buckets[{i}].min_acceptance"
    if isinstance(spec, CategoriesScenario) and segment not in spec.min_acceptance:
        return f"scenarios.{kind}.default_min_acceptance"
    return f"scenarios.{kind}.min_acceptance.{segment}"


def check_segment_acceptance(kind: str, spec: SegmentedScenario, segment: str,
                             result: CaseResult,
                             reference: tuple[str, CaseResult] | None = None) -> list[GateCheck]:
    """The spec case's acceptance on one segment's prompts: against the segment's floor,
    and (``reference``: the reference segment's name and the case's result there) within
    ``max_relative_drop`` of the reference segment's acceptance. A segment without a
    single drafted token FAILs: speculation was off there, or its counters missing."""
    case = result.case
    word = SEGMENT_WORD[kind]
    label = f"{word} {segment!r}"
    metric = f"acceptance rate [{word} {segment}]"

    def mk(outcome: str, msg: str, m: str = metric, current: float | None = None,
           baseline: float | None = None, threshold: float | None = None,
           samples: str | None = "counters") -> GateCheck:
        return GateCheck(case=case, gate=kind, metric=m, higher_is_better=True,  # type: ignore[arg-type]
                         samples=samples, baseline=baseline, current=current,  # type: ignore[arg-type]
                         threshold=threshold, outcome=outcome, message=msg)  # type: ignore[arg-type]

    if result.n_errors:
        # A prompt longer than the server's --max-model-len is refused, and would otherwise
        # read as a segment without drafts.
        first = result.errors[0] if result.errors else "no error text"
        return [mk("fail", f"case {case.id}: FAIL: {kind} scenario: {label}: "
                           f"{result.n_errors} of {result.n_requests} requests failed "
                           f"(first: {first}) — is a prompt longer than the server's "
                           "--max-model-len? (the scenario's serve_args can raise it)",
                   m=f"requests [{word} {segment}]", samples=None)]
    acc = result.acceptance
    rate = acc.rate if acc is not None else None
    if rate is None:
        why = ("its server served no spec-decode counters" if acc is None
               else "not one token was drafted over its trials: speculation was off there")
        return [mk("fail", f"case {case.id}: FAIL: {kind} scenario: {label}: {why} "
                           f"({len(result.trials)} trial(s), {result.n_requests} requests).")]
    assert acc is not None
    counts = f"{acc.accepted_tokens:.0f} of {acc.draft_tokens:.0f} draft tokens accepted"
    checks: list[GateCheck] = []
    floor = spec.min_acceptance_of(segment)
    if floor is not None:
        key = _floor_key(kind, spec, segment)
        if rate >= floor - 1e-12:
            checks.append(mk("pass", f"case {case.id}: PASS: {kind} scenario: {label}: "
                                     f"acceptance {rate:.3f} ({counts}) ≥ its floor {floor:g} "
                                     f"({key}).", current=rate, threshold=floor))
        else:
            checks.append(mk("fail", f"case {case.id}: FAIL: {kind} scenario: acceptance "
                                     f"collapses in {label}: {rate:.3f} ({counts}) is below "
                                     f"its floor {floor:g} ({key}).",
                             current=rate, threshold=floor))
    drop = spec.max_relative_drop_of_acceptance
    if reference is not None and drop is not None and reference[0] != segment:
        ref_name, ref_result = reference
        ref_rate = ref_result.acceptance.rate if ref_result.acceptance is not None else None
        m = f"acceptance vs {word} {ref_name} [{word} {segment}]"
        key = f"scenarios.{kind}.max_relative_drop"
        if not ref_rate:
            checks.append(mk("fail", f"case {case.id}: FAIL: {kind} scenario: {label} cannot be "
                                     f"held to {word} {ref_name!r}: that {word} accepted no "
                                     "draft tokens.", m=m, current=rate))
        else:
            limit = (1.0 - drop) * ref_rate
            fall = 1.0 - rate / ref_rate
            head = (f"acceptance {rate:.3f} vs {ref_rate:.3f} in {word} {ref_name!r} "
                    f"({fall * 100:.1f} % lower)" if fall >= 0 else
                    f"acceptance {rate:.3f} vs {ref_rate:.3f} in {word} {ref_name!r} "
                    f"({-fall * 100:.1f} % higher)")
            if rate >= limit - 1e-12:
                checks.append(mk("pass", f"case {case.id}: PASS: {kind} scenario: {label}: "
                                         f"{head}: within {drop * 100:g} % ({key}).",
                                 m=m, current=rate, baseline=ref_rate, threshold=limit))
            else:
                checks.append(mk("fail", f"case {case.id}: FAIL: {kind} scenario: acceptance "
                                         f"collapses in {label}: {head}, more than "
                                         f"{drop * 100:g} % ({key}).",
                                 m=m, current=rate, baseline=ref_rate, threshold=limit))
    return checks


def segmented_checks(result: ScenarioResult, spec: SegmentedScenario,
                     floors: Mapping[str, float | None],
                     rules: CompareRules) -> dict[str, list[GateCheck]]:
    """Per spec case id: per segment its acceptance checks, and its paired TPOT-gain check
    where ``floors`` (per spec case id) has a floor."""
    kind = result.kind
    word = SEGMENT_WORD[kind]
    out: dict[str, list[GateCheck]] = {}
    ref_name = spec.reference_segment
    ref_segment = next((g for g in result.segments if g.name == ref_name), None)
    for segment in result.segments:
        for case_id, nospec in segment.paired_nospec.items():
            spec_case = next((c for c in segment.cases if c.case.id == case_id), None)
            if spec_case is None:
                continue
            ref_case = (next((c for c in ref_segment.cases if c.case.id == case_id), None)
                        if ref_segment is not None else None)
            checks = out.setdefault(case_id, [])
            checks += check_segment_acceptance(
                kind, spec, segment.name, spec_case,
                (ref_segment.name, ref_case) if ref_segment is not None and ref_case else None)
            floor = floors.get(case_id)
            if floor is not None:
                checks.append(check_gain(spec_case, nospec, floor, rules, gate=kind,
                                         where=f"{kind} scenario, {word} {segment.name!r}",
                                         segment=f"{word} {segment.name}"))
    return out
