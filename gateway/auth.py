"""The gateway's own API keys (``auth.api_keys``): how a client presents one, and whether it is
one of them. Used by the chat routes and the history API alike."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from gateway.incoming import ClientRequest

__all__ = ["accepted_key", "presented_key"]


def presented_key(request: ClientRequest) -> str | None:
    """The key a client presented: ``Authorization: Bearer <key>``, ``api-key: <key>`` (Azure's
    spelling), ``x-api-key: <key>`` (Anthropic's), ``x-goog-api-key: <key>`` or a ``key`` query
    parameter (Google's)."""
    for header in ("api-key", "x-api-key", "x-goog-api-key"):
        given = request.headers.get(header)
        if given is not None:
            return given
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.query.get("key")


def accepted_key(request: ClientRequest, keys: Sequence[str]) -> str | None:
    """The configured key the client presented, or ``None`` (compared in constant time)."""
    given = presented_key(request)
    if given is None:
        return None
    raw = given.encode()
    return next((k for k in keys if hmac.compare_digest(raw, k.encode())), None)
