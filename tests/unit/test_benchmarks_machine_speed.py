"""benchmarks/machine_speed.py: the summary it reads a machine's steadiness from, and one
short real probe (torch, the engine's own library, on this machine)."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support import REPO_ROOT, load_script, need_module

SCRIPT = REPO_ROOT / "benchmarks" / "machine_speed.py"


@pytest.fixture(scope="module")
def ms() -> ModuleType:
    return load_script(SCRIPT)


def _second(ms_: float | None, steal: int = 0, **vmstat: int) -> dict[str, object]:
    return {"at": 0.0, "products": 10, "median_ms": ms_, "steal_ticks": steal, "vmstat": vmstat}


def test_windows_bursts_and_guest_causes_are_counted(ms: ModuleType) -> None:
    # Two steady windows at 10 ms, one at 12 ms holding two bursts of +30 % and +50 %.
    per_second = ([_second(10.0)] * 4 + [_second(10.0, steal=3)] * 2
                  + [_second(12.0), _second(13.0), _second(15.0)] + [_second(None)]
                  + [_second(10.0, compact_stall=2)])
    s = ms.summarize(per_second, window=3, burst=0.2)
    assert s["median_ms"] == 10.0 and s["seconds"] == 10
    assert s["window_medians_ms"] == [10.0, 10.0, 13.0]  # the last, partial window dropped
    assert s["window_sd"] == pytest.approx(statistics.stdev([0.0, 0.0, math.log(1.3)]))
    assert s["burst_seconds"] == 2 and s["burst_worst"] == pytest.approx(0.5)
    assert s["steal_ticks"] == 6 and s["guest_memory_events"] == 2
    with pytest.raises(ValueError, match="no second"):
        ms.summarize([_second(None)], window=3, burst=0.2)


def test_a_short_real_probe_writes_every_second(tmp_path: Path) -> None:
    need_module("torch")  # installed with vLLM
    out = tmp_path / "speed.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--seconds", "2", "--mb", "4", "--window", "1",
         "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "MB a product: median" in proc.stdout
    data = json.loads(out.read_text())
    assert len(data["per_second"]) == 2 and data["seconds"] == 2
    assert all(s["products"] > 0 and s["median_ms"] > 0 for s in data["per_second"])
    assert len(data["window_medians_ms"]) == 2 and data["mb"] == 4


def test_bad_arguments_exit_2_with_one_message(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--seconds", "0"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "must be positive" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, str(SCRIPT), "--cpu", "100000"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--cpu 100000: this process may run on CPUs" in proc.stderr
    assert "Traceback" not in proc.stderr
