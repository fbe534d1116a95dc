"""Reading a directory of kept run files (specperf.store.kept_runs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specperf.store.files import BaselineError
from specperf.store.kept_runs import read_kept_runs
from tests.support import NIGHTLIES, load_run


def test_reads_runs_below_the_directory_oldest_first_each_once(tmp_path: Path) -> None:
    for night in NIGHTLIES[:3][::-1]:
        dest = tmp_path / night.stem / "run.json"
        dest.parent.mkdir()
        shutil.copy(night, dest)
    # A report's copy of the same run, and JSON that is not a run: neither adds a run.
    (tmp_path / NIGHTLIES[0].stem / "report").mkdir()
    shutil.copy(NIGHTLIES[0], tmp_path / NIGHTLIES[0].stem / "report" / "run.json")
    (tmp_path / "compare.json").write_text('{"kind": "specperf-comparison"}')
    kept = read_kept_runs(tmp_path)
    assert [k.result.provenance.date for k in kept] == [
        load_run(p).provenance.date for p in NIGHTLIES[:3]]
    assert all(Path(k.label).name == "run.json" for k in kept)


def test_a_bad_file_costs_only_itself(tmp_path: Path) -> None:
    shutil.copy(NIGHTLIES[0], tmp_path / "good.json")
    (tmp_path / "broken.json").write_text('{"kind": "specperf-run", "cases": [')
    with pytest.raises(BaselineError, match="broken.json"):
        read_kept_runs(tmp_path)
    said: list[str] = []
    kept = read_kept_runs(tmp_path, on_bad=said.append)
    assert [Path(k.label).name for k in kept] == ["good.json"]
    assert len(said) == 1 and "broken.json" in said[0] and "skipped a kept run" in said[0]


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="no such directory of kept runs"):
        read_kept_runs(tmp_path / "nope")
