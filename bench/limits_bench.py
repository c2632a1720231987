"""What a limited key costs the exchange, per request, against an unlimited key of the same app
on the same event loop (in process: no client sockets, no HTTP client).

Each request goes through the real handler (``handlers.chat`` → the exchange → the in-memory
transport → a whole answer) with ``aiohttp``'s mocked request. One app holds both keys: a plain
``auth.api_keys`` key (unlimited) and a named key with every limit; their rounds alternate, so
both see the same loop, warm-up and machine. Stores:

- ``memory``: the embedded store;
- ``redis``: a real ``redis-server`` started on a free loopback port (tests/redis_server.py, the
  launcher the tests use): one ``EVALSHA`` per admission and one per settlement.

Printed per store: CPU µs per request (the gateway's own work; Redis's is its own process) and
wall µs per request (what a client waits, the loopback round trips included), each with the
ratio limited / unlimited. The limits are set high enough never to refuse.

Usage: ``python bench/limits_bench.py [--requests 5000] [--repeat 3] [--stores memory,redis]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
from aiohttp import streams, web
from aiohttp.test_utils import make_mocked_request

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from redis_server import RedisServer  # noqa: E402  (the same launcher the tests use)

from gateway import handlers  # noqa: E402
from gateway.app import create_app  # noqa: E402
from gateway.config import parse_config  # noqa: E402
from gateway.dialects import get, names  # noqa: E402
from gateway.log import configure_logging  # noqa: E402
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest  # noqa: E402

DIALECT = next(get(n) for n in names() if get(n).stream_path is None)
"""Some dialect, both sides (the registry's first whose path serves whole answers)."""
BODY = orjson.dumps(DIALECT.samples.requests["text"])
ANSWER = orjson.dumps(DIALECT.samples.responses["text"])
PLAIN, LIMITED = "plain-bench-key", "limited-bench-key"
BIG = 10**12


def config(store: str) -> dict[str, Any]:
    return {"logging": {"level": "warning"},
            "upstreams": {"u": {"dialect": DIALECT.name, "url": "http://u.test/chat",
                                "model": "m"}},
            "routes": [{"path": DIALECT.default_path, "dialect": DIALECT.name,
                        "upstream": "u"}],
            "auth": {"api_keys": [PLAIN], "keys": [{
                "name": "bench", "key": LIMITED, "limits": {
                    "requests_per_minute": BIG, "tokens_per_minute": BIG, "tokens_per_day": BIG,
                    "tokens_per_month": BIG, "max_concurrent": 1000}}]},
            "limits": {"store": store, "timeout": 5.0}}


class _Transport:
    """Just enough of an asyncio transport for a mocked request: its peer."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("203.0.113.7", 50000) if name == "peername" else default


async def _answer(req: UpstreamRequest) -> MemoryResponse:
    return MemoryResponse(200, {"Content-Type": "application/json"}, ANSWER)


def _request(app: web.Application, loop: asyncio.AbstractEventLoop, key: str) -> web.Request:
    payload = streams.StreamReader(mock.Mock(), 2**16, loop=loop)
    payload.feed_data(BODY)
    payload.feed_eof()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(BODY)),
               "User-Agent": "bench/1", "Authorization": f"Bearer {key}"}
    return make_mocked_request("POST", DIALECT.default_path, app=app, payload=payload,
                               transport=_Transport(), headers=headers)


async def _round(app: web.Application, key: str, requests: int) -> tuple[float, float]:
    """CPU and wall µs per request of one round."""
    loop = asyncio.get_running_loop()
    made = [_request(app, loop, key) for _ in range(requests)]
    c0, w0 = time.process_time(), time.perf_counter()
    for r in made:
        resp = await handlers.chat(r)
        assert resp.status == 200, resp
        assert (key == LIMITED) == ("x-ratelimit-limit-requests" in resp.headers)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return cpu / requests * 1e6, wall / requests * 1e6


async def _run(store: str, requests: int, repeat: int) -> dict[str, list[tuple[float, float]]]:
    app = create_app(parse_config(config(store), env={}), transport=MemoryTransport(_answer))
    runner = web.AppRunner(app)
    await runner.setup()
    out: dict[str, list[tuple[float, float]]] = {PLAIN: [], LIMITED: []}
    try:
        for i in range(repeat + 1):  # the first round of each warms up
            for key in (PLAIN, LIMITED) if i % 2 else (LIMITED, PLAIN):
                got = await _round(app, key, requests)
                if i:
                    out[key].append(got)
    finally:
        await runner.cleanup()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=5000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--stores", default="memory,redis")
    args = p.parse_args()
    configure_logging("json", "warning")
    for store in args.stores.split(","):
        server = RedisServer().start() if store == "redis" else None
        try:
            rounds = asyncio.run(_run(server.url() if server else "memory", args.requests,
                                      args.repeat))
        finally:
            if server is not None:
                server.stop()
        plain_cpu = statistics.median(c for c, _ in rounds[PLAIN])
        plain_wall = statistics.median(w for _, w in rounds[PLAIN])
        cpu = statistics.median(c for c, _ in rounds[LIMITED])
        wall = statistics.median(w for _, w in rounds[LIMITED])
        print(f"{store:7} unlimited: CPU {plain_cpu:6.1f} µs, wall {plain_wall:6.1f} µs | "
              f"limited: CPU {cpu:6.1f} µs ({cpu / plain_cpu:.2f}x), wall {wall:6.1f} µs "
              f"({wall / plain_wall:.2f}x)  (median of {args.repeat} x {args.requests})",
              flush=True)


if __name__ == "__main__":
    main()
