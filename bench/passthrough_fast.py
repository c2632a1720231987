"""The like-for-like baseline: bench/passthrough.py's proxy on the gateway's own event loop
(uvloop), upstream client (``gateway.upstream.FastTransport``) and collector thresholds
(``gateway.server.GC_THRESHOLDS``). Bytes in, bytes out.

    python bench/passthrough_fast.py --port 9201 --upstream http://127.0.0.1:9100

bench/passthrough.py stays the yardstick the targets are measured against, unchanged so that
figures compare across time. This one answers another question: with the event loop and the
upstream hop the same on both sides, what does the gateway's own work (parsing, translating,
accounting) cost? Its ratio is reported as ``x lfl``.
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import AsyncIterator

import uvloop
from aiohttp import web

from gateway.server import GC_THRESHOLDS
from gateway.upstream import FastTransport, UpstreamRequest, UpstreamResponse

HOP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "upgrade",
       "te", "trailer", "proxy-authorization", "proxy-authenticate", "accept-encoding"}


def make_app(upstream: str) -> web.Application:
    app = web.Application()
    transport = FastTransport()

    async def stop(app: web.Application) -> None:
        await transport.aclose()

    async def proxy(request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        up = await transport.send(UpstreamRequest(upstream + request.path_qs,
                                                  await request.read(), headers, 5.0, 60.0))
        try:
            ctype = {"Content-Type": up.headers.get("Content-Type", "application/octet-stream")}
            if "Content-Length" in up.headers:  # a whole answer: one body, Content-Length
                body = b"".join([c async for c in _chunks(up)])
                return web.Response(status=up.status, body=body, headers=ctype)
            resp = web.StreamResponse(status=up.status, headers=ctype)
            await resp.prepare(request)
            async for chunk in _chunks(up):  # a stream: each piece as it arrives
                await resp.write(chunk)
            await resp.write_eof()
            return resp
        finally:
            up.close()

    async def tune_gc(app: web.Application) -> None:  # as the gateway's serve does
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)

    app.on_startup.append(tune_gc)
    app.on_cleanup.append(stop)
    app.router.add_route("*", "/{tail:.*}", proxy)
    return app


async def _chunks(up: UpstreamResponse) -> AsyncIterator[bytes]:
    while chunk := await up.read():
        yield chunk


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True, help="scheme://host:port, no path")
    args = p.parse_args()
    web.run_app(make_app(args.upstream.rstrip("/")), host=args.host, port=args.port,
                access_log=None, print=lambda *_: print("passthrough ready", flush=True),
                backlog=1024, loop=uvloop.new_event_loop())


if __name__ == "__main__":
    main()
