"""Agreement with vLLM's own benchmark: our load client and `vllm bench serve` on one server.

Both clients send the same prompts in the same order, with the same lengths and sampling,
at the same concurrency, to the same running vLLM server, taking turns (ABBA: specperf,
vllm, vllm, specperf, … so a linear drift of the server favours neither). Each side's
figures are pooled over its runs and compared: median TTFT, median TPOT, output
throughput.

How each client drives the server
---------------------------------
* specperf: ``specperf.engine.load.run_load`` in this process, as the perf suite runs it.
* vLLM: ``vllm bench serve`` (via ``python -m specperf.lab.vllm_bench``, see there why not the
  ``vllm`` script) in a subprocess, with the prompts given as a ShareGPT-format file in
  our order (``--dataset-name sharegpt --disable-shuffle --no-oversample``; the prompt text
  is sent verbatim, no chat template; ``--sharegpt-output-len`` = ``max_tokens``),
  ``--temperature``, the seed in ``--extra-body``, ``--ignore-eos``, ``--max-concurrency``,
  ``--num-warmups`` and ``--save-result --save-detailed`` for the per-request figures.

Where the definitions agree and differ (vLLM 0.32.0 source; ours in schemas/load.py)
------------------------------------------------------------------------------------
* TPOT per request: both (E2E − TTFT) / (output tokens − 1) over requests with > 1 token,
  median over requests (vllm/benchmarks/serve.py:626-629, 762; ours
  ``RequestSample.tpot_s``). Output tokens: both from the final ``usage`` chunk
  (vllm/benchmarks/lib/endpoint_request_func.py:274-275); when it is missing vLLM
  re-tokenizes the generated text (serve.py:607-622), we count the request as failed.
* TTFT: vLLM stamps the first SSE event with a non-empty ``choices`` list, *even if its
  text is empty* (endpoint_request_func.py:258-266); we stamp the first event whose text
  is non-empty. The server sends empty-text events for tokens that decode to no text yet
  (an incomplete UTF-8 byte, a skipped special token: vllm/entrypoints/openai/completion/
  serving.py:373-379 drops only events with neither text nor token ids), so when a
  request's first token is one of those, vLLM's TTFT is one decode step earlier. Both
  start the clock right before the POST, after the concurrency semaphore.
* E2E: vLLM stops at the last event with ``choices`` (endpoint_request_func.py:272, 287);
  we stop after ``[DONE]`` (the usage event and ``[DONE]`` follow the last token within
  the same server loop: sub-millisecond, so TPOT differs by that over tokens − 1).
* Output throughput: both Σ output tokens of successful requests / wall time from
  dispatching the first measured request to the last one's end, warm-up excluded
  (serve.py:751, 1011, 1090; ours ``measure.make_trial``). Pooled here over a side's
  runs as Σ tokens / Σ durations.
* Not compared but different: vLLM's warm-ups repeat the first prompt, ours use the
  last prompts; vLLM also sends ``repetition_penalty: 1.0``, ``logprobs: null`` and an
  ``x-request-id``; vLLM's std is numpy's population std, ours the sample stdev.

So the expected systematic difference is ~0 (TTFT: unless first tokens decode to no
text); the tolerances (:class:`Tolerances`) cover the noise between interleaved runs on a
small shared machine. ``median_chunks_per_request`` shows empty-text events when vLLM's
count (every ``choices`` event) exceeds ours (text-bearing events only).

    python -m specperf.lab.agreement --profile tests/profiles/cpu-ci.toml --config nospec \\
        --concurrency 1 --requests 20 [--rounds 2] [--json PATH]
    python -m specperf.lab.agreement --profile P --base-url http://127.0.0.1:8000 --model M

Why one module past 600 lines: it is one experiment, read top to bottom: the definitions
it compares (written out above), the pure parts (orders, files, figures), the code that
drives both clients and pools their runs, and the command that prints the result; nothing
else imports its parts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specperf.analysis.aggregate import summarise
from specperf.config.profile import ProfileError
from specperf.config.profile_file import load_profile
from specperf.config.workload import Sampling
from specperf.engine.datasets import load_prompts
from specperf.engine.load import run_load
from specperf.engine.server import ServerError, log_tail, run_env
from specperf.engine.servers import ServerPool
from specperf.schemas import RequestSample
from specperf.schemas.base import utcnow

Client = Literal["specperf", "vllm"]
BENCH_MODULE = "specperf.lab.vllm_bench"
#: ShareGPT's second turn is required by vLLM's loader but unused with --sharegpt-output-len.
_UNUSED_REPLY = "(unused: --sharegpt-output-len sets the output length)"
LOG_TAIL_LINES = 40


class AgreementError(RuntimeError):
    """A side that could not be measured or a result that cannot be read; says why."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Tolerances(_Model):
    """Largest |ours / vLLM − 1| accepted per metric.

    The definitions agree (see the module docstring), so these bound the noise between
    interleaved runs of a few dozen requests on the same server, not a known bias: TTFT
    (a prefill of a few dozen tokens, ~0.1–0.2 s on 2 CPU cores) is the noisiest."""

    ttft: float = Field(0.25, ge=0)
    tpot: float = Field(0.15, ge=0)
    output_throughput: float = Field(0.15, ge=0)


