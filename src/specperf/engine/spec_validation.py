"""A profile's speculative configs, checked against the installed vLLM's own
SpeculativeConfig — its keys, its field types and constraints, its method names —
without loading a model.

Each key is looked up among its fields and each value validated with pydantic against
that field's annotation and constraints (e.g. ``num_speculative_tokens: int =
Field(gt=0)``), which is what vLLM's own validation does first; how, and what is left to
the server start, is in specperf.engine.vllm_probe, which `specperf check` also runs in
the environment of another vLLM release, with the server's argument parser.

The pure checks (specperf.config.boundaries) run wherever a profile loads; these run at
collection where vLLM is installed (specperf.plugin).
"""

from __future__ import annotations

from typing import Any

from specperf.config.profile import Profile, ProfileError
from specperf.engine.vllm_probe import spec_fields, spec_findings

#: The installed vLLM's SpeculativeConfig fields and method names (one home:
#: specperf.engine.vllm_probe, which `specperf check` also runs against other releases).
_vllm_fields = spec_fields


def spec_problems(spec: dict[str, Any]) -> list[str]:
    """What the installed vLLM would refuse in this speculative config, one line each."""
    return [f"{f['problem']} — fix: {f['fix']}" for f in spec_findings(spec)]


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
