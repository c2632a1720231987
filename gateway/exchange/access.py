"""What every endpoint checks and records before, and after, anything else: the request's id, its
method and key (a refusal in the route's dialect), and the one access record of an endpoint that
answers beside a route's chat path (model lists, model info, token counts, stored responses)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from gateway.auth import accepted_key
from gateway.canonical import ChatError, random_hex
from gateway.exchange.outcome import NONE, Outcome, record
from gateway.forwarding import client_address
from gateway.incoming import ClientRequest
from gateway.metrics import Metrics

__all__ = ["Refused", "check_access", "record_beside", "request_id_of"]


class Refused(Exception):
    """The request is answered before any upstream is tried."""

    def __init__(self, error: ChatError, headers: dict[str, str] | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.headers = headers or {}


def request_id_of(request: ClientRequest) -> str:
    """The client's ``X-Request-ID`` when it is a sane token, else a new one."""
    rid = request.headers.get("X-Request-ID", "")
    if rid and len(rid) <= 128 and rid.isprintable() and rid.isascii():
        return rid
    return random_hex()


def check_access(request: ClientRequest, keys: Sequence[str], methods: Sequence[str],
                 allow: str | None = None) -> None:
    """Raises :class:`Refused`: 405 for a method not in ``methods`` (``Allow``: ``allow``, else
    the methods), 401 without a valid key when ``keys`` are set."""
    if request.method not in methods:
        use = ", ".join(m for m in methods if m not in ("HEAD", "OPTIONS"))
        raise Refused(ChatError(405, f"{request.method} is not allowed here; use {use}",
                                code="METHOD_NOT_ALLOWED"), {"Allow": allow or ", ".join(methods)})
    if keys and accepted_key(request, keys) is None:
        raise Refused(ChatError(401, "a valid API key is required", code="UNAUTHORIZED",
                                type="authentication_error"))


def record_beside(request: web.Request, response: web.StreamResponse, *, route: str,
                  dialect: str, request_id: str, started: float,
                  trusted_proxies: Sequence[str], metrics: Metrics, log: Any,
                  upstream: str = NONE, upstream_dialect: str = NONE,
                  on_outcome: Callable[[Outcome], None] | None = None) -> None:
    """The one record of an answer of an endpoint beside ``route``'s chat path (and
    ``on_outcome``'s call with it: the app's :attr:`~gateway.exchange.Env.on_outcome`)."""
    record(Outcome(
        request_id=request_id, route=route, client_dialect=dialect,
        status=response.status, duration=time.perf_counter() - started,
        upstream=upstream, upstream_dialect=upstream_dialect, path=request.path,
        method=request.method, client=client_address(request, trusted_proxies),
        user_agent=request.headers.get("User-Agent"), request_bytes=request.content.total_bytes,
        response_bytes=response.content_length or 0), metrics, log, None, on_outcome)
