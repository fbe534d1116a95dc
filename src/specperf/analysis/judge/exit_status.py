"""One exit status from one list of checks, for the pytest run, ``specperf compare``, the
upgrade A/B and the nightly report alike (docs/how-a-run-works.md, "Exit statuses").

The list is the run's own checks, with every check that a comparison makes (one per
compared metric of a case, :func:`specperf.analysis.judge.kinds.from_comparison`)
replaced by that comparison's outcome when the run is compared again. The checks a comparison does
not make — requests, the acceptance floors, the scenarios' — stay: before this, `specperf
compare` judged the comparisons alone and exited 0 on a run whose error rate had FAILED
in pytest (tests/e2e/test_perf_runs.py named the exception). A check of the run that the
new comparison does not remake (its case is missing from the other baseline) stays as
the run recorded it. How outcomes become an exit status (fail, then busy, then
inconclusive) is :mod:`specperf.analysis.judge.outcome`.
"""

from __future__ import annotations

from collections.abc import Sequence

from specperf.analysis.judge.models import RunComparison
from specperf.analysis.judge.outcome import exit_status
from specperf.config.exits import Exit
from specperf.schemas import Case, GateCheck
from specperf.schemas.gate import Outcome

__all__ = ["judged_outcomes", "run_exit_status"]


def judged_outcomes(checks: Sequence[GateCheck],
                    comparison: RunComparison | None) -> list[tuple[Case, str, Outcome]]:
    """(case, metric, outcome) of every check the exit status is computed from: the
    run's ``checks``, the comparison's outcome in place of each check it makes again."""
    if comparison is None:
        return [(c.case, c.metric, c.outcome) for c in checks]
    remade = [(cc.case, m.metric, cc.outcome(m)) for cc, m in comparison.all()]
    keys = {(case, metric) for case, metric, _ in remade}
    kept = [(c.case, c.metric, c.outcome) for c in checks if (c.case, c.metric) not in keys]
    return kept + remade


def run_exit_status(checks: Sequence[GateCheck], comparison: RunComparison | None) -> Exit:
    """The exit status of a run with these ``checks``, compared (``comparison``) or as it
    was judged: 2 when the comparison was refused (nothing judged), else 1 / 7 / 6 / 0 by
    the worst outcome of :func:`judged_outcomes`
    (:func:`specperf.analysis.judge.outcome.exit_status`)."""
    if comparison is not None and comparison.refusals:
        return Exit.BAD_INPUT
    return exit_status(outcome for _, _, outcome in judged_outcomes(checks, comparison))
