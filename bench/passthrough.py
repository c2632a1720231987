"""The baseline: an aiohttp reverse proxy of a few lines. Bytes in, bytes out, no parsing.

    python bench/passthrough.py --port 9200 --upstream http://127.0.0.1:9100 [--loop uvloop]

It does what any aiohttp proxy must (read the request, open an upstream request on a pooled
connection, copy the status, Content-Type and body back, streaming as bytes arrive) and nothing a
translating gateway adds (JSON, framing, dialects, metrics, logging). The gateway is measured
against it, so the ratio is the price of translation and bookkeeping, not of aiohttp.

It runs on the event loop the gateway runs on: uvloop by default, as the gateway's ``auto``
picks when uvloop is installed, or asyncio's own with ``--loop asyncio`` (the gateway's
``--loop`` takes the same names). bench/run.py starts both with the same ``--loop``, so that a
ratio does not count the loop's own speed as the gateway's.
"""

from __future__ import annotations

import argparse
import asyncio

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

HOP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "upgrade",
       "te", "trailer", "proxy-authorization", "proxy-authenticate"}


def make_app(upstream: str) -> web.Application:
    app = web.Application()

    async def start(app: web.Application) -> None:
        app["session"] = ClientSession(connector=TCPConnector(limit=0), auto_decompress=False,
                                       timeout=ClientTimeout(total=None, sock_connect=5))

    async def stop(app: web.Application) -> None:
        await app["session"].close()

    async def proxy(request: web.Request) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with app["session"].request(request.method, upstream + request.path_qs,
                                          data=await request.read(), headers=headers) as up:
            ctype = {"Content-Type": up.headers.get("Content-Type", "application/octet-stream")}
            if up.content_length is not None:  # a whole answer: one body, Content-Length
                return web.Response(status=up.status, body=await up.read(), headers=ctype)
            resp = web.StreamResponse(status=up.status, headers=ctype)
            await resp.prepare(request)
            async for chunk in up.content.iter_any():  # a stream: each piece as it arrives
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_route("*", "/{tail:.*}", proxy)
    return app


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


LOOPS = ("uvloop", "asyncio")


def new_loop(name: str) -> asyncio.AbstractEventLoop:
    """A new event loop of the kind ``name`` names (one of :data:`LOOPS`)."""
    if name == "uvloop":
        import uvloop  # only here: ``--loop asyncio`` works without it

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


if __name__ == "__main__":
    main()
