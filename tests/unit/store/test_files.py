"""Result files on disk (specperf.store.files): a run or a baseline read with errors that
name the file and the field; atomic writes that survive a kill and keep a shareable mode."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specperf.schemas import Baseline, RunResult
from specperf.store import baselines as store
from specperf.store.files import BaselineError, load_result, safe_name
from tests.support import CPU_TINY_RUN, make_baseline


def test_load_result_tells_run_from_baseline(real: RunResult, tmp_path: Path) -> None:
    base = Baseline(provenance=real.provenance, cases=real.cases)
    path = tmp_path / "b.json"
    path.write_text(base.model_dump_json())
    loaded = load_result(path)
    assert isinstance(loaded, Baseline)
    assert loaded.cases == real.cases


def test_load_result_truncated_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_text(CPU_TINY_RUN.read_text()[:3000])
    with pytest.raises(BaselineError, match=r"cut\.json: not valid JSON \(line \d+"):
        load_result(path)


def test_load_result_bad_field_names_field(tmp_path: Path, real: RunResult) -> None:
    data = json.loads(real.model_dump_json())
    data["cases"][0]["n_requests"] = "many"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match=r"cases\.0\.n_requests"):
        load_result(path)


def test_kill_during_write_leaves_previous_baseline_intact(tmp_path: Path) -> None:
    """The writer is killed (SIGKILL) after writing the new file's data but before the
    rename: the old baseline must be byte-for-byte what it was."""
    old = make_baseline()
    path = tmp_path / "cpu-ci" / "hw.json"
    store.write_baseline(path, old)
    before = path.read_bytes()
    script = textwrap.dedent(f"""
        import os, signal
        from specperf.store import files
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
        from pathlib import Path
        files.atomic_write_text(Path({str(path)!r}), "x" * 10_000_000)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -9
    assert path.read_bytes() == before
    assert store.load_baseline(path) == old


def test_atomic_write_gives_a_shareable_mode_and_keeps_an_existing_one(tmp_path: Path) -> None:
    """mkstemp's 0600 must not leak into baselines and reports (CI artifacts, teammates)."""
    import stat as stat_mod

    from specperf.store.files import _UMASK, atomic_write_text

    fresh = tmp_path / "fresh.json"
    atomic_write_text(fresh, "{}")
    assert stat_mod.S_IMODE(fresh.stat().st_mode) == 0o666 & ~_UMASK
    kept = tmp_path / "kept.json"
    kept.write_text("old")
    kept.chmod(0o640)
    atomic_write_text(kept, "new")
    assert stat_mod.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_text() == "new"


@pytest.mark.parametrize(("content", "expect"), [
    (b"\xff\xfe\x00\x00", "not UTF-8 text"),
    (b'{"kind": "specperf-run", "x": ' + b"9" * 5000 + b"}", "unreadable JSON value"),
    (b"[" * 50_000 + b"]" * 50_000, "nested deeper"),
    (b'{"kind": "specperf-run", "schema_version": 2}', "upgrade specperf (pip install -U"),
    (b'{"kind": "specperf-run", "schema_version": 0}', "--perf-update-baselines"),
    (b'{"kind": "specperf-run", "schema_version": "1"}', "not an integer"),
], ids=["binary", "long-int", "deep", "newer", "older", "string-version"])
def test_every_unreadable_file_is_a_baseline_error(tmp_path: Path, content: bytes,
                                                   expect: str) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(BaselineError) as err:
        load_result(path)
    assert str(path) in str(err.value) and expect in str(err.value)


#: Strings a hand-made or forged run file can hold where a name goes: each would put a file
#: outside its directory, hide it, or name no file at all.
NOT_NAMES = ["/../../../", "..", "../x", "a/b", "a\\b", "", ".hidden", "x\x00y", "-rf",
             "Main", "a" * 101, "caf\u00e9"]


@pytest.mark.parametrize("field", ["git_commit", "hardware_id", "profile_name"])
@pytest.mark.parametrize("bad", NOT_NAMES)
def test_a_provenance_string_that_becomes_a_path_must_be_a_name(
        field: str, bad: str, tmp_path: Path) -> None:
    data = json.loads(CPU_TINY_RUN.read_text(encoding="utf-8"))
    data["provenance"][field] = bad
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BaselineError) as err:
        load_result(path)
    message = str(err.value)
    assert message.startswith(f"{path}: field `provenance.{field}` is ")
    assert "cannot name a file" in message and "git checkout -- FILE" in message
    assert "\n" not in message


def test_the_names_specperf_writes_are_names() -> None:
    for name in ("f8c52a2a4b22743008ba5351c4ec1d13eb1287d1", "gpu-nvidia-a100-sxm4-80gb-x1",
                 "cpu-amd-epyc-2c", "a100-qwen3-32b", "cpu-ci", "nocommit", "h100_x.2"):
        assert safe_name(name, source="f", field="x", becomes="y") == name
