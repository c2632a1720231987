"""The chat routes' short lane in (``server.http_layer: fast``): their POSTs parsed by the
connection's protocol itself.

aiohttp reads every request with its parser, builds its message, URL, payload stream, request
and writer objects, and runs each request's handler in a task of its own, started and awaited
by the connection's task: about 25 µs of CPU a request on the development machine before the
handler runs (an aiohttp low-level server answering straight to its transport, against an
asyncio protocol on httptools answering the same: 45 against 20 µs a request). For a POST to a
path aiohttp's router has already sent to a chat route (:class:`gateway.dispatch.ChatPaths`),
:class:`Lane` parses the request with httptools (on llhttp, the parser aiohttp's own is built
on) and starts the exchange in a task at once, with a :class:`LaneRequest` for aiohttp's.

Everything else stays aiohttp's, on the same connection. The lane keeps a request's bytes
until its head is complete; a request it does not take (another method or path, ``Expect``,
``Upgrade``, a body that is chunked, has no ``Content-Length`` or is over
``server.max_body_bytes``, a head over aiohttp's 8190-byte limit or one the parser refuses) is
handed to aiohttp's parser from its
first byte, and aiohttp answers it as before (its 400s included). When aiohttp is idle again
between two requests (its parser at a message's end, which a second httptools parser fed the
same bytes tells), the lane takes the next request back. A request always starts at a byte the
lane knows: the first of a packet, or the one after the previous lane request's end (its head's
end plus its ``Content-Length``); pipelined bytes wait until the answer before them is sent.

Per connection, as aiohttp: answers in order, keep-alive from the request (``Connection``,
HTTP/1.0), the connection closed after an answer that says so, the handler cancelled when the
client goes, a graceful shutdown waits for the answer in progress. The edge's timeouts
(:mod:`gateway.edge`) apply to a lane request's head and body as to aiohttp's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import httptools
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http import HttpVersion, HttpVersion10, HttpVersion11
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.framing.search import holds
from gateway.log import get_logger

if TYPE_CHECKING:
    from gateway.edge import EdgeProtocol

__all__ = ["Lane", "LaneHandler", "LaneRequest", "LaneRouter"]

LaneHandler = Callable[["LaneRequest"], Coroutine[Any, Any, web.StreamResponse]]
LaneRouter = Callable[[str], "tuple[LaneHandler, int] | None"]
"""A request path's lane handler and the largest body it takes, or ``None``: not the lane's."""

HEAD_LIMIT = 8190
"""A head longer than this is aiohttp's to judge (its line and field limits, 8190 bytes each,
answer 400): the lane takes no head aiohttp could refuse, and does not keep any number of bytes
of a head that does not end."""

PENDING_LIMIT = 1 << 16
"""Pipelined bytes held while an answer is in progress before the connection stops reading
(aiohttp's read buffer size)."""

_VERSIONS = {"1.1": HttpVersion11, "1.0": HttpVersion10}


class LaneRequest:
    """What the exchange reads of a request (the members of :class:`aiohttp.web.Request` it
    uses), parsed by the lane."""

    __slots__ = ("_body", "_error", "_waiter", "content_length", "headers", "keep_alive",
                 "path", "protocol", "remote", "scheme", "total_bytes", "transport", "version")

    method = "POST"

    def __init__(self, path: str, headers: CIMultiDictProxy[str], version: HttpVersion,
                 keep_alive: bool, content_length: int, protocol: BaseProtocol,
                 transport: asyncio.Transport | None, remote: str | None, scheme: str) -> None:
        self.path = path
        self.headers = headers
        self.version = version
        self.keep_alive = keep_alive
        self.content_length: int | None = content_length
        self.protocol = protocol
        self.transport = transport
        self.remote = remote
        self.scheme = scheme
        self.total_bytes = 0
        """Body bytes received."""
        self._body: bytes | None = None
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[bytes] | None = None

    @property
    def content(self) -> LaneRequest:
        """The body's reader (``total_bytes``, ``iter_chunked``), as aiohttp's."""
        return self

    async def read(self) -> bytes:
        if self._body is not None:
            return self._body
        if self._error is not None:
            raise self._error
        waiter: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            return await waiter
        finally:
            self._waiter = None

    def iter_chunked(self, n: int) -> AsyncIterator[bytes]:
        return _Pieces(self, n)

    def body_complete(self, body: bytes) -> None:
        self._body = body
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(body)

    def body_failed(self, exc: BaseException) -> None:
        """The body will not come (the edge's ``body_timeout``, the client gone)."""
        if self._body is not None:
            return
        self._error = exc
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)


class _Pieces:
    """The body in pieces of at most ``n`` bytes, as aiohttp's ``iter_chunked`` gives them (a
    class, not an async generator: the compiled build's mypyc has none)."""

    def __init__(self, request: LaneRequest, n: int) -> None:
        self._request = request
        self._n = n
        self._body: bytes | None = None
        self._at = 0

    def __aiter__(self) -> _Pieces:
        return self

    async def __anext__(self) -> bytes:
        if self._body is None:
            self._body = await self._request.read()
        if self._at >= len(self._body):
            raise StopAsyncIteration
        piece = self._body[self._at:self._at + self._n]
        self._at += self._n
        return piece


