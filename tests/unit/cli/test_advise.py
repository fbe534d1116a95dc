"""Tests of ``specperf advise`` and the advice renderers it prints (specperf.report.advice)."""

from __future__ import annotations

import argparse
import io
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from rich.console import Console

from specperf.analysis.advice import RunAdvice, advise
from specperf.cli import main
from specperf.cli.advise import add_parser, run
from specperf.report.advice import advice_console, advice_markdown
from specperf.report.synthetic import scale_latency
from specperf.schemas import (
    Acceptance,
    Baseline,
    Case,
    CaseResult,
    Provenance,
    RunResult,
    Summary,
)
from specperf.store.files import load_result
from tests.support import DATA_DIR

POS = [0.8, 0.6, 0.45]


def _case(config_id: str, c: int, tpot: float, k: int | None = None) -> CaseResult:
    acc = None
    if k is not None:
        acc = Acceptance(drafts=1000.0, draft_tokens=1000.0 * k,
                         accepted_tokens=1000.0 * sum(POS[:k]),
                         accepted_per_position=[1000.0 * p for p in POS[:k]])
    return CaseResult(
        case=Case(config_id=config_id, concurrency=c), config_label=config_id,
        method="draft_model" if k else None, draft_model="tiny:draft" if k else None,
        num_speculative_tokens=k, trials=[], n_requests=12, n_errors=0,
        ttft_ms=Summary(n=12, median=50.0), tpot_ms=Summary(n=12, median=tpot),
        e2e_ms=Summary(n=12, median=2000.0), output_throughput=10.0, request_throughput=1.0,
        acceptance=acc,
    )


def _world(t: dict[int, float], d: dict[int, float], o: dict[int, float]) -> RunResult:
    """no-spec + draft-k1..3, spec TPOT = (t + o + k·d) / (1 + Σ p_i) exactly."""
    cases = [_case("nospec", c, t[c]) for c in sorted(t)]
    for k in (1, 2, 3):
        for c in sorted(t):
            tpot = (t[c] + o[c] + k * d[c]) / (1.0 + sum(POS[:k]))
            cases.append(_case(f"draft-k{k}", c, tpot, k))
    return RunResult(
        provenance=Provenance(
            specperf_version="0.0", vllm_version="0.0.test", hardware_id="cpu-test-2c",
            hardware="test CPU, 2 cores", accelerator="cpu", python_version="3.11",
            profile_name="synthetic", profile_hash="0" * 16,
            date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        ),
        run_dir="/tmp/synthetic-run",
        started_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        cases=cases,
    )


@pytest.fixture(autouse=True)
def _wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)


def _good() -> RunResult:
    return _world(t={1: 100.0, 4: 40.0}, d={1: 8.0, 4: 30.0}, o={1: 5.0, 4: 2.0})


def _slow_drafting() -> RunResult:
    return _world(t={1: 100.0, 4: 40.0}, d={1: 16.0, 4: 60.0}, o={1: 5.0, 4: 2.0})


