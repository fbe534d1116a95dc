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


# --------------------------------------------------------------------------- nothing lost


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_failed_baseline_write_leaves_a_consistent_pair(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second of the two writes (the baseline itself) fails, as a full disk or a kill
    would make it: the previous baseline is whole and unchanged, the new run is one
    complete kept run in the history, and loading the pair works."""
    old = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, old)
    before = path.read_bytes()
    prov = old.provenance.model_copy(update={"date": old.provenance.date + timedelta(days=1),
                                             "git_commit": "newcommit1"})
    new = old.model_copy(update={"provenance": prov})
    real_write = store.atomic_write_text

    def failing(target: Path, text: str) -> None:
        if target == path:
            raise OSError(28, "No space left on device")
        real_write(target, text)

    monkeypatch.setattr(store, "atomic_write_text", failing)
    with pytest.raises(OSError):
        store.write_baseline(path, new)
    assert path.read_bytes() == before
    assert not list(path.parent.rglob(".*.tmp"))
    hist = store.load_history(path)
    assert [h.provenance.date for h in hist] == [old.provenance.date, prov.date]
    assert store.load_baseline(path) == old


def test_a_failed_history_write_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first write (the history entry) fails: neither file changes."""
    old = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, old)
    snapshot = _files(tmp_path)

    def failing(target: Path, text: str) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(store, "atomic_write_text", failing)
    prov = old.provenance.model_copy(update={"date": old.provenance.date + timedelta(days=1)})
    with pytest.raises(OSError):
        store.write_baseline(path, old.model_copy(update={"provenance": prov}))
    assert _files(tmp_path) == snapshot


def test_a_bad_history_entry_is_named_or_skipped_with_a_note(tmp_path: Path) -> None:
    """Strict (the `specperf` commands): BaselineError naming the entry. With on_bad (a
    perf run): skipped, one line naming it, the good entries still loaded."""
    b = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, b)
    bad = store.history_dir(path) / "20990101T000000-broken.json"
    bad.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(files.BaselineError, match=r"20990101T000000-broken\.json: not UTF-8"):
        store.load_history(path)
    notes: list[str] = []
    assert store.load_history(path, on_bad=notes.append) == [b]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert str(bad) in notes[0] and "not UTF-8" in notes[0]


def test_a_perf_run_skips_a_bad_kept_run_and_refuses_a_bad_baseline(tmp_path: Path) -> None:
    """BaselineContext.load, as the plugin calls it: a bad history entry is a note naming
    it and the run goes on with its baseline; a bad baseline is BaselineError naming it
    (the plugin makes that a usage error)."""
    from specperf.config.profile import load_profile
    from specperf.engine.baseline_context import BaselineContext
    from tests.support import CPU_CI_PROFILE

    profile = load_profile(CPU_CI_PROFILE)
    b = make_baseline()
    path = store.baseline_path(tmp_path, profile.name, b.provenance.hardware_id)
    store.write_baseline(path, b)
    deep = store.history_dir(path) / "20990101T000000-deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    notes: list[str] = []
    ctx = BaselineContext.load(profile, tmp_path, b.provenance, notes.append)
    assert ctx.baseline == b and ctx.history == [b]
    assert [n for n in notes if str(deep) in n and "nested deeper" in n]
    path.write_bytes(b"\x00\x01\x02\xff")
    with pytest.raises(files.BaselineError, match=f"{path.name}: not UTF-8"):
        BaselineContext.load(profile, tmp_path, b.provenance, notes.append)
