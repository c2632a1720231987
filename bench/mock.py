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

``--server``: ``lean`` (the default: an asyncio protocol on httptools, on uvloop when installed)
or ``aiohttp`` (aiohttp's low-level server, as every run before the lean one). Both answer the
same bytes in the same writes: a whole answer in one write with ``Content-Length``, a stream
chunked, its head with the first frame, one write per frame, and the last chunk on its own.
The lean one costs the generator's core a fraction of the CPU per request: on two cores the
mock shares a core with the driver, and what it spends, the driver cannot.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from pathlib import Path

import httptools
import orjson
from aiohttp import web
from multidict import CIMultiDict

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wire


class Mock:
    def __init__(self, chunks: int, delay: float) -> None:
        self.delay = delay
        self.whole = {d: wire.whole_body(d, chunks) for d in wire.DIALECTS}
        self.frames = {d: wire.stream_frames(d, chunks) for d in wire.DIALECTS}
        self.routes: dict[str, tuple[str, bool | None]] = {}
        for d, base in wire.MOCK_PATHS.items():
            # (routed by path: a query a client sends, such as a stream flag, is not the route)
            path = wire.whole_path(d, base).split("?", 1)[0]
            streamed = wire.stream_path(d, base).split("?", 1)[0]
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


    def answer(self, path: str, raw: bytes, headers: CIMultiDict[str]
               ) -> tuple[int, bytes, str, list[bytes] | None]:
        """The lean server's answer: (status, whole body, its type, the stream's frames or
        ``None``), decided as :meth:`handle` decides."""
        route = self.routes.get(path)
        if route is None:
            return 404, b"no such mock endpoint", "text/plain", None
        dialect, stream = route
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return 400, b"body is not JSON", "text/plain", None
        if not isinstance(body, dict):
            return 400, b"body is not a JSON object", "text/plain", None
        refused = wire.refusal(dialect, body, headers)
        if refused is not None:
            return 400, refused.encode(), "text/plain", None
        if not wire.wants_stream(dialect, stream, body, headers):
            return 200, self.whole[dialect], "application/json", None
        return 200, b"", wire.STREAM_CONTENT_TYPE[dialect], self.frames[dialect]


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


class LeanMock(asyncio.Protocol):
    """One connection of the lean server: requests parsed by httptools and answered in order
    (on a paced port, a pipelined request's answer waits for the one before it)."""

    def __init__(self, mock: Mock) -> None:
        self.mock = mock
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.body: list[bytes] = []
        self.busy: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy is not None:
            self.busy.cancel()

    def on_message_begin(self) -> None:
        self.url, self.headers, self.body = b"", CIMultiDict(), []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.add(name.decode("latin-1"), value.decode("latin-1"))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        path = self.url.decode("latin-1").split("?", 1)[0]
        if self.parser.get_method() != b"POST":
            status, body, ctype, frames = 404, b"no such mock endpoint", "text/plain", None
        else:
            status, body, ctype, frames = self.mock.answer(path, b"".join(self.body),
                                                           self.headers)
        keep = self.parser.should_keep_alive()
        head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                f"Date: {_date()}\r\nServer: bench-mock\r\n"
                + ("" if keep else "Connection: close\r\n"))
        if frames is None:
            transport.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            if not keep:
                transport.close()
            return
        head += "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
        if self.mock.delay:
            self.busy = asyncio.get_running_loop().create_task(
                self._paced(self.busy, head.encode(), frames, keep))
            return
        out = head.encode()
        for frame in frames:
            transport.write(out + b"%x\r\n%b\r\n" % (len(frame), frame))
            out = b""
        transport.write(b"0\r\n\r\n")
        if not keep:
            transport.close()

    async def _paced(self, before: asyncio.Task[None] | None, head: bytes, frames: list[bytes],
                     keep: bool) -> None:
        if before is not None:
            await before
        transport = self.transport
        assert transport is not None
        out = head
        for frame in frames:
            await asyncio.sleep(self.mock.delay)
            if transport.is_closing():
                return
            transport.write(out + b"%x\r\n%b\r\n" % (len(frame), frame))
            out = b""
        transport.write(b"0\r\n\r\n")
        if not keep:
            transport.close()


def _date() -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())


async def serve(listens: list[tuple[int, float]], chunks: int, host: str, lean: bool) -> None:
    runners = []
    servers = []
    loop = asyncio.get_running_loop()
    for port, delay in listens:
        mock = Mock(chunks, delay)
        if lean:
            servers.append(await loop.create_server(lambda m=mock: LeanMock(m), host, port,
                                                    backlog=1024))
            continue
        server = web.Server(mock.handle, access_log=None)
        runner = web.ServerRunner(server, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=1024)
        await site.start()
        runners.append(runner)
    print(f"mock ready on {', '.join(str(p) for p, _ in listens)}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in servers:
        s.close()
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
    p.add_argument("--server", choices=("lean", "aiohttp"), default="lean")
    args = p.parse_args()
    main = serve(args.listen, args.chunks, args.host, args.server == "lean")
    with contextlib.suppress(KeyboardInterrupt):
        if args.server == "lean":
            try:
                import uvloop
            except ImportError:
                pass
            else:
                uvloop.run(main)
                return
        asyncio.run(main)


if __name__ == "__main__":
    main()
