"""Profiles' server configs checked against one vLLM's argument parser and speculative
config classes, in that vLLM's own Python (`specperf check`).

The check itself is specperf.engine.vllm_probe, run as a subprocess (an argument list)
by the Python of the environment that holds the vLLM to check against: this one's for
the installed vLLM, a cached throwaway venv's for another release
(specperf.lab.vllm_envs). Each server config is checked with the argument list its
server would get (specperf.engine.server.build_argv): the profile's serve_args, the
config's, its speculative config. No model is loaded and no GPU is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from specperf.config.profile import Profile
from specperf.engine import vllm_probe

#: The probe's own run (vLLM's import and parser): seconds; generous for a slow machine.
PROBE_TIMEOUT_S = 600


class ProbeError(RuntimeError):
    """The probe did not run to its result; the message has its output's tail."""


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: str
    file: str
    config_id: str
    field: str
    flag: str
    problem: str
    fix: str
    severity: Literal["error", "warning"]


class CheckResult(BaseModel):
    """What `specperf check --json` prints."""

    model_config = ConfigDict(extra="forbid")

    vllm_version: str
    python: str
    profiles: list[str]
    configs_checked: int
    findings: list[Finding]
    notes: list[str]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]


def server_configs(profile: Profile) -> list[dict[str, Any]]:
    """Each config as its server would get it: the profile's serve_args, then its own."""
    return [{"id": cfg.id, "serve_args": [*profile.serve_args, *cfg.serve_args],
             "speculative_config": cfg.speculative_config}
            for cfg in profile.server_configs]


def _field(profile: Profile, n: int, cfg_id: str, flag: str) -> str:
    where = f"server_configs[{n}] (id {cfg_id!r})"
    if flag.startswith("--speculative-config."):
        return f"{where}.speculative_config.{flag.split('.', 1)[1]}"
    cfg = profile.server_configs[n]
    name = flag.split("=", 1)[0]
    if any(a.split("=", 1)[0] == name for a in cfg.serve_args):
        return f"{where}.serve_args"
    if any(a.split("=", 1)[0] == name for a in profile.serve_args):
        return "serve_args"
    return f"{where} (its arguments)"


def run_probe(python: Path | str, configs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The probe's result for ``configs``, run by ``python``; :class:`ProbeError` if none."""
    probe_file = Path(vllm_probe.__file__)
    with tempfile.TemporaryDirectory(prefix="specperf-check-") as tmp:
        out = Path(tmp) / "result.json"
        # -I: no script directory on sys.path (this package's datasets.py would shadow
        # the Hugging Face one), no PYTHON* variables, no user site.
        argv = [str(python), "-I", str(probe_file), "--out", str(out)]
        try:
            done = subprocess.run(argv, input=json.dumps(list(configs)), capture_output=True,
                                  text=True, timeout=PROBE_TIMEOUT_S, cwd=tmp,
                                  env=dict(os.environ), check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ProbeError(f"{' '.join(argv)}: {exc}") from None
        if done.returncode != 0 or not out.is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
            raise ProbeError(f"the check in {python} exited {done.returncode} without a "
                             f"result:\n{tail}")
        return dict(json.loads(out.read_text(encoding="utf-8")))


def check_profiles(python: Path | str, profiles: Sequence[Profile]) -> CheckResult:
    """Every server config of every profile, in one probe run."""
    flat: list[tuple[Profile, int]] = []
    configs: list[dict[str, Any]] = []
    for p in profiles:
        for n, cfg in enumerate(server_configs(p)):
            flat.append((p, n))
            configs.append(cfg)
    raw = run_probe(python, configs)
    findings = []
    for f in raw["findings"]:
        profile, n = flat[int(f["index"])]
        findings.append(Finding(
            profile=profile.name, file=str(profile.source), config_id=f["config_id"],
            field=_field(profile, n, f["config_id"], f["flag"]), flag=f["flag"],
            problem=f["problem"], fix=f["fix"], severity=f["severity"]))
    return CheckResult(vllm_version=raw["vllm_version"], python=raw["python"],
                       profiles=[p.name for p in profiles], configs_checked=raw["checked"],
                       findings=findings, notes=list(raw.get("notes", [])))
