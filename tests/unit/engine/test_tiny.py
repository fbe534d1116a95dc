"""Tests of the tiny-model generator (specperf.engine.tiny). No wall-clock assertions."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from specperf.config.tiny_models import TinyDraftSpec, TinyModelsSpec, TinyTargetSpec
from specperf.engine import tiny
from specperf.engine.tiny import materialise, spec_key, synthetic_text, synthetic_words
from tests.support import load_weights, need_module

SRC = Path(tiny.__file__).resolve().parents[2]

# Small enough to build in a couple of seconds.
SMALL = TinyModelsSpec(
    tokenizer_seed=0,
    target=TinyTargetSpec(
        layers=3, hidden=64, intermediate=128, heads=4, vocab_size=512, max_position_embeddings=256
    ),
    drafts={
        "draft": TinyDraftSpec(layers=1),
        "weak": TinyDraftSpec(layers=1, noise=0.01),
        "alien": TinyDraftSpec(layers=1, tokenizer_seed=7),
        "slow": TinyDraftSpec(layers=1, idle_layers=2),
    },
)


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    need_module("torch")
    need_module("tokenizers")
    return materialise(SMALL, tmp_path_factory.mktemp("tiny-cache"))


# ---------------------------------------------------------------- pure python (no torch)


def test_module_imports_without_torch() -> None:
    code = textwrap.dedent(
        """
        import sys
        for m in ("torch", "transformers", "tokenizers", "safetensors"):
            sys.modules[m] = None  # any import of them now fails
        from specperf.config.tiny_models import TinyModelsSpec
        from specperf.engine.tiny import synthetic_text, spec_key
        spec = TinyModelsSpec()
        print(spec_key(spec), len(synthetic_text(0, 10).split()))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC)},
        check=True,
    )
    assert out.stdout.split()[1] == "10"


def test_synthetic_text_is_deterministic_and_seeded() -> None:
    assert synthetic_text(3, 50) == synthetic_text(3, 50)
    assert synthetic_text(3, 50) != synthetic_text(4, 50)
    assert synthetic_words(3, 50, language=1) != synthetic_words(3, 50, language=0)
    words = synthetic_words(1, 500)
    assert len(words) == 500
    assert all(w.isascii() and w.isalpha() and w.islower() for w in words)
    text = synthetic_text(1, 32)
    assert len(text.split()) == 32
    assert text.endswith(".")
    # Zipf-like: frequent words repeat
    assert len(set(words)) < len(words) * 0.8


def test_spec_key_depends_on_spec() -> None:
    assert spec_key(SMALL) == spec_key(SMALL.model_copy())
    other = SMALL.model_copy(update={"tokenizer_seed": 1})
    assert spec_key(other) != spec_key(SMALL)
    # dict order of drafts does not matter
    reordered = TinyModelsSpec(
        target=SMALL.target, drafts=dict(reversed(list(SMALL.drafts.items())))
    )
    assert spec_key(reordered) == spec_key(SMALL)


@pytest.mark.parametrize("name", ["target", "", "../x", "a/b", ".hidden"])
def test_bad_draft_names_are_refused(tmp_path: Path, name: str) -> None:
    spec = TinyModelsSpec(target=SMALL.target, drafts={name: TinyDraftSpec()})
    with pytest.raises(ValueError):
        materialise(spec, tmp_path)


def test_draft_deeper_than_target_is_refused(tmp_path: Path) -> None:
    spec = TinyModelsSpec(target=SMALL.target, drafts={"d": TinyDraftSpec(layers=4)})
    with pytest.raises(ValueError):
        materialise(spec, tmp_path)


# ---------------------------------------------------------------- generation (torch)