class BenchReported(_Model):
    """`vllm bench serve`'s own summary of one run, as it wrote it."""

    model_id: str
    max_concurrency: int | None = None
    duration_s: float
    completed: int
    failed: int
    total_output_tokens: int
    output_throughput: float
    median_ttft_ms: float
    median_tpot_ms: float
    median_e2el_ms: float | None = None


class ClientRun(_Model):
    """One measured run of one client, as per-request samples."""

    client: Client
    index: int = Field(description="position in the alternation")
    duration_s: float
    samples: list[RequestSample]
    reported: BenchReported | None = Field(None, description="vLLM's own figures (vllm runs)")
    source: str | None = Field(None, description="the result file (vllm runs)")


class RunFigures(_Model):
    index: int
    median_ttft_ms: float | None
    median_tpot_ms: float | None
    output_throughput: float | None


class SideFigures(_Model):
    """One client's figures, pooled over its runs."""

    client: Client
    runs: int
    requests: int = Field(description="successful requests")
    failed: int
    output_tokens: int
    duration_s: float
    median_ttft_ms: float | None
    median_tpot_ms: float | None
    median_e2e_ms: float | None
    output_throughput: float | None = Field(description="Σ output tokens / Σ run durations")
    median_chunks_per_request: float | None = Field(
        description="ours: events with text; vLLM: every event with choices"
    )
    per_run: list[RunFigures]


class MetricAgreement(_Model):
    metric: Literal["median_ttft_ms", "median_tpot_ms", "output_throughput"]
    unit: str
    specperf: float | None
    vllm: float | None
    rel_diff: float | None = Field(description="specperf / vllm − 1")
    tolerance: float
    ok: bool


class Agreement(_Model):
    kind: Literal["specperf-agreement"] = "specperf-agreement"
    started_at: datetime
    base_url: str
    model: str
    vllm_version: str | None = None
    concurrency: int
    requests_per_run: int
    rounds: int
    warmup_requests: int
    primed: bool
    sampling: Sampling
    order: list[Client]
    tolerances: Tolerances
    specperf: SideFigures
    vllm: SideFigures
    metrics: list[MetricAgreement]
    runs: list[ClientRun]
    bench_argv: list[str] = Field(description="the last `vllm bench serve` run's arguments")

    @property
    def ok(self) -> bool:
        return all(m.ok for m in self.metrics)

    def failures(self) -> list[str]:
        return [
            f"{m.metric}: specperf {_fmt(m.specperf)} vs vllm bench serve {_fmt(m.vllm)} {m.unit} "
            f"({_pct(m.rel_diff)}), tolerance ±{m.tolerance * 100:.0f} %"
            for m in self.metrics if not m.ok
        ]


# --- pure parts ----------------------------------------------------------------------


def run_order(rounds: int) -> list[Client]:
    """ABBA: specperf, vllm, vllm, specperf, … — each side gets ``rounds`` runs and a
    linear drift of the server favours neither."""
    if rounds < 1:
        raise ValueError("rounds must be ≥ 1")
    out: list[Client] = []
    for r in range(rounds):
        out += ["specperf", "vllm"] if r % 2 == 0 else ["vllm", "specperf"]
    return out


