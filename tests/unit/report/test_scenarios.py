"""A run's scenarios in the reports (console, markdown, HTML), and run files without
scenarios staying byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

from specperf.analysis.run_report import build_run_report
from specperf.report import write_all
from specperf.report.console import render_run
from specperf.report.html import render_html
from specperf.report.markdown import render_markdown
from specperf.report.plots import plot_segment_acceptance
from specperf.report.scenarios import scenario_rows, scenario_text, segment_rows
from specperf.schemas import (
    Acceptance,
    Case,
    FreshServerConfirmation,
    PrefixCacheCounts,
    RunResult,
    ScenarioResult,
    ScenarioSegment,
)
from tests.support import CPU_TINY_RUN, make_case, make_run


def _with_counts(case, queries: float, hits: float):
    trials = [t.model_copy(update={"prefix_cache": PrefixCacheCounts(queries=queries, hits=hits)})
              for t in case.trials]
    return case.model_copy(update={"trials": trials})


def _scenario_run() -> RunResult:
    nospec = _with_counts(make_case("nospec", spec=False, tpot_s=0.03), 2176, 1920)
    draft = _with_counts(make_case("draft-k2", tpot_s=0.02), 2176, 1904)
    off = _with_counts(make_case("draft-off", tpot_s=0.02), 0, 0)
    scenario = ScenarioResult(kind="prefix_cache", cases=[nospec, draft, off],
                              paired_nospec={"draft-k2-c1": nospec, "draft-off-c1": nospec})
    return make_run([], scenarios=[scenario])


def test_the_rows_show_hit_rates_and_the_gain_per_config() -> None:
    [s] = _scenario_run().scenarios
    rows = {r[0]: r for r in scenario_rows(s)}
    assert rows["nospec-c1"][1:3] == ["88.2 %", "1920 / 2176"]
    assert rows["draft-k2-c1"][1:3] == ["87.5 %", "1904 / 2176"]
    assert rows["draft-off-c1"][1] == "off (no lookups)"
    assert rows["draft-k2-c1"][5] == "1.50×" and rows["nospec-c1"][5] == "—"


def test_console_markdown_and_html_show_the_scenario() -> None:
    run = _scenario_run()
    assert scenario_text(run)[0] == "Scenario: prefix caching (shared prefix, caching on)"
    assert "Scenario: prefix caching" in render_run(run, width=160, color=False)
    md = render_markdown(run)
    assert "Scenario: prefix caching" in md and "| draft-off-c1 | off (no lookups) |" in md
    assert "Scenario: prefix caching" in render_html(run, plots={}, make_plots=False)


def test_a_scenario_cases_confirmation_is_said_under_its_table() -> None:
    run = _scenario_run()
    [s] = run.scenarios
    rec = FreshServerConfirmation(triggered_by=["TPOT gain"], first_trials=3, trials=6,
                                  outcome={"TPOT gain": "regression"})
    draft = s.cases[1].model_copy(update={"confirmation": rec})
    run = run.model_copy(update={"scenarios": [s.model_copy(
        update={"cases": [s.cases[0], draft, s.cases[2]]})]})
    line = ("draft-k2-c1: TPOT gain flagged: measured again on a fresh server (3 + 3 trials): "
            "TPOT gain confirmed regression")
    assert scenario_text(run)[-1] == "  " + line
    assert f"- {line}" in render_markdown(run)
    assert scenario_text(_scenario_run())[-1].lstrip().startswith("draft-off-c1")


def test_a_run_without_scenarios_serialises_as_before() -> None:
    """Old run files load, and a run without scenarios or prefix counts writes neither key."""
    raw = json.loads(CPU_TINY_RUN.read_text())
    run = RunResult.model_validate(raw)
    assert run.scenarios == [] and scenario_text(run) == []
    out = json.loads(run.model_dump_json())
    assert "scenarios" not in out
    assert all("prefix_cache" not in t for c in out["cases"] for t in c["trials"])
    assert "Scenario:" not in render_markdown(run)
    again = RunResult.model_validate_json(_scenario_run().model_dump_json())
    assert again.scenarios[0].cases[1].trials[0].prefix_cache == PrefixCacheCounts(
        queries=2176, hits=1904)


def _segmented_run() -> RunResult:
    segments = []
    for name, accepted in (("short", 60), ("beyond-draft", 4)):
        acc = Acceptance(drafts=50, draft_tokens=100, accepted_tokens=accepted,
                         accepted_per_position=[])
        nospec = make_case("nospec", spec=False, tpot_s=0.03)
        draft = make_case("draft-k2", tpot_s=0.02, acceptance=acc)
        segments.append(ScenarioSegment(name=name, cases=[nospec, draft],
                                        paired_nospec={"draft-k2-c1": nospec}))
    scenario = ScenarioResult(kind="context_length", segments=segments,
                              cases=segments[0].cases, paired_nospec=segments[0].paired_nospec)
    return make_run([], scenarios=[scenario])


def test_a_segmented_scenario_shows_acceptance_per_bucket_everywhere() -> None:
    run = _segmented_run()
    [s] = run.scenarios
    rows = segment_rows(s)
    assert [r[:2] for r in rows] == [["nospec-c1", "short"], ["draft-k2-c1", "short"],
                                     ["nospec-c1", "beyond-draft"],
                                     ["draft-k2-c1", "beyond-draft"]]
    assert rows[1][3:6] == ["0.600", "60 / 100", "2.20"] and rows[1][7] == "1.50×"
    assert rows[3][3] == "0.040" and rows[2][3] == "—"
    text = scenario_text(run)
    assert text[0] == "Scenario: context length (acceptance by prompt-length bucket)"
    assert "bucket" in text[1] and "prompt tokens (mean)" in text[1]
    md = render_markdown(run)
    assert "| draft-k2-c1 | beyond-draft |" in md
    html = render_html(run, plots={}, make_plots=False)
    assert "acceptance by prompt-length bucket" in html and "beyond-draft" in html
    again = RunResult.model_validate_json(run.model_dump_json())
    assert again.scenarios[0].segments[1].case(Case(config_id="draft-k2", concurrency=1)) \
        .acceptance.accepted_tokens == 4
    # A prefix-cache scenario has no segments and writes no key for them.
    assert "segments" not in json.loads(_scenario_run().model_dump_json())["scenarios"][0]


def test_the_segment_chart_is_written_and_embedded(tmp_path: Path) -> None:
    run = _segmented_run()
    write_all(build_run_report(run), tmp_path)
    chart = tmp_path / "plots" / "scenario_acceptance_by_segment.png"
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert 'alt="Scenarios: acceptance per bucket and per category"' in (
        tmp_path / "report.html").read_text()
    assert plot_segment_acceptance(_scenario_run(), tmp_path / "none.png") is None
