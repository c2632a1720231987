"""What tracing costs the exchange, per request, in process (no sockets, no HTTP client).

Each request goes through the real handler (``handlers.chat`` → the exchange → the in-memory
transport → a whole OpenAI answer) with ``aiohttp``'s mocked request, so the figure is the
gateway's own CPU per request. Modes:

- ``off``: no ``tracing`` section, no ``OTEL_*`` variables. Run first, in a fresh process, and
  checked: OpenTelemetry's SDK is not even imported, so no span object can exist;
- ``unsampled``: tracing on, ``sample_ratio: 0`` (spans are created, not recorded);
- ``on``: every request recorded (a server and a client span), exported to a processor that
  drops them (the OTLP encoding and the network happen on the exporter's thread anyway).

Usage: ``python bench/tracing_bench.py [--requests 20000] [--repeat 5] [--modes off,on]``.
Run it on the commit before tracing (``--modes off`` only) for the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any
from unittest import mock

import orjson
from aiohttp import streams, web
from aiohttp.test_utils import make_mocked_request

from gateway import handlers
from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import get, names
from gateway.log import configure_logging
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

DIALECT = next(get(n) for n in names() if get(n).stream_path is None)
"""Some dialect, both sides (the registry's first whose path serves whole answers)."""
BODY = orjson.dumps(DIALECT.samples.requests["text"])
ANSWER = orjson.dumps(DIALECT.samples.responses["text"])
CONFIG = {"logging": {"level": "warning"},
          "upstreams": {"u": {"dialect": DIALECT.name, "url": "http://u.test/chat",
                              "model": "m"}},
          "routes": [{"path": DIALECT.default_path, "dialect": DIALECT.name, "upstream": "u"}]}


class _Transport:
    """Just enough of an asyncio transport for a mocked request: its peer."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("203.0.113.7", 50000) if name == "peername" else default


async def _answer(req: UpstreamRequest) -> MemoryResponse:
    return MemoryResponse(200, {"Content-Type": "application/json"}, ANSWER)


def _request(app: web.Application, loop: asyncio.AbstractEventLoop,
             parent: bool) -> web.Request:
    payload = streams.StreamReader(mock.Mock(), 2**16, loop=loop)
    payload.feed_data(BODY)
    payload.feed_eof()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(BODY)),
               "User-Agent": "bench/1"}
    if parent:
        headers["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    return make_mocked_request("POST", DIALECT.default_path, app=app, payload=payload,
                               transport=_Transport(), headers=headers)


def _tracing(mode: str) -> Any:
    if mode == "off":
        return None
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    from gateway.tracing import Tracing
    from gateway.tracing_settings import TracingSettings

    class Drop(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    ratio = 0.0 if mode == "unsampled" else 1.0
    return Tracing(TracingSettings(sample_ratio=ratio), processor=SimpleSpanProcessor(Drop()))


async def _run(mode: str, requests: int, repeat: int) -> list[float]:
    tracing = _tracing(mode)
    kwargs = {"tracing": tracing} if tracing is not None else {}
    app = create_app(parse_config(CONFIG, env={}), transport=MemoryTransport(_answer), **kwargs)
    runner = web.AppRunner(app)
    await runner.setup()
    loop = asyncio.get_running_loop()
    out = []
    try:
        for _ in range(repeat + 1):  # the first round warms up
            # Unsampled: root requests, whose sampling the ratio decides (a sampled parent
            # would be followed).
            made = [_request(app, loop, mode != "unsampled") for _ in range(requests)]
            t0 = time.process_time()
            for r in made:
                resp = await handlers.chat(r)
                assert resp.status == 200, resp
            out.append((time.process_time() - t0) / requests * 1e6)
    finally:
        await runner.cleanup()
    return out[1:]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--modes", default="off,unsampled,on")
    args = p.parse_args()
    configure_logging("json", "warning")
    for mode in args.modes.split(","):
        rounds = asyncio.run(_run(mode, args.requests, args.repeat))
        line = (f"{mode:10} CPU µs/request: best {min(rounds):6.1f}  median "
                f"{statistics.median(rounds):6.1f}  ({args.repeat} x {args.requests})")
        if mode == "off":
            imported = sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))
            assert not imported, f"tracing off imported {imported}"
            line += "  opentelemetry.sdk imported: no"
        print(line, flush=True)


if __name__ == "__main__":
    main()
