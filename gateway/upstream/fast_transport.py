"""The gateway's own upstream client (``server.upstream_client: fast``): HTTP/1.1 keep-alive
over :mod:`gateway.upstream.http1`, with a bounded pool of connections per host.

What it keeps of a general-purpose client, and why each guarantee holds:

* **TLS** to ``https://`` upstreams: :func:`ssl.create_default_context` (certificates and host
  names verified against the system's trust store, ``SSL_CERT_FILE`` honoured), SNI from the
  URL's host.
* **Keep-alive, and when a request is retried.** A POST that reached a server must never be sent
  twice (the model would answer twice, and bill twice). So a request is sent again only when not
  one byte of it was accepted: a pooled connection is checked before it is used (closed, its
  server's goodbye already read, or anything at all waiting to be read on it: never reused), and
  when the write itself fails at once (the kernel refused the bytes, so the server cannot have
  them) the request goes on a new connection, once. A connection that fails after its request
  was written is an error (``connect``), never a retry: the server may be working on it. Idle
  connections are dropped before the server's own ``Keep-Alive: timeout`` (and after
  :data:`IDLE_SECONDS`), which keeps the race with a server's idle close narrow.
* **Bounded**: at most ``limit_per_host`` connections per host (a request past it waits, within
  its head timeout, for one to be released), and per connection a bounded body buffer with
  back-pressure (:mod:`gateway.upstream.http1`).
* **Timeouts**: ``connect_timeout`` on opening a connection (TCP and TLS), ``head_timeout`` from
  the start of the send to the response head (waiting for a pooled connection included).
* **Release on every path**: a response closed before its end, failed, or whose reading task
  was cancelled closes its connection; only a complete, keep-alive response goes back to the
  pool.
* **No answer crosses to another request**: a connection goes back to the pool only when its
  answer ended exactly at the end of a read with nothing after it (decided once the whole read
  was parsed, :mod:`gateway.upstream.http1`); a byte nobody asked for, in that read or later,
  closes it, and one taken from the pool or handed over by another request is polled for
  waiting bytes before it is written to. (Bytes an upstream writes only after the next request
  was sent cannot be told from its answer by any HTTP/1.1 client.)
* **Bounded heads**: a response head past aiohttp's client's limits (8190 bytes a line, 128
  headers) or 100 KiB in all fails the request (``connect``) one read past the limit.
"""

from __future__ import annotations

import asyncio
import functools
import select
import ssl
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from gateway.errors import UpstreamError
from gateway.upstream.http1 import Http1Connection, Http1Response, State
from gateway.upstream.transport import UpstreamRequest

__all__ = ["IDLE_SECONDS", "FastTransport"]

IDLE_SECONDS = 30.0
"""Longest an idle connection is kept (shorter when the server says so)."""
_MARGIN = 1.0
"""Seconds before the server's announced keep-alive timeout that a connection is dropped."""
_TAIL = "Accept-Encoding: gzip, deflate\r\n\r\n"
"""The request head's last line, and the empty line that ends it."""
_CRLF = "\r\n"
_NO_BODY = ("GET", "HEAD")


@dataclass(frozen=True, slots=True)
class _Target:
    """What one upstream URL means on the wire, parsed once per URL."""

    key: tuple[str, str, int]
    host: str
    port: int
    tls: bool
    path: str
    host_header: str
    rest: str
    """The request line after its method, and the ``Host`` line: the same for every request."""
    basic: str | None
    """``Authorization`` value from ``user:password@`` in the URL."""


@functools.lru_cache(maxsize=1024)
def _target(url: str) -> _Target:
    parts = urlsplit(url)
    tls = parts.scheme == "https"
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError as e:
        raise UpstreamError("connect", "the upstream URL has an invalid port") from e
    host = parts.hostname or ""
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    shown = f"[{host}]" if ":" in host else host
    default = port == (443 if tls else 80)
    basic = None
    if parts.username is not None or parts.password is not None:
        import base64

        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}".encode()
        basic = "Basic " + base64.b64encode(pair).decode("ascii")
    host_header = shown if default else f"{shown}:{port}"
    return _Target((parts.scheme, host, port), host, port, tls, path, host_header,
                   f" {path} HTTP/1.1\r\nHost: {host_header}\r\n", basic)


def _request_bytes(method: str, target: _Target, headers: Mapping[str, str],
                   body: bytes) -> bytes:
    # (": ".join each header, "\r\n".join them: no Python-level step a header)
    fields = "\r\n".join(map(": ".join, headers.items()))
    lines = len(headers) + 4  # and the request line, Host, Accept-Encoding, the empty line
    extra = ""
    if target.basic is not None and not any(n.lower() == "authorization" for n in headers):
        extra = f"Authorization: {target.basic}\r\n"
        lines += 1
    if body or method not in _NO_BODY:
        extra += f"Content-Length: {len(body)}\r\n"
        lines += 1
    head = f"{method}{target.rest}{fields}{_CRLF if headers else ''}{extra}{_TAIL}"
    # Every line ends in the one CRLF put there above: a CR, LF or NUL inside a name or value
    # would split a header in two (request smuggling), so such a request is never sent.
    if head.count("\n") != lines or head.count("\r") != lines or "\0" in head:
        raise UpstreamError("connect", "a header of the upstream request holds a line break")
    return head.encode() + body


