"""How an exchange's answer reaches its client: a :class:`ResponseSink`.

The exchange says what to send (a whole answer with its status, or a 200 stream and its frames);
the sink puts it on the wire: :class:`AiohttpSink`, aiohttp's response objects. The seam stays so
that a test can watch what an exchange sends, and so that another writer would plug in here.

A client gone shows as :class:`ConnectionError` from ``whole``, ``start``, ``write`` or
``finish`` (the answerer turns it into :class:`~gateway.exchange.attempts.ClientGone`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeAlias

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
        await self._response.write_eof(last)  # the last frames and the last chunk in one write

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


SinkFactory: TypeAlias = Callable[[web.BaseRequest], ResponseSink]
"""What makes a request's sink: :class:`AiohttpSink` itself, or a test's."""
