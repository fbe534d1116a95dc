"""The bad-input battery of the `specperf` commands (issue #14): run, baseline and history
files a user or a machine can break, and outputs that would overwrite an input.

Every row makes its own bad input in tmp_path from a real run file (tests/data), runs the
real command (``specperf.cli.main``) and checks what docs/bad-input.md promises: exit code
2 (never 1, which the nightly script reads as a regression), one message on stderr that
names the file (or option) and the field, no traceback, and every file in tmp_path
byte-identical afterwards (nothing written, nothing replaced, nothing half-written).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specperf import cli
from specperf.schemas import SCHEMA_VERSION
from specperf.store.baselines import history_dir
from tests.support import CPU_TINY_RUN

#: The real run every row starts from (no-spec, a draft and a self-draft config).
RUN = json.loads(CPU_TINY_RUN.read_text(encoding="utf-8"))


@pytest.fixture(autouse=True)
def _plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("COLUMNS", "FORCE_COLOR", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")


# --------------------------------------------------------------------------- makers


def good(d: Path, name: str = "run.json", kind: str = "run") -> Path:
    """A valid run (or baseline) file."""
    data = json.loads(json.dumps(RUN))
    if kind == "baseline":
        data = {"kind": "specperf-baseline", "schema_version": data["schema_version"],
                "provenance": data["provenance"], "cases": data["cases"]}
    path = d / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def edited(d: Path, edit: Callable[[dict[str, Any]], None], name: str = "bad.json",
           kind: str = "run") -> Path:
    """A run (or baseline) file with one edit; NaN and inf are written as JSON's readers
    take them (NaN, Infinity)."""
    path = good(d, name, kind)
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def raw(d: Path, content: bytes, name: str = "bad.json") -> Path:
    path = d / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def sample(data: dict[str, Any]) -> dict[str, Any]:
    return data["cases"][0]["trials"][0]["samples"][0]


def spec_case(data: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in data["cases"] if c.get("acceptance"))


def setter(where: Callable[[dict[str, Any]], dict[str, Any]], key: str,
           value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        where(data)[key] = value
    return edit


def top(data: dict[str, Any]) -> dict[str, Any]:
    return data


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Row:
    id: str
    #: Makes the inputs in the directory; returns the argv and what stderr must name.
    make: Callable[[Path], tuple[list[str], list[str]]]


def compare_bad_run(bad: Callable[[Path], Path], *field: str) -> Callable[[Path], Any]:
    """`specperf compare BAD BASELINE`: names BAD and the field."""
    def make(d: Path) -> tuple[list[str], list[str]]:
        path, base = bad(d), good(d, "base.json", "baseline")
        return ["compare", str(path), str(base)], [path.name, *field]
    return make


def command_on(command: list[str], bad: Callable[[Path], Path], *field: str,
               after: tuple[str, ...] = ()) -> Callable[[Path], Any]:
    """Any command reading BAD: ``command`` + [BAD] + ``after``."""
    def make(d: Path) -> tuple[list[str], list[str]]:
        path = bad(d)
        return [*command, str(path), *after], [path.name, *field]
    return make


def value(key: str, v: Any, where: Callable[[dict[str, Any]], dict[str, Any]] = sample,
          kind: str = "run") -> Callable[[Path], Path]:
    return lambda d: edited(d, setter(where, key, v), kind=kind)


def case_field(key: str, v: Any) -> Callable[[Path], Path]:
    return value(key, v, lambda data: data["cases"][0])


def acc(key: str, v: Any) -> Callable[[Path], Path]:
    return value(key, v, lambda data: spec_case(data)["acceptance"])


def dup_case(kind: str) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        return edited(d, lambda data: data["cases"].append(data["cases"][-1]), kind=kind)
    return make


DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_DICT = b'{"a":' * 50_000 + b"1" + b"}" * 50_000

FILE_ROWS = [
    # unreadable: not a specperf file at all
    Row("non-utf8", compare_bad_run(lambda d: raw(d, b"\xff\xfe{}"), "not UTF-8")),
    Row("binary-latin1", compare_bad_run(lambda d: raw(d, "{\"kind\": \"é\"}".encode("latin-1")),
                                         "not UTF-8")),
    Row("binary-nul", compare_bad_run(lambda d: raw(d, b"\x00\x01\x02\x03"), "not valid JSON")),
    Row("deep-list", compare_bad_run(lambda d: raw(d, DEEP), "nested deeper")),
    Row("deep-dict", compare_bad_run(lambda d: raw(d, DEEP_DICT), "nested deeper")),
    Row("int-5000-digits", compare_bad_run(lambda d: raw(d, b"[" + b"7" * 5000 + b"]"),
                                           "unreadable JSON value")),
    Row("empty", compare_bad_run(lambda d: raw(d, b""), "not valid JSON")),
    Row("truncated", compare_bad_run(lambda d: raw(d, CPU_TINY_RUN.read_bytes()[:5000]),
                                     "not valid JSON")),
    Row("top-level-array", compare_bad_run(lambda d: raw(d, b"[1, 2]"), "(top level)")),
    Row("a-directory", compare_bad_run(lambda d: (d / "dir.json").mkdir() or d / "dir.json",
                                       "cannot read")),
    # numbers out of bounds (Python's json reads NaN, Infinity and 1e999)
    Row("ttft-inf", compare_bad_run(value("ttft_s", float("inf")), "ttft_s", "finite")),
    Row("e2e-nan", compare_bad_run(value("e2e_s", float("nan")), "e2e_s", "finite")),
    Row("start-1e999", compare_bad_run(lambda d: raw(d, CPU_TINY_RUN.read_bytes().replace(
        b'"start_s": 0.0', b'"start_s": 1e999', 1)), "start_s", "finite")),
    Row("start-negative", compare_bad_run(value("start_s", -0.5), "start_s", "greater than")),
    Row("output-tokens-negative", compare_bad_run(value("output_tokens", -3), "output_tokens")),
    Row("chunks-float", compare_bad_run(value("chunks", 2.5), "chunks")),
    Row("trial-duration-nan", compare_bad_run(
        value("duration_s", float("nan"), lambda data: data["cases"][0]["trials"][0]),
        "duration_s")),
    Row("throughput-negative", compare_bad_run(case_field("output_throughput", -12.0),
                                               "output_throughput")),
    Row("median-nan", compare_bad_run(value("median", float("nan"),
                                            lambda data: data["cases"][0]["tpot_ms"]),
                                      "tpot_ms.median")),
    Row("stdev-negative", compare_bad_run(value("stdev", -1.0,
                                                lambda data: data["cases"][0]["ttft_ms"]),
                                          "ttft_ms.stdev")),
    Row("errors-over-requests", compare_bad_run(case_field("n_errors", 10_000), "n_errors")),
    Row("concurrency-0", compare_bad_run(value("concurrency", 0,
                                               lambda data: data["cases"][0]["case"]),
                                         "case.concurrency")),
    Row("k-zero", compare_bad_run(value("num_speculative_tokens", 0, spec_case),
                                  "num_speculative_tokens")),
    Row("acceptance-3x", compare_bad_run(
        lambda d: edited(d, lambda data: spec_case(data)["acceptance"].update(
            accepted_tokens=3 * spec_case(data)["acceptance"]["draft_tokens"])),
        "acceptance", "above 1")),
    Row("acceptance-nan", compare_bad_run(acc("accepted_tokens", float("nan")),
                                          "accepted_tokens")),
    Row("acceptance-negative-drafts", compare_bad_run(acc("drafts", -1.0), "drafts")),
    Row("position-rate-over-1", compare_bad_run(
        lambda d: edited(d, lambda data: spec_case(data)["acceptance"].update(
            accepted_per_position=[spec_case(data)["acceptance"]["drafts"] * 2])),
        "accepted_per_position[0]")),
    Row("port-70000", compare_bad_run(value("port", 70_000, lambda data: data["servers"][0]),
                                      "servers.0.port")),
    Row("outside-cores-inf", compare_bad_run(
        value("outside_cores", float("inf"), lambda data: data["cases"][0]["trials"][0]),
        "outside_cores")),
    # schema versions and duplicated cases
    Row("schema-newer", compare_bad_run(value("schema_version", SCHEMA_VERSION + 98, top),
                                        "schema_version", "upgrade specperf")),
    Row("schema-zero", compare_bad_run(value("schema_version", 0, top), "schema_version",
                                       "--perf-update-baselines")),
    Row("schema-negative", compare_bad_run(value("schema_version", -1, top),
                                           "schema_version")),
    Row("schema-string", compare_bad_run(value("schema_version", "1", top), "schema_version",
                                         "not an integer")),
    Row("schema-bool", compare_bad_run(value("schema_version", True, top), "schema_version")),
    Row("duplicate-case-run", compare_bad_run(dup_case("run"), "cases", "listed twice")),
    Row("unknown-kind", compare_bad_run(value("kind", "specperf-runs", top), "kind")),
    # a provenance string that becomes part of a path (history entry, baseline file)
    Row("commit-a-path", compare_bad_run(value("git_commit", "/../../../",
                                               lambda data: data["provenance"]),
                                         "provenance.git_commit", "cannot name a file")),
    Row("baseline-hardware-a-path", lambda d: (
        ["compare", str(good(d)), str(value("hardware_id", "../../x",
                                            lambda data: data["provenance"], "baseline")(d))],
        ["bad.json", "provenance.hardware_id", "cannot name a file"])),
    # the baseline side, and the other commands
    Row("baseline-dup-case", lambda d: (
        ["compare", str(good(d)), str(dup_case("baseline")(d))], ["bad.json", "listed twice"])),
    Row("baseline-newer", lambda d: (
        ["compare", str(good(d)), str(value("schema_version", 7, top, "baseline")(d))],
        ["bad.json", "upgrade specperf"])),
    Row("show-binary", command_on(["show"], lambda d: raw(d, b"\x89PNG\r\n\x1a\n\xff"),
                                  "not UTF-8")),
    Row("show-deep", command_on(["show"], lambda d: raw(d, DEEP), "nested deeper")),
    Row("report-nan", lambda d: (
        ["report", str(value("ttft_s", float("nan"))(d)), "--out", str(d / "out")],
        ["bad.json", "ttft_s"])),
    Row("advise-non-utf8", command_on(["advise"], lambda d: raw(d, b"\xc3\x28"), "not UTF-8")),
    Row("power-inf", lambda d: (
        ["power", "--baseline", str(value("e2e_s", float("inf"))(d)), "--effect", "0.1",
         "--sim-trials", "0"], ["bad.json", "e2e_s"])),
    Row("merge-non-utf8-shard", lambda d: (
        ["merge", str(good(d)), str(raw(d, b"\xff")), "--out", str(d / "merged.json")],
        ["bad.json", "not UTF-8"])),
    Row("merge-version-99", lambda d: (
        ["merge", str(value("schema_version", 99, top)(d)), "--out", str(d / "m.json")],
        ["bad.json", "upgrade specperf"])),
]


def with_history(entry: Callable[[Path], bytes]) -> Callable[[Path], Any]:
    """`compare RUN BASE` where BASE's kept history (history/<name>/) holds a bad entry."""
    def make(d: Path) -> tuple[list[str], list[str]]:
        base = good(d, "base.json", "baseline")
        hist = history_dir(base)
        hist.mkdir(parents=True)
        bad = hist / "20990101T000000-bad.json"
        bad.write_bytes(entry(d))
        return ["compare", str(good(d)), str(base)], [str(bad), "--no-history"]
    return make


