"""The nightly lookup against a local stand-in of GitHub's REST API (tests.support.NightlyAPI:
recorded-shape answers, zips built here; no network)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from specperf.store.github_artifacts import (
    Fetched,
    GitHubError,
    Nightlies,
    fetch_nightlies,
)
from specperf.store.kept_runs import read_kept_runs
from tests.support import NIGHTLIES, NightlyAPI, load_run


@pytest.fixture
def api(tmp_path: Path) -> Iterator[NightlyAPI]:
    server = NightlyAPI(tmp_path)
    yield server
    server.close()


def _found(api: NightlyAPI, out: Path, workflow: str = "nightly-perf.yml",
           **kw: object) -> Nightlies:
    args: dict[str, object] = dict(token="ghs_readonly", limit=10, api_url=api.url)
    args.update(kw)
    return fetch_nightlies(api.REPO, workflow, "perf-merged", out, **args)  # type: ignore[arg-type]


def _fetch(api: NightlyAPI, out: Path, **kw: object) -> list[Fetched]:
    """The kept run files only (the trusted nightlies)."""
    return _found(api, out, **kw).kept


def test_fetches_the_successful_nightlies_newest_first(api: NightlyAPI, tmp_path: Path) -> None:
    ids = [api.add(p) for p in NIGHTLIES[:3]]
    failed = api.add(NIGHTLIES[6], conclusion="failure")
    out = tmp_path / "kept"
    got = _fetch(api, out)
    assert [f.run_id for f in got] == ids[::-1]
    assert failed not in {f.run_id for f in got}
    for f, night in zip(got, NIGHTLIES[2::-1], strict=True):
        assert f.path.read_text(encoding="utf-8") == night.read_text(encoding="utf-8")
        meta = json.loads((f.path.parent / "nightly.json").read_text())
        assert meta["run_id"] == f.run_id and meta["html_url"].endswith(str(f.run_id))
    # Only run.json is taken from the artifact: the comparison and report are not.
    assert sorted(p.name for p in out.rglob("*")) == sorted(
        ["nightly.json", "run.json"] * 3 + [f.path.parent.name for f in got] + ["nightlies.json"])
    # What the kept-run reader makes of the directory: the three runs, oldest first.
    dates = [k.result.provenance.date for k in read_kept_runs(out)]
    assert dates == [load_run(p).provenance.date for p in NIGHTLIES[:3]]


def test_the_token_goes_to_the_api_only(api: NightlyAPI, tmp_path: Path) -> None:
    api.add(NIGHTLIES[0])
    _fetch(api, tmp_path / "kept")
    auth = {path.split("?")[0]: header for path, header in api.requests}
    api_paths = [p for p in auth if p.startswith("/repos/")]
    assert api_paths and all(auth[p] == "Bearer ghs_readonly" for p in api_paths)
    storage = [p for p in auth if p.startswith("/storage/")]
    assert storage and all(auth[p] is None for p in storage), api.requests


def test_leaves_out_the_run_asking_and_keeps_what_it_has(api: NightlyAPI, tmp_path: Path) -> None:
    first, second = api.add(NIGHTLIES[0]), api.add(NIGHTLIES[1])
    out = tmp_path / "kept"
    got = _fetch(api, out, exclude_run_id=second)
    assert [f.run_id for f in got] == [first] and not got[0].cached
    downloads = sum(p.startswith("/storage/") for p, _ in api.requests)
    again = _fetch(api, out, exclude_run_id=second)
    assert [f.cached for f in again] == [True]
    assert sum(p.startswith("/storage/") for p, _ in api.requests) == downloads


def test_limit_and_paging(api: NightlyAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specperf.store import github_artifacts

    monkeypatch.setattr(github_artifacts, "_PER_PAGE", 2)
    ids = [api.add(NIGHTLIES[i % 3]) for i in range(5)]
    got = _fetch(api, tmp_path / "kept", limit=4)
    assert [f.run_id for f in got] == ids[::-1][:4]
    pages = {p.split("page=")[-1] for p, _ in api.requests if "/workflows/" in p}
    assert pages == {"1", "2"}


def test_a_run_that_did_not_succeed_is_never_fetched(tmp_path: Path) -> None:
    """Even when the API ignores ?status=success (an older or proxied one)."""
    api = NightlyAPI(tmp_path, honour_status=False)
    try:
        ok = api.add(NIGHTLIES[0])
        api.add(NIGHTLIES[6], conclusion="failure")
        api.add(NIGHTLIES[1], conclusion="cancelled")
        assert [f.run_id for f in _fetch(api, tmp_path / "kept")] == [ok]
    finally:
        api.close()


def test_refused_access_names_the_permission(api: NightlyAPI, tmp_path: Path) -> None:
    api.add(NIGHTLIES[0])
    api.fail_with = 403
    with pytest.raises(GitHubError, match=r"HTTP 403 .*actions: read"):
        _fetch(api, tmp_path / "kept")
    assert not any((tmp_path / "kept").iterdir())


def test_an_artifact_without_run_json_is_an_error(api: NightlyAPI, tmp_path: Path) -> None:
    import io
    import zipfile

    run_id = api.add(NIGHTLIES[0])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("../run.json", "{}")  # never extracted to a path of its own choosing
    api.zips[run_id] = buf.getvalue()
    with pytest.raises(GitHubError, match="no top-level run.json"):
        _fetch(api, tmp_path / "kept")
    assert not (tmp_path / "run.json").exists()


#: A forged nightly (what the workflow run says of itself, as the API answers it) and the
#: reason it is refused for. Each is a successful run of nightly-perf.yml uploading a
#: valid run file of the same profile and hardware: only its origin differs.
FORGED = [
    pytest.param(dict(event="pull_request"),
                 "event 'pull_request', not schedule or workflow_dispatch on main",
                 id="pull-request"),
    pytest.param(dict(event="push"),
                 "event 'push', not schedule or workflow_dispatch on main", id="push"),
    pytest.param(dict(event="workflow_dispatch", head_branch="experiment"),
                 "branch 'experiment', not the default branch main", id="dispatch-on-a-branch"),
    pytest.param(dict(head_repository="mallory/specperf"),
                 "head repository 'mallory/specperf', not octo-org/specperf (a fork",
                 id="fork"),
    pytest.param(dict(path=".github/workflows/forged.yml"),
                 "workflow '.github/workflows/forged.yml', not .github/workflows/nightly-perf.yml",
                 id="other-workflow-file"),
    pytest.param(dict(head_sha="0" * 40),
                 "its run.json's provenance.git_commit 'f8c52a2a4b22743008ba5351c4ec1d13eb1287d1' "
                 f"is not the run's head_sha '{'0' * 40}'", id="mismatched-commit"),
]


@pytest.mark.parametrize("forged, reason", FORGED)
def test_a_forged_nightly_is_refused_with_its_reason(api: NightlyAPI, tmp_path: Path,
                                                     forged: dict[str, str], reason: str) -> None:
    trusted = api.add(NIGHTLIES[0])
    bad = api.add(NIGHTLIES[1], **forged)
    out = tmp_path / "kept"
    found = _found(api, out)
    assert [f.run_id for f in found.kept] == [trusted]
    assert [r.run_id for r in found.refused] == [bad] and not found.skipped
    (said,) = found.refused[0].reasons
    assert said.startswith(reason), said
    assert str(found.refused[0]).startswith(f"run {bad}: ")
    # Nothing of it is in the directory: the kept-run reader sees the trusted one only.
    assert not any(str(bad) in p.name for p in out.rglob("*"))
    assert [k.result.provenance.date for k in read_kept_runs(out)] == [
        load_run(NIGHTLIES[0]).provenance.date]
    if "head_sha" not in forged:  # refused on the API's word: its artifact never downloaded
        assert not any(p.startswith(f"/storage/{bad}") for p, _ in api.requests)
    record = json.loads((out / "nightlies.json").read_text())
    assert [r["run_id"] for r in record["kept"]] == [trusted]
    assert record["refused"] == [{"run_id": bad, "run_number": 2,
                                  "html_url": found.refused[0].html_url,
                                  "reasons": list(found.refused[0].reasons)}]


def test_a_dispatch_on_the_default_branch_is_kept(api: NightlyAPI, tmp_path: Path) -> None:
    scheduled = api.add(NIGHTLIES[0])
    by_hand = api.add(NIGHTLIES[1], event="workflow_dispatch")
    found = _found(api, tmp_path / "kept")
    assert [f.run_id for f in found.kept] == [by_hand, scheduled] and not found.refused


def test_every_failed_check_is_named(api: NightlyAPI, tmp_path: Path) -> None:
    """A fork's pull request that adds a trigger to a copy of the workflow: four reasons."""
    bad = api.add(NIGHTLIES[0], event="pull_request", head_branch="patch-1",
                  head_repository="mallory/specperf", path=".github/workflows/perf.yml")
    found = _found(api, tmp_path / "kept")
    assert not found.kept
    (refused,) = found.refused
    assert refused.run_id == bad and len(refused.reasons) == 4
    assert [r.split(" ")[0] for r in refused.reasons] == ["event", "branch", "head", "workflow"]


