"""`specperf issues`: open, update and close one GitHub issue per confirmed regression
(specperf.report.issues decides, specperf.cli.issues talks to the REST API).

No network: GitHub is replaced by `Replay`, which answers each request with a response
file from tests/data/github/ and records what was sent. Those files follow GitHub's
documented REST API responses field by field (list issues — two pages joined by a `Link`
header, a pull request among the items as the issues endpoint returns them —, create an
issue, create a comment, update an issue, and the 403 a token without `issues: write`
gets); they were written for these tests, not captured from github.com (this machine
reaches no GitHub API)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from specperf.analysis.judge.models import RunComparison
from specperf.analysis.judge.run import compare_runs
from specperf.cli import issues as cli_issues
from specperf.cli import main
from specperf.report.issues import LABEL, IssueKey, RunLinks, open_issues, plan
from specperf.report.synthetic import scale_latency
from specperf.schemas import RunResult
from tests.support import DATA_DIR

GH = DATA_DIR / "github"
API = "https://api.github.com/repos/octo-org/specperf"
RUN_URL = "https://github.com/octo-org/specperf/actions/runs/12345"


def _recorded(name: str) -> Any:
    return json.loads((GH / name).read_text(encoding="utf-8"))


class Replay:
    """GitHub, replayed: recorded responses by (method, URL prefix); every request kept."""

    def __init__(self, fail_create: bool = False) -> None:
        self.sent: list[tuple[str, str, Any]] = []
        self.fail_create = fail_create

    def __call__(self, method: str, url: str, payload: Any) -> tuple[int, dict[str, str], Any]:
        self.sent.append((method, url, payload))
        if method == "GET" and url.startswith(f"{API}/issues?"):
            if "page=2" in url:
                return 200, {}, _recorded("list-open-page2.json")
            nxt = f'<{API}/issues?state=open&labels={LABEL}&per_page=100&page=2>; rel="next"'
            return 200, {"Link": nxt}, _recorded("list-open-page1.json")
        if method == "POST" and url == f"{API}/issues":
            if self.fail_create:
                return 403, {}, _recorded("create-issue-403.json")
            return 201, {}, _recorded("create-issue-201.json")
        if method == "POST" and url.endswith("/comments"):
            return 201, {}, _recorded("create-comment-201.json")
        if method == "PATCH":
            return 200, {}, _recorded("update-issue-200.json")
        return 404, {}, {"message": "Not Found"}

    def writes(self) -> list[tuple[str, str, Any]]:
        return [s for s in self.sent if s[0] != "GET"]


@pytest.fixture
def regressed(real: RunResult) -> RunComparison:
    cur = scale_latency(real, 1.3, cases=["self-k3"])
    assert isinstance(cur, RunResult)
    return compare_runs(cur, real)


def _listing() -> list[dict[str, Any]]:
    return _recorded("list-open-page1.json") + _recorded("list-open-page2.json")


def test_the_listing_keeps_marked_open_issues_and_drops_pull_requests() -> None:
    found = open_issues(_listing())
    assert [i.number for i in found] == [37, 38, 39, 41]  # not the PR (#40), not #12
    assert found[3].key == IssueKey(profile="cpu-tiny", hardware="cpu-amd-epyc-2c",
                                    branch="main", vllm="0.32.0", case="self-k3-c1",
                                    metric="output throughput")


def test_open_update_close_and_keep(regressed: RunComparison) -> None:
    links = RunLinks(run=RUN_URL, artifacts=f"{RUN_URL}#artifacts")
    actions = plan(regressed, open_issues(_listing()), links, branch="main")
    by_kind = {k: [a for a in actions if a.kind == k] for k in ("open", "update", "close", "keep")}
    failing = {(cc.case.id, m.metric) for cc, m in regressed.regressions}
    assert failing == {("self-k3-c1", "TPOT"), ("self-k3-c1", "E2E"),
                       ("self-k3-c1", "output throughput")}
    # The open issue of a still-failing check is updated, the others failing get new ones.
    assert [(a.number, a.key.case, a.key.metric) for a in by_kind["update"]] == [
        (41, "self-k3-c1", "output throughput")]
    assert "Still a regression in [workflow run]" in (by_kind["update"][0].comment or "")
    assert {(a.key.case, a.key.metric) for a in by_kind["open"]} == {("self-k3-c1", "TPOT"),
                                                                     ("self-k3-c1", "E2E")}
    for a in by_kind["open"] + by_kind["update"]:
        assert a.body is not None and a.key.marker() in a.body
        assert f"[workflow run]({RUN_URL})" in a.body and f"({RUN_URL}#artifacts)" in a.body
        assert "| self-k3 | 1 |" in a.body  # the case's diff rows
    titles = {a.title for a in by_kind["open"]}
    assert "Perf regression: cpu-tiny self-k3-c1 TPOT (cpu-amd-epyc-2c, vLLM 0.32.0, main)" in titles
    # nospec-c4's throughput is unchanged in this run: its issue is closed with the diff.
    [close] = by_kind["close"]
    assert close.number == 37 and "Back within its limits" in (close.comment or "")
    assert "| nospec | 4 |" in (close.comment or "")
    # nospec-c1's TPOT is inconclusive (one run of few trials): kept, and why; so is
    # another profile's issue.
    keep = {a.number: a.why for a in by_kind["keep"]}
    assert set(keep) == {38, 39}
    assert keep[38].startswith("this run's check is inconclusive, not a pass")
    assert "another profile or hardware" in keep[39]


def test_a_later_nightly_back_within_limits_closes_it(real: RunResult) -> None:
    # The same measurements again: throughput passes, TPOT stays inconclusive.
    actions = plan(compare_runs(real, real), open_issues(_listing()), RunLinks(), branch="main")
    assert {a.number: a.kind for a in actions} == {37: "close", 38: "keep", 39: "keep",
                                                   41: "close"}


def test_inconclusive_or_unmeasured_keeps_the_issue(regressed: RunComparison) -> None:
    without_case = regressed.model_copy(update={
        "cases": [c for c in regressed.cases if c.case.id != "nospec-c4"]})
    actions = {a.number: a for a in plan(without_case, open_issues(_listing()), RunLinks(), branch="main")}
    assert actions[37].kind == "keep"
    assert "did not compare nospec-c4 output throughput" in actions[37].why
    refused = regressed.model_copy(update={"refusals": ["other hardware"]})
    assert {a.kind for a in plan(refused, open_issues(_listing()), RunLinks())} == {"keep"}


def _env(monkeypatch: pytest.MonkeyPatch, replay: Replay) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_test-token")
    monkeypatch.setenv("GITHUB_REPOSITORY", "octo-org/specperf")
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_RUN_ID", "12345")
    monkeypatch.setenv("GITHUB_REF_NAME", "main")
    monkeypatch.delenv("GITHUB_API_URL", raising=False)
    monkeypatch.setattr(cli_issues, "urllib_send", lambda token: replay)


def test_the_command_makes_the_requests(tmp_path: Path, regressed: RunComparison,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "compare.json"
    path.write_text(regressed.model_dump_json(), encoding="utf-8")
    replay = Replay()
    _env(monkeypatch, replay)

    assert main(["issues", str(path), "--dry-run"]) == 0
    assert replay.writes() == [] and "would open (new)" in capsys.readouterr().out
    assert [s[1] for s in replay.sent if s[0] == "GET"][-1].endswith("page=2")

    replay.sent.clear()
    assert main(["issues", str(path)]) == 0
    out = capsys.readouterr().out
    writes = replay.writes()
    n_open = 2
    assert [w[:2] for w in writes if w[1] == f"{API}/issues"] == [("POST", f"{API}/issues")] * n_open
    assert all(w[2]["labels"] == [LABEL] for w in writes if w[1] == f"{API}/issues")
    assert ("PATCH", f"{API}/issues/41") in [w[:2] for w in writes]
    assert ("POST", f"{API}/issues/41/comments") in [w[:2] for w in writes]
    assert ("PATCH", f"{API}/issues/37", {"state": "closed", "state_reason": "completed"}) in writes
    assert not any(f"/issues/{n}" in w[1] for n in (12, 38, 39, 40) for w in writes)
    assert "opened #42" in out and "closed #37" in out and "kept #38" in out


def test_the_candidate_jobs_issues_have_their_own_label(
        tmp_path: Path, regressed: RunComparison, monkeypatch: pytest.MonkeyPatch) -> None:
    # The vLLM candidate job files an upgrade A/B's regressions apart from the nightly's:
    # it lists and labels only its own, so the scheduled nightly (which closes issues of
    # another vLLM version) never sees them, nor they the nightly's.
    path = tmp_path / "upgrade.json"
    path.write_text(regressed.model_dump_json(), encoding="utf-8")
    replay = Replay()
    _env(monkeypatch, replay)
    assert main(["issues", str(path), "--label", cli_issues.CANDIDATE_LABEL]) == 0
    listed = [s[1] for s in replay.sent if s[0] == "GET"]
    assert listed and all(f"labels={cli_issues.CANDIDATE_LABEL}&" in u for u in listed[:1])
    created = [w for w in replay.writes() if w[1] == f"{API}/issues"]
    assert created and all(w[2]["labels"] == [cli_issues.CANDIDATE_LABEL] for w in created)
    assert cli_issues.CANDIDATE_LABEL != LABEL


def test_a_refused_request_is_exit_2_with_githubs_message(
        tmp_path: Path, regressed: RunComparison, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "compare.json"
    path.write_text(regressed.model_dump_json(), encoding="utf-8")
    _env(monkeypatch, Replay(fail_create=True))
    assert main(["issues", str(path)]) == 2
    err = capsys.readouterr().err
    assert "GitHub answered 403: Resource not accessible by integration" in err


def test_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str], regressed: RunComparison) -> None:
    _env(monkeypatch, Replay())
    run_file = DATA_DIR / "run-cpu-tiny.json"
    assert main(["issues", str(run_file)]) == 2
    assert "not a comparison (`specperf compare --json-out`)" in capsys.readouterr().err
    path = tmp_path / "compare.json"
    path.write_text(regressed.model_dump_json(), encoding="utf-8")
    monkeypatch.delenv("GITHUB_TOKEN")
    assert main(["issues", str(path)]) == 2
    assert "GITHUB_TOKEN is not set" in capsys.readouterr().err
    assert main(["issues", str(path), "--repo", "no-slash"]) == 2


# -- bounded, resumable, keyed by branch and vLLM ------------------------------------------


class GitHub:
    """A repository's issues, kept as GitHub would: the listing shows what was created,
    numbers go up. Answers are the recorded files, with number, title and body set. After
    ``fail_after`` writes it refuses every write with ``failure`` (a rate-limit 403 with
    GitHub's headers, or a 502), until ``fail_after`` is cleared."""

    RATE_LIMIT = (403, {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0",
                        "x-ratelimit-reset": "1767225600", "x-ratelimit-resource": "core"},
                  "rate-limited-403.json")
    SERVER_ERROR = (502, {}, "server-error-502.json")

    def __init__(self, listing: list[dict[str, Any]] | None = None) -> None:
        self.issues = {int(i["number"]): i for i in (listing or [])}
        self.created: list[dict[str, Any]] = []
        self.writes = 0
        self.fail_after: int | None = None
        self.failure = self.RATE_LIMIT

    def __call__(self, method: str, url: str, payload: Any) -> tuple[int, dict[str, str], Any]:
        if method == "GET" and url.startswith(f"{API}/issues?"):
            return 200, {}, [i for i in self.issues.values() if i.get("state") == "open"]
        if self.fail_after is not None and self.writes >= self.fail_after:
            status, headers, name = self.failure
            return status, headers, _recorded(name)
        self.writes += 1
        if method == "POST" and url == f"{API}/issues":
            item = _recorded("create-issue-201.json")
            number = max(self.issues, default=100) + 1
            item.update(number=number, title=payload["title"], body=payload["body"],
                        state="open", html_url=f"https://github.com/octo-org/specperf/issues/{number}")
            self.issues[number] = item
            self.created.append(item)
            return 201, {}, item
        if method == "POST" and url.endswith("/comments"):
            return 201, {}, _recorded("create-comment-201.json")
        if method == "PATCH":
            number = int(url.rsplit("/", 1)[1])
            self.issues[number].update(payload)
            return 200, {}, self.issues[number]
        return 404, {}, {"message": "Not Found"}


def _many(regressed: RunComparison, n_cases: int, name: str = "copy") -> RunComparison:
    """The regressed case copied under ``n_cases`` names: 3 failing checks each."""
    [bad] = [c for c in regressed.cases if c.case.id == "self-k3-c1"]
    copies = [bad.model_copy(update={"case": bad.case.model_copy(
        update={"config_id": f"self-k3-{name}{i}"})}) for i in range(n_cases)]
    return regressed.model_copy(update={"cases": copies})


def _open_per_check(gh: GitHub) -> list[dict[str, Any]]:
    return [i for i in gh.issues.values()
            if i.get("state") == "open" and "past the issue cap" not in i["title"]]


def _write(tmp_path: Path, cmp: RunComparison) -> Path:
    path = tmp_path / "compare.json"
    path.write_text(cmp.model_dump_json(), encoding="utf-8")
    return path


def test_a_thousand_regressions_open_the_cap_and_one_summary(
        tmp_path: Path, regressed: RunComparison, monkeypatch: pytest.MonkeyPatch) -> None:
    cmp = _many(regressed, 334)
    assert len(cmp.regressions) >= 1000
    gh = GitHub()
    _env(monkeypatch, Replay())
    monkeypatch.setattr(cli_issues, "urllib_send", lambda token: gh)
    monkeypatch.setenv("SPECPERF_ISSUES_CAP", "7")
    assert main(["issues", str(_write(tmp_path, cmp))]) == 0
    assert len(gh.created) == 7 + 1
    [summary] = [i for i in gh.created if "past the issue cap" in i["title"]]
    left = len(cmp.regressions) - 7
    assert f"{left} more confirmed regressions" in summary["body"]
    assert "By metric: " in summary["body"] and "… and " in summary["body"]
    # The next night (same regressions; --cap wins over the setting): the seven are
    # updated and stay open, more than the cap of 3 already, so nothing new is opened and
    # the summary is updated — not a second one.
    gh.created.clear()
    (tmp_path / "issues-state.json").unlink()
    assert main(["issues", str(_write(tmp_path, cmp)), "--cap", "3"]) == 0
    assert gh.created == []
    assert len(_open_per_check(gh)) == 7
    assert f"{left} more confirmed regressions" in gh.issues[summary["number"]]["body"]
    assert "(7 open;" in gh.issues[summary["number"]]["body"]


def test_the_cap_bounds_the_open_issues_over_many_nights(
        tmp_path: Path, real: RunResult, regressed: RunComparison,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Night after night a thousand other checks fail (other cases each night, the earlier
    # ones not measured: their issues stay open). Capping only each night's new issues
    # would leave 7 more open every night; the cap holds the open ones at 7.
    gh = GitHub()
    _env(monkeypatch, Replay())
    monkeypatch.setattr(cli_issues, "urllib_send", lambda token: gh)
    monkeypatch.setenv("SPECPERF_ISSUES_CAP", "7")
    first = _many(regressed, 334, "night0-")
    for night in range(3):
        cmp = _many(regressed, 334, f"night{night}-")
        assert len(cmp.regressions) >= 1000
        (tmp_path / "issues-state.json").unlink(missing_ok=True)
        assert main(["issues", str(_write(tmp_path, cmp))]) == 0
        assert len(_open_per_check(gh)) == 7
        summaries = [i for i in gh.issues.values() if "past the issue cap" in i["title"]]
        assert len(summaries) == 1 and summaries[0]["state"] == "open"
    assert all("night0-" in i["title"] for i in _open_per_check(gh))
    # A night where the first night's cases are measured again, fixed (faster than the
    # baseline: every check passes), while a thousand others fail: the seven close, and
    # that room, no more, goes to this night's worst regressions.
    fixed = scale_latency(real, 0.7, cases=["self-k3"])
    assert isinstance(fixed, RunResult)
    again = _many(compare_runs(fixed, real), 334, "night0-")
    assert again.regressions == []
    freed = _open_per_check(gh)
    cmp = again.model_copy(update={"cases": again.cases + _many(regressed, 334, "late-").cases})
    assert {c.case.id for c in first.cases} <= {c.case.id for c in cmp.cases}
    gh.created.clear()
    (tmp_path / "issues-state.json").unlink()
    assert main(["issues", str(_write(tmp_path, cmp))]) == 0
    assert all(gh.issues[i["number"]]["state"] == "closed" for i in freed)
    assert len(gh.created) == 7 and all("late-" in i["title"] for i in gh.created)
    assert len(_open_per_check(gh)) == 7


def test_other_profiles_hardware_and_branches_do_not_count_against_the_cap(
        regressed: RunComparison) -> None:
    # #39 (another profile and hardware) and an issue of another branch are open; the
    # cap of 2 is for cpu-tiny on this hardware on main, where none is open.
    [other_branch] = [i for i in _listing() if i["number"] == 38]
    other_branch = {**other_branch, "number": 50,
                    "body": other_branch["body"].replace('"branch":"main"', '"branch":"exp"')}
    listing = [i for i in _listing() if i["number"] == 39] + [other_branch]
    actions = plan(regressed, open_issues(listing), RunLinks(), branch="main", cap=2)
    assert len([a for a in actions if a.kind == "open" and a.key.case != "*"]) == 2
    # The same with two of main's own open (and kept: inconclusive, not compared): no room
    # is left but for what is already open.
    listing += [i for i in _listing() if i["number"] == 38]
    no_nospec_c4 = regressed.model_copy(update={
        "cases": [c for c in regressed.cases if c.case.id != "nospec-c4"]})
    listing += [i for i in _listing() if i["number"] == 37]
    actions = plan(no_nospec_c4, open_issues(listing), RunLinks(), branch="main", cap=2)
    assert [a.kind for a in actions if a.key.case != "*" and a.number is None] == []
    [summary] = [a for a in actions if a.key.case == "*"]
    assert summary.kind == "open" and "(2 open;" in (summary.body or "")


def test_a_rate_limit_pauses_and_the_rerun_continues_without_duplicates(
        tmp_path: Path, regressed: RunComparison, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cmp = _many(regressed, 4)  # 12 failing checks
    gh = GitHub()
    _env(monkeypatch, Replay())
    monkeypatch.setattr(cli_issues, "urllib_send", lambda token: gh)
    path = _write(tmp_path, cmp)
    gh.fail_after = 4
    assert main(["issues", str(path), "--cap", "10"]) == 12
    err = capsys.readouterr().err
    assert "paused by GitHub's rate limit after 4 change(s)" in err
    assert "the limit resets at 2026-01-01 00:00:00 UTC" in err
    state = json.loads((tmp_path / "issues-state.json").read_text(encoding="utf-8"))
    assert len(state["opened"]) == 4 and not state["finished"]
    # The limit is lifted: the rerun opens the other six under the cap and the summary,
    # and touches none of the four again (no update, no comment).
    gh.fail_after = None
    before = gh.writes
    assert main(["issues", str(path), "--cap", "10"]) == 0
    out = capsys.readouterr().out
    assert out.count("already done by an earlier attempt") == 4
    titles = [i["title"] for i in gh.created]
    assert len(titles) == len(set(titles)) == 10 + 1
    assert gh.writes - before == 6 + 1
    # A third run of the same comparison does nothing at all.
    before = gh.writes
    assert main(["issues", str(path), "--cap", "10"]) == 0
    assert gh.writes == before


def test_another_error_mid_way_writes_the_state_too(
        tmp_path: Path, regressed: RunComparison, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    gh = GitHub()
    gh.fail_after, gh.failure = 2, GitHub.SERVER_ERROR
    _env(monkeypatch, Replay())
    monkeypatch.setattr(cli_issues, "urllib_send", lambda token: gh)
    path = _write(tmp_path, regressed)
    assert main(["issues", str(path)]) == 2
    assert "GitHub answered 502: Server Error" in capsys.readouterr().err
    state = json.loads((tmp_path / "issues-state.json").read_text(encoding="utf-8"))
    assert len(state["done"]) == 2
    gh.fail_after = None
    assert main(["issues", str(path)]) == 0
    assert len(gh.created) == len(regressed.regressions)  # 3, none twice


def test_a_broken_state_file_is_bad_input(tmp_path: Path, regressed: RunComparison,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    _env(monkeypatch, GitHub())
    (tmp_path / "issues-state.json").write_text("{\"done\": 3}", encoding="utf-8")
    assert main(["issues", str(_write(tmp_path, regressed))]) == 2
    err = capsys.readouterr().err
    assert "issues-state.json: not a `specperf issues` state file" in err and "fix:" in err
    monkeypatch.setenv("SPECPERF_ISSUES_CAP", "ten")
    assert main(["issues", str(_write(tmp_path, regressed))]) == 2
    assert "SPECPERF_ISSUES_CAP='ten'" in capsys.readouterr().err
    monkeypatch.delenv("SPECPERF_ISSUES_CAP")
    assert main(["issues", str(_write(tmp_path, regressed)), "--cap", "-1"]) == 2
    assert "--cap -1: give 0 or more" in capsys.readouterr().err


@pytest.mark.parametrize("vllm", ["0.32.0", "0.33.0rc1"])
def test_another_branch_never_touches_mains_issues(
        tmp_path: Path, regressed: RunComparison, monkeypatch: pytest.MonkeyPatch,
        vllm: str) -> None:
    branch = "experiment"
    prov = regressed.run_provenance.model_copy(update={"vllm_version": vllm})
    other = regressed.model_copy(update={"run_provenance": prov})
    gh = GitHub(_listing())
    _env(monkeypatch, Replay())
    monkeypatch.setattr(cli_issues, "urllib_send", lambda token: gh)
    mains = {n: dict(i) for n, i in gh.issues.items()}
    assert main(["issues", str(_write(tmp_path, other)), "--branch", branch]) == 0
    # main's issues: not updated, not closed (37 would close, 41 update on main)...
    assert {n: gh.issues[n] for n in mains} == mains
    # ...and its own three regressions get their own issues, keyed by branch and vLLM.
    assert len(gh.created) == 3
    for item in gh.created:
        key = open_issues([item])[0].key
        assert (key.branch, key.vllm) == (branch, vllm)
        assert f"vLLM {vllm}, {branch})" in item["title"]


def _on_vllm(cmp: RunComparison, vllm: str | None) -> RunComparison:
    return cmp.model_copy(update={
        "run_provenance": cmp.run_provenance.model_copy(update={"vllm_version": vllm})})


def test_a_night_on_a_new_vllm_closes_the_old_versions_issues(
        tmp_path: Path, regressed: RunComparison, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # main's nightly moves from vLLM 0.32.0 to 0.33.0: 37, 38 and 41 (cpu-tiny, this
    # hardware, main, 0.32.0) would never be checked again. They are closed, saying so;
    # #39 (another profile and hardware) is not, nor a summary of another branch.
    [summary_exp] = [i for i in _listing() if i["number"] == 38]
    summary_exp = {**summary_exp, "number": 51, "body": summary_exp["body"].replace(
        '"branch":"main"', '"branch":"experiment"').replace(
        '"case":"nospec-c1","metric":"TPOT"', '"case":"*","metric":"*"')}
    gh = GitHub([*_listing(), summary_exp])
    _env(monkeypatch, Replay())
    monkeypatch.setattr(cli_issues, "urllib_send", lambda token: gh)
    # A dispatched run on another vLLM (no --close-superseded) closes none of main's...
    assert main(["issues", str(_write(tmp_path, _on_vllm(regressed, "0.33.0")))]) == 0
    assert all(gh.issues[n]["state"] == "open" for n in (37, 38))
    capsys.readouterr()
    gh = GitHub([*_listing(), summary_exp])
    monkeypatch.setattr(cli_issues, "urllib_send", lambda token: gh)
    # ...the scheduled nightly (the workflow passes the flag on a schedule only) does.
    assert main(["issues", str(_write(tmp_path, _on_vllm(regressed, "0.33.0"))),
                 "--close-superseded", "--state", str(tmp_path / "s2.json")]) == 0
    out = capsys.readouterr().out
    for n in (37, 38, 41):
        assert gh.issues[n]["state"] == "closed" and gh.issues[n]["state_reason"] == "not_planned"
        assert f"closed #{n}" in out
    for n in (39, 51):
        assert gh.issues[n]["state"] == "open"
    # The night's own regressions are filed under 0.33.0, the one still failing (41's)
    # among them; the closed ones do not count against the cap.
    assert len(gh.created) == 3
    assert all(open_issues([i])[0].key.vllm == "0.33.0" for i in gh.created)
    actions = plan(_on_vllm(regressed, "0.33.0"), open_issues(_listing()),
                   RunLinks(run=RUN_URL), branch="main", close_superseded=True)
    [close41] = [a for a in actions if a.number == 41]
    assert close41.kind == "close" and close41.state_reason == "not_planned"
    comment = close41.comment or ""
    assert "now runs vLLM 0.33.0 (this issue: vLLM 0.32.0)" in comment
    assert "filed under vLLM 0.33.0's key" in comment and f"[workflow run]({RUN_URL})" in comment


def test_a_new_vllm_closes_nothing_it_does_not_cover(regressed: RunComparison) -> None:
    listing = open_issues(_listing())
    new = _on_vllm(regressed, "0.33.0")
    # A refused comparison, one with no case compared, one whose branch or vLLM is not
    # known: nothing is closed for another version.
    for cmp, branch in ((new.model_copy(update={"refusals": ["other hardware"]}), "main"),
                        (new.model_copy(update={"cases": []}), "main"),
                        (new, None), (_on_vllm(regressed, None), "main")):
        assert not [a for a in plan(cmp, listing, RunLinks(), branch=branch,
                                    close_superseded=True)
                    if a.kind == "close" and a.state_reason == "not_planned"]
    # An issue keyed before the branch and vLLM were in the key stays too.
    [old] = [i for i in _listing() if i["number"] == 37]
    old = {**old, "body": old["body"].replace('"branch":"main","vllm":"0.32.0",', "")}
    [action] = [a for a in plan(new, open_issues([old]), RunLinks(), branch="main",
                                close_superseded=True) if a.number == 37]
    assert action.kind == "keep"


def test_an_issue_keyed_before_branch_and_vllm_is_kept(regressed: RunComparison) -> None:
    [old] = [i for i in _listing() if i["number"] == 37]
    old = {**old, "body": old["body"].replace('"branch":"main","vllm":"0.32.0",', "")}
    [action] = [a for a in plan(regressed, open_issues([old]), RunLinks(), branch="main")
                if a.number == 37]
    assert action.kind == "keep" and "filed before the branch and vLLM" in action.why


def test_hostile_text_in_a_comparison_reaches_no_issue_unescaped(
        regressed: RunComparison) -> None:
    [bad] = [c for c in regressed.cases if c.case.id == "self-k3-c1"]
    hostile = "@octocat fixes #1\n::add-mask::x <img src=x onerror=alert(1)>"
    cases = [bad.model_copy(update={
        "config_label": hostile,
        "comparisons": [m.model_copy(update={"reason": hostile}) for m in bad.comparisons]})]
    actions = plan(regressed.model_copy(update={"cases": cases}), [], RunLinks(),
                   branch="main")
    assert actions
    for a in actions:
        for text in (a.body or "", a.comment or ""):
            assert "@octocat" not in text and "#1\n" not in text and "#1 " not in text
            assert "\n::" not in text and not re.search(r"(?<!\\)<img", text)


def test_a_comparison_with_a_hostile_case_id_files_nothing(
        tmp_path: Path, regressed: RunComparison, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A case id holding ``-->`` (a hand-edited run file) would key an issue no later
    night reads back: refused with one line naming the field, before any request."""
    first = regressed.cases[0]
    bad = first.model_copy(update={"case": first.case.model_copy(
        update={"config_id": "nospec--><img src=x>@octocat"})})
    replay = Replay()
    _env(monkeypatch, replay)
    cmp = regressed.model_copy(update={"cases": [bad, *regressed.cases[1:]]})
    assert main(["issues", str(_write(tmp_path, cmp))]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "cases[0].case: 'nospec--><img src=x>@octocat-c" in err
    assert not replay.sent
