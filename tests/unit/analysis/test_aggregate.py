"""Case figures from samples: TPOT from usage tokens, summaries, acceptance sums."""

from __future__ import annotations

import pytest

from specperf.analysis.aggregate import sum_acceptance, summarise
from specperf.schemas import Acceptance, RequestSample


def test_tpot_counts_tokens_not_chunks() -> None:
    # 5 chunks carrying 33 tokens: per-token time is over tokens − 1 intervals.
    s = RequestSample(ok=True, start_s=0, ttft_s=0.1, e2e_s=0.74, output_tokens=33, chunks=5)
    assert s.tpot_s == pytest.approx(0.02)
    assert RequestSample(ok=True, start_s=0, ttft_s=0.1, e2e_s=0.2, output_tokens=1).tpot_s is None
    assert RequestSample(ok=False, start_s=0, error="x").tpot_s is None


def test_summary_in_ms() -> None:
    s = summarise([0.010, 0.020, 0.030])
    assert s.n == 3 and s.median == pytest.approx(20.0) and s.mean == pytest.approx(20.0)
    assert s.min == pytest.approx(10.0) and s.max == pytest.approx(30.0)
    assert summarise([]).median is None


def test_case_result_figures(build_case) -> None:
    r = build_case(ttft_s=0.1, tpot_s=0.02, tokens=33, n=4, concurrency=1)
    assert r.tpot_ms.median == pytest.approx(20.0)
    assert r.ttft_ms.median == pytest.approx(100.0)
    assert r.output_throughput == pytest.approx(33 / 0.74)
    assert r.n_errors == 0 and r.case.id == "draft-k2-c1"


def test_acceptance_derived_figures_and_sums() -> None:
    a = Acceptance(drafts=10, draft_tokens=30, accepted_tokens=15, accepted_per_position=[8, 5, 2])
    assert a.rate == pytest.approx(0.5)
    assert a.mean_acceptance_length == pytest.approx(2.5)
    assert a.per_position_rate == pytest.approx([0.8, 0.5, 0.2])
    total = sum_acceptance([a, None, a])
    assert total is not None and total.accepted_per_position == [16, 10, 4]
    assert sum_acceptance([None]) is None
