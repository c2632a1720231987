"""An in-memory :class:`~gateway.upstream.transport.Transport` for tests: a function answers each
request, no sockets (httpx's ``MockTransport``, for this seam)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from gateway.errors import UpstreamError
from gateway.upstream.deadlines import ResponseTimer
from gateway.upstream.transport import UpstreamRequest

__all__ = ["Handler", "MemoryResponse", "MemoryTransport"]


class MemoryResponse:
    """A response whose body comes from ``body``: bytes, an iterable of chunks, or an async
    iterator of chunks (which may sleep between chunks, or raise
    :class:`~gateway.errors.UpstreamError` to break the connection)."""

    def __init__(self, status: int = 200, headers: Mapping[str, str] | None = None,
                 body: bytes | Iterable[bytes] | AsyncIterator[bytes] = b"") -> None:
        self._status = status
        self._headers = CIMultiDictProxy(CIMultiDict(headers or {}))
        if isinstance(body, bytes):
            body = [body] if body else []
        self._left: int | None = None
        """Chunks not read yet, when the body is known in advance (``None``: an async
        iterator, whose end shows only when it is read)."""
        if not isinstance(body, AsyncIterator):
            body = list(body)
            self._left = body.index(b"") if b"" in body else len(body)  # (b"" ends a body)
        self._chunks: AsyncIterator[bytes] = (
            body if isinstance(body, AsyncIterator) else _aiter(body))
        self._failure: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self.closed = False
        self.eof = False
        self._timer = ResponseTimer()

    @property
    def status(self) -> int:
        return self._status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._headers

    @property
    def content_type(self) -> str:
        raw = self._headers.get("Content-Type", "")
        return raw.split(";", 1)[0].strip().lower()

    async def read(self) -> bytes:
        if self._error is not None:
            raise self._error
        if self.eof:
            return b""
        loop = asyncio.get_running_loop()
        self._failure = loop.create_future()
        step: asyncio.Future[Any] = asyncio.ensure_future(anext(self._chunks, b""))
        pending: set[asyncio.Future[Any]] = {step, self._failure}
        try:
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            failure, self._failure = self._failure, None
        if not step.done():
            step.cancel()
            assert self._error is not None
            raise self._error
        failure.cancel()
        chunk: bytes = step.result()
        if not chunk:
            self.eof = True
        elif self._left is not None:
            self._left -= 1
        return chunk

    def ended(self) -> bool:
        return (self.eof or self._left == 0) and self._error is None

    def fail(self, exc: BaseException) -> None:
        self._error = exc
        if self._failure is not None and not self._failure.done():
            self._failure.set_result(None)

    def fail_after(self, delay: float, error: Callable[[], BaseException]) -> None:
        self._timer.arm(delay, lambda: self.fail(error()))

    def stop_timer(self) -> None:
        self._timer.stop()

    def close(self) -> None:
        self.stop_timer()
        self.closed = True


Handler = Callable[[UpstreamRequest], Awaitable[MemoryResponse]]


class MemoryTransport:
    """Answers each request with ``handler(request)``; records every request in
    :attr:`requests`."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.requests: list[UpstreamRequest] = []
        self._open: list[MemoryResponse] = []

    async def send(self, request: UpstreamRequest) -> MemoryResponse:
        self.requests.append(request)
        try:
            async with asyncio.timeout(request.head_timeout):
                response = await self._handler(request)
        except TimeoutError as e:
            raise UpstreamError("timeout", "the upstream did not answer in time") from e
        self._open.append(response)
        return response

    def in_use(self) -> int:
        self._open = [r for r in self._open if not r.closed]
        return len(self._open)

    async def aclose(self) -> None:
        for r in self._open:
            r.close()


async def _aiter(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for c in chunks:
        yield c