_POLL = select.poll()
"""One poll object for the checks (its registrations are a dict; only ``poll`` is a system
call), used synchronously: never two checks at once."""


def _readable(fd: int) -> bool:
    """Anything waiting on an idle connection (a FIN, a reset, stray bytes) means the server is
    done with it; checked with a zero-time poll right before reuse."""
    if fd < 0:
        return False
    _POLL.register(fd, select.POLLIN | select.POLLPRI)
    try:
        return bool(_POLL.poll(0))
    finally:
        _POLL.unregister(fd)


def _expired(conn: Http1Connection, now: float) -> bool:
    expiry = IDLE_SECONDS
    if conn.keep_alive_hint is not None:
        expiry = min(expiry, conn.keep_alive_hint - _MARGIN)
    return now - conn.idle_since >= expiry


class _Pool:
    """The connections to one (scheme, host, port): at most ``limit`` open, idle ones reused
    most recent first."""

    __slots__ = ("conns", "idle", "limit", "readable", "waiters")

    def __init__(self, limit: int, readable: Callable[[int], bool]) -> None:
        self.limit = limit
        self.readable = readable
        self.conns: set[Http1Connection | _Opening] = set()
        """Open connections, and a placeholder for each one being opened."""
        self.idle: list[Http1Connection] = []
        self.waiters: deque[asyncio.Future[Http1Connection | None]] = deque()

    @property
    def open(self) -> int:
        return len(self.conns)

    def pooled(self, now: float) -> Http1Connection | None:
        """The most recently used idle connection that can still carry a request."""
        while self.idle:
            conn = self.idle.pop()
            if (conn.state is State.IDLE and not _expired(conn, now) and conn.transport is not None
                    and not conn.transport.is_closing() and not self.readable(conn.fd)):
                return conn
            self.gone(conn)
            conn.abort()
        return None

    def gone(self, conn: Http1Connection) -> None:
        """``conn`` no longer counts against the limit (closed, or about to be)."""
        if conn not in self.conns:
            return
        self.conns.discard(conn)
        if not conn.in_flight and conn in self.idle:
            self.idle.remove(conn)
        self.wake(None)

    def put(self, conn: Http1Connection) -> None:
        if not self.wake(conn):
            self.idle.append(conn)

    def pass_on(self, handed: Http1Connection | None) -> None:
        """What a waiter was handed and cannot use goes to the next one."""
        if handed is None:
            self.wake(None)
        else:
            self.put(handed)

    def wake(self, conn: Http1Connection | None) -> bool:
        """Hands ``conn`` (or, with ``None``, a free slot) to the first live waiter."""
        while self.waiters:
            w = self.waiters.popleft()
            if not w.done():
                w.set_result(conn)
                return True
        return False

    def sweep(self, now: float) -> None:
        for conn in [c for c in self.idle if c.lost or _expired(c, now)]:
            self.gone(conn)
            conn.abort()


