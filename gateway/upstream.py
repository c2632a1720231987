"""The one place that talks to upstreams. Every exit path releases or closes the connection.

aiohttp's exceptions stop here: callers see :class:`UpstreamError` with a ``kind`` (connect,
timeout, status, malformed) and never a foreign exception.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp

from gateway.config import UpstreamConfig
from gateway.errors import UpstreamError

__all__ = ["UpstreamCall", "open_upstream", "parse_retry_after"]

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

    async def read_error(self) -> bytes:
        try:
            return await self.read_whole(_ERROR_BODY_LIMIT)
        except UpstreamError:
            return b""

    async def chunks_of(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; the idle timeout bounds each wait."""
        content = self.response.content
        perf = time.perf_counter
        while True:
            t0 = perf()
            try:
                chunk = await content.readany()
            except TimeoutError as e:
                raise UpstreamError("timeout", "the upstream stream went silent") from e
            except aiohttp.ClientPayloadError as e:
                raise UpstreamError("connect", "the upstream stream was cut off") from e
            except aiohttp.ClientError as e:
                raise UpstreamError("connect", "the upstream connection broke mid-stream") from e
            finally:
                self.waited += perf() - t0
            if not chunk:
                return
            self.chunks += 1
            yield chunk


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: not worth honouring for a chat answer


@asynccontextmanager
async def open_upstream(
    session: aiohttp.ClientSession, config: UpstreamConfig, body: bytes,
    headers: Mapping[str, str], *, stream: bool,
) -> AsyncIterator[UpstreamCall]:
    """POST ``body`` and yield once the response headers arrived (bounded by the first-byte
    timeout). The connection is released on a clean read to the end, and closed otherwise —
    including when the caller is cancelled because its client went away."""
    url = config.effective_stream_url if stream else config.url
    idle = config.idle_timeout or config.timeout
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=config.connect_timeout,
                                    sock_read=idle)
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