def test_the_apis_text_is_quoted_in_a_reason(api: NightlyAPI, tmp_path: Path) -> None:
    """A branch name is anyone's text and reaches CI logs: shown as a quoted literal, on
    one line, bounded — never a line of its own (``::`` would be a workflow command)."""
    api.add(NIGHTLIES[0], event="workflow_dispatch", head_branch="x\n::error::" + "y" * 200)
    (refused,) = _found(api, tmp_path / "kept").refused
    (reason,) = refused.reasons
    assert "\n" not in reason and "'x\\n::error::" in reason and len(reason) < 160


def test_a_refused_runs_earlier_copy_is_removed(api: NightlyAPI, tmp_path: Path) -> None:
    """A directory kept between fetches (a self-hosted runner's, or one filled before runs
    were checked) loses the copies of runs now refused: its reader would pool them."""
    out = tmp_path / "kept"
    forged = api.add(NIGHTLIES[0], event="pull_request")
    wrong_commit = api.add(NIGHTLIES[1])
    trusted = api.add(NIGHTLIES[2])
    for number, run_id, night in ((1, forged, 0), (2, wrong_commit, 1)):
        earlier = out / f"nightly-{number}-{run_id}"
        earlier.mkdir(parents=True)
        text = NIGHTLIES[night].read_text(encoding="utf-8")
        if run_id == wrong_commit:  # a copy that is not what the run checked out
            text = text.replace("f8c52a2a4b22743008ba5351c4ec1d13eb1287d1", "1" * 40)
        (earlier / "run.json").write_text(text, encoding="utf-8")
        (earlier / "nightly.json").write_text("{}")
    found = _found(api, out)
    assert [f.run_id for f in found.kept] == [trusted]
    assert sorted(r.run_id for r in found.refused) == [forged, wrong_commit]
    assert "1111111111" in next(r for r in found.refused if r.run_id == wrong_commit).reasons[0]
    assert [k.label for k in read_kept_runs(out)] == [str(found.kept[0].path)]


