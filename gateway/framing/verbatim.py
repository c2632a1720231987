"""A payload with the bytes it came as. Knows nothing of dialects."""

from __future__ import annotations

from typing import Any, final

__all__ = ["Verbatim"]


@final
class Verbatim:
    """What a reader asked to keep the bytes returns for each payload: :attr:`payload`, what it
    returns otherwise (a parsed value, a :class:`~gateway.framing.Named`, a
    :class:`~gateway.framing.RawData`), and :attr:`raw`, the JSON text it was parsed from (a
    line, or an SSE event's data), so that a payload can be passed on as the upstream wrote it."""

    __slots__ = ("payload", "raw")

    def __init__(self, payload: Any, raw: bytes) -> None:
        self.payload = payload
        self.raw = raw

    def __repr__(self) -> str:
        return f"Verbatim({self.payload!r}, {self.raw!r})"
