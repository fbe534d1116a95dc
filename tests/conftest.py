"""Fixtures every test package shares (the builders themselves are in tests/support.py),
and the run's last word on what it could not check on this machine."""

from __future__ import annotations

from collections import Counter

import pytest

from specperf.schemas import RunResult
from tests.support import CPU_TINY_RUN, UNCHECKED, load_run, make_case


@pytest.fixture(scope="session", autouse=True)
def _specperf_cache_in_tmp(tmp_path_factory: pytest.TempPathFactory):
    """What specperf keeps between runs (vLLM's compile caches, the environments of
    `specperf check --vllm`) goes to this session's tmp, not the user's ~/.cache: a test
    writes only its tmp. Set in os.environ, so the servers and pytest runs the tests
    start inherit it."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECPERF_CACHE_DIR", str(tmp_path_factory.mktemp("specperf-cache")))
    yield
    mp.undo()


@pytest.fixture
def build_case():
    return make_case


@pytest.fixture(scope="module")
def real() -> RunResult:
    """A real cpu-tiny run (tests/data/run-cpu-tiny.json), read once per test module."""
    return load_run(CPU_TINY_RUN)


def _unchecked(reports: list[pytest.TestReport | pytest.CollectReport]) -> Counter[str]:
    """The skip reasons made by tests.support.unchecked, with how many tests gave each."""
    reasons: Counter[str] = Counter()
    for report in reports:
        longrepr = report.longrepr
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            reason = str(longrepr[2]).removeprefix("Skipped: ")
            if reason.startswith(UNCHECKED):
                reasons[reason] += 1
    return reasons


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    reasons = _unchecked(terminalreporter.stats.get("skipped", []))
    if not reasons:
        return
    terminalreporter.section("what this run could not check", sep="-", yellow=True)
    for reason, n in sorted(reasons.items()):
        terminalreporter.write_line(f"{reason} ({n} test{'s' if n > 1 else ''})", yellow=True)