def test_a_run_file_without_a_commit_is_refused(api: NightlyAPI, tmp_path: Path) -> None:
    data = json.loads(NIGHTLIES[0].read_text(encoding="utf-8"))
    data["provenance"].pop("git_commit")
    night = tmp_path / "no-commit.json"
    night.write_text(json.dumps(data), encoding="utf-8")
    api.add(night)
    (refused,) = _found(api, tmp_path / "kept").refused
    assert refused.reasons == ("its run.json's provenance.git_commit is None, not the run's "
                               "head_sha 'f8c52a2a4b22743008ba5351c4ec1d13eb1287d1'",)


def test_a_workflow_given_by_id_is_checked_by_its_file(api: NightlyAPI, tmp_path: Path) -> None:
    trusted = api.add(NIGHTLIES[0])
    other = api.add(NIGHTLIES[1], path=".github/workflows/forged.yml")
    found = _found(api, tmp_path / "kept", workflow="159038")
    assert [f.run_id for f in found.kept] == [trusted]
    assert [r.run_id for r in found.refused] == [other]
    assert any(p == f"/repos/{api.REPO}/actions/workflows/159038" for p, _ in api.requests)


def _night_at(tmp_path: Path, commit: str) -> Path:
    """NIGHTLIES[1] as a run made at ``commit`` (its provenance names that commit)."""
    text = NIGHTLIES[1].read_text(encoding="utf-8").replace(
        "f8c52a2a4b22743008ba5351c4ec1d13eb1287d1", commit)
    night = tmp_path / f"night-at-{commit[:7]}.json"
    night.write_text(text, encoding="utf-8")
    return night


