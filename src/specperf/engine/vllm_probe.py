"""Server configs checked against one vLLM's own argument parser and SpeculativeConfig,
without loading a model: what `specperf check` runs, in the environment of the vLLM it
checks against.

It is run as a script in environments that hold vLLM but not specperf (the throwaway
venvs of `specperf check --vllm V`, specperf.lab.vllm_envs), so it imports nothing of
specperf and only the standard library, vLLM and pydantic (a dependency of every vLLM
this checks). It is run with ``python -I`` (no script directory on sys.path: this
directory's ``datasets.py`` would shadow the Hugging Face package) as::

    python -I vllm_probe.py --out RESULT.json  < CONFIGS.json

CONFIGS.json is a list of ``{"id", "serve_args", "speculative_config"}``; RESULT.json
gets ``{"vllm_version", "python", "checked", "findings", "notes"}``, one finding per
problem: ``{"index", "config_id", "flag", "problem", "fix", "severity"}`` (``index``:
the config's position in CONFIGS.json) (severity ``error``:
the server would not start; ``warning``: it starts, but the flag is deprecated). The
result goes to a file because vLLM logs to stdout.

What is checked, per server config, exactly as the server would get it
(specperf.engine.server.build_argv):

* the argument list, by the parser vLLM's API server builds (``make_arg_parser`` on a
  ``FlexibleArgumentParser``, so ``_`` for ``-``, JSON options and choices behave as in
  the server): an unknown flag (renamed or removed in this release) with the closest
  flag this vLLM has, a bad value or choice, a deprecated flag;
* ``--speculative-config``, key by key against SpeculativeConfig's fields, each value by
  pydantic against the field's annotation and constraints, the method against
  ``SpeculativeMethod``. Constructing SpeculativeConfig itself would load the target's
  and the draft's HF configs (its ``__post_init__``); what needs the models (a draft's
  n_predict, vocabularies) is left to the server start and specperf.engine.preflight.

specperf.engine.spec_validation uses :func:`spec_findings` in-process at collection.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import json
import os
import platform
import sys
import typing
from functools import cache
from typing import Any

#: Where each piece lives, newest release first (vLLM moved them between releases).
_PARSER_CLASS = ("vllm.utils.argparse_utils", "vllm.utils")
_MAKE_PARSER = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
_SPEC_CONFIG = ("vllm.config.speculative", "vllm.config")

#: The model argument a probe passes: the parser wants one, nothing loads it.
PROBE_MODEL = "specperf-check/model-not-loaded"


class _ParseFailed(Exception):
    """argparse's error(), raised instead of printing usage and exiting."""


def _restoring_environ(load: typing.Callable[[], Any]) -> Any:
    # Importing vLLM sets variables in os.environ (TORCHINDUCTOR_CACHE_DIR, ...); the
    # servers a specperf process starts later would inherit them over the run
    # directory's caches (specperf.engine.server.run_env), so the environment is put
    # back as it was.
    before = dict(os.environ)
    try:
        return load()
    finally:
        for key in set(os.environ) - set(before):
            del os.environ[key]
        for key, value in before.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


def _first_attr(modules: tuple[str, ...], name: str) -> Any:
    tried = []
    for module in modules:
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError as exc:
            tried.append(f"{module} ({exc})")
            continue
        if found is not None:
            return found
        tried.append(f"{module} (no {name})")
    raise ImportError(f"{name} not found in " + ", ".join(tried))


def vllm_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "?"))


class SpecFields(typing.NamedTuple):
    #: field name → a validator of its values (None: the key is checked, not the value)
    adapters: dict[str, Any]
    #: the method names vLLM knows (empty: this release lists none; methods not checked)
    methods: tuple[str, ...]
    version: str


@cache
def spec_fields() -> SpecFields:
    """SpeculativeConfig's init fields, each with a pydantic validator of its values."""
    return _restoring_environ(_spec_fields)


