"""The narrow seam between the gateway and its upstreams (in the manner of httpx's transports).

A :class:`Transport` sends one :class:`UpstreamRequest` and returns an :class:`UpstreamResponse`
once the status line and headers arrived; the body is read through the response's one method,
:meth:`UpstreamResponse.read`. Everything above this seam (timeouts on the body, limits, retries,
translation) is the gateway's and is tested with :class:`gateway.upstream.memory.MemoryTransport`,
no sockets; below it, :class:`gateway.upstream.fast_transport.FastTransport` (the default) or
:class:`gateway.upstream.aiohttp_transport.AiohttpTransport` talks HTTP.

A transport raises only :class:`gateway.errors.UpstreamError` (``connect`` or ``timeout``);
foreign exceptions stop at the transport.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Transport", "UpstreamRequest", "UpstreamResponse"]


@dataclass(slots=True)  # not frozen: a frozen __init__ sets each field by object.__setattr__
class UpstreamRequest:
    """One request to an upstream (a chat POST, or a health check's GET)."""

    url: str
    """The full URL; ``user:password@`` in it is the transport's to turn into Basic auth."""
    body: bytes
    headers: Mapping[str, str]
    connect_timeout: float
    """Bound on opening the connection."""
    head_timeout: float
    """Bound on the wait for the status line and headers, from the start of the send."""
    method: str = "POST"
    batched: bool = False
    """It may wait for the event loop's next turn, to be written with the other requests made
    during this one (``server.batch_writes``: a whole answer's request; aiohttp's client
    writes every request so, from a task of its own). ``False``: written at once."""


class UpstreamResponse(Protocol):
    """A response whose headers arrived. The body is read with :meth:`read`; :meth:`close` must
    be called once, on every path (it returns a fully read connection to the pool and closes
    any other)."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Case-insensitive."""
        ...

    @property
    def content_type(self) -> str:
        """The media type, lower-case, without parameters (``""`` when absent)."""
        ...

    async def read(self) -> bytes:
        """The next piece of the body as it arrives; ``b""`` at its end. Raises
        :class:`~gateway.errors.UpstreamError` (``connect``) when the connection breaks, and
        whatever :meth:`fail` was given."""
        ...

    def ended(self) -> bool:
        """The body's end has arrived and all of it was read: the next :meth:`read` would
        return ``b""`` at once. ``False`` when that is not known (a stream then writes what it
        has at once, and its end with the last read)."""
        ...

    def fail(self, exc: BaseException) -> None:
        """Wake a pending (or the next) :meth:`read` with ``exc``: how a timer bounds a read
        without a timeout object per read."""
        ...

    def fail_after(self, delay: float, error: Callable[[], BaseException]) -> None:
        """:meth:`fail` with ``error()`` once ``delay`` seconds passed, unless
        :meth:`stop_timer` first: one bound at a time (it replaces the one before), which a
        transport may keep as one deadline for all of a request's bounds."""
        ...

    def stop_timer(self) -> None: ...

    def close(self) -> None: ...


class Transport(Protocol):
    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        """Send ``request``; return once the headers arrived. Raises
        :class:`~gateway.errors.UpstreamError` ``connect`` (refused, reset, DNS, TLS) or
        ``timeout`` (``head_timeout`` passed). Cancelling it releases everything."""
        ...

    def in_use(self) -> int:
        """Upstream connections a request holds right now (idle pooled ones not counted)."""
        ...

    async def aclose(self) -> None: ...