def request_prompts(prompts: Sequence[str], n_requests: int, offset: int = 0) -> list[str]:
    """The prompts of a run in the order ``load.run_load`` sends them."""
    if not prompts:
        raise ValueError("no prompts")
    return [prompts[(offset + i) % len(prompts)] for i in range(n_requests)]


def sharegpt_records(prompts: Sequence[str]) -> list[dict[str, Any]]:
    """Prompts as a ShareGPT file `vllm bench serve` sends verbatim and in order (with
    --disable-shuffle): its loader keeps entries with at least two turns and sends the
    first turn's text (vllm/benchmarks/datasets/datasets.py:1343-1374)."""
    return [
        {"id": f"specperf-{i}", "conversations": [
            {"from": "human", "value": p}, {"from": "gpt", "value": _UNUSED_REPLY}]}
        for i, p in enumerate(prompts)
    ]


def bench_serve_argv(
    python: str,
    base_url: str,
    model: str,
    dataset_path: Path,
    result_path: Path,
    sampling: Sampling,
    concurrency: int,
    n_requests: int,
    warmup_requests: int,
    tokenizer: str | None = None,
) -> list[str]:
    argv = [
        python, "-m", BENCH_MODULE,
        "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", tokenizer or model,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset_path),
        "--sharegpt-output-len", str(sampling.max_tokens),
        "--disable-shuffle", "--no-oversample", "--num-prompts", str(n_requests),
        "--max-concurrency", str(concurrency), "--request-rate", "inf",
        "--num-warmups", str(warmup_requests),
        # Sampling as our client sends it (load.completion_body): temperature and seed
        # explicitly, ignore_eos when set (vLLM only sends it when true).
        "--temperature", repr(float(sampling.temperature)),
        "--extra-body", json.dumps({"seed": sampling.seed}),
        "--seed", str(sampling.seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
        "--save-result", "--save-detailed", "--result-filename", str(result_path),
        "--label", "specperf-agreement", "--disable-tqdm",
    ]
    if sampling.ignore_eos:
        argv.append("--ignore-eos")
    return argv


class _BenchResultFile(BaseModel):
    """The fields of a `vllm bench serve --save-result --save-detailed` file we read.
    Extra fields are ignored: vLLM adds some in most releases."""

    model_config = ConfigDict(extra="ignore")

    model_id: str
    max_concurrency: int | None = None
    duration: float
    completed: int
    failed: int = 0
    total_output_tokens: int
    output_throughput: float
    median_ttft_ms: float
    median_tpot_ms: float
    median_e2el_ms: float | None = None
    ttfts: list[float]
    latencies: list[float]
    output_lens: list[int]
    input_lens: list[int]
    itls: list[list[float]]
    start_times: list[float]
    errors: list[str | None]


_FIELD_FIXES = {
    "median_ttft_ms": "vLLM reports TTFT/TPOT only with a tokenizer (vllm/benchmarks/"
                      "serve.py:1393): do not pass --skip-tokenizer-init",
    "median_tpot_ms": "vLLM reports TTFT/TPOT only with a tokenizer (vllm/benchmarks/"
                      "serve.py:1393): do not pass --skip-tokenizer-init",
}
_DETAILED = ("ttfts", "latencies", "output_lens", "input_lens", "itls", "start_times", "errors")


