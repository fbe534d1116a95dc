"""Outside CPU load of a case's trials, in the words the reports and the comparison use.

The engine's contention guard (:mod:`specperf.engine.contention`) records per trial how
many cores other processes used (``Trial.outside_cores``) and which attempts it measured
again; this module only reads those records: pure functions of the result objects. A
case with a kept ``contended`` trial is "busy": :func:`busy_reason` says why its latency
checks are not measured, :func:`run_busy_summary` says it for the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from specperf.schemas import CaseResult, Trial


@dataclass(frozen=True)
class TrialsLoad:
    """Outside load over a case's trials, as the reports show it."""

    #: None when no trial knows its outside load (old run files, not Linux).
    max_outside_cores: float | None
    #: Outside load of the attempts that were discarded and measured again.
    remeasured: tuple[float, ...]
    #: Outside load of the trials kept while still over the limit.
    contended: tuple[float, ...]

    @property
    def notable(self) -> bool:
        return bool(self.remeasured or self.contended)


def trials_load(trials: Iterable[Trial]) -> TrialsLoad:
    trials = list(trials)
    known = [t.outside_cores for t in trials if t.outside_cores is not None]
    return TrialsLoad(
        max_outside_cores=max(known) if known else None,
        remeasured=tuple(x for t in trials for x in t.remeasured_outside_cores),
        contended=tuple(t.outside_cores for t in trials
                        if t.contended and t.outside_cores is not None),
    )


def _cores(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values) + " cores"


def _trials(n: int) -> str:
    return f"{n} trial{'s' if n != 1 else ''}"


def load_cell(load: TrialsLoad) -> str:
    """A table cell: max outside cores of the kept trials, and what was re-measured."""
    if load.max_outside_cores is None:
        return "—"
    cell = f"{load.max_outside_cores:.2f}"
    extra = []
    if load.remeasured:
        extra.append(f"{len(load.remeasured)} re-measured")
    if load.contended:
        extra.append(f"{len(load.contended)} contended")
    return cell + (f" ({', '.join(extra)})" if extra else "")


def load_sentence(load: TrialsLoad, what: str = "") -> str | None:
    """'2 trials re-measured under outside load 0.90, 0.60 cores; 1 trial kept as measured
    under outside load 0.80 cores (contended)' -- None when nothing happened. "Kept as
    measured", not "after the retries": while the machine is known busy a contended trial
    is kept without any (engine.trials)."""
    parts = []
    if load.remeasured:
        parts.append(f"{_trials(len(load.remeasured))}{what} re-measured under outside load "
                     f"{_cores(load.remeasured)}")
    if load.contended:
        parts.append(f"{_trials(len(load.contended))}{what} kept as measured under outside "
                     f"load {_cores(load.contended)} (contended)")
    return "; ".join(parts) or None


def _paired(case: CaseResult, paired: Mapping[str, CaseResult] | None) -> list[Trial]:
    other = (paired or {}).get(case.case.id)
    return list(other.trials) if other is not None else []


def known(cases: Iterable[CaseResult], paired: Mapping[str, CaseResult] | None = None) -> bool:
    """Whether any trial knows its outside load (else a report leaves the column out: a run
    file from before the guard has nothing to show)."""
    return any(t.outside_cores is not None for c in cases
               for t in (*c.trials, *_paired(c, paired)))


def case_load(case: CaseResult, paired: Mapping[str, CaseResult] | None = None) -> TrialsLoad:
    """A case's outside load over its trials and its paired no-spec trials (both feed its
    checks); ``load_cell`` of it is the case's 'outside cores' cell."""
    return trials_load([*case.trials, *_paired(case, paired)])


def case_sentence(case: CaseResult, paired: Mapping[str, CaseResult] | None = None
                  ) -> str | None:
    """What the guard did for a case (its own and its paired no-spec trials), or None."""
    parts = [load_sentence(trials_load(case.trials)),
             load_sentence(trials_load(_paired(case, paired)), " (paired no-spec)")]
    return "; ".join(p for p in parts if p) or None


def comparison_note(baseline: Iterable[Trial], current: Iterable[Trial]) -> str | None:
    """The note ``specperf compare`` adds to a case when either side kept a contended
    trial; its verdicts are left as they are."""
    sides = []
    for name, trials in (("baseline", baseline), ("current", current)):
        load = trials_load(trials)
        if load.contended:
            sides.append(f"{name} measured under outside load {_cores(load.contended)} "
                         f"({_trials(len(load.contended))} contended)")
    if not sides:
        return None
    return ("; ".join(sides) + ": other processes used the CPU during these trials, so a "
            "REGRESSION here may be the machine, not vLLM")


# --------------------------------------------------------------------------- busy: not measured


def _cores_1(x: float) -> str:
    # One decimal, as a reader compares it with a limit like 0.25; a load that rounds to
    # 0.0 (only possible under a limit below 0.05) keeps two significant digits instead.
    return f"{x:.1f}" if round(x, 1) > 0 else f"{x:.2g}"


def _contended(trials: Iterable[Trial]) -> list[float]:
    return [t.outside_cores for t in trials if t.contended and t.outside_cores is not None]


def _any_contended(trials: Iterable[Trial]) -> bool:
    return any(t.contended for t in trials)


def busy_reason(trials: Iterable[Trial], paired_trials: Iterable[Trial] = ()) -> str | None:
    """Why a case's latency, throughput and TPOT-gain checks are not judged, or None.

    None when no kept trial -- of the case (``trials``) or of its paired no-spec
    reference (``paired_trials``) -- is ``contended``; else
    ``"machine busy (0.6 cores from other processes)"``, where the figure is the **maximum**
    outside load over those contended trials, to one decimal: the worst load the case's
    figures were measured under, and the same "max outside cores" the reports' column
    shows. (A median would hide the one trial that spoilt a check.) A contended trial
    whose load is missing (a hand-edited file) gives ``"machine busy"`` alone.
    """
    trials, paired_trials = list(trials), list(paired_trials)
    if not (_any_contended(trials) or _any_contended(paired_trials)):
        return None
    loads = _contended(trials) + _contended(paired_trials)
    if not loads:
        return "machine busy"
    return f"machine busy ({_cores_1(max(loads))} cores from other processes)"


def run_busy_summary(cases: Iterable[CaseResult],
                     paired: Mapping[str, CaseResult] | None = None) -> str | None:
    """The run summary's line when any case was busy (:func:`busy_reason` of its trials and
    its paired no-spec trials, ``paired`` keyed by the spec case's id as in
    ``RunResult.paired_nospec``): ``"machine busy: 3 of 12 cases not measured (up to 0.9
    cores from other processes)"``, the figure the maximum over those cases. None when no
    case was busy."""
    cases = list(cases)
    busy: list[float] = []
    n_busy = 0
    for c in cases:
        theirs = _paired(c, paired)
        if busy_reason(c.trials, theirs) is None:
            continue
        n_busy += 1
        busy.extend(_contended(c.trials) + _contended(theirs))
    if not n_busy:
        return None
    what = f"machine busy: {n_busy} of {len(cases)} case{'s' if len(cases) != 1 else ''} not measured"
    if not busy:
        return what
    return f"{what} (up to {_cores_1(max(busy))} cores from other processes)"
