"""The case kinds: the test kinds the case measurer measures, and what each one judges.

A case kind is one object (:class:`CaseKind`) that says, for one perf item (its kind at
one case of the matrix), everything the judge needs: which cases of a profile it has,
which comparisons it asserts, its exact checks, and how it reads the case's comparison.
:data:`CASE_KINDS` lists them in the order their items run within a case; the scenario
kinds (measured on their own, specperf.engine.kinds) come after them in the one list of
every kind, :data:`specperf.engine.kinds.KINDS`.

* ``requests`` — the error budget, exact;
* ``acceptance`` — speculation on, then the floors, exact (sampled at temperature > 0:
  held by the hold rules, :func:`specperf.analysis.judge.rules.hold_checks`); plus the
  comparison's acceptance checks against the baseline when there is one;
* ``tpot_gain``, ``latency``, ``throughput`` — the case's comparison (against the
  baseline and the paired no-spec trials), one check per compared metric
  (:func:`from_comparison`); latency and throughput with nothing to judge against are one
  skipped check that says why (:func:`not_judged`);
* a baseline case that may not be compared with this run's (other prompts, another
  profile) fails the acceptance, latency and throughput items with the reason, in place
  of what they skipped.

Each check a comparison makes has the outcome :mod:`specperf.analysis.judge.outcome` gives it,
so the pytest outcome and ``specperf compare`` cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from specperf.analysis import gate
from specperf.analysis.judge.models import CaseComparison
from specperf.analysis.judge.rules import HoldContext, hold_checks
from specperf.analysis.stats import Comparison
from specperf.config.gates import Gates
from specperf.config.profile import Profile
from specperf.config.rules import Direction
from specperf.config.server_configs import ServerConfig
from specperf.schemas import Case, CaseResult, GateCheck

__all__ = ["ACCEPTANCE", "CASE_KINDS", "LATENCY", "REQUESTS", "THROUGHPUT", "TPOT_GAIN",
           "CaseKind", "from_comparison", "not_judged"]

#: Why a kind of every case has none.
_NO_CONFIGS = "the profile has no server config or concurrency"


@dataclass(frozen=True)
class CaseKind:
    """A test kind measured by the case measurer: its items are cases of the matrix."""

    name: str
    #: Whether the kind has an item at this server config (with its gates) and
    #: concurrency.
    applies: Callable[[ServerConfig, Gates, int], bool]
    #: Why a profile can have no case of it, and what would give it some.
    no_cases: str
    #: The comparisons (by MetricDetail.key) it asserts.
    metrics: frozenset[str] = frozenset()
    #: Its checks that no comparison makes (counts, counters), from the measured case.
    exact: Callable[[Case, CaseResult, Profile], list[GateCheck]] | None = None
    #: It compares the case with the baseline's: with nothing to judge against it is one
    #: skipped check that says why, and a baseline case that may not be compared fails it.
    against_baseline: bool = False
    #: It asserts the paired TPOT gain: its case needs the paired no-spec trials.
    paired: bool = False

    @property
    def judged(self) -> bool:
        """Its checks are all read from the case's comparison (with the baseline, and the
        paired gain): with [compare] confirm_after_matrix its items run after every
        config's cases (specperf.engine.after_matrix.AfterMatrix.waits)."""
        return self.exact is None

    def cases(self, profile: Profile, configs: list[ServerConfig]) -> list[Case]:
        """Its cases in ``profile``, config by config in the order given."""
        return [Case(config_id=cfg.id, concurrency=c) for cfg in configs
                for c in profile.concurrencies if self.applies(cfg, profile.gates_for(cfg), c)]

    def checks(self, case: Case, result: CaseResult, profile: Profile, *,
               judged: CaseComparison | None, no_baseline_reason: str,
               mismatch: str | None) -> list[GateCheck]:
        """The checks of its item at ``case`` (measured as ``result``, gated by
        ``profile``; ``judged``: its comparison, None when it has none; ``mismatch``: why
        its baseline case may not be compared, None when it may)."""
        checks = self.exact(case, result, profile) if self.exact is not None else []
        if judged is not None:
            checks += from_comparison(self, judged)
        if not self.against_baseline:
            return checks
        if not checks:
            checks = [not_judged(self, case, no_baseline_reason)]
        if mismatch:
            checks = [c for c in checks if c.outcome != "skip"] + [GateCheck(
                case=case, gate=self.name, metric="baseline", higher_is_better=True,  # type: ignore[arg-type]
                outcome="fail", message=mismatch,
            )]
        return checks


