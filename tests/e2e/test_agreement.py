"""Trust the instrument: our load client agrees with `vllm bench serve` on a real server.

One real vLLM CPU server (cpu-ci's no-spec config: the generated tiny target), our client
and vLLM's benchmark taking turns on it (specperf, then vllm), the same
prompts, lengths and sampling; median TTFT, median TPOT and output throughput must agree
within specperf.lab.agreement.Tolerances (the definitions agree, see that module; the
tolerances cover the noise between interleaved runs). The test checks that both clients
measured the same requests and that we read vLLM's figures right; whether the two agree
within the tolerances is a measurement (it holds on a quiet machine only) and is reported,
not asserted.
The figures in docs/validation.md come from the same code:
``python -m specperf.lab.agreement --profile tests/profiles/cpu-ci.toml --config nospec``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from specperf.config.profile_file import load_profile
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
#: One run a side (specperf, then vllm): what this test asserts needs one of each; the
#: ABBA rounds that even out the machine's drift are the benchmark's (its default, 2).
ROUNDS = 1


def test_specperf_agrees_with_vllm_bench_serve(tmp_path: Path, models_cache: Path) -> None:
    log: list[str] = []

    def say(msg: str) -> None:
        log.append(msg)
        print(msg, flush=True)

    result = agreement_for_profile(
        str(CI_PROFILE), tmp_path / "run", config_id="nospec", concurrency=1,
        n_requests=REQUESTS, rounds=ROUNDS, models_cache=models_cache, rootdir=REPO,
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

    # Every metric is judged against its tolerance, on figures both sides measured. Whether
    # they agree is a measurement of a quiet machine, not a property of the code: another
    # process on 2 cores moves one run by more than the tolerance (seen: specperf's first run
    # 41 tok/s, its second 87 tok/s, beside vLLM's 72 tok/s, while unit tests ran). So the
    # verdict is reported here and measured as a benchmark (docs/validation.md, the command
    # in this module's docstring), never asserted.
    assert [m.metric for m in result.metrics] == ["median_ttft_ms", "median_tpot_ms",
                                                  "output_throughput"], why
    for m in result.metrics:
        assert m.specperf is not None and m.specperf > 0, why
        assert m.vllm is not None and m.vllm > 0, why
        assert m.rel_diff == pytest.approx(m.specperf / m.vllm - 1), why
        assert m.ok == (abs(m.rel_diff) <= m.tolerance + 1e-12), why
    print("agreement:", "within tolerances" if result.ok else "; ".join(result.failures()))
