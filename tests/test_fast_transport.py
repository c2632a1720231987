"""The gateway's own upstream client (:mod:`gateway.upstream.fast_transport`) on real loopback
sockets: keep-alive and the one safe retry, framing split at every byte, gzip and deflate, TLS
against a local CA, release on cancel, the pool's bound, back-pressure, and the aiohttp fallback
behind the same seam.

Servers here are raw (asyncio streams, or a blocking socket in a thread where a test must hold
the gateway's event loop still while the server acts), so each can misbehave exactly as a test
needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import socket
import ssl
import struct
import threading
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trustme
import uvloop
from aiohttp import web

from gateway.errors import UpstreamError
from gateway.upstream import AiohttpTransport, FastTransport, Transport, UpstreamRequest
from gateway.upstream import fast_transport as ft
from gateway.upstream.http1 import HIGH_WATER, READ_PIECE, Http1Connection, Http1Response

# Every test runs on both loops (event_loop_policy below); pytest-asyncio 1.5 calls overriding
# that fixture deprecated, in favour of a hook every test of the suite would go through.
pytestmark = pytest.mark.filterwarnings("ignore:Overriding the \"event_loop_policy\"")
READABLE = ft._readable
"""The real check (some tests replace it in the module to make a race certain)."""
BODY = b'{"messages":[{"role":"user","content":"hi"}]}'


def request(url: str, *, head_timeout: float = 2.0, headers: dict[str, str] | None = None,
            body: bytes = BODY, batched: bool = False) -> UpstreamRequest:
    return UpstreamRequest(url, body, headers or {"Content-Type": "application/json"}, 1.0,
                           head_timeout, batched=batched)


async def read_all(response: Any) -> bytes:
    out = []
    while chunk := await response.read():
        out.append(chunk)
    return b"".join(out)


async def eventually(ready: Callable[[], bool], limit: float = 10.0) -> bool:
    deadline = time.monotonic() + limit
    while not ready():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


def answer(body: bytes = b'{"ok":true}', *, extra: str = "", status: str = "200 OK") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: "
            f"{len(body)}\r\n{extra}\r\n").encode() + body


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


Script = Callable[["RawServer", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """A loopback server whose every connection runs ``script``; counts connections and
    requests, and knows which connections are still open."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.open = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0
        self._tasks: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/chat"

    async def next_request(self, reader: asyncio.StreamReader) -> bytes | None:
        raw = await read_request(reader)
        if raw is not None:
            self.requests.append(raw)
        return raw

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        self.open += 1
        try:
            await self.script(self, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            self._tasks.discard(task)
            writer.close()


async def keep_alive_answers(server: RawServer, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
    while await server.next_request(reader) is not None:
        writer.write(answer())
        await writer.drain()


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def event_loop_policy(request: pytest.FixtureRequest) -> asyncio.AbstractEventLoopPolicy:
    """Every test on both loops: uvloop's transports are not asyncio's classes."""
    if request.param == "uvloop":
        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()


async def test_the_loop_is_the_one_asked_for(event_loop_policy: Any) -> None:
    uv = isinstance(event_loop_policy, uvloop.EventLoopPolicy)
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop) == uv


@pytest.fixture
async def fast() -> AsyncIterator[FastTransport]:
    t = FastTransport()
    yield t
    await t.aclose()


# --- keep-alive, and when a request may be sent twice ------------------------------------------


async def test_keep_alive_reuses_one_connection(fast: FastTransport) -> None:
    async with RawServer(keep_alive_answers) as server:
        for _ in range(3):
            r = await fast.send(request(server.url))
            assert r.status == 200 and await read_all(r) == b'{"ok":true}'
            r.close()
        assert server.connections == 1 and len(server.requests) == 3
        assert fast.in_use() == 0


async def test_a_response_keeps_its_status_once_closed(fast: FastTransport) -> None:
    """An attempt's record (its access-log line, its span's status code) reads the status after
    the response let go of its connection: it is the head's, not 0."""
    async with RawServer(keep_alive_answers) as server:
        r = await fast.send(request(server.url))
        await read_all(r)
        r.close()
        assert r.status == 200


@pytest.mark.parametrize("extra", ["Connection: close\r\n", "Keep-Alive: timeout=1\r\n"])
async def test_a_server_that_will_close_gets_a_new_connection(fast: FastTransport,
                                                              extra: str) -> None:
    """``Connection: close`` is obeyed, and a connection is dropped before the server's own
    ``Keep-Alive: timeout`` (less a second of margin) runs out."""
    async def script(server: RawServer, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        while await server.next_request(reader) is not None:
            writer.write(answer(extra=extra))
            await writer.drain()

    async with RawServer(script) as server:
        for _ in range(2):
            r = await fast.send(request(server.url))
            assert await read_all(r) == b'{"ok":true}'
            r.close()
        assert server.connections == 2


async def _closes_after_answering(server: RawServer, reader: asyncio.StreamReader,
                                  writer: asyncio.StreamWriter) -> None:
    while await server.next_request(reader) is not None:
        writer.write(answer(extra="Connection: close\r\n"))
        await writer.drain()


async def _hangs_up_mid_body(server: RawServer, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
    if await server.next_request(reader) is not None:
        writer.write(answer(b'{"ok":true, "and": "more"}')[:-8])
        await writer.drain()


async def _ask_once(fast: FastTransport, url: str) -> dict[int, str]:
    """One request, its answer read to its end or its failure (a function of its own: no local
    of the caller's holds the response after it). Returns the ids of its connection and parser
    (ids, not references, which would keep them alive)."""
    r = await fast.send(request(url))
    conn = r._conn
    assert conn is not None
    ids = {id(conn): "Http1Connection", id(conn._parser): "HttpResponseParser"}
    del conn
    try:
        await read_all(r)
    except UpstreamError:
        pass
    finally:
        r.close()
    return ids


@pytest.mark.parametrize("script", [_closes_after_answering, _hangs_up_mid_body],
                         ids=["connection-close", "cut-mid-body"])
async def test_a_closed_upstream_connection_leaves_no_reference_cycle(
        fast: FastTransport, script: Callable[..., Awaitable[None]]) -> None:
    """A connection's parser holds its bound methods, and an error raised to its reader holds
    (through its traceback) the connection that holds the error. Left as cycles, every closed
    upstream connection (a backend that closes after each answer, one cut short) would wait,
    with its buffers, for a full collection, which the gateway's collector thresholds make
    rare. Each case fails without its half of the change."""
    async with RawServer(script) as server:
        gc.collect()
        gc.disable()
        try:
            ids: dict[int, str] = {}
            for _ in range(3):
                ids.update(await _ask_once(fast, server.url))
            assert server.connections == 3
            await asyncio.sleep(0.05)  # the last close reaches the connection
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
        finally:
            gc.set_debug(0)
            gc.enable()
    # told by id: other tests' leftovers can become garbage in the same window
    left = [ids[id(o)] for o in gc.garbage if id(o) in ids]
    gc.garbage.clear()
    assert left == []


class ThreadServer:
    """A blocking server in a thread: the test can stop the gateway's loop (by not awaiting)
    while this server closes a connection, so the gateway meets the closed connection before
    its loop has seen the close."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[tuple[int, bytes]] = []
        """(connection number, request) as received."""
        self.accepted = 0
        self.close_first = threading.Event()
        self.rst = False
        self.done = threading.Event()
        self.open: list[socket.socket] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/chat"

    def _read(self, conn: socket.socket) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n")[0])
        while len(rest) < length:
            rest += conn.recv(65536)
        return head + b"\r\n\r\n" + rest

    def _run(self) -> None:
        self.listener.settimeout(10)
        with contextlib.suppress(OSError):
            first, _ = self.listener.accept()
            self.open.append(first)
            self.accepted += 1
            req = self._read(first)
            assert req is not None
            self.requests.append((1, req))
            first.sendall(answer())
            self.close_first.wait(10)
            if self.rst:
                first.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            first.close()
            self.done.set()
            second, _ = self.listener.accept()
            self.open.append(second)
            self.accepted += 1
            while (req := self._read(second)) is not None:
                self.requests.append((2, req))
                second.sendall(answer())
            second.close()

    def close(self) -> None:
        self.close_first.set()
        for s in [self.listener, *self.open]:  # shutdown wakes a blocked accept or recv
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.thread.join(5)
        self.listener.close()
        assert not self.thread.is_alive()


def _wait_readable(conn: Http1Connection) -> None:
    """Blocks (the loop with it) until the kernel has the server's close for ``conn``."""
    deadline = time.monotonic() + 5
    while not READABLE(conn.fd):
        assert time.monotonic() < deadline, "the server's close never arrived"
        time.sleep(0.001)


async def _one_pooled_connection(fast: FastTransport, server: ThreadServer) -> Http1Connection:
    r = await fast.send(request(server.url))
    assert await read_all(r) == b'{"ok":true}'
    r.close()
    (pool,) = fast._pools.values()
    (conn,) = pool.idle
    return conn


async def test_a_pooled_connection_the_server_closed_is_never_written_to(
        fast: FastTransport) -> None:
    """The server closed the idle connection, and the gateway's loop has not run since, so the
    connection still looks fine to asyncio: the check before reuse sees the close, and the
    request goes on a new connection, once."""
    server = ThreadServer()
    try:
        conn = await _one_pooled_connection(fast, server)
        server.close_first.set()
        assert server.done.wait(5)
        _wait_readable(conn)  # no await in between: the loop has not seen the close
        assert not conn.lost
        r = await fast.send(request(server.url))
        assert await read_all(r) == b'{"ok":true}'
        r.close()
        assert server.accepted == 2
        assert [n for n, _ in server.requests] == [1, 2]
    finally:
        server.close()


def _sees_nothing(fd: int) -> bool:
    return False


@pytest.fixture
async def blind() -> AsyncIterator[FastTransport]:
    """A transport whose check before reusing a connection never sees a close or a reset
    waiting: what arrives after the check, made certain."""
    t = FastTransport(readable=_sees_nothing)
    yield t
    await t.aclose()


async def test_a_write_the_kernel_refused_is_sent_again_on_a_new_connection(
        blind: FastTransport) -> None:
    """The reset arrives between the check and the write (the check is skipped here to make
    that race certain): the send fails at once, not one byte left, and only then is the request
    sent again."""
    server = ThreadServer()
    server.rst = True
    try:
        conn = await _one_pooled_connection(blind, server)
        server.close_first.set()
        assert server.done.wait(5)
        _wait_readable(conn)
        r = await blind.send(request(server.url))
        assert await read_all(r) == b'{"ok":true}'
        r.close()
        assert [n for n, _ in server.requests] == [1, 2]
        assert blind.in_use() == 0
    finally:
        server.close()


async def test_a_request_written_to_a_closing_connection_is_not_sent_twice(
        blind: FastTransport) -> None:
    """The close arrives after the check and the kernel took the request: the server may have
    it, so it is an error and never a second send."""
    server = ThreadServer()
    try:
        conn = await _one_pooled_connection(blind, server)
        server.close_first.set()
        assert server.done.wait(5)
        _wait_readable(conn)
        with pytest.raises(UpstreamError) as e:
            await blind.send(request(server.url))
        assert e.value.kind == "connect"
        assert server.accepted == 1 and len(server.requests) == 1
        assert blind.in_use() == 0
    finally:
        server.close()


async def test_a_server_that_reads_a_request_and_hangs_up_gets_it_once(
        fast: FastTransport) -> None:
    """On a reused connection, the server reads the POST and closes without a word: it may
    have acted on it, so the gateway reports the failure and does not send it again."""
    async def script(server: RawServer, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        await server.next_request(reader)
        writer.write(answer())
        await writer.drain()
        await server.next_request(reader)  # then hang up without answering

    async with RawServer(script) as server:
        r = await fast.send(request(server.url))
        await read_all(r)
        r.close()
        with pytest.raises(UpstreamError) as e:
            await fast.send(request(server.url))
        assert e.value.kind == "connect" and "before answering" in e.value.message
        assert await eventually(lambda: len(server.requests) == 2)
        assert server.connections == 1
        assert fast.in_use() == 0


# --- framing: every split of the bytes ----------------------------------------------------------


class FakeSocketTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closing = False
        self.paused = False

    def write(self, data: Any) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def abort(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def chunked(*pieces: bytes, extension: bytes = b"") -> bytes:
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(p), extension, p) for p in pieces)
    return out + b"0\r\nX-Trailer: yes\r\n\r\n"


TEXT = "Héllo wörld 👋🏽 — 日本語 ".encode() * 3
ZIPPED = gzip.compress(TEXT)
WIRE = {
    "length": answer(TEXT),
    "chunked": (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + chunked(TEXT[:7], TEXT[7:40], TEXT[40:], extension=b";ext=1")),
    "gzip-chunked": (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunked(ZIPPED[:5], ZIPPED[5:])),
    "interim-then-answer": b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + answer(TEXT),
}


async def _parse(pieces: list[bytes]) -> tuple[Http1Connection, bytes]:
    conn = Http1Connection(lambda c: None)
    conn.connection_made(FakeSocketTransport())
    head = conn.begin(b"POST / HTTP/1.1\r\n\r\n")
    for p in pieces:
        conn.data_received(p)
    assert head.done() and head.exception() is None
    response = Http1Response(conn, lambda c, how: None)
    return conn, await read_all(response)


@pytest.mark.parametrize("name", list(WIRE))
async def test_a_response_split_at_every_byte_reads_the_same(name: str) -> None:
    raw = WIRE[name]
    for i in range(1, len(raw)):
        conn, body = await _parse([raw[:i], raw[i:]])
        assert body == TEXT, i
        assert conn.status == 200 and conn.complete and conn.reusable, i
    conn, body = await _parse([raw[i:i + 1] for i in range(len(raw))])
    assert body == TEXT and conn.reusable


async def test_bytes_after_the_answer_make_the_connection_unusable() -> None:
    conn, body = await _parse([WIRE["length"] + b"HTTP/1.1 200 OK\r\n"])
    assert body == TEXT
    assert not conn.reusable


@pytest.mark.parametrize("name", ["length", "chunked"])
async def test_a_stray_answer_in_the_same_read_adds_nothing_to_the_body(name: str) -> None:
    stray = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
             b"5\r\nSTRAY\r\n5\r\nBYTES\r\n0\r\n\r\n")
    conn, body = await _parse([WIRE[name] + stray])
    assert body == TEXT
    assert not conn.reusable


# --- gzip and deflate ---------------------------------------------------------------------------


def _coded(coding: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: "
            f"{coding}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


@pytest.mark.parametrize("coding,body", [
    ("gzip", gzip.compress(TEXT)),
    ("x-gzip", gzip.compress(TEXT)),
    ("deflate", zlib.compress(TEXT)),  # zlib-wrapped, as RFC 9110 says
    ("deflate", zlib.compress(TEXT)[2:-4]),  # raw deflate, as some servers send it
], ids=["gzip", "x-gzip", "deflate-zlib", "deflate-raw"])
async def test_compressed_bodies_are_decompressed(fast: FastTransport, coding: str,
                                                  body: bytes) -> None:
    async def script(server: RawServer, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        while await server.next_request(reader) is not None:
            writer.write(_coded(coding, body))
            await writer.drain()

    async with RawServer(script) as server:
        r = await fast.send(request(server.url))
        assert await read_all(r) == TEXT
        r.close()
        assert b"accept-encoding: gzip, deflate" in server.requests[0].lower()
        r = await fast.send(request(server.url))  # a fully decoded body keeps the connection
        await read_all(r)
        r.close()
        assert server.connections == 1


@pytest.mark.parametrize("body,message", [
    (b"\x1f\x8b\x08\x00not gzip at all", "decompressed"),
    (gzip.compress(TEXT)[:-12], "cut off"),
], ids=["corrupt", "truncated"])
async def test_a_broken_compressed_body_is_a_connect_error(fast: FastTransport, body: bytes,
                                                           message: str) -> None:
    async def script(server: RawServer, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        await server.next_request(reader)
        writer.write(_coded("gzip", body))
        await writer.drain()
        await reader.read()

    async with RawServer(script) as server:
        r = await fast.send(request(server.url))
        with pytest.raises(UpstreamError) as e:
            await read_all(r)
        r.close()  # a failed read: closed, though the HTTP framing was intact
        assert e.value.kind == "connect" and message in e.value.message
        assert await eventually(lambda: server.open == 0)
        assert fast.in_use() == 0


async def test_a_compression_bomb_is_read_a_bounded_piece_at_a_time(fast: FastTransport) -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))

    async def script(server: RawServer, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        await server.next_request(reader)
        writer.write(_coded("gzip", bomb))
        await writer.drain()
        await reader.read()

    async with RawServer(script) as server:
        r = await fast.send(request(server.url))
        sizes = [len(await r.read()) for _ in range(20)]
        assert all(0 < s <= READ_PIECE for s in sizes), sizes
        r.close()
        assert fast.in_use() == 0


async def test_a_stream_left_before_its_end_is_drained_and_its_connection_kept(
        fast: FastTransport) -> None:
    """What a stream reader does after its finish event: stop. The rest (a terminating chunk,
    ``[DONE]``) is read and dropped, and the connection serves the next request; a rest past
    the drain's bound closes it instead."""
    async def script(server: RawServer, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        while (raw := await server.next_request(reader)) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + chunked(b"data: finish\n\n")[:-len(b"0\r\nX-Trailer: yes\r\n\r\n")])
            await writer.drain()
            await asyncio.sleep(0.02)
            rest = b"x" * (200_000 if b"/big" in raw else 10)
            writer.write(chunked(b"data: [DONE]\n\n", rest))
            await writer.drain()

    async with RawServer(script) as server:
        for path in ("/chat", "/chat", "/big", "/chat"):
            r = await fast.send(request(server.url.replace("/chat", path)))
            assert await r.read() == b"data: finish\n\n"
            r.close()  # before the end
            assert fast.in_use() == 0
            (pool,) = fast._pools.values()
            assert await eventually(lambda p=pool: len(p.idle) == 1 or server.open == 0)
        assert server.connections == 2  # the big rest cost one connection


# --- TLS ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


async def _tls_server(ca: trustme.CA, names: list[str], seen: list[str | None]) -> Any:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(ctx)

    def sni(sock: Any, name: str | None, _ctx: Any) -> None:
        seen.append(name)

    ctx.sni_callback = sni

    async def chat(request: web.Request) -> web.Response:
        return web.json_response({"tls": True, "got": len(await request.read())})

    app = web.Application()
    app.router.add_post("/chat", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port


async def test_tls_to_a_server_of_a_trusted_ca_with_sni(ca: trustme.CA) -> None:
    seen: list[str | None] = []
    runner, port = await _tls_server(ca, ["localhost"], seen)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    fast = FastTransport(ssl_context=client_ctx)
    try:
        for _ in range(2):
            r = await fast.send(request(f"https://localhost:{port}/chat"))
            assert r.status == 200 and b'"tls": true' in await read_all(r)
            r.close()
        assert seen == ["localhost"]  # one handshake, the name sent: the connection was kept
    finally:
        await fast.aclose()
        await runner.cleanup()


@pytest.mark.parametrize("case", ["unknown-ca", "wrong-name"])
async def test_tls_verification_is_on(ca: trustme.CA, case: str) -> None:
    seen: list[str | None] = []
    runner, port = await _tls_server(ca, ["other.example"] if case == "wrong-name"
                                     else ["localhost"], seen)
    client_ctx = None
    if case == "wrong-name":
        client_ctx = ssl.create_default_context()
        ca.configure_trust(client_ctx)
    fast = FastTransport(ssl_context=client_ctx)  # unknown-ca: the system's trust store
    try:
        with pytest.raises(UpstreamError) as e:
            await fast.send(request(f"https://localhost:{port}/chat"))
        assert e.value.kind == "connect" and "TLS" in e.value.message
        assert fast.in_use() == 0
    finally:
        await fast.aclose()
        await runner.cleanup()


# --- release on cancel, the pool's bound, back-pressure ----------------------------------------


async def _stream_forever(server: RawServer, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
    await server.next_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    while True:
        writer.write(chunked(b"data: x\n\n")[:-len(b"0\r\nX-Trailer: yes\r\n\r\n")])
        await writer.drain()
        await asyncio.sleep(0.01)


async def test_a_cancelled_read_closes_the_connection(fast: FastTransport) -> None:
    async with RawServer(_stream_forever) as server:
        r = await fast.send(request(server.url))
        assert await r.read()
        assert fast.in_use() == 1

        async def reader() -> None:
            try:
                while await r.read():
                    pass
            finally:
                r.close()  # as the exchange does on every path

        task = asyncio.create_task(reader())
        await asyncio.sleep(0.03)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert fast.in_use() == 0
        assert await eventually(lambda: server.open == 0)
        assert not any(p.idle for p in fast._pools.values())


async def test_a_cancelled_send_closes_the_connection(fast: FastTransport) -> None:
    async def never(server: RawServer, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        await server.next_request(reader)
        await reader.read()

    async with RawServer(never) as server:
        task = asyncio.create_task(fast.send(request(server.url, head_timeout=30)))
        assert await eventually(lambda: len(server.requests) == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert fast.in_use() == 0
        assert await eventually(lambda: server.open == 0)


@pytest.mark.parametrize("batched", [True, False])
async def test_the_batched_requests_of_one_turn_are_written_together_on_the_next(
        batched: bool) -> None:
    """A batched request (``UpstreamRequest.batched``) made during one turn of the loop is
    written in the next, with every other one made during that turn (an upstream that sleeps
    between them is woken once for them all); any other is written as it is made."""
    fast = FastTransport()
    try:
        async with RawServer(keep_alive_answers) as server:
            for r in await asyncio.gather(*(fast.send(request(server.url)) for _ in range(2))):
                assert await read_all(r) == b'{"ok":true}'  # two pooled connections
                r.close()
            sends = [asyncio.create_task(fast.send(request(server.url, batched=batched)))
                     for _ in range(2)]
            await asyncio.sleep(0)  # the turn in which both sends began
            assert fast.in_use() == (0 if batched else 2)
            await asyncio.sleep(0)  # the next: both are on their connections
            assert fast.in_use() == 2
            for t in sends:
                r = await t
                assert await read_all(r) == b'{"ok":true}'
                r.close()
            assert server.connections == 2 and len(server.requests) == 4
            assert fast.in_use() == 0
    finally:
        await fast.aclose()


async def test_the_pool_is_bounded_per_host() -> None:
    release = asyncio.Event()

    async def held(server: RawServer, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> None:
        while await server.next_request(reader) is not None:
            await release.wait()
            writer.write(answer())
            await writer.drain()

    fast = FastTransport(limit_per_host=2)
    try:
        async with RawServer(held) as server:
            sends = [asyncio.create_task(fast.send(request(server.url))) for _ in range(3)]
            assert await eventually(lambda: len(server.requests) == 2)
            # a third one waits for a connection, within its head timeout
            with pytest.raises(UpstreamError) as e:
                await fast.send(request(server.url, head_timeout=0.2))
            assert e.value.kind == "timeout"
            assert server.connections == 2
            release.set()
            for t in sends:
                r = await t
                await read_all(r)
                r.close()
            assert server.connections == 2 and len(server.requests) == 3
            assert fast.in_use() == 0
    finally:
        await fast.aclose()


async def test_a_body_nobody_reads_stops_the_reading_of_the_socket(fast: FastTransport) -> None:
    sent = [0]

    async def flood(server: RawServer, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        await server.next_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = chunked(b"x" * 16384)[:-len(b"0\r\nX-Trailer: yes\r\n\r\n")]
        for _ in range(100_000):  # bounded: 1.6 GB, never reached
            writer.write(piece)
            await writer.drain()
            sent[0] += 16384

    async with RawServer(flood) as server:
        r = await fast.send(request(server.url))
        (pool,) = fast._pools.values()
        (conn,) = pool.conns
        assert isinstance(conn, Http1Connection)
        # the server writes until its writes block: by then the connection paused reading (a
        # pause of the server's progress alone may be a busy machine, so ask the state)
        assert await eventually(lambda: conn.paused)
        last = -1
        while sent[0] != last:  # until the server's writes block
            last = sent[0]
            await asyncio.sleep(0.1)
        assert conn.paused
        assert conn.buffered <= HIGH_WATER + 256 * 1024
        assert sent[0] < 16 * 1024 * 1024
        assert len(await r.read()) > 0 and not conn.paused  # reading resumes once read
        r.close()


@pytest.mark.parametrize("headers", [
    {"X-A": "1\r\nX-Injected: 1"}, {"X-A": "1\rX"}, {"X-A": "1\nX"}, {"X-A": "1\0"},
    {"X-A\r\nX-Injected": "1"}, {"X-A": "1", "X-B": "2\n"}, {"X-A": "\r\n"}])
async def test_a_header_with_a_line_break_is_never_sent(fast: FastTransport,
                                                         headers: dict[str, str]) -> None:
    async with RawServer(keep_alive_answers) as server:
        with pytest.raises(UpstreamError, match="line break"):
            await fast.send(request(server.url, headers=headers))
        assert server.connections == 0


@pytest.mark.parametrize(("method", "url", "headers", "body", "head"), [
    ("POST", "http://h/chat", {"Content-Type": "application/json", "X-A": "a\tb"}, b"{}",
     "POST /chat HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nX-A: a\tb\r\n"
     "Content-Length: 2\r\nAccept-Encoding: gzip, deflate\r\n\r\n"),
    ("GET", "https://u:p@[::1]:8443/h?x=1", {}, b"",
     "GET /h?x=1 HTTP/1.1\r\nHost: [::1]:8443\r\nAuthorization: Basic dTpw\r\n"
     "Accept-Encoding: gzip, deflate\r\n\r\n"),
    ("POST", "http://u:p@h:80", {"authorization": "Bearer k"}, b"",
     "POST / HTTP/1.1\r\nHost: h\r\nauthorization: Bearer k\r\nContent-Length: 0\r\n"
     "Accept-Encoding: gzip, deflate\r\n\r\n"),
    ("HEAD", "http://h:81/", {"X-É": "é"}, b"",
     "HEAD / HTTP/1.1\r\nHost: h:81\r\nX-É: é\r\nAccept-Encoding: gzip, deflate\r\n\r\n"),
])
def test_the_request_head_is_written_exactly(method: str, url: str, headers: dict[str, str],
                                             body: bytes, head: str) -> None:
    assert ft._request_bytes(method, ft._target(url), headers, body) == head.encode() + body


async def test_userinfo_in_the_url_is_basic_auth(fast: FastTransport) -> None:
    async with RawServer(keep_alive_answers) as server:
        r = await fast.send(request(f"http://us%40er:p%3Ass@127.0.0.1:{server.port}/chat?x=1"))
        await read_all(r)
        r.close()
        head = server.requests[0].decode()
        assert head.startswith("POST /chat?x=1 HTTP/1.1\r\n")
        assert "Authorization: Basic dXNAZXI6cDpzcw==\r\n" in head  # us@er:p:ss
        assert f"Host: 127.0.0.1:{server.port}\r\n" in head


# --- both clients, one seam ---------------------------------------------------------------------


@pytest.mark.parametrize("make", [FastTransport, AiohttpTransport], ids=["fast", "aiohttp"])
async def test_both_clients_answer_the_same(make: Callable[[], Transport]) -> None:
    """The fallback (aiohttp's client) and the fast one read the same bytes the same way."""
    async with RawServer(keep_alive_answers) as server:
        transport = make()
        try:
            r = await transport.send(request(server.url))
            assert (r.status, r.content_type) == (200, "application/json")
            assert r.headers["content-length"] == "11"
            assert await read_all(r) == b'{"ok":true}'
            r.close()
            assert transport.in_use() == 0
        finally:
            await transport.aclose()


@pytest.mark.parametrize("make", [FastTransport, AiohttpTransport], ids=["fast", "aiohttp"])
async def test_both_clients_tell_when_the_bodys_end_was_read(
        make: Callable[[], Transport]) -> None:
    """``ended()``: the next read would return ``b""`` at once. Never before the end arrived (a
    stream writes its frames at once unless their read also brought the end)."""
    release = asyncio.Event()

    async def chunked(server: RawServer, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        await server.next_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"4\r\nlast\r\n0\r\n\r\n")
        await writer.drain()

    async with RawServer(chunked) as server:
        transport = make()
        try:
            r = await transport.send(request(server.url))
            assert await r.read() == b"first"
            assert not r.ended(), "the end has not arrived"
            release.set()
            assert await r.read() == b"last"
            assert await eventually(r.ended), "the end came with the last piece"
            assert await r.read() == b""
            r.close()
        finally:
            await transport.aclose()


# --- an upstream's bytes nobody asked for, and its head past the limits -------------------------


async def test_bytes_on_an_idle_connection_mean_a_new_one(fast: FastTransport) -> None:
    """An answer, then (while its connection waits in the pool) a stray answer for nobody: the
    next request goes on a new connection and gets its own answer."""
    async def script(server: RawServer, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        while await server.next_request(reader) is not None:
            writer.write(answer())
            await writer.drain()
            await asyncio.sleep(0.02)
            writer.write(answer(b'{"stray":true}'))
            await writer.drain()

    async with RawServer(script) as server:
        r = await fast.send(request(server.url))
        assert await read_all(r) == b'{"ok":true}'
        r.close()
        await asyncio.sleep(0.1)  # the stray arrives while the connection is idle
        r = await fast.send(request(server.url))
        assert await read_all(r) == b'{"ok":true}'
        r.close()
        assert server.connections == 2


async def test_an_upstream_that_speaks_first_is_never_sent_a_request(
        fast: FastTransport) -> None:
    """Bytes before any request (a greeting, an answer to nobody): the connection is dropped
    unwritten, another tried once, and then the request fails cleanly."""
    async def script(server: RawServer, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        writer.write(answer(b'{"early":true}'))
        await writer.drain()
        await server.next_request(reader)

    async with RawServer(script) as server:
        ok = False
        try:
            r = await fast.send(request(server.url))
            # the greeting may not have arrived before the write: then it is read as the answer
            # (as it would be by any client); what matters is that it is read once
            ok = True
            await read_all(r)
            r.close()
        except UpstreamError as e:
            assert e.kind == "connect"
        assert fast.in_use() == 0
        if not ok:
            assert server.requests == []


async def _oversized_head(kind: str, sent: list[int], server: RawServer,
                          reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await server.next_request(reader)
    if kind == "line":
        writer.write(b"HTTP/1.1 200 OK\r\nX-Long: " + b"v" * 70 * 1024 + b"\r\n\r\n")
    elif kind == "headers":
        writer.write(b"HTTP/1.1 200 OK\r\n" + b"X-Many: 1\r\n" * 1500 + b"\r\n")
    else:  # one endless header line: until the client hangs up (bounded here, at 48 MiB)
        writer.write(b"HTTP/1.1 200 OK\r\nX-Endless: ")
        piece = b"e" * 65536
        for _ in range(48 * 16):
            writer.write(piece)
            await writer.drain()
            sent[0] += len(piece)
    await writer.drain()
    await reader.read()


@pytest.mark.parametrize("kind", ["line", "headers", "endless"])
@pytest.mark.parametrize("make", [FastTransport, AiohttpTransport], ids=["fast", "aiohttp"])
async def test_both_clients_refuse_a_head_past_the_limits(make: Callable[[], Transport],
                                                          kind: str) -> None:
    """A 70 KiB header line, 1,500 headers, an endless line: a ``connect`` error (a 502) after
    reading little more than the limit; the endless line is not read on."""
    sent = [0]

    async def script(server: RawServer, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        await _oversized_head(kind, sent, server, reader, writer)

    async with RawServer(script) as server:
        transport = make()
        try:
            with pytest.raises(UpstreamError) as e:
                await transport.send(request(server.url, head_timeout=10))
            assert e.value.kind == "connect"
            assert transport.in_use() == 0
            assert await eventually(lambda: server.open == 0)
            # what the kernel's buffers took on both sides, and no more
            assert sent[0] < 16 * 1024 * 1024, sent[0]
        finally:
            await transport.aclose()
