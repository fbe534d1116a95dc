"""A pytest plugin the fault battery (fault_battery.py) loads INTO the perf run it starts
(`python -m pytest perf_tests -p tests.e2e.standin_faults …`), for what vLLM cannot be
made to do by itself. Everything else in that run is real: the servers, the engine, the
plugin, the files. What it does is read from SPECPERF_TEST_STANDIN (JSON):

* ``{"proxy": {"<config id>": "<mode>"}}`` — that config's load and /metrics go through
  specperf.engine.proxy's fault proxy in front of its real vLLM, which plays ``mode``
  (/metrics missing, empty or malformed; HTTP 500s; a stalled stream). vLLM serves
  good metrics and answers well-formed requests; these are faults of what sits between.
* ``{"squat": "<config id>"}`` — just before that config's server starts, this process
  binds and listens on the port specperf picked for it: a real race for a real port,
  placed where free_port() cannot prevent it (between finding the port and the bind).
* ``{"sigterm_before_baseline": true}`` — when the baseline itself is about to be
  replaced (its history entry already written), a real SIGTERM to this process: the
  moment "interrupted during the baseline write" names, which a signal from outside
  could only hit by luck (the write takes milliseconds).
"""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from specperf.engine import servers
from specperf.engine.server import HOST, VllmServer
from specperf.store import baselines as baseline_store

#: Sockets held for the run's lifetime (the squatted ports).
_held: list[socket.socket] = []


def _spec() -> dict[str, Any]:
    return json.loads(os.environ.get("SPECPERF_TEST_STANDIN") or "{}")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    spec = _spec()
    modes = spec.get("proxy") or {}
    if modes:
        post_init = servers.ServerPool.__post_init__

        def with_fault(self: servers.ServerPool) -> None:
            post_init(self)
            self.fault = servers.FaultInjection(0.0, modes=tuple(sorted(modes.items())))

        servers.ServerPool.__post_init__ = with_fault  # type: ignore[method-assign]

    squat = spec.get("squat")
    if squat:
        start = VllmServer.start

        def squatted(self: VllmServer, *args: Any, **kwargs: Any) -> None:
            if self.config_id == squat and not _held:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind((HOST, self.port))
                s.listen(1)  # listening, never answering: like a neighbour's server
                _held.append(s)
                print(f"standin: squatting port {self.port} before {squat} starts", flush=True)
            start(self, *args, **kwargs)

        VllmServer.start = squatted  # type: ignore[method-assign]

    if spec.get("sigterm_before_baseline"):
        write = baseline_store.atomic_write_text

        def interrupted(path: Path, text: str) -> None:
            if "history" not in path.parts:  # the entry under history/<hardware>/ goes first
                print(f"standin: SIGTERM before replacing {path}", flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
            write(path, text)

        baseline_store.atomic_write_text = interrupted  # type: ignore[assignment]
