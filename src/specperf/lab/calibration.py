"""A loopback calibration server: a measuring stick for the load client, NOT a vLLM
stand-in.

It speaks just enough of the OpenAI streaming completions protocol to drive a client:
it streams `tokens_per_chunk` tokens per chunk, `chunk_delay_s` apart (0 = as fast as it
can), ends with a usage chunk, and counts how many requests are in flight. It knows
nothing about models or speculative decoding; tests of the suite's behaviour run
against real vLLM.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from aiohttp import web

from specperf.engine.loopback import LoopbackApp


@dataclass
class CalibrationConfig:
    chunks: int = 8
    tokens_per_chunk: int = 4
    first_chunk_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    send_usage: bool = True
    status: int = 200


@dataclass
class CalibrationStats:
    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    bodies: list[dict[str, object]] = field(default_factory=list)


def make_app(cfg: CalibrationConfig, stats: CalibrationStats) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        stats.requests += 1
        stats.bodies.append(body)
        if cfg.status != 200:
            return web.Response(status=cfg.status, text="injected failure")
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            if cfg.first_chunk_delay_s:
                await asyncio.sleep(cfg.first_chunk_delay_s)
            for i in range(cfg.chunks):
                if i and cfg.chunk_delay_s:
                    await asyncio.sleep(cfg.chunk_delay_s)
                event = {"choices": [{"index": 0, "text": " tok" * cfg.tokens_per_chunk}]}
                await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            if cfg.send_usage:
                n = cfg.chunks * cfg.tokens_per_chunk
                usage = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": n + 7}
                event2 = {"choices": [], "usage": usage}
                await resp.write(b"data: " + json.dumps(event2).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            return resp
        finally:
            stats.in_flight -= 1

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    return app


class CalibrationServer(LoopbackApp):
    """Runs the app on 127.0.0.1 in a background thread (context manager)."""

    def __init__(self, cfg: CalibrationConfig | None = None) -> None:
        self.cfg = cfg or CalibrationConfig()
        self.stats = CalibrationStats()
        super().__init__(make_app(self.cfg, self.stats), name="specperf-calibration")
