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

from specperf.analysis.compare import RunComparison, compare_runs
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


def _many(regressed: RunComparison, n_cases: int) -> RunComparison:
    """The regressed case copied under ``n_cases`` names: 3 failing checks each."""
    [bad] = [c for c in regressed.cases if c.case.id == "self-k3-c1"]
    copies = [bad.model_copy(update={"case": bad.case.model_copy(
        update={"config_id": f"self-k3-copy{i}"})}) for i in range(n_cases)]
    return regressed.model_copy(update={"cases": copies})


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
    # updated, three more opened, the summary updated — not a second one.
    gh.created.clear()
    (tmp_path / "issues-state.json").unlink()
    assert main(["issues", str(_write(tmp_path, cmp)), "--cap", "3"]) == 0
    assert len(gh.created) == 3
    assert not any("past the issue cap" in i["title"] for i in gh.created)
    assert f"{left - 3} more confirmed regressions" in gh.issues[summary["number"]]["body"]


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


@pytest.mark.parametrize(("branch", "vllm"), [("experiment", "0.32.0"), ("main", "0.33.0rc1")])
def test_another_branch_or_vllm_never_touches_mains_issues(
        tmp_path: Path, regressed: RunComparison, monkeypatch: pytest.MonkeyPatch,
        branch: str, vllm: str) -> None:
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
