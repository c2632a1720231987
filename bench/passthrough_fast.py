"""The like-for-like baseline: bench/passthrough.py's proxy with the gateway's own upstream
client (``gateway.upstream.FastTransport``) and collector thresholds
(``gateway.server.GC_THRESHOLDS``), on the same event loop. Bytes in, bytes out.

    python bench/passthrough_fast.py --port 9201 --upstream http://127.0.0.1:9100 [--loop uvloop]

bench/passthrough.py is the yardstick the targets are measured against. This one answers another
question: with the upstream hop the same on both sides too, what does the gateway's own work
(parsing, translating, accounting) cost? Its ratio is reported as ``x lfl``. ``--loop`` as
bench/passthrough.py's (uvloop by default); bench/run.py gives all three servers the same one.
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import AsyncIterator

from aiohttp import web
from passthrough import LOOPS, new_loop

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
    p.add_argument("--loop", choices=LOOPS, default="uvloop",
                   help="the event loop, as the gateway's --loop (default: %(default)s)")
    args = p.parse_args()
    web.run_app(make_app(args.upstream.rstrip("/")), host=args.host, port=args.port,
                access_log=None, print=lambda *_: print("passthrough ready", flush=True),
                backlog=1024, loop=new_loop(args.loop))


if __name__ == "__main__":
    main()
