"""One HTTP/1.1 client connection on asyncio's protocol API.

A connection carries one request at a time (no pipelining), and is in exactly one
:class:`State`, changed only by :meth:`Http1Connection._move`:

* ``IDLE``: open, no request on it. Any byte read now was never asked for (a late answer, a
  server's goodbye): the connection goes to ``MUST_CLOSE``.
* ``ACTIVE``: a request was written and its response is being read.
* ``DONE``: the response is complete, the read that completed it was parsed to its last byte,
  and nothing followed the answer's last byte. Only a ``DONE`` connection whose server keeps
  it goes back to ``IDLE`` (the pool), and only once its reader released it.
* ``MUST_CLOSE``: it will carry no other request (bytes after the answer's end, in the same read
  or a later one, a malformed or oversized response, ``Connection: close``, a failed or
  abandoned read); its transport is aborted on entry.
* ``CLOSED``: the transport is gone.

Whether a connection may be reused is decided once the whole of a read was parsed, never from
inside a parser callback: an answer's end found in the middle of a read says nothing about the
bytes after it in that read, and those bytes must never become the next request's answer.

Bytes are parsed by httptools (llhttp, Node's parser) for the response head and chunked bodies;
the head is first delimited and bounded here (:data:`MAX_LINE`, :data:`MAX_HEADERS`,
:data:`MAX_HEAD`, as aiohttp's client bounds it), since httptools gathers a header line whole
before it says anything about it. A ``Content-Length`` body is counted here, so its end is known
to the byte; a chunked body's end is where llhttp says, and what may follow it unseen by llhttp
(line ends it skips between messages) is told by the line ends the read ends with.

A body is kept in a bounded buffer: past :data:`HIGH_WATER` buffered bytes the socket is no
longer read until the consumer catches up, so a fast upstream cannot fill the gateway's memory
while a slow client reads. gzip and deflate bodies are decompressed as they are read, at most
:data:`READ_PIECE` bytes of output per :meth:`Http1Response.read`, so a small compressed body
cannot expand unboundedly in one step either.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import time
import weakref
import zlib
from collections.abc import Callable, Mapping
from typing import Any, cast

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.errors import UpstreamError
from gateway.upstream.deadlines import Deadline, deadlines

__all__ = ["HIGH_WATER", "MAX_HEAD", "MAX_HEADERS", "MAX_LINE", "READ_PIECE", "Http1Connection",
           "Http1Response", "State"]

HIGH_WATER = 64 * 1024
"""Buffered body bytes past which the socket is paused."""
READ_PIECE = 64 * 1024
"""Most decompressed bytes one read returns."""
MAX_LINE = 8190
"""Longest status line or header line (without its line end): aiohttp's client's
``max_line_size`` and ``max_field_size``."""
MAX_HEADERS = 128
"""Most header lines in one response head: aiohttp's client's ``max_headers``."""
MAX_HEAD = 100 * 1024
"""Most bytes of response heads (interim ones included) before the final head's end, and of a
chunked body's framing and trailers between two pieces of body: httpcore's bound on an
incomplete event. Far above any API's real head; low enough that a hostile upstream costs one
read past it, not megabytes."""
DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 1.0
"""A response its reader stopped before the end (a stream whose finish was read, and then only
its terminating chunk or ``[DONE]`` is left) is read to its end and the connection kept, if that
end comes within these bounds; else the connection is closed."""
_CUT = "the upstream stream was cut off"
_BROKE = "the upstream connection broke mid-answer"
_CLOSED_EARLY = "the upstream closed the connection before answering"
_BAD_HTTP = "the upstream sent a malformed HTTP response"
_TOO_BIG = "the upstream sent a response head over the limits"
_BAD_CODING = "the upstream sent a body that could not be decompressed"

# Response headers the connection itself acts on (lower-case name -> slot).
_WATCHED = {b"content-type": 0, b"content-length": 1, b"transfer-encoding": 2,
            b"content-encoding": 3, b"keep-alive": 4}
_SLOTS = 5

# How the body in flight is framed (small ints: compared on every read).
_HEAD = 0
"""Still reading a response head."""
_LENGTH = 1
"""``Content-Length``: counted here."""
_PARSED = 2
"""``Transfer-Encoding``: llhttp reads it (chunked, or to the close)."""
_TO_CLOSE = 3
"""Neither: the body ends with the connection."""
_ENDED = 4
"""The response is complete: any further byte is a stray."""
_LINE_ENDS = (b"\r", b"\n")
_END_RUN = 4
"""Line-end bytes a chunked message ends with (``0\\r\\n\\r\\n``, or a trailer's ``\\r\\n``
and the empty line): llhttp is strict about CRLF, so never more, never fewer."""


class State(enum.IntEnum):
    """(An IntEnum for its hash, int's own: Enum's is a Python function, called on every
    move.)"""

    IDLE = 0
    ACTIVE = 1
    DONE = 2
    MUST_CLOSE = 3
    CLOSED = 4


_MOVES: dict[State, frozenset[State]] = {
    State.IDLE: frozenset({State.ACTIVE, State.MUST_CLOSE, State.CLOSED}),
    State.ACTIVE: frozenset({State.DONE, State.MUST_CLOSE, State.CLOSED}),
    State.DONE: frozenset({State.IDLE, State.MUST_CLOSE, State.CLOSED}),
    State.MUST_CLOSE: frozenset({State.CLOSED}),
    State.CLOSED: frozenset(),
}


# Module-level names for the members: a member read through its class costs ~0.1 µs on 3.11,
# several times a read.
_IDLE, _ACTIVE, _DONE = State.IDLE, State.ACTIVE, State.DONE
_MUST_CLOSE, _CLOSED = State.MUST_CLOSE, State.CLOSED


class _Stray(Exception):
    """Raised from a parser callback to stop llhttp at a message after the answer's end."""


