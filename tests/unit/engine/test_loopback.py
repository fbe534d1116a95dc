"""LoopbackApp: an aiohttp app on 127.0.0.1 from a background thread (the calibration
server's and the delaying proxy's host)."""

from __future__ import annotations

import urllib.request

from aiohttp import web

from specperf.engine.loopback import LoopbackApp


def _app() -> web.Application:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=f"hello {request.remote}")

    app = web.Application()
    app.router.add_get("/", hello)
    return app


def test_serves_on_loopback_on_a_picked_port_and_stops() -> None:
    with LoopbackApp(_app()) as srv:
        assert srv.port != 0 and srv.base_url == f"http://127.0.0.1:{srv.port}"
        with urllib.request.urlopen(srv.base_url, timeout=10) as resp:  # noqa: S310 - loopback
            assert resp.read().decode() == "hello 127.0.0.1"
        thread = srv._thread
    assert not thread.is_alive()
    srv.stop()  # stopping twice is harmless


def test_start_returns_the_server_for_chaining() -> None:
    srv = LoopbackApp(_app(), name="x").start()
    try:
        assert isinstance(srv, LoopbackApp) and srv._thread.name == "x"
    finally:
        srv.stop()
