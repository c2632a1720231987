"""The benchmark's own requests, through the real gateway, to the benchmark's mock: the routes of
``bench/run.py``'s config, the requests and paths of its clients (``bench/wire/``), read and
checked by its driver. A request the gateway takes otherwise than the bench expects (a stream
asked as its client's SDK does not ask it, say) would make every figure of that pair an error
rate; here it fails a test instead. Functional only, as the other tests of bench/."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from bench_modules import mock_server, shipped_dialects_only
from ports import free_port
from yarl import URL

from gateway.app import create_app
from gateway.config import parse_config

with shipped_dialects_only():
    import driver
    import h1load
    import run
    import wire

CHUNKS = 20
TIMEOUT = 5.0

# What `bench/run.py --quick` runs, and every dialect's identity pair besides.
PAIRS = list(dict.fromkeys([*run.parse_args(["--quick"]).pairs, *((d, d) for d in run.ALL)]))


@pytest.fixture
async def ports(aiohttp_server: Callable[..., Any]) -> AsyncIterator[run.Ports]:
    """The mock, and the gateway in this process with the benchmark's config in front of it
    (the ports of the servers this test does not start are free ones nothing answers on)."""
    async with mock_server(CHUNKS, lean=True) as mock_port:
        ports = run.Ports(mock=mock_port, paced=free_port(), pt=free_port(),
                          pt_paced=free_port(), gw=free_port())
        app: web.Application = create_app(parse_config(run.gateway_config(ports), env={}))
        await aiohttp_server(app, port=ports.gw)  # handlers cancelled as `serve` does
        yield ports


async def _send(target: driver.Target) -> h1load.Answer:
    """One request, as bench/instructions.py's ``batch`` sends it."""
    body, headers = wire.request(target.dialect, target.stream)
    url = URL(target.url, encoded=True)
    host, port = url.host or "127.0.0.1", url.port or 80
    conn = await h1load.H1Connection.open(host, port)
    try:
        async with asyncio.timeout(TIMEOUT):
            return await conn.request(h1load.request_bytes(host, port, url.raw_path_qs, body,
                                                           headers))
    finally:
        conn.close()


@pytest.mark.parametrize("mode", ["whole", "stream"])
@pytest.mark.parametrize(("client", "upstream"), PAIRS, ids=[f"{c}:{u}" for c, u in PAIRS])
async def test_the_bench_client_gets_a_right_answer_through_the_gateway(
        ports: run.Ports, client: str, upstream: str, mode: str) -> None:
    target = run.target_for(run.Spec("load", 1, mode, "gateway", client, upstream), ports,
                            wire.answer_text(CHUNKS))
    answer = await _send(target)
    error = driver._check(target, answer.status, answer.body)
    assert error is None, f"{mode} {client} -> gateway -> {upstream}: {error}"