@pytest.mark.parametrize("status", ["ahead", "diverged", 404])
def test_a_tag_named_like_the_default_branch_is_refused(
        api: NightlyAPI, tmp_path: Path, status: str | int) -> None:
    """`refs/tags/main` pushed at an unreviewed commit and the nightly dispatched on it:
    the API reports head_branch "main", and event, repository, workflow file and commit
    all match. Only the commit's place tells: not in the default branch's history
    (compare main...sha is ahead or diverged, or no such commit), so refused — before
    its artifact is downloaded — and an earlier copy of it is removed."""
    trusted = api.add(NIGHTLIES[0])
    unreviewed = "abad1dea" * 5
    api.commit_status[unreviewed] = status
    tag = api.add(_night_at(tmp_path, unreviewed), event="workflow_dispatch",
                  head_branch="main", head_sha=unreviewed)
    out = tmp_path / "kept"
    earlier = out / f"nightly-2-{tag}" / "run.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text(_night_at(tmp_path, unreviewed).read_text(encoding="utf-8"))
    found = _found(api, out)
    assert [f.run_id for f in found.kept] == [trusted]
    (refused,) = found.refused
    assert refused.run_id == tag
    (reason,) = refused.reasons
    assert reason.startswith(f"commit '{unreviewed}' is not in the history of main"), reason
    assert not any(p.startswith(f"/storage/{tag}") for p, _ in api.requests)
    assert not earlier.exists()
    compares = [p for p, _ in api.requests if "/compare/" in p]
    assert compares == [f"/repos/{api.REPO}/compare/main...{unreviewed}",
                        f"/repos/{api.REPO}/compare/main...f8c52a2a4b22743008ba5351c4ec1d13eb1287d1"]


def test_a_commit_identical_to_or_behind_the_default_branch_is_kept(
        api: NightlyAPI, tmp_path: Path) -> None:
    head = "c0ffee00" * 5
    api.commit_status[head] = "identical"
    older = api.add(NIGHTLIES[0])  # "behind": an older commit of main
    at_head = api.add(_night_at(tmp_path, head), head_sha=head)
    found = _found(api, tmp_path / "kept")
    assert [f.run_id for f in found.kept] == [at_head, older] and not found.refused


def test_a_head_sha_that_is_not_a_commit_id_is_refused_unasked(
        api: NightlyAPI, tmp_path: Path) -> None:
    """A head_sha that is not 40 hex digits never reaches the compare URL (where
    ``main...x/../../y`` would ask another endpoint)."""
    bad = api.add(NIGHTLIES[0], head_sha="../../../user")
    (refused,) = _found(api, tmp_path / "kept").refused
    assert refused.run_id == bad and refused.reasons[0].startswith("head_sha '../../../user'")
    assert not any("/compare/" in p for p, _ in api.requests)


@pytest.mark.parametrize("url", ["http://api.example.com", "http://10.0.0.1:8080",
                                 "file:///etc", "ftp://api.github.com"])
def test_the_token_is_never_sent_over_plain_http(tmp_path: Path, url: str) -> None:
    """Plain http only to a server on this machine's loopback (the tests' stand-in)."""
    sent: list[object] = []

    def opener(req: object, timeout: float) -> object:
        sent.append(req)
        raise AssertionError("no request may be made")

    with pytest.raises(GitHubError, match=r"not an https URL"):
        fetch_nightlies("octo-org/specperf", "nightly-perf.yml", "perf-merged",
                        tmp_path / "kept", token="ghs_secret", limit=1, api_url=url,
                        opener=opener)
    assert not sent


def test_an_artifact_larger_than_it_says_is_not_read_past_its_size(
        api: NightlyAPI, tmp_path: Path) -> None:
    run_id = api.add(NIGHTLIES[0])
    api.declared_size[run_id] = 100  # the zip is larger: the download stops there
    with pytest.raises(GitHubError, match=r"more than the artifact's size_in_bytes 100"):
        _fetch(api, tmp_path / "kept")
    assert not list((tmp_path / "kept").rglob("run.json"))


def test_an_artifact_over_the_absolute_cap_is_never_downloaded(
        api: NightlyAPI, tmp_path: Path) -> None:
    from specperf.store.github_artifacts import MAX_ARTIFACT_BYTES

    trusted = api.add(NIGHTLIES[0])
    huge = api.add(NIGHTLIES[1])
    api.declared_size[huge] = MAX_ARTIFACT_BYTES + 1
    found = _found(api, tmp_path / "kept")
    assert [f.run_id for f in found.kept] == [trusted]
    (skipped,) = found.skipped
    assert skipped.run_id == huge and "size_in_bytes" in skipped.reasons[0]
    assert not any(p.startswith(f"/storage/{huge}") for p, _ in api.requests)
