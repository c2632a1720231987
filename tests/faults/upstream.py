"""A fault-injecting chat upstream: raw HTTP/1.1 over ``asyncio.start_server`` on 127.0.0.1.

Raw sockets rather than aiohttp's server, because most faults are things a well-behaved server
cannot do: stall after the headers, cut a chunked body without its last chunk, reset the
connection, write one byte per TCP segment, keep writing to a reader that does not read.

The request path picks the answer: ``/<dialect>/<fault>/chat`` (plus the dialect's
``stream_path``, where its streams are asked for by path). Whole or streamed is decided as the
dialect's server would: by that path where the dialect declares one, else by the request's own
flag. Answers are scripted and rendered with the gateway's own dialect encoders, because a fault
is a scripted answer broken at a known place: known pieces (multi-byte characters split across
frames) around the fault, in each upstream dialect's real wire format. See :data:`FAULTS` for the
catalogue.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.canonical import (
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
    Message,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
)
from gateway.dialects import DIALECTS, Dialect, routes_by_prefix
from gateway.errors import ParseError
from gateway.framing import SniffingReader, encoder_for

__all__ = [
    "DRIP_SECONDS",
    "ERROR_MESSAGE",
    "FAULTS",
    "HOLD_SECONDS",
    "LEAK_KEY",
    "LEAK_PASSWORD",
    "LEAK_TOKEN",
    "LEAK_USER",
    "LONG_REPEATS",
    "PIECES",
    "SECRET_IN_PAGE",
    "TEXT",
    "FaultUpstream",
    "Seen",
    "closed_port",
    "marks_its_finish",
    "repeats_text",
    "stream_frames",
    "whole_body",
]

PIECES = ["Héllo ", "wörld 👋🏽", " — 日本語", " 🇫🇷👨‍👩‍👧", " «end»"]
TEXT = "".join(PIECES)
ERROR_MESSAGE = "the model is overloaded 💥 (upstream's own words)"
SECRET_IN_PAGE = "Traceback (most recent call last): db-password=hunter2"
DRIP_SECONDS = 0.2
HUGE_BYTES = 256 * 1024
"""Longer than the ``max_line_bytes`` the fault tests configure (64 KiB)."""
FLOOD_PIECE = "x" * 1024
HEARTBEAT_SECONDS = 0.1
TRICKLE_SECONDS = 0.2
HOLD_SECONDS = 5.0
"""How long the keep-alive faults hold before they answer: longer than any timeout the fault
tests configure for them, so that a gateway that lets keep-alives hold a stream is seen."""
LONG_REPEATS = 20
LEAK_KEY = "sk-gw-0123456789abcdef"
"""A key the gateway's config sends in a header (from ``${VAR}``)."""
LEAK_USER = "gwuser"
LEAK_PASSWORD = "pw-9f8e7d6c5b"
"""The password of the URL's ``user:password@``."""
LEAK_TOKEN = "qs-token-5a4b3c2d"
"""A token in the URL's query string."""
_MID_PAUSE = 0.05
"""After the first frames of a mid-stream fault: time for the gateway to forward them, so the
client surely got bytes before the fault."""

