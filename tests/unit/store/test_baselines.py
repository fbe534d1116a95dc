"""Baseline storage (specperf.store.baselines): where a baseline lives, round trips,
the bounded history, clear errors for bad files."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from specperf.store import baselines as store
from specperf.store import files
from tests.support import make_baseline


def test_round_trip(tmp_path: Path) -> None:
    b = make_baseline()
    path = store.baseline_path(tmp_path, "cpu-ci", b.provenance.hardware_id)
    store.write_baseline(path, b)
    assert store.load_baseline(path) == b
    assert not list(path.parent.glob(".*.tmp"))


def test_missing_is_none_and_corrupt_names_file_and_field(tmp_path: Path) -> None:
    assert store.load_baseline(tmp_path / "nope.json") is None
    path = tmp_path / "b.json"
    data = json.loads(make_baseline().model_dump_json())
    data["cases"][1]["acceptance"] = {"drafts": "many"}
    path.write_text(json.dumps(data))
    with pytest.raises(files.BaselineError) as err:
        store.load_baseline(path)
    assert str(path) in str(err.value) and "cases.1.acceptance.drafts" in str(err.value)
    path.write_text(path.read_text()[:100])
    with pytest.raises(files.BaselineError, match="not valid JSON .line 1"):
        store.load_baseline(path)


def test_history_is_bounded(tmp_path: Path) -> None:
    b = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    for i in range(5):
        prov = b.provenance.model_copy(update={"date": b.provenance.date + timedelta(days=i)})
        store.write_baseline(path, b.model_copy(update={"provenance": prov}), keep=3)
    hist = store.load_history(path)
    assert len(hist) == 3
    assert [h.provenance.date for h in hist] == sorted(h.provenance.date for h in hist)
    assert store.load_baseline(path).provenance.date == hist[-1].provenance.date  # type: ignore[union-attr]
