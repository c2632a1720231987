"""The one place that talks to upstreams. Every exit path releases or closes the connection.

aiohttp's exceptions stop here: callers see :class:`UpstreamError` with a ``kind`` (connect,
timeout, status, malformed) and never a foreign exception.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
from yarl import URL

from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError

__all__ = ["UpstreamCall", "connections_in_use", "has_userinfo", "open_upstream",
           "parse_retry_after"]

_ERROR_BODY_LIMIT = 64 * 1024
_WHOLE_BODY_LIMIT = 16 * 1024 * 1024


@dataclass(slots=True)
class UpstreamCall:
    """An upstream response whose headers arrived; its body is read through this object so that
    the time spent waiting on the upstream is known (``waited``, seconds)."""

    response: aiohttp.ClientResponse
    config: UpstreamConfig
    started: float
    waited: float = 0.0
    chunks: int = field(default=0)

    @property
    def status(self) -> int:
        return self.response.status

    def retry_after(self) -> float | None:
        return parse_retry_after(self.response.headers.get("Retry-After"))

    async def read_whole(self, limit: int = _WHOLE_BODY_LIMIT) -> bytes:
        """The whole body, bounded in size and by the upstream's ``timeout``."""
        remaining = self.config.timeout - (time.perf_counter() - self.started)
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(max(remaining, 0.001)):
                buf = bytearray()
                async for chunk in self.response.content.iter_any():
                    buf += chunk
                    if len(buf) > limit:
                        raise UpstreamError("malformed", f"the upstream body is over {limit} bytes")
                return bytes(buf)
        except TimeoutError as e:
            raise UpstreamError("timeout", "the upstream did not finish its answer in time") from e
        except aiohttp.ClientError as e:
            raise UpstreamError("connect", "the upstream connection broke mid-answer") from e
        finally:
            self.waited += time.perf_counter() - t0

    @asynccontextmanager
    async def whole_deadline(self) -> AsyncIterator[None]:
        """Bounds the reading of a whole answer by ``timeout`` (from the request), also when it is
        assembled from a stream, whose silences alone ``idle_timeout`` bounds: an upstream that
        drips, or sends only keep-alive comments, cannot hold a whole answer forever."""
        remaining = self.config.timeout - (time.perf_counter() - self.started)
        try:
            async with asyncio.timeout(max(remaining, 0.001)):
                yield
        except TimeoutError as e:
            raise UpstreamError("timeout", "the upstream did not finish its answer in time") from e

    async def read_error(self) -> bytes:
        try:
            return await self.read_whole(_ERROR_BODY_LIMIT)
        except UpstreamError:
            return b""

    async def chunks_of(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; the idle timeout bounds each wait."""
        content = self.response.content
        perf = time.perf_counter
        watch = _IdleWatch(self.response, self.config.idle_timeout or self.config.timeout)
        try:
            while True:
                t0 = perf()
                watch.reading_since(t0)
                try:
                    chunk = await content.readany()
                except _Idle as e:
                    raise UpstreamError("timeout", "the upstream stream went silent") from e
                except aiohttp.ClientPayloadError as e:
                    raise UpstreamError("connect", "the upstream stream was cut off") from e
                except aiohttp.ClientError as e:
                    raise UpstreamError("connect",
                                        "the upstream connection broke mid-stream") from e
                finally:
                    watch.reading = False
                    self.waited += perf() - t0
                if not chunk:
                    return
                self.chunks += 1
                yield chunk
        finally:
            watch.stop()


class _Idle(Exception):
    """The upstream sent nothing for ``idle_timeout`` while a chunk was awaited."""


class _IdleWatch:
    """Bounds every wait for a stream's next chunk with one timer for the whole stream.

    ``asyncio.timeout()`` around each read pushes a timer on the loop's heap and cancels it: about
    4 µs a chunk, a fifth of what the gateway spends on a 20-chunk stream. Here a read only stamps
    when it began; the timer, when it fires, re-arms itself at that stamp + ``idle`` and only
    when a read has been waiting that long does it fail the body, which wakes the pending read
    with :class:`_Idle`. Time spent writing to the client is not counted, as before.
    """

    __slots__ = ("_handle", "_idle", "_loop", "_response", "reading", "since")

    def __init__(self, response: aiohttp.ClientResponse, idle: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._response = response
        self._idle = idle
        self.reading = False
        self.since = time.perf_counter()
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(
            self._loop.time() + idle, self._check)

    def reading_since(self, t0: float) -> None:
        self.reading = True
        self.since = t0

    def _check(self) -> None:
        self._handle = None
        if self._response.closed:  # read to the end or closed: nothing left to bound
            return
        waited = time.perf_counter() - self.since if self.reading else 0.0
        if waited >= self._idle:
            self._response.content.set_exception(_Idle())
            return
        self._handle = self._loop.call_at(self._loop.time() + self._idle - waited, self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def connections_in_use(session: aiohttp.ClientSession) -> int:
    """Upstream connections a request holds right now (idle pooled ones not counted): zero
    whenever no exchange is in flight, which is what the fault tests assert."""
    connector = session.connector
    # aiohttp has no public count; ``_acquired`` is the set its own limit checks read.
    acquired = getattr(connector, "_acquired", None) if connector is not None else None
    return len(acquired) if acquired is not None else 0


def has_userinfo(config: UpstreamConfig) -> bool:
    """Whether the upstream's URLs carry credentials (``https://user:password@host/…``)."""
    return any(u is not None and "@" in u.split("/", 3)[2]
               for u in (config.url, config.stream_url))


def _credentials(url: str, headers: Mapping[str, str],
                 ) -> tuple[str | URL, Mapping[str, str]]:
    """A URL's ``user:password@`` as Basic auth, unless the headers already authorize (aiohttp
    refuses both at once, with a ValueError that would surface as a 500)."""
    if "@" not in url.split("/", 3)[2]:
        return url, headers
    parsed = URL(url)
    if any(k.lower() == "authorization" for k in headers):
        return parsed.with_user(None), headers
    pair = f"{parsed.user or ''}:{parsed.password or ''}".encode()
    basic = "Basic " + base64.b64encode(pair).decode("ascii")
    return parsed.with_user(None), {**headers, "Authorization": basic}


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: not worth honouring for a chat answer


@functools.cache
def _client_timeout(connect: float | None) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, sock_connect=connect)  # immutable: shared