FAULTS = {
    "ok": "a correct answer (keep-alive)",
    "never": "accepts and reads the request, never answers",
    "stall": "sends the response headers, then nothing",
    "html500": "500 with an HTML page (holding a traceback and a password)",
    "notjson": "200 whose body is not JSON",
    "errbody": "200 whose whole body is the dialect's error object",
    "r429": "429 with Retry-After: 7 and the dialect's error body",
    "nofinish": "a stream that ends cleanly but before its end marker or final status",
    "cut": "a chunked stream cut off without its terminating chunk",
    "reset": "a stream reset (RST) mid-stream",
    "reset_early": "headers, then RST before any body byte",
    "malformed": "a malformed line mid-stream, then more valid chunks and a finish",
    "malformed_first": "a malformed first line",
    "huge": "a line over max_line_bytes mid-stream",
    "huge_first": "a first line over max_line_bytes",
    "errchunk": "the dialect's error chunk after some text",
    "bytewise": "the correct answer, every byte (headers too) in its own TCP write",
    "drip": f"the correct answer, one frame every {DRIP_SECONDS} s",
    "slow": "the first frames, then silence until the gateway hangs up",
    "ctype_plain": "the correct answer labelled text/plain",
    "ctype_none": "the correct answer with no Content-Type",
    "ctype_swapped": "the correct answer labelled with the other framing's content type",
    "deep": "a correct answer whose first object holds a value nested 300 deep (orjson reads "
            "1024 levels, writes 254)",
    "flood": "a stream of 1 KiB deltas that never ends; counts the bytes it got to send",
    "comments_first": f"SSE keep-alive comments every {HEARTBEAT_SECONDS} s for {HOLD_SECONDS} s, "
                      "then the correct answer",
    "blanks_first": f"blank lines every {HEARTBEAT_SECONDS} s for {HOLD_SECONDS} s, then the "
                    "correct answer",
    "trickle_first": f"the first frame one byte every {TRICKLE_SECONDS} s (for {HOLD_SECONDS} s "
                     "at most), then the rest of the answer",
    "heartbeats": f"the first frames, then keep-alives (SSE comments, or blank lines) every "
                  f"{HEARTBEAT_SECONDS} s for {HOLD_SECONDS} s, then the rest of the answer",
    "long": f"an answer of {LONG_REPEATS} x the text, one frame every {HEARTBEAT_SECONDS} s",
    "leak401": "401 with the dialect's error body quoting the credentials and address it got",
    "leak500": "500 with the dialect's error body quoting the credentials and address it got",
    "leakchunk": "the dialect's error chunk after some text, quoting the credentials and address "
                 "it got",
}
DEEP = b"[" * 300 + b"]" * 300

_REQ = ChatRequest(messages=[Message("user", "hi")])
_STATUS_TEXT = {200: "OK", 401: "Unauthorized", 429: "Too Many Requests",
                500: "Internal Server Error"}


def stream_frames(dialect: Dialect, events: list[StreamEvent]) -> list[bytes]:
    """``events`` as ``dialect`` frames them on the wire, one element per frame."""
    encoder = dialect.encoder(_REQ)
    frame = encoder_for(dialect.framing)
    return [frame(p) for e in events for p in encoder.encode(e)]


def _decoded(dialect: Dialect, frames: list[bytes]) -> list[StreamEvent]:
    reader, decoder = SniffingReader(named=dialect.named_events), dialect.decoder()
    events = [e for f in frames for p in reader.feed(f) for e in decoder.decode(p)]
    return events + decoder.end()


def marks_its_finish(dialect: Dialect) -> bool:
    """Whether the dialect's streams say that they finished (an end marker, a final status), so
    that one which ends cleanly without saying so is cut short; a dialect whose streams end by
    ending has no ``nofinish`` fault."""
    frames = stream_frames(dialect, [StreamStart(), TextDelta("x")])
    return isinstance(_decoded(dialect, frames)[-1], StreamError)


def repeats_text(dialect: Dialect) -> bool:
    """Whether a text frame of the dialect, sent again, is more text (a delta, not the whole
    message so far): what the ``flood`` fault needs to grow the answer without end."""
    frames = stream_frames(dialect, [StreamStart(), TextDelta("x"), TextDelta("y")])
    events = _decoded(dialect, [*frames, frames[-1]])
    return "".join(e.text for e in events if isinstance(e, TextDelta)) == "xyy"


def answer_events(pieces: list[str] = PIECES) -> list[StreamEvent]:
    return [StreamStart(), *(TextDelta(p) for p in pieces), StreamFinish("stop")]


def whole_body(dialect: Dialect, text: str = TEXT) -> bytes:
    resp = ChatResponse(messages=[AssistantMessage(text)], finish_reason="stop")
    return orjson.dumps(dialect.render_response(resp, _REQ))


_HELD: list[socket.socket] = []
"""The sockets that keep :func:`closed_port`'s ports (closed when the tests end)."""


