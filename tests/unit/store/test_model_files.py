"""Reading a model's config.json and weight sizes from a Hugging Face hub cache laid out
as huggingface_hub lays it out (built in tmp_path; nothing downloaded)."""

from __future__ import annotations

import json
from pathlib import Path

from specperf.analysis.kv_cache import model_shape
from specperf.store.model_files import cached_model, hub_cache_dir


def _cache(tmp_path: Path, commit: str = "a" * 40) -> Path:
    snap = tmp_path / "hub" / "models--org--tiny" / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
        "hidden_size": 256, "torch_dtype": "bfloat16", "max_position_embeddings": 2048}))
    (snap / "model-00001.safetensors").write_bytes(b"\0" * 1000)
    (snap / "model-00002.safetensors").write_bytes(b"\0" * 24)
    return tmp_path / "hub"


def test_a_cached_model_s_config_and_weight_bytes(tmp_path: Path) -> None:
    found = cached_model("org/tiny", _cache(tmp_path))
    assert found is not None and found.weight_bytes == 1024
    shape = model_shape("org/tiny", found.config, found.weight_bytes)
    assert shape is not None and not shape.estimated
    assert shape.kv_bytes_per_token() == 2 * 4 * 2 * (256 // 8) * 2


def test_the_pinned_revision_is_the_snapshot_read(tmp_path: Path) -> None:
    cache = _cache(tmp_path, "a" * 40)
    other = cache / "models--org--tiny" / "snapshots" / ("b" * 40)
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"num_hidden_layers": 9}))
    pinned = cached_model("org/tiny", cache, revision="b" * 40)
    assert pinned is not None and pinned.config["num_hidden_layers"] == 9 and pinned.weight_bytes is None


def test_not_cached_or_not_json_is_none(tmp_path: Path) -> None:
    assert cached_model("org/absent", tmp_path) is None
    cache = _cache(tmp_path)
    (next((cache / "models--org--tiny" / "snapshots").iterdir()) / "config.json").write_text("{")
    assert cached_model("org/tiny", cache) is None


def test_the_cache_directory_follows_huggingface_hub_s_variables(tmp_path: Path) -> None:
    assert hub_cache_dir({"HF_HUB_CACHE": str(tmp_path / "x")}) == tmp_path / "x"
    assert hub_cache_dir({"HF_HOME": str(tmp_path)}) == tmp_path / "hub"
