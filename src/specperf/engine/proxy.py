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
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from specperf.engine.loopback import LoopbackApp

__all__ = ["DelayProxy", "ProxyStats", "delay_for_tpot", "expected_tpot_rise", "make_app"]

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


def make_app(target: str, delay_s: float, stats: ProxyStats | None = None,
             timeout_s: float = 3600.0) -> web.Application:
    """The proxy as an aiohttp application (forwards to ``target``, a base URL)."""
    if delay_s < 0:
        raise ValueError(f"delay_s must be >= 0, got {delay_s}")
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
            await _retime(upstream, resp, delay_s, stats)
            await resp.write_eof()
            return resp

    app = web.Application(client_max_size=1 << 30)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


async def _retime(upstream: aiohttp.ClientResponse, resp: web.StreamResponse,
                  delay_s: float, stats: ProxyStats) -> None:
    """Forward SSE events, the k-th text event no earlier than arrival + (k + 1) * delay."""
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
    try:
        while (item := await queue.get()) is not None:
            arrived, event = item
            stats.events += 1
            if delay_s and _is_text_event(event):
                k += 1
                stats.delayed_chunks += 1
                not_before = max(not_before, arrived + k * delay_s)
            wait = not_before - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            await resp.write(event)
    finally:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class DelayProxy(LoopbackApp):
    """Runs the proxy on 127.0.0.1 in a background thread (context manager).

    ``port=0`` picks a free port; ``base_url`` is where clients point instead of the
    target. ``stats`` counts requests, streams, events and delayed text chunks.
    """

    def __init__(self, target: str, delay_s: float, port: int = 0) -> None:
        self.target = target.rstrip("/")
        self.delay_s = delay_s
        self.stats = ProxyStats()
        super().__init__(make_app(self.target, delay_s, self.stats), port=port,
                         name="specperf-delay-proxy")