def _write(path: Path, model: RunResult | Baseline) -> Path:
    path.write_text(model.model_dump_json(indent=1), encoding="utf-8")
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["advise", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_tables_and_sentences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_json = _write(tmp_path / "run.json", _good())
    rc, out, err = _run(capsys, str(run_json))
    assert rc == 0 and err == ""
    for header in ("measured gain", "predicted gain", "fitted c", "break-even a", "best k'",
                   "crossover", "cost model per draft and concurrency", "t_target",
                   "t_draft", "overhead", "in-sample", "held-out predictions", "fitted from"):
        assert header in out
    assert "draft-k3-c1" in out and "draft-k1-c4" in out
    assert "draft-k3 at c=1: k=3 accepts 1.85 draft tokens/step" in out
    assert "stops beating no-spec at concurrency ≈" in out
    assert "profile synthetic" in out
    # the held-out table names the configs each prediction was fitted from
    row = next(line for line in out.splitlines() if line.startswith("│ draft-k1-c1 ")
               and "draft-k2, draft-k3" in line)
    assert "%" in row


def test_real_run_prints_terms_held_out_errors_and_self_draft_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    real = DATA_DIR / "run-cpu-tiny-k123.json"
    rc, out, err = _run(capsys, str(real))
    assert rc == 0 and err == ""
    lines = out.splitlines()
    fit_row = next(line for line in lines if line.startswith("│ tiny:draft ") and " 1 │" in line)
    assert "57.4" in fit_row and "11.93" in fit_row and "0.208" in fit_row
    held = {line.split("│")[1].strip(): line for line in lines
            if line.startswith("│ draft-k") and ", draft-k" in line}
    assert "+4 %" in held["draft-k1-c1"] and "draft-k2, draft-k3" in held["draft-k1-c1"]
    assert "+11 %" in held["draft-k2-c1"] and "draft-k1, draft-k3" in held["draft-k2-c1"]
    assert "−13 %" in held["draft-k3-c1"] and "draft-k1, draft-k2" in held["draft-k3-c1"]
    assert "tiny:target (self-draft) at c=1" in out and "consistent with none" in out


def test_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_json = _write(tmp_path / "run.json", _good())
    rc, out, _ = _run(capsys, str(run_json), "--json")
    assert rc == 0
    adv = RunAdvice.model_validate(json.loads(out))
    assert adv == advise(_good())
    assert adv.case("draft-k2", 1) is not None


def test_baseline_run_file_reports_overhead_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A real run, every spec config's TPOT 1.6× slower: acceptance unchanged, the gain
    # fell, and the comparison against the original decides the TPOT regressions.
    real = load_result(DATA_DIR / "run-cpu-ci-k2.json")
    assert isinstance(real, RunResult)
    base = _write(tmp_path / "base.json", real)
    cur = _write(tmp_path / "cur.json", scale_latency(real, 1.6, cases=["draft-k2"]))
    rc, out, _ = _run(capsys, str(cur), "--baseline", str(base))
    assert rc == 0  # advice explains; the gates decide
    assert "overhead regressions" in out
    assert "overhead regression in draft-k2 at c=1" in out
    rc, out, _ = _run(capsys, str(cur), "--baseline", str(base), "--json")
    adv = RunAdvice.model_validate_json(out)
    assert {(f.config_id, f.concurrency) for f in adv.findings} == {("draft-k2", 1),
                                                                    ("draft-k2", 2)}
    assert adv.baseline == str(base)


def test_a_finding_no_verdict_backs_is_a_note(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Summaries only, no trials: the comparison has no noise to judge against, so no
    # timing change is decided, and the cost model's point estimates stay a note.
    good = _good()
    base = _write(tmp_path / "baseline.json",
                  Baseline(provenance=good.provenance, cases=good.cases))
    cur = _write(tmp_path / "cur.json", _slow_drafting())
    rc, out, _ = _run(capsys, str(cur), "--baseline", str(base), "--json")
    adv = RunAdvice.model_validate_json(out)
    assert rc == 0 and adv.findings == []
    (note,) = [n for n in adv.notes if n.startswith("not reported as overhead regressions")]
    assert "draft-k3-c1" in note and "no timing check of the case was a decided regression" in note
    # the same run as its own baseline: nothing moved
    rc, out, _ = _run(capsys, str(cur), "--baseline", str(cur))
    assert rc == 0 and "no overhead regression against" in out


def test_truncated_json_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = _good().model_dump_json(indent=1)
    bad = tmp_path / "truncated.json"
    bad.write_text(full[: len(full) // 2], encoding="utf-8")
    rc, out, err = _run(capsys, str(bad))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and str(bad) in err and "not valid JSON" in err
    good = _write(tmp_path / "run.json", _good())
    rc, _, err = _run(capsys, str(good), "--baseline", str(bad))
    assert rc == 2 and err.count("\n") == 1 and str(bad) in err


def test_invalid_or_missing_file_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"kind": "specperf-run", "cases": "nope"}), encoding="utf-8")
    rc, _, err = _run(capsys, str(wrong))
    assert rc == 2 and err.count("\n") == 1 and str(wrong) in err
    missing = tmp_path / "missing.json"
    rc, _, err = _run(capsys, str(missing))
    assert rc == 2 and err.count("\n") == 1 and str(missing) in err


def test_bad_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_json = _write(tmp_path / "run.json", _good())
    rc, _, err = _run(capsys, str(run_json), "--tolerance", "1.5")
    assert rc == 2 and "--tolerance" in err
    rc, _, err = _run(capsys, str(run_json), "--acceptance-tolerance", "-1")
    assert rc == 2 and "--acceptance-tolerance" in err
    with pytest.raises(SystemExit) as exc:  # missing RUN.json: argparse usage error
        main(["advise"])
    assert exc.value.code == 2


def test_registers_on_a_subparsers_action(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="specperf")
    sub = parser.add_subparsers(dest="command", required=True)
    p = add_parser(sub)
    assert isinstance(p, argparse.ArgumentParser)
    args = parser.parse_args(["advise", "x.json", "--baseline", "b.json", "--json"])
    assert args.run == Path("x.json") and args.baseline == Path("b.json") and args.json
    args.run = _write(tmp_path / "run.json", _good())
    args.baseline = None
    assert run(args) == 0


def test_markdown_section() -> None:
    adv = advise(_slow_drafting(), _good(), baseline_name="baseline.json")
    md = advice_markdown(adv)
    assert md.startswith("## Speculative-decoding advice\n")
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| case"))
    i = lines.index(header)
    assert lines[i + 1].startswith("| ---")
    assert header.count("|") == lines[i + 1].count("|") == lines[i + 2].count("|")
    assert "### Overhead regressions" in md and "slower at drafting" in md
    assert "### Cost model per draft and concurrency" in md
    assert "### Held-out predictions" in md
    held_header = next(line for line in lines if line.startswith("| case | fitted from |"))
    held = next(line for line in lines if line.startswith("| draft-k2-c1 | draft-k1, draft-k3 |"))
    assert held.count("|") == held_header.count("|") == 9  # 8 columns
    assert "- draft-k3 at c=1:" in md
    no_finding = advice_markdown(advise(_good(), _good(), baseline_name="b.json"), heading="###")
    assert no_finding.startswith("### Speculative-decoding advice")
    assert "No overhead regression against b.json." in no_finding


def test_console_renderable() -> None:
    adv = advise(_slow_drafting(), _good(), baseline_name="baseline.json")
    buf = io.StringIO()
    Console(file=buf, width=80, color_system=None).print(advice_console(adv))
    text = buf.getvalue()
    assert "speculative-decoding advice" in text and "overhead regressions" in text
    empty = RunAdvice()
    buf = io.StringIO()
    Console(file=buf, width=80, color_system=None).print(advice_console(empty))
    assert "no speculative-decoding cases" in buf.getvalue()
    assert "No speculative-decoding cases" in advice_markdown(empty)


def test_a_baseline_file_can_be_advised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _good()
    base = _write(tmp_path / "baseline.json",
                  Baseline(provenance=good.provenance, cases=good.cases))
    rc, out, _ = _run(capsys, str(base), "--json")
    assert rc == 0
    adv = RunAdvice.model_validate_json(out)
    assert adv.case("draft-k3", 1) is not None
    assert adv.case("draft-k3", 1) == advise(good).case("draft-k3", 1)
