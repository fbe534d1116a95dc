"""The pure parts of specperf.lab.agreement, without a server: reading a `vllm bench serve`
result, the arguments it is run with, pooling and comparing the two sides' figures.

tests/data/vllm-bench-serve-result.json is shaped as vllm/benchmarks/serve.py (0.32.0)
writes it with --save-result --save-detailed: main_async's header, benchmark()'s result
dict and process_one_metric's mean/median/std/pNN fields, for five requests at c=1 (one
failed with an HTTP error, one whose four tokens came in three events); its summary
figures were computed with vLLM's formulas (serve.py:573-768) from those requests.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

from specperf.config.workload import Sampling
from specperf.lab.agreement import (
    Agreement,
    AgreementError,
    ClientRun,
    Tolerances,
    bench_serve_argv,
    compare,
    load_bench_result,
    main,
    parse_bench_result,
    request_prompts,
    run_order,
    sharegpt_records,
    side_figures,
)
from specperf.schemas import RequestSample
from specperf.schemas.base import utcnow
from tests.support import DATA_DIR, INSTALL_VLLM, REPO_ROOT, unchecked

SAMPLE = DATA_DIR / "vllm-bench-serve-result.json"
REPO = REPO_ROOT


def sample_data() -> dict:
    return json.loads(SAMPLE.read_text())


def ok(ttft: float, e2e: float, tokens: int = 4, chunks: int = 4) -> RequestSample:
    return RequestSample(ok=True, start_s=0.0, ttft_s=ttft, e2e_s=e2e, output_tokens=tokens,
                         prompt_tokens=20, chunks=chunks)


def failed() -> RequestSample:
    return RequestSample(ok=False, start_s=0.0, error="HTTP 500: boom")


# --- order and prompts ---------------------------------------------------------------


def test_run_order_is_abba_and_fair() -> None:
    assert run_order(1) == ["specperf", "vllm"]
    assert run_order(2) == ["specperf", "vllm", "vllm", "specperf"]
    assert run_order(3) == ["specperf", "vllm", "vllm", "specperf", "specperf", "vllm"]
    for r in range(1, 6):
        order = run_order(r)
        assert order.count("specperf") == order.count("vllm") == r
    with pytest.raises(ValueError, match="rounds"):
        run_order(0)


def test_request_prompts_follow_the_load_clients_order() -> None:
    prompts = ["a", "b", "c"]
    # load.run_load sends prompts[(prompt_offset + i) % len(prompts)] for request i.
    assert request_prompts(prompts, 7) == ["a", "b", "c", "a", "b", "c", "a"]
    assert request_prompts(prompts, 4, offset=2) == ["c", "a", "b", "c"]
    with pytest.raises(ValueError, match="no prompts"):
        request_prompts([], 3)


def test_sharegpt_records_keep_text_and_order_for_vllms_loader() -> None:
    prompts = ["first prompt", "second", "first prompt"]
    recs = sharegpt_records(prompts)
    # vLLM's ShareGPT loader keeps entries with ≥ 2 turns and sends turn 0's value.
    kept = [r for r in recs if "conversations" in r and len(r["conversations"]) >= 2]
    assert [r["conversations"][0]["value"] for r in kept] == prompts
    json.dumps(recs)  # what is written to the file


# --- the `vllm bench serve` command ----------------------------------------------------


def _argv(sampling: Sampling, tmp_path: Path) -> list[str]:
    return bench_serve_argv("/venv/bin/python", "http://127.0.0.1:8123", "/models/t",
                            tmp_path / "p.json", tmp_path / "r.json", sampling, 2, 12, 1)


def _opt(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_bench_argv_sends_our_prompts_lengths_and_sampling(tmp_path: Path) -> None:
    argv = _argv(Sampling(temperature=0.0, seed=7, max_tokens=32, ignore_eos=True), tmp_path)
    assert argv[:3] == ["/venv/bin/python", "-m", "specperf.lab.vllm_bench"]
    assert all(isinstance(a, str) for a in argv)
    assert _opt(argv, "--base-url") == "http://127.0.0.1:8123"
    assert _opt(argv, "--endpoint") == "/v1/completions"
    assert _opt(argv, "--model") == _opt(argv, "--tokenizer") == "/models/t"
    assert _opt(argv, "--dataset-name") == "sharegpt"
    assert _opt(argv, "--dataset-path") == str(tmp_path / "p.json")
    assert _opt(argv, "--sharegpt-output-len") == "32"
    assert "--disable-shuffle" in argv and "--no-oversample" in argv
    assert _opt(argv, "--num-prompts") == "12"
    assert _opt(argv, "--max-concurrency") == "2"
    assert _opt(argv, "--num-warmups") == "1"
    assert float(_opt(argv, "--temperature")) == 0.0
    assert json.loads(_opt(argv, "--extra-body")) == {"seed": 7}
    assert "--ignore-eos" in argv
    assert "--save-result" in argv and "--save-detailed" in argv
    assert _opt(argv, "--result-filename") == str(tmp_path / "r.json")
    assert "--skip-tokenizer-init" not in argv  # TTFT/TPOT need its tokenizer


def test_bench_argv_without_ignore_eos(tmp_path: Path) -> None:
    # vLLM sends ignore_eos only when the flag is given; the server default is false,
    # which is what our client sends explicitly.
    argv = _argv(Sampling(temperature=0.7, seed=0, max_tokens=16, ignore_eos=False), tmp_path)
    assert "--ignore-eos" not in argv
    assert float(_opt(argv, "--temperature")) == 0.7


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason=unchecked("the bench options against vLLM's source "
                                     "(vLLM is not installed)", INSTALL_VLLM))
def test_every_bench_option_exists_in_the_installed_vllm(tmp_path: Path) -> None:
    """Read (not import) the installed vLLM's parser definitions: a renamed option must
    fail here, not after a minute of server start-up."""
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    root = Path(list(spec.submodule_search_locations)[0]) / "benchmarks"
    text = (root / "serve.py").read_text() + (root / "datasets" / "datasets.py").read_text()
    defined = set(re.findall(r'add_argument\(\s*"(--[a-z0-9-]+)"', text))
    argv = _argv(Sampling(ignore_eos=True), tmp_path)
    used = {a for a in argv[3:] if a.startswith("--")}
    assert used - defined == set()


# --- reading its result ----------------------------------------------------------------


def test_parse_bench_result_gives_vllms_per_request_samples() -> None:
    run = load_bench_result(SAMPLE, index=3)
    assert run.client == "vllm" and run.index == 3 and run.source == str(SAMPLE)
    assert [s.ok for s in run.samples] == [True, True, True, True, False]
    assert [s.output_tokens for s in run.samples[:4]] == [4, 4, 4, 4]
    assert [s.prompt_tokens for s in run.samples[:4]] == [27, 26, 28, 27]
    # vLLM stamps an event per `choices` chunk: itl count + 1.
    assert [s.chunks for s in run.samples[:4]] == [4, 4, 4, 3]
    assert run.samples[4].error == "Internal Server Error"
    assert run.samples[0].start_s == 0.0 and run.samples[1].start_s == pytest.approx(0.16)
    rep = run.reported
    assert rep is not None
    assert (rep.completed, rep.failed, rep.total_output_tokens) == (4, 1, 16)
    assert rep.model_id == "/models/tiny-target" and rep.max_concurrency == 1
    assert run.duration_s == pytest.approx(0.748)


def test_our_figures_from_vllms_samples_equal_vllms_own() -> None:
    """Same definitions: our medians (RequestSample.tpot_s, measure.summarise) over vLLM's
    per-request figures reproduce the medians and throughput vLLM reported."""
    run = load_bench_result(SAMPLE)
    fig = side_figures("vllm", [run])
    rep = run.reported
    assert rep is not None
    assert fig.median_ttft_ms == pytest.approx(rep.median_ttft_ms, rel=1e-12)
    assert fig.median_tpot_ms == pytest.approx(rep.median_tpot_ms, rel=1e-12)
    assert fig.median_e2e_ms == pytest.approx(rep.median_e2el_ms, rel=1e-12)
    assert fig.output_throughput == pytest.approx(rep.output_throughput, rel=1e-12)
    assert fig.output_tokens == rep.total_output_tokens
    assert (fig.requests, fig.failed) == (4, 1)
    assert fig.median_tpot_ms == pytest.approx(22.5)  # tpots 20, 30, 25, 20 ms


@pytest.mark.parametrize(("field", "fix"), [
    ("median_tpot_ms", "--skip-tokenizer-init"),
    ("ttfts", "--save-detailed"),
    ("duration", "--save-result"),
])
def test_unusable_result_names_file_field_and_fix(field: str, fix: str) -> None:
    data = sample_data()
    del data[field]
    with pytest.raises(AgreementError) as err:
        parse_bench_result(data, "/runs/bench-1.json")
    msg = str(err.value)
    assert "/runs/bench-1.json" in msg and f"field `{field}`" in msg and fix in msg


def test_result_with_lists_of_different_lengths_is_refused() -> None:
    data = sample_data()
    data["latencies"] = data["latencies"][:-1]
    with pytest.raises(AgreementError, match=r"bench-1.json: per-request lists differ"):
        parse_bench_result(data, "bench-1.json")


def test_unreadable_or_missing_result_file(tmp_path: Path) -> None:
    with pytest.raises(AgreementError, match="wrote no result file"):
        load_bench_result(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"duration": 1.0,')
    with pytest.raises(AgreementError, match=r"bad.json: not a readable JSON file"):
        load_bench_result(bad)


def test_newer_vllm_fields_are_ignored() -> None:
    data = sample_data()
    data["some_future_metric"] = [1, 2, 3]
    assert parse_bench_result(data, "x.json").reported is not None


# --- pooling and comparing ---------------------------------------------------------------


def test_side_figures_pool_requests_not_run_medians() -> None:
    # Run A: TTFTs 100, 110, 120 ms; run B: 200 ms. Pooled median 115, not the median of
    # the run medians (110, 200 → 155).
    a = ClientRun(client="specperf", index=0, duration_s=2.0,
                  samples=[ok(0.100, 0.160), ok(0.110, 0.170), ok(0.120, 0.180), failed()])
    b = ClientRun(client="specperf", index=3, duration_s=1.0, samples=[ok(0.200, 0.290)])
    other = ClientRun(client="vllm", index=1, duration_s=9.0, samples=[ok(9.0, 10.0)])
    fig = side_figures("specperf", [a, other, b])
    assert fig.runs == 2 and fig.requests == 4 and fig.failed == 1
    assert fig.median_ttft_ms == pytest.approx(115.0)
    # TPOT (e2e − ttft) / (4 − 1): 20, 20, 20, 30 ms → 20
    assert fig.median_tpot_ms == pytest.approx(20.0)
    # Σ tokens / Σ durations: 16 / 3 s, failed requests count no tokens.
    assert fig.output_throughput == pytest.approx(16 / 3)
    assert [r.index for r in fig.per_run] == [0, 3]
    assert fig.per_run[0].median_ttft_ms == pytest.approx(110.0)
    assert fig.per_run[1].output_throughput == pytest.approx(4.0)


def test_side_figures_of_a_side_without_successes() -> None:
    fig = side_figures("vllm", [ClientRun(client="vllm", index=0, duration_s=1.0,
                                          samples=[failed()])])
    assert fig.requests == 0 and fig.failed == 1
    assert fig.median_ttft_ms is None and fig.median_chunks_per_request is None
    assert fig.output_throughput == 0.0


def _figs(ttft_s: float, tpot_s: float, client: str) -> ClientRun:
    return ClientRun(client=client, index=0, duration_s=1.0,  # type: ignore[arg-type]
                     samples=[ok(ttft_s, ttft_s + 3 * tpot_s)])


def test_compare_relative_difference_and_tolerance() -> None:
    ours = side_figures("specperf", [_figs(0.110, 0.020, "specperf")])
    theirs = side_figures("vllm", [_figs(0.100, 0.025, "vllm")])
    tol = Tolerances(ttft=0.10, tpot=0.15, output_throughput=0.0)
    by = {m.metric: m for m in compare(ours, theirs, tol)}
    assert by["median_ttft_ms"].rel_diff == pytest.approx(0.10)
    assert by["median_ttft_ms"].ok  # the tolerance is inclusive
    assert by["median_tpot_ms"].rel_diff == pytest.approx(-0.20)
    assert not by["median_tpot_ms"].ok
    assert by["output_throughput"].rel_diff == pytest.approx(0.0)
    assert by["output_throughput"].ok
    assert by["median_tpot_ms"].unit == "ms" and by["output_throughput"].unit == "tok/s"


def test_compare_without_a_vllm_figure_fails() -> None:
    ours = side_figures("specperf", [_figs(0.1, 0.02, "specperf")])
    none = side_figures("vllm", [ClientRun(client="vllm", index=0, duration_s=1.0,
                                           samples=[failed()])])
    metrics = compare(ours, none, Tolerances())
    assert all(m.rel_diff is None and not m.ok for m in metrics)


def test_agreement_failures_name_metric_figures_and_tolerance() -> None:
    runs = [_figs(0.110, 0.020, "specperf"), _figs(0.100, 0.025, "vllm")]
    ours, theirs = side_figures("specperf", runs), side_figures("vllm", runs)
    tol = Tolerances(ttft=0.25, tpot=0.15, output_throughput=0.15)
    a = Agreement(started_at=utcnow(), base_url="http://x", model="m", concurrency=1,
                  requests_per_run=1, rounds=1, warmup_requests=0, primed=False,
                  sampling=Sampling(), order=run_order(1), tolerances=tol, specperf=ours,
                  vllm=theirs, metrics=compare(ours, theirs, tol), runs=runs, bench_argv=[])
    assert not a.ok
    (line,) = a.failures()
    assert line.startswith("median_tpot_ms: specperf 20.00 vs vllm bench serve 25.00 ms")
    assert "-20.0 %" in line and "±15 %" in line
    # The result file round-trips through its schema.
    assert Agreement.model_validate_json(a.model_dump_json()) == a


# --- command line (no server is started) -----------------------------------------------


def test_cli_base_url_needs_model() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--profile", "x.toml", "--base-url", "http://127.0.0.1:1"])
    assert exc.value.code == 2


def test_cli_bad_profile_or_config_is_one_line_exit_2(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--profile", str(tmp_path / "nope.toml"), "--run-dir", str(tmp_path)]) == 2
    assert "nope.toml: profile file not found" in capsys.readouterr().err
    ci = REPO / "tests" / "profiles" / "cpu-ci.toml"
    assert main(["--profile", str(ci), "--config", "nope", "--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no server config 'nope'" in err and "nospec, draft-k2, self-k3" in err


def test_unpinned_remote_code_is_refused_before_any_process_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #54: lab.agreement builds its own ServerPool, outside the pytest session; the
    MiMo profile trusts remote code with no `revision`, and its server must not start.
    Popen is replaced by a recorder that refuses: no process, vLLM or other, may start."""
    spawned: list[object] = []

    def no_process(*args: object, **kwargs: object) -> None:
        spawned.append(args)
        raise AssertionError(f"a process was started: {args!r}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    mimo = REPO / "perf_tests" / "profiles" / "h100-mimo-7b-mtp.toml"
    assert main(["--profile", str(mimo), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert spawned == []
    assert "--trust-remote-code" in err and "revision = " in err and str(mimo) in err
