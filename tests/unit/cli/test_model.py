"""Tests for ``specperf model`` (the cost-model CLI command)."""

from __future__ import annotations

import argparse
import json

import pytest

from specperf.analysis.costmodel import Prediction, break_even_acceptance, predict
from specperf.cli import main
from specperf.cli.model import add_parser, run

BASE = ["--target-ms", "43.1", "--draft-ms", "3", "--tokens", "512"]
FIELDS = set(Prediction.model_fields)


@pytest.fixture(autouse=True)
def _wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    # Captured output is not a terminal: the command then renders 120 columns wide unless
    # COLUMNS says otherwise; make the table assertions independent of the caller's env.
    monkeypatch.delenv("COLUMNS", raising=False)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["model", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_single_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "--acceptance", "0.7", "--k", "3", *BASE, "--json")
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert isinstance(data, dict) and set(data) == FIELDS
    expected = predict(0.7, 3, 43.1, 3.0, 512).model_dump()
    assert data == pytest.approx(expected)
    assert Prediction.model_validate(data) == Prediction.model_validate(expected)


def test_json_overhead(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(
        capsys, "--acceptance", "0.6", "--k", "2", *BASE, "--overhead-ms", "1.5", "--json"
    )
    assert rc == 0
    assert json.loads(out)["total_ms"] == pytest.approx(
        predict(0.6, 2, 43.1, 3.0, 512, 1.5).total_ms
    )


def test_json_sweep_k(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "--acceptance", "0.7", "--sweep-k", "2..5", *BASE, "--json")
    assert rc == 0
    rows = json.loads(out)
    assert [r["k"] for r in rows] == [2, 3, 4, 5]
    assert all(set(r) == FIELDS for r in rows)
    # bare --sweep-k defaults to 1..16
    rc, out, _ = _run(capsys, "--acceptance", "0.7", "--sweep-k", *BASE, "--json")
    assert rc == 0 and [r["k"] for r in json.loads(out)] == list(range(1, 17))


def test_json_sweep_acceptance(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "--k", "3", "--sweep-acceptance", *BASE, "--json")
    assert rc == 0
    rows = json.loads(out)
    expected = [round(0.2 + 0.05 * i, 2) for i in range(16)]  # 0.20 .. 0.95
    assert [r["acceptance"] for r in rows] == expected
    assert all(set(r) == FIELDS and r["k"] == 3 for r in rows)
    rc, out, _ = _run(
        capsys, "--k", "3", "--sweep-acceptance", "0.2..0.95", "--step", "0.1", *BASE, "--json"
    )
    assert rc == 0
    assert [r["acceptance"] for r in json.loads(out)] == [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    rc, out, _ = _run(capsys, "--k", "3", "--sweep-acceptance", "1..1", *BASE, "--json")
    assert rc == 0 and [r["acceptance"] for r in json.loads(out)] == [1.0]


def test_table_single(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "--acceptance", "0.7", "--k", "3", *BASE)
    assert rc == 0 and err == ""
    for text in ("tokens per step", "verification steps", "wasted draft tokens", "ratio to plain"):
        assert text in out
    be = break_even_acceptance(3, 3 / 43.1)
    assert be is not None and f"break-even acceptance at k=3: {be:.3f}" in out
    assert "best k for a=0.7" in out


def test_table_sweep_k_marks_best(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "--acceptance", "0.7", "--sweep-k", "1..8", *BASE)
    assert rc == 0
    best_rows = [line for line in out.splitlines() if "best" in line and "│" in line]
    assert len(best_rows) == 1 and best_rows[0].split()[0] == "5"
    assert "best k = 5" in out
    # a hopeless draft: every k is slower, nothing is marked best
    rc, out, _ = _run(
        capsys, "--acceptance", "0.05", "--sweep-k", "1..3", "--target-ms", "10",
        "--draft-ms", "2", "--tokens", "100",
    )  # fmt: skip
    assert rc == 0 and "don't speculate" in out and "slower" in out


def test_table_sweep_acceptance_marks_break_even(capsys: pytest.CaptureFixture[str]) -> None:
    # c = 0.1, k = 3 -> break-even at E = 1.3, a ~= 0.245
    argv = ["--k", "3", "--sweep-acceptance", "0.1..0.5", "--target-ms", "10", "--draft-ms", "1"]
    rc, out, _ = _run(capsys, *argv, "--tokens", "100")
    assert rc == 0
    be = break_even_acceptance(3, 0.1)
    assert be is not None and 0.2 < be < 0.25
    marked = [line for line in out.splitlines() if "break-even" in line and "│" in line]
    assert len(marked) == 1 and marked[0].split()[0] == "0.250"  # first row at/above a*
    assert f"break-even acceptance at k=3: {be:.3f}" in out
    best = [line for line in out.splitlines() if "best" in line and "│" in line]
    assert len(best) == 1 and best[0].split()[0] == "0.500"


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["--acceptance", "1.5", "--k", "3", *BASE], "--acceptance"),
        (["--acceptance", "-0.1", "--k", "3", *BASE], "--acceptance"),
        (["--acceptance", "abc", "--k", "3", *BASE], "--acceptance"),
        (["--acceptance", "nan", "--k", "3", *BASE], "--acceptance"),
        (["--acceptance", "0.7", "--k", "0", *BASE], "--k"),
        (["--acceptance", "0.7", "--k", "2.5", *BASE], "--k"),
        (["--acceptance", "0.7", "--k", "3", "--target-ms", "-1", "--draft-ms", "3",
          "--tokens", "10"], "--target-ms"),
        (["--acceptance", "0.7", "--k", "3", "--target-ms", "0", "--draft-ms", "3",
          "--tokens", "10"], "--target-ms"),
        (["--acceptance", "0.7", "--k", "3", "--target-ms", "40", "--draft-ms", "-3",
          "--tokens", "10"], "--draft-ms"),
        (["--acceptance", "0.7", "--k", "3", *BASE, "--overhead-ms", "-1"], "--overhead-ms"),
        (["--acceptance", "0.7", "--k", "3", "--target-ms", "40", "--draft-ms", "3",
          "--tokens", "0"], "--tokens"),
        (["--k", "3", *BASE], "--acceptance"),  # missing
        (["--acceptance", "0.7", *BASE], "--k"),  # missing
        (["--acceptance", "0.7", "--k", "3", "--draft-ms", "3", "--tokens", "10"], "--target-ms"),
        (["--acceptance", "0.7", "--sweep-k", "5..2", *BASE], "--sweep-k"),
        (["--acceptance", "0.7", "--sweep-k", "0..4", *BASE], "--sweep-k"),
        (["--acceptance", "0.7", "--sweep-k", "1-16", *BASE], "--sweep-k"),
        (["--acceptance", "0.7", "--sweep-k", "1..x", *BASE], "--sweep-k"),
        (["--acceptance", "0.7", "--sweep-k", "1..100000", *BASE], "--sweep-k"),
        (["--k", "3", "--sweep-acceptance", "0.2..1.5", *BASE], "--sweep-acceptance"),
        (["--k", "3", "--sweep-acceptance", "0.9..0.2", *BASE], "--sweep-acceptance"),
        (["--k", "3", "--sweep-acceptance", "0.2...0.9", *BASE], "--sweep-acceptance"),
        (["--k", "3", "--sweep-acceptance", "0.2..0.9", "--step", "0", *BASE], "--step"),
        (["--k", "3", "--sweep-acceptance", "0..1", "--step", "1e-9", *BASE],
         "--sweep-acceptance"),
        (["--acceptance", "0.7", "--k", "3", "--step", "0.1", *BASE], "--step"),
        (["--acceptance", "0.7", "--k", "3", "--sweep-k", "1..4", *BASE], "--k"),
        (["--acceptance", "0.7", "--k", "3", "--sweep-acceptance", *BASE], "--acceptance"),
        (["--sweep-k", "--sweep-acceptance", *BASE], "--sweep-k"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str
) -> None:
    rc, out, err = _run(capsys, *argv, "--json")
    assert rc == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("specperf model: error:") and option in lines[0]


def test_registers_on_a_foreign_parser(capsys: pytest.CaptureFixture[str]) -> None:
    """The real CLI owns the top-level parser and calls ``run(args)``."""
    parser = argparse.ArgumentParser(prog="specperf")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("other")
    model_parser = add_parser(sub)
    assert isinstance(model_parser, argparse.ArgumentParser)
    args = parser.parse_args(["model", "--acceptance", "0.5", "--k", "2", *BASE, "--json"])
    assert run(args) == 0
    assert set(json.loads(capsys.readouterr().out)) == FIELDS


def test_run_model_accepts_programmatic_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    ns = argparse.Namespace(
        acceptance=0.8, k=4, target_ms=20.0, draft_ms=1.0, tokens=256, json=True
    )
    assert run(ns) == 0
    assert json.loads(capsys.readouterr().out)["k"] == 4
    assert run(argparse.Namespace(acceptance=2.0, k=4)) == 2
    assert "--acceptance" in capsys.readouterr().err


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["model", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    options = "--acceptance --k --target-ms --draft-ms --tokens --overhead-ms --sweep-k"
    for option in (*options.split(), "--sweep-acceptance", "--step", "--json"):
        assert option in out
