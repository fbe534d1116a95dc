"""The profile checks pydantic's types cannot say (specperf.config.boundaries): names that
become paths, server arguments the suite owns, speculative configs — examples and
properties. The same inputs through whole profile files: tests/integration/test_bad_profiles.py."""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specperf.config.boundaries import (
    KNOWN_METHODS,
    MODEL_FREE,
    SUITE_OWNED,
    check_serve_args,
    check_slug,
    check_speculative_config,
    owned_option,
)
from specperf.config.gates import TpotGainGate
from specperf.config.server_configs import ServerConfig

# -- names ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cpu-tiny", "a100-qwen3-32b", "l40s-qwen3-1.7b", "x", "k_2"])
def test_shipped_style_names_are_slugs(name: str) -> None:
    assert check_slug(name, "name") == name


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".", ".hidden", "-flag", "Upper", "",
                                  "a b", "a\\b", "x" * 101, "café"])
def test_names_that_are_not_slugs_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a usable name.*fix: use lower-case letters"):
        check_slug(name, "name")


_UNSAFE = st.text(min_size=1, max_size=30).filter(
    lambda s: any(ch in s for ch in "/\\ \0") or s in (".", "..") or not s[0].isalnum()
    or any(ch.isupper() for ch in s))


@settings(max_examples=200, deadline=None)
@given(name=_UNSAFE)
def test_any_slug_unsafe_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError):
        check_slug(name, "name")


@settings(max_examples=200, deadline=None)
@given(name=st.text(alphabet=string.ascii_lowercase + string.digits + "._-", min_size=1,
                    max_size=100).filter(lambda s: s[0].isalnum()))
def test_every_accepted_name_stays_one_path_component(name: str) -> None:
    assert check_slug(name, "name") == name
    assert "/" not in name and name not in (".", "..")


# -- serve_args ----------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["--host", "0.0.0.0"], ["--host=0.0.0.0"], ["--port", "1"], ["--port=1"],
    ["--model", "other/model"], ["--model=other"], ["--hos", "0.0.0.0"], ["--po=8000"],
    ["--uds", "x.sock"], ["--max-model-len", "1024", "--host", "::"],
])
def test_suite_owned_options_are_refused_in_any_spelling(args: list[str]) -> None:
    with pytest.raises(ValueError, match="is set by the suite.*fix: remove it"):
        check_serve_args(args)


@pytest.mark.parametrize(("args", "opt"), [
    (["--api-key", "k"], "--api-key"), (["--api_key=k"], "--api-key"), (["--api-k", "k"], "--api-key"),
    (["--served-model-name", "x"], "--served-model-name"), (["--ser=x"], "--served-model-name"),
    (["--served_model_name", "a", "b"], "--served-model-name"),
    (["--config", "serve.yaml"], "--config"), (["--config=serve.yaml"], "--config"),
    (["--speculative-config", "{}"], "--speculative-config"),
    (["--speculative_config={}"], "--speculative-config"), (["--specu", "{}"], "--speculative-config"),
    (["--speculative-config.num_speculative_tokens", "5"], "--speculative-config"),
    (["-sc", "{}"], "--speculative-config"), (["-sc={}"], "--speculative-config"),
    (["-s", "{}"], "--speculative-config"),
])
def test_options_that_change_what_is_measured_or_how_the_suite_talks_are_refused(
        args: list[str], opt: str) -> None:
    with pytest.raises(ValueError) as err:
        check_serve_args(args)
    assert f"{opt} " in str(err.value) and "fix:" in str(err.value)


@pytest.mark.parametrize("args", [
    ["--max-model-len", "1024"], ["--model-impl", "vllm"], [],
    ["--enforce-eager"], ["--dtype", "float32"], ["0.0.0.0"], ["-tp", "2"],
    ["--config-format", "hf"], ["--seed", "0"], ["--tokenizer", "org/t"],
])
def test_other_serve_args_pass(args: list[str]) -> None:
    assert check_serve_args(args) == args


@settings(max_examples=200, deadline=None)
@given(opt=st.sampled_from(SUITE_OWNED), cut=st.integers(min_value=3, max_value=7),
       underscore=st.booleans(), value=st.one_of(st.none(), st.text(max_size=10)))
