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
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from specperf.analysis.aggregate import sum_prefix_cache
from specperf.analysis.gain import gain_vs_floor
from specperf.analysis.outside_load import busy_reason
from specperf.analysis.verdict import outcome_of
from specperf.config.rules import CompareRules
from specperf.config.scenarios import PrefixCacheScenario
from specperf.schemas import CaseResult, GateCheck, PrefixCacheCounts, ScenarioResult

__all__ = ["check_gain", "check_hit_rate", "hit_rate", "prefix_cache_checks"]

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
                         higher_is_better=True, baseline=baseline, current=current,
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


def check_gain(spec: CaseResult, nospec: CaseResult, floor: float,
               rules: CompareRules) -> GateCheck:
    """The spec case's paired TPOT gain on the scenario's prompts against its floor."""
    comparison, _ = gain_vs_floor(spec, nospec, floor, rules)
    busy = busy_reason(spec.trials, nospec.trials)
    outcome = outcome_of(comparison, busy=busy is not None)
    if outcome == "busy":
        message = f"case {spec.case.id}: prefix-cache scenario: TPOT gain not measured: {busy}"
    else:
        word = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}[outcome]
        message = f"case {spec.case.id}: {word}: prefix-cache scenario: {comparison.reason}"
    current = comparison.current if math.isfinite(comparison.current) else None
    return GateCheck(case=spec.case, gate="prefix_cache", metric=comparison.metric,
                     unit="×", higher_is_better=True, current=current, threshold=floor,
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
