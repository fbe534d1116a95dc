"""Baselines on disk: `baselines/<profile>/<hardware-id>.json`, written atomically.

A baseline is only comparable on the hardware it was measured on, so its file name is
the hardware id (:mod:`specperf.store.provenance`). Writes are atomic
(:func:`specperf.store.files.atomic_write_text`): an interrupted or failed run never
leaves a half-written baseline.

Every write holds an exclusive lock on ``<baseline>.lock`` beside the file
(:func:`baseline_lock`), and an update re-reads the baseline under it
(:func:`update_baseline`): a run that read the baseline hours ago merges its cases into
what is there *now*, so two concurrent ``--perf-update-baselines`` of one baseline both
land. The lock file stays (removing it would let a waiter lock a file no longer on disk).
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from specperf.schemas import Baseline, Case, CaseResult, Provenance, RunResult
from specperf.store.files import BaselineError, atomic_write_text, one_line, read_model, safe_name

try:  # POSIX; vLLM and the runners are Linux
    import fcntl
except ImportError:  # pragma: no cover - Windows: writes stay atomic, just unlocked
    fcntl = None  # type: ignore[assignment]


def baseline_path(root: Path, profile_name: str, hardware_id: str) -> Path:
    return root / profile_name / f"{hardware_id}.json"


def load_baseline(path: Path) -> Baseline | None:
    if not path.exists():
        return None
    result = read_model(path, Baseline, "baseline")
    assert isinstance(result, Baseline)
    return result


#: How many earlier baselines are kept beside the current one, for a trend view and
#: change-point detection over the same format.
HISTORY_KEEP = 20


def history_dir(path: Path) -> Path:
    return path.parent / "history" / path.stem


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextmanager
def baseline_lock(path: Path, say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the exclusive lock of the baseline at ``path`` (``flock`` on ``<path>.lock``);
    waits for another process's write to finish, saying so once when it has to wait.
    Not re-entrant: a process holds it once per baseline."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say is not None:
                say(f"specperf: waiting for {lock} (another process is writing this baseline)")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def write_baseline(path: Path, baseline: Baseline, keep: int = HISTORY_KEEP) -> None:
    """File the baseline in its bounded history, then make it the baseline; each atomic,
    under the baseline's lock. For a run's ``--perf-update-baselines`` use
    :func:`update_baseline`, which also re-reads what is there now."""
    with baseline_lock(path):
        _write(path, baseline, baseline, keep)


def _write(path: Path, baseline: Baseline, measured: Baseline, keep: int) -> None:
    """Write ``measured`` (the run as measured: only the cases it ran) into the history,
    then ``baseline`` as the baseline; the caller holds the lock.

    The order is what keeps the pair consistent when a write fails or the process dies
    between the two: the history entry first, so an interruption leaves the previous
    baseline in place (whole) and the new run as one more kept run of the same profile —
    the run passed its gates, so pooling it is right. The other order would leave a
    baseline whose own measurements are missing from the history, lost to the trend view
    and to pooling after the next update. Old entries are pruned only once both are
    written.
    """
    file_in_history(path, measured)
    atomic_write_text(path, render(baseline))
    _prune(path, baseline, keep)


def _prune(path: Path, baseline: Baseline, keep: int) -> None:
    """Drop history entries beyond the newest ``keep``, except one holding the only kept
    copy of a case the baseline still carries (one a `-k` update kept): pooling needs it
    once the case is measured again."""
    entries = sorted(history_dir(path).glob("*.json"))
    if len(entries) <= keep:
        return
    orphans = {c.case: c for c in baseline.cases}
    for entry in entries[-keep:]:
        for c in _cases(entry):
            if orphans.get(c.case) == c:
                del orphans[c.case]
    for old in entries[:-keep]:
        held = [c for c in _cases(old) if orphans.get(c.case) == c]
        if held:
            for c in held:
                del orphans[c.case]
            continue
        old.unlink(missing_ok=True)


def _cases(entry: Path) -> list[CaseResult]:
    try:
        kept = load_baseline(entry)
    except BaselineError:  # a bad entry holds nothing worth keeping
        return []
    return kept.cases if kept is not None else []


def render(baseline: Baseline) -> str:
    """A baseline file's exact text."""
    return baseline.model_dump_json(indent=1) + "\n"


