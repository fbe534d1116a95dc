"""What the tests share: where the repository's files are, and builders for the pydantic
models the stages pass around (tests construct real results; nothing here fakes a server).

Every path a test reads is under :data:`REPO_ROOT` or the test's own tmp_path
(tests/integration/test_test_paths.py checks this).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from specperf.analysis.aggregate import case_result, make_trial
from specperf.config.profile import ServerConfig
from specperf.schemas import Acceptance, Case, CaseResult, LoadResult, RequestSample

#: The tests/ directory, and the repository around it.
TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
#: Real run files and tool outputs the tests read (committed, small).
DATA_DIR = TESTS_DIR / "data"
#: The CI CPU profile.
CPU_CI_PROFILE = TESTS_DIR / "profiles" / "cpu-ci.toml"


def make_case(config_id: str = "draft-k2", concurrency: int = 1, *, ttft_s: float = 0.1,
              tpot_s: float = 0.02, tokens: int = 33, n: int = 8,
              acceptance: Acceptance | None = None, spec: bool = True,
              errors: int = 0) -> CaseResult:
    """One case with one trial of ``n`` identical requests (``errors`` of them failed)."""
    samples = []
    for i in range(n):
        if i < errors:
            samples.append(RequestSample(ok=False, start_s=0.0, error="HTTP 500: boom"))
            continue
        e2e = ttft_s + tpot_s * (tokens - 1)
        samples.append(RequestSample(ok=True, start_s=i * e2e, ttft_s=ttft_s, e2e_s=e2e,
                                     output_tokens=tokens, prompt_tokens=20, chunks=tokens))
    load = LoadResult(concurrency=concurrency, samples=samples,
                      duration_s=sum(s.e2e_s or 0 for s in samples) / concurrency)
    cfg = ServerConfig(
        id=config_id,
        speculative_config={"method": "draft_model", "model": "tiny:draft",
                            "num_speculative_tokens": 2} if spec else None,
    )
    trial = make_trial(0, datetime(2026, 1, 1, tzinfo=timezone.utc), load, acceptance)
    return case_result(Case(config_id=config_id, concurrency=concurrency), cfg, [trial],
                       "0.32.0", "abc")
