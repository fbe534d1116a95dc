"""benchmarks/client_overhead.py runs and produces both clients' figures (no timing
assertions: it is a benchmark, and this machine's cores are shared)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import INSTALL_VLLM, REPO_ROOT, unchecked

REPO = REPO_ROOT


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason=unchecked("the client overhead against vLLM's benchmark client "
                                     "(vLLM is not installed)", INSTALL_VLLM))
def test_benchmark_runs_with_tiny_settings(tmp_path: Path) -> None:
    out = tmp_path / "co.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "client_overhead.py"), "--concurrency", "2",
         "--chunks", "8", "--requests-per-stream", "1", "--clients", "ours,vllm",
         "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "reproduce: " in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert {(r["client"], r["concurrency"]) for r in rows} == {
        ("ours", 2), ("vllm", 2)}
    for r in rows:
        assert "error" not in r, r
        assert r["ok"] == r["requests"] and r["chunks"] == 8 * r["requests"]
        assert r["cpu_us_per_chunk"] > 0 and r["chunks_per_s"] > 0
