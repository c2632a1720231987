"""Stream framing: bytes to JSON payloads and back. Knows nothing of dialects.

A dialect only declares which framing it *emits*; what an upstream actually sends is sniffed from
its first bytes, because real backends send JSON lines as ``text/event-stream`` or with no
Content-Type at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson

from gateway.errors import FramingError
from gateway.framing.jsonlines import DEFAULT_MAX_LINE, JsonLinesReader, encode_line
from gateway.framing.sse import SSEEvent, SSEReader, encode_event

__all__ = [
    "Framing",
    "PayloadReader",
    "RawData",
    "SSEEvent",
    "SniffingReader",
    "detect_framing",
    "encoder_for",
]

Framing = Literal["jsonlines", "sse"]


@dataclass(slots=True, frozen=True)
class RawData:
    """An SSE event whose data is not JSON (e.g. OpenAI's ``[DONE]``); the dialect decides."""

    text: str


class PayloadReader(Protocol):
    def feed(self, data: bytes) -> list[Any]: ...
    def finish(self) -> list[Any]: ...


class _SSEPayloadReader:
    __slots__ = ("_sse",)

    def __init__(self, max_size: int) -> None:
        self._sse = SSEReader(max_size)

    def feed(self, data: bytes) -> list[Any]:
        plain = self._sse.plain_data(data)
        if plain is not None:
            return [_payload_of_bytes(d) for d in plain]
        return [_payload(e.data) for e in self._sse.feed(data)]

    def finish(self) -> list[Any]:
        return [_payload(e.data) for e in self._sse.finish()]


def _payload(data: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return RawData(data)


def _payload_of_bytes(data: bytes) -> Any:
    try:
        return orjson.loads(data)  # no detour through str for the common case
    except orjson.JSONDecodeError:
        # Not JSON, or not UTF-8: what the general path does (decode with replacement first).
        return _payload(data.decode("utf-8", "replace"))


def detect_framing(head: bytes) -> Framing | None:
    """The framing of a body from its first bytes: JSON starts with ``{`` or ``[``; SSE with a
    field name or a comment. ``None`` while only whitespace has arrived."""
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if not stripped:
        return None
    return "jsonlines" if stripped[:1] in (b"{", b"[") else "sse"


def reader_for(framing: Framing, max_size: int = DEFAULT_MAX_LINE) -> PayloadReader:
    if framing == "jsonlines":
        return JsonLinesReader(max_size)
    return _SSEPayloadReader(max_size)


class SniffingReader:
    """Buffers until the first non-blank byte tells the framing, then delegates."""

    __slots__ = ("_head", "_max", "_reader", "framing")

    def __init__(self, max_size: int = DEFAULT_MAX_LINE) -> None:
        self._head = b""
        self._max = max_size
        self._reader: PayloadReader | None = None
        self.framing: Framing | None = None

    def feed(self, data: bytes) -> list[Any]:
        if self._reader is None:
            self._head += data
            framing = detect_framing(self._head)
            if framing is None:
                if len(self._head) > self._max:  # only blanks, but they are held in memory
                    raise FramingError(f"more than {self._max} blank bytes before any payload")
                return []
            self.framing = framing
            self._reader = reader_for(framing, self._max)
            data, self._head = self._head, b""
            if framing == "jsonlines":  # JSON has no BOM; the SSE reader drops its own
                data = data.removeprefix(b"\xef\xbb\xbf")
        return self._reader.feed(data)

    def finish(self) -> list[Any]:
        return [] if self._reader is None else self._reader.finish()


def encoder_for(framing: Framing) -> Any:
    """The function that frames one JSON payload: ``bytes -> bytes``."""
    return encode_line if framing == "jsonlines" else encode_event
