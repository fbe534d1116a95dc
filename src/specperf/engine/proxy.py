"""A delaying loopback HTTP proxy: a FAULT INJECTOR for injected-regression experiments,
NOT a vLLM stand-in.

It listens on 127.0.0.1 and forwards every request to a real server (``target``, e.g. a
running vLLM at ``http://127.0.0.1:8000``). Streamed responses (``text/event-stream``) are
re-timed; everything else (``/metrics``, ``/health``, ``/v1/models``, non-streamed
completions, errors) passes through untouched, so counters scraped through the proxy are
the server's own.

How a stream is re-timed
------------------------
A server whose every decode step got ``delay_s`` slower would send its k-th text chunk
(0-based) ``(k + 1) * delay_s`` later than it does now. The proxy does exactly that: a
reader task takes SSE events off the upstream stream as they arrive, and each event that
carries text (``choices[0].text`` non-empty, the chunks specperf.engine.load counts) is forwarded
no earlier than ``its arrival + (k + 1) * delay_s``; other events (the usage chunk,
``[DONE]``, comments) follow the chunk before them without a delay of their own. Order
is always preserved. So, for a request streamed in ``C`` text chunks and ``N`` tokens:

* TTFT rises by ``delay_s``;
* E2E rises by ``C * delay_s``;
* TPOT = (E2E - TTFT) / (N - 1) rises by ``(C - 1) * delay_s / (N - 1)``, about
  ``delay_s / tokens_per_chunk``  (see :func:`delay_for_tpot`).

These are lower bounds on a loaded machine (the proxy itself costs a little CPU, and an
event loop wakes up late rather than early), which is what a regression test needs.

Use::

    with DelayProxy("http://127.0.0.1:8000", delay_s=0.005) as proxy:
        run_load(proxy.base_url, ...)

In a perf run, SPECPERF_PROXY_DELAY_MS puts it in front of the spec servers (docs/validation.md).

A slowdown relative to the machine's speed
------------------------------------------
``stretch`` (a fraction) re-times the decode instead: a text chunk that arrives ``t``
seconds after the stream's first is forwarded no earlier than ``(1 + stretch) * t`` after
it, so E2E − TTFT, and TPOT with it, grow by that fraction whatever the machine's speed —
a server whose every decode step got that much slower; TTFT is unchanged. A fixed delay
is a fixed number of milliseconds, so the same delay is a larger slowdown on a faster
machine: the EPYC VM of docs/validation.md ran a 16.4 ms-per-chunk injection sized as
+25 % at +44 % hours later, and one re-sized as +25 % at +18 % an hour after that. In a
perf run SPECPERF_PROXY_STRETCH sets it.

What it delivered is recorded, not assumed: per stream, the first to the last text chunk
as it arrived and as it left (:attr:`ProxyStats.decode_spans`; 1 + stretch apart when the
proxy did its part). The client's TPOT moves around that with the host, a few per cent
either way (benchmarks/proxy_stretch.py; docs/validation.md, "What the stretch delivers").

A delay that grows
------------------
``growth_s_per_s`` makes the delay rise with time: a stream that starts ``t`` seconds
after the proxy was made is re-timed with ``delay_s + growth_s_per_s * t`` per chunk
(fixed for that stream). In a perf run SPECPERF_PROXY_DELAY_GROWTH_MS (milliseconds per
second) sets it: the soak's stand-in for a server whose decode steps get slower over
hours (docs/scenarios.md) — vLLM cannot be made to decay on demand.

Stand-in faults
---------------
``fault`` (one of :data:`FAULT_MODES`) makes the proxy play a fault vLLM itself cannot be
made to produce, in front of a real server, for the fault battery (tests/e2e/test_faults_standin.py,
docs/faults.md): ``/metrics`` answering 404, an empty page or text that is not Prometheus;
completions answering HTTP 500; a stream that stops after its first text chunks and
never ends. Everything else is forwarded untouched.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from specperf.engine.loopback import LoopbackApp

__all__ = [
    "FAULT_MODES", "DelayProxy", "ProxyStats", "delay_for_tpot", "expected_tpot_rise", "make_app",
]

#: The stand-in faults (see the module docstring).
FAULT_MODES = ("metrics-missing", "metrics-empty", "metrics-malformed", "http-500", "stall")
#: A stalled stream sends this many text chunks first (so it stalls mid-response).
STALL_AFTER_CHUNKS = 2
#: Not valid Prometheus text: a sample whose value is not a number.
MALFORMED_METRICS = b"# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total lots\n"

# Hop-by-hop headers (RFC 9110 7.6.1) and the ones aiohttp recomputes: never copied.
_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "transfer-encoding", "upgrade", "host", "content-length", "content-encoding",
}


def expected_tpot_rise(delay_s: float, chunks: float, tokens: float) -> float:
    """How much the proxy raises one request's TPOT (seconds): (C - 1) * delay / (N - 1)."""
    if tokens < 2 or chunks < 1:
        return 0.0
    return (chunks - 1) * delay_s / (tokens - 1)


