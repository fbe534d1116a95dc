"""Tests of the vocabulary preflight with real tiny generated models (no wall-clock asserts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specperf.config.tiny_models import TinyDraftSpec, TinyModelsSpec, TinyTargetSpec
from specperf.engine.preflight import (
    VocabReport,
    check_vocabularies,
    hub_cache_dir,
    load_vocab,
    preflight_spec,
    wants_vocab_check,
)
from specperf.engine.tiny import materialise
from tests.support import need_module

SPEC = TinyModelsSpec(
    tokenizer_seed=0,
    target=TinyTargetSpec(
        layers=1, hidden=64, heads=2, intermediate=128, vocab_size=512,
        max_position_embeddings=256,
    ),
    drafts={
        "same": TinyDraftSpec(layers=1),
        "alien": TinyDraftSpec(layers=1, tokenizer_seed=7),
    },
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    need_module("torch")
    need_module("tokenizers")
    return materialise(SPEC, tmp_path_factory.mktemp("tiny-preflight"))


def test_same_tokenizer_passes(models: dict[str, Path]) -> None:
    r = check_vocabularies(str(models["target"]), str(models["same"]))
    assert r.ok is True
    assert r.target_size == r.draft_size == 512
    assert r.shared_same_id == 512 and r.overlap == 1.0
    assert r.examples == []
    assert str(models["target"]) in r.message and str(models["same"]) in r.message
    assert "passed" in r.message and "100.0 %" in r.message
    assert r.target_source is not None and r.target_source.endswith("tokenizer.json")
    assert r.seconds >= 0


def test_different_tokenizer_is_refused_with_the_overlap(models: dict[str, Path]) -> None:
    r = check_vocabularies(str(models["target"]), str(models["alien"]))
    assert r.ok is False
    assert r.target_size == r.draft_size == 512
    assert r.shared_same_id is not None and r.overlap is not None
    # the byte alphabet and special tokens line up; merges trained on another language don't
    assert 0.3 < r.overlap < 0.99
    assert r.overlap == pytest.approx(r.shared_same_id / 512)
    assert r.shared_strings is not None and r.shared_strings >= r.shared_same_id
    assert f"{r.overlap * 100:.1f} %" in r.message
    assert str(models["target"]) in r.message and str(models["alien"]) in r.message
    assert "512 vs 512 tokens" in r.message
    assert "vocabulary mismatch" in r.message and "Refusing" in r.message
    assert "Rough model" in r.message
    assert r.examples and "draft id" in r.examples[0]
    assert r.acceptance_estimate is None


def test_acceptance_estimate(models: dict[str, Path]) -> None:
    r = check_vocabularies(str(models["target"]), str(models["alien"]), acceptance=0.8)
    assert r.overlap is not None
    assert r.acceptance_estimate == pytest.approx(0.8 * r.overlap)
    assert f"0.80 × {r.overlap:.2f} = {0.8 * r.overlap:.2f}" in r.message


def test_min_overlap_is_the_threshold(models: dict[str, Path]) -> None:
    r = check_vocabularies(str(models["target"]), str(models["alien"]), min_overlap=0.3)
    assert r.ok is True
    with pytest.raises(ValueError):
        check_vocabularies(str(models["target"]), str(models["same"]), min_overlap=1.5)


def test_unloadable_tokenizer_does_not_block(models: dict[str, Path], tmp_path: Path) -> None:
    # A hub id that is not in the (empty) cache: reported, not refused, and no network.
    r = check_vocabularies(
        "example-org/not-cached-model", str(models["same"]), cache_dir=tmp_path / "hub"
    )
    assert r.ok is None
    assert r.reason is not None and "example-org/not-cached-model" in r.reason
    assert "not in the local Hugging Face cache" in r.reason
    assert "vLLM will decide" in r.message
    assert r.overlap is None


def test_corrupt_tokenizer_file_does_not_block(models: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tokenizer.json").write_text('{"version": "1.0", "model": ', encoding="utf-8")
    r = check_vocabularies(str(models["target"]), str(bad))
    assert r.ok is None and r.reason is not None
    assert "draft tokenizer" in r.reason and "tokenizer.json" in r.reason


def test_hub_cache_layout_is_read_offline(models: dict[str, Path], tmp_path: Path) -> None:
    # The Hugging Face cache layout: models--org--name/{refs/main, snapshots/<rev>/...}
    cache = tmp_path / "hub"
    repo = cache / "models--example-org--tiny-target"
    rev = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev, encoding="utf-8")
    (snap / "tokenizer.json").write_bytes((models["target"] / "tokenizer.json").read_bytes())
    vocab, source = load_vocab("example-org/tiny-target", cache)
    assert len(vocab) == 512 and "local HF cache" in source
    r = check_vocabularies("example-org/tiny-target", str(models["same"]), cache_dir=cache)
    assert r.ok is True and r.overlap == 1.0
    r = check_vocabularies("example-org/tiny-target", str(models["alien"]), cache_dir=cache)
    assert r.ok is False


def test_report_round_trips(models: dict[str, Path]) -> None:
    r = check_vocabularies(str(models["target"]), str(models["alien"]))
    assert VocabReport.model_validate(json.loads(r.model_dump_json())) == r


# --------------------------------------------------------------------------- the hook


def test_wants_vocab_check() -> None:
    assert wants_vocab_check({"method": "draft_model", "model": "/m", "num_speculative_tokens": 3})
    assert wants_vocab_check({"model": "/m", "num_speculative_tokens": 3})
    assert not wants_vocab_check({"method": "ngram", "num_speculative_tokens": 3})
    assert not wants_vocab_check({"method": "eagle3", "model": "/m"})
    assert not wants_vocab_check({"method": "mtp", "model": "/m"})
    assert not wants_vocab_check(None)
    assert not wants_vocab_check({})


def test_preflight_spec(models: dict[str, Path], tmp_path: Path) -> None:
    target = str(models["target"])
    spec_same = {"method": "draft_model", "model": str(models["same"]), "num_speculative_tokens": 2}
    spec_alien = {**spec_same, "model": str(models["alien"])}
    assert preflight_spec(target, {"method": "ngram", "num_speculative_tokens": 3}) is None
    assert preflight_spec(target, None) is None
    ok = preflight_spec(target, spec_same)
    assert ok is not None and ok.ok is True
    bad = preflight_spec(target, spec_alien, acceptance=0.5)
    assert bad is not None and bad.ok is False and bad.acceptance == 0.5
    # --tokenizer replaces the target's own tokenizer, as for vLLM
    via_arg = preflight_spec(str(tmp_path / "no-such-model"), spec_same, ["--tokenizer", target])
    assert via_arg is not None and via_arg.ok is True and via_arg.target == target
    via_eq = preflight_spec("unused", spec_alien, [f"--tokenizer={target}"])
    assert via_eq is not None and via_eq.ok is False
    # the server's environment decides which HF cache is looked in
    env = {"HF_HUB_CACHE": str(tmp_path / "empty-hub")}
    spec_hub = {**spec_same, "model": "example-org/absent"}
    skipped = preflight_spec(target, spec_hub, env=env)
    assert skipped is not None and skipped.ok is None


def test_hub_cache_dir_from_env(tmp_path: Path) -> None:
    assert hub_cache_dir({"HF_HUB_CACHE": str(tmp_path / "a")}) == tmp_path / "a"
    assert hub_cache_dir({"HF_HOME": str(tmp_path / "h")}) == tmp_path / "h" / "hub"
    assert hub_cache_dir({"XDG_CACHE_HOME": str(tmp_path / "x")}) == (
        tmp_path / "x" / "huggingface" / "hub"
    )
    assert hub_cache_dir() is not None