def file_in_history(path: Path, baseline: Baseline) -> Path:
    """Write one kept run into the history of the baseline at ``path``, named by its date
    and commit; returns where it went.

    The name is taken exclusively: the entry is written whole under a temporary name and
    hard-linked to its own (which fails rather than replace an entry), so two runs of one
    commit dated in the same second keep both entries (the second as ``…-2.json``)."""
    stamp = baseline.provenance.date.strftime("%Y%m%dT%H%M%S")
    # The last guard: every reader checks it already (store.files.read_model), but a
    # baseline built in memory from a run file's fields reaches this name too.
    commit = safe_name((baseline.provenance.git_commit or "nocommit")[:10], source=path,
                       field="provenance.git_commit", becomes="a history entry's name")
    folder = history_dir(path)
    tmp = folder / f".{stamp}-{commit}.{uuid.uuid4().hex}.tmp"
    atomic_write_text(tmp, render(baseline))
    try:
        for n in range(1, 10_000):
            target = folder / (f"{stamp}-{commit}.json" if n == 1 else f"{stamp}-{commit}-{n}.json")
            try:
                os.link(tmp, target)
            except FileExistsError:
                continue
            except OSError as exc:  # a file system without hard links: the lock serialises
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
                    raise
                if target.exists():
                    continue
                os.replace(tmp, target)
            return target
        raise OSError(errno.EEXIST, f"{folder}: no free history name for {stamp}-{commit}")
    finally:
        tmp.unlink(missing_ok=True)


class Promotion(NamedTuple):
    #: False: the newest run already was the baseline, nothing was written.
    written: bool
    #: The baseline found under the lock (None: none, or a broken one, which a
    #: promotion replaces).
    replaced: Baseline | None
    #: How many of the runs were filed in the history now (those already in it, from an
    #: earlier promote of overlapping runs, are not filed again).
    filed: int = 0


def _filed(path: Path) -> list[Provenance]:
    """The provenance of every run in the history of the baseline at ``path`` (a run's
    identity: its date, commit, machine, versions and profile hash); a bad entry is none."""
    out = []
    for entry in history_dir(path).glob("*.json"):
        try:
            kept = load_baseline(entry)
        except BaselineError:
            continue
        if kept is not None:
            out.append(kept.provenance)
    return out


def promote_runs(path: Path, runs: list[Baseline], keep: int = HISTORY_KEEP) -> Promotion:
    """Make the newest of ``runs`` the baseline at ``path`` and file every one in its
    history (a promotion of kept nightlies), under the baseline's lock — unless, read
    under that lock, the newest already is the baseline: then nothing is written, so two
    promotes of the same runs (a workflow rerun while the first waits on the lock) file
    them once, not twice (which would pool each measurement as two runs). A run already
    in the history (by its provenance: promotes of overlapping runs, 0-2 then 1-3) is not
    filed again, nor is a run given twice. The older ones go into the history first and
    the newest last: an interruption leaves the previous baseline whole, with some of the
    new runs kept beside it — never a baseline whose runs are missing."""
    ordered = sorted(runs, key=lambda b: b.provenance.date)
    with baseline_lock(path):
        try:
            current = load_baseline(path)
        except BaselineError:
            current = None  # a broken baseline is what a promotion replaces
        if current is not None and current.provenance == ordered[-1].provenance:
            return Promotion(written=False, replaced=current)
        seen = _filed(path)
        filed = 0
        for older in ordered[:-1]:
            if older.provenance not in seen:
                file_in_history(path, older)
                seen.append(older.provenance)
                filed += 1
        newest = ordered[-1]
        if newest.provenance in seen:  # filed before: only the baseline is written
            atomic_write_text(path, render(newest))
            _prune(path, newest, max(keep, len(ordered)))
        else:
            _write(path, newest, newest, keep=max(keep, len(ordered)))
            filed += 1
    return Promotion(written=True, replaced=current, filed=filed)