class _Malformed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Http1Connection(asyncio.Protocol):
    """The protocol side: what arrived for the request in flight, and whether the connection
    may carry another. Its pool reads :attr:`state`, :attr:`reusable` and :meth:`drainable`."""

    def __init__(self, on_lost: Callable[[Http1Connection], None]) -> None:
        self.loop = asyncio.get_running_loop()
        """Kept: Python 3.11's ``get_running_loop`` makes a system call (``getpid``) each time,
        and a request would ask several times."""
        self.wheel = deadlines(self.loop)
        self._on_lost = on_lost
        self.state = _IDLE
        self._parser: httptools.HttpResponseParser | None = None
        """One per response, dropped once its head or its end is parsed: no state of one answer
        can reach the next, and the parser (which holds this connection's bound methods) forms
        no lasting reference cycle for the collector (docs/performance.md, "Closed connections
        freed at once")."""
        self.transport: asyncio.Transport | None = None
        self.fd = -1
        self.in_flight = False
        """A request holds this connection (from :meth:`begin` to its release)."""
        self.uses = 0
        self.idle_since = 0.0
        self.keep_alive_hint: float | None = None
        """The server's ``Keep-Alive: timeout=N`` (seconds), when it sent one."""
        self.paused = False
        self._drained: Callable[[bool], None] | None = None
        self._drain_left = 0
        self._drain_timer: Deadline | None = None
        self._timer = Deadline(functools.partial(_timed_out, weakref.ref(self)))
        """The one bound of the request in flight (its head's, then its body's): one entry
        armed again for each (:meth:`fail_at`), not one made for each. (It reaches the
        connection through a weak reference: no cycle for the collector.)"""
        self._late: Callable[[], BaseException] | None = None
        """What :attr:`_timer` fails the request with."""
        self._reset()

    def _reset(self) -> None:
        self.head: asyncio.Future[None] | None = None
        self.status = 0
        self.fields: list[tuple[bytes, bytes]] = []
        """The head's fields as llhttp gave them: decoded only if asked for (the gateway reads
        an upstream's headers by name on an error answer alone)."""
        self.watched: list[bytes | None] = [None] * _SLOTS
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.body: list[bytes] = []
        self.buffered = 0
        self.waiter: asyncio.Future[None] | None = None
        self.error: BaseException | None = None
        self._mode = _HEAD
        self._left = 0
        """``Content-Length`` bytes still to come."""
        self._pending = bytearray()
        """An incomplete head, until its end arrives."""
        self._line_at = 0
        """Where in :attr:`_pending` the line being scanned starts."""
        self._lines = 0
        self._heads = 0
        """Bytes of the heads already parsed (interim ones)."""
        self._interim = False
        self._stray = False
        self._tail = b""
        """The last bytes of the chunked body read so far (``_END_RUN + 1`` of them): what
        tells line ends after a chunked answer's end from its own."""
        self._framing = 0
        """Chunked-body bytes read since the last piece of body: framing, trailers."""

    @property
    def lost(self) -> bool:
        return self.state is _CLOSED

    def _move(self, to: State) -> None:
        """The one place a connection's state changes."""
        now = self.state
        if to is now:
            return
        if to not in _MOVES[now]:
            if now is _CLOSED and to is _MUST_CLOSE:
                return  # an abort after the close
            raise AssertionError(f"connection state {now.name} -> {to.name}")
        self.state = to
        if to is not _ACTIVE:
            self._parser = None  # an answer's parser never reads past that answer
        if to is _MUST_CLOSE:
            transport = self.transport
            if transport is not None and not transport.is_closing():
                transport.abort()

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports quack like asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else -1

    def data_received(self, data: bytes) -> None:
        if self.state is not _ACTIVE:
            # Bytes nobody asked for (before a request, or after an answer's end): a late
            # reply, a server's goodbye. Whatever they are, this connection carries no other
            # request. (MUST_CLOSE and CLOSED: already being dropped.)
            self._move(_MUST_CLOSE)
            return
        try:
            # (_PARSED first: a stream's every read)
            got = self._feed_body(data) if self._mode == _PARSED else self._read_other(data)
        except _Malformed as e:
            self._fail(UpstreamError("connect", e.message), e.__cause__)
            self._move(_MUST_CLOSE)
            return
        if self.complete:
            self._settle()
        elif got:
            if self._drained is None:
                w = self.waiter
                if w is not None and not w.done():
                    w.set_result(None)
            elif self._drain_left < 0:
                self._drain_end(False)

    def _read_other(self, data: bytes) -> int:
        """A read in any mode but _PARSED; returns the body bytes it brought."""
        mode = self._mode
        if mode == _HEAD:
            rest = self._read_head(data)
            if rest is None:
                return 0
            data = rest
            mode = self._mode
            if mode == _PARSED:
                return self._feed_body(data) if data else 0
        if mode == _LENGTH:
            left = self._left
            if len(data) > left:
                self._stray = True  # bytes glued after the body's last one
                data = data[:left]
            if data:
                self._left = left - len(data)
                self._add(data)
            if self._left == 0:
                self.complete = True
                self._mode = _ENDED
            return len(data)
        if mode == _TO_CLOSE:
            self._add(data)
            return len(data)
        if data:  # _ENDED at the head's end (204, 304, Content-Length: 0)
            self._stray = True
        return 0

    def eof_received(self) -> bool:
        return False  # close the transport: a half-closed upstream connection is of no use

    def connection_lost(self, exc: Exception | None) -> None:
        self._move(_CLOSED)
        if self._drained is not None:
            self._drain_end(False)
        if self.in_flight and not self.complete and self.error is None:
            if not self.headers_done:
                self._fail(UpstreamError("connect", _CLOSED_EARLY), exc)
            elif self._mode == _TO_CLOSE and exc is None:
                self.complete = True  # no length, not chunked: the body ends with the connection
                self._mode = _ENDED
                self._wake()
            else:
                self._fail(UpstreamError("connect", _CUT if exc is None else _BROKE), exc)
        self._on_lost(self)

    # --- reading -----------------------------------------------------------------------------

    def _read_head(self, data: bytes) -> bytes | None:
        """Delimits and bounds the response head (and any interim ones before it), then has
        llhttp parse it; returns what followed the final head in ``data``, or ``None`` while
        the head is incomplete."""
        pending = self._pending
        buf: bytes | bytearray = data
        if pending:
            pending += data
            buf = pending
        while True:
            end = self._scan(buf)
            if end < 0:
                if buf is not pending:
                    self._pending = bytearray(buf)
                return None
            self._feed_head(buf[:end])
            rest = buf[end:] if isinstance(buf, bytes) else bytes(buf[end:])
            self._pending = pending = bytearray()
            self._line_at = self._lines = 0
            if not self._interim:
                return rest
            self._interim = False
            buf = rest

    def _scan(self, buf: bytes | bytearray) -> int:
        """The end of the head that ``buf`` starts with (past its empty line), or -1; raises
        past a limit, so at most one read more than a limit is ever held."""
        pos = self._line_at
        if not pos and buf[:1] not in _LINE_ENDS:
            # The common case, a whole head shorter than one line may be: only its lines are
            # counted (a bare LF head takes the long way, for llhttp to refuse).
            end = buf.find(b"\r\n\r\n")
            if 0 <= end <= MAX_LINE and buf.count(b"\n", 0, end) <= MAX_HEADERS:
                self._heads += end + 4
                if self._heads > MAX_HEAD:
                    raise _Malformed(_TOO_BIG)
                return end + 4
        lines = self._lines
        find = buf.find
        while True:
            nl = find(b"\n", pos)
            if nl < 0:
                if len(buf) - pos > MAX_LINE + 1 or self._heads + len(buf) > MAX_HEAD:
                    raise _Malformed(_TOO_BIG)
                self._line_at = pos
                self._lines = lines
                return -1
            width = nl - pos
            if width and buf[nl - 1] == 13:  # CR
                width -= 1
            pos = nl + 1
            if width > MAX_LINE:
                raise _Malformed(_TOO_BIG)
            if width:
                lines += 1
                if lines > MAX_HEADERS + 1:  # and the status line
                    raise _Malformed(_TOO_BIG)
            elif lines:  # the empty line: the head's end
                self._heads += pos
                if self._heads > MAX_HEAD:
                    raise _Malformed(_TOO_BIG)
                return pos
            # (empty lines before a status line: llhttp skips them, and so does the scan)

    def _feed_head(self, head: bytes | bytearray) -> None:
        parser = self._parser
        assert parser is not None  # ACTIVE and reading a head: begin() made it
        try:
            parser.feed_data(head)
        except httptools.HttpParserUpgrade as e:
            raise _Malformed(_BAD_HTTP) from e
        except httptools.HttpParserError as e:
            raise _Malformed(_BAD_HTTP) from e
        if self._interim:
            return
        if not self.headers_done:  # the scan's empty line was not llhttp's head end
            raise _Malformed(_BAD_HTTP)
        if self.complete:  # no body (204, 304, Content-Length: 0)
            self._mode = _ENDED
        elif self.watched[2] is not None:
            self._mode = _PARSED
            return  # llhttp goes on parsing the body: the parser stays
        elif self.watched[1] is not None:
            try:
                self._left = int(self.watched[1])  # llhttp accepted it: digits (int reads bytes)
            except ValueError as e:
                raise _Malformed(_BAD_HTTP) from e
            self._mode = _LENGTH
        else:
            self._mode = _TO_CLOSE
        self._parser = None

    def _feed_body(self, data: bytes) -> int:
        """A read of a body llhttp parses; returns how many pieces of body it brought."""
        parser = self._parser
        assert parser is not None  # _PARSED: the head kept it
        body = self.body
        before = len(body)
        try:
            parser.feed_data(data)  # on_body appends each piece, and does nothing else
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as e:
            if not self.complete:
                raise _Malformed(_BAD_HTTP) from e
            self._stray = True  # not HTTP after the answer's end, or stopped by on_message_begin
        got = len(body) - before
        if got:
            if self._drained is not None:
                self._drain_left -= sum(map(len, body[before:]))
                del body[before:]
            else:
                self.buffered += len(data)  # (with its chunk heads: a bound, not a count)
                if self.buffered > HIGH_WATER:
                    self._pause_if_full()
        if self.complete:
            # What llhttp skips between messages unseen (line ends) is told by how the bytes
            # end: a chunked answer ends with exactly _END_RUN line-end bytes, so more means
            # strays.
            tail = (self._tail + data[-(_END_RUN + 1):])[-(_END_RUN + 1):]
            if len(tail) - len(tail.rstrip(b"\r\n")) > _END_RUN:
                self._stray = True
            return got
        self._tail = data[-(_END_RUN + 1):] if len(data) > _END_RUN else (
            self._tail + data)[-(_END_RUN + 1):]
        if got:
            self._framing = 0
        else:
            self._framing += len(data)
            if self._framing > MAX_HEAD:  # endless chunk framing or trailers, no body
                raise _Malformed(_TOO_BIG)
        return got

    def _add(self, piece: bytes) -> None:
        """A piece of a body counted here (not by llhttp)."""
        if self._drained is not None:
            self._drain_left -= len(piece)  # read to be dropped
            return
        self.body.append(piece)
        self.buffered += len(piece)
        self._pause_if_full()

    def _pause_if_full(self) -> None:
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _settle(self) -> None:
        """After the whole of a read was parsed: the one place a response's end decides the
        connection's fate, once its answer is complete."""
        self._move(_MUST_CLOSE if self._stray or not self.keep_alive else _DONE)
        self._wake()
        if self._drained is not None:
            self._drain_end(True)

    # --- httptools callbacks (all within _feed_head or _feed_body) ---------------------------

    def on_message_begin(self) -> None:
        if self.complete:
            raise _Stray  # a message after the answer's end: llhttp stops here

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.headers_done:
            return  # a trailer: not passed on
        self.fields.append((name, value))
        slot = _WATCHED.get(name.lower())
        if slot is not None:
            self.watched[slot] = value

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None  # it is the caller
        status = parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (103 Early Hints): the real one follows
            self.fields = []
            self.watched = [None] * _SLOTS
            self._interim = True
            return
        self.status = status
        self.headers_done = True
        self.keep_alive = parser.should_keep_alive()
        hint = self.watched[4]
        if hint is not None:
            self.keep_alive_hint = _keep_alive_timeout(hint.decode("latin-1"))
        if self.head is not None and not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        # Called once a chunk, many times a read: it only appends, and _feed_body sees to the
        # rest once a read.
        self.body.append(body)

    def on_message_complete(self) -> None:
        if not self.headers_done:
            return  # the end of an interim answer
        parser = self._parser
        assert parser is not None  # it is the caller
        self.keep_alive = parser.should_keep_alive()
        self.complete = True
        self._mode = _ENDED
        # Nothing else here: the rest of this read is still to be parsed (see _settle).

    # --- used by the pool and the response -------------------------------------------------

    def begin(self, data: bytes) -> asyncio.Future[None]:
        """Send one request on an ``IDLE`` connection; the returned future resolves when its
        response head arrived."""
        assert self.transport is not None
        self._move(_ACTIVE)
        self._reset()
        self._parser = httptools.HttpResponseParser(self)
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
        """The response ended cleanly, nothing followed it, and the server keeps the connection
        (whatever of the body was not read is dropped). A paused socket may hold bytes past the
        answer that were never looked at: not reusable."""
        return (self.state is _DONE and self.error is None and not self.paused
                and self.transport is not None and not self.transport.is_closing())

    def drainable(self) -> bool:
        """The response is healthy but not over: :meth:`drain` may finish it."""
        return (self.state is _ACTIVE and self.headers_done and not self.complete
                and self.error is None and self.keep_alive
                and self._mode in (_LENGTH, _PARSED)
                and self.transport is not None and not self.transport.is_closing())

    def drain(self, done: Callable[[bool], None]) -> None:
        """Read the rest of the response without keeping it; ``done(True)`` when it ended
        within :data:`DRAIN_BYTES` and :data:`DRAIN_SECONDS` with nothing after it (the
        connection may be reused), ``done(False)`` otherwise (the caller closes it)."""
        self._drained = done
        self._drain_left = DRAIN_BYTES
        self.take()
        self._drain_timer = self.wheel.after(DRAIN_SECONDS, lambda: self._drain_end(False))

    def take(self) -> list[bytes]:
        """The buffered body pieces; reading resumes once they are taken."""
        body, self.body, self.buffered = self.body, [], 0
        if self.paused and self.transport is not None and self.state is not _CLOSED:
            self.paused = False
            self.transport.resume_reading()
        return body

    def fail(self, exc: BaseException) -> None:
        self._fail(exc, None)

    def fail_at(self, when: float, error: Callable[[], BaseException]) -> None:
        """Fail the request in flight with ``error()`` once ``loop.time()`` passed ``when``
        (within a tick of the wheel), unless :meth:`stop_timer` first; it replaces the bound
        armed before."""
        self._late = error
        self.wheel.arm(self._timer, when)

    def stop_timer(self) -> None:
        self._late = None
        self.wheel.cancel(self._timer)

    def abort(self) -> None:
        """Close now, whatever is in flight (it is never returned to a pool)."""
        self.in_flight = False
        self._move(_MUST_CLOSE)

    def finished(self) -> None:
        """The response was released by its reader after it was complete: ``DONE`` to
        ``IDLE``, its unread body dropped."""
        self._move(_IDLE)
        self.in_flight = False
        self.body = []
        self.buffered = 0
        self.idle_since = time.monotonic()

    # --- internals -------------------------------------------------------------------------

    def _drain_end(self, ok: bool) -> None:
        done, self._drained = self._drained, None
        if self._drain_timer is not None:
            self.wheel.cancel(self._drain_timer)
            self._drain_timer = None
        if done is not None:
            done(ok and self.reusable)

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