def _spec_fields() -> SpecFields:
    from pydantic import TypeAdapter

    cls = _first_attr(_SPEC_CONFIG, "SpeculativeConfig")
    try:
        method_type = _first_attr(_SPEC_CONFIG, "SpeculativeMethod")
    except ImportError:
        method_type = None
    adapters: dict[str, Any] = {}
    pyd = getattr(cls, "__pydantic_fields__", None)
    if pyd is not None:
        # A field with its own validator (attention_backend: "auto" or a name) takes
        # values its annotation alone would refuse: for those, the key is checked.
        decorators = getattr(cls, "__pydantic_decorators__", None)
        own = {f for d in (decorators.field_validators.values() if decorators else ())
               for f in d.info.fields}
        for name, info in pyd.items():
            if info.init is False:
                continue
            if name in own:
                adapters[name] = None
                continue
            ann = info.annotation
            adapters[name] = _adapter(TypeAdapter, typing.Annotated[(ann, *info.metadata)]
                                      if info.metadata else ann)
    else:
        # Older releases: a plain dataclass (annotations only, no constraints).
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - unresolvable annotations: keys only
            hints = {}
        for f in dataclasses.fields(cls):
            if f.init:
                adapters[f.name] = _adapter(TypeAdapter, hints[f.name]) if f.name in hints else None
    methods = _literal_values(method_type) if method_type is not None else ()
    return SpecFields(adapters, methods, vllm_version())


def _adapter(type_adapter: Any, tp: Any) -> Any:
    try:
        return type_adapter(tp)
    except Exception:  # noqa: BLE001 - a type pydantic cannot build alone: key check only
        return None


def _literal_values(tp: Any) -> tuple[str, ...]:
    out: list[str] = []
    for arg in typing.get_args(tp):
        if isinstance(arg, str):
            out.append(arg)
        else:
            out.extend(_literal_values(arg))
    return tuple(out)


def spec_findings(spec: dict[str, Any]) -> list[dict[str, str]]:
    """What this vLLM would refuse in a speculative config: one ``{flag, problem, fix}``
    per key."""
    from pydantic import ValidationError

    f = spec_fields()
    out: list[dict[str, str]] = []

    def add(key: str, problem: str, fix: str) -> None:
        out.append({"flag": f"--speculative-config.{key}", "problem": problem, "fix": fix})

    for key, value in spec.items():
        if key not in f.adapters:
            close = difflib.get_close_matches(key, list(f.adapters), n=1)
            hint = (f"did you mean {close[0]!r}?" if close
                    else "see SpeculativeConfig in vllm/config/speculative.py")
            add(key, f"key {key!r} is not a field of vLLM {f.version}'s SpeculativeConfig",
                f"remove it ({hint})")
            continue
        if key == "method" and f.methods and value not in f.methods:
            add(key, f"method {value!r} is not one vLLM {f.version} knows",
                f"use one of {', '.join(f.methods)}")
            continue
        adapter = f.adapters[key]
        if adapter is None:
            continue
        try:
            # strict: what reaches vLLM is JSON (--speculative-config), so "3" must not
            # pass here as the int 3.
            adapter.validate_json(json.dumps(value), strict=True)
        except ValidationError as exc:
            msg = "; ".join(e["msg"] for e in exc.errors())
            add(key, f"{key} = {value!r}: {msg} (vLLM {f.version})",
                "give a value of the field's type")
    return out


# --------------------------------------------------------------------------- the parser


def _build_parser() -> argparse.ArgumentParser:
    parser_class = _first_attr(_PARSER_CLASS, "FlexibleArgumentParser")
    make_arg_parser = _first_attr(_MAKE_PARSER, "make_arg_parser")
    parser = make_arg_parser(parser_class(description="specperf check"))

    def error(message: str) -> typing.NoReturn:
        raise _ParseFailed(message)

    # argparse reports every parse error through error(), which prints and exits.
    parser.error = error  # type: ignore[method-assign]
    return parser


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [s for s in parser._option_string_actions if s.startswith("--")]


