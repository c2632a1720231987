"""Hostile clients against a running gateway with a well-behaved upstream.

Whatever a client sends or does, it gets a clear 4xx in its own dialect, a correct answer, or a
clean close; never a 500. The gateway keeps serving, stops reading the upstream when the client
stops reading, and leaks no task or upstream connection. See docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import structlog
from aiohttp import web
from fakes import reader_for
from faults.harness import (
    TIMEOUTS,
    UPSTREAM_CLIENTS,
    client_request,
    routes_config,
    settle,
    wait_until,
)
from faults.upstream import TEXT, FaultUpstream, repeats_text

from gateway.app import create_app
from gateway.canonical import ChatRequest, Message
from gateway.dialects import client_path, get, names, routes_by_prefix
from gateway.log import configure_logging

MAX_BODY = 512 * 1024


def _flooding() -> str:
    """A dialect whose text frame, repeated, is more text: the flooding upstream speaks it."""
    return next(n for n in names() if repeats_text(get(n)))


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    saved = structlog.get_config()
    buf = io.StringIO()
    configure_logging(stream=buf)
    yield buf
    structlog.configure(**saved)


ROOM = 4 * TIMEOUTS["timeout"] + 2.0
"""Bound on what the configured timeouts end (or what ends before them), with room for a busy
machine: which way an exchange ended, its status and access line tell."""


def _access_lines(logs: io.StringIO) -> list[dict[str, Any]]:
    return [e for e in map(orjson.loads, logs.getvalue().splitlines())
            if e.get("event") == "access"]


class Gateway:
    """A gateway on a real port in ``client``'s dialect: ``/chat`` answers well, ``/never``,
    ``/slow``, ``/drip`` and ``/flood`` reach upstreams that misbehave in time only."""

    def __init__(self, app: web.Application, client: Any, up: FaultUpstream, dialect: str,
                 logs: io.StringIO) -> None:
        self.app = app
        self.client = client
        self.up = up
        self.dialect = dialect
        self.logs = logs

    @property
    def port(self) -> int:
        port: int = self.client.server.port
        return port

    async def post(self, body: Any, *, stream: bool = False, path: str = "/chat",
                   headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
        """``body`` (raw bytes, or JSON) where and as a client of the dialect sends it."""
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        sent, _, asked = client_request(self.dialect, stream, path)
        async with self.client.post(sent, data=data,
                                    headers={**asked, **(headers or {})}) as resp:
            return resp.status, resp.headers, await resp.read()

    async def still_serves(self) -> None:
        """A normal request afterwards gets the exact answer, and nothing was a 500."""
        status, _, raw = await self.post(client_request(self.dialect, False)[1])
        assert status == 200, raw
        assert get(self.dialect).parse_response(orjson.loads(raw)).text == TEXT
        self.no_500()

    def no_500(self) -> None:
        text = self.logs.getvalue()
        assert "internal_error" not in text, text[-2000:]
        assert '"status":500' not in text, text[-2000:]


@pytest.fixture(params=names())
def dialect(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


async def _gateway(aiohttp_client: Any, dialect: str, logs: io.StringIO, up: FaultUpstream,
                   cancellation: bool = True, max_body: int = MAX_BODY,
                   upstream_client: str | None = None,
                   timeouts: dict[str, float] | None = None) -> Gateway:
    cfg = routes_config(up, dialect, {
        "/chat": (dialect, "ok"),
        "/never": (dialect, "never"),
        "/slow": (dialect, "slow"),
        "/drip": (dialect, "drip"),
        "/flood": (_flooding(), "flood"),
    }, extra={"server": {"max_body_bytes": max_body}}, upstream_client=upstream_client,
        timeouts=timeouts)
    app = create_app(cfg)
    client = await aiohttp_client(app, server_kwargs={"handler_cancellation": cancellation})
    return Gateway(app, client, up, dialect, logs)


@pytest.fixture
async def gw(aiohttp_client: Any, dialect: str, logs: io.StringIO) -> Any:
    async with FaultUpstream() as up:
        yield await _gateway(aiohttp_client, dialect, logs, up)


def _error_message(dialect: str, raw: bytes) -> str:
    err = get(dialect).parse_error(orjson.loads(raw))
    assert err is not None, raw
    return err.message


# --- bodies ------------------------------------------------------------------------------------

BAD_BODIES: dict[str, bytes] = {
    "malformed-json": b'{"messages": [{"role": "user", "content": "hi"}',
    "trailing-comma": b'{"messages": [{"role": "user", "content": "hi"},]}',
    "empty-body": b"",
    "not-an-object": b'[{"role": "user", "content": "hi"}]',
    "null": b"null",
    "number": b"42",
    "messages-a-string": orjson.dumps({"messages": "hi"}),
    "messages-empty": orjson.dumps({"messages": []}),
    "messages-of-strings": orjson.dumps({"messages": ["hi"]}),
    "role-a-number": orjson.dumps({"messages": [{"role": 1, "content": "hi"}]}),
    "content-a-number": orjson.dumps({"messages": [{"role": "user", "content": 7}]}),
    "missing-messages": orjson.dumps({"stream": False}),
    "invalid-utf8": b'{"messages": [{"role": "user", "content": "\xff\xfe\xc3"}]}',
    "nan": b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
    "nested-10000": (b'{"messages": [{"role": "user", "content": "hi"}], "context": '
                     + b"[" * 10_000 + b"]" * 10_000 + b"}"),
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
async def test_a_bad_body_gets_400_in_the_clients_dialect(gw: Gateway, name: str) -> None:
    status, headers, raw = await gw.post(BAD_BODIES[name])
    assert status == 400, raw
    assert headers["Content-Type"].startswith("application/json")
    assert _error_message(gw.dialect, raw).startswith("invalid request")
    assert gw.up.requests == []  # nothing reached the upstream
    await gw.still_serves()


async def test_stream_yes(gw: Gateway) -> None:
    """``"stream": "yes"``: 400 where the body's flag is the dialect's switch (a request it
    renders, streamed or whole, carries one); a dialect that chooses by path (``stream_path``)
    or by ``Accept`` alone has no such flag, so there the key is just an unknown key (passed on)
    and the answer is 200."""
    status, _, raw = await gw.post({**client_request(gw.dialect, False)[1], "stream": "yes"})
    asked = [get(gw.dialect).render_request(ChatRequest([Message("user", "hi")]), stream=s,
                                            model="m") for s in (True, False)]
    if routes_by_prefix(get(gw.dialect)) or all("stream" not in a for a in asked):
        assert status == 200, raw
    else:
        assert status == 400, raw
        assert "stream" in _error_message(gw.dialect, raw)
    await gw.still_serves()


@pytest.mark.parametrize("depth", [300, 1000])
async def test_nesting_the_json_writer_cannot_take_is_400(gw: Gateway, depth: int) -> None:
    """orjson reads 1024 levels but writes only 254: a body in between must not reach the
    writer unchecked (it once made a 500). Sent in a key the same-dialect upstream is given."""
    good = orjson.dumps(client_request(gw.dialect, False)[1])
    body = b'{"metadata": {"x": %s}, %s' % (b"[" * depth + b"]" * depth, good[1:])
    status, _, raw = await gw.post(body)
    assert status == 400, raw
    assert "nested" in _error_message(gw.dialect, raw)
    await gw.still_serves()


async def test_ten_thousand_messages_are_answered(aiohttp_client: Any, dialect: str,
                                                  logs: io.StringIO) -> None:
    """Chosen behaviour: no limit on the number of messages beyond ``max_body_bytes``; 10,000
    short messages are translated and answered 200 (and fast). (Some dialects spell a message
    in more bytes than others: the limit here is one that all 10,000 fit.)"""
    messages = [Message("user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(10_000)]
    body = client_request(dialect, False, messages=messages)[1]
    limit = 4 * 1024 * 1024
    assert len(orjson.dumps(body)) < limit
    async with FaultUpstream() as up:
        # the upstream reads 10,000 messages too: time for that on a busy machine (the test's
        # 1 s timeout is for the faults)
        gw = await _gateway(aiohttp_client, dialect, logs, up, max_body=limit,
                            timeouts={"timeout": ROOM})
        t0 = time.perf_counter()
        status, _, raw = await gw.post(body)
        assert status == 200, raw[:300]
        assert time.perf_counter() - t0 < ROOM  # speed is the benches' to measure
        sent = reader_for(dialect).read_request(up.requests[-1].json)
        assert len(sent.messages) == 10_000


async def test_content_type_is_not_required(gw: Gateway) -> None:
    status, _, raw = await gw.post(client_request(gw.dialect, False)[1],
                                   headers={"Content-Type": "text/plain"})
    assert status == 200, raw


async def test_wrong_method_and_unknown_path(gw: Gateway) -> None:
    async with gw.client.get(_whole(gw.dialect)) as resp:
        assert resp.status == 405
        assert resp.headers["Allow"] == "POST, OPTIONS"
        assert _error_message(gw.dialect, await resp.read())
    async with gw.client.post("/nope", data=b"{}") as resp:
        assert resp.status == 404
    await gw.still_serves()


# --- raw sockets -------------------------------------------------------------------------------


def _head(path: str, extra: str = "", length: int | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    head = "\r\n".join(lines) + "\r\n" + extra
    return (head + "\r\n").encode()


def _whole(dialect: str) -> str:
    """Where a client of ``dialect`` posts a whole request to the route ``/chat``."""
    return client_path(get(dialect), "/chat", "m", stream=False)


def _ask(dialect: str, stream: bool, path: str) -> tuple[bytes, bytes]:
    """The head and body of a request as a client of ``dialect`` sends it to route ``path``."""
    sent, body, headers = client_request(dialect, stream, path)
    data = orjson.dumps(body)
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return _head(sent, extra, length=len(data)), data


async def _read_status(reader: asyncio.StreamReader, limit: float = 3.0) -> tuple[int, bytes]:
    async with asyncio.timeout(limit):
        head = await reader.readuntil(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head


async def _read_rest(reader: asyncio.StreamReader, limit: float = 3.0) -> bytes:
    buf = b""
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(limit):
            while chunk := await reader.read(65536):
                buf += chunk
    return buf


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def test_an_oversized_body_sent_slowly_is_413_before_it_all_arrived(gw: Gateway) -> None:
    """Chunked, no Content-Length, 32 KiB every 10 ms towards 16 MiB: the 413 comes once the
    limit (512 KiB) is passed, while the client is still sending."""
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    writer.write(_head(_whole(gw.dialect), "Transfer-Encoding: chunked\r\n"))
    sent = 0
    answer = asyncio.ensure_future(_read_status(reader, 5.0))
    piece = b"x" * 32768
    with contextlib.suppress(ConnectionError):
        while sent < 16 * 1024 * 1024 and not answer.done():
            writer.write(b"8000\r\n" + piece + b"\r\n")
            await writer.drain()
            sent += len(piece)
            await asyncio.sleep(0.01)
    status, head = await answer
    assert status == 413
    assert sent < 4 * MAX_BODY, sent
    length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
    body = await reader.readexactly(length)
    assert "over" in _error_message(gw.dialect, body)  # the dialect's error object says why
    await _close(writer)
    assert gw.up.requests == []
    await settle(gw.app)
    await gw.still_serves()


async def test_a_declared_oversized_body_is_413_without_reading_it(gw: Gateway) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    writer.write(_head(_whole(gw.dialect), length=100 * MAX_BODY) + b"{")
    await writer.drain()
    status, _ = await _read_status(reader)
    assert status == 413
    await _close(writer)
    await gw.still_serves()


@pytest.mark.parametrize("what", ["one-long-header", "many-headers", "long-request-line"])
async def test_headers_over_the_limits_are_4xx(gw: Gateway, what: str) -> None:
    if what == "one-long-header":
        head = _head("/chat", f"X-Big: {'a' * 100_000}\r\n", length=2)
    elif what == "many-headers":
        head = _head("/chat", "".join(f"X-H{i}: v\r\n" for i in range(1000)), length=2)
    else:
        head = _head("/chat?" + "q" * 100_000, length=2)
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    with contextlib.suppress(ConnectionError):
        writer.write(head + b"{}")
        await writer.drain()
    status, _ = await _read_status(reader)
    assert 400 <= status < 500 and status in (400, 413, 414, 431), status
    await _close(writer)
    await gw.still_serves()


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def test_a_client_that_stops_reading_stops_the_upstream(gw: Gateway) -> None:
    """Backpressure: a client that never reads a stream whose upstream floods. The gateway stops
    reading the upstream once its buffers to the client are full, so the flood's writes block:
    what the upstream got to send levels off at a few MiB, and memory stays flat."""
    await _flood_unread(gw)


async def test_backpressure_with_the_fallback_client(aiohttp_client: Any,
                                                    logs: io.StringIO) -> None:
    async with FaultUpstream() as up:
        gw = await _gateway(aiohttp_client, names()[0], logs, up,
                            upstream_client=UPSTREAM_CLIENTS[1])
        await _flood_unread(gw)


async def _flood_unread(gw: Gateway) -> None:
    import socket

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", gw.port))
    _reader, writer = await asyncio.open_connection(sock=sock)  # reads 128 KiB, then pauses
    head, body = _ask(gw.dialect, True, "/flood")
    rss0 = _rss()
    writer.write(head + body)
    await writer.drain()
    # wait for the flood to level off: under 64 KiB more in 0.5 s
    last, plateau = -1, False
    deadline = time.monotonic() + 8.0
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        sent = gw.up.flood_sent
        if sent > 0 and sent - last < 64 * 1024:
            plateau = True
            break
        last = sent
    assert plateau, f"the gateway kept reading the upstream: {gw.up.flood_sent} bytes"
    assert gw.up.flood_sent < 48 * 1024 * 1024, gw.up.flood_sent
    assert _rss() - rss0 < 96 * 1024 * 1024
    await _close(writer)
    assert await wait_until(lambda: gw.up.open_connections == 0, 3.0)
    await settle(gw.app, 3.0)
    await gw.still_serves()


# --- clients that go away ----------------------------------------------------------------------

POINTS = ["before-body", "mid-body", "mid-body-half-close", "after-request-half-close",
          "before-headers", "after-headers", "mid-stream"]


@pytest.mark.parametrize("cancellation", [True, False], ids=["cancel", "no-cancel"])
@pytest.mark.parametrize("point", POINTS)
async def test_a_client_that_goes_away(aiohttp_client: Any, dialect: str, logs: io.StringIO,
                                       point: str, cancellation: bool) -> None:
    """At every point of the exchange: a clean close (or, when the client only half-closed and
    still listens, a 4xx in its dialect or the answer), never a 500; nothing leaks and the
    gateway keeps serving. ``cancel`` is how ``gateway serve`` runs (handler_cancellation)."""
    await _goes_away(aiohttp_client, dialect, logs, point, cancellation, None)


@pytest.mark.parametrize("point", ["before-headers", "after-headers", "mid-stream"])
async def test_a_client_that_goes_away_with_the_fallback_client(
        aiohttp_client: Any, logs: io.StringIO, point: str) -> None:
    """The points where an upstream connection is held, with aiohttp's client upstream."""
    await _goes_away(aiohttp_client, names()[0], logs, point, True, UPSTREAM_CLIENTS[1])


