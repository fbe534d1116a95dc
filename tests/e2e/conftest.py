"""What the e2e tests share in a session: the tiny models (generated once per [tiny] table),
and the fault battery's (tests/e2e/fault_battery.py): one workspace per pytest process,
the no-spec baseline recorded once per session, and the runs several faults read. Under
`nox -s tests` the files run on parallel workers a file at a time (`--dist loadfile`):
the faults that read one shared run are in one file (test_faults_startup.py,
test_faults_standin.py), so that run is made once."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.fault_battery import (
    Battery,
    assert_baselines_intact,
    battery_profile,
    victim,
    why,
)
from tests.e2e.perf_process import Outcome, assert_no_vllm_left


def session_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This test session's tmp directory, shared by its pytest-xdist workers (each worker's
    basetemp is a directory in it); the basetemp itself without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def models_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where every e2e run of the session finds its tiny models: each [tiny] table is
    generated once (specperf.engine.tiny.materialise builds under a lock and reuses,
    also across the parallel workers) instead of once per test, ~6 s a build here."""
    return session_tmp(tmp_path_factory) / "tiny-models"


@pytest.fixture(scope="session")
def battery(tmp_path_factory: pytest.TempPathFactory, models_cache: Path) -> Iterator[Battery]:
    """The shared workspace: the tiny models, and the no-spec baseline recorded once per
    session — by the first worker that needs it, under a lock; every worker's battery
    gets a copy (a fault may only touch its own)."""
    b = Battery(tmp_path_factory.mktemp("faults"), models=models_cache)
    shared = session_tmp(tmp_path_factory) / "faults-recorded"
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes
        if not (shared / "recorded").is_file():
            recorder = Battery(shared / "battery", models=models_cache)
            # --perf-force: kept even if a trial ran on a busy machine (the battery needs
            # a baseline).
            rec = recorder.run("record", "-k", "nospec", "--perf-update-baselines",
                               "--perf-force")
            assert rec.code == 0, why(rec)
            assert_no_vllm_left(recorder.root)
            assert assert_baselines_intact(recorder.root) >= 1
            (shared / "recorded").write_text(str(recorder.baselines))
        shutil.copytree(Path((shared / "recorded").read_text()), b.baselines)
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
