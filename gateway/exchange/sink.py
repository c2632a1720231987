"""How an exchange's answer reaches its client: a :class:`ResponseSink`.

The exchange says what to send (a whole answer with its status, or a 200 stream and its frames);
the sink puts it on the wire: :class:`AiohttpSink`, aiohttp's response objects. The seam stays so
that a test can watch what an exchange sends, and so that another writer would plug in here.
Compiled, :class:`AiohttpSink` takes no subclass: a sink that watches it wraps it.

A stream's head is written with its first frames, not when it starts: a stream ended before
its first write (an upstream that answered at once) is handed to aiohttp whole and leaves in one
write, batched like a whole answer (``server.batch_writes``); its bytes are those of a stream
prepared and ended at once.

A client gone shows as :class:`ConnectionError` from ``whole``, ``start``, ``write`` or
``finish`` (the answerer turns it into :class:`~gateway.exchange.attempts.ClientGone`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeAlias

import aiohttp
from aiohttp import web

__all__ = ["AiohttpSink", "ResponseSink", "SinkFactory"]


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
    """aiohttp's response objects."""

    __slots__ = ("_head", "_response", "request")

    def __init__(self, request: web.BaseRequest) -> None:
        self.request = request
        self._response: web.StreamResponse | None = None
        self._head: dict[str, str] | None = None
        """A stream's headers, until its first write (see the module's docstring)."""

    async def whole(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self._response = web.Response(status=status, body=body, headers=headers)

    async def start(self, headers: dict[str, str]) -> None:
        if self.request.transport is None or self.request.transport.is_closing():
            # (what preparing the answer would raise: the client is gone)
            raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")
        self._head = headers

    def _prepared(self) -> web.StreamResponse:
        """The stream's response, created on its first write."""
        if self._response is None:
            assert self._head is not None  # (start came first)
            self._response = web.StreamResponse(status=200, headers=self._head)
        return self._response

    async def write(self, data: bytes) -> None:
        response = self._prepared()
        if not response.prepared:
            await response.prepare(self.request)
        await response.write(data)

    async def finish(self, last: bytes = b"") -> None:
        if self._response is None:
            # Nothing written yet: the head, the frames and the last chunk go in one write,
            # when aiohttp writes the answer (a chunked Response: the same bytes on the wire)
            assert self._head is not None
            response = web.Response(status=200, body=last, headers=self._head)
            response.enable_chunked_encoding()
            self._response = response
            return
        await self._response.write_eof(last)  # the last frames and the last chunk in one write

    def cut(self) -> web.StreamResponse:
        # Closed first: aiohttp's write_eof then fails on the closing transport (a client gone,
        # to aiohttp), so no last chunk goes out, and nothing else either.
        if self.request.transport is not None:
            self.request.transport.close()
        response = self._prepared()
        response.force_close()
        return response

    def response(self) -> web.StreamResponse:
        assert self._response is not None
        return self._response


SinkFactory: TypeAlias = Callable[[web.BaseRequest], ResponseSink]
"""What makes a request's sink: :class:`AiohttpSink` itself, or a test's."""
