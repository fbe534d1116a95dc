"""The GitHub-flavoured markdown report: well-formed tables, the size limit, step summary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specperf.analysis.judge.models import RunComparison
from specperf.analysis.judge.run import compare_runs
from specperf.report.markdown import (
    MAX_BYTES,
    STEP_SUMMARY_LIMIT,
    md_escape,
    render_markdown,
    write_step_summary,
)
from specperf.report.synthetic import SynthConfig, scale_latency, scale_throughput, synthetic_run
from specperf.schemas import RunResult, TimeBreakdown

SEPARATOR = re.compile(r"^\|(?:\s*:?-{3,}:?\s*\|)+$")
ALLOWED_TAGS = re.compile(r"</?(details|summary|sub)>")


@pytest.fixture(autouse=True)
def _no_github(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GITHUB_STEP_SUMMARY", "GITHUB_SERVER_URL", "GITHUB_REPOSITORY",
                "GITHUB_RUN_ID"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def regressed(real: RunResult) -> tuple[RunResult, RunComparison]:
    cur = scale_latency(real, 1.3, cases=["self-k3"])
    assert isinstance(cur, RunResult)
    return cur, compare_runs(cur, real)


def _cells(row: str) -> int:
    """Cells of a GFM table row: pipes not escaped with a backslash, minus the outer two."""
    return len(re.findall(r"(?<!\\)\|", row)) - 1


def assert_valid_gfm(text: str) -> int:
    """Tables are rectangular with a separator line, every HTML block is closed, and no
    stray '<' could open a tag. Returns the number of tables."""
    lines = text.splitlines()
    tables = 0
    i = 0
    while i < len(lines):
        if lines[i].startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            assert len(block) >= 2, block
            assert SEPARATOR.match(block[1]), block[1]
            width = _cells(block[0])
            assert width >= 2
            for row in block:
                assert row.endswith("|") and _cells(row) == width, row
            # a table starts after a blank line (or a heading) so GFM sees it
            tables += 1
        else:
            i += 1
    assert text.count("<details>") == text.count("</details>")
    assert text.count("<summary>") == text.count("</summary>")
    for m in re.finditer(r"(?<!\\)<", text):
        assert ALLOWED_TAGS.match(text, m.start()), text[m.start():m.start() + 40]
    return tables


def test_regression_report_is_valid_gfm(regressed: tuple[RunResult, RunComparison]) -> None:
    run, cmp = regressed
    text = render_markdown(run, cmp)
    assert text.startswith("## specperf · cpu-tiny · 🔴 ")
    assert assert_valid_gfm(text) >= 4
    # regressions first, explained, then the others; unchanged folded
    assert text.index("Regressions") < text.index("Inconclusive") < text.index("Unchanged")
    assert "<summary>⚪ Unchanged" in text
    assert "**self-k3-c1 TPOT**: TPOT median rose" in text
    # gate checks of the run, failures expanded
    # Every outcome counted (the run file's checks: 4 pass, 3 fail, 2 skipped without a
    # baseline), passed first.
    assert "Gate checks: 4 passed, 3 failed, 2 not judged (no baseline)" in text
    assert r"acceptance\_rate\[pos 1\]" in text
    assert len(text.encode()) < MAX_BYTES


def test_run_without_comparison(real: RunResult) -> None:
    text = render_markdown(real)
    assert "Comparison against the baseline" not in text
    assert "❌ 3 gate checks failed" in text.splitlines()[0]
    assert_valid_gfm(text)


def _undecided(real: RunResult) -> RunResult:
    """The run file with its failures passing and its two baseline checks undecided: the
    latency one not measured on a busy machine, the throughput one INCONCLUSIVE."""
    judged = {"ttft_budget": ("latency", "busy", "machine busy: TTFT not measured"),
              "throughput_budget": ("throughput", "inconclusive", "throughput straddles")}
    checks = []
    for c in real.checks:
        if c.gate in judged:
            gate, outcome, message = judged[c.gate]
            c = c.model_copy(update={"gate": gate, "outcome": outcome, "message": message})
        elif c.outcome == "fail":
            c = c.model_copy(update={"outcome": "pass"})
        checks.append(c)
    return real.model_copy(update={"checks": checks})


def test_undecided_checks_are_shown_in_the_open_not_as_failures(real: RunResult) -> None:
    text = render_markdown(_undecided(real))
    assert_valid_gfm(text)
    assert "🔴" not in text.splitlines()[0] and "machine busy" in text.splitlines()[0]
    assert ("Gate checks: 7 passed, 1 inconclusive, 1 not measured (machine busy)"
            in text)
    # Both before the folded passed checks.
    folded = text.index("<summary>Passed and skipped checks (7)")
    assert text.index("machine busy: TTFT not measured") < folded
    assert text.index("throughput straddles") < folded


def test_pipes_and_markup_in_names_cannot_break_a_table(real: RunResult) -> None:
    cases = [c.model_copy(update={"config_label": "a | b <script> *x* [y](z) $1$"})
             for c in real.cases]
    odd = real.model_copy(update={"cases": cases})
    text = render_markdown(odd, compare_runs(odd, real))
    assert_valid_gfm(text)
    assert r"a \| b \<script\> \*x\* \[y\](z) \$1\$" in text
    assert md_escape("x\ny|z") == r"x y\|z"


def test_5000_cases_stay_under_1_mib_and_point_to_the_artifact() -> None:
    configs = [SynthConfig(f"d{i}-k{k}", f"draft {i}, k={k}", "draft_model", f"org/draft-{i}",
                           k, 0.7, 2.0) for i in range(10) for k in range(1, 6)]
    base = synthetic_run(configs=configs, concurrencies=range(1, 101), trials=1, requests=0,
                         output_tokens=16, run_dir="/runs/big")
    assert len(base.cases) == 5000
    cur = scale_throughput(base, 0.7)
    assert isinstance(cur, RunResult)
    cmp = compare_runs(cur, base)
    assert len(cmp.regressions) == 5000
    text = render_markdown(cur, cmp)
    assert len(text.encode("utf-8")) <= MAX_BYTES < STEP_SUMMARY_LIMIT
    assert_valid_gfm(text)
    assert "more rows not shown (size limit)" in text
    assert "`/runs/big/report.html`" in text
    assert "🔴 5000 regressions" in text.splitlines()[0]


def test_tiny_budget_still_says_where_to_look(regressed: tuple[RunResult, RunComparison]) -> None:
    run, cmp = regressed
    text = render_markdown(run, cmp, max_bytes=600)
    assert len(text.encode()) <= 600
    assert "report.html" in text


def test_github_run_link_in_pointer(monkeypatch: pytest.MonkeyPatch, real: RunResult) -> None:
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "org/repo")
    monkeypatch.setenv("GITHUB_RUN_ID", "42")
    text = render_markdown(real)
    assert "[this workflow run](https://github.com/org/repo/actions/runs/42)" in text


def test_step_summary_only_on_github(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                     regressed: tuple[RunResult, RunComparison]) -> None:
    run, cmp = regressed
    assert write_step_summary(run, cmp) is None
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert write_step_summary(run, cmp) == summary
    assert write_step_summary(run) == summary
    text = summary.read_text()
    assert text.startswith("# earlier step\n")
    assert text.count("## specperf · cpu-tiny") == 2
    assert_valid_gfm(text)


def test_step_summary_respects_what_is_left(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            real: RunResult) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("x" * (STEP_SUMMARY_LIMIT - 50_000))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    write_step_summary(real)
    assert summary.stat().st_size <= STEP_SUMMARY_LIMIT
    summary.write_text("x" * (STEP_SUMMARY_LIMIT - 100))
    assert write_step_summary(real) is None  # no room left: nothing appended
    assert summary.stat().st_size == STEP_SUMMARY_LIMIT - 100


def test_the_time_breakdown_closes_the_run_section(real: RunResult) -> None:
    times = TimeBreakdown(wall_s=90.0, server_starts_s=40.0, trials_s=30.0, other_s=20.0)
    text = render_markdown(real.model_copy(update={"time_breakdown": times}))
    assert ("_time: 90 s = server starts 40 s · trials 30 s · warm-ups 0 s · re-measures "
            "0 s · quiet-machine waits 0 s · confirmation restarts 0 s · reports 0 s · shutdown "
            "0 s · other 20 s "
            "(1.29× starts+trials+warm-ups)_") in text
    assert_valid_gfm(text)
    assert "time:" not in render_markdown(real)
