"""The gateway's one exception tree; foreign exceptions are translated at the boundary.

    GatewayError
     ├── ParseError          bytes or JSON that cannot be read; ``where`` names the spot
     │    ├── FramingError   the framing (JSON lines, SSE) is broken or over a limit
     │    └── DialectError   valid JSON that is not the dialect's shape; ``where`` is a field path
     ├── UpstreamError       the upstream failed; ``kind`` is connect | timeout | status | malformed
     └── ConfigError         the YAML config is invalid; ``where`` is its YAML path

``ParseError`` is the only exception a reader or a dialect parser lets escape, whatever its input.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "ConfigError",
    "DialectError",
    "FramingError",
    "GatewayError",
    "ParseError",
    "UpstreamError",
    "UpstreamErrorKind",
]

UpstreamErrorKind = Literal["connect", "timeout", "status", "malformed"]


class GatewayError(Exception):
    """Root of every error the gateway raises on purpose."""


class ParseError(GatewayError):
    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.message = message
        self.where = where


class FramingError(ParseError):
    pass


class DialectError(ParseError):
    pass


class UpstreamError(GatewayError):
    def __init__(self, kind: UpstreamErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: UpstreamErrorKind = kind
        self.message = message


class ConfigError(GatewayError):
    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{w}: {m}" if w else m for w, m in problems))
        self.problems = problems
