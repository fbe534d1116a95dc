"""The generated EAGLE / EAGLE-3 heads and the MTP target (specperf.engine.tiny): the
weights vLLM's loaders expect, wired as the construction says. That they are accepted
as often as the 1-layer draft is shown on real vLLM (tests/e2e/test_methods.py and
docs/validation.md, "Every method on CPU")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specperf.config.profile_file import load_profile
from specperf.config.tiny_models import TinyDraftSpec, TinyModelsSpec, TinyTargetSpec
from specperf.engine import tiny
from specperf.engine.tiny import materialise, spec_key
from tests.support import REPO_ROOT, load_weights, need_module

H = 64
HEADS = TinyModelsSpec(
    target=TinyTargetSpec(layers=3, hidden=H, intermediate=128, heads=4, vocab_size=512,
                          max_position_embeddings=256, mtp_layers=1),
    drafts={"draft": TinyDraftSpec(), "eagle": TinyDraftSpec(kind="eagle"),
            "eagle3": TinyDraftSpec(kind="eagle3")},
)
_LAYER = [p for p, _ in tiny._LAYER_PARAMS]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    need_module("torch")
    need_module("tokenizers")
    return materialise(HEADS, tmp_path_factory.mktemp("tiny-heads"))


# ---------------------------------------------------------------- spec (no torch)


def test_new_keys_at_their_defaults_keep_existing_hashes() -> None:
    """cpu-tiny and cpu-ci hash as before the heads existed: their baselines stay usable
    and their cached models are found (values from main before this change; cpu-tiny's
    profile hash since its engine threads are bound, b2704c8, and since its spec trials are
    interleaved with their paired no-spec ones request by request -- its models key
    unchanged)."""
    for name, profile_hash, models_key in (
            ("perf_tests/profiles/cpu-tiny.toml", "3733b880236f7056", "8506cd7b16492fe1897b"),
            ("tests/profiles/cpu-ci.toml", "f8cd5d97513a4e28", "8506cd7b16492fe1897b")):
        p = load_profile(REPO_ROOT / name)
        assert p.tiny is not None
        assert (p.hash(), spec_key(p.tiny)) == (profile_hash, models_key)
    dumped = HEADS.model_dump()
    assert dumped["target"]["mtp_layers"] == 1 and dumped["drafts"]["eagle"]["kind"] == "eagle"
    assert "kind" not in dumped["drafts"]["draft"]
    assert "mtp_layers" not in TinyTargetSpec().model_dump()


@pytest.mark.parametrize("fields, fix", [({"kind": "eagle", "layers": 2}, "layers = 1"),
                                         ({"kind": "eagle3", "tokenizer_seed": 3},
                                          "remove tokenizer_seed")])
def test_a_head_is_one_layer_on_the_targets_vocabulary(fields: dict, fix: str) -> None:
    with pytest.raises(ValueError, match=fix):
        TinyDraftSpec(**fields)


# ---------------------------------------------------------------- weights (torch)


def test_eagle_head_is_the_first_layer_behind_fc(built: dict[str, Path]) -> None:
    import torch

    target, head = load_weights(built["target"]), load_weights(built["eagle"])
    # EagleLlamaForCausalLM's names: no "model." prefix, no input norm (vLLM makes it
    # Identity), no final norm and no lm_head (it uses the target's)
    want = {"embed_tokens.weight", "fc.weight"} | {
        f"layers.0.{p}" for p in _LAYER if p != "input_layernorm.weight"}
    assert set(head) == want
    fc = head["fc.weight"].float()
    assert fc.shape == (H, 2 * H)
    assert torch.equal(fc[:, :H], torch.eye(H)) and not fc[:, H:].any()
    embed = target["model.embed_tokens.weight"].float()
    scale = (1 / (embed.pow(2).mean(-1) + tiny.RMS_EPS).sqrt()).mean()
    for p in _LAYER:
        if p == "input_layernorm.weight":
            continue
        mine, theirs = head[f"layers.0.{p}"].float(), target[f"model.layers.0.{p}"].float()
        if p.split(".")[-2] in ("q_proj", "k_proj", "v_proj"):
            # stands in for the input RMSNorm vLLM leaves out: bf16-rounded, so approx
            assert torch.allclose(mine, theirs * scale, rtol=1e-2, atol=1e-4), p
        else:
            assert torch.equal(mine, theirs), p
    config = json.loads((built["eagle"] / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_hidden_layers"] == 1


def test_eagle3_head_puts_the_embedding_in_the_residual_then_runs_the_first_layer(
        built: dict[str, Path]) -> None:
    import torch

    target, head = load_weights(built["target"]), load_weights(built["eagle3"])
    want = {"embed_tokens.weight", "fc.weight", "norm.weight", "lm_head.weight",
            "layers.0.hidden_norm.weight", "layers.1.hidden_norm.weight"} | {
        f"layers.{i}.{p}" for i in (0, 1) for p in _LAYER}
    assert set(head) == want
    assert head["fc.weight"].shape == (H, 3 * H)  # three target layers' hidden states
    assert not head["layers.0.hidden_norm.weight"].any()
    # layer 0: self-attention that copies the (normalised, rescaled) embedding; no MLP write
    embed = target["model.embed_tokens.weight"].float()
    rms = (embed.pow(2).mean(-1) + tiny.RMS_EPS).sqrt().mean()
    for p, scale in (("q_proj", tiny._SELF_ATTENTION_SCALE), ("k_proj", 1.0), ("v_proj", rms)):
        w = head[f"layers.0.self_attn.{p}.weight"].float()
        assert w.shape == (H, 2 * H) and not w[:, H:].any()
        assert torch.allclose(w[:, :H], torch.eye(H) * scale, rtol=1e-2), p
    assert not head["layers.0.mlp.down_proj.weight"].any()
    # layer 1 is the target's first layer
    for p in _LAYER:
        assert torch.equal(head[f"layers.1.{p}"], target[f"model.layers.0.{p}"]), p
    assert torch.equal(head["norm.weight"], target["model.norm.weight"])
    assert torch.equal(head["lm_head.weight"], target["lm_head.weight"])
    config = json.loads((built["eagle3"] / "config.json").read_text())
    # norm_before_residual: the residual starts from hidden_norm(h), zero here
    assert config["norm_before_residual"] is True and config["num_hidden_layers"] == 2
    assert config["draft_vocab_size"] == HEADS.target.vocab_size


def test_mtp_target_is_the_same_function_as_a_qwen2_model(built: dict[str, Path]) -> None:
    """The MiMo target loads in transformers as Qwen2 (its MTP layers aside) and its zero
    q/k/v biases leave the Llama target's function unchanged."""
    torch = need_module("torch")
    transformers = need_module("transformers")
    config = json.loads((built["target"] / "config.json").read_text())
    assert config["architectures"] == ["MiMoForCausalLM"]
    assert config["num_nextn_predict_layers"] == 1
    qwen, info = transformers.Qwen2ForCausalLM.from_pretrained(str(built["target"]),
                                                              output_loading_info=True)
    assert not info["missing_keys"]
    assert info["unexpected_keys"] and all("mtp_layers" in k for k in info["unexpected_keys"])
    sd = {k: v for k, v in load_weights(built["target"]).items()
          if "mtp_layers" not in k and not k.endswith("_proj.bias")}
    cfg = transformers.LlamaConfig(**tiny._llama_config(HEADS.target, HEADS.target.layers))
    llama = transformers.LlamaForCausalLM(cfg)
    llama.load_state_dict(sd)
    ids = torch.tensor([[1, 50, 60, 70, 80]])
    with torch.no_grad():
        assert torch.allclose(qwen.float()(ids).logits, llama.float()(ids).logits, atol=1e-5)


def test_mtp_layer_is_the_first_layer_behind_input_proj(built: dict[str, Path]) -> None:
    import torch

    target = load_weights(built["target"])
    pre = "model.mtp_layers.0."
    proj = target[pre + "input_proj.weight"].float()
    # [hidden_norm(h) | token_norm(embed)]: the hidden half is zero, the embedding half
    # scales the normalised embedding back to the embedding's own size
    embed = target["model.embed_tokens.weight"].float()
    rms = (embed.pow(2).mean(-1) + tiny.RMS_EPS).sqrt().mean()
    assert not proj[:, :H].any()
    assert torch.allclose(proj[:, H:], torch.eye(H) * rms, rtol=1e-2)
    for p in _LAYER:
        assert torch.equal(target[pre + p], target[f"model.layers.0.{p}"]), p
    assert not target[pre + "self_attn.q_proj.bias"].any()
