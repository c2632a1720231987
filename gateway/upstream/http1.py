"""One HTTP/1.1 client connection on asyncio's protocol API, its bytes parsed by httptools
(llhttp, Node's parser): the response head, Content-Length, chunked and read-until-close bodies.

A connection carries one request at a time (no pipelining). Its body is kept in a bounded
buffer: past :data:`HIGH_WATER` buffered bytes the socket is no longer read until the consumer
catches up, so a fast upstream cannot fill the gateway's memory while a slow client reads.
gzip and deflate bodies are decompressed as they are read, at most :data:`READ_PIECE` bytes of
output per :meth:`Http1Response.read`, so a small compressed body cannot expand unboundedly in
one step either.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any, cast

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.errors import UpstreamError
from gateway.upstream.deadlines import Deadline, deadlines

__all__ = ["HIGH_WATER", "READ_PIECE", "Http1Connection", "Http1Response"]

HIGH_WATER = 64 * 1024
"""Buffered body bytes past which the socket is paused."""
READ_PIECE = 64 * 1024
"""Most decompressed bytes one read returns."""
DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 1.0
"""A response its reader stopped before the end (a stream whose finish was read, and then only
its terminating chunk or ``[DONE]`` is left) is read to its end and the connection kept, if that
end comes within these bounds; else the connection is closed."""
_CUT = "the upstream stream was cut off"
_BROKE = "the upstream connection broke mid-answer"
_CLOSED_EARLY = "the upstream closed the connection before answering"
_BAD_HTTP = "the upstream sent a malformed HTTP response"
_BAD_CODING = "the upstream sent a body that could not be decompressed"

# Response headers the connection itself acts on (lower-case name -> slot).
_WATCHED = {b"content-type": 0, b"content-length": 1, b"transfer-encoding": 2,
            b"content-encoding": 3, b"keep-alive": 4}


class Http1Connection(asyncio.Protocol):
    """The protocol side: what arrived for the request in flight, and whether the connection
    may carry another. Its pool reads :attr:`reusable` and :meth:`idle_readable`."""

    def __init__(self, on_lost: Callable[[Http1Connection], None]) -> None:
        self.loop = asyncio.get_running_loop()
        """Kept: Python 3.11's ``get_running_loop`` makes a system call (``getpid``) each time,
        and a request would ask several times."""
        self.wheel = deadlines(self.loop)
        self._on_lost = on_lost
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        """Holds this connection's bound methods: dropped when the connection is lost, so that
        the two form no reference cycle for the collector (docs/performance.md, "Closed
        connections freed at once")."""
        self.transport: asyncio.Transport | None = None
        self.fd = -1
        self.lost = False
        self.in_flight = False
        self.uses = 0
        self.idle_since = 0.0
        self.keep_alive_hint: float | None = None
        """The server's ``Keep-Alive: timeout=N`` (seconds), when it sent one."""
        self._drained: Callable[[bool], None] | None = None
        self._drain_left = 0
        self._drain_timer: Deadline | None = None
        self._reset()

    def _reset(self) -> None:
        self.head: asyncio.Future[None] | None = None
        self.status = 0
        self.raw_headers: list[tuple[str, str]] = []
        self.watched: list[str | None] = [None] * len(_WATCHED)
        self.headers_done = False
        self.complete = False
        self.stray = False
        """Bytes came after the complete response: the connection is not reused."""
        self.keep_alive = False
        self.body: list[bytes] = []
        self._kept = 0
        """Pieces of :attr:`body` that are the answer's (on_body appends, data_received
        checks)."""
        self.buffered = 0
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None
        self.error: BaseException | None = None

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports quack like asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else -1

    def data_received(self, data: bytes) -> None:
        if not self.in_flight or self.complete:
            # Bytes nobody asked for (a late reply, a server's goodbye): never reuse this.
            self._close(None)
            return
        parser = self._parser
        if parser is None:  # lost (asyncio calls nothing after that; a guard for the type)
            return
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._close(UpstreamError("connect", _BAD_HTTP))
            return
        except httptools.HttpParserError as e:
            self._close(UpstreamError("connect", _BAD_HTTP), e)
            return
        # What on_body only appended, seen to once a read (a stream's read holds many chunks)
        body = self.body
        if len(body) > self._kept:
            if self.complete:  # a stray answer's body, after the answer's end: not the answer's
                del body[self._kept:]
            elif self._drained is not None:
                self._drain_body()
            else:
                self._kept = len(body)
                self.buffered += len(data)  # (with its chunk heads: a bound, not a count)
                if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
                    self.paused = True
                    self.transport.pause_reading()
                self._wake()

    def eof_received(self) -> bool:
        return False  # close the transport: a half-closed upstream connection is of no use

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._drained is not None:
            self._drain_end(False)
        if self.in_flight and not self.complete:
            if not self.headers_done:
                self._fail(UpstreamError("connect", _CLOSED_EARLY), exc)
            elif self.watched[1] is None and self.watched[2] is None:
                self._done()  # no length, not chunked: the body ends with the connection
            else:
                self._fail(UpstreamError("connect", _CUT if exc is None else _BROKE), exc)
        self._parser = None  # nothing more to parse: no cycle left for the collector
        self._on_lost(self)

    # --- httptools callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:
            self.stray = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.complete:
            return
        text = value.decode("latin-1")
        self.raw_headers.append((name.decode("latin-1"), text))
        slot = _WATCHED.get(name.lower())
        if slot is not None:
            self.watched[slot] = text

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        parser = self._parser
        assert parser is not None  # it is the caller
        status = parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (103 Early Hints): the real one follows
            self.raw_headers = []
            self.watched = [None] * len(_WATCHED)
            return
        self.status = status
        self.headers_done = True
        hint = self.watched[4]
        if hint is not None:
            self.keep_alive_hint = _keep_alive_timeout(hint)
        if self.head is not None and not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        # Called once a chunk of a chunked body, many times a read: it only appends, and
        # data_received (or on_message_complete) sees to the rest once.
        self.body.append(body)

    def on_message_complete(self) -> None:
        if not self.headers_done or self.complete:
            return  # the end of an interim answer, or of bytes that followed the answer
        parser = self._parser
        assert parser is not None  # it is the caller
        self.keep_alive = parser.should_keep_alive()
        if self._drained is not None:
            self._drain_body()
            if self._drained is None:
                return  # over its bound: already ended
        self._kept = len(self.body)
        self._done()
        if self._drained is not None:
            self._drain_end(True)

    # --- used by the pool and the response -------------------------------------------------

    def begin(self, data: bytes) -> asyncio.Future[None]:
        """Send one request; the returned future resolves when its response head arrived."""
        assert self.transport is not None
        self._reset()
        self.in_flight = True
        self.uses += 1
        self.head = self.loop.create_future()
        self.transport.write(data)
        return self.head

    def refused_write(self) -> bool:
        """Right after :meth:`begin`: the kernel took none of the request's bytes (the send
        failed at once, so the transport is already closing). Only then is a retry safe."""
        return self.transport is None or self.transport.is_closing()

    @property
    def reusable(self) -> bool:
        """The response ended cleanly and the server keeps the connection (whatever of the body
        was not read is dropped)."""
        return (self.complete and self.keep_alive and self.error is None and not self.lost
                and not self.stray and self.transport is not None
                and not self.transport.is_closing())

    def drainable(self) -> bool:
        """The response is healthy but not over: :meth:`drain` may finish it."""
        return (self.headers_done and not self.complete and self.error is None
                and not self.lost and not self.stray and self._parser is not None
                and self._parser.should_keep_alive()
                and self.transport is not None and not self.transport.is_closing())

    def drain(self, done: Callable[[bool], None]) -> None:
        """Read the rest of the response without keeping it; ``done(True)`` when it ended
        within :data:`DRAIN_BYTES` and :data:`DRAIN_SECONDS` (the connection may be reused),
        ``done(False)`` otherwise (the caller closes it)."""
        self._drained = done
        self._drain_left = DRAIN_BYTES
        self.take()
        self._drain_timer = self.wheel.after(DRAIN_SECONDS, lambda: self._drain_end(False))

    def take(self) -> list[bytes]:
        """The buffered body pieces; reading resumes once they are taken."""
        body, self.body, self.buffered, self._kept = self.body, [], 0, 0
        if self.paused and self.transport is not None and not self.lost:
            self.paused = False
            self.transport.resume_reading()
        return body

    def fail(self, exc: BaseException) -> None:
        self._fail(exc, None)

    def abort(self) -> None:
        """Close now, whatever is in flight (it is never returned to a pool)."""
        self.in_flight = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    def finished(self) -> None:
        """The response was closed by its reader after it was complete."""
        self.in_flight = False
        self.idle_since = time.monotonic()

    # --- internals -------------------------------------------------------------------------

    def _drain_body(self) -> None:
        """Drops what came of a drained answer's body, and ends the drain past its bound."""
        self._drain_left -= sum(map(len, self.body))
        self.body.clear()
        if self._drain_left < 0:
            self._drain_end(False)

    def _drain_end(self, ok: bool) -> None:
        done, self._drained = self._drained, None
        if self._drain_timer is not None:
            self.wheel.cancel(self._drain_timer)
            self._drain_timer = None
        if done is not None:
            done(ok and self.reusable)

    def _done(self) -> None:
        self.complete = True
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, exc: BaseException, cause: BaseException | None) -> None:
        if self.error is None:
            if cause is not None:
                exc.__cause__ = cause
            self.error = exc
        for f in (self.head, self.waiter):
            if f is not None and not f.done():
                f.set_exception(self.error)

    def _close(self, exc: BaseException | None, cause: BaseException | None = None) -> None:
        if exc is not None:
            self._fail(exc, cause)
        self.abort()


