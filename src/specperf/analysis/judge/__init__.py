"""The judgement, read in its order: evidence → comparisons → holds → checks → exit.

1. **evidence** — :mod:`~specperf.analysis.judge.evidence`: one function gathers a case's
   evidence (its trials, the baseline case and its kept runs, the paired no-spec trials,
   the reference beside its config (:mod:`~specperf.analysis.judge.machine_reference`),
   its fresh-start confirmation) for the run and ``specperf compare`` alike;
2. **comparisons** — :func:`~specperf.analysis.judge.case.judge_case` compares each
   metric of a case with the statistics of :mod:`specperf.analysis.compare` (and stats,
   budget, acceptance, gain; a case measured on more than one server start start by
   start: :mod:`~specperf.analysis.judge.fresh_start`);
3. **holds** — :mod:`~specperf.analysis.judge.rules`: the hold rules, one ordered tuple
   (:data:`HOLD_RULES`) applied in one loop, each recorded by name on what it held;
4. **checks** — :mod:`~specperf.analysis.judge.kinds`: the checks of one perf item by its kind,
   each with the outcome :mod:`~specperf.analysis.judge.outcome` gives a comparison (the
   one verdict → outcome mapping);
5. **exit** — :mod:`~specperf.analysis.judge.exit_status`: one exit status from one list
   of checks (the numbers: :mod:`specperf.config.exits`).

A run against a baseline is :func:`~specperf.analysis.judge.run.compare_runs`: its
refusals and notes (:mod:`~specperf.analysis.judge.run_notes`), then each case's evidence
and ``judge_case``. :mod:`~specperf.analysis.judge.models` holds the results every renderer
views; :mod:`~specperf.analysis.judge.follow_up` what a comparison asks of the trial plan.
docs/statistics.md explains the rule order in one table.
"""

from specperf.analysis.judge.evidence import Against, Evidence
from specperf.analysis.judge.rules import HOLD_RULES, HoldContext, HoldRule, apply_holds

__all__ = ["HOLD_RULES", "Against", "Evidence", "HoldContext", "HoldRule", "apply_holds"]
