"""Which of this process's environment variables a vLLM server inherits: all but secrets.

Why: a server runs a model's code (with --trust-remote-code, code from the model's own
repository), and every library it loads may read its environment. A Hugging Face token
there can push to the owner's repositories; a GitHub Actions runtime token can write the
workflow's caches and artifacts. The perf run itself needs none of them: models are
downloaded before it, by a step of their own (scripts/download_models.py), and the run is
offline. A profile that does need one in its servers names it in ``server_env_inherit``
(docs/profiles.md); its own ``env`` table is applied after this filter, as before.

The rule, on a name split at ``_`` into words (upper-cased), one home for it: a variable
is withheld when

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

__all__ = ["NOT_SECRETS", "is_secret_name", "server_environ", "withheld"]

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


def server_environ(environ: Mapping[str, str], inherit: Collection[str] = ()) -> dict[str, str]:
    """``environ`` without its secret-looking variables, except those named in ``inherit``
    (a profile's ``server_env_inherit``; names compared exactly, as the OS does)."""
    keep = set(inherit)
    return {k: v for k, v in environ.items() if k in keep or not is_secret_name(k)}


def withheld(environ: Mapping[str, str], inherit: Collection[str] = ()) -> list[str]:
    """The names :func:`server_environ` leaves out, sorted (never their values)."""
    keep = set(inherit)
    return sorted(k for k in environ if k not in keep and is_secret_name(k))
