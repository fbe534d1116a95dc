"""Bad input and failures of the nightly commands: `fetch-nightlies`, `compare --kept-runs`,
`promote` (their behaviour on real nightlies: tests/integration/test_nightly_history.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from specperf.cli import main
from specperf.config.exits import Exit
from specperf.store import baselines as baseline_store
from tests.support import NIGHTLIES, NightlyAPI


@pytest.fixture(autouse=True)
def _no_github_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GITHUB_REPOSITORY", "GITHUB_TOKEN", "GH_TOKEN", "GITHUB_RUN_ID",
                 "GITHUB_API_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("argv, says", [
    (["--repo", "no-slash"], "--repo no-slash: give OWNER/NAME"),
    ([], "--repo (unset): give OWNER/NAME"),
    (["--repo", "o/r", "--limit", "0"], "--limit 0: give 1 or more"),
])
def test_fetch_nightlies_bad_options(tmp_path: Path, argv: list[str], says: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fetch-nightlies", str(tmp_path / "kept"), *argv]) == 2
    assert says in capsys.readouterr().err


def test_fetch_nightlies_refused_by_github_exits_8(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    api = NightlyAPI(tmp_path)
    try:
        api.add(NIGHTLIES[0])
        api.fail_with = 403
        monkeypatch.setenv("GITHUB_API_URL", api.url)
        assert main(["fetch-nightlies", str(tmp_path / "kept"), "--repo", api.REPO]) == 8  # fetch failed
        monkeypatch.setenv("SPECPERF_LEGACY_EXIT_CODES", "1")  # the number before the one table
        assert main(["fetch-nightlies", str(tmp_path / "kept"), "--repo", api.REPO]) == 1
    finally:
        api.close()
    err = capsys.readouterr().err
    assert "no $GITHUB_TOKEN" in err and "HTTP 403" in err and "actions: read" in err


def test_fetch_nightlies_names_the_runs_it_refused(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A trusted nightly kept; a fork's run and a branch's dispatch refused, each named with
    its reason on stderr and in DIR/nightlies.json; still exit 0 (nothing failed)."""
    api = NightlyAPI(tmp_path)
    try:
        trusted = api.add(NIGHTLIES[0])
        fork = api.add(NIGHTLIES[1], head_repository="mallory/specperf")
        branch = api.add(NIGHTLIES[2], event="workflow_dispatch", head_branch="experiment")
        monkeypatch.setenv("GITHUB_API_URL", api.url)
        monkeypatch.setenv("GITHUB_TOKEN", "ghs_readonly")
        kept = tmp_path / "kept"
        assert main(["fetch-nightlies", str(kept), "--repo", api.REPO]) == Exit.OK
    finally:
        api.close()
    out, err = capsys.readouterr()
    assert f"refused run {fork} (https://github.com/{api.REPO}/actions/runs/{fork}), not a " \
           "trusted nightly: head repository 'mallory/specperf', not octo-org/specperf" in err
    assert f"refused run {branch} " in err and "branch 'experiment', not the default " \
           "branch main" in err
    assert f"nightly-1-{trusted}" in out and "1 nightly run file(s)" in out
    assert "2 run(s) refused" in out
    record = json.loads((kept / "nightlies.json").read_text())
    assert record["kind"] == "specperf-nightlies" and record["default_branch"] == "main"
    assert [r["run_id"] for r in record["kept"]] == [trusted]
    assert record["kept"][0]["path"] == f"nightly-1-{trusted}/run.json"
    assert {r["run_id"]: len(r["reasons"]) for r in record["refused"]} == {fork: 1, branch: 1}


def test_compare_needs_a_baseline_or_kept_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(NIGHTLIES[1])]) == 2
    assert "give a BASELINE file, or --kept-runs DIR" in capsys.readouterr().err


def test_compare_names_a_missing_kept_runs_directory(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(NIGHTLIES[1]), "--kept-runs", str(tmp_path / "nope")]) == 2
    assert "no such directory of kept runs" in capsys.readouterr().err


