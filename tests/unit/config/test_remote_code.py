"""A profile's model revision, and the refusal of remote code no commit pins."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from specperf.config.profile import ProfileError
from specperf.config.profile_file import load_profile
from specperf.config.remote_code import revision_option, trusts_remote_code
from tests.support import REPO_ROOT, need_module

COMMIT = "0123456789abcdef0123456789abcdef01234567"
MIMO = REPO_ROOT / "perf_tests" / "profiles" / "h100-mimo-7b-mtp.toml"


def _profile(tmp_path: Path, top: str = "", spec: str = 'method = "mtp", '
             'num_speculative_tokens = 1', config_args: str = "[]") -> Path:
    path = tmp_path / "remote.toml"
    path.write_text(
        'name = "remote"\ntarget = "some-org/some-model"\nconcurrencies = [1]\n' + top
        + '\n[[server_configs]]\nid = "nospec"\n'
        + f'\n[[server_configs]]\nid = "spec"\nserve_args = {config_args}\n'
        + f"speculative_config = {{ {spec} }}\n")
    return path


@pytest.mark.parametrize("args", [
    ["--trust-remote-code"], ["--trust_remote_code"], ["--trust-rem"],
    ["--no-trust-remote-code", "--trust-remote-code"], ["--seed", "0", "--trust-remote-code"],
])
def test_every_spelling_vllm_takes_trusts_remote_code(args: list[str]) -> None:
    assert trusts_remote_code(args)


@pytest.mark.parametrize("args", [
    [], ["--trust-request-chat-template"], ["--trust-remote-code", "--no-trust-remote-code"],
    ["--trust-remote-code", "--no-trust-rem"], ["--seed", "--trust-remote-code-not"],
])
def test_other_arguments_do_not(args: list[str]) -> None:
    assert not trusts_remote_code(args)


def test_a_config_file_that_sets_it_trusts_remote_code(tmp_path: Path) -> None:
    yaml = tmp_path / "serve.yaml"
    yaml.write_text("seed: 0\ntrust-remote-code: true\n")
    assert trusts_remote_code(["--config", str(yaml)])
    yaml.write_text("seed: 0\ntrust_remote_code: false\n")
    assert not trusts_remote_code(["--config", str(yaml)])


@pytest.mark.parametrize(("arg", "opt"), [
    ("--revision", "--revision"), ("--revision=main", "--revision"), ("--rev", "--revision"),
    ("--code_revision", "--code-revision"), ("--tokenizer-revision", "--tokenizer-revision"),
    ("--tokenizer", None), ("--tokenizer-mode", None), ("--reasoning-parser", None),
])
def test_revision_options_in_every_spelling(arg: str, opt: str | None) -> None:
    assert revision_option(arg) == opt


def test_the_mimo_profile_validates_but_a_run_of_it_is_refused() -> None:
    # Its commit is not known here and none may be invented: it loads, lists its cases and
    # passes `specperf check`; a run that would start its servers is refused, saying how.
    p = load_profile(MIMO)
    assert p.revision is None and trusts_remote_code(p.serve_args)
    why = p.remote_code_refusal()
    assert why is not None
    assert str(MIMO) in why and "field `serve_args`" in why and "`revision`" in why
    assert "https://huggingface.co/XiaomiMiMo/MiMo-7B-RL/commits/main" in why
    with pytest.raises(ProfileError, match="revision = "):
        p.check_remote_code()


def test_a_pinned_target_runs_and_its_revision_changes_the_hash(tmp_path: Path) -> None:
    unpinned = load_profile(_profile(tmp_path, 'serve_args = ["--trust-remote-code"]'))
    pinned = load_profile(_profile(tmp_path, f'revision = "{COMMIT}"\n'
                                   'serve_args = ["--trust-remote-code"]'))
    assert pinned.remote_code_refusal() is None
    assert pinned.hash() != unpinned.hash()
    # No revision: the hash is what it was before the key existed.
    assert "revision" not in unpinned._measured()


def test_a_config_of_its_own_that_trusts_remote_code_is_refused_too(tmp_path: Path) -> None:
    p = load_profile(_profile(tmp_path, config_args='["--trust-remote-code"]'))
    why = p.remote_code_refusal()
    assert why is not None and "server_configs[1] (id 'spec').serve_args" in why


def test_a_draft_model_from_the_hub_needs_its_own_commit(tmp_path: Path) -> None:
    top = f'revision = "{COMMIT}"\nserve_args = ["--trust-remote-code"]'
    draft = 'model = "some-org/draft", num_speculative_tokens = 2'
    why = load_profile(_profile(tmp_path, top, draft)).remote_code_refusal()
    assert why is not None and "'some-org/draft'" in why and "server_configs[1]" in why
    pinned = f'{draft}, revision = "{COMMIT}"'
    assert load_profile(_profile(tmp_path, top, pinned)).remote_code_refusal() is None


def test_without_remote_code_nothing_needs_pinning(tmp_path: Path) -> None:
    assert load_profile(_profile(tmp_path)).remote_code_refusal() is None


@pytest.mark.parametrize("rev", ["main", "v1.0", COMMIT[:12], COMMIT.upper()])
def test_a_revision_that_is_not_a_commit_is_refused(tmp_path: Path, rev: str) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(_profile(tmp_path, f'revision = "{rev}"'))
    msg = str(err.value)
    assert "field `revision`" in msg and "40-character commit" in msg


def test_a_revision_in_serve_args_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(_profile(tmp_path, config_args=f'["--revision", "{COMMIT}"]'))
    msg = str(err.value)
    assert "server_configs[1] (id 'spec').serve_args" in msg and "revision = " in msg


def test_server_env_inherit_takes_variable_names(tmp_path: Path) -> None:
    p = load_profile(_profile(tmp_path, 'server_env_inherit = ["HF_TOKEN"]'))
    assert p.server_env_inherit == ["HF_TOKEN"]
    assert p.hash() == load_profile(_profile(tmp_path)).hash()  # measures nothing
    with pytest.raises(ProfileError, match="server_env_inherit"):
        load_profile(_profile(tmp_path, 'server_env_inherit = ["HF TOKEN"]'))


# -- a --config file read as vLLM reads it (issue #54) ------------------------------------

TRUSTING_YAML = {
    "flow-style": "{seed: 0, trust_remote_code: true}\n",
    "alias": "enforce-eager: &yes true\ntrust-remote-code: *yes\n",
    "aliased-key": "name: &key trust_remote_code\n*key : true\n",
    "complex-key": "? trust_remote_code\n: true\n",
    "yaml-1.1-yes": "trust_remote_code: yes\n",
    "quoted-key": '"trust-remote-code": True\n',
}


@pytest.mark.parametrize("text", list(TRUSTING_YAML.values()), ids=list(TRUSTING_YAML))
def test_a_config_file_trusts_remote_code_however_its_yaml_spells_it(
        tmp_path: Path, text: str) -> None:
    yaml = tmp_path / "serve.yaml"
    yaml.write_text(text)
    assert trusts_remote_code(["--config", str(yaml)])


def test_the_command_line_wins_over_a_config_file_as_in_vllm(tmp_path: Path) -> None:
    yaml = tmp_path / "serve.yaml"
    yaml.write_text("{trust_remote_code: true}\n")
    # vLLM's api_server puts the file's options before the whole command line
    # (FlexibleArgumentParser._pull_args_from_config): every option given there wins.
    assert trusts_remote_code(["--seed", "0", "--config", str(yaml)])
    assert not trusts_remote_code(["--config", str(yaml), "--no-trust-remote-code"])
    assert not trusts_remote_code(["--no-trust-remote-code", "--config", str(yaml)])


def test_the_file_expands_into_the_options_vllms_own_parser_makes(tmp_path: Path) -> None:
    """Our reading of a --config file against vLLM's own (FlexibleArgumentParser.
    load_config_file), on a file with every kind of value it maps."""
    argparse_utils = need_module("vllm.utils.argparse_utils")
    from specperf.config.remote_code import config_file_args

    yaml = tmp_path / "serve.yaml"
    yaml.write_text("base: &b {x: 1}\n? trust_remote_code\n: yes\nenforce-eager: false\n"
                    "seed: 3\nspeculative-config: *b\nallowed-origins: [a, b]\nempty: []\n")
    parser = argparse_utils.FlexibleArgumentParser()
    parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction)
    assert config_file_args(yaml, negatable={"--no-enforce-eager"}) == \
        parser.load_config_file(str(yaml))


def test_a_separate_tokenizer_from_the_hub_needs_its_own_commit(tmp_path: Path) -> None:
    top = (f'revision = "{COMMIT}"\n'
           'serve_args = ["--trust-remote-code", "--tokenizer", "other-org/tok"]')
    why = load_profile(_profile(tmp_path, top)).remote_code_refusal()
    assert why is not None and "'other-org/tok'" in why and "tokenizer_revision" in why
    pinned = load_profile(_profile(tmp_path, top + f'\ntokenizer_revision = "{COMMIT[::-1]}"'))
    assert pinned.remote_code_refusal() is None


def test_a_tokenizer_revision_without_a_separate_tokenizer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as err:
        load_profile(_profile(tmp_path, f'tokenizer_revision = "{COMMIT}"'))
    assert "tokenizer_revision" in str(err.value) and "--tokenizer" in str(err.value)
