"""A perf run from an e2e test, as a user starts one: `python -m pytest perf_tests …` in a
subprocess, with an environment that carries nothing of the test session's, and a check
that it left no vLLM process behind. The fault battery (tests/e2e/fault_battery.py) and
the e2e tests of scenarios and checks run theirs through here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from specperf.schemas import RunResult
from tests.support import PERF_PYTEST, REPO_ROOT

RUN_TIMEOUT_S = 900
#: The test session's settings that would change what the child run measures: its pytest
#: options, the ShareGPT override (it beats the profile's prompts), a stand-in's fault.
#: The fault-injecting proxy's variables (SPECPERF_PROXY_*) go too: a test sets its own.
SESSION_ONLY_ENV = ("PYTEST_ADDOPTS", "SPECPERF_SHAREGPT", "SPECPERF_TEST_STANDIN")


def perf_env(extra: dict[str, str] | None = None, *, columns: int = 160) -> dict[str, str]:
    """This process's environment without the session's settings, the console ``columns``
    wide (tests search its lines), plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in SESSION_ONLY_ENV and not k.startswith("SPECPERF_PROXY_")}
    env["COLUMNS"] = str(columns)
    return env | (extra or {})


def perf_argv(profile: Path, run_dir: Path, models: Path, baselines: Path, *args: str,
              retry_inconclusive: bool = False) -> list[str]:
    return [*PERF_PYTEST, "-rA", "--perf-progress", "plain",
            # The guard would measure trials again while the session's other processes are
            # busy; these runs prove behaviour, not figures.
            "--perf-max-outside-cores", "0",
            # Nor, by default, more trials for undecided checks: a few requests decide
            # little, and the extra trials would only lengthen the run.
            *(() if retry_inconclusive else ("--perf-retry-inconclusive=off",)),
            "--perf-profile", str(profile), "--perf-run-dir", str(run_dir),
            "--perf-models-cache", str(models), "--perf-baselines", str(baselines), *args]


@dataclass
class Outcome:
    code: int
    out: str
    run_dir: Path

    @property
    def run(self) -> RunResult:
        return RunResult.model_validate_json((self.run_dir / "run.json").read_text())

    def measured(self) -> set[str]:
        """Config ids with a measured case whose requests succeeded."""
        return {c.case.config_id for c in self.run.cases if c.n_requests > c.n_errors}


def run_perf(root: Path, profile: Path, models: Path, *args: str,
             env: dict[str, str] | None = None, columns: int = 160,
             retry_inconclusive: bool = False, timeout_s: float = RUN_TIMEOUT_S) -> Outcome:
    """One perf run in ``root`` (run directory ``root/run``, baselines ``root/baselines``,
    its console in ``root/run.out``); fails the test if a vLLM server of it outlives it,
    or if it takes longer than ``timeout_s`` (its servers are then killed)."""
    run_dir = root / "run"
    argv = perf_argv(profile, run_dir, models, root / "baselines", *args,
                     retry_inconclusive=retry_inconclusive)
    try:
        proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=timeout_s, env=perf_env(env, columns=columns))
    except subprocess.TimeoutExpired as timed_out:
        # pytest was killed, so its servers were not stopped: kill them here, and keep
        # the console so far for whoever reads why the run took this long.
        (root / "run.out").write_text(_text(timed_out.stdout) + _text(timed_out.stderr))
        left = kill_vllm_left(root)
        raise AssertionError(f"the perf run took more than {timeout_s:.0f} s (console so far: "
                             f"{root / 'run.out'}; vLLM processes killed: {left})") from None
    out = proc.stdout + proc.stderr
    (root / "run.out").write_text(out)
    assert_no_vllm_left(root)
    return Outcome(proc.returncode, out, run_dir)


def vllm_left(marker: Path) -> list[int]:
    """`pgrep -f vllm.entrypoints`, narrowed to servers of this test (their environment
    names its run directory: SPECPERF_RUN_DIR); a neighbour's vLLM is not ours."""
    found = subprocess.run(["pgrep", "-f", "vllm.entrypoints"], capture_output=True,
                           text=True, check=False).stdout.split()
    mine = []
    for pid in found:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if str(marker).encode() in environ:
            mine.append(int(pid))
    return mine


def kill_vllm_left(marker: Path) -> list[int]:
    """The servers of this test still alive after a moment (the run waited for its
    servers; the kernel may not have reaped them yet), killed so that they do not leak
    into the next test."""
    left: list[int] = []
    for _ in range(20):
        left = vllm_left(marker)
        if not left:
            return []
        time.sleep(0.5)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def assert_no_vllm_left(marker: Path) -> None:
    if left := kill_vllm_left(marker):
        raise AssertionError(f"vLLM processes outlived the run: {left}")


def _text(captured: str | bytes | None) -> str:
    # TimeoutExpired carries what was read so far, as bytes even when text=True was asked.
    if isinstance(captured, bytes):
        return captured.decode(errors="replace")
    return captured or ""
