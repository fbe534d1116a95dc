"""The run's report, built once (specperf.analysis.run_report): the comparison, advice and
exit status it holds are those of compare_runs, advise and run_exit_status, each asked
once. That the renderers ask none of them again: tests/unit/report/test_html.py; that a
pytest run advises once: tests/unit/test_plugin.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from specperf.analysis import advice as advice_module
from specperf.analysis.advice import advise
from specperf.analysis.judge import run as compare_module
from specperf.analysis.judge.exit_status import run_exit_status
from specperf.analysis.judge.run import as_run, compare_runs
from specperf.analysis.run_report import build_run_report
from specperf.config.exits import Exit
from specperf.report.synthetic import scale_latency
from specperf.schemas import Baseline, RunResult
from tests.support import CPU_TINY_RUN, make_case, make_run


def _counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls: list[int] = []
    real: Callable[..., Any] = getattr(module, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def test_the_report_holds_the_comparison_advice_and_status_of_one_call_each(
        real: RunResult, monkeypatch: pytest.MonkeyPatch) -> None:
    cur = scale_latency(real, 1.3, cases=["self-k3"])
    assert isinstance(cur, RunResult)
    compared = _counted(monkeypatch, compare_module, "compare_runs")
    advised = _counted(monkeypatch, advice_module, "advise")
    report = build_run_report(cur, real, run_label="cur.json", baseline_label=str(CPU_TINY_RUN),
                              notes=["chosen: the stored baseline"])
    assert (len(compared), len(advised)) == (1, 1)
    cmp = compare_runs(cur, real, run_label="cur.json", baseline_label=str(CPU_TINY_RUN))
    assert report.comparison is not None
    assert report.comparison.notes == ["chosen: the stored baseline", *cmp.notes]
    assert report.comparison.model_copy(update={"notes": cmp.notes}) == cmp
    assert report.advice == advise(cur, real, baseline_name=str(CPU_TINY_RUN),
                                   comparison=report.comparison)
    assert report.advice is not None and report.advice.baseline == str(CPU_TINY_RUN)


def test_the_exit_status_is_the_runs_own_unless_the_comparison_judges_it_again(
        real: RunResult) -> None:
    slower = scale_latency(real, 1.3, cases=["self-k3"])
    assert isinstance(slower, RunResult)
    # Checked as it ran, the run had nothing to judge: only judged again does the slower
    # self-k3 count.
    cur = slower.model_copy(update={"checks": []})
    as_ran = build_run_report(cur, real, with_advice=False)
    again = build_run_report(cur, real, with_advice=False, judged_again=True)
    assert again.comparison is not None and again.comparison.regressions
    assert (as_ran.exit_status, again.exit_status) == (Exit.OK, Exit.FAILED)
    assert again.exit_status == run_exit_status([], again.comparison)
    assert as_ran.advice is None


def test_the_baseline_is_named_by_the_label_else_the_path_the_run_recorded(
        real: RunResult) -> None:
    run = real.model_copy(update={"baseline_path": "baselines/cpu-tiny/x.json"})
    report = build_run_report(run, real)
    assert report.baseline_label == "baselines/cpu-tiny/x.json"
    assert report.comparison is not None
    assert report.comparison.baseline_label == "baselines/cpu-tiny/x.json"
    assert report.advice is not None and report.advice.baseline == "baselines/cpu-tiny/x.json"
    # `specperf report RUN --baseline OTHER` names the advice's baseline as the run recorded
    # it (what it always wrote), the comparison's as given.
    other = build_run_report(run, real, baseline_label="other.json",
                             advice_names_recorded_baseline=True)
    assert other.comparison is not None and other.comparison.baseline_label == "other.json"
    assert other.advice is not None and other.advice.baseline == "baselines/cpu-tiny/x.json"


def test_a_run_without_speculative_cases_or_baseline_has_neither_advice_nor_comparison(
        monkeypatch: pytest.MonkeyPatch) -> None:
    advised = _counted(monkeypatch, advice_module, "advise")
    report = build_run_report(make_run([make_case("nospec", spec=False)]))
    assert (report.comparison, report.advice, report.advice_error) == (None, None, None)
    assert advised == [] and report.exit_status == Exit.OK


def test_advice_that_fails_is_kept_as_its_reason_when_not_strict(
        real: RunResult, monkeypatch: pytest.MonkeyPatch) -> None:
    # A STAND-IN fault: advise has no input known to break it; the plugin's report must
    # survive one all the same (advice explains a run, it never decides one).
    def broken(*_a: Any, **_k: Any) -> None:
        raise ValueError("no fit")

    monkeypatch.setattr(advice_module, "advise", broken)
    report = build_run_report(real, strict=False)
    assert report.advice is None and report.advice_error == "ValueError: no fit"
    with pytest.raises(ValueError, match="no fit"):
        build_run_report(real)


def test_a_baseline_judged_as_a_run_is_compared_but_not_advised(real: RunResult) -> None:
    # `specperf compare BASELINE OTHER`: a baseline has no checks of its own.
    base = Baseline(provenance=real.provenance, cases=real.cases)
    report = build_run_report(base, real, judged_again=True)
    assert report.comparison is not None and report.advice is None
    assert report.exit_status == run_exit_status([], report.comparison)
    assert as_run(base).checks == []
