"""The `specperf` command line: compare / report / show / schema and the command list."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import jsonschema
import pytest

from specperf import cli
from specperf.config.rules import CompareRules
from specperf.report.synthetic import scale_latency
from specperf.schemas import Baseline, RunResult
from specperf.store.files import load_result
from tests.support import DATA_DIR

REAL_RUN = DATA_DIR / "run-cpu-tiny.json"


@pytest.fixture(autouse=True)
def _plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("COLUMNS", "FORCE_COLOR", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")


@pytest.fixture(scope="module")
def real() -> RunResult:
    run = load_result(REAL_RUN)
    assert isinstance(run, RunResult)
    return run


@pytest.fixture
def regressed_file(real: RunResult, tmp_path: Path) -> Path:
    path = tmp_path / "current" / "run.json"
    path.parent.mkdir()
    path.write_text(scale_latency(real, 1.3, cases=["self-k3"]).model_dump_json(indent=1))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# --------------------------------------------------------------------------- compare


def test_compare_regression_exits_1_and_names_the_metric(
        capsys: pytest.CaptureFixture[str], regressed_file: Path, tmp_path: Path) -> None:
    md, js = tmp_path / "diff.md", tmp_path / "diff.json"
    rc, out, err = run_cli(capsys, "compare", str(regressed_file), str(REAL_RUN), "--width",
                           "80", "--markdown", str(md), "--json-out", str(js))
    assert rc == 1, out + err
    assert "↓ TPOT" in out and "REGRESSION" in out
    assert "✗ c1 TPOT median rose 30.0 %" in out
    assert out.rstrip().splitlines()[-1].startswith("3 cases: 3 regressions")
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "\x1b[" not in out
    text = md.read_text()
    assert "#### 🔴 Regressions (3)" in text and "| self-k3 | 1 | ↓ TPOT (ms) |" in text
    data = json.loads(js.read_text())
    assert data["kind"] == "specperf-comparison"
    assert any(m["metric"] == "TPOT" and m["verdict"] == "regression"
               for c in data["cases"] for m in c["comparisons"])


def test_compare_applies_the_rules_recorded_in_the_run(
        capsys: pytest.CaptureFixture[str], real: RunResult, tmp_path: Path) -> None:
    """A run whose profile only calls 60 % a change (its [compare] table, recorded in
    run.json) is judged by those rules offline too: the 30 % slowdown that exits 1 under
    the defaults is no regression, and the output says the rules differ."""
    slower = scale_latency(real, 1.3, cases=["self-k3"])
    assert isinstance(slower, RunResult)
    rules = CompareRules.model_validate({
        "metrics": {"tpot": {"min_effect": 0.6}, "e2e": {"min_effect": 0.6},
                    "output_throughput": {"min_effect": 0.6}},
    })
    recorded = tmp_path / "recorded.json"
    recorded.write_text(slower.model_copy(update={"compare_rules": rules}).model_dump_json())
    bare = tmp_path / "bare.json"  # an older run file: no rules recorded
    bare.write_text(slower.model_dump_json())
    assert "compare_rules" not in json.loads(REAL_RUN.read_text())  # old files still load

    rc, out, err = run_cli(capsys, "compare", str(bare), str(REAL_RUN), "--width", "120")
    assert rc == 1 and "REGRESSION" in out
    js = tmp_path / "cmp.json"
    rc, out, err = run_cli(capsys, "compare", str(recorded), str(REAL_RUN), "--width", "120",
                           "--json-out", str(js))
    # Not 1: no regression. The untouched cases' per-request intervals (2 trials) are
    # wider than their minimum effects, so some stay INCONCLUSIVE (6).
    assert rc in (0, 6), out + err
    assert "0 regressions" in out
    assert "rules differ from the defaults: TPOT minimum effect 60 % (default 5 %)" in out
    assert json.loads(js.read_text())["rules"]["metrics"]["tpot"]["min_effect"] == 0.6


def test_compare_run_against_itself_finds_no_regression(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Identical data cannot show a regression, but a run of few trials cannot prove there
    # is none at a 5 % minimum effect either: INCONCLUSIVE (6), never a failure.
    rc, out, err = run_cli(capsys, "compare", str(REAL_RUN), str(REAL_RUN))
    assert rc in (0, 6), err
    assert "0 regressions" in out and err == ""


def test_compare_verbose_lists_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "compare", str(REAL_RUN), str(REAL_RUN), "-v", "--width", "120")
    assert rc in (0, 6) and "UNCHANGED" in out and "acceptance_rate[pos 1]" in out


def test_compare_accepts_a_baseline_file_on_either_side(
        capsys: pytest.CaptureFixture[str], real: RunResult, tmp_path: Path) -> None:
    base = tmp_path / "hw.json"
    base.write_text(Baseline(provenance=real.provenance, cases=real.cases).model_dump_json())
    # Compared either way round (not refused, 2); the same data shows no regression (not 1).
    assert run_cli(capsys, "compare", str(REAL_RUN), str(base))[0] in (0, 6)
    rc, out, _ = run_cli(capsys, "compare", str(base), str(REAL_RUN), "--markdown",
                         str(tmp_path / "m.md"))
    assert rc in (0, 6) and (tmp_path / "m.md").read_text().startswith("## specperf")


def test_truncated_file_exits_2_naming_the_file(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    cut = tmp_path / "cut-run.json"
    cut.write_text(REAL_RUN.read_text()[:4000])
    rc, out, err = run_cli(capsys, "compare", str(cut), str(REAL_RUN))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert str(cut) in err and "not valid JSON (line " in err
    rc, _, err = run_cli(capsys, "compare", str(REAL_RUN), str(cut))
    assert rc == 2 and str(cut) in err


def test_invalid_field_exits_2_naming_the_field(capsys: pytest.CaptureFixture[str],
                                                real: RunResult, tmp_path: Path) -> None:
    data = json.loads(real.model_dump_json())
    del data["provenance"]["hardware_id"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    rc, _, err = run_cli(capsys, "show", str(bad))
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert str(bad) in err and "field `provenance.hardware_id`: Field required" in err
    data["kind"] = "something-else"
    bad.write_text(json.dumps(data))
    rc, _, err = run_cli(capsys, "compare", str(bad), str(REAL_RUN))
    assert rc == 2 and str(bad) in err


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, _, err = run_cli(capsys, "compare", str(tmp_path / "nope.json"), str(REAL_RUN))
    assert rc == 2 and "nope.json" in err


def test_other_hardware_is_refused_with_exit_2(capsys: pytest.CaptureFixture[str],
                                               real: RunResult, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(real.model_copy(update={"provenance": real.provenance.model_copy(
        update={"hardware_id": "gpu-nvidia-a100-x1"})}).model_dump_json())
    rc, out, err = run_cli(capsys, "compare", str(REAL_RUN), str(other))
    assert rc == 2
    assert "REFUSED: hardware differs" in out
    assert "--perf-update-baselines" in err
    rc, _, _ = run_cli(capsys, "compare", str(REAL_RUN), str(other), "--force")
    assert rc in (0, 6)  # compared: no refusal, and no regression against itself


def test_step_summary_flag(capsys: pytest.CaptureFixture[str], regressed_file: Path,
                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    rc, _, _ = run_cli(capsys, "compare", str(regressed_file), str(REAL_RUN), "--step-summary")
    assert rc == 1 and "🔴 3 regressions" in summary.read_text()


# --------------------------------------------------------------------------- report, show


def test_report_writes_everything(capsys: pytest.CaptureFixture[str], regressed_file: Path,
                                  tmp_path: Path) -> None:
    out_dir = tmp_path / "report"
    rc, out, err = run_cli(capsys, "report", str(regressed_file), "--out", str(out_dir),
                           "--baseline", str(REAL_RUN), "--width", "100")
    assert rc == 0, err
    for name in ("run.json", "comparison.json", "report.md", "report.html", "report.txt"):
        assert (out_dir / name).is_file(), name
    assert len(list((out_dir / "plots").glob("*.png"))) == 10
    assert "specperf measurements" in out and "3 regressions" in out
    assert (out_dir / "advice.json").is_file()  # the run has spec cases
    assert f"wrote 16 files to {out_dir}" in out


def test_report_bad_input_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_text("{")
    rc, _, err = run_cli(capsys, "report", str(REAL_RUN), "--out", str(tmp_path / "o"),
                         "--baseline", str(cut))
    assert rc == 2 and str(cut) in err
    assert not (tmp_path / "o").exists()


def test_show_run_and_baseline(capsys: pytest.CaptureFixture[str], real: RunResult,
                               tmp_path: Path) -> None:
    rc, out, _ = run_cli(capsys, "show", str(REAL_RUN), "--width", "80")
    assert rc == 0
    assert out.startswith(f"{REAL_RUN}: specperf-run (schema 1)")
    assert "specperf gate checks" in out and "acceptance_rate[pos 1]" in out
    base = tmp_path / "b.json"
    base.write_text(Baseline(provenance=real.provenance, cases=real.cases).model_dump_json())
    rc, out, _ = run_cli(capsys, "show", str(base))
    assert rc == 0 and "specperf-baseline" in out and "3 cases" in out


# --------------------------------------------------------------------------- schema


@pytest.mark.parametrize("baseline", [False, True])
def test_schema_is_valid_json_schema(capsys: pytest.CaptureFixture[str], real: RunResult,
                                     baseline: bool) -> None:
    rc, out, _ = run_cli(capsys, "schema", *(["--baseline"] if baseline else []))
    assert rc == 0
    schema = json.loads(out)
    validator_cls = jsonschema.validators.validator_for(schema)
    validator_cls.check_schema(schema)
    doc = (Baseline(provenance=real.provenance, cases=real.cases) if baseline else real)
    instance = json.loads(doc.model_dump_json())
    validator_cls(schema).validate(instance)
    instance["kind"] = "nonsense"
    with pytest.raises(jsonschema.ValidationError):
        validator_cls(schema).validate(instance)
    assert schema["title"] == ("Baseline" if baseline else "RunResult")


# --------------------------------------------------------------------------- --json


def test_compare_json_prints_and_json_out_writes(capsys: pytest.CaptureFixture[str],
                                                 regressed_file: Path, tmp_path: Path) -> None:
    """--json means one thing everywhere: print the result as JSON on stdout."""
    js = tmp_path / "cmp.json"
    rc, out, err = run_cli(capsys, "compare", str(regressed_file), str(REAL_RUN), "--json",
                           "--json-out", str(js))
    assert rc == 1 and err == ""
    printed = json.loads(out)
    assert printed["kind"] == "specperf-comparison"
    assert json.loads(js.read_text()) == printed


def test_compare_json_path_still_writes_with_a_deprecation_note(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    js = tmp_path / "cmp.json"
    rc, out, err = run_cli(capsys, "compare", str(REAL_RUN), str(REAL_RUN), "--json", str(js))
    assert rc in (0, 6) and "0 regressions" in out  # the table, as before
    assert json.loads(js.read_text())["kind"] == "specperf-comparison"
    assert err.count("\n") == 1 and "--json PATH is deprecated" in err and "--json-out" in err
    rc, _, err = run_cli(capsys, "compare", str(REAL_RUN), str(REAL_RUN), "--json", str(js),
                         "--json-out", str(tmp_path / "other.json"))
    assert rc == 2 and "give one path" in err


@pytest.mark.parametrize("argv", [
    ["compare", str(REAL_RUN), str(REAL_RUN), "--json"],
    ["advise", str(REAL_RUN), "--json"],
    ["power", "--baseline", str(REAL_RUN), "--effect", "0.1", "--sim-trials", "0", "--json"],
    ["model", "--acceptance", "0.7", "--k", "3", "--target-ms", "43.1", "--draft-ms", "3",
     "--tokens", "512", "--json"],
])
def test_json_prints_json_on_stdout_for_every_command(capsys: pytest.CaptureFixture[str],
                                                      argv: list[str]) -> None:
    rc, out, err = run_cli(capsys, *argv)
    # compare of a run against itself: no regression, perhaps INCONCLUSIVE (6).
    assert rc in ((0, 6) if argv[0] == "compare" else (0,)) and err == ""
    json.loads(out)


def test_power_plans_by_the_profile_given_not_the_defaults(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # A baseline file records no [compare] table: without --profile, power plans by the
    # defaults and says so; with it, by the profile's minimum effects (cpu-tiny: TPOT 15 %).
    real = load_result(REAL_RUN)
    base = tmp_path / "base.json"
    base.write_text(Baseline(provenance=real.provenance, cases=real.cases).model_dump_json())
    argv = ["power", "--baseline", str(base), "--effect", "0.1", "--sim-trials", "0",
            "--no-history"]
    rc, out, _ = run_cli(capsys, *argv)
    out = " ".join(out.split())  # the table's console may wrap the line anywhere
    assert rc == 0 and "TPOT 5 %" in out and "the defaults; --profile P" in out
    profile = Path(__file__).parents[3] / "perf_tests" / "profiles" / "cpu-tiny.toml"
    rc, out, _ = run_cli(capsys, *argv, "--profile", str(profile))
    assert rc == 0 and "TTFT 35 %, TPOT 15 %, throughput 25 %" in " ".join(out.split())
    rc, _, err = run_cli(capsys, *argv, "--profile", str(tmp_path / "none.toml"))
    assert rc == 2 and err.count("\n") == 1 and "none.toml" in err


def test_power_json_records_its_rules_and_takes_the_profiles_alpha(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # The false-alarm rate is part of the profile's [compare] table: --alpha given wins,
    # else the profile's; --json says which rules the figures were planned by.
    real = load_result(REAL_RUN)
    base = tmp_path / "base.json"
    base.write_text(Baseline(provenance=real.provenance, cases=real.cases).model_dump_json())
    shipped = Path(__file__).parents[3] / "perf_tests" / "profiles" / "cpu-tiny.toml"
    text = shipped.read_text()
    assert "alpha = 0.01" in text
    profile = tmp_path / "cpu-tiny-alpha.toml"
    profile.write_text(text.replace("alpha = 0.01", "alpha = 0.05"))
    argv = ["power", "--baseline", str(base), "--effect", "0.1", "--sim-trials", "0",
            "--no-history", "--json"]
    rc, out, _ = run_cli(capsys, *argv, "--profile", str(profile))
    report = json.loads(out)
    assert rc == 0 and report["alpha"] == 0.05
    assert report["rules"]["alpha"] == 0.05 and report["rules"]["metrics"]["tpot"]["min_effect"] == 0.15
    assert str(profile) in report["rules_source"]
    rc, out, _ = run_cli(capsys, *argv, "--profile", str(profile), "--alpha", "0.02")
    assert rc == 0 and json.loads(out)["alpha"] == 0.02
    rc, out, _ = run_cli(capsys, *argv)
    report = json.loads(out)
    assert rc == 0 and report["alpha"] == 0.01 and "defaults" in report["rules_source"]


# --------------------------------------------------------------------------- the command list


def test_every_listed_command_is_wired_in_help_order(capsys: pytest.CaptureFixture[str]) -> None:
    names = ["compare", "report", "show", "schema", "check", "plan", "model", "advise", "power",
             "merge",
             "promote", "fetch-nightlies", "fetch-sharegpt", "fetch-specbench", "issues"]
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == names
    assert [m.__name__.rsplit(".", 1)[1] for m in cli.COMMANDS] == [
        n.replace("-", "_") for n in names]
    for command, name in zip(cli.COMMANDS, names, strict=True):
        assert sub.choices[name].get_default("func") is command.run
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out, err = capsys.readouterr()
    assert all(name in out for name in names) and err == ""


def test_a_command_without_add_parser_or_run_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    broken = types.ModuleType("specperf.cli.half_written")
    broken.add_parser = lambda subparsers: subparsers.add_parser("half-written")  # type: ignore[attr-defined]
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, broken))
    with pytest.raises(TypeError, match=r"specperf.cli.half_written .* defines no run\(\)"):
        cli.build_parser()


def test_a_command_that_fails_to_import_takes_the_cli_down(tmp_path: Path) -> None:
    """No silent skip: a broken command module is an import error naming it, not a CLI
    without that command."""
    code = textwrap.dedent("""
        import sys

        class Block:  # a meta-path finder: importing specperf.cli.power raises ImportError
            def find_spec(self, name, path=None, target=None):
                if name == "specperf.cli.power":
                    raise ImportError("specperf.cli.power is broken in this test")
                return None

        sys.meta_path.insert(0, Block())
        from specperf.cli import main
        sys.exit(main(["schema"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "ImportError: specperf.cli.power is broken in this test" in proc.stderr


def test_python_m_specperf_cli_is_the_specperf_command(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "specperf.cli", "show", str(REAL_RUN)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{REAL_RUN}: specperf-run")


def test_cli_works_without_vllm(tmp_path: Path) -> None:
    """The review commands never import vLLM or torch (a laptop has neither)."""
    code = textwrap.dedent(f"""
        import sys

        BLOCKED = {{"vllm", "torch", "transformers"}}

        class Block:  # a meta-path finder: importing these raises ImportError
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{{name}} is blocked in this test")
                return None

        sys.meta_path.insert(0, Block())
        from specperf.cli import main
        # A run against itself: no regression (0), or INCONCLUSIVE (6), never 1 or 2.
        rc = int(main(["compare", {str(REAL_RUN)!r}, {str(REAL_RUN)!r}]) not in (0, 6))
        rc |= main(["show", {str(REAL_RUN)!r}])
        rc |= main(["schema"])
        loaded = [m for m in ("vllm", "torch") if sys.modules.get(m) is not None]
        print("LOADED", loaded, file=sys.stderr)
        sys.exit(rc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={"PATH": "/usr/bin:/bin",
                                                         "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED []" in proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
