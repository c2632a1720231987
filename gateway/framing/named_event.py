"""The one payload type both framings know: an SSE event with its name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, final

__all__ = ["Named"]


@final
class Named:
    """An SSE event that carries its ``event:`` name. Written: ``data`` is the compact JSON
    bytes. Read (only from a reader asked for names): ``data`` is the parsed payload.

    A slotted class rather than a named tuple: one is built for nearly every event of a stream
    of named events, read and written, and a tuple subclass is slower to build. It keeps what
    callers used of the tuple: equality, a hash, ``event, data = named`` and copying."""

    __slots__ = ("data", "event")

    def __init__(self, event: str, data: Any) -> None:
        self.event = event
        self.data = data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Named):
            return NotImplemented
        return self.event == other.event and self.data == other.data

    def __hash__(self) -> int:
        return hash((self.event, self.data))

    def __iter__(self) -> Iterator[Any]:
        return iter((self.event, self.data))

    def __repr__(self) -> str:
        return f"Named(event={self.event!r}, data={self.data!r})"

    def __reduce__(self) -> tuple[type[Named], tuple[str, Any]]:
        return (Named, (self.event, self.data))