HISTORY_ROWS = [
    Row("history-non-utf8", with_history(lambda d: b"\xff\xfe\xfd")),
    Row("history-deep", with_history(lambda d: DEEP)),
    Row("history-run-not-baseline", with_history(lambda d: CPU_TINY_RUN.read_bytes())),
    Row("history-option-bad", lambda d: (
        ["compare", str(good(d)), str(good(d, "base.json", "baseline")), "--history",
         str(raw(d, b"\xff", "old.json"))], ["old.json", "not UTF-8"])),
]


def _link(d: Path, target: Path, name: str) -> Path:
    link = d / name
    os.symlink(target, link)
    return link


OUTPUT_ROWS = [
    Row("json-out-is-baseline", lambda d: (
        ["compare", str(good(d)), str(good(d, "base.json", "baseline")), "--json-out",
         str(d / "base.json")], ["--json-out", "base.json", "the input"])),
    Row("legacy-json-is-baseline", lambda d: (
        ["compare", str(good(d)), str(good(d, "base.json", "baseline")), "--json",
         str(d / "base.json")], ["--json", "base.json", "the input"])),
    Row("markdown-is-run", lambda d: (
        ["compare", str(good(d)), str(good(d, "base.json", "baseline")), "--markdown",
         str(d / "run.json")], ["--markdown", "run.json", "the input"])),
    Row("markdown-symlink-to-baseline", lambda d: (
        ["compare", str(good(d)), str(good(d, "base.json", "baseline")), "--markdown",
         str(_link(d, d / "base.json", "diff.md"))], ["--markdown", "diff.md", "base.json"])),
    Row("json-out-via-dotdot", lambda d: (
        ["compare", str(good(d)), str(good(d, "base.json", "baseline")), "--json-out",
         str(d / "sub" / ".." / "base.json")], ["--json-out", "the input"])),
    Row("json-out-into-history", lambda d: (
        ["compare", str(good(d)), str(good(d, "base.json", "baseline")), "--json-out",
         str(good(d, "history/base/20260101T000000-x.json", "baseline"))],
        ["--json-out", "20260101T000000-x.json", "the input"])),
    Row("json-out-is-another-baseline", lambda d: (
        ["compare", str(good(d)), str(good(d, "base.json", "baseline")), "--json-out",
         str(good(d, "other-hw.json", "baseline"))], ["--json-out", "other-hw.json",
                                                      "baseline file"])),
    Row("json-out-is-a-directory", lambda d: (
        ["compare", str(good(d)), str(good(d, "base.json", "baseline")), "--json-out",
         str(d)], ["--json-out", "directory"])),
    Row("two-outputs-one-file", lambda d: (
        ["compare", str(good(d)), str(good(d, "base.json", "baseline")), "--json-out",
         str(d / "x"), "--markdown", str(d / "x")], ["--json-out", "--markdown", "same file"])),
    Row("json-out-unwritable", lambda d: (
        ["compare", str(good(d)), str(good(d, "base.json", "baseline")), "--json-out",
         str(raw(d, b"not a dir", "plain") / "diff.json")], ["--json-out", "cannot write"])),
    Row("merge-out-is-shard", lambda d: (
        ["merge", str(good(d)), "--out", str(d / "run.json")], ["--out", "run.json", "shard"])),
    Row("merge-out-symlink-to-shard", lambda d: (
        ["merge", str(good(d)), "--out", str(_link(d, d / "run.json", "m.json"))],
        ["--out", "m.json", "shard"])),
    Row("merge-out-exists", lambda d: (
        ["merge", str(good(d)), "--out", str(raw(d, b"keep me", "merged.json"))],
        ["--out", "merged.json", "--force"])),
    Row("merge-out-directory", lambda d: (
        ["merge", str(good(d)), "--out", str(d)], ["--out", "directory"])),
    Row("merge-out-unwritable", lambda d: (
        ["merge", str(good(d)), "--out", str(raw(d, b"x", "plain") / "m.json")],
        ["--out", "cannot write"])),
    Row("report-out-holds-the-input", lambda d: (
        ["report", str(good(d, "r/run.json")), "--out", str(d / "r")],
        ["--out", "run.json", "the input"])),
    Row("report-out-holds-another-run", lambda d: (
        ["report", str(good(d)), "--out", str(d / "r")] if edited(
            d, setter(top, "run_dir", "/elsewhere"), "r/run.json") else [],
        ["--out", "another run"])),
    Row("report-out-is-a-file", lambda d: (
        ["report", str(good(d)), "--out", str(raw(d, b"x", "plain"))], ["--out", "is a file"])),
    Row("report-baseline-in-out", lambda d: (
        ["report", str(good(d)), "--baseline", str(good(d, "r/comparison.json", "baseline")),
         "--out", str(d / "r")], ["--out", "comparison.json", "the input"])),
]

