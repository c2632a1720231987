"""The upstream side: the narrow transport seam, its implementations (the gateway's own HTTP/1.1
client, aiohttp's, and an in-memory one for tests), and one call's reading with the gateway's
bounds."""

from typing import Literal

from gateway.upstream.aiohttp_transport import AiohttpTransport
from gateway.upstream.call import (
    UpstreamCall,
    has_userinfo,
    parse_retry_after,
    start_call,
    upstream_request,
)
from gateway.upstream.fast_transport import FastTransport
from gateway.upstream.memory import MemoryResponse, MemoryTransport
from gateway.upstream.transport import Transport, UpstreamRequest, UpstreamResponse

__all__ = ["AiohttpTransport", "FastTransport", "MemoryResponse", "MemoryTransport", "Transport",
           "UpstreamCall", "UpstreamRequest", "UpstreamResponse", "connections_in_use",
           "has_userinfo", "make_transport", "parse_retry_after", "start_call",
           "upstream_request"]


def connections_in_use(transport: Transport) -> int:
    """Upstream connections a request holds right now: zero whenever no exchange is in flight,
    which is what the fault tests assert."""
    return transport.in_use()


def make_transport(client: Literal["fast", "aiohttp"]) -> Transport:
    """The transport ``server.upstream_client`` names."""
    return FastTransport() if client == "fast" else AiohttpTransport()
