"""The client edge: how long a connection may take to send a request, and how many may be open.

aiohttp bounds neither the time a client takes to send a request's headers nor the silences
inside its body, so a client that sends one byte a second (slowloris) holds a connection, its
file descriptor and a task for as long as it likes. The edge enforces, on every listener the
gateway opens, through public API only:

- ``server.header_timeout``: a request's head must be complete (its handler started) within
  this many seconds of the connection's accept, or of the end of the previous answer on a
  keep-alive connection; else the connection is closed, nothing answered (no route is known).
- ``server.body_timeout``: the longest silence while a handler waits for the request body. The
  body's reader then raises :class:`BodyTimeout`; the exchange answers 408 in the route's
  dialect, and the connection is closed after that answer.
- ``server.max_connections``: past it a new connection gets ``503`` and is closed at once, before
  any of its bytes are read; the established ones go on.

How, without reaching into aiohttp: :class:`EdgeConnection` is the asyncio protocol of each
accepted connection and wraps the protocol aiohttp's :class:`aiohttp.web.Server` (a documented
protocol factory) builds for it, forwarding every protocol call. It sees when bytes arrive;
:func:`edge_middleware` (an ordinary aiohttp middleware) tells it, through the request's
transport's ``get_protocol()``, when a request's handler starts and ends. HTTP itself is parsed
by aiohttp alone: the edge reads no byte.

What aiohttp's parser refuses (garbage, TLS on the HTTP port, a malformed header) gets aiohttp's
own ``400``; aiohttp logs it with a traceback, which :class:`BadRequestLog` (a filter on
aiohttp's server logger) turns into one ``bad_http_request`` warning line (error, peer).

The timer wakes once per ``min(header_timeout, body_timeout)`` while a request is served, and
once at the deadline while a head is awaited: no work per byte beyond reading the clock.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web
from aiohttp.http import HttpProcessingError
from aiohttp.typedefs import Middleware

from gateway.config import ServerConfig
from gateway.log import get_logger

__all__ = ["BadRequestLog", "BodyTimeout", "Edge", "EdgeConnection", "EdgeListener",
           "ErrorAnswer", "connection_of", "default_max_connections", "edge_for",
           "edge_middleware", "edge_middleware_with", "raise_file_limit"]

_REFUSED_BODY = b'{"error": {"message": "too many connections", "code": "OVERLOADED"}}'
_REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(_REFUSED_BODY), _REFUSED_BODY))
_FDS_PER_CONNECTION = 2
"""A client connection and the upstream connection its exchange may hold."""
_FD_RESERVE = 100
"""Listeners, log and metrics files, the idle upstream pool's overflow, the history store."""


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

    __slots__ = ("active", "body_timeout", "counts", "header_timeout", "max_connections",
                 "on_drop", "open")

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
        self.active = 0
        """Requests whose handler runs (their head complete)."""
        self.counts: dict[str, int] = {}

    def dropped(self, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if self.on_drop is not None:
            self.on_drop(reason)


def edge_for(server: ServerConfig, on_drop: Callable[[str], None] | None = None) -> Edge:
    """The limits ``server`` sets; when
    ``max_connections`` is unset, the process's soft open-file limit is raised to its hard
    limit first and the default sized from it."""
    limit = server.max_connections
    if limit is None:
        limit = default_max_connections(raise_file_limit())
    return Edge(server.header_timeout, server.body_timeout, limit, on_drop)


class EdgeConnection(asyncio.Protocol):
    """One accepted connection: the edge's limits around the protocol aiohttp built for it
    (see the module's docstring)."""

    __slots__ = ("_active", "_edge", "_factory", "_idle_since", "_inner", "_last_data", "_loop",
                 "_request", "_timer", "_transport")

    def __init__(self, edge: Edge, factory: Callable[[], asyncio.Protocol]) -> None:
        self._edge = edge
        self._inner: asyncio.Protocol | None = None
        self._factory: Callable[[], asyncio.Protocol] | None = factory
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._active = 0
        """Handlers running for this connection's requests (aiohttp runs one at a time)."""
        self._request: web.BaseRequest | None = None
        self._idle_since = 0.0
        self._last_data = 0.0

    # --- asyncio.Protocol, forwarded to aiohttp's ------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tr = cast(asyncio.Transport, transport)
        edge = self._edge
        factory, self._factory = self._factory, None
        if edge.open >= edge.max_connections or factory is None:
            # Before aiohttp sees it: no task, no parser, the descriptor freed at once.
            edge.dropped("max_connections")
            tr.write(_REFUSED)
            tr.close()
            return
        edge.open += 1
        self._transport = tr
        self._inner = factory()
        self._inner.connection_made(transport)
        self._idle_since = self._last_data = self._loop.time()
        self._timer = self._loop.call_at(self._idle_since + edge.header_timeout, self._check)

    def data_received(self, data: bytes) -> None:
        self._last_data = self._loop.time()
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        inner, self._inner = self._inner, None
        if inner is None:
            return
        self._edge.open -= 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport = None
        self._request = None
        inner.connection_lost(exc)

    # --- told by edge_middleware -----------------------------------------------------------

    def request_started(self, request: web.BaseRequest) -> None:
        self._edge.active += 1
        self._active += 1
        self._request = request

    def request_ended(self) -> None:
        self._edge.active -= 1
        self._active -= 1
        self._request = None
        # The next request's head is due header_timeout from here (keep-alive).
        self._idle_since = self._loop.time()

    def _check(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        edge = self._edge
        now = self._loop.time()
        due = now + min(edge.header_timeout, edge.body_timeout)
        if not self._active:
            if transport.get_write_buffer_size():
                # An answer still going out to a slow reader is not an idle connection.
                self._idle_since = now
            elif now >= self._idle_since + edge.header_timeout:
                edge.dropped("header_timeout")
                transport.close()
                return
            else:
                due = self._idle_since + edge.header_timeout
        else:
            request = self._request
            if request is not None and not request.content.is_eof() \
                    and transport.is_reading():
                # Its handler waits for body bytes the client does not send (not for bytes
                # aiohttp holds back because the handler reads slowly: then it is not reading).
                quiet_until = self._last_data + edge.body_timeout
                if now >= quiet_until:
                    edge.dropped("body_timeout")
                    request.content.set_exception(BodyTimeout())
                    return
                due = min(due, quiet_until)
        self._timer = self._loop.call_at(due, self._check)


def connection_of(request: web.BaseRequest) -> EdgeConnection | None:
    """The edge's view of ``request``'s connection (``None`` on a listener without an edge,
    e.g. aiohttp's test server)."""
    transport = request.transport
    if transport is None:
        return None
    protocol = transport.get_protocol()
    return protocol if isinstance(protocol, EdgeConnection) else None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


ErrorAnswer = Callable[[web.Request, Exception], web.StreamResponse]
"""The answer to what a handler raised (or it raises again), called inside its ``except``."""


def edge_middleware_with(answer: ErrorAnswer | None) -> Middleware:
    """:func:`edge_middleware` that also answers what a handler raised with ``answer`` (the
    main app's error answers): one layer, not two, as every suspension of a handler resumes
    each coroutine around it."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        """Tells the edge when a request's handler runs (its head is complete), so that the
        connection is neither timed out mid-answer nor left idle for longer than the head's
        bound."""
        conn = connection_of(request)
        if conn is not None:
            conn.request_started(request)
        try:
            try:
                response = await handler(request)
            except (asyncio.CancelledError, ConnectionError):
                raise
            except Exception as e:
                if answer is None:
                    raise
                response = answer(request, e)
            if conn is not None and request.content.exception() is not None:
                response.force_close()  # its body timed out: closed after the answer
            return response
        finally:
            if conn is not None:
                conn.request_ended()

    return middleware


edge_middleware = edge_middleware_with(None)


class BadRequestLog(logging.Filter):
    """What aiohttp's parser refuses (its 400s, before any handler runs) is the client's fault:
    one ``bad_http_request`` warning line instead of aiohttp's traceback (at error level, or at
    debug level for a first request with a bad method: TLS or junk sent to an HTTP port, which
    an operator still wants counted). So that the debug one reaches the filter, aiohttp's server
    logger passes every level, and the filter applies the root logger's threshold to the rest."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return record.levelno >= logging.getLogger().getEffectiveLevel()
        peer = record.args[0] if isinstance(record.args, tuple) and record.args else None
        get_logger().warning("bad_http_request", status=exc.code or 400,
                             exc_type=type(exc).__name__, exc_message=exc.message, peer=peer)
        return False


_BAD_REQUEST_LOG = BadRequestLog()


class EdgeListener:
    """``app`` served on a socket whose connections pass the edge: an
    :class:`aiohttp.web.AppRunner` whose :class:`aiohttp.web.Server` builds each connection's
    protocol inside an :class:`EdgeConnection`. :meth:`cleanup` stops listening, then lets
    aiohttp drain and close the connections (``shutdown_timeout``)."""

    __slots__ = ("edge", "runner", "server")

    def __init__(self, app: web.Application, edge: Edge, **kwargs: Any) -> None:
        self.edge = edge
        self.runner = web.AppRunner(app, **kwargs)
        self.server: asyncio.Server | None = None
        server_log = logging.getLogger("aiohttp.server")
        server_log.setLevel(logging.DEBUG)
        server_log.addFilter(_BAD_REQUEST_LOG)  # once: a filter is kept in a list without twins

    async def start(self, host: str, port: int, *, reuse_port: bool = False,
                    backlog: int = 1024) -> None:
        runner = self.runner
        await runner.setup()
        web_server = runner.server
        assert web_server is not None
        edge = self.edge
        try:
            self.server = await asyncio.get_running_loop().create_server(
                lambda: EdgeConnection(edge, web_server), host, port,
                reuse_port=reuse_port or None, backlog=backlog)
        except BaseException:
            await runner.cleanup()
            raise

    @property
    def addresses(self) -> list[Any]:
        """The bound addresses (``(host, port, ...)``), as :attr:`aiohttp.web.AppRunner
        .addresses` gives them."""
        if self.server is None:
            return []
        return [s.getsockname() for s in self.server.sockets
                if s.family in (socket.AF_INET, socket.AF_INET6)]

    async def cleanup(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        await self.runner.cleanup()
