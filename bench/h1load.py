"""A lean keep-alive HTTP/1.1 load client for the benchmark driver: one asyncio protocol per
connection, responses parsed by httptools (llhttp), requests pre-built as bytes.

Why: on two cores the driver and the mock share one, and the driver's aiohttp client was the
ceiling of every whole-answer run (about 4,200 answers/s whatever served it, with no proxy at
all: see docs/performance.md). A proxy cannot show more throughput than the generator gives, so
the runs measured the generator. This client does per request what a load generator must (write
the request, parse the status line, headers and body, chunked or not, keep the connection) and
nothing else: no cookie jar, no URL objects, no per-request timeout objects, no tracing. It costs
the driver's core a fraction of what aiohttp's client did, and it is the same for every
configuration of a run, so the ratios compare the servers under test.

It is a load generator, not a general client: one request at a time per connection, no TLS, no
redirects, no compression, no ``Expect``. A response that ends the connection, or a connection
lost mid-answer, is handled: the next request opens a new one.
"""

from __future__ import annotations

import asyncio
import time

import httptools


class Answer:
    """One response: its status, its body, and when its first body byte arrived."""

    __slots__ = ("body", "first", "status")

    def __init__(self, status: int, body: bytes, first: float | None) -> None:
        self.status = status
        self.body = body
        self.first = first


class Closed(Exception):
    """The connection ended before the answer did."""


class H1Connection(asyncio.Protocol):
    """One keep-alive connection: :meth:`request` sends pre-built bytes and waits for the whole
    answer (the body's pieces are joined once, at the end)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Answer] | None = None
        self._pieces: list[bytes] = []
        self._first: float | None = None
        self._keep_alive = True
        self.lost = False

    @classmethod
    async def open(cls, host: str, port: int) -> H1Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(cls, host, port)
        return conn

    @property
    def usable(self) -> bool:
        return not self.lost and self._keep_alive and self.transport is not None \
            and not self.transport.is_closing()

    def request(self, data: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None and self._waiter is None
        self._pieces = []
        self._first = None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(Closed(f"unparsable response: {e}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._fail(Closed(f"connection lost mid-answer ({exc or 'closed by the server'})"))

    # --- httptools callbacks ----------------------------------------------------------------

    def on_body(self, body: bytes) -> None:
        if self._first is None:
            self._first = time.perf_counter()
        self._pieces.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        self._keep_alive = self._parser.should_keep_alive()
        if waiter is not None and not waiter.done():
            pieces = self._pieces
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            waiter.set_result(Answer(self._parser.get_status_code(), body, self._first))
        if not self._keep_alive:
            self.close()

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)


def request_bytes(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The whole request, built once: the same bytes go out for every request of a run."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}",
             f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("host",
                                                                         "content-length")]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
