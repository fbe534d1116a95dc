"""scripts/download_models.py records the commit each model was fetched at: read off the
snapshot directory huggingface_hub returns, written atomically to its manifest, and the
same commit a run then reads from the hub cache (specperf.store.hf_cache)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from specperf.config.exits import Exit
from specperf.config.profile_file import load_profile
from specperf.store.hf_cache import HubModel, model_revisions
from tests.support import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "download_models.py"
PROFILE = "a100-qwen3-32b"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("download_models", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _commit(repo: str) -> str:
    return hashlib.sha1(repo.encode()).hexdigest()


def _hub_stand_in(cache: Path, moved: frozenset[str] = frozenset()):
    """What huggingface_hub's snapshot_download leaves for a branch, in its cache layout
    (snapshots/<commit>, refs/main naming it), and the commit HfApi.model_info names —
    in place of the hub, which a test never reaches. A repo in ``moved`` is named one
    commit by model_info and fetched at another (main moved between the two calls)."""
    def download(model: HubModel) -> tuple[Path, str]:
        root = cache / ("models--" + model.repo.replace("/", "--"))
        commit = model.revision or _commit(model.repo)
        snap = root / "snapshots" / commit
        snap.mkdir(parents=True)
        (snap / "config.json").write_text("{}")
        if model.revision is None:
            (root / "refs").mkdir()
            (root / "refs" / "main").write_text(commit)
        return snap, ("f" * 40 if model.repo in moved else commit)
    return download


def test_the_commits_fetched_are_recorded_and_are_what_a_run_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    mod = _script()
    cache = tmp_path / "hub"
    monkeypatch.setattr(mod, "download", _hub_stand_in(cache, moved=frozenset({"Qwen/Qwen3-0.6B"})))
    manifest = tmp_path / "out" / "models.json"
    assert mod.main(["--profile", PROFILE, "--manifest", str(manifest)]) == Exit.OK
    out = capsys.readouterr().out
    data = json.loads(manifest.read_text())
    profile = load_profile(PROFILE, rootdir=REPO_ROOT)
    assert data["manifest_version"] == 1 and data["profile"] == PROFILE
    assert data["profile_hash"] == profile.hash()
    records = {r["repo"]: r for r in data["models"]}
    assert set(records) == {"Qwen/Qwen3-32B", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"}
    for repo, r in records.items():
        assert r["asked"] == "main" and r["commit"] == _commit(repo)
        assert Path(r["snapshot"]) == cache / ("models--" + repo.replace("/", "--")) / \
            "snapshots" / r["commit"]
        assert f"download_models: {repo} -> {r['snapshot']} (commit {r['commit']})" in out
    assert "the hub named " + "f" * 40 + " for main, the snapshot fetched is" in out
    assert f"download_models: commits recorded in {manifest}" in out
    # The run's provenance reads the same commits from the cache the download filled.
    assert model_revisions(profile, cache) == {repo: r["commit"] for repo, r in records.items()}
    assert list(manifest.parent.iterdir()) == [manifest]  # no temp file left beside it


def test_a_failed_download_writes_no_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    mod = _script()

    def refused(model: HubModel) -> tuple[Path, str]:
        raise OSError("401 Client Error: gated repo")

    monkeypatch.setattr(mod, "download", refused)
    manifest = tmp_path / "models.json"
    assert mod.main(["--profile", PROFILE, "--manifest", str(manifest)]) == Exit.FETCH_FAILED
    assert "Qwen/Qwen3-32B: download failed: OSError: 401 Client Error" in capsys.readouterr().err
    assert not manifest.exists()
    # A directory that is not a snapshot is no commit: refused, not recorded as one.
    monkeypatch.setattr(mod, "download", lambda m: (tmp_path / "somewhere", None))
    assert mod.main(["--profile", PROFILE, "--manifest", str(manifest)]) == Exit.FETCH_FAILED
    assert "is not a hub cache snapshot" in capsys.readouterr().err and not manifest.exists()


def test_a_dry_run_and_a_profile_of_generated_models_write_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _script()
    manifest = tmp_path / "models.json"
    monkeypatch.setattr(mod, "download", _hub_stand_in(tmp_path / "hub"))
    assert mod.main(["--profile", PROFILE, "--dry-run", "--manifest", str(manifest)]) == Exit.OK
    assert mod.main(["--profile", "cpu-tiny", "--manifest", str(manifest)]) == Exit.OK
    assert not manifest.exists() and not (tmp_path / "hub").exists()


def test_the_default_manifest_is_beside_the_hub_cache() -> None:
    from huggingface_hub import constants

    mod = _script()
    profile = load_profile(PROFILE, rootdir=REPO_ROOT)
    assert mod.default_manifest(profile) == (
        Path(constants.HF_HUB_CACHE).parent / "specperf-models" / f"{PROFILE}.json")
