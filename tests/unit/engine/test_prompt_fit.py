"""Prompts selected by the target tokenizer's token count: with the suite's own generated
tiny tokenizer (built by engine/tiny.py, as a run builds it; and laid out in a hub cache
in tmp_path as huggingface_hub lays it out), on ShareGPT-format files made here. A CJK
prompt well under max_input_chars but over the context is not selected; where nothing is
too long the selection is the one by characters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specperf.config.profile_file import load_profile
from specperf.config.workload import ShareGPTWorkload
from specperf.engine.datasets import load_prompts, sharegpt_prompts
from specperf.engine.prompt_fit import max_model_len_arg, prompt_fit
from specperf.engine.tiny import synthetic_text
from tests.support import CPU_CI_PROFILE, need_module

#: A CJK prompt: 400 characters (far under max_input_chars = 8000), 1200 UTF-8 bytes,
#: which a byte-level BPE trained on ASCII splits into ~1200 tokens.
CJK = "请用中文详细解释一下这个函数的作用以及它在大型分布式系统中的性能影响。" * 12
SEED = 3  # an order in which, by characters, the CJK prompt is among the six chosen
MAX_TOKENS = 32
MAX_MODEL_LEN = 256

TINY_TABLE = """
[tiny]
tokenizer_seed = 0
[tiny.target]
layers = 1
hidden = 64
intermediate = 128
heads = 4
vocab_size = 512
max_position_embeddings = 256
"""


def write_dataset(path: Path) -> list[str]:
    """Six prompts of the tiny tokenizer's own pseudo-language (one of them 326 bytes but
    125 tokens, which only a token count keeps), and the CJK one."""
    texts = [synthetic_text(1000 + i, 12) for i in range(5)] + [synthetic_text(2000, 40)]
    texts.append(CJK)
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": t},
                                                   {"from": "gpt", "value": "ok"}]}
                                for t in texts], ensure_ascii=False), encoding="utf-8")
    return texts


def write_profile(tmp_path: Path, *, target: str = "tiny:target", serve_args: str | None = None,
                  num_prompts: int = 6, tiny: bool = True) -> Path:
    args = serve_args if serve_args is not None else f'["--max-model-len", "{MAX_MODEL_LEN}"]'
    path = tmp_path / "fit.toml"
    path.write_text(
        f'name = "fit"\ntarget = "{target}"\nserve_args = {args}\nconcurrencies = [1]\n'
        f'[workload]\nkind = "sharegpt"\npath = "sharegpt.json"\nseed = {SEED}\n'
        f'num_prompts = {num_prompts}\n'
        f'[sampling]\nmax_tokens = {MAX_TOKENS}\n'
        '[[server_configs]]\nid = "nospec"\n' + (TINY_TABLE if tiny else ""))
    return path


def by_characters(tmp_path: Path, n: int) -> list[str]:
    return sharegpt_prompts(ShareGPTWorkload(num_prompts=n, seed=SEED), tmp_path / "sharegpt.json")


def test_a_cjk_prompt_over_the_context_is_not_selected(tmp_path: Path) -> None:
    need_module("torch")
    need_module("transformers")
    texts = write_dataset(tmp_path / "sharegpt.json")
    assert len(CJK) < ShareGPTWorkload().max_input_chars  # 400 < 8000: characters let it in
    profile = load_profile(write_profile(tmp_path))
    # Precondition: by characters the CJK prompt is among the six chosen of seven.
    chars = by_characters(tmp_path, 6)
    assert CJK in chars
    said: list[str] = []
    prompts = load_prompts(profile, models_cache=tmp_path / "models", say=said.append)
    assert CJK not in prompts and len(prompts) == 6
    # The same seeded order, with the CJK prompt skipped and the next one taken instead.
    assert prompts == [t for t in by_characters(tmp_path, 7) if t != CJK]
    assert sorted(prompts) == sorted(texts[:-1])
    # The 326-byte pseudo-language prompt is over the byte bound but fits by tokens: kept.
    long_ascii = texts[5]
    assert len(long_ascii.encode()) > MAX_MODEL_LEN - MAX_TOKENS and long_ascii in prompts
    [line] = said
    assert line.startswith("specperf: 1 dataset prompt(s) left out: their tokens + max_tokens "
                           f"{MAX_TOKENS} exceed max_model_len {MAX_MODEL_LEN} "
                           "(--max-model-len in the profile's serve_args; the longest ")
    # The tokens counted are the served tokenizer's, the generated target's (BOS included).
    from transformers import AutoTokenizer

    fit, why = prompt_fit(profile, tmp_path / "models")
    assert fit is not None and why is None
    tok = AutoTokenizer.from_pretrained(fit.resolve("tiny:target"))
    cjk_tokens = len(tok(CJK)["input_ids"])
    assert cjk_tokens > MAX_MODEL_LEN - MAX_TOKENS
    assert f"the longest {cjk_tokens} tokens by tiny:target's tokenizer" in line
    assert len(tok(long_ascii)["input_ids"]) <= MAX_MODEL_LEN - MAX_TOKENS


def test_where_no_prompt_is_too_long_the_selection_is_unchanged(tmp_path: Path) -> None:
    """cpu-ci's prompts fit by their bytes alone: the same prompts (and prompts hash) as
    by characters, and no tokenizer (nor the tiny models) is even built for it."""
    profile = load_profile(CPU_CI_PROFILE)
    said: list[str] = []
    models = tmp_path / "models"
    prompts = load_prompts(profile, models_cache=models, say=said.append)
    path = profile.dataset_path()
    assert path is not None and isinstance(profile.workload, ShareGPTWorkload)
    assert prompts == sharegpt_prompts(profile.workload, path)
    assert said == [] and not models.exists()


def _hub_tiny_model(cache: Path, commit: str, *, tokenizer: bool = True) -> None:
    """The generated tiny tokenizer and a config.json, as a snapshot of hub model
    org/tiny that huggingface_hub downloaded at main."""
    from specperf.engine import tiny

    root = cache / "models--org--tiny"
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "llama",
                                                  "max_position_embeddings": MAX_MODEL_LEN}))
    if tokenizer:
        tiny._save_tokenizer(tiny._train_tokenizer(0, 512), snap, 100_000)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)


def test_a_hub_target_is_counted_from_the_hub_cache_and_limited_by_its_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_module("tokenizers")
    need_module("transformers")
    cache = tmp_path / "hub"
    _hub_tiny_model(cache, "d" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_dataset(tmp_path / "sharegpt.json")
    profile = load_profile(write_profile(tmp_path, target="org/tiny", serve_args="[]",
                                         tiny=False))
    said: list[str] = []
    prompts = load_prompts(profile, say=said.append)
    assert CJK not in prompts
    assert prompts == [t for t in by_characters(tmp_path, 7) if t != CJK]
    assert len(said) == 1 and f"max_model_len {MAX_MODEL_LEN} (org/tiny's config.json;" in said[0]


def test_without_a_tokenizer_or_a_length_offline_prompts_go_by_characters_and_say_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_module("transformers")
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_dataset(tmp_path / "sharegpt.json")
    # No config.json anywhere and no --max-model-len: the limit is unknown.
    profile = load_profile(write_profile(tmp_path, target="org/tiny", serve_args="[]",
                                         tiny=False))
    said: list[str] = []
    assert load_prompts(profile, say=said.append) == by_characters(tmp_path, 6)
    assert said == ["specperf: prompts selected by characters only, not by tokens: server "
                    "config 'nospec' has no --max-model-len and org/tiny's config.json is "
                    "not in local files (its context length is unknown: run "
                    "scripts/download_models.py, or set --max-model-len)"]
    # A length, but the tokenizer is not in the cache: the CJK prompt stays, and it is said.
    _hub_tiny_model(cache, "e" * 40, tokenizer=False)
    said.clear()
    assert load_prompts(profile, say=said.append) == by_characters(tmp_path, 6)
    assert len(said) == 1 and said[0].startswith(
        "specperf: prompts selected by characters only, not by tokens: no tokenizer of "
        "org/tiny in local files")


@pytest.mark.parametrize(("args", "want"), [
    (["--max-model-len", "8192"], 8192), (["--max-model-len=4096"], 4096),
    (["--max_model_len", "8k"], 8000), (["--max-model-len", "8K"], 8192),
    (["--max-model-len", "25.6k"], 25600), (["--max-model-len", "1.5K"], None),
    (["--max-model-len", "auto"], None), (["--max-model-len", "-1"], None),
    (["--max-model-len", "1024", "--max-model-len", "2048"], 2048), ([], None),
    (["--max-model-len"], None),
])
def test_max_model_len_is_read_as_vllm_parses_it(args: list[str], want: int | None) -> None:
    assert max_model_len_arg(args) == want


def test_the_shortest_context_of_the_matrix_binds(tmp_path: Path) -> None:
    path = tmp_path / "two.toml"
    path.write_text('name = "two"\ntarget = "tiny:target"\nserve_args = ["--max-model-len", '
                    '"1024"]\nconcurrencies = [1]\n[[server_configs]]\nid = "nospec"\n'
                    '[[server_configs]]\nid = "short"\nserve_args = ["--max-model-len", "300"]\n'
                    'speculative_config = { method = "ngram", num_speculative_tokens = 2, '
                    'prompt_lookup_max = 3 }\n' + TINY_TABLE)
    fit, why = prompt_fit(load_profile(path), tmp_path / "models")
    assert fit is not None and why is None
    assert sorted((lim.max_model_len, lim.config_ids) for lim in fit.limits) == [
        (300, ("short",)), (1024, ("nospec",))]
    # Bytes settle a short prompt against both without building any tokenizer.
    assert fit.too_long("x" * 100) is None and fit.counters == {}
