"""Variable-length proposals described, and the counters' cross-check (issue #15)."""

from __future__ import annotations

from specperf.analysis import spec_counters
from specperf.analysis.aggregate import case_result
from specperf.config.server_configs import ServerConfig
from specperf.schemas import Acceptance, Case, RequestSample
from tests.support import make_requests, make_spec_sample, make_trial_of, spec_counters_of

NGRAM = ServerConfig(id="ngram-k3", speculative_config={
    "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
    "prompt_lookup_max": 4})
DRAFT = ServerConfig(id="draft-k2", speculative_config={
    "method": "draft_model", "model": "tiny:draft", "num_speculative_tokens": 2})


def ngram_case(samples: list[RequestSample], acceptance: Acceptance | None = None):
    trial = make_trial_of(samples, acceptance=acceptance or spec_counters_of(samples))
    return case_result(Case(config_id="ngram-k3", concurrency=1), NGRAM, [trial], "0.32.0")


# Request 1: 12 output tokens in 8 chunks: 1 prefill + 7 steps, 4 of them drafted
# (lengths 3, 3, 1, 2), accepting 2, 0, 1, 1 = 4 tokens (= 12 - 8).
ONE = dict(tokens=12, chunks=8, lengths=[3, 3, 1, 2], accepted=[2, 0, 1, 1])
# Request 2: 10 tokens in 6 chunks; drafts 3, 3 accepting 3, 1 = 4 tokens.
TWO = dict(tokens=10, chunks=6, lengths=[3, 3], accepted=[3, 1])


def test_accepted_per_draft_is_the_difference_of_consecutive_positions() -> None:
    # 10 drafts: 6 accepted ≥ 1, 3 accepted ≥ 2, 1 accepted all 3.
    acc = Acceptance(drafts=10, draft_tokens=30, accepted_tokens=10,
                     accepted_per_position=[6, 3, 1])
    assert acc.accepted_per_draft == [4, 3, 2, 1]
    assert sum(j * n for j, n in enumerate(acc.accepted_per_draft)) == acc.accepted_tokens
    assert acc.mean_proposal_length == 3.0
    assert Acceptance(drafts=0, draft_tokens=0, accepted_tokens=0,
                      accepted_per_position=[0, 0]).accepted_per_draft == []


def test_variable_length_proposals_are_shown_as_distributions() -> None:
    samples = [make_spec_sample(**ONE), make_spec_sample(**TWO)]
    r = ngram_case(samples)
    assert spec_counters.proposals_vary(r)
    assert spec_counters.proposal_lengths(r) == [0, 1, 1, 4]
    # 6 drafts, 15 draft tokens; accepted per draft: 0 ×1, 1 ×3, 2 ×1, 3 ×1; 8 accepted.
    assert r.acceptance is not None and r.acceptance.accepted_per_draft == [1, 3, 1, 1]
    assert spec_counters.proposal_line(r) == (
        "ngram-k3-c1: 6 drafts of mean length 2.50 (k ≤ 3), proposal lengths 1: 17 %, "
        "2: 17 %, 3: 67 %; accepted per draft 0: 17 %, 1: 50 %, 2: 17 %, 3: 17 %; "
        "mean acceptance length 2.33")
    # Without per-request metrics the counters still give the mean and accepted per draft.
    plain = ngram_case(make_requests(2, tokens=12), acceptance=r.acceptance)
    line = spec_counters.proposal_line(plain)
    assert line is not None and "proposal lengths" not in line
    assert "6 drafts of mean length 2.50 (k ≤ 3); accepted per draft 0: 17 %" in line


def test_a_fixed_k_draft_is_not_described_as_varying() -> None:
    acc = Acceptance(drafts=10, draft_tokens=20, accepted_tokens=9, accepted_per_position=[6, 3])
    trial = make_trial_of(make_requests(2), acceptance=acc)
    fixed = case_result(Case(config_id="draft-k2", concurrency=1), DRAFT, [trial], "0.32.0")
    assert not spec_counters.proposals_vary(fixed)
    assert spec_counters.proposal_line(fixed) is None
    # Dynamic k on a draft model: shorter drafts than k on average.
    short = acc.model_copy(update={"draft_tokens": 15.0})
    dyn = case_result(Case(config_id="draft-k2", concurrency=4), DRAFT,
                      [make_trial_of(make_requests(2), acceptance=short)], "0.32.0")
    assert spec_counters.proposals_vary(dyn)


def test_cross_check_agrees_when_the_three_counts_do() -> None:
    r = ngram_case([make_spec_sample(**ONE), make_spec_sample(**TWO)])
    [check] = spec_counters.cross_check([r])
    assert check.problems == () and check.requests == 2
    assert spec_counters.cross_check_lines([r]) == [
        "counters cross-checked on 1 trial of 1 case: the requests' own spec-decode metrics "
        "sum to the /metrics deltas and the streams show the accepted tokens"]


def test_cross_check_names_an_instrument_problem() -> None:
    samples = [make_spec_sample(**ONE), make_spec_sample(**TWO)]
    good = spec_counters_of(samples)
    # /metrics moved by one draft and one accepted token more than the requests saw.
    off = good.model_copy(update={"drafts": good.drafts + 1,
                                  "accepted_tokens": good.accepted_tokens + 1})
    [line] = spec_counters.cross_check_lines([ngram_case(samples, acceptance=off)])
    assert line.startswith("instrument problem (not a regression): ngram-k3-c1 trial 1: ")
    assert "drafts: the requests' own metrics sum to 6, the /metrics counters moved by 7" in line
    assert "accepted tokens: the requests' own metrics sum to 8, the /metrics counters moved " \
           "by 9" in line
    assert "draft tokens" not in line


def test_cross_check_reads_the_stream() -> None:
    # Two steps merged into one chunk: the client fell behind the server.
    merged = [make_spec_sample(**{**ONE, "chunks": 7}), make_spec_sample(**TWO)]
    [line] = spec_counters.cross_check_lines([ngram_case(merged)])
    assert "the stream shows 9 accepted tokens (output tokens − chunks), more than the 8 the " \
           "server accepted: chunks merged steps" in line
    # The last step accepted tokens past max_tokens: up to k per request is not a problem…
    cut = [make_spec_sample(**{**ONE, "tokens": 10}), make_spec_sample(**TWO)]
    assert spec_counters.cross_check([ngram_case(cut)])[0].problems == ()
    # …more than that is tokens missing from the stream.
    lost = [make_spec_sample(**{**ONE, "tokens": 8}), make_spec_sample(**{**TWO, "tokens": 6})]
    [line] = spec_counters.cross_check_lines([ngram_case(lost)])
    assert "the stream shows 0 accepted tokens" in line and "fewer than the server's 8 less " \
           "the 6 a last step may accept past max_tokens" in line


def test_no_per_request_metrics_nothing_to_cross_check() -> None:
    r = ngram_case(make_requests(2), acceptance=Acceptance(
        drafts=4, draft_tokens=12, accepted_tokens=3, accepted_per_position=[2, 1, 0]))
    assert spec_counters.cross_check([r]) == [] and spec_counters.cross_check_lines([r]) == []
