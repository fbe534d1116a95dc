"""The GPU machine lock (specperf.engine.gpu_lock): real processes, a real flock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specperf.engine import gpu_lock


def _holder(path: Path) -> subprocess.Popen[str]:
    code = ("import sys, time; from pathlib import Path; from specperf.engine import gpu_lock; "
            f"gpu_lock.acquire(Path({str(path)!r}), what='the holder'); print('held', flush=True); "
            "time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_is_refused_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "gpu.lock"
    holder = _holder(path)
    try:
        with pytest.raises(gpu_lock.GpuLocked) as err:
            gpu_lock.acquire(path)
        assert f"pid {holder.pid}: the holder" in str(err.value)
        assert str(path) in str(err.value) and "SPECPERF_GPU_LOCK_WAIT_S" in str(err.value)
    finally:
        holder.kill()
        holder.wait()
    # The kernel dropped the lock with the SIGKILLed holder: the box is free again.
    gpu_lock.acquire(path)
    try:
        assert f"pid {os.getpid()}" in path.read_text()
    finally:
        gpu_lock.release(path)
    assert path.read_text() == ""


def test_waiting_gets_the_lock_once_the_holder_ends(tmp_path: Path) -> None:
    path = tmp_path / "gpu.lock"
    holder = _holder(path)
    killer = subprocess.Popen([sys.executable, "-c",
                               f"import os, time; time.sleep(1.5); os.kill({holder.pid}, 9)"])
    try:
        gpu_lock.acquire(path, wait_s=60)
        assert holder.wait(timeout=10) == -9  # got it only after the holder was gone
    finally:
        gpu_lock.release(path)
        killer.wait()
        holder.kill()
        holder.wait()


def test_the_lock_is_counted_within_one_process(tmp_path: Path) -> None:
    path = tmp_path / "gpu.lock"
    gpu_lock.acquire(path)
    gpu_lock.acquire(path)
    gpu_lock.release(path)
    probe = [sys.executable, "-c", "from pathlib import Path; from specperf.engine import gpu_lock; "
             f"gpu_lock.acquire(Path({str(path)!r}))"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    assert subprocess.run(probe, env=env, capture_output=True, check=False).returncode != 0
    gpu_lock.release(path)
    assert subprocess.run(probe, env=env, capture_output=True, check=False).returncode == 0


@pytest.mark.parametrize("off", ["off", "0", " False ", "no"])
def test_a_run_takes_no_lock_when_the_variable_says_off(
        monkeypatch: pytest.MonkeyPatch, off: str) -> None:
    monkeypatch.setenv("SPECPERF_GPU_LOCK", off)
    said: list[str] = []
    assert gpu_lock.take_for_run("profile x", said.append) is None
    assert said == []


def test_a_run_takes_the_lock_the_variable_names(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "mine.lock"
    monkeypatch.setenv("SPECPERF_GPU_LOCK", str(path))
    said: list[str] = []
    taken = gpu_lock.take_for_run("profile x, run dir y", said.append)
    try:
        assert taken == path
        assert path.read_text() == f"pid {os.getpid()}: profile x, run dir y\n"
        assert said == [f"specperf: GPU machine lock {path} taken (SPECPERF_GPU_LOCK)"]
    finally:
        gpu_lock.release(path)
    assert path.read_text() == ""


# -- a lock path another user may have planted (issue #54) --------------------------------


def test_a_planted_symlink_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    path = tmp_path / "gpu.lock"
    path.symlink_to(victim)
    with pytest.raises(gpu_lock.GpuLockUnusable) as err:
        gpu_lock.acquire(path)
    assert victim.read_text() == "precious\n"
    assert victim.stat().st_mode & 0o777 == 0o600
    assert str(path) in str(err.value) and "symbolic link" in str(err.value)
    assert "SPECPERF_GPU_LOCK" in str(err.value) and "\n" not in str(err.value)


def test_a_dangling_symlink_creates_nothing_where_it_points(tmp_path: Path) -> None:
    path = tmp_path / "gpu.lock"
    path.symlink_to(tmp_path / "made-by-the-lock")
    with pytest.raises(gpu_lock.GpuLockUnusable):
        gpu_lock.acquire(path)
    assert not (tmp_path / "made-by-the-lock").exists()


def test_a_directory_at_the_lock_path_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "gpu.lock"
    path.mkdir()
    with pytest.raises(gpu_lock.GpuLockUnusable) as err:
        gpu_lock.acquire(path)
    assert str(path) in str(err.value) and "directory" in str(err.value)


def test_a_hard_linked_lock_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    path = tmp_path / "gpu.lock"
    os.link(victim, path)
    with pytest.raises(gpu_lock.GpuLockUnusable) as err:
        gpu_lock.acquire(path)
    assert victim.read_text() == "precious\n"
    assert victim.stat().st_mode & 0o777 == 0o600
    assert str(path) in str(err.value) and "hard link" in str(err.value)


def test_only_a_lock_file_this_run_created_is_opened_to_every_user(tmp_path: Path) -> None:
    mine = tmp_path / "new.lock"
    gpu_lock.acquire(mine)
    gpu_lock.release(mine)
    assert mine.stat().st_mode & 0o777 == 0o666  # every user's runs meet at it
    existing = tmp_path / "existing.lock"
    existing.write_text("")
    existing.chmod(0o600)
    gpu_lock.acquire(existing)
    gpu_lock.release(existing)
    assert existing.stat().st_mode & 0o777 == 0o600  # someone else's choice, kept
