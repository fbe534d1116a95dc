"""The judgement: which rule decides, or holds, each check.

* :mod:`~specperf.analysis.judge.evidence` — one function gathers a case's evidence (its
  trials, the baseline case and its kept runs, the paired no-spec trials, the reference
  beside its config, its fresh-start confirmation) for the run and ``specperf compare``;
* :mod:`~specperf.analysis.judge.rules` — the hold rules, one ordered tuple
  (:data:`HOLD_RULES`) applied in one loop, each recorded by name on what it held;
* :mod:`~specperf.analysis.judge.models` — the results every renderer views;
* :mod:`~specperf.analysis.judge.run_notes` — refusals and the run's notes;
* :mod:`~specperf.analysis.judge.follow_up` — what a comparison asks of the trial plan.

The comparison maths is :mod:`specperf.analysis.compare` (and stats, budget, acceptance,
gain); docs/statistics.md explains the rule order in one table.
"""

from specperf.analysis.judge.evidence import Against, Evidence
from specperf.analysis.judge.rules import HOLD_RULES, HoldContext, HoldRule, apply_holds

__all__ = ["HOLD_RULES", "Against", "Evidence", "HoldContext", "HoldRule", "apply_holds"]
