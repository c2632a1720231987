"""The demo's backends behind the real gateway, in this process on free ports: every demo route
streams its answer, whole or cut off by its client, and nothing in the log is a traceback. (The
gateway closes its upstream connection as soon as it has read a stream's end, before a demo
backend's last write; a client that leaves closes it earlier still.)"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from fakes import client_request, reader_for

from gateway.app import create_app
from gateway.config import parse_config
from gateway.demo import demo_backend_app, demo_config
from gateway.dialects import get


class Demo:
    def __init__(self, gw: TestClient[Any, Any], routes: list[dict[str, Any]],
                 runners: list[web.AppRunner]) -> None:
        self.gw, self.routes, self._runners = gw, routes, runners

    async def close(self) -> None:
        """The gateway, then every backend, once each of their handlers ended."""
        await self.gw.close()
        while self._runners:
            await self._runners.pop().cleanup()


@pytest.fixture
async def demo(aiohttp_client: Any) -> AsyncIterator[Demo]:
    """The built-in demo config's gateway (without its history store) in front of every demo
    backend, each on a free port."""
    cfg = demo_config()
    cfg.pop("history")
    runners = []
    for name, up in cfg["upstreams"].items():
        # paced, as the demo is, but brief
        runner = web.AppRunner(demo_backend_app(name, token_delay=0.002), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        up["url"] = f"http://127.0.0.1:{runner.addresses[0][1]}{get(name).default_path}"
    gw: TestClient[Any, Any] = await aiohttp_client(
        create_app(parse_config(cfg, env={})), server_kwargs={"handler_cancellation": True})
    d = Demo(gw, cfg["routes"], runners)
    try:
        yield d
    finally:
        await d.close()


def tracebacks(records: list[logging.LogRecord]) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in records
            if r.exc_info or r.levelno >= logging.ERROR or "Traceback" in r.getMessage()]


@pytest.mark.parametrize("cut_off", [False, True], ids=["whole-stream", "client-leaves"])
async def test_every_demo_route_streams_without_a_traceback(
        demo: Demo, caplog: pytest.LogCaptureFixture, cut_off: bool) -> None:
    """Among them a cumulative-content client in front of an upstream whose stream has an end
    marker of its own, which the gateway reads before the backend is done writing."""
    gw, routes = demo.gw, demo.routes
    assert any(get(r["dialect"]).cumulative_stream for r in routes)
    caplog.set_level(logging.DEBUG)
    for route in routes:
        path, body, headers = client_request(route["dialect"], route["path"], stream=True)
        async with gw.post(path, json=body, headers=headers) as resp:
            assert resp.status == 200, route
            if cut_off:
                assert await resp.content.readany()
                resp.close()
            else:
                seen = reader_for(route["dialect"]).read_stream(await resp.read())
                assert "demo backend" in seen.text and seen.error is None, route
    await demo.close()  # the backends' handlers end after the gateway's: all of them ended
    assert not tracebacks(caplog.records), tracebacks(caplog.records)


async def test_dialects_that_suggest_one_path_are_each_served(demo: Demo) -> None:
    """Where two dialects suggest the same path (``default_path`` is a suggestion), the demo
    serves both: each at a path of its own, each answering its own client through the gateway,
    whole and streamed."""
    by_path: dict[str, list[dict[str, Any]]] = {}
    for route in demo.routes:
        by_path.setdefault(get(route["dialect"]).default_path, []).append(route)
    shared = [group for group in by_path.values() if len(group) > 1]
    assert shared, "no two dialects suggest one path"
    for group in shared:
        assert len({r["path"] for r in group}) == len(group)
        for route in group:
            for stream in (False, True):
                path, body, headers = client_request(route["dialect"], route["path"],
                                                     stream=stream)
                async with demo.gw.post(path, json=body, headers=headers) as resp:
                    assert resp.status == 200, (route, stream)
                    reader = reader_for(route["dialect"])
                    seen = reader.read_stream(await resp.read()) if stream else \
                        reader.read_whole(await resp.json())
                    assert "demo backend" in seen.text and seen.error is None, route
