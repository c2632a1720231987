"""The rate-limit headers of every answer on a limited key, and the sink that adds them.

Both providers' sets are sent, whatever the route's dialect: a header is no part of a dialect's
body, and each client reads the set it knows and ignores the other (OpenAI's SDKs and Anthropic's
both surface the raw headers to their callers):

- OpenAI: ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests``,
  ``x-ratelimit-reset-requests`` and the ``-tokens`` triple; a reset is a duration as OpenAI
  writes it (``1s``, ``6m0s``, ``20ms``).
- Anthropic: ``anthropic-ratelimit-requests-limit``, ``-requests-remaining``,
  ``-requests-reset`` and the ``tokens`` triple; a reset is an RFC 3339 time.

The requests headers describe ``requests_per_minute``; the tokens headers the token window with
the least remaining (``tokens_per_minute``, ``_day`` or ``_month``). A limit the key does not
set has no header.
"""

from __future__ import annotations

import functools
import math
from datetime import UTC, datetime

from aiohttp import web

from gateway.exchange.sink import ResponseSink
from gateway.limits.windows import Admission, WindowState

__all__ = ["HeaderSink", "openai_duration", "rate_headers"]


def openai_duration(seconds: float) -> str:
    """``0.02`` -> ``20ms``, ``1`` -> ``1s``, ``360`` -> ``6m0s``, ``3725`` -> ``1h2m5s``."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


def _rfc3339(unix: float) -> str:
    return _rfc3339_second(math.ceil(unix))


@functools.lru_cache(maxsize=256)
def _rfc3339_second(second: int) -> str:
    # cached: every answer of a minute names the same few seconds
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rate_headers(adm: Admission) -> dict[str, str]:
    requests: WindowState | None = None
    tokens: WindowState | None = None
    for s in adm.states:
        if not s.window.tokens:
            requests = s
        elif tokens is None or s.remaining < tokens.remaining:
            tokens = s
    now = adm.at_ms / 1000
    h: dict[str, str] = {}
    for kind, state in (("requests", requests), ("tokens", tokens)):
        if state is None:
            continue
        s = state
        limit, remaining = str(s.window.limit), str(s.remaining)
        h[f"x-ratelimit-limit-{kind}"] = limit
        h[f"x-ratelimit-remaining-{kind}"] = remaining
        h[f"x-ratelimit-reset-{kind}"] = openai_duration(s.reset)
        h[f"anthropic-ratelimit-{kind}-limit"] = limit
        h[f"anthropic-ratelimit-{kind}-remaining"] = remaining
        h[f"anthropic-ratelimit-{kind}-reset"] = _rfc3339(now + s.reset)
    return h


class HeaderSink:
    """A :class:`~gateway.exchange.sink.ResponseSink` that adds ``headers`` to the answer it
    passes on, whole or streamed."""

    __slots__ = ("_inner", "headers")

    def __init__(self, inner: ResponseSink, headers: dict[str, str]) -> None:
        self._inner = inner
        self.headers = headers

    async def whole(self, status: int, headers: dict[str, str], body: bytes) -> None:
        await self._inner.whole(status, {**headers, **self.headers}, body)

    async def start(self, headers: dict[str, str]) -> None:
        await self._inner.start({**headers, **self.headers})

    async def write(self, data: bytes) -> None:
        await self._inner.write(data)

    async def finish(self, last: bytes = b"") -> None:
        await self._inner.finish(last)

    def cut(self) -> web.StreamResponse:
        return self._inner.cut()

    def response(self) -> web.StreamResponse:
        return self._inner.response()
