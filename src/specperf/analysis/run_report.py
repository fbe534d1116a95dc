"""The report of a run, built once: the run, its comparison with the baseline, its advice
and its exit status, which every view (the pytest summary, run.json and the reports of
:func:`specperf.report.write_all`, ``specperf report``) shows and none computes again.

:func:`build_run_report` is the one place the end of a run calls
:func:`~specperf.analysis.judge.run.compare_runs` and
:func:`~specperf.analysis.advice.advise`: before it, the plugin compared the run, the
report writer advised on it, and the pytest summary advised on it a second time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specperf.analysis.judge.exit_status import run_exit_status
from specperf.config.exits import Exit
from specperf.schemas import Baseline, RunResult

if TYPE_CHECKING:
    from specperf.analysis.advice import RunAdvice
    from specperf.analysis.judge.models import RunComparison
    from specperf.config.rules import CompareRules

__all__ = ["RunReport", "build_run_report"]


@dataclass(frozen=True)
class RunReport:
    """What the renderers of one run are handed; they compute nothing of it."""

    #: The run (or a baseline judged as one, by ``specperf compare`` and the upgrade A/B).
    run: RunResult | Baseline
    #: What it was compared against (the plots' ``vs_baseline`` overlays read it too).
    baseline: RunResult | Baseline | None = None
    #: How the comparison and the advice name that baseline.
    baseline_label: str | None = None
    comparison: RunComparison | None = None
    #: The cost-model advice; None for a run without speculative cases (or not asked).
    advice: RunAdvice | None = None
    #: Why there is no advice, when advising failed and the report was built not strict:
    #: advice explains a run, it never decides one.
    advice_error: str | None = None
    #: The status the run exits by (:func:`~specperf.analysis.judge.exit_status.run_exit_status`).
    exit_status: Exit = Exit.OK


def build_run_report(
    run: RunResult | Baseline,
    baseline: RunResult | Baseline | None = None,
    *,
    rules: CompareRules | None = None,
    history: Sequence[RunResult | Baseline] = (),
    run_label: str | None = None,
    baseline_label: str | None = None,
    force: bool = False,
    notes: Sequence[str] = (),
    judged_again: bool = False,
    with_advice: bool = True,
    advice_names_recorded_baseline: bool = False,
    strict: bool = True,
) -> RunReport:
    """Compare ``run`` with ``baseline`` (when given; ``rules``, ``history``, the labels and
    ``force`` are :func:`~specperf.analysis.judge.run.compare_runs`'), put ``notes`` (the
    choice of reference) first among the comparison's, advise on a run with speculative
    cases (``with_advice``; the findings backed by the comparison's verdicts), and settle
    the exit status.

    The baseline is named ``baseline_label``, else the path the run recorded;
    ``advice_names_recorded_baseline`` (``specperf report``) names it in the advice by the
    path the run recorded, whatever it was compared with (what that command has always
    written, kept as it was). With
    ``judged_again`` (``specperf compare``, the upgrade A/B) the comparison's outcomes
    replace the run's checks it makes again; without (the pytest run, whose checks were
    judged as it ran) the run exits by its own checks. Not ``strict`` (the plugin), an
    advice that fails is kept as ``advice_error`` instead of raised.
    """
    own = run if isinstance(run, RunResult) else None
    label = baseline_label or (own.baseline_path if own is not None else None)
    comparison = None
    if baseline is not None:
        # scipy: imported here, so `import specperf.analysis.run_report` stays cheap
        from specperf.analysis.judge.run import compare_runs

        comparison = compare_runs(run, baseline, rules, run_label=run_label,
                                  baseline_label=label, force=force, history=history)
        comparison.notes[:0] = notes
    advice, advice_error = None, None
    if with_advice and own is not None and any(c.method for c in own.cases):
        from specperf.analysis.advice import advise  # scipy, as above

        try:
            name = own.baseline_path if advice_names_recorded_baseline else label
            advice = advise(own, baseline, baseline_name=name, comparison=comparison)
        except Exception as exc:
            if strict:
                raise
            advice_error = f"{type(exc).__name__}: {exc}"
    checks = own.checks if own is not None else []
    status = run_exit_status(checks, comparison if judged_again else None)
    return RunReport(run=run, baseline=baseline, baseline_label=label, comparison=comparison,
                     advice=advice, advice_error=advice_error, exit_status=status)