class _Stop(Exception):
    """Raised from a parser callback to stop the parser where it is (httptools wraps it)."""


class _InMessage:
    """The shadow parser's callbacks: whether it is inside a request. Apart from
    :class:`_Shadow`, so that the parser (which holds these bound methods) and what holds the
    parser form no reference cycle: both go when the lane drops the shadow."""

    __slots__ = ("busy",)

    def __init__(self) -> None:
        self.busy = False

    def on_message_begin(self) -> None:
        self.busy = True

    def on_message_complete(self) -> None:
        self.busy = False


class _Shadow:
    """Follows the bytes aiohttp's parser is given, to tell when it is between two requests."""

    __slots__ = ("message", "parser")

    def __init__(self) -> None:
        self.message = _InMessage()
        self.parser = httptools.HttpRequestParser(self.message)

    @property
    def busy(self) -> bool:
        return self.message.busy


class Lane:
    """One connection's short lane (see the module's docstring)."""

    __slots__ = (
        "_body",
        "_chunks",
        "_complete",
        "_exact",
        "_extra",
        "_fed",
        "_handler",
        "_head_end",
        "_headers",
        "_parser",
        "_peer",
        "_pending",
        "_proto",
        "_router",
        "_scheme",
        "_shadow",
        "_stop",
        "_url",
        "on",
        "request",
        "task",
    )

    def __init__(self, proto: EdgeProtocol, router: LaneRouter,
                 transport: asyncio.Transport) -> None:
        self._proto = proto
        self._router = router
        peer = transport.get_extra_info("peername")
        self._peer = None if peer is None else \
            str(peer[0]) if isinstance(peer, (list, tuple)) else str(peer)
        self._scheme = "https" if transport.get_extra_info("sslcontext") else "http"
        self.on = True
        """The lane reads the connection's bytes (else aiohttp does, and :attr:`_shadow`
        follows them)."""
        self._shadow: _Shadow | None = None
        self._parser: httptools.HttpRequestParser | None = None
        self._pending = b""
        self._stop = ""
        self.task: asyncio.Task[web.StreamResponse] | None = None
        self.request: LaneRequest | None = None
        """The request the lane took, from its head's end until its answer is done and its
        body read."""
        self._reset()

    def _reset(self) -> None:
        self._chunks: list[bytes] = []
        self._fed = 0
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._complete = False
        self._head_end = 0
        self._exact = False
        self._extra = 0
        """Bytes of the packet that ended the request past its end (a pipelined request)."""
        self._handler: LaneHandler | None = None
        self.request = None

    # -- what the edge asks -------------------------------------------------------------------

    def waiting_for_head(self) -> bool:
        return self.on and self.request is None and self.task is None

    def reading_body(self) -> bool:
        """A request the lane took whose body has not all come."""
        return self.on and self.request is not None and not self._complete

    def busy(self) -> bool:
        return self.on and (self.request is not None or self.task is not None)

    def body_timed_out(self, exc: BaseException) -> None:
        """The edge's ``body_timeout``: the exchange answers (a 408) and the edge closes."""
        if self.request is not None:
            self.request.body_failed(exc)
        if self.task is None:  # answered already: nothing else will be read
            self._proto.force_close()

    def lost(self) -> None:
        if self.request is not None:
            self.request.body_failed(ConnectionResetError("the client's connection is closed"))
        if self.task is not None:
            self.task.cancel()
        # A parser holds this lane's (or the shadow's) bound methods: a reference cycle that,
        # left to the collector, keeps each closed connection's objects until a full
        # collection, which the gateway's thresholds make rare (docs/performance.md). Nothing
        # is parsed after the connection is lost (``data`` returns on a closed protocol).
        self._parser = None
        self._shadow = None

    # -- bytes in -----------------------------------------------------------------------------

    def data(self, data: bytes) -> None:
        proto = self._proto
        if proto._force_close or proto._close:
            return
        if not self.on:
            shadow = self._shadow
            if shadow is None or shadow.busy or not proto.idle_between_requests():
                self._follow(data)
                proto.aiohttp_data(data)
                return
            self.on = True  # aiohttp is between two requests: the next one is the lane's
            self._shadow = None
        if self._complete:  # an answer is in progress: pipelined bytes wait for it
            self._pending += data
            if len(self._pending) > PENDING_LIMIT and proto.transport is not None:
                proto.transport.pause_reading()
            return
        self._parse(data)

    def _follow(self, data: bytes) -> None:
        shadow = self._shadow
        if shadow is None:
            return
        try:
            shadow.parser.feed_data(data)
        except httptools.HttpParserError:  # aiohttp refuses it too and closes: no way back
            self._shadow = None

    def _parse(self, data: bytes) -> None:
        if self.request is None:
            self._chunks.append(data)
        self._fed += len(data)
        parser = self._parser
        if parser is None:
            parser = self._parser = httptools.HttpRequestParser(self)
        self._stop = ""
        try:
            parser.feed_data(data)
        except httptools.HttpParserError:
            self._parser = None
            stop = self._stop
            if stop == "handoff" or (not stop and self.request is None):
                self._handoff()  # not the lane's, or refused: aiohttp answers it
                return
            if stop == "end":  # the request ends inside this packet: the rest is the next one
                self._pending = data[len(data) - self._extra:] + self._pending
            else:  # a second request began where the lane cannot tell its first byte
                self._pending = b""
                self._proto.close()  # after this answer
        if self.request is not None:
            if self._handler is not None:
                self._start()
            elif self.task is None and self._complete:  # answered before its body ended
                self._next()
        elif self._fed > HEAD_LIMIT:
            self._parser = None
            self._handoff()

    def _handoff(self) -> None:
        data = b"".join(self._chunks)
        self._reset()
        self.on = False
        self._shadow = _Shadow()
        self._follow(data)
        self._proto.aiohttp_data(data)

    # -- parser callbacks ---------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.request is not None:  # the previous request's end was not where it was taken
            self._stop = "unknown"
            raise _Stop

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        request = self._take()
        if request is None:
            self._stop = "handoff"
            raise _Stop
        self.request = request
        self._chunks = []

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete = True
        request = self.request
        assert request is not None
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request.total_bytes = len(body)
        request.body_complete(body)
        self._extra = self._fed - self._head_end - len(body)
        if self._exact and self._extra > 0:
            self._stop = "end"
            raise _Stop

    def _take(self) -> LaneRequest | None:
        """The request whose head just ended, when it is the lane's."""
        parser = self._parser
        assert parser is not None
        url = self._url
        if parser.get_method() != b"POST" or parser.should_upgrade() or url[:1] != b"/":
            return None
        raw_path = url.split(b"?", 1)[0]
        if holds(raw_path, b"%"):  # aiohttp decodes it: left to aiohttp's router
            return None
        version = _VERSIONS.get(parser.get_http_version())
        if version is None:
            return None
        length = -1
        pairs: list[tuple[str, str]] = []
        for raw_name, raw_value in self._headers:
            name = raw_name.decode("utf-8", "surrogateescape")
            value = raw_value.decode("utf-8", "surrogateescape")
            low = name.lower()
            if low == "content-length":
                if length >= 0 or not value.isdigit():
                    return None
                length = int(value)
            elif low in ("transfer-encoding", "expect"):
                return None
            pairs.append((name, value))
        if length < 0:
            return None
        chunks = self._chunks
        buf = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        end = buf.find(b"\r\n\r\n") + 4
        if end > HEAD_LIMIT or end == 3:
            return None
        path = raw_path.decode("ascii", "replace")
        routed = self._router(path)
        if routed is None or length > routed[1]:
            return None
        self._handler = routed[0]
        # Where the request ends, to know where a pipelined one begins: trusted only when the
        # head is all CRLF lines (one per header, the request line and the empty one).
        head = buf[:end]
        lines = head.count(b"\r\n")
        self._exact = end > 3 and lines == len(self._headers) + 2 and head.count(b"\n") == lines
        self._head_end = end
        proto = self._proto
        return LaneRequest(path, CIMultiDictProxy(CIMultiDict(pairs)), version,
                           parser.should_keep_alive(), length, proto, proto.transport,
                           self._peer, self._scheme)

    # -- the answer ---------------------------------------------------------------------------

    def _start(self) -> None:
        handler, request = self._handler, self.request
        assert handler is not None and request is not None
        proto = self._proto
        self._handler = None
        proto._request_in_progress = True
        self.task = task = proto._loop.create_task(handler(request))
        task.add_done_callback(self._answered)

    def _answered(self, task: asyncio.Task[web.StreamResponse]) -> None:
        self.task = None
        proto = self._proto
        proto._request_in_progress = False
        waiter = proto._handler_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)  # a graceful shutdown waits for this answer
        keep = False
        if not task.cancelled():
            exc = task.exception()
            if exc is None:
                request = self.request
                keep = task.result().keep_alive is True and request is not None \
                    and request.keep_alive
            elif not isinstance(exc, ConnectionError):
                get_logger().error("lane_handler_failed", exc_type=type(exc).__name__,
                                   exc_message=str(exc))
        if not keep or proto._close or proto._force_close:
            proto.force_close()
            return
        proto.answered()
        if self._complete:
            self._next()
        # else the answer came before the whole body (a refusal): it is read, then the next

    def _next(self) -> None:
        """The request is answered and its body read: on to the next one."""
        self._reset()
        proto = self._proto
        if proto._close:  # closing after this answer (a shutdown, or pipelining the lane
            proto.force_close()  # could not follow)
            return
        data, self._pending = self._pending, b""
        if proto.transport is not None and not proto.transport.is_reading():
            proto.transport.resume_reading()
        if data:
            self.data(data)