@asynccontextmanager
async def open_upstream(
    session: aiohttp.ClientSession, config: UpstreamConfig, body: bytes,
    headers: Mapping[str, str], *, stream: bool,
) -> AsyncIterator[UpstreamCall]:
    """POST ``body`` and yield once the response headers arrived (bounded by the first-byte
    timeout). The connection is released on a clean read to the end, and closed otherwise —
    including when the caller is cancelled because its client went away."""
    url, headers = _credentials(config.effective_stream_url if stream else config.url, headers)
    # No sock_read: it would bound the wait for the headers and every silence of a whole
    # answer by ``idle_timeout``, which is about the gaps of a stream only (chunks_of applies it);
    # the headers are bounded by ``first_byte_timeout`` below, a whole body by ``timeout``.
    timeout = _client_timeout(config.connect_timeout)
    first_byte = config.first_byte_timeout or config.timeout
    started = time.perf_counter()
    try:
        async with asyncio.timeout(first_byte):
            response = await session.post(url, data=body, headers=headers, timeout=timeout,
                                          allow_redirects=False)
    except TimeoutError as e:
        raise UpstreamError("timeout", "the upstream did not answer in time") from e
    except aiohttp.ClientConnectorError as e:
        raise UpstreamError("connect", "the upstream refused the connection") from e
    except (aiohttp.ClientError, OSError) as e:
        raise UpstreamError("connect", "the upstream connection failed") from e
    call = UpstreamCall(response, config, started, waited=time.perf_counter() - started)
    try:
        yield call
    finally:
        if response.content.is_eof():
            response.release()
        else:
            response.close()