def parse_bench_result(data: Any, source: str, index: int = 0) -> ClientRun:
    """A `vllm bench serve` result (the parsed JSON) as a :class:`ClientRun`: per-request
    samples from its detailed lists, and its own summary in ``reported``."""
    try:
        res = _BenchResultFile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            field = ".".join(str(x) for x in e["loc"]) or "(top level)"
            top = str(e["loc"][0]) if e["loc"] else ""
            fix = _FIELD_FIXES.get(top) or (
                "run vllm bench serve with --save-result --save-detailed" if top in _DETAILED
                else "is this a `vllm bench serve --save-result` file?")
            problems.append(f"field `{field}`: {e['msg']} — fix: {fix}")
        raise AgreementError(
            f"{source}: not a usable `vllm bench serve` result: " + "; ".join(problems)
        ) from None
    n = len(res.ttfts)
    lengths = {f: len(getattr(res, f)) for f in _DETAILED}
    if any(v != n for v in lengths.values()):
        raise AgreementError(
            f"{source}: per-request lists differ in length ({lengths}) — fix: use an "
            "unmodified `vllm bench serve --save-detailed` file"
        )
    t0 = min(res.start_times) if res.start_times else 0.0
    samples = []
    for i in range(n):
        err = res.errors[i] or None
        # vLLM marks a request successful once a first event arrived (its TTFT > 0) and
        # leaves its error empty (endpoint_request_func.py:278-287).
        if err is None and res.ttfts[i] > 0:
            samples.append(RequestSample(
                ok=True, start_s=res.start_times[i] - t0, ttft_s=res.ttfts[i],
                e2e_s=res.latencies[i], output_tokens=res.output_lens[i],
                prompt_tokens=res.input_lens[i], chunks=len(res.itls[i]) + 1,
            ))
        else:
            samples.append(RequestSample(
                ok=False, start_s=res.start_times[i] - t0,
                error=(err or "no event with choices was received")[:300],
            ))
    reported = BenchReported(
        model_id=res.model_id, max_concurrency=res.max_concurrency, duration_s=res.duration,
        completed=res.completed, failed=res.failed, total_output_tokens=res.total_output_tokens,
        output_throughput=res.output_throughput, median_ttft_ms=res.median_ttft_ms,
        median_tpot_ms=res.median_tpot_ms, median_e2el_ms=res.median_e2el_ms,
    )
    return ClientRun(client="vllm", index=index, duration_s=res.duration, samples=samples,
                     reported=reported, source=source)


def load_bench_result(path: Path, index: int = 0) -> ClientRun:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AgreementError(f"{path}: `vllm bench serve` wrote no result file") from None
    except (OSError, ValueError) as exc:
        raise AgreementError(f"{path}: not a readable JSON file: {exc}") from None
    return parse_bench_result(data, str(path), index)


def _ok(samples: Sequence[RequestSample]) -> list[RequestSample]:
    return [s for s in samples if s.ok]


def _medians(samples: Sequence[RequestSample]) -> tuple[float | None, float | None, float | None]:
    ok = _ok(samples)
    ttft = summarise([s.ttft_s for s in ok if s.ttft_s is not None]).median
    tpot = summarise([t for s in ok if (t := s.tpot_s) is not None]).median
    e2e = summarise([s.e2e_s for s in ok if s.e2e_s is not None]).median
    return ttft, tpot, e2e


def _throughput(tokens: int, duration_s: float) -> float | None:
    return tokens / duration_s if duration_s > 0 else None


def side_figures(client: Client, runs: Sequence[ClientRun]) -> SideFigures:
    """A client's figures pooled over its runs: medians over all its successful requests,
    throughput Σ tokens / Σ durations (each run's wall time, warm-up excluded)."""
    mine = [r for r in runs if r.client == client]
    samples = [s for r in mine for s in r.samples]
    ok = _ok(samples)
    tokens = sum(s.output_tokens for s in ok)
    duration = sum(r.duration_s for r in mine)
    ttft, tpot, e2e = _medians(samples)
    per_run = []
    for r in mine:
        rt, rp, _ = _medians(r.samples)
        per_run.append(RunFigures(
            index=r.index, median_ttft_ms=rt, median_tpot_ms=rp,
            output_throughput=_throughput(sum(s.output_tokens for s in _ok(r.samples)),
                                          r.duration_s)))
    return SideFigures(
        client=client, runs=len(mine), requests=len(ok), failed=len(samples) - len(ok),
        output_tokens=tokens, duration_s=duration, median_ttft_ms=ttft, median_tpot_ms=tpot,
        median_e2e_ms=e2e, output_throughput=_throughput(tokens, duration),
        median_chunks_per_request=float(np.median([s.chunks for s in ok])) if ok else None,
        per_run=per_run,
    )


