"""A profile's speculative configs, checked against the installed vLLM's own
SpeculativeConfig — its keys, its field types and constraints, its method names —
without loading a model.

Constructing SpeculativeConfig itself would load the target's and the draft's HF configs
(its __post_init__), so instead each key is looked up among its fields and each value
validated with pydantic against that field's annotation and constraints (e.g.
``num_speculative_tokens: int = Field(gt=0)``), which is what vLLM's own validation does
first. What needs the models (a draft's n_predict, vocabularies) is left to the server
start and specperf.engine.preflight.

The pure checks (specperf.config.boundaries) run wherever a profile loads; these run at
collection where vLLM is installed (specperf.plugin).
"""

from __future__ import annotations

import difflib
import json
import os
import typing
from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError

from specperf.config.profile import Profile, ProfileError


class _Fields(typing.NamedTuple):
    adapters: dict[str, TypeAdapter[Any] | None]
    methods: tuple[str, ...]
    version: str


@cache
def _vllm_fields() -> _Fields:
    # Importing vLLM sets variables in os.environ (TORCHINDUCTOR_CACHE_DIR, ...); the
    # servers this process starts later would inherit them over the run directory's
    # caches (specperf.engine.server.run_env), so the environment is put back as it was.
    before = dict(os.environ)
    try:
        import vllm
        from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod
    finally:
        for key in set(os.environ) - set(before):
            del os.environ[key]
        for key, value in before.items():
            if os.environ.get(key) != value:
                os.environ[key] = value

    # A field with its own validator (attention_backend: "auto" or a name) takes values
    # its annotation alone would refuse: for those, the key is checked, not the value.
    own = {f for d in SpeculativeConfig.__pydantic_decorators__.field_validators.values()
           for f in d.info.fields}
    adapters: dict[str, TypeAdapter[Any] | None] = {}
    for name, info in SpeculativeConfig.__pydantic_fields__.items():
        if info.init is False:
            continue
        if name in own:
            adapters[name] = None
            continue
        ann = info.annotation
        try:
            adapters[name] = TypeAdapter(typing.Annotated[(ann, *info.metadata)]
                                         if info.metadata else ann)
        except Exception:  # noqa: BLE001 - a type pydantic cannot build alone: key check only
            adapters[name] = None
    return _Fields(adapters, _literal_values(SpeculativeMethod),
                   str(getattr(vllm, "__version__", "?")))


def _literal_values(tp: Any) -> tuple[str, ...]:
    out: list[str] = []
    for arg in typing.get_args(tp):
        if isinstance(arg, str):
            out.append(arg)
        else:
            out.extend(_literal_values(arg))
    return tuple(out)


def spec_problems(spec: dict[str, Any]) -> list[str]:
    """What the installed vLLM would refuse in this speculative config, one line each."""
    f = _vllm_fields()
    problems: list[str] = []
    for key, value in spec.items():
        if key not in f.adapters:
            close = difflib.get_close_matches(key, list(f.adapters), n=1)
            hint = (f"did you mean {close[0]!r}?" if close
                    else "see SpeculativeConfig in vllm/config/speculative.py")
            problems.append(f"key {key!r} is not a field of vLLM {f.version}'s SpeculativeConfig "
                            f"— fix: remove it ({hint})")
            continue
        if key == "method" and value not in f.methods:
            problems.append(f"method {value!r} is not one vLLM {f.version} knows — fix: use one "
                            f"of {', '.join(f.methods)}")
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
            problems.append(f"{key} = {value!r}: {msg} (vLLM {f.version}) — fix: give a value "
                            "of the field's type")
    return problems


def check_profile_specs(profile: Profile) -> None:
    """Raise ProfileError naming the file, each bad field and the fix."""
    lines = []
    for n, cfg in enumerate(profile.server_configs):
        if cfg.speculative_config is None:
            continue
        for problem in spec_problems(cfg.speculative_config):
            lines.append(f"  field `server_configs[{n}] (id {cfg.id!r}).speculative_config`: "
                         f"{problem}")
    if lines:
        raise ProfileError(f"{profile.source}: speculative config(s) the installed vLLM "
                           f"would refuse ({len(lines)} problem(s))\n" + "\n".join(lines))