def delay_for_tpot(effect: float, tpot_s: float, chunks: float, tokens: float) -> float:
    """The per-chunk delay (seconds) that raises a TPOT of ``tpot_s`` by the relative
    ``effect`` for requests of ``chunks`` text chunks and ``tokens`` output tokens."""
    if chunks < 2 or tokens < 2:
        raise ValueError("a TPOT shift needs requests of at least 2 chunks and 2 tokens")
    return effect * tpot_s * (tokens - 1) / (chunks - 1)


@dataclass
class ProxyStats:
    requests: int = 0
    streams: int = 0
    events: int = 0
    delayed_chunks: int = 0
    #: Per stream of at least two text events: (first to last text event as it arrived
    #: from the server, as it was forwarded), seconds. What a stretch delivered is read
    #: off these, not assumed (docs/validation.md, "What the stretch delivers").
    decode_spans: list[tuple[float, float]] = field(default_factory=list)

    def decode_ratios(self) -> list[float]:
        """Each stream's decode as forwarded over as received (1 + stretch when the
        proxy did its part; 1 with no stretch and no delay)."""
        return [out / got for got, out in self.decode_spans if got > 0]


def _copy_headers(headers: object) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _HOP}  # type: ignore[attr-defined]


def _is_text_event(event: bytes) -> bool:
    """Whether an SSE event carries text, judged like specperf.engine.load counts chunks."""
    for line in event.splitlines():
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]" or not payload.startswith(b"{"):
            return False
        try:
            choices = json.loads(payload).get("choices") or []
        except ValueError:
            return False
        return bool(choices and isinstance(choices[0], dict) and choices[0].get("text"))
    return False


def _fault_response(fault: str | None, request: web.Request) -> web.Response | None:
    """The stand-in's own answer to ``request``, or None to forward it."""
    if fault is None:
        return None
    if request.path == "/metrics":
        if fault == "metrics-missing":
            return web.Response(status=404, text="Not Found")
        if fault == "metrics-empty":
            return web.Response(status=200, body=b"", content_type="text/plain")
        if fault == "metrics-malformed":
            return web.Response(status=200, body=MALFORMED_METRICS, content_type="text/plain")
    if fault == "http-500" and request.path.startswith("/v1/"):
        return web.json_response({"error": {"message": "stand-in: internal server error",
                                            "type": "InternalServerError", "code": 500}},
                                 status=500)
    return None


def make_app(target: str, delay_s: float, stats: ProxyStats | None = None,
             timeout_s: float = 3600.0, fault: str | None = None,
             growth_s_per_s: float = 0.0, stretch: float = 0.0) -> web.Application:
    """The proxy as an aiohttp application (forwards to ``target``, a base URL), playing
    the stand-in ``fault`` if one is given; with ``growth_s_per_s`` the per-chunk delay
    of a stream rises by that much per second since the app was made; with ``stretch``
    each stream's decode takes that fraction longer."""
    if delay_s < 0:
        raise ValueError(f"delay_s must be >= 0, got {delay_s}")
    if stretch < 0:
        raise ValueError(f"stretch must be >= 0, got {stretch}")
    if growth_s_per_s < 0:
        raise ValueError(f"growth_s_per_s must be >= 0, got {growth_s_per_s}")
    born = time.perf_counter()
    if fault is not None and fault not in FAULT_MODES:
        raise ValueError(f"unknown fault {fault!r}; one of {', '.join(FAULT_MODES)}")
    target = target.rstrip("/")
    stats = stats if stats is not None else ProxyStats()
    session_key = web.AppKey("session", aiohttp.ClientSession)

    async def on_startup(app: web.Application) -> None:
        app[session_key] = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            connector=aiohttp.TCPConnector(limit=0),
            auto_decompress=False,
        )

    async def on_cleanup(app: web.Application) -> None:
        await app[session_key].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        stats.requests += 1
        body = await request.read()
        faulted = _fault_response(fault, request)
        if faulted is not None:
            return faulted
        url = target + request.rel_url.path_qs
        session = request.app[session_key]
        async with session.request(
            request.method, url, data=body or None, headers=_copy_headers(request.headers),
            allow_redirects=False,
        ) as upstream:
            ctype = upstream.headers.get("Content-Type", "")
            if upstream.status != 200 or not ctype.startswith("text/event-stream"):
                return web.Response(
                    status=upstream.status, body=await upstream.read(),
                    headers=_copy_headers(upstream.headers),
                )
            stats.streams += 1
            resp = web.StreamResponse(status=upstream.status,
                                      headers=_copy_headers(upstream.headers))
            await resp.prepare(request)
            delay = delay_s + growth_s_per_s * (time.perf_counter() - born)
            await _retime(upstream, resp, delay, stats,
                          stall_after=STALL_AFTER_CHUNKS if fault == "stall" else None,
                          stretch=stretch)
            try:
                await resp.write_eof()
            except ConnectionError:
                # The client stops reading at [DONE] and may close the connection before
                # the chunked body's end, which then has nowhere to go.
                pass
            return resp

    app = web.Application(client_max_size=1 << 30)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


