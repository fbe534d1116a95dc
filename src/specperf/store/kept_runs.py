"""Kept runs from a directory of run files: a nightly's own recent history.

A team keeps its nightlies' merged run files somewhere (the workflow's artifacts fetched
by :mod:`specperf.store.github_artifacts`, a shared mount, an object-store sync); this
reads them. Every ``*.json`` below the directory that is a specperf run or baseline is a
candidate; other JSON (a comparison, advice) is passed over, and one file seen under two
names (a report's copy of its run.json) counts once. Which candidates a run may pool —
same hardware, profile hash, vLLM version and prompts, not a regression night — is
decided in :mod:`specperf.analysis.reference`, next to the rule that pools a baseline's
``history/``, so the two cannot drift apart.

A bad file (unreadable, invalid) costs only its own pooling: with ``on_bad`` it is
skipped with one line naming it, as a perf run skips a bad history entry.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specperf.schemas import Baseline, RunResult
from specperf.store.files import BaselineError, load_result, one_line

__all__ = ["KeptRun", "read_kept_runs"]

_KINDS = ("specperf-run", "specperf-baseline")


@dataclass(frozen=True)
class KeptRun:
    """One candidate kept run and where it came from (what a report names it by)."""

    label: str
    result: RunResult | Baseline


def _kind(path: Path) -> str | None:
    """The file's ``kind`` when it is a specperf run or baseline, else None (read cheaply:
    a nightly's artifact also holds a comparison, advice and report files)."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return "unreadable"
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if kind in _KINDS else None


def read_kept_runs(directory: Path, on_bad: Callable[[str], None] | None = None) -> list[KeptRun]:
    """Every run or baseline file below ``directory``, oldest first; each measurement once.

    Raises :class:`BaselineError` for a missing directory, and for a bad file unless
    ``on_bad`` is given (then the file is skipped with one line naming it).
    """
    if not directory.is_dir():
        raise BaselineError(f"{directory}: no such directory of kept runs — give the directory "
                            "the nightlies' run files are kept in (e.g. the one `specperf "
                            "fetch-nightlies` filled)")
    found: dict[str, KeptRun] = {}
    for path in sorted(directory.rglob("*.json")):
        kind = _kind(path)
        if kind is None:
            continue
        try:
            result = load_result(path)
        except BaselineError as exc:
            if on_bad is None:
                raise
            on_bad(f"specperf: skipped a kept run: {one_line(str(exc))}")
            continue
        # A report's copy of run.json, or one run both fetched and synced: one measurement.
        found.setdefault(result.provenance.model_dump_json(), KeptRun(str(path), result))
    return sorted(found.values(), key=lambda k: k.result.provenance.date)
