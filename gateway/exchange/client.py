"""The client side of an exchange: method, API key, body, parse, and whether a stream is wanted.

Every refusal is a :class:`Refused` carrying the error the client gets, in its own dialect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway.canonical import ChatError, ChatRequest, random_hex
from gateway.config import GatewayConfig
from gateway.edge import BodyTimeout
from gateway.errors import ParseError
from gateway.exchange.access import Refused, check_access
from gateway.exchange.kept import Keeping, KeptStore, Resolved, resolve
from gateway.incoming import ClientRequest
from gateway.pipeline import parse_body
from gateway.runtime import RouteEntry, Runtime

__all__ = ["Keep", "read_chat_request"]

@dataclass(frozen=True, slots=True)
class Keep:
    """What resolving stored references needs (:mod:`gateway.exchange.kept`)."""

    runtime: Runtime
    store: KeptStore | None
    log: Any
    request_id: str


async def read_chat_request(request: ClientRequest, entry: RouteEntry, config: GatewayConfig,
                            keep: Keep | None = None) -> tuple[ChatRequest, Keeping | None]:
    """The client's request in canonical form (its stored references resolved, with ``keep``,
    on a route that keeps state at the gateway) and what keeps its answer, or
    :class:`Refused`."""
    check_access(request, config.auth.accepted_keys, ("POST",), "POST, OPTIONS")
    limit = config.server.max_body_bytes
    length = request.content_length
    try:
        if length is not None and length <= limit:  # most requests: one read, one buffer
            raw = await request.read()  # exactly ``length`` bytes
        else:
            raw = await _read_unsized(request, length, limit)
    except web.HTTPRequestEntityTooLarge:  # the app's own limit, set at startup
        raise _too_large(limit) from None
    except BodyTimeout:  # the edge's body_timeout (gateway.edge); it closes the connection
        raise Refused(ChatError(408, "the request body did not arrive in time",
                                code="REQUEST_TIMEOUT"), {"Connection": "close"}) from None
    resolved: Resolved | None = None
    try:
        body = parse_body(raw)
        if keep is not None and entry.responses_state is not None:
            resolved = await resolve(request, entry, keep.runtime, body, keep.store, keep.log,
                                     keep.request_id)
            body = resolved.body
        req = entry.client.parse_request(body)
    except ParseError as e:
        raise Refused(ChatError(400, f"invalid request: {e}", param=e.where or None)) from None
    req.wire = body  # what it holds beyond the canonical fields is accounted from it
    if resolved is not None:
        resolved.marked(req)
    if entry.model is not None:
        req.model = entry.model
    req.stream = _wants_stream(request, entry, req)
    req.options = entry.options
    if req.session_state is None and entry.config.mint_session_state:
        # Minted before any attempt, so that every upstream tried and the answer carry the same
        # one; the answer gives it back as any client's own state is echoed
        # (pipeline.with_session_echo, StreamTranslator), and an upstream's own state wins.
        req.session_state = random_hex()
        req.session_minted = True
    return req, resolved.keeping if resolved is not None else None


async def _read_unsized(request: ClientRequest, length: int | None, limit: int) -> bytes:
    """A body declared over ``limit`` (refused), or of no declared length (chunked: read up to
    ``limit``)."""
    if length is not None:
        raise _too_large(limit)
    buf = bytearray()
    async for chunk in request.content.iter_chunked(65536):
        buf += chunk
        if len(buf) > limit:
            raise _too_large(limit)
    return bytes(buf)


def _too_large(limit: int) -> Refused:
    # Built only when refused, so that an accepted request never builds the error nor formats
    # its message.
    return Refused(ChatError(413, f"the request body is over {limit} bytes",
                             code="PAYLOAD_TOO_LARGE"))


def _wants_stream(request: ClientRequest, entry: RouteEntry, req: ChatRequest) -> bool:
    if entry.stream is not None:
        return entry.stream
    if req.stream:
        return True
    return (entry.client.stream_by_accept
            and "text/event-stream" in request.headers.get("Accept", ""))
