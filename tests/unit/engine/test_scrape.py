"""Counter parsing with prometheus_client, on exposition text produced the way vLLM
produces it (prometheus_client counters with vLLM's names and labels)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from specperf.engine.scrape import ScrapeError, counter_delta, parse_counters, prefix_cache_delta
from specperf.schemas import PrefixCacheCounts


def exposition(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int],
               engines: int = 1) -> str:
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    c = {
        name: Counter(f"vllm:spec_decode_{name}", "", labels, registry=reg)
        for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
    }
    pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "", [*labels, "position"],
                  registry=reg)
    Histogram("vllm:time_to_first_token_seconds", "", labels, registry=reg).labels("m", "0").observe(1)
    for e in range(engines):
        c["num_drafts"].labels("m", str(e)).inc(drafts)
        c["num_draft_tokens"].labels("m", str(e)).inc(draft_tokens)
        c["num_accepted_tokens"].labels("m", str(e)).inc(accepted)
        for i, v in enumerate(per_pos):
            pos.labels("m", str(e), str(i)).inc(v)
    return generate_latest(reg).decode()


def test_parse_and_delta() -> None:
    before = parse_counters(exposition(10, 30, 12, [7, 4, 1]))
    after = parse_counters(exposition(25, 75, 33, [18, 11, 4]))
    assert before.present and before.accepted_per_position == {0: 7.0, 1: 4.0, 2: 1.0}
    d = counter_delta(before, after)
    assert d is not None
    assert (d.drafts, d.draft_tokens, d.accepted_tokens) == (15, 45, 21)
    assert d.accepted_per_position == [11, 7, 3]
    assert d.rate == pytest.approx(21 / 45)
    assert d.mean_acceptance_length == pytest.approx(1 + 21 / 15)
    assert d.per_position_rate == pytest.approx([11 / 15, 7 / 15, 3 / 15])


def test_engines_are_summed() -> None:
    c = parse_counters(exposition(10, 30, 12, [7, 4, 1], engines=2))
    assert c.num_drafts == 20 and c.accepted_per_position[0] == 14


def test_no_spec_server_has_no_acceptance() -> None:
    reg = CollectorRegistry()
    Counter("vllm:prompt_tokens", "", registry=reg).inc(5)
    text = generate_latest(reg).decode()
    c = parse_counters(text)
    assert not c.present
    assert counter_delta(c, c) is None


def test_counters_that_go_backwards_are_a_scrape_error_not_an_acceptance() -> None:
    # A server restarted between the two reads: the second one counts from zero again.
    before = parse_counters(exposition(25, 75, 33, [18, 11, 4]))
    after = parse_counters(exposition(3, 9, 4, [3, 1, 0]))
    with pytest.raises(ScrapeError, match="went backwards.*num_drafts.*position 0"):
        counter_delta(before, after)


def prefix_exposition(queries: int, hits: int, engines: int = 1) -> str:
    """vLLM's prefix-cache counters (vllm/v1/metrics/loggers.py: per engine, labelled)."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    q = Counter("vllm:prefix_cache_queries", "", labels, registry=reg)
    h = Counter("vllm:prefix_cache_hits", "", labels, registry=reg)
    Counter("vllm:external_prefix_cache_queries", "", labels, registry=reg).labels("m", "0").inc(9)
    for e in range(engines):
        q.labels("m", str(e)).inc(queries)
        h.labels("m", str(e)).inc(hits)
    return generate_latest(reg).decode()


def test_prefix_cache_counters_are_parsed_summed_and_differenced() -> None:
    before = parse_counters(prefix_exposition(100, 40, engines=2))
    after = parse_counters(prefix_exposition(400, 280, engines=2))
    assert before.prefix_cache_present and not before.present
    assert (before.prefix_cache_queries, before.prefix_cache_hits) == (200, 80)
    d = prefix_cache_delta(before, after)
    assert d is not None and (d.queries, d.hits) == (600, 480)
    assert d.hit_rate == pytest.approx(0.8)
    # Caching off: vLLM serves both counters and never moves them.
    off = parse_counters(prefix_exposition(0, 0))
    assert prefix_cache_delta(off, off) == PrefixCacheCounts(queries=0, hits=0)
    # A server without them (not vLLM's, or a release that renamed them): unknown.
    none = parse_counters(exposition(1, 1, 1, [1]))
    assert not none.prefix_cache_present and prefix_cache_delta(none, none) is None
    with pytest.raises(ScrapeError, match="went backwards"):
        prefix_cache_delta(after, before)