class Http1Response:
    """:class:`~gateway.upstream.transport.UpstreamResponse` over one connection; ``release``
    is called once, by :meth:`close`, with whether the connection may be pooled again."""

    __slots__ = ("_conn", "_decoder", "_headers", "_release", "_tail", "_untrusted", "status")

    def __init__(self, conn: Http1Connection,
                 release: Callable[[Http1Connection, str], None]) -> None:
        self._conn: Http1Connection | None = conn
        self.status: int = conn.status
        """Built once the head arrived; kept past :meth:`close` (which lets go of the
        connection), as an attempt's record reads it after the response is closed."""
        self._release = release
        self._untrusted = False
        """A read was cancelled or failed: the connection is closed, whatever its state."""
        self._headers: CIMultiDictProxy[str] | None = None
        self._decoder = _decoder_for(conn.watched[3])
        self._tail = b""

    @property
    def headers(self) -> Mapping[str, str]:
        if self._headers is None:
            raw = self._conn.fields if self._conn is not None else []
            self._headers = CIMultiDictProxy(CIMultiDict(
                [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]))
        return self._headers

    @property
    def content_type(self) -> str:
        raw = self._conn.watched[0] if self._conn is not None else None
        return raw.decode("latin-1").split(";", 1)[0].strip().lower() if raw else ""

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

    def fail_after(self, delay: float, error: Callable[[], BaseException]) -> None:
        conn = self._conn
        if conn is not None:
            conn.fail_at(conn.loop.time() + delay, error)

    def stop_timer(self) -> None:
        if self._conn is not None:
            self._conn.stop_timer()

    def close(self) -> None:
        """Hands the connection back: ``reuse`` (the response ended cleanly), ``drain`` (its
        reader stopped early; the rest is read and dropped), or ``close`` (a failure, or a
        cancelled read: then nothing is trusted, as the reading may have stopped anywhere)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.stop_timer()  # no bound of this request outlives it
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


def _timed_out(conn: weakref.ref[Http1Connection]) -> None:
    found = conn()
    if found is not None and found._late is not None:
        found.fail(found._late())


def _decoder_for(coding: bytes | None) -> Any:
    if not coding:
        return None
    name = coding.decode("latin-1").strip().lower()  # (str's strip: Latin-1's spaces too)
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if name == "deflate":
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
