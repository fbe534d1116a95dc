"""The soak's windows and trends and the ramp's phases in the console, markdown and plots."""

from __future__ import annotations

from pathlib import Path

from specperf.analysis import trend
from specperf.analysis.run_report import build_run_report
from specperf.config.scenarios import SoakScenario
from specperf.report import write_all
from specperf.report.console import render_run
from specperf.report.markdown import render_markdown
from specperf.report.plots import plot_soak_over_time
from specperf.schemas import RunResult, SoakResult, TimeScenarioResults
from tests.support import make_run
from tests.unit.analysis.test_trend import CASE, HOUR, ramp, windows


def scenario_run() -> RunResult:
    ws = windows([30.0 * (1 + i / 10) for i in range(10)])
    soak = SoakResult(case=CASE, duration_s=3600, window_s=360, windows=ws,
                      fits=trend.soak_fits(ws, HOUR))
    return make_run([], time_scenarios=TimeScenarioResults(soak=[soak], ramp=[ramp()]))


def test_console_shows_windows_slopes_and_phases() -> None:
    text = render_run(scenario_run(), width=120, color=False)
    assert "soak draft-k3-c1: 10 windows of ≥ 360 s over 3600 s" in text
    assert "tpot trend: FAIL — median TPOT slope" in text
    assert "acceptance_rate trend: PASS" in text
    assert "ramp draft-k3: c=1 → c=4 → c=1" in text
    for phase in ("before", "burst", "after"):
        assert phase in text


def test_markdown_has_a_section_per_scenario() -> None:
    md = render_markdown(scenario_run())
    assert "### soak draft-k3-c1: 10 windows" in md
    assert "- tpot trend: FAIL" in md
    assert "| window | start s | requests |" in md
    assert "### ramp draft-k3: c=1 → c=4 → c=1" in md
    assert "| burst | 4 | 8 | 0 | 30.00 | 0.3500 | 2.050 | 100.0% |" in md


def test_a_run_without_scenarios_shows_none() -> None:
    run = make_run([])
    assert "soak" not in render_run(run, width=120, color=False)
    assert "soak" not in render_markdown(run)
    assert plot_soak_over_time(run, Path("unused.png")) is None


def test_the_soak_chart_is_written_with_the_other_views(tmp_path: Path) -> None:
    written = write_all(build_run_report(scenario_run()), tmp_path)
    chart = tmp_path / "plots" / "soak_over_time.png"
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert any(Path(p) == chart for p in written.values())
    again = RunResult.model_validate_json((tmp_path / "run.json").read_text())
    assert again.time_scenarios is not None and len(again.time_scenarios.soak[0].windows) == 10


def test_soak_scenario_defaults_are_stated() -> None:
    s = SoakScenario(config="x", duration_s=50, window_s=10)
    assert (s.concurrency, s.min_windows, s.confidence) == (1, 5, 0.95)


def test_the_html_page_embeds_the_soak_chart(tmp_path: Path) -> None:
    write_all(build_run_report(scenario_run()), tmp_path)
    assert 'alt="Soak: acceptance and TPOT per window"' in (tmp_path / "report.html").read_text()
