"""The client edge: how long a connection may take to send a request, and how many may be open.

aiohttp bounds neither the time a client takes to send a request's headers nor the silences
inside its body, so a client that sends one byte a second (slowloris) holds a connection, its
file descriptor and a task for as long as it likes. :class:`EdgeProtocol` (aiohttp's
``RequestHandler`` with one timer per connection) enforces, on every listener the gateway opens:

- ``server.header_timeout``: a request's head (request line and headers) must be complete within
  this many seconds of the connection's accept, or of the end of the previous response on a
  keep-alive connection; else the connection is closed, nothing answered (no route is known).
- ``server.body_timeout``: the longest silence while a handler waits for the request body. The
  body's reader then raises :class:`BodyTimeout`; the exchange answers 408 in the route's
  dialect, and the connection is closed after that answer.
- ``server.max_connections``: past it a new connection gets ``503`` and is closed at once, before
  any of its bytes are read; the established ones go on.

A request aiohttp's parser refuses (garbage, TLS on the HTTP port, a malformed header) gets
aiohttp's ``400`` and one ``bad_http_request`` warning line (error, peer), never a traceback.
A body whose framing breaks after its handler began reading it (a bad chunk size in a later
packet, a corrupt compressed body) fails that body's reader with :class:`BadBody`, answered
``400`` in the route's dialect (aiohttp's parser would queue it as the next request instead, and
the handler would wait for the rest of the body until ``body_timeout``).

On the main listener with ``server.http_layer: fast``, the protocol parses the chat routes'
POSTs itself (:mod:`gateway.lane`) and hands every other request to aiohttp's parser; the
timeouts above apply to the lane's requests the same way.

The timer wakes once per ``min(header_timeout, body_timeout)`` while a request is served, and
once at the deadline while a head is awaited: no work per byte beyond reading the clock.

What this leans on in aiohttp (checked by ``tests/test_edge.py``, so that an upgrade that moves
it fails a test rather than the edge): ``Server.__call__`` builds the protocol from
``Server._loop`` and ``Server._kwargs``; ``RequestHandler._waiter`` is pending exactly while the
connection waits for a request head (aiohttp's own keep-alive check reads it the same way), and
``RequestHandler._current_request`` is the request whose handler runs; a parser error is queued
in ``RequestHandler._messages`` as a message with an ``exc`` (aiohttp's ``_ErrInfo``).
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from gateway.config import ServerConfig
from gateway.lane import Lane, LaneRouter
from gateway.log import get_logger

__all__ = ["BadBody", "BodyTimeout", "Edge", "EdgeProtocol", "EdgeRunner",
           "default_max_connections", "edge_for", "raise_file_limit"]

_REFUSED_BODY = b'{"error": {"message": "too many connections", "code": "OVERLOADED"}}'
_REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(_REFUSED_BODY), _REFUSED_BODY))
_FDS_PER_CONNECTION = 2
"""A client connection and the upstream connection its exchange may hold."""
_FD_RESERVE = 100
"""Listeners, log and metrics files, the idle upstream pool's overflow, the history store."""


class BadBody(ValueError):
    """The request body's framing broke after its handler began reading it (aiohttp's parser
    refused a later packet); the message is the parser's."""


class BodyTimeout(TimeoutError):
    """The client sent nothing of its request body for ``server.body_timeout``. A
    :class:`TimeoutError`, so that aiohttp's read of an unread body after the answer ends
    quietly."""


