"""The pytest session exits by the product's one table (specperf.config.exits), with the
old numbers back under SPECPERF_LEGACY_EXIT_CODES=1. Real pytest processes with the real
plugin (loaded by a conftest, as a user's suite loads it); no vLLM: the statuses here are
decided before or without a server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specperf.config.exits import Exit

SOURCES = {
    "interrupt": "def test_a():\n    raise KeyboardInterrupt\n",
    "broken": "import a_module_that_is_not_there\n",
    "plain": "def test_a():\n    assert 1 + 1 == 2\n",
}


def _pytest(tmp_path: Path, which: str, *args: str, env: dict[str, str] | None = None) -> int:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["specperf.plugin"]\n')
    (tmp_path / f"test_{which}.py").write_text(SOURCES[which])
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPECPERF_")}
    clean.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *args, f"test_{which}.py"], cwd=tmp_path, env=clean,
                          capture_output=True, text=True, timeout=120)
    assert "INTERNALERROR" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.returncode


@pytest.mark.parametrize(("which", "args", "env", "now", "before"), [
    ("interrupt", (), {}, Exit.INTERRUPTED, 2),
    ("plain", ("--perf-repeats", "0"), {}, Exit.BAD_INPUT, 4),
    ("plain", (), {"SPECPERF_PROXY_DELAY_MS": "-1"}, Exit.BAD_INPUT, 4),
    ("broken", (), {}, Exit.BAD_INPUT, 2),  # a collection error: pytest's 2 both times
    ("plain", ("--no-such-option",), {}, Exit.PYTEST_USAGE, 4),
    ("plain", (), {}, Exit.OK, 0),
], ids=["ctrl-c", "bad-option-value", "bad-setting", "collection-error", "unknown-option", "ok"])
def test_session_exit_status(tmp_path: Path, which: str, args: tuple[str, ...],
                             env: dict[str, str], now: Exit, before: int) -> None:
    assert _pytest(tmp_path, which, *args, env=env) == now
    legacy = {**env, "SPECPERF_LEGACY_EXIT_CODES": "1"}
    assert _pytest(tmp_path, which, *args, env=legacy) == before