def test_layout(built: dict[str, Path]) -> None:
    assert set(built) == {"target", "draft", "weak", "alien", "slow"}
    for d in built.values():
        for f in (
            "model.safetensors",
            "config.json",
            "generation_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
        ):
            assert (d / f).is_file(), (d, f)
    cfg = json.loads((built["target"] / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["num_hidden_layers"] == 3
    assert json.loads((built["draft"] / "config.json").read_text())["num_hidden_layers"] == 1


def test_deterministic_bytes(built: dict[str, Path], tmp_path: Path) -> None:
    """Same spec -> byte-identical files, in this process and in a fresh one."""
    again = materialise(SMALL, tmp_path / "a")
    first = _hashes(built["target"].parent)
    assert _hashes(again["target"].parent) == first
    # a fresh interpreter (tokenizers' Rust hash maps are seeded per process)
    code = (
        "import sys; from pathlib import Path; from specperf.engine import tiny; "
        "from specperf.config.tiny_models import TinyModelsSpec; "
        "tiny.materialise(TinyModelsSpec.model_validate_json(sys.argv[2]), Path(sys.argv[1]))"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "b"), SMALL.model_dump_json()],
        check=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    assert _hashes(tmp_path / "b" / spec_key(SMALL)) == first


def test_cache_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_module("torch")
    spec = TinyModelsSpec(target=SMALL.target, drafts={"draft": TinyDraftSpec()})
    first = materialise(spec, tmp_path)
    stamp = (first["target"] / "model.safetensors").stat().st_mtime_ns

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("rebuilt a cached spec")

    monkeypatch.setattr(tiny, "_build", boom)
    assert materialise(spec, tmp_path) == first
    assert (first["target"] / "model.safetensors").stat().st_mtime_ns == stamp
    # only the finished dir and its lock file: no temp dirs left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [spec_key(spec), f"{spec_key(spec)}.lock"]
    )