def test_compare_skips_a_bad_kept_run_naming_it(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(NIGHTLIES[0], tmp_path / "night-1.json")
    (tmp_path / "torn.json").write_text('{"kind": "specperf-run", "provenance": ')
    code = main(["compare", str(NIGHTLIES[1]), "--kept-runs", str(tmp_path), "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 6)
    assert "skipped a kept run" in err and "torn.json" in err
    assert "judged against the newest 1 kept run" in out and "night-1.json" in out


def test_promote_bad_runs_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(NIGHTLIES[1], tmp_path / "n.json")
    assert main(["promote", str(tmp_path), "--profile", "cpu-ci", "--hardware",
                 "cpu-amd-epyc-2c", "--runs", "1"]) == 2
    assert "--runs 1: give 2 or more" in capsys.readouterr().err


def test_promote_never_writes_where_a_run_files_commit_points(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A kept run whose git_commit is ``/../../../`` (it names the history entry) is skipped
    naming the file and the field; what is promoted is written under names of its own."""
    kept = tmp_path / "kept"
    kept.mkdir()
    for n in (1, 2):
        shutil.copy(NIGHTLIES[n], kept / f"night-{n}.json")
    # The newest, and agreeing with the others (night 3's measurements a day later).
    forged = json.loads(NIGHTLIES[2].read_text(encoding="utf-8"))
    forged["provenance"].update(git_commit="/../../../", date="2026-11-26T01:17:00Z")
    (kept / "forged.json").write_text(json.dumps(forged), encoding="utf-8")
    baselines = tmp_path / "baselines"
    code = main(["promote", str(kept), "--profile", "cpu-ci", "--hardware", "cpu-amd-epyc-2c",
                 "--runs", "2", "--baselines", str(baselines)])
    err = capsys.readouterr().err
    assert not (baselines / "cpu-ci" / ".json").exists()
    assert code == Exit.OK, err
    assert f"skipped a kept run: {kept / 'forged.json'}: field `provenance.git_commit` is " \
           "'/../../../', which cannot name a file" in err
    written = sorted(p.relative_to(baselines).as_posix() for p in baselines.rglob("*.json"))
    assert [w for w in written if "history" not in w] == ["cpu-ci/cpu-amd-epyc-2c.json"]
    assert all(w.endswith("-f8c52a2a4b.json") for w in written if "history" in w), written


def test_two_promotes_of_the_same_runs_write_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two promotes of the same runs (a rerun of the workflow while the first waits for the
    baseline's lock): the second, having read no baseline yet, gets the lock only after
    the first wrote. It must see that under the lock and write nothing — written again,
    the history would hold each run twice, pooled as two runs."""
    kept = tmp_path / "kept"
    kept.mkdir()
    for n in (1, 2, 3):
        shutil.copy(NIGHTLIES[n], kept / f"night-{n}.json")
    baselines = tmp_path / "baselines"
    argv = ["promote", str(kept), "--profile", "cpu-ci", "--hardware", "cpu-amd-epyc-2c",
            "--runs", "3", "--baselines", str(baselines)]
    real_lock = baseline_store.baseline_lock
    raced: list[int] = []
    other_started = False

    @contextmanager
    def first_comes_in_between(path: Path, say: object = None) -> Iterator[None]:
        # The order the lock gives them: the other promote runs to its end first (it
        # takes the real lock and writes), then this one gets the lock.
        nonlocal other_started
        if not other_started:
            other_started = True
            raced.append(main(argv))
        with real_lock(path):
            yield

    monkeypatch.setattr(baseline_store, "baseline_lock", first_comes_in_between)
    assert main(argv) == Exit.OK
    assert raced == [Exit.OK]
    out = capsys.readouterr().out
    assert out.count("all 3 filed in its history") == 1
    assert "already the baseline" in out and "nothing written" in out
    path = baseline_store.baseline_path(baselines, "cpu-ci", "cpu-amd-epyc-2c")
    history = sorted(p.name for p in baseline_store.history_dir(path).glob("*.json"))
    assert len(history) == 3, history  # not 6 (no "-2" twins)


def test_fetch_nightlies_says_when_the_previous_night_did_not_succeed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    api = NightlyAPI(tmp_path)
    try:
        api.add(NIGHTLIES[0])
        cancelled = api.add(NIGHTLIES[1], conclusion="cancelled")
        monkeypatch.setenv("GITHUB_API_URL", api.url)
        kept = tmp_path / "kept"
        assert main(["fetch-nightlies", str(kept), "--repo", api.REPO]) == Exit.OK
    finally:
        api.close()
    said = (kept / "previous-night.txt").read_text()
    # (The recorded nightlies are not a day apart: a gap may be said before it.)
    assert "the previous night (run #2 of" in said and "ended cancelled" in said, said
    err = capsys.readouterr().err
    assert "specperf fetch-nightlies: previous night: " in err and "ended cancelled" in err
    assert any("event=schedule" in path for path, _ in api.requests)
    assert f"nightly-2-{cancelled}" not in str(list(kept.iterdir()))  # never a kept run


def test_promote_prints_no_control_character_of_a_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A kept run's name and vLLM version reach promote's lines: an OSC title set and a
    workflow command in them print as text (the workflows stop commands around it)."""
    kept = tmp_path / "kept"
    kept.mkdir()
    hostile = "0.32.0\x1b]0;owned\x07::error::x"
    for n in (1, 2):
        data = json.loads(NIGHTLIES[n].read_text(encoding="utf-8"))
        data["provenance"]["vllm_version"] = hostile
        for case in data["cases"]:
            case["vllm_version"] = hostile
        (kept / f"night-{n}\x1b[2J.json").write_text(json.dumps(data), encoding="utf-8")
    code = main(["promote", str(kept), "--profile", "cpu-ci", "--hardware", "cpu-amd-epyc-2c",
                 "--runs", "2", "--baselines", str(tmp_path / "baselines")])
    out, err = capsys.readouterr()
    assert code == Exit.OK, err
    assert "\\x1b]0;owned" in out and "\\x1b[2J" in out
    assert "\x1b" not in out + err and "\x07" not in out + err
