"""The checks of one perf item (a test kind of one case), from what was measured and
judged — the one place the per-kind rules live, for the pytest run (engine.session) and
any caller that re-judges a case.

* ``requests`` — the error budget, exact;
* ``acceptance`` — speculation on, then the floors, exact (sampled at temperature > 0:
  held by the hold rules, :func:`specperf.analysis.judge.rules.hold_checks`); plus the
  comparison's acceptance checks against the baseline when there is one;
* ``tpot_gain``, ``latency``, ``throughput`` — the case's comparison (against the
  baseline and the paired no-spec trials), one check per compared metric
  (:func:`specperf.analysis.gate.from_comparison`); latency and throughput with nothing
  to judge against are one skipped check that says why;
* a baseline case that may not be compared with this run's (other prompts, another
  profile) fails the acceptance, latency and throughput items with the reason, in place
  of what they skipped.
"""

from __future__ import annotations

from specperf.analysis import gate
from specperf.analysis.judge.models import CaseComparison
from specperf.analysis.judge.rules import HoldContext, hold_checks
from specperf.config.profile import Profile
from specperf.schemas import Case, CaseResult, GateCheck

__all__ = ["ITEM_KINDS", "item_checks"]

#: The kinds :func:`item_checks` knows, in the order their items run within a case.
ITEM_KINDS = ("requests", "acceptance", "tpot_gain", "latency", "throughput")


def item_checks(kind: str, case: Case, result: CaseResult, profile: Profile, *,
                judged: CaseComparison | None, no_baseline_reason: str,
                mismatch: str | None) -> list[GateCheck]:
    """The checks of the ``kind`` item of ``case`` (measured as ``result``, gated by
    ``profile``; ``judged``: its comparison, None when it has none; ``mismatch``: why its
    baseline case may not be compared, None when it may)."""
    if kind not in ITEM_KINDS:
        raise ValueError(f"unknown perf case kind {kind!r}; known: {ITEM_KINDS}")
    checks: list[GateCheck] = []
    if kind == "requests":
        return [gate.check_requests(result, profile.load)]
    if kind == "acceptance":
        acceptance = profile.gates_for(profile.config(case.config_id)).acceptance
        assert acceptance is not None, "an acceptance item exists only with its gate"
        checks = hold_checks(gate.check_acceptance(result, acceptance,
                                                   exact=profile.compare.acceptance_exact),
                             HoldContext(rules=profile.compare, current=result))
    if judged is not None:
        checks += gate.from_comparison(kind, judged)
    if kind in ("latency", "throughput") and not checks:
        checks = [gate.not_judged(kind, case, no_baseline_reason)]
    if mismatch and kind in ("acceptance", "latency", "throughput"):
        checks = [c for c in checks if c.outcome != "skip"] + [GateCheck(
            case=case, gate=kind, metric="baseline", higher_is_better=True,  # type: ignore[arg-type]
            outcome="fail", message=mismatch,
        )]
    return checks
