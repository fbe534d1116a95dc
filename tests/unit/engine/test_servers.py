"""The server pool's own bookkeeping (specperf.engine.servers), without starting vLLM."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from specperf.config.profile_file import load_profile
from specperf.engine.proxy import DelayProxy
from specperf.engine.server import ServerError
from specperf.engine.servers import ServerPool
from specperf.schemas import ServerRecord
from tests.support import CPU_CI_PROFILE

PROFILE = load_profile(CPU_CI_PROFILE)


def _pool(tmp_path: Path, said: list[str]) -> ServerPool:
    pool = ServerPool(profile=PROFILE, run_dir=tmp_path / "run", models_cache=tmp_path / "m",
                      say=said.append)
    pool.records["draft-k2"] = ServerRecord(config_id="draft-k2", argv=[], log_path="x.log")
    return pool


def test_a_stopped_proxy_leaves_what_it_delivered_in_the_servers_record(tmp_path: Path) -> None:
    """An injected run counts only if the proxy did its part, so the run file keeps what
    it was asked and what it did (never started here: its streams are set by hand)."""
    said: list[str] = []
    pool = _pool(tmp_path, said)
    proxy = DelayProxy("http://127.0.0.1:1", 0.0, stretch=0.25)
    proxy.stats.streams = 3
    proxy.stats.decode_spans = [(2.0, 2.5), (2.0, 2.52), (1.0, 1.25)]
    pool.proxies["draft-k2"] = proxy
    pool.stop("draft-k2")
    rec = pool.records["draft-k2"].injection
    assert rec is not None and (rec.stretch, rec.streams) == (0.25, 3)
    assert (rec.decode_ratio, rec.decode_ratio_min, rec.decode_ratio_max) == (1.25, 1.25, 1.26)
    assert "draft-k2" not in pool.proxies
    assert any("3 streams, each decode forwarded 1.250× as it arrived (1.250–1.260)" in s
               for s in said)
    dumped = pool.records["draft-k2"].model_dump(mode="json")
    assert dumped["injection"]["decode_ratio"] == 1.25


def test_a_record_without_a_proxy_is_written_as_before(tmp_path: Path) -> None:
    """No proxy, no field: run files of runs without fault injection stay byte-identical."""
    pool = _pool(tmp_path, [])
    pool.stop("draft-k2")
    assert "injection" not in pool.records["draft-k2"].model_dump(mode="json")


def test_a_stand_in_fault_proxy_records_nothing(tmp_path: Path) -> None:
    """A stand-in fault of the battery is not a slowdown: nothing to deliver."""
    pool = _pool(tmp_path, [])
    pool.proxies["draft-k2"] = DelayProxy("http://127.0.0.1:1", 0.0, fault="http-500")
    pool.stop("draft-k2")
    assert pool.records["draft-k2"].injection is None


def test_one_stop_failure_leaves_no_other_server_running(tmp_path: Path) -> None:
    """Two real processes as the pool's servers; the first's proxy fails to stop. Both
    processes are stopped all the same, and the failure is raised after."""
    import os
    import subprocess
    import sys

    import pytest

    from specperf.engine.server import StopError, VllmServer

    pool = _pool(tmp_path, [])
    procs = []
    for cid in ("draft-k2", "nospec"):
        s = VllmServer(cid, [sys.executable, "-c", "import time; time.sleep(600)"],
                       dict(os.environ), tmp_path / f"{cid}.log", 1, 1)
        s.proc = subprocess.Popen(s.argv, start_new_session=True)
        pool.servers[cid] = s
        procs.append(s.proc)

    class BrokenProxy:
        def stop(self) -> None:
            raise OSError("proxy would not stop")

    pool.proxies["draft-k2"] = BrokenProxy()  # type: ignore[assignment]
    with pytest.raises(StopError, match="draft-k2: OSError: proxy would not stop"):
        pool.stop_all()
    assert [p.poll() for p in procs] == [-15, -15] and not pool.servers


def test_a_pool_refuses_unpinned_remote_code_before_any_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #54: the pool is where every server starts, whatever built its profile — here
    the scenarios' road (model_copy, no validation) with a flow-style --config file. Popen
    is replaced by a recorder that refuses: no process may start."""
    yaml = tmp_path / "serve.yaml"
    yaml.write_text("{trust_remote_code: true}\n")
    hub = PROFILE.model_copy(update={"target": "some-org/some-model", "tiny": None,
                                     "serve_args": ["--config", str(yaml)]})
    spawned: list[object] = []

    def no_process(*args: object, **kwargs: object) -> None:
        spawned.append(args)
        raise AssertionError(f"a process was started: {args!r}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    pool = ServerPool(profile=hub, run_dir=tmp_path / "run", models_cache=tmp_path / "m",
                      say=lambda _: None)
    with pytest.raises(ServerError) as err:
        pool.server_for("nospec")
    assert spawned == []
    assert "--trust-remote-code" in err.value.cause and "revision = " in err.value.cause
    assert pool.records["nospec"].error == err.value.cause