def test_interrupted_build_leaves_nothing_reusable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_module("torch")
    spec = TinyModelsSpec(target=SMALL.target, drafts={"draft": TinyDraftSpec()})
    real = tiny._write_model

    def dies_on_draft(out: Path, *a: object, **k: object) -> None:
        if out.name == "draft":
            raise KeyboardInterrupt
        real(out, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(tiny, "_write_model", dies_on_draft)
    with pytest.raises(KeyboardInterrupt):
        materialise(spec, tmp_path)
    assert not (tmp_path / spec_key(spec)).exists()
    assert not list(tmp_path.glob(".tmp-*"))
    # a stale temp dir from a killed process is cleaned by the next builder
    (tmp_path / f".tmp-{spec_key(spec)}-999-dead").mkdir()
    monkeypatch.setattr(tiny, "_write_model", real)
    paths = materialise(spec, tmp_path)
    assert (paths["draft"] / "model.safetensors").is_file()
    assert not list(tmp_path.glob(".tmp-*"))


def test_concurrent_callers_build_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_module("torch")
    spec = TinyModelsSpec(target=SMALL.target)
    calls: list[int] = []
    real = tiny._build

    def counting(*a: object, **k: object) -> None:
        calls.append(1)
        real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(tiny, "_build", counting)
    results: list[dict[str, Path]] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            results.append(materialise(spec, tmp_path))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(calls) == 1
    assert results[0] == results[1] == results[2]


def test_draft_copies_target_layers(built: dict[str, Path]) -> None:
    import torch

    target, draft = load_weights(built["target"]), load_weights(built["draft"])
    assert "model.layers.1.self_attn.q_proj.weight" not in draft
    for name, w in draft.items():
        assert torch.equal(w, target[name]), name
    assert any(k.startswith("model.layers.2.") for k in target)


def test_deep_layers_are_scaled(built: dict[str, Path]) -> None:
    target = load_weights(built["target"])
    std0 = target["model.layers.0.self_attn.o_proj.weight"].float().std().item()
    for layer in (1, 2):
        for p in ("self_attn.o_proj", "mlp.down_proj"):
            std = target[f"model.layers.{layer}.{p}.weight"].float().std().item()
            assert std == pytest.approx(std0 * SMALL.target.deep_scale, rel=0.2)
    q1 = target["model.layers.1.self_attn.q_proj.weight"].float().std().item()
    assert q1 == pytest.approx(tiny.INIT_STD, rel=0.2)


def test_noisy_draft_differs_by_its_noise(built: dict[str, Path]) -> None:
    target, weak = load_weights(built["target"]), load_weights(built["weak"])
    name = "model.layers.0.mlp.up_proj.weight"
    diff = (weak[name].float() - target[name].float()).std().item()
    assert diff == pytest.approx(SMALL.drafts["weak"].noise, rel=0.2)


def test_tokenizer_seed_gives_another_vocab(built: dict[str, Path]) -> None:
    def vocab(d: Path) -> dict[str, int]:
        return json.loads((d / "tokenizer.json").read_text())["model"]["vocab"]

    assert vocab(built["alien"]) != vocab(built["target"])
    assert len(vocab(built["target"])) == SMALL.target.vocab_size
    # drafts without tokenizer_seed share the target's tokenizer files byte for byte
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (built["draft"] / f).read_bytes() == (built["target"] / f).read_bytes()


def test_tokenizer_round_trips_synthetic_text(built: dict[str, Path]) -> None:
    transformers = need_module("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(built["target"]))
    assert (tok.bos_token_id, tok.eos_token_id, tok.unk_token_id, tok.pad_token_id) == (
        tiny.BOS_ID,
        tiny.EOS_ID,
        tiny.UNK_ID,
        tiny.PAD_ID,
    )
    for seed in range(5):
        text = synthetic_text(seed, 64, language=SMALL.tokenizer_seed)
        ids = tok(text).input_ids
        assert ids[0] == tiny.BOS_ID
        assert tiny.UNK_ID not in ids
        assert tok.decode(ids, skip_special_tokens=True) == text
        assert len(ids) < 4 * 64  # the tokenizer learnt the language's pieces


def test_loads_as_llama(built: dict[str, Path]) -> None:
    torch = need_module("torch")
    transformers = need_module("transformers")
    for name in ("target", "draft"):
        model, info = transformers.LlamaForCausalLM.from_pretrained(
            str(built[name]), output_loading_info=True
        )
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        with torch.no_grad():
            logits = model(torch.tensor([[1, 50, 60, 70]])).logits
        assert logits.shape == (1, 4, SMALL.target.vocab_size)
        assert torch.isfinite(logits).all()


def test_idle_layers_make_the_same_draft_deeper(built: dict[str, Path]) -> None:
    """A draft with idle layers computes what the draft without them does (the slower
    draft of benchmarks/attribution.py: a step-cost change with acceptance unchanged)."""
    torch = need_module("torch")
    transformers = need_module("transformers")
    slow = load_weights(built["slow"])
    assert json.loads((built["slow"] / "config.json").read_text())["num_hidden_layers"] == 3
    for layer in (1, 2):
        assert not slow[f"model.layers.{layer}.self_attn.o_proj.weight"].any()
        assert not slow[f"model.layers.{layer}.mlp.down_proj.weight"].any()
        assert slow[f"model.layers.{layer}.self_attn.q_proj.weight"].any()  # it still computes
    ids = torch.tensor([[1, 50, 60, 70, 80, 90]])
    logits = {}
    for name in ("draft", "slow"):
        model = transformers.LlamaForCausalLM.from_pretrained(str(built[name]))
        with torch.no_grad():
            logits[name] = model(ids).logits
    # attention and MLP outputs projected by zeros add exactly 0 to the residual stream
    assert torch.equal(logits["draft"], logits["slow"])
    # the key is left out at its default: specs written before it keep their cache key
    assert "idle_layers" not in TinyDraftSpec().model_dump()
    with pytest.raises(ValueError, match="idle_layers"):
        TinyDraftSpec(kind="eagle", idle_layers=1)


def test_a_drafts_context_limits_go_into_its_config_only() -> None:
    """max_position_embeddings and sliding_window change the draft's config.json (and its
    cache key), not the target's; at their defaults the key is what it was before them."""
    t = TinyTargetSpec(layers=2, hidden=64, intermediate=128, heads=4, vocab_size=512)
    short = TinyDraftSpec(layers=1, max_position_embeddings=128)
    windowed = TinyDraftSpec(layers=2, sliding_window=48)
    cfg = tiny._draft_config(t, short)
    assert cfg["max_position_embeddings"] == 128 and "layer_types" not in cfg
    assert tiny._draft_config(t, TinyDraftSpec())["max_position_embeddings"] == 2048
    cfg = tiny._draft_config(t, windowed)
    assert cfg["layer_types"] == ["sliding_attention", "sliding_attention"]
    assert cfg["sliding_window"] == 48
    assert TinyDraftSpec().model_dump() == TinyDraftSpec(
        max_position_embeddings=None, sliding_window=None).model_dump()
    assert "max_position_embeddings" not in TinyDraftSpec().model_dump()
    assert spec_key(TinyModelsSpec(drafts={"d": short})) != spec_key(
        TinyModelsSpec(drafts={"d": TinyDraftSpec()}))
    with pytest.raises(ValueError, match="target's positions — fix: remove"):
        TinyDraftSpec(kind="eagle", max_position_embeddings=128)
