"""The :class:`~gateway.upstream.transport.Transport` on aiohttp's client
(``server.upstream_client: aiohttp``, the fallback of :mod:`gateway.upstream.fast_transport`):
keep-alive pool, TLS, chunked and Content-Length bodies, gzip/deflate. aiohttp retries a request
whose pooled connection turned out to be closed only for idempotent methods, so a POST on a
connection the server had just closed fails (the fast client checks a pooled connection before
writing to it)."""

from __future__ import annotations

import asyncio
import base64
import functools
from collections.abc import Callable, Mapping

import aiohttp
from yarl import URL

from gateway.errors import UpstreamError
from gateway.upstream.deadlines import ResponseTimer
from gateway.upstream.transport import UpstreamRequest

__all__ = ["AiohttpResponse", "AiohttpTransport", "with_basic_auth"]


class AiohttpResponse:
    __slots__ = ("_closed", "_response", "_timer", "_transport")

    def __init__(self, response: aiohttp.ClientResponse, transport: AiohttpTransport) -> None:
        self._response = response
        self._transport = transport
        self._closed = False
        self._timer = ResponseTimer()

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    @property
    def content_type(self) -> str:
        return self._response.content_type

    async def read(self) -> bytes:
        try:
            return await self._response.content.readany()
        except aiohttp.ClientPayloadError as e:
            raise UpstreamError("connect", "the upstream stream was cut off") from e
        except aiohttp.ClientError as e:
            raise UpstreamError("connect", "the upstream connection broke mid-answer") from e

    def ended(self) -> bool:
        return self._response.content.at_eof()

    def fail(self, exc: BaseException) -> None:
        if not self._response.closed:
            self._response.content.set_exception(exc)

    def fail_after(self, delay: float, error: Callable[[], BaseException]) -> None:
        self._timer.arm(delay, lambda: self.fail(error()))

    def stop_timer(self) -> None:
        self._timer.stop()

    def close(self) -> None:
        self.stop_timer()
        if not self._closed:
            self._closed = True
            self._transport.held -= 1
        if self._response.content.is_eof():
            self._response.release()
        else:
            self._response.close()


class AiohttpTransport:
    """One :class:`aiohttp.ClientSession` for all upstreams (no cookie jar, no default
    headers: each request says what it sends)."""

    __slots__ = ("_session", "held")

    def __init__(self) -> None:
        self.held = 0
        """Requests sent whose response is not yet closed: each holds its connection from the
        send until then (aiohttp has no public count of the connections it lent)."""
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30,
                                         enable_cleanup_closed=True)
        self._session = aiohttp.ClientSession(
            connector=connector, auto_decompress=True, skip_auto_headers=("User-Agent",),
            cookie_jar=aiohttp.DummyCookieJar())

    async def send(self, request: UpstreamRequest) -> AiohttpResponse:
        url, headers = with_basic_auth(request.url, request.headers)
        self.held += 1  # until the response is closed; at once when the send fails
        sent = False
        try:
            async with asyncio.timeout(request.head_timeout):
                response = await self._session.request(
                    request.method, url, data=request.body or None, headers=headers,
                    timeout=_client_timeout(request.connect_timeout), allow_redirects=False)
        except TimeoutError as e:
            raise UpstreamError("timeout", "the upstream did not answer in time") from e
        except aiohttp.ClientConnectorError as e:
            raise UpstreamError("connect", "the upstream refused the connection") from e
        except (aiohttp.ClientError, OSError) as e:
            raise UpstreamError("connect", "the upstream connection failed") from e
        else:
            sent = True
        finally:
            if not sent:
                self.held -= 1
        return AiohttpResponse(response, self)

    def in_use(self) -> int:
        return self.held

    async def aclose(self) -> None:
        await self._session.close()


@functools.cache
def _client_timeout(connect: float | None) -> aiohttp.ClientTimeout:
    # No sock_read: it would bound every silence of a whole answer by one figure; the gateway
    # bounds the headers (head_timeout), a whole body (timeout) and a stream's gaps itself.
    return aiohttp.ClientTimeout(total=None, sock_connect=connect)  # immutable: shared


def with_basic_auth(url: str, headers: Mapping[str, str],
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
