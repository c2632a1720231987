"""How an exchange's answer reaches its client: a :class:`ResponseSink`.

The exchange says what to send (a whole answer with its status, or a 200 stream and its frames);
the sink puts it on the wire. Two sinks, chosen by ``server.http_layer``:

- :class:`DirectSink` (``fast``, the default for POST requests): writes the status line, the
  headers and the body straight to the client's connection, the way aiohttp's response objects
  would have (the same status line, ``Date``, ``Server``, keep-alive rules, chunked streams on
  HTTP/1.1 and close-delimited ones on HTTP/1.0, CORS), without building them: those objects,
  their header preparation, the ``on_response_prepare`` signal and a coroutine or two per write
  cost, with the router :mod:`gateway.dispatch` skips, about a seventh of the gateway's CPU
  per whole answer (``bench/ab.py``: 0.86). aiohttp's connection handler is
  handed back a response that is already ended (:func:`_sent`), so it goes on as after any
  answer: keep-alive, the next pipelined request, the lingering read of an unread body.
- :class:`AiohttpSink` (``aiohttp``, and every request that is not a POST, so that HEAD and
  OPTIONS keep aiohttp's handling): :class:`aiohttp.web.Response` and
  :class:`~aiohttp.web.StreamResponse`, as before.

A client gone shows as :class:`ConnectionError` from ``whole``, ``start``, ``write`` or
``finish`` (the answerer turns it into :class:`~gateway.exchange.attempts.ClientGone`).

What :class:`DirectSink` leans on in aiohttp (checked by ``tests/test_sink.py``):
``StreamResponse.prepare`` and ``write_eof`` return at once for a response whose ``_eof_sent``
is set, and the connection handler reads the answer's ``keep_alive``; the protocol's
``_paused`` and ``_drain_helper`` are its write back-pressure (aiohttp's own writer uses them).
"""

from __future__ import annotations

import asyncio
import time
from email.utils import formatdate
from http import HTTPStatus
from typing import Protocol

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE

from gateway.config import CorsConfig
from gateway.cors import cors_headers
from gateway.incoming import ClientRequest

__all__ = ["AiohttpSink", "DirectSink", "ResponseSink"]


class ResponseSink(Protocol):
    """Where one exchange's answer goes."""

    async def whole(self, status: int, headers: dict[str, str], body: bytes) -> None:
        """The whole answer (``headers`` name its ``Content-Type``)."""

    async def start(self, headers: dict[str, str]) -> None:
        """A 200 stream begins (its frames follow at once)."""

    async def write(self, data: bytes) -> None:
        """Frames of the stream."""

    async def finish(self, last: bytes = b"") -> None:
        """The stream's end, after its ``last`` frames."""

    def cut(self) -> web.StreamResponse:
        """The answer cannot go on (a gateway bug after it began): the connection is closed
        where the answer stands, and this is what to hand aiohttp; the client sees a broken
        answer, never a clean finish."""

    def response(self) -> web.StreamResponse:
        """What the aiohttp handler returns once the answer is done."""


