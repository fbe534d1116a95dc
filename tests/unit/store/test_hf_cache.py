"""The hub cache as huggingface_hub lays it out (models--org--name/refs/main,
snapshots/<commit>/config.json), built for real in tmp_path: which commit each model of a
profile is served at, and what a run's provenance carries of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specperf.config.profile_file import load_profile
from specperf.schemas import Provenance
from specperf.schemas.records import UNKNOWN_REVISION
from specperf.store.hf_cache import (
    cached_commit,
    cached_config,
    hub_models,
    model_revisions,
    snapshot_dir,
)
from specperf.store.provenance import collect_provenance
from tests.support import CPU_CI_PROFILE, REPO_ROOT

MAIN = "a" * 40
OLDER = "b" * 40
PINNED = "c" * 40


def cache_model(cache: Path, repo: str, commit: str, *, ref: str | None = "main",
                config: dict[str, object] | None = None) -> Path:
    """One model in the hub cache at ``commit``, with ``refs/<ref>`` naming it (as
    snapshot_download of a branch leaves it; None: as a download of a commit does)."""
    root = cache / ("models--" + repo.replace("/", "--"))
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config or {"max_position_embeddings": 4096}))
    if ref is not None:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / ref).write_text(commit)  # huggingface_hub writes no newline
    return snap


def write_profile(tmp_path: Path, *, revision: str | None = None,
                  draft_revision: str | None = None, tokenizer: str | None = None) -> Path:
    spec = '{ method = "draft_model", model = "org/draft", num_speculative_tokens = 2'
    spec += f', revision = "{draft_revision}" }}' if draft_revision else " }"
    args = f'serve_args = ["--tokenizer", "{tokenizer}"]\n' if tokenizer else ""
    pin = f'revision = "{revision}"\n' if revision else ""
    path = tmp_path / "hub.toml"
    path.write_text(
        f'name = "hub"\ntarget = "org/target"\n{pin}{args}concurrencies = [1]\n'
        '[[server_configs]]\nid = "nospec"\n'
        f'[[server_configs]]\nid = "draft-k2"\nspeculative_config = {spec}\n')
    return path


def test_an_unpinned_model_is_served_at_what_refs_main_names(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    cache_model(cache, "org/target", OLDER, ref=None)  # an older snapshot stays in the cache
    root = cache / "models--org--target"
    (root / "snapshots" / MAIN).mkdir()
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(MAIN + "\n")  # a newline, as an editor leaves it
    assert cached_commit("org/target", None, cache) == MAIN
    assert cached_commit("org/target", "main", cache) == MAIN
    assert snapshot_dir("org/target", None, cache) == root / "snapshots" / MAIN
    # A commit is itself where its snapshot is there, else the cache cannot say.
    assert cached_commit("org/target", OLDER, cache) == OLDER
    assert cached_commit("org/target", PINNED, cache) is None
    # Nothing of the model, a tag never fetched, a ref that is not a commit, no cache.
    assert cached_commit("org/other", None, cache) is None
    assert cached_commit("org/target", "v1.0", cache) is None
    (root / "refs" / "broken").write_text("not-a-commit")
    assert cached_commit("org/target", "broken", cache) is None
    assert cached_commit("org/target", "../../etc", cache) is None
    assert cached_commit("org/target", None, None) is None


def test_each_model_of_a_profile_is_served_at_its_pin_else_the_cache_else_unknown(
        tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    cache_model(cache, "org/target", MAIN)
    cache_model(cache, "org/tok", OLDER)
    profile = load_profile(write_profile(tmp_path, draft_revision=PINNED, tokenizer="org/tok"))
    assert [(m.repo, m.revision) for m in hub_models(profile)] == [
        ("org/target", None), ("org/draft", PINNED), ("org/tok", None)]
    # The draft's pin is its revision whether or not the cache holds it yet.
    assert model_revisions(profile, cache) == {
        "org/target": MAIN, "org/draft": PINNED, "org/tok": OLDER}
    unpinned = load_profile(write_profile(tmp_path))
    assert model_revisions(unpinned, cache) == {"org/target": MAIN,
                                                "org/draft": UNKNOWN_REVISION}
    pinned = load_profile(write_profile(tmp_path, revision=PINNED))
    assert model_revisions(pinned, cache)["org/target"] == PINNED


def test_generated_and_local_models_have_no_hub_revision(tmp_path: Path) -> None:
    assert model_revisions(load_profile(CPU_CI_PROFILE), tmp_path) == {}
    local = tmp_path / "my-model"
    local.mkdir()
    (local / "config.json").write_text('{"max_position_embeddings": 512}')
    path = tmp_path / "local.toml"
    path.write_text(f'name = "local"\ntarget = "{local}"\nconcurrencies = [1]\n'
                    '[[server_configs]]\nid = "nospec"\n')
    profile = load_profile(path)
    assert hub_models(profile) == [] and model_revisions(profile, tmp_path) == {}
    assert cached_config(str(local), None, tmp_path) == {"max_position_embeddings": 512}


def test_cached_config_reads_the_resolved_snapshot(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    cache_model(cache, "org/target", MAIN, config={"max_position_embeddings": 40960})
    assert cached_config("org/target", None, cache) == {"max_position_embeddings": 40960}
    assert cached_config("org/target", PINNED, cache) is None
    (snapshot_dir("org/target", None, cache) / "config.json").write_text("[1, 2]")  # type: ignore[operator]
    assert cached_config("org/target", None, cache) is None


def test_a_runs_provenance_carries_the_revisions_from_this_environments_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "hf" / "hub"
    cache_model(cache, "org/target", MAIN)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    prov = collect_provenance(load_profile(write_profile(tmp_path)), vllm_version="0.32.0",
                              cwd=REPO_ROOT)
    assert prov.model_revisions == {"org/target": MAIN, "org/draft": UNKNOWN_REVISION}
    again = Provenance.model_validate_json(prov.model_dump_json())
    assert again.model_revisions == prov.model_revisions


def test_a_provenance_without_hub_models_is_written_as_before(tmp_path: Path) -> None:
    prov = collect_provenance(load_profile(CPU_CI_PROFILE), vllm_version="0.32.0",
                              cwd=REPO_ROOT)
    assert prov.model_revisions == {}
    data = json.loads(prov.model_dump_json())
    assert "model_revisions" not in data  # files of tiny-model runs stay byte-identical
    # ... and an older file, which has no such key, loads as "not recorded".
    assert Provenance.model_validate(data).model_revisions == {}


def test_the_hub_cache_is_found_by_huggingface_hubs_rule(tmp_path: Path) -> None:
    from specperf.store.hf_cache import hub_cache_dir

    both = {"HF_HUB_CACHE": str(tmp_path / "a"), "HUGGINGFACE_HUB_CACHE": str(tmp_path / "old")}
    assert hub_cache_dir(both) == tmp_path / "a"
    assert hub_cache_dir({"HUGGINGFACE_HUB_CACHE": str(tmp_path / "old"),
                          "HF_HOME": str(tmp_path / "h")}) == tmp_path / "old"
    assert hub_cache_dir({"HF_HOME": str(tmp_path / "h")}) == tmp_path / "h" / "hub"