async def _goes_away(aiohttp_client: Any, dialect: str, logs: io.StringIO, point: str,
                     cancellation: bool, upstream_client: str | None) -> None:
    async with FaultUpstream() as up:
        gw = await _gateway(aiohttp_client, dialect, logs, up, cancellation,
                            upstream_client=upstream_client)
        path = {"before-headers": "/never", "after-headers": "/slow",
                "mid-stream": "/drip"}.get(point, "/chat")
        stream = point in ("after-headers", "mid-stream")
        head, body = _ask(dialect, stream, path)
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        writer.write(head)
        t0 = time.monotonic()
        if point == "before-body":
            pass
        elif point.startswith("mid-body"):
            writer.write(body[: len(body) // 2])
        else:
            writer.write(body)
        await writer.drain()
        if point.endswith("half-close"):
            writer.write_eof()
            rest = await _read_rest(reader, 2.0)
            if rest:  # it still listens: an answer, never a 500
                status = int(rest.split(b" ", 2)[1])
                assert status in (200, 400), rest[:500]
                if status == 400:
                    payload = rest.split(b"\r\n\r\n", 1)[1]
                    assert _error_message(dialect, payload)
        elif point == "before-headers":
            assert await wait_until(lambda: len(up.requests) == 1)
        elif point == "after-headers":
            await _read_status(reader)
        elif point == "mid-stream":
            await _read_status(reader)
            await reader.read(10)
        await asyncio.sleep(0.05)
        await _close(writer)
        t0 = time.monotonic()
        # the exchange and its upstream connection go with the client: at once when handlers
        # are cancelled, else when the upstream's own timeout ends the exchange
        await settle(gw.app, ROOM)
        if cancellation and point in ("before-headers", "after-headers", "mid-stream"):
            # Ended because its client left, not by a timeout nor the drip running out: the
            # access line says which (the elapsed time cannot, on a busy machine).
            (line,) = [e for e in _access_lines(gw.logs) if e.get("route") == path]
            assert (line["client_disconnected"], line["status"], line["error"]) == (
                True, 499, None), line
            assert time.monotonic() - t0 < ROOM
        assert await wait_until(lambda: up.open_connections == 0, ROOM)
        gw.no_500()
        await gw.still_serves()
