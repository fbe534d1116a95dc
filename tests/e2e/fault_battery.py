"""The fault battery (issue #14): what a machine or vLLM does to a perf run, on real vLLM —
its workspace and checks. The faults are tests/e2e/test_faults*.py, the shared runs
tests/e2e/conftest.py.

Each fault runs `python -m pytest perf_tests …` in a subprocess, as a user does, on a small
profile written into the battery's directory (cpu-ci's generated models and prompts, one
concurrency, two requests per case). Every run is then checked for the same four things
(:func:`check_run`): no vLLM process is left (``pgrep -f vllm.entrypoints``, of this
battery), no baseline in the battery's directory is corrupted or half-written (each one
validates, no temp file is left), the output carries a one-line cause (and, where a
server was involved, the server log's tail), and the other server configs of the run
were still measured. One recorded baseline and one tiny-model cache serve the whole
battery (session-scoped); faults that do not interfere share a run.

Stand-ins are used only for what vLLM cannot be made to do (tests/e2e/standin_faults.py,
loaded into the perf run with `-p`); each test that uses one says so. The fault table
with what the user sees is docs/faults.md.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
from pathlib import Path

from specperf.schemas import Baseline
from tests.e2e.perf_process import (
    RUN_TIMEOUT_S,
    Outcome,
    assert_no_vllm_left,
    perf_argv,
    perf_env,
)
from tests.support import REPO_ROOT

CI_PROFILE = REPO_ROOT / "tests" / "profiles" / "cpu-ci.toml"
DATASET = REPO_ROOT / "datasets" / "sharegpt-tiny.json"
ENGINE = REPO_ROOT / "src" / "specperf" / "engine"
TAIL = "--- last "  # what precedes a server log's tail in every failure message


# ------------------------------------------------------------------------- the profile


def battery_profile(*, name: str = "faults", startup_timeout_s: float = 300,
                    request_timeout_s: float = 30, extra: str = "") -> str:
    """cpu-ci's target, serve args, env and [tiny] table (so its model cache is shared),
    one concurrency, two requests; a no-spec config and a self-drafting one, plus
    ``extra`` [[server_configs]]."""
    ci = CI_PROFILE.read_text()
    head = ci[ci.index('target = "tiny:target"'):ci.index("startup_timeout_s")]
    tiny = ci[ci.index("\n[tiny]\n") + 1:ci.index("[gates.acceptance]")]
    return f'''name = "{name}"
{head}startup_timeout_s = {startup_timeout_s}
concurrencies = [1]

[workload]
kind = "sharegpt"
path = "{DATASET}"
seed = 0
num_prompts = 16
max_input_chars = 600

[sampling]
temperature = 0.0
seed = 0
max_tokens = 16
ignore_eos = true

[load]
requests = 2
warmup_requests = 0
request_timeout_s = {request_timeout_s}

{tiny}
[gates.acceptance]

[gates.tpot_gain]
max_concurrency = 1
min_ratio = 0.05

# Judged against a baseline only as far as a fault needs: limits no real run comes near.
[compare.metrics.ttft]
min_effect = 50.0

[compare.metrics.output_throughput]
min_effect = 0.99

[compare.metrics.acceptance_rate]
min_effect = 0.0

[[server_configs]]
id = "nospec"

[[server_configs]]
id = "self-k2"
speculative_config = {{ method = "draft_model", model = "tiny:target", num_speculative_tokens = 2 }}
{extra}'''


def victim(config_id: str, serve_args: list[str] | None = None,
           env: dict[str, str] | None = None) -> str:
    """A [[server_configs]] entry drafting with the 1-layer tiny draft (a profile has at
    most one no-spec config; runs select ``not tpot_gain``, so it pairs with nothing)."""
    text = (f'\n[[server_configs]]\nid = "{config_id}"\nspeculative_config = '
            '{ method = "draft_model", model = "tiny:draft", num_speculative_tokens = 1 }\n')
    if serve_args:
        text += f"serve_args = {json.dumps(serve_args)}\n"
    if env:
        text += "env = { " + ", ".join(f'{k} = "{v}"' for k, v in env.items()) + " }\n"
    return text


# ------------------------------------------------------------------------- processes


def assert_baselines_intact(root: Path) -> int:
    """Every baseline file under ``root`` validates and no temp file of a write is left;
    returns how many were checked."""
    n = 0
    for f in root.rglob("*"):
        if "baselines" not in f.relative_to(root).parts or not f.is_file():
            continue
        assert not f.name.endswith(".tmp"), f"a half-written file was left: {f}"
        if f.suffix == ".json":
            Baseline.model_validate_json(f.read_text())
            n += 1
    return n


class Battery:
    def __init__(self, root: Path, models: Path) -> None:
        self.root = root
        self.models = models
        self.baselines = root / "baselines"
        self.profile = self.write_profile("faults.toml", battery_profile())

    def write_profile(self, name: str, text: str) -> Path:
        path = self.root / "profiles" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def argv(self, run_dir: Path, profile: Path, baselines: Path, *args: str) -> list[str]:
        return perf_argv(profile, run_dir, self.models, baselines,
                         "-p", "tests.e2e.standin_faults", *args)

    def run(self, name: str, *args: str, profile: Path | None = None,
            baselines: Path | None = None, standin: dict[str, object] | None = None) -> Outcome:
        run_dir = self.root / "runs" / name
        extra = {"SPECPERF_TEST_STANDIN": json.dumps(standin)} if standin else None
        proc = subprocess.run(self.argv(run_dir, profile or self.profile,
                                        baselines or self.baselines, *args),
                              cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, env=perf_env(extra))
        out = proc.stdout + proc.stderr
        (self.root / "runs" / f"{name}.out").write_text(out)
        return Outcome(proc.returncode, out, run_dir)

    def run_and_signal(self, name: str, *args: str, ready: str, act: object,
                       profile: Path | None = None) -> Outcome:
        """Start a run, wait for the line ``ready`` (a server is up and its case begins),
        call ``act(popen, run_dir)``, and wait for the run to end."""
        run_dir = self.root / "runs" / name
        # A shell running the battery in the background starts it with SIGINT ignored;
        # the child would inherit that and rightly ignore our Ctrl-C: give it the default.
        proc = subprocess.Popen(
            self.argv(run_dir, profile or self.profile, self.baselines, *args),
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=perf_env(), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if ready in line:
                act(proc, run_dir)  # type: ignore[operator]
                break
        rest, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        out = "".join(lines) + rest
        (self.root / "runs" / f"{name}.out").write_text(out)
        assert ready in out, out[-4000:]
        return Outcome(proc.returncode, out, run_dir)

    def check_run(self, outcome: Outcome, *, measured: set[str] = frozenset(),
                  cause: str | None = None, tail: bool = True) -> None:
        """The four things every fault run is checked for."""
        assert_no_vllm_left(self.root)
        assert_baselines_intact(self.root)
        if cause is not None:
            assert re.search(cause, outcome.out), (cause, outcome.out[-6000:])
        if tail:
            assert TAIL in outcome.out and "log lines ---" in outcome.out, outcome.out[-6000:]
        if measured:
            assert measured <= outcome.measured(), (measured, outcome.out[-6000:])

    def baseline_file(self) -> Path:
        files = list((self.baselines / "faults").glob("*.json"))
        assert len(files) == 1, files
        return files[0]

    def baseline_copy(self, name: str) -> tuple[Path, Path]:
        """A copy of the recorded baselines directory: (its root, the baseline file)."""
        root = self.root / "baseline-copies" / name / "baselines"
        shutil.copytree(self.baselines, root)
        return root, root / "faults" / self.baseline_file().name


def why(o: Outcome) -> str:
    return o.out[-6000:]