def measured_part(run: RunResult) -> Baseline:
    """The run as a kept run: only what it measured, under its own provenance — what goes
    into the history, so that a `-k` update never files the cases it carried over as if
    this run had measured them again (that would count one measurement as several runs
    and shrink the between-run spread)."""
    return Baseline(provenance=run.provenance, cases=list(run.cases),
                    paired_nospec=dict(run.paired_nospec),
                    pinned_acceptance=dict(run.pinned_acceptance),
                    pinned_rates=dict(run.pinned_rates))


def merged_baseline(current: Baseline | None, run: RunResult, where: Path | None = None
                    ) -> Baseline:
    """The run's cases over ``current``'s (a `-k` subset keeps the others as they were).

    ``current`` is dropped whole when it was recorded with another profile hash or other
    prompts (its cases no longer describe this profile). A partial run of another vLLM
    version than ``current`` is refused (:class:`BaselineError`): the cases it did not
    measure would be filed under the new version without having run on it."""
    old = current
    if old is not None and (
        old.provenance.profile_hash != run.provenance.profile_hash
        or not _same_prompts(old, run)
    ):
        old = None
    cases: dict[Case, CaseResult] = {c.case: c for c in (old.cases if old else [])}
    measured = {c.case for c in run.cases}
    carried = [c for k, c in cases.items() if k not in measured]
    if old is not None and carried and old.provenance.vllm_version != run.provenance.vllm_version:
        names = ", ".join(c.case.id for c in carried[:5]) + (
            f" and {len(carried) - 5} more" if len(carried) > 5 else "")
        raise BaselineError(
            f"{where or 'the baseline'}: field `provenance.vllm_version` is "
            f"{old.provenance.vllm_version!r}, this run's is {run.provenance.vllm_version!r}, "
            f"and it measured {len(measured)} of the baseline's cases, not {names}; a baseline "
            "holds one vLLM version's measurements — run every case (no -k) to record the "
            "baseline on this version; the baseline is unchanged")
    paired = dict(old.paired_nospec) if old is not None else {}
    twins = dict(old.pinned_acceptance) if old is not None else {}
    rates = dict(old.pinned_rates) if old is not None else {}
    for c in run.cases:
        cases[c.case] = c
        # A re-measured case keeps its own gain and twin (or none), never the old ones.
        paired.pop(c.case.id, None)
        twins.pop(c.case.id, None)
    paired.update(run.paired_nospec)
    twins.update(run.pinned_acceptance)
    rates.update(run.pinned_rates)
    with_twin = {c.case.config_id for c in twins.values()}
    rates = {cid: r for cid, r in rates.items() if cid in with_twin}
    return Baseline(provenance=run.provenance, cases=list(cases.values()),
                    paired_nospec=paired, pinned_acceptance=twins, pinned_rates=rates)


def _same_prompts(old: Baseline, run: RunResult) -> bool:
    was, now = old.provenance.prompts_hash, run.provenance.prompts_hash
    return was is None or now is None or was == now


def update_baseline(path: Path, run: RunResult, keep: int = HISTORY_KEEP,
                    say: Callable[[str], None] | None = None) -> Baseline:
    """``--perf-update-baselines``: under the baseline's lock, re-read the baseline as it
    is now, merge the run's cases into it (:func:`merged_baseline`), file the run's own
    cases in the history and write the merged baseline; returns what was written.

    Raises :class:`BaselineError` (nothing written) when the baseline on disk is bad or
    the merge is refused; OSError when a write fails (the old baseline stays whole)."""
    with baseline_lock(path, say):
        new = merged_baseline(load_baseline(path), run, path)
        _write(path, new, measured_part(run), keep)
    return new


def load_history(path: Path, on_bad: Callable[[str], None] | None = None) -> list[Baseline]:
    """The kept baselines for this file, oldest first.

    A bad entry (unreadable, not UTF-8, invalid) raises :class:`BaselineError` naming it;
    with ``on_bad``, it is skipped and ``on_bad`` gets one line naming it instead (a perf
    run must not be stopped by one corrupt earlier run: it only loses that run's pooling).
    """
    out = []
    for f in sorted(history_dir(path).glob("*.json")):
        try:
            b = load_baseline(f)
        except BaselineError as exc:
            if on_bad is None:
                raise
            on_bad(f"specperf: skipped a kept earlier run: {one_line(str(exc))}")
            continue
        if b is not None:
            out.append(b)
    return out
