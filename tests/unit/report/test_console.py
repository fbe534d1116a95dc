"""The console renderers: widths, colour rules, markup escaping, ordering."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specperf.analysis.aggregate import case_result
from specperf.analysis.judge.models import RunComparison
from specperf.analysis.judge.run import compare_runs
from specperf.config.server_configs import ServerConfig
from specperf.report.console import (
    default_width,
    render_comparison,
    render_run,
    render_summary,
    time_lines,
    want_color,
)
from specperf.report.html import render_html
from specperf.report.markdown import run_markdown
from specperf.report.synthetic import scale_latency, synthetic_run
from specperf.schemas import (
    Baseline,
    Case,
    CaseResult,
    FreshServerConfirmation,
    InconclusiveRetry,
    RunResult,
    TimeBreakdown,
)
from tests.support import make_run, make_spec_sample, make_trial_of, spec_counters_of

ANSI = re.compile(r"\x1b\[")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "TERM"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def regressed(real: RunResult) -> RunComparison:
    return compare_runs(scale_latency(real, 1.3, cases=["self-k3"]), real,
                        run_label="current/run.json", baseline_label="baseline/run.json")


@pytest.fixture(scope="module")
def big() -> RunComparison:
    base = synthetic_run(concurrencies=(1, 16, 64), trials=5, requests=5)
    cur = scale_latency(synthetic_run(concurrencies=(1, 16, 64), trials=5, requests=5, seed=7),
                        1.4, cases=["qwen3-0.6b-k3"])
    return compare_runs(cur, base)


def _lines(text: str) -> list[str]:
    return text.splitlines()


@pytest.mark.parametrize("verbose", [False, True])
def test_comparison_fits_80_columns_without_ansi(regressed: RunComparison, big: RunComparison,
                                                 verbose: bool) -> None:
    for cmp in (regressed, big):
        text = render_comparison(cmp, width=80, color=False, verbose=verbose)
        assert not ANSI.search(text)
        assert max(len(line) for line in _lines(text)) <= 80


def test_run_fits_80_columns_without_ansi(real: RunResult) -> None:
    text = render_run(real, width=80, color=False)
    assert not ANSI.search(text)
    assert max(len(line) for line in _lines(text)) <= 80


def test_run_summary_counts_every_outcome_and_gives_the_exit(real: RunResult) -> None:
    text = render_run(real, width=200, color=False)
    assert ("3 cases, 9 checks: 4 passed, 3 failed, 2 not judged (no baseline) (exit 1)"
            in text)
    # Nothing failed but a timing check was not measured: the busy status (7), said why.
    busy = [c.model_copy(update={"gate": "latency", "outcome": "busy"})
            if c.gate == "ttft_budget" else
            c.model_copy(update={"outcome": "pass"}) if c.outcome == "fail" else c
            for c in real.checks]
    text = render_run(real.model_copy(update={"checks": busy}), width=200, color=False)
    assert "1 not measured (machine busy)" in text and "(exit 7)" in text


def test_rich_markup_in_names_is_printed_verbatim(real: RunResult,
                                                  regressed: RunComparison) -> None:
    run_text = render_run(real, width=160, color=False)
    assert "acceptance_rate[pos 1]" in run_text
    cmp_text = render_comparison(regressed, width=160, color=False, verbose=True)
    assert "acceptance_rate[pos 1]" in cmp_text
    # A label that looks like a style tag survives too.
    odd = real.model_copy(update={"baseline_note": "see [bold]this[/bold] and [pos 2]"})
    assert "see [bold]this[/bold] and [pos 2]" in render_run(odd, width=200, color=True)


def test_color_only_when_asked_and_never_with_no_color(monkeypatch: pytest.MonkeyPatch,
                                                       regressed: RunComparison) -> None:
    assert ANSI.search(render_comparison(regressed, width=100, color=True))
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not ANSI.search(render_comparison(regressed, width=100, color=False))
    monkeypatch.setenv("NO_COLOR", "1")
    assert not ANSI.search(render_comparison(regressed, width=100, color=True))
    assert not ANSI.search(render_comparison(regressed, width=100))


def test_auto_color_follows_the_stream(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with (tmp_path / "log.txt").open("w") as not_a_tty:
        assert want_color(None, not_a_tty) is False
        monkeypatch.setenv("FORCE_COLOR", "1")
        assert want_color(None, not_a_tty) is True
        monkeypatch.setenv("NO_COLOR", "1")
        assert want_color(True, not_a_tty) is False


def test_default_width_uses_columns_off_a_terminal(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    with (tmp_path / "log.txt").open("w") as log:
        assert default_width(log) == 100
        monkeypatch.setenv("COLUMNS", "132")
        assert default_width(log) == 132


def test_regressions_first_explained_and_unchanged_collapsed(big: RunComparison) -> None:
    text = render_comparison(big, width=120, color=False)
    lines = _lines(text)
    verdict_rows = [ln for ln in lines if re.search(r"\b(REGRESSION|IMPROVEMENT|INCONCLUSIVE|"
                                                    r"UNCHANGED)\s*$", ln)]
    assert verdict_rows and "REGRESSION" in verdict_rows[0]
    # the first config group shown is the regressed one
    first_group = next(ln for ln in lines if ln.endswith("─") and not ln.startswith("─"))
    assert "qwen3-0.6b-k3" in first_group
    assert "✗ c1 TPOT median rose" in text  # the reason, expanded
    assert "UNCHANGED" not in text
    assert "unchanged metrics (-v lists them)" in text
    verbose = render_comparison(big, width=120, color=False, verbose=True)
    assert "UNCHANGED" in verbose
    # one summary line at the end
    last = [ln for ln in lines if ln.strip()][-1]
    counts = big.counts()
    assert last.startswith(f"{len(big.cases)} cases: ")
    assert f"{sum(1 for _ in big.regressions)} regressions" in last
    assert "inconclusive" in last and "improvement" in last
    assert sum(counts.values()) == len(big.all())


def test_refusal_is_printed(real: RunResult) -> None:
    other = real.model_copy(update={"provenance": real.provenance.model_copy(
        update={"hardware_id": "gpu-x"})})
    text = render_comparison(compare_runs(real, other), width=80, color=False)
    assert "REFUSED: hardware differs" in text
    assert "comparison refused" in _lines(text)[-1] or "comparison refused" in text
    assert max(len(line) for line in _lines(text)) <= 80


def test_show_a_baseline(real: RunResult) -> None:
    base = Baseline(provenance=real.provenance, cases=real.cases)
    text = render_summary(base, width=80, color=False)
    assert "specperf baseline — 3 cases" in text
    assert "self-k3-c1" in text
    assert max(len(line) for line in _lines(text)) <= 80


def _first_case_with(run: RunResult, **fields: object) -> tuple[CaseResult, RunResult]:
    """The run with its first case's ``fields`` set, and that case."""
    first = run.cases[0].model_copy(update=fields)
    return first, run.model_copy(update={"cases": [first, *run.cases[1:]]})