def raise_file_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (as Go's runtime does at
    start); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def default_max_connections(file_limit: int | None = None) -> int:
    """``server.max_connections`` when unset: what the file limit leaves room for, two
    descriptors a connection after a reserve, capped at 10,000 per process."""
    if file_limit is None:
        file_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(16, min(10_000, (file_limit - _FD_RESERVE) // _FDS_PER_CONNECTION))


class Edge:
    """The limits of one process's listeners and what they did (shared by the main and the admin
    listener: the descriptors are the process's)."""

    __slots__ = ("body_timeout", "counts", "header_timeout", "max_connections", "on_drop", "open")

    def __init__(self, header_timeout: float, body_timeout: float, max_connections: int,
                 on_drop: Callable[[str], None] | None = None) -> None:
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.max_connections = max_connections
        self.on_drop = on_drop
        """Told each connection the edge closes: ``header_timeout``, ``body_timeout`` or
        ``max_connections``."""
        self.open = 0
        """Connections accepted and not yet lost."""
        self.counts: dict[str, int] = {}

    def dropped(self, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if self.on_drop is not None:
            self.on_drop(reason)


def edge_for(server: ServerConfig, on_drop: Callable[[str], None] | None = None) -> Edge:
    """The limits ``server`` sets; when ``max_connections`` is unset, the process's soft
    open-file limit is raised to its hard limit first and the default sized from it."""
    limit = server.max_connections
    if limit is None:
        limit = default_max_connections(raise_file_limit())
    return Edge(server.header_timeout, server.body_timeout, limit, on_drop)


class EdgeProtocol(RequestHandler):
    """aiohttp's HTTP/1 protocol with the edge's limits (see the module's docstring)."""

    __slots__ = ("_admitted", "_edge", "_idle_since", "_lane", "_lane_router", "_last_data",
                 "_timer")

    def __init__(self, edge: Edge, manager: web.Server, lane_router: LaneRouter | None = None,
                 **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._edge = edge
        self._lane_router = lane_router
        self._lane: Lane | None = None
        """The chat routes' short lane (:mod:`gateway.lane`), on the main listener with
        ``server.http_layer: fast``."""
        self._admitted = False
        self._timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        self._last_data = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        edge = self._edge
        if edge.open >= edge.max_connections:
            # Before aiohttp sees it: no task, no parser, the descriptor freed at once.
            edge.dropped("max_connections")
            tr = cast(asyncio.Transport, transport)
            tr.write(_REFUSED)
            tr.close()
            return
        self._admitted = True
        edge.open += 1
        super().connection_made(transport)
        if self._lane_router is not None:
            self._lane = Lane(self, self._lane_router, cast(asyncio.Transport, transport))
        self._idle_since = self._last_data = self._loop.time()
        self._timer = self._loop.call_at(self._idle_since + edge.header_timeout, self._check)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._admitted:
            return
        self._admitted = False
        self._edge.open -= 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)
        lane, self._lane = self._lane, None  # the lane refers back to this protocol: no cycle
        if lane is not None:
            lane.lost()

    def data_received(self, data: bytes) -> None:
        self._last_data = self._loop.time()
        if self._lane is not None:
            self._lane.data(data)
        else:
            self.aiohttp_data(data)

    def aiohttp_data(self, data: bytes) -> None:
        """``data`` for aiohttp's parser."""
        queued = len(self._messages)
        super().data_received(data)
        # A message queued while a handler runs: a pipelined request, or the parser's error.
        request = self._current_request
        if request is not None and len(self._messages) > queued:
            self._fail_body_in_reading(request)

    def _fail_body_in_reading(self, request: web.BaseRequest) -> None:
        """The parser refused this packet while a handler reads its request's body: that body
        is broken, not a next request. Fail its reader and close after the handler's answer."""
        if request.content.is_eof():
            return
        exc = getattr(self._messages[-1][0], "exc", None)
        if not isinstance(exc, HttpProcessingError):
            return
        self._messages.pop()
        _warn_bad_request(exc, request.remote)
        self.close()
        request.content.set_exception(BadBody(exc.message))

    def idle_between_requests(self) -> bool:
        """aiohttp waits for a request's head, with none queued and none in progress."""
        waiter = self._waiter
        return (waiter is not None and not waiter.done() and not self._messages
                and self._current_request is None and not self._upgraded
                and self._payload_parser is None)

    def answered(self) -> None:
        """A lane request's answer is done, the connection kept: as aiohttp after its own, the
        next head is due ``header_timeout`` from now, and the keep-alive timer starts again."""
        loop = self._loop
        now = self._idle_since = loop.time()
        if self._keepalive_timeout > 0:
            self._next_keepalive_close_time = now + self._keepalive_timeout
            if self._keepalive_handle is None:
                self._keepalive_handle = loop.call_at(self._next_keepalive_close_time,
                                                      self._process_keepalive)

    def _process_keepalive(self) -> None:
        lane = self._lane
        if lane is not None and lane.busy():  # aiohttp sees no request: the lane has one
            self._keepalive_handle = None
            self.answered()
            return
        super()._process_keepalive()

    async def finish_response(self, request: web.BaseRequest, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            # The next request's head is due header_timeout from here (keep-alive).
            self._idle_since = self._loop.time()

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status != 400 or not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        # What aiohttp's parser refused (its 400s, before any handler ran) is the client's fault:
        # one warning line, no traceback. aiohttp logs a traceback at error level, or at debug
        # level for a first request with a bad method (TLS or junk sent to an HTTP port).
        _warn_bad_request(exc, request.remote)
        if request.writer.output_size > 0:  # as aiohttp's: nothing more can be sent
            raise ConnectionError("Response is sent already, cannot send another response "
                                  "with the error message")
        # aiohttp's answer to a parser error: the parser's message, as plain text.
        response = web.Response(status=status, text=message or exc.message,
                                content_type="text/plain")
        response.force_close()
        return response

    def _check(self) -> None:
        self._timer = None
        if self.transport is None or self._force_close:
            return
        edge = self._edge
        now = self._loop.time()
        lane = self._lane
        if lane is not None and lane.on:
            waiting = lane.waiting_for_head()
        else:
            waiter = self._waiter
            waiting = waiter is not None and not waiter.done()
        if waiting:  # for a request head
            due = self._idle_since + edge.header_timeout
            if now >= due:
                edge.dropped("header_timeout")
                self.force_close()
                return
        else:
            due = now + min(edge.header_timeout, edge.body_timeout)
            request = self._current_request
            if lane is not None and lane.on:
                if lane.reading_body() and self.transport.is_reading():
                    quiet_until = self._last_data + edge.body_timeout
                    if now >= quiet_until:
                        edge.dropped("body_timeout")
                        self.close()  # after the handler's answer (a 408), not before
                        lane.body_timed_out(BodyTimeout())
                        return
                    due = min(due, quiet_until)
            elif request is not None and self._starved(request):
                quiet_until = self._last_data + edge.body_timeout
                if now >= quiet_until:
                    edge.dropped("body_timeout")
                    self.close()  # after the handler's answer (a 408), not before
                    request.content.set_exception(BodyTimeout())
                    return
                due = min(due, quiet_until)
        self._timer = self._loop.call_at(due, self._check)

    def _starved(self, request: web.BaseRequest) -> bool:
        """Its handler waits for body bytes the client does not send (not for bytes aiohttp
        holds back because the handler reads slowly)."""
        transport = self.transport
        return (not request.content.is_eof() and transport is not None
                and transport.is_reading())


def _warn_bad_request(exc: HttpProcessingError, peer: str | None) -> None:
    get_logger().warning("bad_http_request", status=400, exc_type=type(exc).__name__,
                         exc_message=exc.message, peer=peer)


class _EdgeServer(web.Server):
    edge: Edge
    lane_router: LaneRouter | None = None

    def __call__(self) -> RequestHandler:
        return EdgeProtocol(self.edge, self, self.lane_router, loop=self._loop, **self._kwargs)


class EdgeRunner(web.AppRunner):
    """An :class:`aiohttp.web.AppRunner` whose connections are :class:`EdgeProtocol`."""

    __slots__ = ("edge",)

    def __init__(self, app: web.Application, edge: Edge, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.edge = edge

    def use_lane(self, router: LaneRouter) -> None:
        """Connections accepted from now on take the chat routes' short lane
        (:mod:`gateway.lane`)."""
        assert self.server is not None
        cast(_EdgeServer, self.server).lane_router = router

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # aiohttp builds the Server (app startup, handler arguments); only the class of the
        # protocol it makes per connection changes.
        server.__class__ = _EdgeServer
        cast(_EdgeServer, server).edge = self.edge
        return server
