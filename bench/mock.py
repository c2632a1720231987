"""A fast mock chat upstream for every dialect of ``bench/wire/``, whole and streamed.

One process, one or more ports; every port serves every dialect on its own path (see
``wire.MOCK_PATHS``). Answers are rendered once at startup, so a request costs the HTTP handling,
one ``orjson.loads`` of the request, the checks an upstream of that dialect makes
(``wire.refusal``: a 400 otherwise) and the writes. A stream is written one frame per write (as a
real model server flushes each token), with an optional sleep before each frame.

    python bench/mock.py --listen 9100 --listen 9101:10 --chunks 20

``--listen PORT[:DELAY_MS]``: a port, and the delay before each stream frame on that port.
Whole or streamed is decided as an upstream of that dialect would (``wire.wants_stream``: a
path suffix, a body flag, an ``Accept`` header, as its bench module says).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

import orjson
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wire


class Mock:
    def __init__(self, chunks: int, delay: float) -> None:
        self.delay = delay
        self.whole = {d: wire.whole_body(d, chunks) for d in wire.DIALECTS}
        self.frames = {d: wire.stream_frames(d, chunks) for d in wire.DIALECTS}
        self.routes: dict[str, tuple[str, bool | None]] = {}
        for d, path in wire.MOCK_PATHS.items():
            streamed = wire.stream_path(d, path)
            if streamed != path:  # the path alone decides
                self.routes[streamed] = (d, True)
                self.routes[path] = (d, False)
            else:
                self.routes[path] = (d, None)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        route = self.routes.get(request.path)
        if route is None or request.method != "POST":
            return web.Response(status=404, text="no such mock endpoint")
        dialect, stream = route
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return web.Response(status=400, text="body is not JSON")
        if not isinstance(body, dict):
            return web.Response(status=400, text="body is not a JSON object")
        refused = wire.refusal(dialect, body, request.headers)
        if refused is not None:
            return web.Response(status=400, text=refused)
        if not wire.wants_stream(dialect, stream, body, request.headers):
            return web.Response(body=self.whole[dialect],
                                headers={"Content-Type": "application/json"})
        resp = web.StreamResponse(headers={"Content-Type": wire.STREAM_CONTENT_TYPE[dialect],
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        delay = self.delay
        for frame in self.frames[dialect]:
            if delay:
                await asyncio.sleep(delay)
            await resp.write(frame)
        await resp.write_eof()
        return resp


async def serve(listens: list[tuple[int, float]], chunks: int, host: str) -> None:
    runners = []
    for port, delay in listens:
        mock = Mock(chunks, delay)
        server = web.Server(mock.handle, access_log=None)
        runner = web.ServerRunner(server, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=1024)
        await site.start()
        runners.append(runner)
    print(f"mock ready on {', '.join(str(p) for p, _ in listens)}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for runner in runners:
        await runner.cleanup()


def parse_listen(text: str) -> tuple[int, float]:
    port, _, delay = text.partition(":")
    return int(port), float(delay or 0) / 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", action="append", type=parse_listen, required=True,
                   metavar="PORT[:DELAY_MS]")
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--host", default="127.0.0.1")
    args = p.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.listen, args.chunks, args.host))


if __name__ == "__main__":
    main()