class FastTransport:
    """:class:`~gateway.upstream.transport.Transport` on :class:`Http1Connection`."""

    __slots__ = ("_busy", "_closed", "_limit", "_loop", "_pools", "_readable", "_ssl", "_sweep")

    def __init__(self, *, limit_per_host: int = 1024,
                 ssl_context: ssl.SSLContext | None = None,
                 readable: Callable[[int], bool] = _readable) -> None:
        """``readable``: whether an idle connection's socket has something waiting (a close, a
        reset, stray bytes), checked right before it is reused (by default a zero-time poll);
        a test passes one that never sees anything, to make the race between that check and
        the write certain."""
        self._limit = limit_per_host
        self._readable = readable
        self._ssl = ssl_context
        self._pools: dict[tuple[str, str, int], _Pool] = {}
        self._busy = 0
        self._closed = False
        self._sweep: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop of the first request (a transport and its pools serve one loop); kept,
        because Python 3.11's ``get_running_loop`` makes a system call each time."""

    async def send(self, request: UpstreamRequest) -> Http1Response:
        if self._closed:
            raise UpstreamError("connect", "the gateway is shutting down")
        target = _target(request.url)
        data = _request_bytes(request.method, target, request.headers, request.body)
        pool = self._pools.get(target.key)
        if pool is None:
            pool = self._pools[target.key] = _Pool(self._limit, self._readable)
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        deadline = loop.time() + request.head_timeout
        retried = False
        if request.batched:
            # Sent one by one as each is made, each request wakes the upstream anew when it
            # went to sleep since the last: on a host where the upstream runs too, that wake-up
            # is a good part of what sending costs. (Before a connection is taken: the check
            # that it is idle stays right before the write, in the same turn.)
            await asyncio.sleep(0)
            if self._closed:
                raise UpstreamError("connect", "the gateway is shutting down")
        while True:
            conn = pool.pooled(time.monotonic())
            if conn is None:
                conn = await self._new(pool, target, request.connect_timeout, deadline)
                if conn.state is not State.IDLE or (conn.uses and pool.readable(conn.fd)):
                    # Closed, or sent bytes nobody asked for, while it was opened or handed
                    # over (the check pooled() makes): nothing was written to it, so another
                    # connection is safe, once.
                    conn.abort()
                    pool.gone(conn)
                    if retried:
                        raise UpstreamError("connect", "the upstream closed the connection "
                                                       "before the request was sent")
                    retried = True
                    continue
            self._busy += 1
            try:
                head = conn.begin(data)
                if conn.refused_write() and conn.uses > 1 and not retried:
                    # Not one byte accepted, on a connection the server had given up: safe to
                    # send again, once.
                    self._discard(pool, conn)
                    retried = True
                    continue
                # Until the response head arrived, within ``deadline`` (the connection's one
                # deadline on the loop's wheel, not a loop timer: gateway.upstream.deadlines)
                conn.fail_at(deadline, _head_late)
                try:
                    await head
                finally:
                    conn.stop_timer()
            except BaseException:
                self._discard(pool, conn)
                raise
            return Http1Response(conn, functools.partial(self._release, pool))

    async def _new(self, pool: _Pool, target: _Target, connect_timeout: float,
                   deadline: float) -> Http1Connection:
        """A connection handed over by another request, or a new one, within ``deadline``
        (the pool full: waiting for a slot)."""
        try:
            async with asyncio.timeout_at(deadline):
                return await self._acquire(pool, target, connect_timeout)
        except TimeoutError as e:
            raise UpstreamError("timeout", "the upstream did not answer in time") from e

    async def _acquire(self, pool: _Pool, target: _Target,
                       connect_timeout: float) -> Http1Connection:
        while pool.open >= pool.limit:
            waiter: asyncio.Future[Http1Connection | None] = \
                asyncio.get_running_loop().create_future()
            pool.waiters.append(waiter)
            try:
                got = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    # handed a connection (or a slot) just as this request was cancelled
                    pool.pass_on(waiter.result())
                raise
            if got is not None:
                return got
        slot = _Opening()
        pool.conns.add(slot)
        try:
            conn = await self._connect(pool, target, connect_timeout)
        except BaseException:
            pool.conns.discard(slot)
            pool.wake(None)
            raise
        pool.conns.discard(slot)
        pool.conns.add(conn)
        return conn

    async def _connect(self, pool: _Pool, target: _Target,
                       connect_timeout: float) -> Http1Connection:
        loop = asyncio.get_running_loop()
        ctx = self._tls() if target.tls else None
        try:
            async with asyncio.timeout(connect_timeout):
                _, conn = await loop.create_connection(
                    functools.partial(Http1Connection, functools.partial(self._lost, pool)),
                    target.host, target.port, ssl=ctx,
                    server_hostname=target.host if ctx is not None else None)
        except TimeoutError as e:
            raise UpstreamError("timeout", "the upstream did not accept the connection in "
                                           "time") from e
        except ConnectionRefusedError as e:
            raise UpstreamError("connect", "the upstream refused the connection") from e
        except ssl.SSLError as e:
            raise UpstreamError("connect", "TLS with the upstream failed") from e
        except OSError as e:
            raise UpstreamError("connect", "the upstream connection failed") from e
        return conn

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()  # verification and host names: on
        return self._ssl

    def _release(self, pool: _Pool, conn: Http1Connection, how: str) -> None:
        self._busy -= 1
        if how == "drain" and not self._closed:
            conn.drain(functools.partial(self._drained, pool, conn))
        else:
            self._drained(pool, conn, how == "reuse")

    def _drained(self, pool: _Pool, conn: Http1Connection, reusable: bool) -> None:
        if reusable and not self._closed:
            conn.finished()
            pool.put(conn)
            self._schedule_sweep()
        else:
            conn.abort()
            pool.gone(conn)

    def _discard(self, pool: _Pool, conn: Http1Connection) -> None:
        self._busy -= 1
        conn.abort()
        pool.gone(conn)

    def _lost(self, pool: _Pool, conn: Http1Connection) -> None:
        if not conn.in_flight:
            pool.gone(conn)  # an idle connection the server closed (a draining one is told)

    def _schedule_sweep(self) -> None:
        if self._sweep is None:
            loop = asyncio.get_running_loop()
            self._sweep = loop.call_later(IDLE_SECONDS / 2, self._sweep_idle)

    def _sweep_idle(self) -> None:
        self._sweep = None
        now = time.monotonic()
        for pool in self._pools.values():
            pool.sweep(now)
        if any(pool.idle for pool in self._pools.values()):
            self._schedule_sweep()

    def in_use(self) -> int:
        return self._busy

    async def aclose(self) -> None:
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for pool in self._pools.values():
            for conn in list(pool.conns):
                if isinstance(conn, Http1Connection):
                    conn.abort()
            pool.idle.clear()
        await asyncio.sleep(0)  # let the transports run their connection_lost


def _head_late() -> UpstreamError:
    return UpstreamError("timeout", "the upstream did not answer in time")


class _Opening:
    """Holds a pool slot while a connection is being opened."""

    __slots__ = ()
