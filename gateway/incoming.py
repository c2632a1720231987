"""What the exchange reads of a client's request: the members of :class:`aiohttp.web.Request`
it uses, so that a request aiohttp parsed and one the chat routes' short lane parsed
(:class:`gateway.lane.LaneRequest`) are served by the same code."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from aiohttp.base_protocol import BaseProtocol
from aiohttp.http import HttpVersion
from multidict import CIMultiDictProxy

__all__ = ["BodyReader", "ClientRequest"]


class BodyReader(Protocol):
    @property
    def total_bytes(self) -> int:
        """Body bytes received so far."""

    def iter_chunked(self, n: int) -> AsyncIterator[bytes]: ...


class ClientRequest(Protocol):
    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def headers(self) -> CIMultiDictProxy[str]: ...

    @property
    def version(self) -> HttpVersion: ...

    @property
    def keep_alive(self) -> bool: ...

    @property
    def scheme(self) -> str: ...

    @property
    def remote(self) -> str | None: ...

    @property
    def protocol(self) -> BaseProtocol: ...

    @property
    def transport(self) -> asyncio.Transport | None: ...

    @property
    def content_length(self) -> int | None: ...

    @property
    def content(self) -> BodyReader: ...

    async def read(self) -> bytes: ...