class AiohttpSink:
    """aiohttp's response objects (see the module's docstring)."""

    __slots__ = ("_response", "request")

    def __init__(self, request: web.BaseRequest) -> None:
        self.request = request
        self._response: web.StreamResponse | None = None

    async def whole(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self._response = web.Response(status=status, body=body, headers=headers)

    async def start(self, headers: dict[str, str]) -> None:
        self._response = web.StreamResponse(status=200, headers=headers)
        await self._response.prepare(self.request)

    async def write(self, data: bytes) -> None:
        assert self._response is not None
        await self._response.write(data)

    async def finish(self, last: bytes = b"") -> None:
        assert self._response is not None
        if last:
            await self._response.write(last)
        await self._response.write_eof()

    def cut(self) -> web.StreamResponse:
        # Closed first: aiohttp's write_eof then fails on the closing transport (a client gone,
        # to aiohttp), so no last chunk goes out, and nothing else either.
        if self.request.transport is not None:
            self.request.transport.close()
        assert self._response is not None
        self._response.force_close()
        return self._response

    def response(self) -> web.StreamResponse:
        assert self._response is not None
        return self._response


def _sent(keep_alive: bool) -> web.StreamResponse:
    """A response aiohttp treats as sent and ended: its ``prepare`` and ``write_eof`` return at
    once. Shared by every answer: aiohttp only reads it (its ``keep_alive``)."""
    response = web.StreamResponse()
    response._eof_sent = True
    if not keep_alive:
        response.force_close()
    else:
        response._keep_alive = True
    return response


_SENT_KEEP_ALIVE = _sent(True)
_SENT_CLOSE = _sent(False)
_REASONS = {s.value: s.phrase for s in HTTPStatus}
_END = b"0\r\n\r\n"


class _Date:
    """The ``Date`` header's value, formatted once a second."""

    __slots__ = ("at", "value")

    def __init__(self) -> None:
        self.at = 0
        self.value = ""

    def now(self) -> str:
        t = int(time.time())
        if t != self.at:
            self.at, self.value = t, formatdate(t, usegmt=True)
        return self.value


_DATE = _Date()


class DirectSink:
    """Writes the answer straight to the connection (see the module's docstring)."""

    __slots__ = ("_chunked", "_cors", "_head_due", "_keep_alive", "_protocol", "_tr", "request")

    def __init__(self, request: ClientRequest, cors: CorsConfig) -> None:
        self.request = request
        self._cors = cors
        self._keep_alive = request.keep_alive
        self._chunked = False
        self._protocol = request.protocol
        self._tr = request.transport
        """The connection's transport: once it is lost, ``is_closing`` says so."""
        self._head_due = b""
        """A stream's status line and headers, sent with its first frames: one write (one
        system call) less a stream, and the first byte goes out no later."""

    def _transport(self) -> asyncio.Transport:
        transport = self._tr
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client's connection is closed")
        return transport

    def _head(self, status: int, headers: dict[str, str], length: int | None) -> bytes:
        request = self.request
        version = request.version
        http11 = version >= (1, 1)
        if headers.get("Connection", "").lower() == "close":
            self._keep_alive = False
        if length is None:  # a stream: chunked on HTTP/1.1; delimited by the close on 1.0
            if http11:
                self._chunked = True
            else:
                self._keep_alive = False
        lines = [f"HTTP/{version.major}.{version.minor} {status} {_REASONS.get(status, '')}"]
        for name, value in headers.items():
            if "\n" in value or "\r" in value:  # as aiohttp refuses it: no header injection
                raise ValueError(f"the answer's {name} header holds a line break")
            if name != "Connection":
                lines.append(f"{name}: {value}")
        origin = request.headers.get("Origin")
        if origin:
            lines.extend(f"{n}: {v}" for n, v in cors_headers(origin, request.method, self._cors))
        if length is not None:
            lines.append(f"Content-Length: {length}")
        elif self._chunked:
            lines.append("Transfer-Encoding: chunked")
        lines.append(f"Date: {_DATE.now()}")
        lines.append(f"Server: {SERVER_SOFTWARE}")
        if self._keep_alive and not http11:
            lines.append("Connection: keep-alive")
        elif not self._keep_alive and http11:
            lines.append("Connection: close")
        lines.append("\r\n")
        return "\r\n".join(lines).encode()

    # Each write is followed by the same back-pressure check as aiohttp's writer: wait while the
    # transport's buffer is over its high-water mark (inline: this runs for every frame).

    async def whole(self, status: int, headers: dict[str, str], body: bytes) -> None:
        head = self._head(status, headers, len(body))
        self._transport().write(head + body)
        if self._protocol._paused:
            await self._protocol._drain_helper()

    async def start(self, headers: dict[str, str]) -> None:
        self._transport()  # a client already gone shows here
        self._head_due = self._head(200, headers, None)

    # The parts of one write are joined once: a stream's frames can be kilobytes, and each
    # ``+`` or ``%`` of them would copy them again.

    async def write(self, data: bytes) -> None:
        transport = self._transport()
        head, self._head_due = self._head_due, b""
        if self._chunked:
            transport.write(b"".join((head, b"%x\r\n" % len(data), data, b"\r\n")))
        else:
            transport.write(head + data if head else data)
        if self._protocol._paused:
            await self._protocol._drain_helper()

    async def finish(self, last: bytes = b"") -> None:
        # the last frames and the last chunk in one write (one system call less a stream)
        head, self._head_due = self._head_due, b""
        if self._chunked:
            out = b"".join((head, b"%x\r\n" % len(last), last, b"\r\n", _END)) if last \
                else head + _END
        else:
            out = head + last
        if out:
            self._transport().write(out)
        if self._protocol._paused:
            await self._protocol._drain_helper()

    def cut(self) -> web.StreamResponse:
        self._keep_alive = False
        if self._tr is not None:
            self._tr.close()
        return _SENT_CLOSE

    def response(self) -> web.StreamResponse:
        return _SENT_KEEP_ALIVE if self._keep_alive else _SENT_CLOSE