def compare(ours: SideFigures, theirs: SideFigures, tol: Tolerances) -> list[MetricAgreement]:
    out = []
    for metric, unit, limit in (
        ("median_ttft_ms", "ms", tol.ttft),
        ("median_tpot_ms", "ms", tol.tpot),
        ("output_throughput", "tok/s", tol.output_throughput),
    ):
        a, b = getattr(ours, metric), getattr(theirs, metric)
        rel = a / b - 1.0 if a is not None and b else None
        out.append(MetricAgreement(
            metric=metric, unit=unit, specperf=a, vllm=b, rel_diff=rel, tolerance=limit,
            # Inclusive, up to float rounding (110 / 100 − 1 is 0.10000000000000009).
            ok=rel is not None and abs(rel) <= limit + 1e-12,
        ))
    return out


# --- running both clients --------------------------------------------------------------


def run_bench_serve(
    argv: list[str],
    env: dict[str, str],
    result_path: Path,
    log_path: Path,
    n_requests: int,
    index: int,
    timeout_s: float,
) -> ClientRun:
    with log_path.open("wb") as log:
        try:
            proc = subprocess.run(  # noqa: S603 - argument list, no shell
                argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                timeout=timeout_s, cwd=result_path.parent, check=False,
            )
        except subprocess.TimeoutExpired:
            raise AgreementError(
                f"vllm bench serve did not finish within {timeout_s:.0f} s\nlog: {log_path}\n"
                f"--- last {LOG_TAIL_LINES} log lines ---\n{log_tail(log_path, LOG_TAIL_LINES)}"
            ) from None
    if proc.returncode != 0:
        raise AgreementError(
            f"vllm bench serve exited with code {proc.returncode}\nlog: {log_path}\n"
            f"--- last {LOG_TAIL_LINES} log lines ---\n{log_tail(log_path, LOG_TAIL_LINES)}"
        )
    run = load_bench_result(result_path, index)
    if len(run.samples) != n_requests:
        raise AgreementError(
            f"{result_path}: vllm bench serve sent {len(run.samples)} requests, not "
            f"{n_requests}: its ShareGPT loader drops prompts under 4 or over 1024 tokens, or "
            "prompt + output over 2048 (vllm/benchmarks/datasets/datasets.py:340-363) — fix: "
            "use shorter prompts (workload.input_words / max_input_chars)"
        )
    return run


def measure_agreement(
    base_url: str,
    model: str,
    prompts: Sequence[str],
    sampling: Sampling,
    concurrency: int,
    n_requests: int,
    work_dir: Path,
    *,
    rounds: int = 2,
    warmup_requests: int = 1,
    prime: bool = False,
    tolerances: Tolerances | None = None,
    tokenizer: str | None = None,
    request_timeout_s: float = 300.0,
    bench_timeout_s: float = 900.0,
    python: str = sys.executable,
    vllm_version: str | None = None,
    say: Callable[[str], None] = print,
) -> Agreement:
    """Run specperf's client and `vllm bench serve` in turns against a running server.

    ``prime``: one unmeasured pass of the run's prompts first, so that with prefix
    caching on every measured run (of either client) finds them cached alike."""
    work_dir = work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    started = utcnow()
    run_prompts = request_prompts(prompts, n_requests)
    dataset = work_dir / "prompts.sharegpt.json"
    dataset.write_text(json.dumps(sharegpt_records(run_prompts), indent=1), encoding="utf-8")
    # The benchmark's tokenizer is loaded from the local model directory: no hub access.
    env = run_env(work_dir, {}, offline=Path(tokenizer or model).is_dir())
    # The subprocess runs the specperf this process runs (a checkout's src/, not whatever
    # copy is installed), so `-m specperf.lab.vllm_bench` is the module next to this one.
    here = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    if prime:
        say(f"agreement: priming the server with the {n_requests} prompts (not measured)")
        run_load(base_url, model, prompts, sampling, concurrency, n_requests,
                 request_timeout_s=request_timeout_s)
    order = run_order(rounds)
    runs: list[ClientRun] = []
    argv: list[str] = []
    for i, client in enumerate(order):
        t0 = time.monotonic()
        if client == "specperf":
            load = run_load(base_url, model, prompts, sampling, concurrency, n_requests,
                            warmup_requests=warmup_requests, request_timeout_s=request_timeout_s)
            run = ClientRun(client="specperf", index=i, duration_s=load.duration_s,
                            samples=load.samples)
        else:
            result = work_dir / f"bench-{i}.json"
            result.unlink(missing_ok=True)
            argv = bench_serve_argv(python, base_url, model, dataset, result, sampling,
                                    concurrency, n_requests, warmup_requests, tokenizer)
            run = run_bench_serve(argv, env, result, work_dir / f"bench-{i}.log", n_requests,
                                  i, bench_timeout_s)
        runs.append(run)
        fig = side_figures(client, [run]).per_run[0]
        say(f"agreement: run {i + 1}/{len(order)} {client}: TTFT {_fmt(fig.median_ttft_ms)} ms, "
            f"TPOT {_fmt(fig.median_tpot_ms)} ms, {_fmt(fig.output_throughput)} tok/s "
            f"({time.monotonic() - t0:.0f} s)")
    tol = tolerances or Tolerances()
    ours, theirs = side_figures("specperf", runs), side_figures("vllm", runs)
    return Agreement(
        started_at=started, base_url=base_url, model=model, vllm_version=vllm_version,
        concurrency=concurrency, requests_per_run=n_requests, rounds=rounds,
        warmup_requests=warmup_requests, primed=prime, sampling=sampling, order=order,
        tolerances=tol, specperf=ours, vllm=theirs, metrics=compare(ours, theirs, tol),
        runs=runs, bench_argv=argv,
    )