def closed_port() -> int:
    """A loopback port nobody listens on: bound, never listening, and kept bound until the
    tests end. A port bound and closed again was seen handed, moments later, to the test's own
    server (bound to port 0): the request meant for nobody then reached the gateway itself."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    if not _HELD:
        atexit.register(_release)
    _HELD.append(s)
    port: int = s.getsockname()[1]
    return port


def _release() -> None:
    for s in _HELD:
        s.close()
    _HELD.clear()


@dataclass(slots=True)
class Seen:
    """A request as the upstream received it."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass(slots=True)
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def wait_hangup(self, limit: float = 30.0) -> None:
        """Until the gateway closes its end (bounded, so a bug cannot hang the suite)."""
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(limit):
                while await self.reader.read(65536):
                    pass

    def reset(self) -> None:
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


def _head(status: int, content_type: str | None, *, length: int | None = None,
          extra: dict[str, str] | None = None, close: bool = True) -> bytes:
    lines = [f"HTTP/1.1 {status} {_STATUS_TEXT.get(status, 'Status')}"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    if length is None:
        lines.append("Transfer-Encoding: chunked")
    else:
        lines.append(f"Content-Length: {length}")
    lines.append("Connection: close" if close else "Connection: keep-alive")
    lines.extend(f"{k}: {v}" for k, v in (extra or {}).items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


_LAST_CHUNK = b"0\r\n\r\n"


class FaultUpstream:
    """``async with FaultUpstream() as up:`` then ``up.url(dialect, fault)``."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self.connections = 0
        """Connections accepted so far."""
        self.open_connections = 0
        """Connections whose handler still runs (the gateway has not hung up, or we have not)."""
        self.flood_sent = 0
        """Bytes a ``flood`` answer got to write (``drain`` returned for them)."""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.port = 0

    async def __aenter__(self) -> FaultUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2.0)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):
                    await self._server.wait_closed()
            self._server = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, dialect: str, fault: str) -> str:
        assert fault in FAULTS, fault
        return f"{self.base}/{dialect}/{fault}/chat"

    # --- the server ------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        self.open_connections += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(reader, writer)
        try:
            while True:
                seen = await self._read_request(reader)
                if seen is None:
                    break
                self.requests.append(seen)
                if not await self._answer(conn, seen):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self.open_connections -= 1
            self._tasks.discard(task)
            if not writer.transport.is_closing():
                writer.close()

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> Seen | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = []
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                headers.append((k.strip(), v.strip()))
        seen = Seen(method, target, headers, b"")
        length = int(seen.header("Content-Length") or 0)
        seen.body = await reader.readexactly(length) if length else b""
        return seen

    async def _answer(self, conn: _Conn, seen: Seen) -> bool:
        """Answers one request; whether the connection may serve another."""
        parts = seen.target.split("?", 1)[0].strip("/").split("/")
        if len(parts) < 3 or parts[0] not in DIALECTS or parts[1] not in FAULTS:
            page = b"no such fault"
            await conn.send(_head(404, "text/plain", length=len(page)) + page)
            return False
        dialect = DIALECTS[parts[0]]
        fault = parts[1]
        body: Any = {}
        with contextlib.suppress(orjson.JSONDecodeError):
            body = seen.json
        stream = self._wants_stream(dialect, seen.target, body, seen.header("Accept") or "")
        handler: Callable[[_Conn, Dialect, bool], Awaitable[bool]] = getattr(self, "_" + fault)
        return await handler(conn, dialect, stream)

    @staticmethod
    def _wants_stream(dialect: Dialect, target: str, body: Any, accept: str) -> bool:
        path = target.split("?", 1)[0].rstrip("/")
        if dialect.stream_path:
            return path.endswith(dialect.stream_path)
        if routes_by_prefix(dialect):  # the method follows the base URL (…/chat/)
            rest = path.partition("/chat/")[2]
            asked = dialect.read_target(rest, "POST", {})  # type: ignore[attr-defined]
            return asked is not None and asked.stream is True
        if dialect.stream_by_accept and "text/event-stream" in accept:
            return True
        try:
            return dialect.parse_request(body).stream
        except ParseError:
            return False

    # --- answers, one per fault --------------------------------------------------------------

    @staticmethod
    def _ctype(dialect: Dialect, stream: bool) -> str:
        return dialect.stream_content_type if stream else "application/json"

    async def _send_answer(self, conn: _Conn, dialect: Dialect, stream: bool, *,
                           ctype: str | bool | None = True, bytewise: bool = False,
                           pause: float = 0.0, close: bool = False) -> None:
        content_type = self._ctype(dialect, stream) if ctype is True else ctype or None
        if stream:
            out = [_head(200, content_type, close=close)]
            out += [_chunk(f) for f in stream_frames(dialect, answer_events())]
            out.append(_LAST_CHUNK)
        else:
            body = whole_body(dialect)
            third = len(body) // 3
            out = [_head(200, content_type, length=len(body), close=close),
                   body[:third], body[third:2 * third], body[2 * third:]]
        if bytewise:
            for b in b"".join(out):
                conn.writer.write(bytes((b,)))
                await asyncio.sleep(0)
            await conn.writer.drain()
            return
        for i, piece in enumerate(out):
            if pause and 1 < i <= 6:  # five pauses at most (a whole body has two)
                await asyncio.sleep(pause)
            await conn.send(piece)

    async def _ok(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await self._send_answer(conn, dialect, stream, close=False)
        return True

    async def _never(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await conn.wait_hangup()
        return False

    async def _stall(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await conn.send(_head(200, self._ctype(dialect, stream)))
        await conn.wait_hangup()
        return False

    async def _html500(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        page = (f"<!DOCTYPE html><html><head><title>500 Internal Server Error</title></head>"
                f"<body><h1>Internal Server Error</h1><pre>{SECRET_IN_PAGE}\n  File "
                f"\"/srv/app.py\", line 3</pre></body></html>").encode()
        await conn.send(_head(500, "text/html; charset=utf-8", length=len(page)) + page)
        return False

    async def _notjson(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        body = b"<html><body>Welcome to nginx! This is not JSON.</body></html>\n"
        await conn.send(_head(200, self._ctype(dialect, stream), length=len(body)) + body)
        return False

    async def _errbody(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        body = orjson.dumps(dialect.render_error(ChatError(500, ERROR_MESSAGE)))
        await conn.send(_head(200, "application/json", length=len(body)) + body)
        return False

    async def _r429(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        body = orjson.dumps(dialect.render_error(ChatError(429, "slow down", "RATE_LIMITED")))
        await conn.send(_head(429, "application/json", length=len(body),
                              extra={"Retry-After": "7"}) + body)
        return False

    async def _start_stream(self, conn: _Conn, dialect: Dialect,
                            then: list[StreamEvent] | None = None) -> list[bytes]:
        """Headers and the frames of the start and the first two pieces, then a pause. Returns
        the frames of the events ``then`` from the same encoder (the stream's ids and sequence
        numbers go on), for the caller to send."""
        encoder, frame = dialect.encoder(_REQ), encoder_for(dialect.framing)
        events: list[StreamEvent] = [StreamStart(), *(TextDelta(p) for p in PIECES[:2])]
        first = [frame(p) for e in events for p in encoder.encode(e)]
        await conn.send(_head(200, dialect.stream_content_type)
                        + b"".join(_chunk(f) for f in first))
        await asyncio.sleep(_MID_PAUSE)
        return [frame(p) for e in then or [] for p in encoder.encode(e)]

    async def _nofinish(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await self._start_stream(conn, dialect)
        await conn.send(_LAST_CHUNK)
        return False

    async def _cut(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await self._start_stream(conn, dialect)
        conn.writer.write_eof()  # FIN, no terminating chunk
        await conn.wait_hangup()
        return False

    async def _reset(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await self._start_stream(conn, dialect)
        conn.reset()
        return False

    async def _reset_early(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await conn.send(_head(200, self._ctype(dialect, stream)))
        await asyncio.sleep(_MID_PAUSE)
        conn.reset()
        return False

    @staticmethod
    def _bad_line(dialect: Dialect) -> bytes:
        return b"data: {not json at all\n\n" if dialect.framing == "sse" else \
            b"this line is {not json at all\n"

    async def _malformed(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        rest = await self._start_stream(conn, dialect, answer_events()[3:])
        await conn.send(_chunk(self._bad_line(dialect)) + b"".join(map(_chunk, rest))
                        + _LAST_CHUNK)
        return False

    async def _malformed_first(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        frames = stream_frames(dialect, answer_events())
        await conn.send(_head(200, dialect.stream_content_type) + _chunk(self._bad_line(dialect))
                        + b"".join(map(_chunk, frames)) + _LAST_CHUNK)
        return False

    @staticmethod
    def _huge_line(dialect: Dialect) -> bytes:
        payload = orjson.dumps({"pad": "é" * (HUGE_BYTES // 2)})
        frame: Callable[[bytes], bytes] = encoder_for(dialect.framing)
        return frame(payload)

    async def _huge(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await self._start_stream(conn, dialect)
        with contextlib.suppress(ConnectionError):
            await conn.send(_chunk(self._huge_line(dialect)) + _LAST_CHUNK)
        await conn.wait_hangup(5.0)
        return False

    async def _huge_first(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        with contextlib.suppress(ConnectionError):
            await conn.send(_head(200, dialect.stream_content_type)
                            + _chunk(self._huge_line(dialect)) + _LAST_CHUNK)
        await conn.wait_hangup(5.0)
        return False

    async def _errchunk(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        error = await self._start_stream(conn, dialect, [StreamError(ERROR_MESSAGE)])
        await conn.send(b"".join(map(_chunk, error)) + _LAST_CHUNK)
        return False

    async def _bytewise(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await self._send_answer(conn, dialect, stream, bytewise=True, close=True)
        return False

    async def _drip(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await self._send_answer(conn, dialect, stream, pause=DRIP_SECONDS, close=True)
        return False

    async def _slow(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        if stream:
            await self._start_stream(conn, dialect)
        else:
            body = whole_body(dialect)
            await conn.send(_head(200, "application/json", length=len(body)) + body[:10])
        await conn.wait_hangup()
        return False

    async def _ctype_plain(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await self._send_answer(conn, dialect, stream, ctype="text/plain; charset=utf-8",
                                close=True)
        return False

    async def _ctype_none(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        await self._send_answer(conn, dialect, stream, ctype=False, close=True)
        return False

    async def _ctype_swapped(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        if not stream:
            ctype = "text/html"
        elif dialect.framing == "sse":
            ctype = "application/x-ndjson"
        else:
            ctype = "text/event-stream"
        await self._send_answer(conn, dialect, stream, ctype=ctype, close=True)
        return False

    async def _deep(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        def deepen(data: bytes) -> bytes:
            i = data.index(b"{") + 1
            rest = b"," if data[i:i + 1] != b"}" else b""  # an empty object takes no comma
            return data[:i] + b'"x_deep":' + DEEP + rest + data[i:]

        if stream:
            frames = stream_frames(dialect, answer_events())
            frames[0] = deepen(frames[0])
            await conn.send(_head(200, dialect.stream_content_type)
                            + b"".join(map(_chunk, frames)) + _LAST_CHUNK)
        else:
            body = deepen(whole_body(dialect))
            await conn.send(_head(200, "application/json", length=len(body)) + body)
        return False

    async def _flood(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        frames = stream_frames(dialect, [StreamStart(), TextDelta(FLOOD_PIECE),
                                         TextDelta(FLOOD_PIECE)])
        piece = _chunk(frames[-1]) * 16
        await conn.send(_head(200, dialect.stream_content_type) + b"".join(map(_chunk, frames)))
        with contextlib.suppress(ConnectionError):
            for _ in range(1_000_000):  # bounded: ~16 GiB, never reached
                await conn.send(piece)
                self.flood_sent += len(piece)
        return False


    # --- keep-alives and long streams ---------------------------------------------------------

    @staticmethod
    def _keepalive(dialect: Dialect) -> bytes:
        return b": keep-alive\n\n" if dialect.framing == "sse" else b"\n"

    @staticmethod
    async def _hold(conn: _Conn, pieces: list[bytes], every: float) -> list[bytes]:
        """Sends ``pieces`` one every ``every`` seconds for :data:`HOLD_SECONDS` at most, or
        until the gateway hangs up; returns the pieces not sent."""
        loop = asyncio.get_running_loop()
        until = loop.time() + HOLD_SECONDS
        while pieces and loop.time() < until and not conn.reader.at_eof():
            await conn.send(_chunk(pieces.pop(0)))
            await asyncio.sleep(every)
        return pieces

    async def _keepalives_then_answer(self, conn: _Conn, dialect: Dialect,
                                      keepalive: bytes) -> bool:
        await conn.send(_head(200, dialect.stream_content_type))
        with contextlib.suppress(ConnectionError):
            await self._hold(conn, [keepalive] * 10_000, HEARTBEAT_SECONDS)
            frames = stream_frames(dialect, answer_events())
            await conn.send(b"".join(map(_chunk, frames)) + _LAST_CHUNK)
        await conn.wait_hangup(5.0)
        return False

    async def _comments_first(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        return await self._keepalives_then_answer(conn, dialect, b": keep-alive\n\n")

    async def _blanks_first(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        return await self._keepalives_then_answer(conn, dialect, b"\n")

    async def _trickle_first(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        frames = stream_frames(dialect, answer_events())
        await conn.send(_head(200, dialect.stream_content_type))
        with contextlib.suppress(ConnectionError):
            rest = await self._hold(conn, [bytes((b,)) for b in frames[0]], TRICKLE_SECONDS)
            await conn.send(_chunk(b"".join(rest)) + b"".join(map(_chunk, frames[1:]))
                            + _LAST_CHUNK)
        await conn.wait_hangup(5.0)
        return False

    async def _heartbeats(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        rest = await self._start_stream(conn, dialect, answer_events()[3:])
        with contextlib.suppress(ConnectionError):
            await self._hold(conn, [self._keepalive(dialect)] * 10_000, HEARTBEAT_SECONDS)
            await conn.send(b"".join(map(_chunk, rest)) + _LAST_CHUNK)
        await conn.wait_hangup(5.0)
        return False

    async def _long(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        frames = stream_frames(dialect, answer_events(PIECES * LONG_REPEATS))
        await conn.send(_head(200, dialect.stream_content_type))
        with contextlib.suppress(ConnectionError):
            for frame in frames:
                if conn.reader.at_eof():
                    break
                await conn.send(_chunk(frame))
                await asyncio.sleep(HEARTBEAT_SECONDS)
            else:
                await conn.send(_LAST_CHUNK)
        await conn.wait_hangup(5.0)
        return False

    # --- upstreams that quote what they were sent -------------------------------------------

    def leak_url(self, dialect: str, fault: str, stream_path: str | None = None) -> str:
        """The fault's URL with :data:`LEAK_USER`/:data:`LEAK_PASSWORD` as userinfo and
        :data:`LEAK_TOKEN` in its query (``stream_path`` appended before the query)."""
        assert fault in FAULTS, fault
        return (f"http://{LEAK_USER}:{LEAK_PASSWORD}@127.0.0.1:{self.port}/{dialect}/{fault}/chat"
                f"{stream_path or ''}?token={LEAK_TOKEN}")

    def _leak_message(self) -> str:
        """What a careless upstream (or the proxy in front of it) says: every credential and
        address of the request it got, as it got them, and as configured."""
        seen = self.requests[-1]
        got = {k: v for k, v in seen.headers if k.lower() in ("x-api-key", "authorization")}
        return (f"invalid api key {LEAK_KEY}; headers {got}; request "
                f"http://{seen.header('Host')}{seen.target} "
                f"(http://{LEAK_USER}:{LEAK_PASSWORD}@127.0.0.1:{self.port}/?token={LEAK_TOKEN})"
                f" password={LEAK_PASSWORD} token={LEAK_TOKEN} upstream 127.0.0.1:{self.port} "
                f"backend 10.1.2.3:8080")

    async def _leak_status(self, conn: _Conn, dialect: Dialect, status: int) -> bool:
        body = orjson.dumps(dialect.render_error(ChatError(status, self._leak_message())))
        await conn.send(_head(status, "application/json", length=len(body)) + body)
        return False

    async def _leak401(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        return await self._leak_status(conn, dialect, 401)

    async def _leak500(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        return await self._leak_status(conn, dialect, 500)

    async def _leakchunk(self, conn: _Conn, dialect: Dialect, stream: bool) -> bool:
        error = await self._start_stream(conn, dialect, [StreamError(self._leak_message())])
        await conn.send(b"".join(map(_chunk, error)) + _LAST_CHUNK)
        return False
