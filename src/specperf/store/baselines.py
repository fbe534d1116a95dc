"""Baselines on disk: `baselines/<profile>/<hardware-id>.json`, written atomically.

A baseline is only comparable on the hardware it was measured on, so its file name is
the hardware id (:mod:`specperf.store.provenance`). Writes are atomic
(:func:`specperf.store.files.atomic_write_text`): an interrupted or failed run never
leaves a half-written baseline.
"""

from __future__ import annotations

from pathlib import Path

from specperf.schemas import Baseline
from specperf.store.files import BaselineError, atomic_write_text, read_model


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
    """Write the baseline atomically and file a copy in its bounded history."""
    text = baseline.model_dump_json(indent=1) + "\n"
    atomic_write_text(path, text)
    hist = history_dir(path)
    stamp = baseline.provenance.date.strftime("%Y%m%dT%H%M%S")
    commit = (baseline.provenance.git_commit or "nocommit")[:10]
    atomic_write_text(hist / f"{stamp}-{commit}.json", text)
    for old in sorted(hist.glob("*.json"))[:-keep]:
        old.unlink(missing_ok=True)


def load_history(path: Path) -> list[Baseline]:
    """The kept baselines for this file, oldest first (unreadable ones are skipped)."""
    out = []
    for f in sorted(history_dir(path).glob("*.json")):
        try:
            b = load_baseline(f)
        except BaselineError:
            continue
        if b is not None:
            out.append(b)
    return out
