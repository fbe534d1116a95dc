"""What a vLLM server inherits of specperf's environment: what vLLM, torch and CUDA read,
less secrets."""

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
    monkeypatch.setenv("VLLM_TEST_SETTING", "kept")
    monkeypatch.setenv("SPECPERF_TEST_SETTING", "the suite's, not the server's")
    env = server.run_env(tmp_path / "run", {"MY_API_KEY": "from-the-profile"}, offline=True)
    assert "HF_TOKEN" not in env and "ACTIONS_RUNTIME_TOKEN" not in env
    assert env["VLLM_TEST_SETTING"] == "kept" and "SPECPERF_TEST_SETTING" not in env
    assert env["MY_API_KEY"] == "from-the-profile"  # the profile's own env table still applies
    env = server.run_env(tmp_path / "run", {}, offline=True, inherit=["HF_TOKEN"])
    assert env["HF_TOKEN"] == "hf_secret" and "ACTIONS_RUNTIME_TOKEN" not in env


#: Credentials in variables whose names say nothing of a secret (issue #54): none of them
#: is anything vLLM, torch or CUDA reads.
CREDENTIALS_IN_OTHER_NAMES = {
    "PIP_INDEX_URL": "https://user:pass@pypi.internal/simple",
    "PIP_EXTRA_INDEX_URL": "https://user:pass@pypi.internal/extra",
    "UV_INDEX_URL": "https://user:pass@uv.internal/simple",
    "HTTPS_PROXY": "http://user:pass@proxy.internal:3128",
    "https_proxy": "http://user:pass@proxy.internal:3128",
    "HTTP_PROXY": "http://user:pass@proxy.internal:3128",
    "ALL_PROXY": "socks5://user:pass@proxy.internal:1080",
    "NETRC": "/home/u/.netrc",
    "KUBECONFIG": "/home/u/.kube/config",
    "DOCKER_CONFIG": "/home/u/.docker",
    "DATABASE_URL": "postgres://user:pass@db/x",
}


@pytest.mark.parametrize("name", sorted(CREDENTIALS_IN_OTHER_NAMES))
def test_credentials_in_other_variables_do_not_reach_the_servers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, CREDENTIALS_IN_OTHER_NAMES[name])
    env = server.run_env(tmp_path / "run", {}, offline=True)
    assert name not in env
    assert not any("user:pass" in v for v in env.values())
    assert name in withheld({name: "x"})
    # A profile that needs one in its servers (an online proxy) names it.
    assert server.run_env(tmp_path / "run", {}, offline=True, inherit=[name])[name] == \
        CREDENTIALS_IN_OTHER_NAMES[name]


#: What vLLM, torch, CUDA, the BLAS/OpenMP runtimes and Hugging Face's offline mode read
#: (vllm/envs.py in vllm 0.32 for VLLM_*, XDG_*, LD_LIBRARY_PATH, CUDA_HOME).
NEEDED = ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH", "LD_PRELOAD",
          "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "NVIDIA_VISIBLE_DEVICES",
          "VLLM_CPU_KVCACHE_SPACE", "VLLM_LOGGING_LEVEL", "HF_HOME", "HF_HUB_OFFLINE",
          "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_IMPLICIT_TOKEN", "TOKENIZERS_PARALLELISM",
          "OMP_NUM_THREADS", "KMP_AFFINITY", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
          "TORCH_CUDA_ARCH_LIST", "PYTORCH_CUDA_ALLOC_CONF", "TRITON_CACHE_DIR",
          "NCCL_DEBUG", "XDG_CACHE_HOME", "CXX", "MALLOC_CONF"]


def test_the_servers_inherit_what_vllm_torch_and_cuda_read() -> None:
    environ = {name: "v" for name in NEEDED} | {"VLLM_API_KEY": "k", "HF_TOKEN": "hf_x"}
    assert server_environ(environ) == {name: "v" for name in NEEDED}