def _deprecated_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    # vLLM marks a renamed flag deprecated for a release or two before removing it: its
    # own set on Python < 3.13, argparse's `deprecated` attribute from 3.13.
    marked = set(getattr(parser, "_deprecated", ()) or ())
    return [a for a in parser._actions if a in marked or getattr(a, "deprecated", False)]


def check_argv(parser: argparse.ArgumentParser, config_id: str, serve_args: list[str],
               spec: dict[str, Any] | None, version: str) -> list[dict[str, str]]:
    argv = ["--model", PROBE_MODEL, *serve_args]
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, sort_keys=True)]
    findings: list[dict[str, str]] = []

    def add(flag: str, problem: str, fix: str, severity: str = "error") -> None:
        findings.append({"config_id": config_id, "flag": flag, "problem": problem, "fix": fix,
                         "severity": severity})

    try:
        ns = parser.parse_args(argv)
    except _ParseFailed as exc:
        message = str(exc)
        if message.startswith("unrecognized arguments:"):
            unknown = [a for a in message.split(":", 1)[1].split() if a.startswith("-")]
            for arg in unknown or [message]:
                name = arg.split("=", 1)[0]
                close = difflib.get_close_matches(name, _flags(parser), n=1, cutoff=0.6)
                add(name, f"vLLM {version}'s server has no flag {name}",
                    f"use {close[0]} (the closest flag it has) or remove it" if close
                    else "remove it (see `vllm serve --help` of that release)")
            # The speculative config is still checked: an unknown flag must not hide it.
            if isinstance(spec, dict):
                for f in spec_findings(spec):
                    add(f["flag"], f["problem"], f["fix"])
        else:
            add(_flag_in(message), f"vLLM {version}'s server refuses the arguments: {message}",
                "give a value the flag takes")
        return findings
    except Exception as exc:  # noqa: BLE001 - vLLM's own checks in parse_args raise anything
        add("(arguments)", f"vLLM {version}'s parser refuses the arguments: "
            f"{type(exc).__name__}: {exc}", "see the message")
        return findings
    for action in _deprecated_actions(parser):
        if getattr(ns, action.dest, action.default) != action.default:
            flag = next((s for s in action.option_strings if s.startswith("--")), action.dest)
            add(flag, f"{flag} is deprecated in vLLM {version}",
                "use its replacement (vLLM's help for the flag names it) before a release "
                "removes it", severity="warning")
    parsed_spec = getattr(ns, "speculative_config", None)
    if isinstance(parsed_spec, dict):
        for f in spec_findings(parsed_spec):
            add(f["flag"], f["problem"], f["fix"])
    return findings


def _flag_in(message: str) -> str:
    # "argument --dtype: invalid choice: 'float33' (choose from ...)"
    if message.startswith("argument "):
        return message[len("argument "):].split(":", 1)[0].split("/", 1)[0]
    return "(arguments)"


def probe(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every config checked; the result :mod:`specperf.cli.check` reads."""
    version = _restoring_environ(vllm_version)
    parser = _restoring_environ(_build_parser)
    findings: list[dict[str, Any]] = []
    for index, cfg in enumerate(configs):
        for f in check_argv(parser, str(cfg["id"]), list(cfg.get("serve_args") or []),
                            cfg.get("speculative_config"), version):
            findings.append({"index": index, **f})
    notes = []
    if not spec_fields().methods:
        notes.append(f"vLLM {version} lists no SpeculativeMethod: method names not checked")
    return {"vllm_version": version, "python": platform.python_version(),
            "checked": len(configs), "findings": findings, "notes": notes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="check server configs against this vLLM")
    ap.add_argument("--out", required=True, help="where the result JSON goes")
    args = ap.parse_args(argv)
    configs = json.load(sys.stdin)
    result = probe(configs)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
