"""vLLM's compile cache kept between runs (specperf.engine.compile_cache): keyed by vLLM
version, torch version and server config, outside the run directory, off with
SPECPERF_COMPILE_CACHE=0."""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.config import settings
from specperf.config.profile_file import load_profile
from specperf.engine import server
from specperf.engine.compile_cache import compile_cache_dir, server_key, share_model_info
from specperf.engine.servers import ServerPool
from tests.support import CPU_CI_PROFILE

PROFILE = load_profile(CPU_CI_PROFILE)


def test_the_key_is_vllm_torch_and_what_the_server_is_started_with(tmp_path: Path) -> None:
    cfg = PROFILE.config("draft-k2")
    here = compile_cache_dir(tmp_path, PROFILE, cfg, vllm_version="0.32.0", torch_version="2.13.0")
    assert here.parent == tmp_path / "compile"
    assert here.name == f"vllm-0.32.0-torch-2.13.0-{server_key(PROFILE, cfg)}"
    assert compile_cache_dir(tmp_path, PROFILE, cfg, vllm_version="0.31.0",
                             torch_version="2.13.0") != here
    assert compile_cache_dir(tmp_path, PROFILE, cfg, vllm_version="0.32.0",
                             torch_version="2.12.0") != here
    # Another config, another argument: another key. The workload, gates and labels are
    # not what a server is started with: the same key.
    assert server_key(PROFILE, PROFILE.config("nospec")) != server_key(PROFILE, cfg)
    more_args = PROFILE.model_copy(update={"serve_args": [*PROFILE.serve_args, "--max-num-seqs", "8"]})
    assert server_key(more_args, cfg) != server_key(PROFILE, cfg)
    relabelled = cfg.model_copy(update={"label": "renamed", "gates": None})
    fewer_repeats = PROFILE.model_copy(update={"repeats": PROFILE.repeats + 1})
    assert server_key(fewer_repeats, relabelled) == server_key(PROFILE, cfg)


def test_servers_keep_it_outside_the_run_dir_unless_turned_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SPECPERF_CACHE_DIR", str(tmp_path / "cache-root"))
    monkeypatch.delenv("SPECPERF_COMPILE_CACHE", raising=False)
    run_dir = tmp_path / "run"
    said: list[str] = []
    pool = ServerPool(profile=PROFILE, run_dir=run_dir, models_cache=tmp_path / "models",
                      say=said.append)
    kept = pool._compile_cache("draft-k2")
    assert kept == compile_cache_dir(tmp_path / "cache-root", PROFILE, PROFILE.config("draft-k2"))
    assert any("SPECPERF_COMPILE_CACHE=0" in m for m in said)
    env = server.run_env(run_dir, {}, offline=True, compile_cache=kept)
    assert env["VLLM_CACHE_ROOT"] == str(kept / "vllm") and Path(env["VLLM_CACHE_ROOT"]).is_dir()
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(kept / "inductor")
    assert env["TMPDIR"] == str(server.server_tmpdir(run_dir))  # the run's, not the cache's

    monkeypatch.setenv("SPECPERF_COMPILE_CACHE", "0")
    assert pool._compile_cache("draft-k2") is None
    env = server.run_env(run_dir, {}, offline=True, compile_cache=None)
    assert env["VLLM_CACHE_ROOT"].startswith(str(run_dir))


def test_every_config_of_one_vllm_shares_vllms_model_info(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's modelinfos/ (what it learns by importing a model class in a subprocess, keyed
    by that source file's hash) is one directory per vLLM version under the cache root,
    linked from every config's compile cache: a config's first start does not pay it again."""
    monkeypatch.setenv("SPECPERF_CACHE_DIR", str(tmp_path / "cache-root"))
    monkeypatch.delenv("SPECPERF_COMPILE_CACHE", raising=False)
    pool = ServerPool(profile=PROFILE, run_dir=tmp_path / "run", models_cache=tmp_path / "m",
                      say=lambda _: None)
    draft, nospec = pool._compile_cache("draft-k2"), pool._compile_cache("nospec")
    assert draft is not None and nospec is not None and draft != nospec
    shared = share_model_info(tmp_path / "elsewhere", tmp_path / "cache-root")
    assert shared.parent == tmp_path / "cache-root" / "modelinfos"
    for kept in (draft, nospec):
        link = kept / "vllm" / "modelinfos"
        assert link.is_symlink() and link.resolve() == shared.resolve()
    # What one config's server writes there, the other's reads.
    (draft / "vllm" / "modelinfos" / "entry.json").write_text("{}")
    assert (nospec / "vllm" / "modelinfos" / "entry.json").read_text() == "{}"
    # Another vLLM, another directory; a cache kept as a plain directory stays as it was.
    assert share_model_info(tmp_path / "x", tmp_path / "cache-root",
                            vllm_version="0.31.0") != shared
    own = tmp_path / "old" / "modelinfos"
    own.mkdir(parents=True)
    share_model_info(tmp_path / "old", tmp_path / "cache-root")
    assert own.is_dir() and not own.is_symlink()
    # Off, nothing is shared: the run directory's cache, cold.
    monkeypatch.setenv("SPECPERF_COMPILE_CACHE", "0")
    assert pool._compile_cache("draft-k2") is None


def test_a_bad_switch_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPERF_COMPILE_CACHE", "sometimes")
    with pytest.raises(settings.SettingsError, match="SPECPERF_COMPILE_CACHE='sometimes'"):
        settings.current()


def test_the_cache_root_defaults_to_the_users_cache(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.delenv("SPECPERF_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert settings.current().cache_root() == tmp_path / "specperf"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert settings.current().cache_root() == tmp_path / "home" / ".cache" / "specperf"
