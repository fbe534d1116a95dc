"""Baseline storage: hardware id, atomic writes, clear errors for bad files."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specperf.config.profile import load_profile
from specperf.schemas import Baseline
from specperf.store import baselines as store
from specperf.store import files, provenance
from tests.support import REPO_ROOT

REPO = REPO_ROOT


def make_baseline(build_case) -> Baseline:
    profile = load_profile(REPO / "tests" / "profiles" / "cpu-ci.toml")
    prov = provenance.collect_provenance(profile, vllm_version="0.32.0", cwd=REPO)
    return Baseline(provenance=prov, cases=[build_case("nospec", spec=False), build_case()])


def test_hardware_id_is_stable_and_path_safe() -> None:
    hw_id, human, kind, _ = provenance.detect_hardware()
    assert hw_id == provenance.detect_hardware()[0]
    assert kind in ("cpu", "gpu") and human
    assert hw_id.startswith(kind + "-") and "/" not in hw_id and " " not in hw_id


def test_provenance_records_versions_and_commit(build_case) -> None:
    b = make_baseline(build_case)
    p = b.provenance
    assert p.profile_name == "cpu-ci" and len(p.profile_hash) == 16
    assert p.python_version and p.specperf_version
    assert p.git_commit is None or len(p.git_commit) == 40


def test_round_trip(tmp_path: Path, build_case) -> None:
    b = make_baseline(build_case)
    path = store.baseline_path(tmp_path, "cpu-ci", b.provenance.hardware_id)
    store.write_baseline(path, b)
    assert store.load_baseline(path) == b
    assert not list(path.parent.glob(".*.tmp"))


def test_missing_is_none_and_corrupt_names_file_and_field(tmp_path: Path, build_case) -> None:
    assert store.load_baseline(tmp_path / "nope.json") is None
    path = tmp_path / "b.json"
    data = json.loads(make_baseline(build_case).model_dump_json())
    data["cases"][1]["acceptance"] = {"drafts": "many"}
    path.write_text(json.dumps(data))
    with pytest.raises(files.BaselineError) as err:
        store.load_baseline(path)
    assert str(path) in str(err.value) and "cases.1.acceptance.drafts" in str(err.value)
    path.write_text(path.read_text()[:100])
    with pytest.raises(files.BaselineError, match="not valid JSON .line 1"):
        store.load_baseline(path)


def test_kill_during_write_leaves_previous_baseline_intact(tmp_path: Path, build_case) -> None:
    """The writer is killed (SIGKILL) after writing the new file's data but before the
    rename: the old baseline must be byte-for-byte what it was."""
    old = make_baseline(build_case)
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, old)
    before = path.read_bytes()
    script = textwrap.dedent(f"""
        import os, signal
        from specperf.store import baselines as store
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
        from pathlib import Path
        files.atomic_write_text(Path({str(path)!r}), "x" * 10_000_000)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -9
    assert path.read_bytes() == before
    assert store.load_baseline(path) == old


def test_history_is_bounded(tmp_path: Path, build_case) -> None:
    from datetime import timedelta

    b = make_baseline(build_case)
    path = tmp_path / "cpu-ci" / "hw.json"
    for i in range(5):
        prov = b.provenance.model_copy(update={"date": b.provenance.date + timedelta(days=i)})
        store.write_baseline(path, b.model_copy(update={"provenance": prov}), keep=3)
    hist = store.load_history(path)
    assert len(hist) == 3
    assert [h.provenance.date for h in hist] == sorted(h.provenance.date for h in hist)
    assert store.load_baseline(path).provenance.date == hist[-1].provenance.date  # type: ignore[union-attr]


def test_atomic_write_gives_a_shareable_mode_and_keeps_an_existing_one(tmp_path: Path) -> None:
    """mkstemp's 0600 must not leak into baselines and reports (CI artifacts, teammates)."""
    import stat as stat_mod

    from specperf.store.baselines import _UMASK
    from specperf.store.files import atomic_write_text

    fresh = tmp_path / "fresh.json"
    atomic_write_text(fresh, "{}")
    assert stat_mod.S_IMODE(fresh.stat().st_mode) == 0o666 & ~_UMASK
    kept = tmp_path / "kept.json"
    kept.write_text("old")
    kept.chmod(0o640)
    atomic_write_text(kept, "new")
    assert stat_mod.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_text() == "new"
