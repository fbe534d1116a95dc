"""Trust the instrument: our load client agrees with `vllm bench serve` on a real server.

One real vLLM CPU server (cpu-ci's no-spec config: the generated tiny target), our client
and vLLM's benchmark taking turns on it (specperf, vllm, vllm, specperf), the same
prompts, lengths and sampling; median TTFT, median TPOT and output throughput must agree
within specperf.lab.agreement.Tolerances (the definitions agree, see that module; the
tolerances cover the noise between interleaved runs). About three minutes on 2 cores.
The figures for the README come from the same code:
``python -m specperf.lab.agreement --profile tests/profiles/cpu-ci.toml --config nospec``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from specperf.config.profile import load_profile
from specperf.lab.agreement import agreement_for_profile, side_figures
from tests.support import INSTALL_VLLM, REPO_ROOT, unchecked

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason=unchecked("the agreement with vLLM's own benchmark (vLLM is not installed)",
                         INSTALL_VLLM),
    ),
]

REPO = REPO_ROOT
CI_PROFILE = REPO / "tests" / "profiles" / "cpu-ci.toml"
REQUESTS = 12
ROUNDS = 2


def test_specperf_agrees_with_vllm_bench_serve(tmp_path: Path) -> None:
    log: list[str] = []

    def say(msg: str) -> None:
        log.append(msg)
        print(msg, flush=True)

    result = agreement_for_profile(
        str(CI_PROFILE), tmp_path / "run", config_id="nospec", concurrency=1,
        n_requests=REQUESTS, rounds=ROUNDS, models_cache=tmp_path / "models", rootdir=REPO,
        say=say,
    )
    why = "\n".join(log) + "\n" + result.model_dump_json(indent=1, exclude={"runs"})
    profile = load_profile(CI_PROFILE)

    # Both clients measured every request, and ignore_eos fixed every length.
    for side in (result.specperf, result.vllm):
        assert (side.runs, side.requests, side.failed) == (ROUNDS, ROUNDS * REQUESTS, 0), why
    for run in result.runs:
        assert all(s.output_tokens == profile.sampling.max_tokens for s in run.samples), why
    # The same prompts in the same order: the server's prompt token counts match run by run.
    counts = [[s.prompt_tokens for s in run.samples] for run in result.runs]
    assert all(c == counts[0] for c in counts), why

    # We read vLLM's result right: our maths over its per-request figures gives the
    # medians and throughput it reported itself.
    for run in (r for r in result.runs if r.client == "vllm"):
        rep = run.reported
        assert rep is not None and rep.model_id == result.model and rep.max_concurrency == 1
        fig = side_figures("vllm", [run]).per_run[0]
        assert fig.median_ttft_ms == pytest.approx(rep.median_ttft_ms, rel=1e-9), why
        assert fig.median_tpot_ms == pytest.approx(rep.median_tpot_ms, rel=1e-9), why
        assert fig.output_throughput == pytest.approx(rep.output_throughput, rel=1e-9), why

    assert result.ok, "\n".join(result.failures()) + "\n" + why
