"""The pytest plugin (specperf.plugin) as this very session loads it: the options it
registers and how it refuses bad values. Its collection and runs:
tests/integration/test_collection.py, tests/integration/test_bad_profiles.py, tests/e2e/."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from specperf import plugin
from specperf.engine.baseline_context import BaselineContext
from specperf.engine.clock import RunClock
from specperf.engine.kinds import kind_named
from specperf.engine.servers import FaultInjection
from specperf.engine.session import PerfOptions, PerfSession, SessionError
from specperf.report.console import time_lines
from specperf.schemas import RunResult
from specperf.store.files import load_result
from tests.support import CPU_CI_PROFILE, REPO_ROOT, make_baseline, make_case


def test_option_is_registered_by_the_plugin(pytestconfig: pytest.Config) -> None:
    # This very session runs with specperf's plugin (the root conftest): unset, the
    # profile decides (tests/unit/engine/test_contention.py::
    # test_option_overrides_the_profiles_limit).
    assert pytestconfig.getoption("--perf-max-outside-cores") is None


# -- options against the profile (their values alone: tests/unit/config/test_options.py) --



def _session(tmp_path: Path, **kw: object) -> PerfSession:
    opts = dict(profile=str(CPU_CI_PROFILE), rootdir=REPO_ROOT, run_dir=tmp_path / "run",
                json_path=None, baselines_dir=tmp_path / "baselines", update_baselines=False,
                force=False, repeats=None, dataset=None, models_cache=tmp_path / "models")
    opts.update(kw)
    return PerfSession(options=PerfOptions(**opts), say=lambda _m: None)  # type: ignore[arg-type]


def test_retry_cap_not_above_repeats_is_refused_before_anything_runs(tmp_path: Path) -> None:
    ps = _session(tmp_path, repeats=4, retry_inconclusive=4)
    with pytest.raises(SessionError, match=r"--perf-retry-inconclusive=4.*already gets 4"):
        ps.check_options()
    _session(tmp_path, repeats=4, retry_inconclusive=5).check_options()
    _session(tmp_path, repeats=4, retry_inconclusive=0).check_options()  # the default cap


def test_proxy_configs_must_name_the_profiles_configs(tmp_path: Path) -> None:
    ps = _session(tmp_path, fault=FaultInjection(5.0, ("draft-k2", "nope")))
    with pytest.raises(SessionError, match="SPECPERF_PROXY_CONFIGS.*nope.*fix:"):
        ps.check_options()
    _session(tmp_path, fault=FaultInjection(5.0, ("draft-k2",))).check_options()


@pytest.mark.parametrize("kind", ["acceptance", "tpot_gain"])
def test_a_kind_without_cases_says_which_gate_would_give_it_some(kind: str) -> None:
    reason = plugin.no_cases_reason("p", kind_named(kind))
    assert reason.startswith(f"profile 'p' has no {kind} cases")
    assert "gates." in reason


# -- the end of a run ----------------------------------------------------------------------


class _Writer:
    fullwidth, hasmarkup = 120, False


class _Terminal:
    """What PerfRun.summary writes to (pytest's terminal reporter), kept as lines."""

    def __init__(self) -> None:
        self._tw = _Writer()
        self.lines: list[str] = []

    def section(self, title: str) -> None:
        self.lines.append(f"== {title} ==")

    def write(self, text: str) -> None:
        self.lines.extend(text.splitlines())

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_the_run_file_and_the_summary_say_where_the_time_went(
        tmp_path: Path, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shutdown and reports are charged by the plugin, the breakdown is in run.json (the
    reports' own time included) and its lines end the summary, before the run directory."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    ticks = itertools.count()  # every read of the clock is a second later
    ps = _session(tmp_path)
    ps.clock = RunClock(lambda: float(next(ticks)))
    case = make_case("nospec", spec=False)
    ps.measurer.results[case.case] = case  # measured, as far as the plugin can tell
    perf = plugin.PerfRun(ps, progress=None)  # type: ignore[arg-type]
    perf.finish(SimpleNamespace(exitstatus=0), 0)  # type: ignore[arg-type]
    saved = load_result(tmp_path / "run" / "run.json")
    assert isinstance(saved, RunResult)
    t = saved.time_breakdown
    assert t is not None and perf.report is not None and t == perf.report.run.time_breakdown
    assert t.reports_s > 0 and t.shutdown_s > 0
    assert t.server_starts_s == t.trials_s == t.warmups_s == 0 and t.quiet_ratio is None
    assert t.other_s == pytest.approx(t.wall_s - t.reports_s - t.shutdown_s)
    term = _Terminal()
    perf.summary(term, pytestconfig)
    assert term.lines[-1].startswith("run directory: ")
    assert term.lines[-2].startswith(("time: ", "  "))
    assert [line for line in term.lines if line.startswith("time: ")] == [
        time_lines(t, 120)[0]]


def test_a_perf_run_compares_and_advises_once_for_its_files_and_its_summary(
        tmp_path: Path, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's report is built once at the end (specperf.analysis.run_report): the files
    and the terminal summary show the one comparison and the one advice (before it, the
    summary advised a second time)."""
    from specperf.analysis import advice
    from specperf.analysis.judge import run as judged_run

    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    calls: list[str] = []

    def counted(module: object, name: str) -> None:
        real = getattr(module, name)

        def counting(*args: object, **kwargs: object) -> object:
            calls.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counting)

    counted(judged_run, "compare_runs")
    counted(advice, "advise")
    ps = _session(tmp_path)
    for case in (make_case("nospec", spec=False), make_case()):
        ps.measurer.results[case.case] = case  # measured, as far as the plugin can tell
    ps.baselines = BaselineContext(ps.profile, path=tmp_path / "baseline.json",
                                   baseline=make_baseline())
    perf = plugin.PerfRun(ps, progress=None)  # type: ignore[arg-type]
    perf.finish(SimpleNamespace(exitstatus=0), 0)  # type: ignore[arg-type]
    term = _Terminal()
    perf.summary(term, pytestconfig)
    assert sorted(calls) == ["advise", "compare_runs"]
    report = perf.report
    assert report is not None and report.advice is not None and report.comparison is not None
    saved = json.loads((tmp_path / "run" / "advice.json").read_text())
    assert saved == json.loads(report.advice.model_dump_json())
    assert saved["baseline"] == str(tmp_path / "baseline.json")
    shown = "\n".join(term.lines)
    assert f"no overhead regression against {tmp_path / 'baseline.json'}" in " ".join(
        shown.split())


@pytest.mark.parametrize("kind", ["requests", "latency", "throughput"])
def test_a_kind_of_every_case_is_empty_only_without_configs_or_concurrencies(kind: str) -> None:
    # Latency and throughput are judged against the baseline at every case: no gate to add.
    reason = plugin.no_cases_reason("p", kind_named(kind))
    assert reason == f"profile 'p' has no {kind} cases: the profile has no server config or concurrency"


def _benchmark_run(tmp_path: Path, *args: str) -> str:
    test = tmp_path / "test_bench.py"
    test.write_text("def test_case(benchmark):\n"
                    "    benchmark.extra_info['tpot_ms'] = 12.5\n"
                    "    benchmark.pedantic(lambda: 1, rounds=1, iterations=1)\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "specperf.plugin", "-p", "no:cacheprovider",
         "-q", str(test), "--benchmark-json", str(tmp_path / "bench.json"), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        # Not an xdist worker's (PYTEST_XDIST_WORKER turns pytest-benchmark off in the child).
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
             "PYTHONPATH": str(REPO_ROOT / "src")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_pytest_benchmarks_table_is_off_and_its_json_keeps_the_figures(tmp_path: Path) -> None:
    # The table would time PerfSession.measure calls (the first case of a server measures
    # them all), figures that read like latencies and mean nothing; extra_info is the data.
    out = _benchmark_run(tmp_path)
    assert "benchmark: 1 tests" not in out and "Name (time in" not in out
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["benchmarks"][0]["extra_info"] == {"tpot_ms": 12.5}
    # Asked for, it is shown.
    assert "Name (time in" in _benchmark_run(tmp_path, "--benchmark-verbose")
