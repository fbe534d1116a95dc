"""What a server's arguments let run: the spellings of vLLM's options that pin a commit or
trust a repository's code, and a ``--config`` file read as vLLM reads it.

A server that trusts remote code runs Python from a Hugging Face repository as it is when
the server starts; only a commit pins it. Whether the arguments trust it is decided here
from the options vLLM's parser will see, not from how they look: vLLM reads a ``--config``
file with ``yaml.safe_load`` and puts its options before the whole command line
(vllm/utils/argparse_utils.py in vllm 0.32, FlexibleArgumentParser._pull_args_from_config
and load_config_file), so a flow-style mapping, an alias or a complex key turns it on as
surely as ``--trust-remote-code`` does (issue #54: a line regex saw none of them).

Pure Python, no vLLM (PyYAML is imported when a file is read: wherever vLLM runs, its
dependency is installed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Container
from pathlib import Path
from typing import Any

from specperf.config.tiny_models import TINY_PREFIX

__all__ = ["COMMIT", "ConfigFileError", "config_file_args", "on_hub", "revision_option",
           "tokenizer_of", "trusts_remote_code", "vllm_args"]

#: A Hugging Face commit: what a revision must be (a branch or a tag can move).
COMMIT = re.compile(r"^[0-9a-f]{40}$")


def on_hub(model: str) -> bool:
    """Whether vLLM fetches ``model`` from the Hugging Face hub (not a generated tiny
    model, not a directory on this machine)."""
    if model.startswith(TINY_PREFIX):
        return False
    return not Path(model).expanduser().exists()


#: vLLM's revision options (vllm/engine/arg_utils.py in vllm 0.32), each with the shortest
#: abbreviation argparse takes for it alone among `vllm serve`'s options: set by the suite
#: from `revision` and `tokenizer_revision`. ``--tokenizer`` itself is another option,
#: hence its longer stem.
_REVISION_OPTIONS = (("--revision", "--rev"), ("--code-revision", "--code"),
                     ("--tokenizer-revision", "--tokenizer-r"))
#: --trust-remote-code is a BooleanOptionalAction: argparse takes any prefix of it down to
#: "--trust-rem" (shorter ones are shared with --trust-request-*) and
#: --no-trust-remote-code, or its prefix down to "--no-trust-rem", turns it off.
_TRUST, _TRUST_MIN = "--trust-remote-code", "--trust-rem"
_NO_TRUST, _NO_TRUST_MIN = "--no-trust-remote-code", "--no-trust-rem"
#: ``--tokenizer`` has no abbreviation of its own: every prefix of it is also one of
#: --tokenizer-mode and --tokenizer-revision (argparse refuses an ambiguous one).
_TOKENIZER = "--tokenizer"


class ConfigFileError(ValueError):
    """A ``--config`` file vLLM could not read either (the message says why)."""


def option_name(arg: str) -> str:
    """``--trust_remote_code=1`` → ``--trust-remote-code``: vLLM takes ``_`` for ``-``."""
    return arg.split("=", 1)[0].replace("_", "-")


def revision_option(arg: str) -> str | None:
    """The vLLM revision option ``arg`` spells (``--revision=x``, ``--code_revision``,
    ``--rev``), or None."""
    if not arg.startswith("--"):
        return None
    name = option_name(arg)
    for opt, stem in _REVISION_OPTIONS:
        if name.startswith(stem) and opt.startswith(name):
            return opt
    return None


def config_file_args(path: Path, negatable: Container[str] | None = None) -> list[str]:
    """The options vLLM makes of a ``--config`` YAML file, as its load_config_file makes
    them: ``key: true`` → ``--key``, ``false`` → ``--no-key`` (where vLLM's parser has one:
    ``negatable``, None for every option), a list → ``--key item…`` (none when empty), a
    mapping → ``--key <json>``, anything else → ``--key str(value)``. Raises
    :class:`ConfigFileError` where vLLM would fail to read it."""
    if path.name.split(".")[-1] not in ("yaml", "yml"):
        raise ConfigFileError(f"--config {path}: vLLM reads only a .yaml or .yml file")
    try:
        import yaml
    except ImportError:  # pragma: no cover - vLLM depends on PyYAML
        raise ConfigFileError(f"--config {path}: PyYAML is not installed to read it "
                              "(vLLM, which reads it, depends on it)") from None
    try:
        with path.open(encoding="utf-8") as f:
            config: Any = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigFileError(f"--config {path}: cannot be read ({' '.join(str(exc).split())})"
                              ) from None
    if not isinstance(config, dict) or not all(isinstance(k, str) for k in config):
        raise ConfigFileError(f"--config {path}: vLLM needs a mapping of option names to "
                              "values")
    out: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            if value:
                out.append("--" + key)
            elif negatable is None or f"--no-{key}" in negatable:
                out.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                out += ["--" + key, *(str(item) for item in value)]
        elif isinstance(value, dict):
            out += ["--" + key, json.dumps(value)]
        else:
            out += ["--" + key, str(value)]
    return out


def vllm_args(args: list[str]) -> list[str]:
    """``args`` as vLLM's api_server parser takes them: a ``--config`` file's options
    first, then the rest of the command line (which therefore wins). ``--config=FILE`` is
    read too, though vLLM would not expand it: a check may see more, never less. Raises
    :class:`ConfigFileError`."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--config" or arg.startswith("--config="):
            if "=" in arg:
                where, i = arg.split("=", 1)[1], i + 1
            elif i + 1 < len(args):
                where, i = args[i + 1], i + 2
            else:
                raise ConfigFileError("--config names no file")
            front += config_file_args(Path(where))
            continue
        rest.append(arg)
        i += 1
    return front + rest


def trusts_remote_code(args: list[str]) -> bool:
    """Whether this list of serve_args turns on vLLM's trust_remote_code in any spelling
    vLLM takes: the option, ``_`` for ``-``, an abbreviation, or a ``--config`` file that
    sets it. The last --trust-remote-code / --no-trust-remote-code wins, as in vLLM.
    Raises :class:`ConfigFileError` for a config file that cannot be read."""
    on = False
    for arg in vllm_args(args):
        if not arg.startswith("--"):
            continue
        name = option_name(arg)
        if name.startswith(_NO_TRUST_MIN) and _NO_TRUST.startswith(name):
            on = False
        elif name.startswith(_TRUST_MIN) and _TRUST.startswith(name):
            on = True
    return on


def tokenizer_of(args: list[str], *, expand: bool = True) -> str | None:
    """The separate tokenizer these serve_args name (``--tokenizer X``,
    ``--tokenizer=X``; the last one, as in vLLM), or None. ``expand``: with a
    ``--config`` file's options (raises :class:`ConfigFileError`)."""
    seen = vllm_args(args) if expand else args
    found = None
    for i, arg in enumerate(seen):
        if not arg.startswith("--") or option_name(arg) != _TOKENIZER:
            continue
        if "=" in arg:
            found = arg.split("=", 1)[1]
        elif i + 1 < len(seen):
            found = seen[i + 1]
    return found
