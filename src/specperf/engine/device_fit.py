"""Where the devices a run's servers share come from, and the refusal of a profile
whose servers cannot fit them (specperf.analysis.device_memory is the arithmetic).

The devices, in order: nvidia-smi on a GPU box (the GPUs CUDA_VISIBLE_DEVICES leaves
visible, their memory.total); else the profile's ``[hardware]`` table; else the GPU
hardware id of a baseline file of the profile (baselines/<profile>/gpu-….json); else
none: a CPU profile, not device-checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from specperf.analysis.device_memory import (
    DeviceInventory,
    FitReport,
    check_fit,
    inventory_from_hardware_id,
    refusal,
    resident_sets,
)
from specperf.config.profile import Profile
from specperf.store.provenance import gpu_memory, hardware_slug

__all__ = ["device_inventory", "fit_report", "gpu_inventory", "memory_refusal",
           "profile_hardware_id"]


def gpu_inventory() -> DeviceInventory | None:
    """The GPUs of this machine this process may use (nvidia-smi), or None. On a machine
    of mixed cards the smallest one's memory counts."""
    gpus = gpu_memory()
    if not gpus:
        return None
    names = {name for _, name, _ in gpus}
    name = names.pop() if len(names) == 1 else "mixed"
    return DeviceInventory(len(gpus), min(m for _, _, m in gpus) / 1024, "nvidia-smi",
                           hardware_slug(name, len(gpus)))


def profile_hardware_id(profile: Profile, baselines_root: Path | None = None) -> str | None:
    """The GPU hardware id the profile is written for: its ``[hardware] id``, else the one
    GPU id among its baseline files (several: the first, by name)."""
    if profile.hardware is not None and profile.hardware.id is not None:
        return profile.hardware.id
    if baselines_root is None:
        return None
    ids = sorted(p.stem for p in (baselines_root / profile.name).glob("gpu-*.json"))
    return ids[0] if ids else None


def device_inventory(profile: Profile, baselines_root: Path | None = None, *,
                     probe: bool = True) -> DeviceInventory | None:
    """The devices the profile's servers are checked against (module docstring); None for
    a CPU profile on a machine without a GPU. ``probe``: ask nvidia-smi first."""
    if probe:
        found = gpu_inventory()
        if found is not None:
            return found
    hw = profile.hardware
    hardware_id = profile_hardware_id(profile, baselines_root)
    if hardware_id is not None:
        src = ("the profile's [hardware] id" if hw is not None and hw.id == hardware_id
               else "its baseline file's hardware id")
        return inventory_from_hardware_id(
            hardware_id, memory_gib=hw.device_memory_gib if hw else None,
            devices=hw.devices if hw else None, source=src)
    if hw is not None and hw.device_memory_gib is not None:
        return DeviceInventory(hw.devices or 1, hw.device_memory_gib,
                               "the profile's [hardware] device_memory_gib", estimated=True)
    return None


def fit_report(profile: Profile, inventory: DeviceInventory,
               config_ids: list[str] | None = None, attributed: Iterable[str] = ()
               ) -> FitReport:
    return check_fit(resident_sets(profile, config_ids=config_ids, attributed=attributed),
                     inventory)


def memory_refusal(profile: Profile, baselines_root: Path | None = None, *,
                   probe: bool = True, attributed: Iterable[str] = ()) -> str | None:
    """Why the profile's servers cannot be resident as its run needs them on its devices
    (one line per misfit, naming configs and GiB), or None (fits, or a CPU profile)."""
    inventory = device_inventory(profile, baselines_root, probe=probe)
    if inventory is None:
        return None
    why = refusal(fit_report(profile, inventory, attributed=attributed))
    if why is None:
        return None
    src = profile.source or Path(f"{profile.name}.toml")
    return f"{src}: the servers do not fit the device memory: {why}"
