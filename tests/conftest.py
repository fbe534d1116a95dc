"""Fixtures every test package shares (the builders themselves are in tests/support.py),
and the run's last word on what it could not check on this machine."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import settings

from specperf.schemas import RunResult
from tests.support import CPU_TINY_RUN, UNCHECKED, load_run, make_case

# No per-example deadline: it is a wall-clock limit, which a busy 2-core machine breaks
# (seen: 250 ms against 200 ms while the suite's e2e runs shared the cores), and tests here
# assert what the code promises, never how fast it ran.
settings.register_profile("specperf", deadline=None)
settings.load_profile("specperf")


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


#: The end-to-end files, longest first (their time in CI's --durations, 2026-12-03): the
#: suite runs them first, so that `nox -s tests`' parallel workers start the long real-vLLM
#: runs at once and end on the short unit tests, not on one long run while the other
#: worker waits (pytest-xdist would otherwise hand out the files with the most tests first,
#: leaving the one-test runs of several minutes to the end; noxfile.py turns that off).
#: tests/integration/test_test_hygiene.py checks that every e2e file is listed.
E2E_LONGEST_FIRST = (
    "test_perf_runs.py", "test_faults.py", "test_faults_standin.py",
    "test_scenarios_segmented.py", "test_faults_startup.py", "test_scenarios_time.py",
    "test_bracket.py", "test_confirm_after_matrix.py", "test_methods.py",
    "test_scenarios_workload.py", "test_agreement.py",
    "test_speculation_checks.py", "test_no_orphans.py", "test_attribution.py",  # no_orphans: ~45 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The e2e files first, longest first; every file's tests stay together, in order."""
    def rank(item: pytest.Item) -> int:
        path = item.path
        if path.parent.name != "e2e":
            return len(E2E_LONGEST_FIRST) + 1
        return (E2E_LONGEST_FIRST.index(path.name) if path.name in E2E_LONGEST_FIRST
                else len(E2E_LONGEST_FIRST))

    items.sort(key=rank)


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