class Http1Response:
    """:class:`~gateway.upstream.transport.UpstreamResponse` over one connection; ``release``
    is called once, by :meth:`close`, with whether the connection may be pooled again."""

    __slots__ = ("_conn", "_decoder", "_headers", "_release", "_tail", "_untrusted")

    def __init__(self, conn: Http1Connection,
                 release: Callable[[Http1Connection, str], None]) -> None:
        self._conn: Http1Connection | None = conn
        self._release = release
        self._untrusted = False
        """A read was cancelled or failed: the connection is closed, whatever its state."""
        self._headers: CIMultiDictProxy[str] | None = None
        self._decoder = _decoder_for(conn.watched[3])
        self._tail = b""

    @property
    def status(self) -> int:
        return self._conn.status if self._conn is not None else 0

    @property
    def headers(self) -> Mapping[str, str]:
        if self._headers is None:
            raw = self._conn.raw_headers if self._conn is not None else []
            self._headers = CIMultiDictProxy(CIMultiDict(raw))
        return self._headers

    @property
    def content_type(self) -> str:
        raw = self._conn.watched[0] if self._conn is not None else None
        return raw.split(";", 1)[0].strip().lower() if raw else ""

    async def read(self) -> bytes:
        # One coroutine, not a wrapper around another: a stream calls this once a frame.
        try:
            conn = self._conn
            if conn is None:
                raise UpstreamError("connect", _BROKE)
            while True:
                if self._decoder is not None and self._tail:
                    out = self._inflate(b"")
                    if out:
                        return out
                if conn.body:
                    pieces = conn.take()
                    data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
                    if self._decoder is None:
                        return data
                    out = self._inflate(data)
                    if out:
                        return out
                    continue
                if conn.error is not None:
                    raise conn.error
                if conn.complete:
                    return self._flush()
                conn.waiter = conn.loop.create_future()
                try:
                    await conn.waiter
                finally:
                    conn.waiter = None
        except BaseException:
            self._untrusted = True
            raise

    def ended(self) -> bool:
        conn = self._conn
        return (conn is not None and conn.complete and not conn.body and conn.error is None
                and self._decoder is None)

    def fail(self, exc: BaseException) -> None:
        if self._conn is not None:
            self._conn.fail(exc)

    def close(self) -> None:
        """Hands the connection back: ``reuse`` (the response ended cleanly), ``drain`` (its
        reader stopped early; the rest is read and dropped), or ``close`` (a failure, or a
        cancelled read: then nothing is trusted, as the reading may have stopped anywhere)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._untrusted:
            self._release(conn, "close")
        elif conn.reusable:
            self._release(conn, "reuse")
            return
        elif conn.drainable():
            self._release(conn, "drain")
            return
        else:
            self._release(conn, "close")
        # Closed, so nothing reads its error again. That error, once raised to this reader,
        # holds through its traceback a frame that holds the connection: a cycle the collector
        # would keep until a full collection, with the connection and its buffers.
        conn.error = None

    def _inflate(self, data: bytes) -> bytes:
        decoder = self._decoder
        assert decoder is not None
        try:
            out: bytes = decoder.decompress(self._tail + data, READ_PIECE)
        except zlib.error as e:
            raise UpstreamError("connect", _BAD_CODING) from e
        self._tail = decoder.unconsumed_tail
        return out

    def _flush(self) -> bytes:
        decoder = self._decoder
        if decoder is None or decoder.eof:
            return b""
        try:
            out: bytes = decoder.flush()
        except zlib.error as e:
            raise UpstreamError("connect", _BAD_CODING) from e
        if not decoder.eof:
            raise UpstreamError("connect", _CUT)
        return out


class _Deflate:
    """``Content-Encoding: deflate`` is zlib-wrapped by the RFC and raw deflate by some servers:
    the first byte tells (as browsers and aiohttp read it)."""

    __slots__ = ("_inner",)

    def __init__(self) -> None:
        self._inner: Any = None

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if self._inner is None:
            if not data:
                return b""
            wbits = zlib.MAX_WBITS if data[0] & 0x0F == 8 else -zlib.MAX_WBITS
            self._inner = zlib.decompressobj(wbits)
        out: bytes = self._inner.decompress(data, max_length)
        return out

    @property
    def unconsumed_tail(self) -> bytes:
        return self._inner.unconsumed_tail if self._inner is not None else b""

    @property
    def eof(self) -> bool:
        return bool(self._inner is not None and self._inner.eof)

    def flush(self) -> bytes:
        out: bytes = self._inner.flush() if self._inner is not None else b""
        return out


def _decoder_for(coding: str | None) -> Any:
    if not coding:
        return None
    coding = coding.strip().lower()
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return _Deflate()
    return None  # identity, or a coding we never asked for: passed on as it came


def _keep_alive_timeout(value: str) -> float | None:
    for part in value.split(","):
        name, _, number = part.strip().partition("=")
        if name.strip().lower() == "timeout":
            try:
                return max(0.0, float(number))
            except ValueError:
                return None
    return None
