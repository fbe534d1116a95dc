"""The nightly lookup against a local stand-in of GitHub's REST API (tests.support.NightlyAPI:
recorded-shape answers, zips built here; no network)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from specperf.store.github_artifacts import GitHubError, fetch_nightlies
from specperf.store.kept_runs import read_kept_runs
from tests.support import NIGHTLIES, NightlyAPI, load_run


@pytest.fixture
def api(tmp_path: Path) -> Iterator[NightlyAPI]:
    server = NightlyAPI(tmp_path)
    yield server
    server.close()


def _fetch(api: NightlyAPI, out: Path, **kw: object) -> list:
    args: dict[str, object] = dict(token="ghs_readonly", limit=10, api_url=api.url)
    args.update(kw)
    return fetch_nightlies(api.REPO, "nightly-perf.yml", "perf-merged", out, **args)  # type: ignore[arg-type]


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
        ["nightly.json", "run.json"] * 3 + [f.path.parent.name for f in got])
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