def test_retried_case_gets_a_line(real: RunResult) -> None:
    retry = InconclusiveRetry(initial_trials=1, trials=3, cap=3, batch=2, rounds=1,
                              triggered_by=["TPOT", "E2E"],
                              outcome={"TPOT": "unchanged", "E2E": "inconclusive"})
    first, run = _first_case_with(real, retry=retry)
    text = render_run(run, width=120, color=False)
    assert (f"retried {first.case.id}: 1 → 3 trials (cap 3) for INCONCLUSIVE TPOT, E2E: TPOT "
            "now unchanged, E2E still inconclusive") in text
    assert "retried" not in render_run(real, width=120, color=False)


def test_confirmed_case_gets_a_line(real: RunResult) -> None:
    rec = FreshServerConfirmation(triggered_by=["TPOT"], first_trials=5, trials=10,
                                  outcome={"TPOT": "inconclusive"})
    first, run = _first_case_with(real, confirmation=rec)
    text = render_run(run, width=120, color=False)
    assert (f"{first.case.id}: TPOT flagged: measured again on a fresh server (5 + 5 "
            "trials): TPOT now inconclusive") in text
    assert "fresh server" not in render_run(real, width=120, color=False)


TIMES = TimeBreakdown(wall_s=412.4, server_starts_s=184.2, trials_s=156.0, warmups_s=21.3,
                      reports_s=6.0, shutdown_s=4.0, other_s=40.9)