async def _retime(upstream: aiohttp.ClientResponse, resp: web.StreamResponse,
                  delay_s: float, stats: ProxyStats, stall_after: int | None = None,
                  stretch: float = 0.0) -> None:
    """Forward SSE events, the k-th text event no earlier than arrival + (k + 1) * delay
    and, with ``stretch``, than first + (1 + stretch) * (arrival - first), the first text
    event's arrival; with ``stall_after``, stop forwarding after that many text events and
    hold the stream open until the client gives up."""
    queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

    async def reader() -> None:
        buf = b""
        try:
            async for data in upstream.content.iter_any():
                now = time.perf_counter()
                buf += data
                while True:
                    cut = buf.find(b"\n\n")
                    if cut < 0:
                        break
                    queue.put_nowait((now, buf[: cut + 2]))
                    buf = buf[cut + 2 :]
            if buf:
                queue.put_nowait((time.perf_counter(), buf))
        finally:
            queue.put_nowait(None)

    task = asyncio.create_task(reader())
    k = 0
    not_before = 0.0
    first: float | None = None
    # The first and the latest text event: when it arrived, when it was forwarded.
    first_text: tuple[float, float] | None = None
    last_text: tuple[float, float] | None = None
    try:
        while (item := await queue.get()) is not None:
            arrived, event = item
            stats.events += 1
            # Parsed whatever the mode, so a zero-delay reference proxy costs the CPU an
            # injecting one does (it shares a core with the API server and the client).
            text = _is_text_event(event)
            if stall_after is not None and text:
                stall_after -= 1
                if stall_after < 0:
                    await asyncio.Event().wait()  # never set: the client's timeout ends it
            if (delay_s or stretch) and text:
                stats.delayed_chunks += 1
                if delay_s:
                    k += 1
                    not_before = max(not_before, arrived + k * delay_s)
                if stretch:
                    first = arrived if first is None else first
                    not_before = max(not_before, first + (1 + stretch) * (arrived - first))
            wait = not_before - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            await resp.write(event)
            if text:
                last_text = (arrived, time.perf_counter())
                first_text = first_text or last_text
        if first_text and last_text and last_text[0] > first_text[0]:
            stats.decode_spans.append((last_text[0] - first_text[0],
                                       last_text[1] - first_text[1]))
    finally:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class DelayProxy(LoopbackApp):
    """Runs the proxy on 127.0.0.1 in a background thread (context manager).

    ``port=0`` picks a free port; ``base_url`` is where clients point instead of the
    target. ``stats`` counts requests, streams, events and delayed text chunks.
    """

    def __init__(self, target: str, delay_s: float, port: int = 0,
                 fault: str | None = None, growth_s_per_s: float = 0.0,
                 stretch: float = 0.0) -> None:
        self.target = target.rstrip("/")
        self.delay_s = delay_s
        self.fault = fault
        self.growth_s_per_s = growth_s_per_s
        self.stretch = stretch
        self.stats = ProxyStats()
        super().__init__(make_app(self.target, delay_s, self.stats, fault=fault,
                                  growth_s_per_s=growth_s_per_s, stretch=stretch), port=port,
                         name="specperf-delay-proxy")
