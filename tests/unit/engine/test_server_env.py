"""What a vLLM server inherits of specperf's environment: everything but secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.engine import server
from specperf.engine.server_env import is_secret_name, server_environ, withheld

SECRETS = ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_TOKEN", "HF_TOKEN_PATH",
           "GITHUB_TOKEN", "GH_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL",
           "ACTIONS_RESULTS_URL", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "VLLM_API_KEY",
           "S3_SECRET_ACCESS_KEY", "OAUTH_CLIENT_SECRET", "GOOGLE_APPLICATION_CREDENTIALS",
           "DB_PASSWORD", "npm_token", "GH_PAT", "SSH_AUTH_SOCK", "SIGNING_KEY_FILE"]
SETTINGS = ["PATH", "HOME", "HF_HOME", "HF_HUB_OFFLINE", "CUDA_VISIBLE_DEVICES",
            "TOKENIZERS_PARALLELISM", "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE",
            "VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD", "HF_HUB_DISABLE_IMPLICIT_TOKEN",
            "SPECPERF_PROFILE", "LD_PRELOAD", "KEYBOARD", "GITHUB_SHA", "RUNNER_TEMP"]


@pytest.mark.parametrize("name", SECRETS)
def test_secret_looking_names_are_withheld(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", SETTINGS)
def test_settings_are_inherited(name: str) -> None:
    assert not is_secret_name(name)


def test_a_profile_names_what_its_servers_may_inherit() -> None:
    environ = {"HF_TOKEN": "hf_x", "GITHUB_TOKEN": "ghs_x", "PATH": "/bin"}
    assert server_environ(environ) == {"PATH": "/bin"}
    assert server_environ(environ, ["HF_TOKEN"]) == {"HF_TOKEN": "hf_x", "PATH": "/bin"}
    assert withheld(environ, ["HF_TOKEN"]) == ["GITHUB_TOKEN"]


def test_run_env_withholds_secrets_but_applies_the_profiles_env(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("ACTIONS_RUNTIME_TOKEN", "runtime")
    monkeypatch.setenv("SPECPERF_TEST_SETTING", "kept")
    env = server.run_env(tmp_path / "run", {"MY_API_KEY": "from-the-profile"}, offline=True)
    assert "HF_TOKEN" not in env and "ACTIONS_RUNTIME_TOKEN" not in env
    assert env["SPECPERF_TEST_SETTING"] == "kept"
    assert env["MY_API_KEY"] == "from-the-profile"  # the profile's own env table still applies
    env = server.run_env(tmp_path / "run", {}, offline=True, inherit=["HF_TOKEN"])
    assert env["HF_TOKEN"] == "hf_secret" and "ACTIONS_RUNTIME_TOKEN" not in env