def _requests_checks(case: Case, result: CaseResult, profile: Profile) -> list[GateCheck]:
    return [gate.check_requests(result, profile.load)]


def _acceptance_checks(case: Case, result: CaseResult, profile: Profile) -> list[GateCheck]:
    acceptance = profile.gates_for(profile.config(case.config_id)).acceptance
    assert acceptance is not None, "an acceptance item exists only with its gate"
    return hold_checks(gate.check_acceptance(result, acceptance,
                                             exact=profile.compare.acceptance_exact),
                       HoldContext(rules=profile.compare, current=result))


def _every_case(cfg: ServerConfig, gates: Gates, concurrency: int) -> bool:
    return True


def _has_acceptance_gate(cfg: ServerConfig, gates: Gates, concurrency: int) -> bool:
    return cfg.is_spec and gates.acceptance is not None


def _has_gain_gate(cfg: ServerConfig, gates: Gates, concurrency: int) -> bool:
    return (cfg.is_spec and gates.tpot_gain is not None
            and concurrency <= gates.tpot_gain.max_concurrency)


REQUESTS = CaseKind("requests", _every_case, _NO_CONFIGS, exact=_requests_checks)
ACCEPTANCE = CaseKind(
    "acceptance", _has_acceptance_gate,
    "no speculative server config has an acceptance gate — add [gates.acceptance] "
    "(or gates.acceptance on a server config) to check acceptance",
    metrics=frozenset({"acceptance_rate"}), exact=_acceptance_checks, against_baseline=True)
TPOT_GAIN = CaseKind(
    "tpot_gain", _has_gain_gate,
    "no speculative server config has a tpot_gain gate at any of the profile's "
    "concurrencies (≤ its max_concurrency) — add [gates.tpot_gain] or raise its "
    "max_concurrency to check the TPOT gain",
    metrics=frozenset({"tpot_gain", "tpot_vs_nospec"}), paired=True)
# Every case, against the baseline ([compare] rules).
LATENCY = CaseKind("latency", _every_case, _NO_CONFIGS,
                   metrics=frozenset({"ttft", "tpot", "e2e"}), against_baseline=True)
THROUGHPUT = CaseKind("throughput", _every_case, _NO_CONFIGS,
                      metrics=frozenset({"output_throughput"}), against_baseline=True)

#: The case kinds, in the order their items run within a case.
CASE_KINDS: tuple[CaseKind, ...] = (REQUESTS, ACCEPTANCE, TPOT_GAIN, LATENCY, THROUGHPUT)


def from_comparison(kind: CaseKind, cc: CaseComparison) -> list[GateCheck]:
    """The checks of one test kind, one per comparison of the case that the kind asserts,
    each with the outcome :mod:`specperf.analysis.judge.outcome` gives it — the same as
    ``specperf compare`` shows for the case."""
    out = []
    for m in cc.comparisons:
        detail = cc.detail(m)
        if detail is None or detail.key not in kind.metrics:
            continue
        outcome = cc.outcome(m)
        if outcome == "busy":
            message = f"case {cc.case.id}: {m.metric} not measured: {cc.busy}"
        else:
            word = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}[outcome]
            message = f"case {cc.case.id}: {word}: {m.reason}"
        # The gain's comparison holds the floor where a baseline would be: it is the limit.
        floor = detail.key == "tpot_gain"
        out.append(GateCheck(
            case=cc.case, gate=kind.name, metric=m.metric, unit=detail.unit,  # type: ignore[arg-type]
            higher_is_better=m.direction is Direction.HIGHER_IS_BETTER,
            baseline=None if floor else _finite(m.baseline), current=_finite(m.current),
            threshold=_limit(m), outcome=outcome, message=message, held_by=m.held_by,
        ))
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _limit(m: Comparison) -> float | None:
    """The value the current figure is held to: the gain floor, or the baseline moved by
    the minimum effect in the bad direction."""
    if not math.isfinite(m.baseline):
        return None
    if m.min_effect == 0.0:
        return m.baseline
    worse = 1.0 + m.min_effect if m.direction is Direction.LOWER_IS_BETTER else 1.0 - m.min_effect
    return m.baseline * worse if m.statistic != "rate" else m.baseline - m.min_effect


def not_judged(kind: CaseKind, case: Case, reason: str) -> GateCheck:
    """A kind with nothing to judge against (no baseline case): skipped with the reason."""
    return GateCheck(case=case, gate=kind.name, metric="baseline", higher_is_better=True,  # type: ignore[arg-type]
                     outcome="skip", message=reason)
