"""The load client: streamed /v1/completions at a fixed concurrency.

One aiohttp session, a semaphore for concurrency, requests in a fixed order over a
fixed prompt list. Per request it records time to first token (first chunk that
carries text), end-to-end latency, streamed chunk count, and token counts from the
final `usage` chunk (`stream_options.include_usage`), because chunks carry several
tokens each and counting chunks would under-count. When the server reports per-request
spec-decode metrics (``--per-request-spec-decode-metrics``), they ride on that chunk too and
are kept with the chunks that carried tokens, for the counters' cross-check
(specperf.analysis.spec_counters).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence

import aiohttp

from specperf.config.workload import Sampling
from specperf.schemas import LoadResult, RequestSample, RequestSpecDecode


def completion_body(model: str, prompt: str, sampling: Sampling) -> dict[str, object]:
    # Everything that changes the output is sent explicitly: benchmark and server
    # defaults for temperature and seed have changed between vLLM versions.
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "seed": sampling.seed,
        "ignore_eos": sampling.ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def spec_decode_of(event: dict[str, object]) -> RequestSpecDecode | None:
    """The ``metrics.speculative_decoding`` object of vLLM's final usage chunk (its
    SpeculativeDecodingMetrics, vllm/entrypoints/generate/base/protocol.py), or None when
    the server reports none; ValueError when it is there but not that shape."""
    metrics = event.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ValueError(f"metrics.speculative_decoding is {type(spec).__name__}, not an object")
    try:
        drafted = spec.get("per_step_drafted") or []
        lengths = [0] * (max(drafted) + 1) if drafted else []
        for n in drafted:
            lengths[int(n)] += 1
        return RequestSpecDecode(
            steps=int(spec["num_spec_steps"]), draft_tokens=int(spec["num_draft_tokens"]),
            accepted_tokens=int(spec["num_accepted_draft_tokens"]),
            accepted_histogram=[int(x) for x in spec["acceptance_histogram"]],
            proposal_lengths=lengths)
    except (KeyError, TypeError, IndexError) as exc:
        raise ValueError(f"metrics.speculative_decoding is not vLLM's shape ({exc!r})") from None


async def _one_request(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, object],
    t_origin: float,
) -> RequestSample:
    t0 = time.perf_counter()
    timeout_s = session.timeout.total
    ttft: float | None = None
    chunks = 0
    token_chunks = 0
    usage: dict[str, int] | None = None
    spec: RequestSpecDecode | None = None
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                text = (await resp.text())[:300]
                return RequestSample(
                    ok=False, start_s=t0 - t_origin, error=f"HTTP {resp.status}: {text}"
                )
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                event = json.loads(payload)
                if "error" in event:
                    raise RuntimeError(f"stream error: {event['error']}")
                choices = event.get("choices") or []
                if choices:
                    # vLLM streams a chunk per step that produced tokens, with empty text
                    # when they end inside a UTF-8 character.
                    token_chunks += 1
                if choices and choices[0].get("text"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                if event.get("usage"):
                    usage = event["usage"]
                    spec = spec_decode_of(event)
        e2e = time.perf_counter() - t0
    except (asyncio.TimeoutError, TimeoutError):
        # str() of a timeout is empty: say which limit it was and how far the stream got
        # (0 chunks: no answer at all; more: a stream that stalled mid-response).
        return RequestSample(
            ok=False, start_s=t0 - t_origin, chunks=chunks,
            error=f"timed out: no complete response within "
                  f"{'?' if timeout_s is None else format(timeout_s, 'g')} s "
                  f"(load.request_timeout_s); {chunks} text chunk{'' if chunks == 1 else 's'} "
                  f"had arrived",
        )
    except (aiohttp.ClientError, RuntimeError, ValueError) as exc:
        return RequestSample(
            ok=False, start_s=t0 - t_origin, chunks=chunks, error=f"{type(exc).__name__}: {exc}"
        )
    if usage is None:
        return RequestSample(
            ok=False, start_s=t0 - t_origin, chunks=chunks, error="stream ended without usage"
        )
    out_tokens = int(usage.get("completion_tokens") or 0)
    if ttft is None:
        return RequestSample(
            ok=False, start_s=t0 - t_origin, chunks=chunks, error="no text was streamed"
        )
    return RequestSample(
        ok=True,
        start_s=t0 - t_origin,
        ttft_s=ttft,
        e2e_s=e2e,
        output_tokens=out_tokens,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        chunks=chunks,
        token_chunks=token_chunks if spec is not None else None,
        spec=spec,
    )


async def _warm_up(session: aiohttp.ClientSession, url: str, model: str,
                   prompts: Sequence[str], sampling: Sampling, n: int) -> None:
    # Warmup uses prompts from the end of the list so it does not prime the prefix cache
    # for the measured requests.
    for i in range(n):
        body = completion_body(model, prompts[-1 - (i % len(prompts))], sampling)
        await _one_request(session, url, body, time.perf_counter())


async def run_load_async(
    base_url: str,
    model: str,
    prompts: Sequence[str],
    sampling: Sampling,
    concurrency: int,
    n_requests: int,
    warmup_requests: int = 0,
    request_timeout_s: float = 300.0,
    prompt_offset: int = 0,
    on_request: Callable[[RequestSample], None] | None = None,
) -> LoadResult:
    """``on_request`` is called on the event loop with each measured request's sample as
    it finishes (not for warmup requests), e.g. to advance a progress bar; keep it cheap,
    other streams are being timed meanwhile."""
    if not prompts:
        raise ValueError("no prompts")
    url = f"{base_url}/v1/completions"
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    connector = aiohttp.TCPConnector(limit=max(concurrency, 1) + 1)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await _warm_up(session, url, model, prompts, sampling, warmup_requests)
        sem = asyncio.Semaphore(concurrency)
        t_origin = time.perf_counter()

        async def bounded(i: int) -> RequestSample:
            async with sem:
                prompt = prompts[(prompt_offset + i) % len(prompts)]
                sample = await _one_request(
                    session, url, completion_body(model, prompt, sampling), t_origin
                )
            if on_request is not None:
                on_request(sample)
            return sample

        samples = await asyncio.gather(*(bounded(i) for i in range(n_requests)))
        duration = time.perf_counter() - t_origin
    return LoadResult(
        concurrency=concurrency,
        samples=list(samples),
        duration_s=duration,
        warmup_requests=warmup_requests,
    )


def run_load(*args: object, **kwargs: object) -> LoadResult:
    return asyncio.run(run_load_async(*args, **kwargs))  # type: ignore[arg-type]


async def run_interleaved_load_async(
    targets: Sequence[tuple[str, str]],
    prompts: Sequence[str],
    sampling: Sampling,
    n_requests: int,
    warmup_requests: int = 0,
    request_timeout_s: float = 300.0,
    on_request: Callable[[RequestSample], None] | None = None,
) -> list[LoadResult]:
    """One request at a time to each of ``targets`` ((base URL, model) pairs) in turn: the
    i-th prompt goes to every target before the (i+1)-th goes to any, in an order that
    reverses each round (A B, B A, …) so neither side always runs first. Requests a second
    or two apart share the machine's speed, which on a shared VM moves more between
    trials than a comparison's minimum effect (docs/validation.md, "Where the noise comes
    from on these VMs"), so the ratio of the two sides cancels it.

    One LoadResult per target, at concurrency 1; its ``duration_s`` is the time its own
    requests took (not the other targets'), so its throughputs are a c = 1 trial's."""
    if not prompts:
        raise ValueError("no prompts")
    if not targets:
        raise ValueError("no targets")
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    connector = aiohttp.TCPConnector(limit=len(targets) + 1)
    samples: list[list[RequestSample]] = [[] for _ in targets]
    busy = [0.0] * len(targets)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        for url, model in targets:
            await _warm_up(session, f"{url}/v1/completions", model, prompts, sampling,
                           warmup_requests)
        t_origin = time.perf_counter()
        for i in range(n_requests):
            order = range(len(targets)) if i % 2 == 0 else reversed(range(len(targets)))
            for t in order:
                url, model = targets[t]
                t0 = time.perf_counter()
                sample = await _one_request(
                    session, f"{url}/v1/completions",
                    completion_body(model, prompts[i % len(prompts)], sampling), t_origin)
                busy[t] += time.perf_counter() - t0
                samples[t].append(sample)
                if on_request is not None:
                    on_request(sample)
    return [LoadResult(concurrency=1, samples=s, duration_s=d, warmup_requests=warmup_requests)
            for s, d in zip(samples, busy, strict=True)]


def run_interleaved_load(*args: object, **kwargs: object) -> list[LoadResult]:
    return asyncio.run(run_interleaved_load_async(*args, **kwargs))  # type: ignore[arg-type]
