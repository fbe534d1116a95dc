"""Baselines on disk: `baselines/<profile>/<hardware-id>.json`, written atomically.

A baseline is only comparable on the hardware it was measured on, so its file name is
the hardware id (:mod:`specperf.store.provenance`). Writes are atomic
(:func:`specperf.store.files.atomic_write_text`): an interrupted or failed run never
leaves a half-written baseline.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specperf.schemas import Baseline
from specperf.store.files import BaselineError, atomic_write_text, one_line, read_model


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


def write_baseline(path: Path, baseline: Baseline, keep: int = HISTORY_KEEP) -> None:
    """File the baseline in its bounded history, then make it the baseline; each atomic.

    The order is what keeps the pair consistent when a write fails or the process dies
    between the two: the history entry first, so an interruption leaves the previous
    baseline in place (whole) and the new run as one more kept run of the same profile —
    the run passed its gates, so pooling it is right. The other order would leave a
    baseline whose own copy is missing from the history, lost to the trend view and to
    pooling after the next update. Old entries are pruned only once both are written.
    """
    text = file_in_history(path, baseline)
    atomic_write_text(path, text)
    for old in sorted(history_dir(path).glob("*.json"))[:-keep]:
        old.unlink(missing_ok=True)


def file_in_history(path: Path, baseline: Baseline) -> str:
    """Write one kept run into the history of the baseline at ``path`` (atomically, named
    by its date and commit); returns its JSON text."""
    text = baseline.model_dump_json(indent=1) + "\n"
    stamp = baseline.provenance.date.strftime("%Y%m%dT%H%M%S")
    commit = (baseline.provenance.git_commit or "nocommit")[:10]
    atomic_write_text(history_dir(path) / f"{stamp}-{commit}.json", text)
    return text


def promote_runs(path: Path, runs: list[Baseline], keep: int = HISTORY_KEEP) -> None:
    """Make the newest of ``runs`` the baseline at ``path`` and file every one in its
    history (a promotion of kept nightlies). The older ones go into the history first and
    the newest last, through :func:`write_baseline`: an interruption leaves the previous
    baseline whole, with some of the new runs kept beside it — never a baseline whose
    runs are missing."""
    ordered = sorted(runs, key=lambda b: b.provenance.date)
    for older in ordered[:-1]:
        file_in_history(path, older)
    write_baseline(path, ordered[-1], keep=max(keep, len(ordered)))


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