# --- rendering and CLI -----------------------------------------------------------------


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:+.1f} %"


def render(a: Agreement, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"specperf vs vllm bench serve (vLLM {a.vllm_version or '?'}): "
                        f"c={a.concurrency}, {a.rounds} × {a.requests_per_run} requests a side, "
                        f"order {' '.join(a.order)}")
    table.add_column("metric")
    table.add_column("specperf", justify="right")
    table.add_column("vllm bench serve", justify="right")
    table.add_column("specperf / vllm − 1", justify="right")
    table.add_column("tolerance", justify="right")
    table.add_column("")
    for m in a.metrics:
        table.add_row(f"{m.metric} ({m.unit})", _fmt(m.specperf), _fmt(m.vllm), _pct(m.rel_diff),
                      f"±{m.tolerance * 100:.0f} %", "ok" if m.ok else "[red]DIFFERS[/red]")
    for label, attr in (("median E2E (ms)", "median_e2e_ms"),
                        ("median events per request", "median_chunks_per_request")):
        x, y = getattr(a.specperf, attr), getattr(a.vllm, attr)
        table.add_row(label, _fmt(x), _fmt(y), _pct(x / y - 1 if x is not None and y else None),
                      "", "")
    console.print(table)
    for side in (a.specperf, a.vllm):
        runs = ", ".join(f"#{r.index + 1}: {_fmt(r.median_ttft_ms)}/{_fmt(r.median_tpot_ms)} ms "
                         f"{_fmt(r.output_throughput)} tok/s" for r in side.per_run)
        console.print(f"{side.client} runs (TTFT/TPOT, throughput): {runs}; "
                      f"{side.requests} ok, {side.failed} failed")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m specperf.lab.agreement",
        description="Run specperf's load client and `vllm bench serve` in turns against one "
                    "real vLLM server and compare median TTFT, median TPOT and output "
                    "throughput.")
    p.add_argument("--profile", required=True, help="profile name or .toml path (prompts, "
                   "sampling, and the server to start)")
    p.add_argument("--config", default=None,
                   help="server config id to start (default: the profile's no-spec config)")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--requests", type=int, default=None,
                   help="requests per run (default: the profile's requests at this concurrency)")
    p.add_argument("--rounds", type=int, default=2, help="runs per client (default 2)")
    p.add_argument("--warmup", type=int, default=None,
                   help="warm-up requests before each run (default: the profile's)")
    p.add_argument("--prime", action=argparse.BooleanOptionalAction, default=None,
                   help="one unmeasured pass first (default: when prefix caching is not "
                        "disabled by --no-enable-prefix-caching)")
    p.add_argument("--base-url", default=None,
                   help="use this running server instead of starting one (with --model)")
    p.add_argument("--model", default=None, help="with --base-url: the served model (path)")
    p.add_argument("--run-dir", default=None,
                   help="server logs, caches and result files (default .specperf/agreement/…)")
    p.add_argument("--models-cache", default=None,
                   help="generated tiny models (default .specperf/models)")
    p.add_argument("--dataset", default=None, help="ShareGPT JSON (overrides the profile)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the result here")
    args = p.parse_args(argv)
    if (args.base_url is None) != (args.model is None):
        p.error("--base-url and --model go together")

    rootdir = Path.cwd()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(args.run_dir or rootdir / ".specperf" / "agreement" / stamp).resolve()
    try:
        result = agreement_for_profile(
            args.profile, run_dir, config_id=args.config, concurrency=args.concurrency,
            n_requests=args.requests, rounds=args.rounds, warmup_requests=args.warmup,
            prime=args.prime, base_url=args.base_url, model=args.model,
            models_cache=Path(args.models_cache).resolve() if args.models_cache
            else rootdir / ".specperf" / "models",
            dataset=args.dataset, rootdir=rootdir,
        )
    except (ProfileError, ServerError, AgreementError, ValueError) as exc:
        print(f"specperf agreement: error: {exc}", file=sys.stderr)
        return 2
    render(result)
    out = run_dir / "agreement.json"
    out.write_text(result.model_dump_json(indent=1), encoding="utf-8")
    print(f"wrote {out}")
    if args.json:
        Path(args.json).write_text(result.model_dump_json(indent=1), encoding="utf-8")
        print(f"wrote {args.json}")
    for line in result.failures():
        print(f"DIFFERS: {line}")
    return 0 if result.ok else 1


