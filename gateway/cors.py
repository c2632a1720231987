"""The CORS headers of an answer: one function, for every way an answer reaches a browser
(aiohttp's response objects through ``on_response_prepare``, and the direct sink of the chat
routes, :mod:`gateway.exchange.sink`)."""

from __future__ import annotations

from gateway.config import CorsConfig

__all__ = ["cors_headers"]


def cors_headers(origin: str | None, method: str, cors: CorsConfig,
                 allow: str | None = None) -> list[tuple[str, str]]:
    """The headers to add to the answer of a request from ``origin`` (its ``Origin`` header);
    none when it is not a browser's cross-origin request or the origin is not allowed.
    ``allow``: the methods a preflight (``OPTIONS``) answer names."""
    if not origin or not cors.allow_origins:  # most requests stop here
        return []
    if "*" not in cors.allow_origins and origin not in cors.allow_origins:
        return []
    out = [("Access-Control-Allow-Origin",
            origin if cors.allow_credentials or "*" not in cors.allow_origins else "*"),
           ("Vary", "Origin"),
           ("Access-Control-Expose-Headers", "X-Request-ID, Retry-After, X-Gateway-Dropped")]
    if cors.allow_credentials:
        out.append(("Access-Control-Allow-Credentials", "true"))
    if method == "OPTIONS":
        # The history endpoints answer their preflight with the methods they serve.
        out += [("Access-Control-Allow-Methods", allow or "POST, OPTIONS"),
                ("Access-Control-Allow-Headers", ", ".join(cors.allow_headers)),
                ("Access-Control-Max-Age", str(cors.max_age))]
    return out