ROWS = FILE_ROWS + HISTORY_ROWS + OUTPUT_ROWS


def _snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under root: file bytes, a symlink's target, or a directory marker."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        if p.is_symlink():
            out[key] = f"-> {os.readlink(p)}"
        elif p.is_dir():
            out[key] = "<dir>"
        else:
            out[key] = p.read_bytes()
    return out


def test_the_battery_is_big_enough() -> None:
    assert len(ROWS) >= 30
    assert len({r.id for r in ROWS}) == len(ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input(row: Row, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, names = row.make(tmp_path)
    before = _snapshot(tmp_path)
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, f"exit {rc}\n{out}\n{err}"
    assert "Traceback" not in err + out
    lines = [ln for ln in err.splitlines() if ln.strip() and "is deprecated" not in ln]
    assert len(lines) == 1, err
    for name in names:
        assert name in err, f"{name!r} not in {err!r}"
    assert _snapshot(tmp_path) == before, "an input or a file in its directory changed"


def test_merge_force_replaces_an_existing_output_but_never_a_shard(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = good(tmp_path)
    out = raw(tmp_path, b"old merge", "merged.json")
    assert cli.main(["merge", str(shard), "--out", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["kind"] == "specperf-run"
    before = shard.read_bytes()
    assert cli.main(["merge", str(shard), "--out", str(shard), "--force"]) == 2
    assert shard.read_bytes() == before
    capsys.readouterr()


def test_report_may_render_the_same_run_again_into_its_own_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`report RUN --out DIR` twice: the second replaces only the files the first wrote
    (its run.json is this run); a file of the user's in DIR is left alone."""
    run = good(tmp_path)
    mine = raw(tmp_path, b"notes", "out/notes.txt")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    assert mine.read_bytes() == b"notes"
    assert run.read_bytes() == good(tmp_path, "x.json").read_bytes()
    capsys.readouterr()


def test_compare_still_replaces_its_own_earlier_comparison(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, base = good(tmp_path), good(tmp_path, "base.json", "baseline")
    for _ in range(2):
        # The run against its own baseline: written, no regression (0, or 6 INCONCLUSIVE).
        assert cli.main(["compare", str(run), str(base), "--json-out", str(tmp_path / "c.json"),
                         "--markdown", str(tmp_path / "c.md")]) in (0, 6)
    assert json.loads((tmp_path / "c.json").read_text())["kind"] == "specperf-comparison"
    capsys.readouterr()