def agreement_for_profile(
    profile: str,
    run_dir: Path,
    *,
    config_id: str | None = None,
    concurrency: int = 1,
    n_requests: int | None = None,
    rounds: int = 2,
    warmup_requests: int | None = None,
    prime: bool | None = None,
    base_url: str | None = None,
    model: str | None = None,
    models_cache: Path | None = None,
    dataset: str | None = None,
    rootdir: Path | None = None,
    tolerances: Tolerances | None = None,
    say: Callable[[str], None] = print,
) -> Agreement:
    """The agreement on a profile's prompts and sampling: on a server started for one of
    its configs (as the perf suite starts it, stopped at the end), or on ``base_url``."""
    rootdir = rootdir or Path.cwd()
    prof = load_profile(profile, rootdir)
    ids = ", ".join(c.id for c in prof.server_configs)
    if config_id is not None and config_id not in {c.id for c in prof.server_configs}:
        raise ValueError(f"{prof.source}: no server config {config_id!r} — pass --config with "
                         f"one of {ids}")
    cfg = prof.config(config_id) if config_id else prof.nospec
    if cfg is None:
        raise ValueError(f"{prof.source}: no no-spec server config — pass --config with one "
                         f"of {ids}")
    serve_args = [*prof.serve_args, *cfg.serve_args]
    if prime is None:
        prime = "--no-enable-prefix-caching" not in serve_args
    # The server as the perf suite starts it (tiny models, preflight, log under run_dir).
    models = models_cache or rootdir / ".specperf" / "models"
    pool = ServerPool(prof, run_dir, models, say=say)
    try:
        version = None
        if base_url is None:
            server = pool.server_for(cfg.id)
            base_url = server.base_url
            model = server.model
            version = server.version
        assert model is not None
        return measure_agreement(
            base_url, model, load_prompts(prof, dataset, models_cache=models, say=say),
            prof.sampling, concurrency,
            n_requests or prof.load.requests_at(concurrency), run_dir / "agreement",
            rounds=rounds,
            warmup_requests=prof.load.warmup_requests if warmup_requests is None
            else warmup_requests,
            prime=prime, tolerances=tolerances, request_timeout_s=prof.load.request_timeout_s,
            vllm_version=version, say=say,
        )
    finally:
        pool.stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
