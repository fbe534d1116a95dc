"""An aiohttp application served on 127.0.0.1 from a background thread.

The load client is asyncio and runs in the caller's thread, so a helper server that it
talks to (the calibration server, the delaying proxy) needs its own event loop in its own
thread. Both bind loopback only; ``port=0`` picks a free port, read back after binding.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TypeVar

from aiohttp import web

__all__ = ["LoopbackApp"]

HOST = "127.0.0.1"
_App = TypeVar("_App", bound="LoopbackApp")


class LoopbackApp:
    """Serves ``app`` on 127.0.0.1 in a daemon thread; ``start``/``stop`` or a ``with``
    block. ``base_url`` is valid once started."""

    def __init__(self, app: web.Application, port: int = 0, name: str = "specperf-loopback"):
        self.host = HOST
        self.port = port
        self._app = app
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=name)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def _start(self) -> None:
        self._runner = web.AppRunner(self._app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def start(self: _App) -> _App:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
            self._runner = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self: _App) -> _App:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