def test_the_time_line_names_every_bucket_and_the_quiet_ratio() -> None:
    assert time_lines(TIMES) == [
        "time: 412 s = server starts 184 s · trials 156 s · warm-ups 21 s · re-measures 0 s "
        "· quiet-machine waits 0 s · confirmation restarts 0 s · reports 6.0 s · shutdown 4.0 s · other 41 s "
        "(1.14× starts+trials+warm-ups)"]


@pytest.mark.parametrize(("width", "n"), [(80, 3), (100, 3), (120, 2), (200, 2), (240, 1)])
def test_the_time_line_wraps_at_its_separators(width: int, n: int) -> None:
    lines = time_lines(TIMES, width)
    assert len(lines) == n and all(len(line) <= width for line in lines)
    assert " ".join(s.strip() for s in lines) == time_lines(TIMES)[0]
    assert all(line.endswith(" ·") for line in lines[:-1])
    assert all(line.startswith("  ") for line in lines[1:])


def test_the_time_line_without_anything_measured() -> None:
    line = time_lines(TimeBreakdown(wall_s=3.2, other_s=3.2))[0]
    assert line.startswith("time: 3.2 s = server starts 0 s")
    assert line.endswith("other 3.2 s (no server started, nothing measured)")


def test_varying_proposals_and_an_instrument_problem_are_said() -> None:
    """An ngram case: its proposals as distributions, and a stream that merged steps
    named as an instrument problem — in the console, the markdown and the HTML alike."""
    # 12 tokens in 7 chunks: the stream shows 5 accepted tokens, the server accepted 4.
    samples = [make_spec_sample(tokens=12, chunks=7, lengths=[3, 3, 1, 2], accepted=[2, 0, 1, 1])]
    cfg = ServerConfig(id="ngram-k3", speculative_config={
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
    case = case_result(Case(config_id="ngram-k3", concurrency=1), cfg,
                       [make_trial_of(samples, acceptance=spec_counters_of(samples))], "0.32.0")
    run = make_run([case])
    proposals = ("proposals: ngram-k3-c1: 4 drafts of mean length 2.25 (k ≤ 3), proposal "
                 "lengths 1: 25 %, 2: 25 %, 3: 50 %; accepted per draft 0: 25 %, 1: 50 %, "
                 "2: 25 %; mean acceptance length 2.00")
    problem = "instrument problem (not a regression): ngram-k3-c1 trial 1: the stream shows 5"
    text = render_run(run, width=400, color=False)
    assert proposals in text and problem in text
    md = run_markdown(run)
    assert f"- {proposals}" in md and problem in md
    page = render_html(run)
    assert f"<li>{proposals}</li>" in page and problem in page


# --------------------------------------------------------------------------- the compact summary

SAVED = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "2026-12-04" / \
    "confirm-later" / "inject-r1.run.json.gz"
NO_BASELINE = ("no baseline for profile 'cpu-tiny' on hardware 'cpu-amd-epyc-2c'; baseline "
               "gates are skipped — record one with --perf-update-baselines")


def _without_baseline() -> RunResult:
    """A real 18-case run (cpu-tiny, benchmarks/results) as a run without a baseline
    records it: every latency and throughput check skipped for one reason."""
    import gzip

    from specperf.analysis.judge.kinds import LATENCY, THROUGHPUT, not_judged

    run = RunResult.model_validate_json(gzip.decompress(SAVED.read_bytes()))
    kept = [c for c in run.checks if c.gate not in ("latency", "throughput")]
    skipped = [not_judged(kind, r.case, NO_BASELINE) for r in run.cases
               for kind in (LATENCY, THROUGHPUT)]
    return run.model_copy(update={"checks": kept + skipped, "baseline_note": NO_BASELINE})


def test_skipped_checks_are_one_line_per_reason() -> None:
    from specperf.report.console import skipped_lines

    run = _without_baseline()
    n = len(run.cases)
    assert skipped_lines(run.checks) == [
        f"not judged: latency (TTFT, TPOT, E2E) and throughput of {n} cases ({2 * n} checks) "
        f"— {NO_BASELINE}"]
    text = render_run(run, width=80, color=False)
    assert "SKIP" not in text and text.count(NO_BASELINE.split(";")[0]) == 1


def test_missing_cases_group_under_one_reason_with_their_names() -> None:
    from specperf.analysis.judge.kinds import LATENCY, THROUGHPUT, not_judged
    from specperf.report.console import skipped_lines

    cases = [Case(config_id="draft-k1", concurrency=c) for c in (1, 4)]
    checks = [not_judged(k, case, f"case {case.id} is not in the baseline b.json; record it "
                                  "with --perf-update-baselines")
              for case in cases for k in (LATENCY, THROUGHPUT)]
    assert skipped_lines(checks) == [
        "not judged: latency (TTFT, TPOT, E2E) and throughput of 2 cases (draft-k1-c1, "
        "draft-k1-c4) (4 checks) — case <case> is not in the baseline b.json; record it with "
        "--perf-update-baselines"]


def test_80_columns_keep_every_case_id_whole() -> None:
    run = _without_baseline()
    for brief in (False, True):
        text = render_run(run, width=80, color=False, brief=brief)
        assert max(len(line) for line in _lines(text)) <= 80
        rows = [line.split()[0] for line in _lines(text) if line.startswith(" ") and line.split()]
        for r in run.cases:
            assert r.case.id in rows, r.case.id
        assert "…" not in text


def test_brief_summary_lists_only_what_did_not_pass() -> None:
    run = _without_baseline()
    full = render_run(run, width=80, color=False)
    brief = render_run(run, width=80, color=False, brief=True)
    passed = sum(c.outcome == "pass" for c in run.checks)
    assert f"{passed} checks passed" in brief and "report.txt" in brief
    assert " PASS" not in brief and " PASS" in full
    for c in run.checks:
        if c.outcome in ("fail", "inconclusive", "busy"):
            assert c.case.id in brief
    assert len(_lines(brief)) < len(_lines(full))


def test_held_by_is_shown_in_console_markdown_and_html(real: RunResult) -> None:
    from specperf.config.rules import CompareRules
    from specperf.report.markdown import comparison_markdown

    cmp = compare_runs(scale_latency(real, 1.3, cases=["self-k3"]), real,
                       CompareRules(min_baseline_runs=2))
    held = [m for _, m in cmp.all() if m.held_by]
    assert held and {m.held_by for m in held} == {"unproven_baseline"}
    assert "held by unproven_baseline: c1" in render_comparison(cmp, width=100, color=False,
                                                               verbose=True)
    assert "held by `unproven_baseline`" in comparison_markdown(cmp, verbose=True)
    assert "held by unproven_baseline" in render_html(real, comparison=cmp, make_plots=False)


def test_advice_at_80_columns_cuts_no_name_and_no_figure() -> None:
    """The advice tables of a real 18-case run at 80 columns (a CI log): names wrap at
    their spaces, figures fold, nothing ends in '…'."""
    from specperf.analysis.advice import advise
    from specperf.report import render_advice

    run = _without_baseline()
    for brief in (False, True):
        text = render_advice(advise(run, None), width=80, color=False, brief=brief)
        assert "…" not in text
        assert max(len(line) for line in _lines(text)) <= 80
        for r in run.cases:
            if r.case.config_id != "nospec":
                assert r.case.id in text


def test_a_held_verdict_at_80_columns_names_its_rule_whole() -> None:
    """A real 18-case run against itself with draft-k2 30 % slower: against one baseline
    run, every timing REGRESSION is held by unproven_baseline, and says so uncut."""
    from specperf.config.rules import CompareRules

    run = _without_baseline()
    cmp = compare_runs(scale_latency(run, 1.3, cases=["draft-k2"]), run,
                       CompareRules(min_baseline_runs=2), force=True)
    assert any(m.held_by for _, m in cmp.all())
    text = render_comparison(cmp, width=80, color=False)
    assert "…" not in text and max(len(line) for line in _lines(text)) <= 80
    assert "(held)" in text
    assert "held by unproven_baseline: c4 TPOT, E2E, output throughput; c8" in text


#: What a hostile run file can carry in any name: an OSC title set (ESC ] … BEL), a screen
#: clear (CSI), a C1 CSI, a carriage return that overprints, and a workflow command.
HOSTILE = "x\x1b]0;owned\x07\x1b[2J\x9b1m\rfake ::error::boom"


def _hostile(real: RunResult) -> RunResult:
    first = real.cases[0]
    case = first.model_copy(update={"case": first.case.model_copy(
        update={"config_id": f"nospec{HOSTILE}"}), "vllm_version": HOSTILE})
    prov = real.provenance.model_copy(update={"vllm_version": HOSTILE})
    return real.model_copy(update={"provenance": prov, "cases": [case, *real.cases[1:]],
                                   "baseline_note": HOSTILE})


@pytest.mark.parametrize("color", [False, True])
def test_control_characters_from_a_run_file_are_folded(real: RunResult, color: bool) -> None:
    """Every view folds C0/C1 control characters of the content (newline and tab kept)
    into visible ``\\xNN`` text: no title set, no screen clear, no overprint. The colour
    codes rich adds itself (ESC [ … m) stay when colour is on."""
    bad = _hostile(real)
    texts = [render_run(bad, width=200, color=color),
             render_summary(bad, width=200, color=color),
             render_comparison(compare_runs(bad, real), width=200, color=color, verbose=True)]
    for text in texts:
        assert "\x07" not in text and "\x9b" not in text and "\r" not in text
        assert "\x1b]" not in text and "\x1b[2J" not in text
        assert "\\x1b]0;owned" in text  # seen as text (rich drops BEL and CR itself)
        if not color:
            assert "\x1b" not in text
    assert ANSI.search(texts[0]) if color else True


def test_80_columns_cut_no_word_of_a_metric_name() -> None:
    """At 80 columns the end-of-run checks table broke "output throughput (tok/s)" into
    "output" / "throughp" / "ut" / "(tok/s)" (issue #55). A real run compared with itself
    30 % slower (its held checks too) and its acceptance floors: every word of every
    metric name, every figure and every result stays whole; which rule held a check is
    one line under the table."""
    from rich.console import Console

    from specperf.analysis import gate
    from specperf.analysis.judge.kinds import CASE_KINDS, from_comparison
    from specperf.config.gates import AcceptanceGate
    from specperf.config.rules import CompareRules
    from specperf.report.console import checks_table, held_check_lines
    from tests.support import CPU_CI_PAIRED_RUN, load_run

    run = load_run(CPU_CI_PAIRED_RUN)
    cur = scale_latency(run, 1.3)
    cmp = compare_runs(cur, run, CompareRules(min_baseline_runs=2))
    checks = [c for cc in cmp.cases for kind in CASE_KINDS for c in from_comparison(kind, cc)]
    spec = next(r for r in cur.cases if r.acceptance is not None)
    checks += gate.check_acceptance(spec, AcceptanceGate(min_rate=0.3, min_mean_length=1.5,
                                                         min_per_position=[0.5, 0.2]))
    assert any(c.held_by for c in checks) and any("[pos 1]" in c.metric for c in checks)
    console = Console(width=80, record=True, color_system=None)
    console.print(checks_table(cur, checks, width=80))
    text = console.export_text()
    assert max(len(line) for line in _lines(text)) <= 80
    words = set(text.split())
    for c in checks:
        for word in c.metric.split() + ([f"({c.unit})"] if c.unit else []):
            assert word in words, (word, c.metric)
    assert {"INCONCLUSIVE", "PASS", "(held)"} <= words and "…" not in text
    assert held_check_lines(checks)[0].startswith("held by unproven_baseline: ")
    assert "held by unproven_baseline" in render_run(cur.model_copy(update={"checks": checks}),
                                                     width=80, color=False)
