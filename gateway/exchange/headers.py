"""The headers an upstream request carries: the gateway's own, the client's credentials when
they are the upstream's to check, what the client's request passes on (trace context, user
agent, forwarding chain), and last the upstream's configured ``headers``, which win."""

from __future__ import annotations

from gateway.config import GatewayConfig, UpstreamConfig
from gateway.dialects import Dialect
from gateway.forwarding import forwarded_headers
from gateway.incoming import ClientRequest

__all__ = ["upstream_headers"]

_JSON = "application/json"
_CLIENT_KEY = ("Authorization", "x-api-key", "x-goog-api-key", "OpenAI-Organization",
               "OpenAI-Project")
"""The client's key, and what belongs with it: an OpenAI organization or project goes only
beside the client's own key, never beside the upstream's (OpenAI refuses a key of another
organization); a backend that does not know these headers ignores them."""
_TRACE_CONTEXT = ("traceparent", "tracestate")


def upstream_headers(request: ClientRequest, config: GatewayConfig, up: UpstreamConfig,
                     dialect: Dialect, stream: bool, request_id: str) -> dict[str, str]:
    headers = {"Content-Type": _JSON, "X-Request-ID": request_id}
    if stream:  # some backends choose the stream by this header alone (as the dialect says)
        headers["Accept"] = dialect.stream_accept
    incoming = request.headers
    # The client's credentials go on only when the gateway does not check keys itself (then
    # they are the gateway's) and the upstream has none of its own.
    if not config.auth.accepted_keys and not up.has_own_credentials:
        for name in _CLIENT_KEY:
            value = incoming.get(name)
            if value:
                headers[name] = value
        query_key = request.query.get("key")
        if query_key and "x-goog-api-key" not in headers:
            # Google's clients may put their key in the query: it goes on as Google's header,
            # never in an upstream URL (where logs and error messages would show it).
            headers["x-goog-api-key"] = query_key
    # What the client's request hands on to every upstream: X-Forwarded-For and -Proto
    # (gateway.forwarding), its trace context (W3C traceparent and tracestate; replaced by the
    # gateway's own span when tracing is on), its User-Agent as server.upstream_user_agent says.
    # None of these names is one of those above: each is written in place.
    server = config.server
    headers.update(forwarded_headers(request, server.trusted_proxies))
    for name in _TRACE_CONTEXT:
        value = incoming.get(name)
        if value:
            headers[name] = value
    agent = server.upstream_user_agent
    if agent == "pass":
        value = incoming.get("User-Agent")
        if value:
            headers["User-Agent"] = value
    elif agent != "none":
        headers["User-Agent"] = agent
    if up.headers:  # the upstream's configured headers, last: they win
        headers.update(up.headers)
    return headers