def test_any_prefix_spelling_of_an_owned_option_is_caught(opt: str, cut: int, underscore: bool,
                                                          value: str | None) -> None:
    arg = opt[:cut]
    if underscore:
        arg = "--" + arg[2:].replace("-", "_")
    if value is not None:
        arg += "=" + value
    assert owned_option(arg) is not None


# -- speculative configs ------------------------------------------------------------

GOOD_SPECS: list[dict[str, Any]] = [
    {"method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 3},
    {"model": "tiny:draft", "num_speculative_tokens": 1},
    {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
    {"method": "eagle3", "model": "org/eagle3-head", "num_speculative_tokens": 2},
    {"method": "mtp", "num_speculative_tokens": 1},
    {"method": "deepseek_mtp", "num_speculative_tokens": 1},
    {"method": "suffix"},
]


@pytest.mark.parametrize("spec", GOOD_SPECS, ids=lambda s: str(s.get("method")))
def test_usable_speculative_configs_pass(spec: dict[str, Any]) -> None:
    check_speculative_config(spec)


@pytest.mark.parametrize(("spec", "says"), [
    ({"method": "draft_model", "model": "m", "num_speculative_tokens": 0}, "integer ≥ 1"),
    ({"method": "draft_model", "model": "m", "num_speculative_tokens": -3}, "integer ≥ 1"),
    ({"method": "draft_model", "model": "m", "num_speculative_tokens": "two"}, "integer ≥ 1"),
    ({"method": "draft_model", "model": "m", "num_speculative_tokens": 2.5}, "integer ≥ 1"),
    ({"method": "draft_model", "model": "m", "num_speculative_tokens": True}, "integer ≥ 1"),
    ({"method": "medusa2", "model": "m", "num_speculative_tokens": 2}, "not a speculative method"),
    ({"method": 3, "num_speculative_tokens": 2}, "not a speculative method"),
    ({"method": "draft_model", "num_speculative_tokens": 2}, "needs a draft `model`"),
    ({"method": "eagle3", "num_speculative_tokens": 2}, "needs a draft `model`"),
    ({"num_speculative_tokens": 2}, "needs a draft `model`"),
    ({}, "needs a draft `model`"),
    ({"method": "ngram"}, "needs num_speculative_tokens"),
    ({"method": "draft_model", "model": "", "num_speculative_tokens": 2}, "model = ''"),
])
def test_bad_speculative_configs_say_what_to_fix(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match="fix:") as err:
        check_speculative_config(spec)
    assert says in str(err.value)


@settings(max_examples=200, deadline=None)
@given(k=st.integers(max_value=0))
def test_any_k_below_one_is_refused(k: int) -> None:
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        check_speculative_config({"method": "draft_model", "model": "m",
                                  "num_speculative_tokens": k})


@settings(max_examples=100, deadline=None)
@given(k=st.integers(min_value=1, max_value=64), method=st.sampled_from(sorted(KNOWN_METHODS)))
def test_any_k_from_one_with_a_known_method_passes(k: int, method: str) -> None:
    spec: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if method not in MODEL_FREE:
        spec["model"] = "org/draft"
    check_speculative_config(spec)


@settings(max_examples=100, deadline=None)
@given(method=st.text(min_size=1, max_size=20).filter(
    lambda m: m not in KNOWN_METHODS and not m.endswith("_mtp")))
def test_any_unknown_method_is_refused(method: str) -> None:
    with pytest.raises(ValueError, match="not a speculative method"):
        check_speculative_config({"method": method, "model": "m", "num_speculative_tokens": 1})


# -- the models that use them -------------------------------------------------------


def test_server_config_runs_the_checks() -> None:
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        ServerConfig(id="x", speculative_config={"model": "m", "num_speculative_tokens": 0})
    with pytest.raises(ValueError, match="--port is set by the suite"):
        ServerConfig(id="x", serve_args=["--port=1"])
    with pytest.raises(ValueError, match="not a usable id"):
        ServerConfig(id="../x")


@settings(max_examples=100, deadline=None)
@given(ratio=st.one_of(st.floats(max_value=0.0), st.just(float("nan")), st.just(float("inf"))))
def test_no_ratio_override_can_switch_the_gate_off(ratio: float) -> None:
    with pytest.raises(ValueError):
        TpotGainGate(min_ratio_by_concurrency={1: ratio})
