"""A JSON array streamed element by element: ``[`` then the elements separated by ``,`` then
``]``, each element written as it comes (Google's APIs stream so without ``alt=sse``: an array
of whole response objects, one per line group, ``,\\r\\n`` between them). Knows nothing of
dialects.

The writer is the one framing with state: its first element opens the array and its
:meth:`JsonArrayWriter.close` closes it (``[]`` when nothing was written), so each stream has
a writer of its own (:func:`gateway.framing.encoder_for` makes a new one each call). The
reader cuts the elements out of the bytes as they arrive (string-aware), never waiting for the
array's end.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import FramingError
from gateway.framing.named_event import Named

__all__ = ["SEPARATOR", "JsonArrayReader", "JsonArrayWriter"]

SEPARATOR = b",\r\n"
"""Between two elements, as Google's servers write it."""
_WS = b" \t\r\n"


class JsonArrayWriter:
    """Frames payloads as the elements of one array: ``writer(payload) -> bytes`` for each, then
    ``writer.close()`` once."""

    __slots__ = ("_closed", "_open")

    def __init__(self) -> None:
        self._open = False
        self._closed = False

    def __call__(self, payload: bytes | Named) -> bytes:
        data: bytes = payload.data if isinstance(payload, Named) else payload
        if self._closed:
            raise FramingError("an element after the array was closed")
        if self._open:
            return SEPARATOR + data
        self._open = True
        return b"[" + data

    def close(self) -> bytes:
        """The array's end (``[]`` when no element was written); nothing the second time."""
        if self._closed:
            return b""
        self._closed = True
        return b"\r\n]" if self._open else b"[]"


class JsonArrayReader:
    """The elements of a streamed JSON array, parsed, as each one completes."""

    __slots__ = ("_buf", "_depth", "_escape", "_max", "_state", "_string", "whole")

    def __init__(self, max_size: int) -> None:
        self._max = max_size
        self._buf = bytearray()
        self._depth = 0
        self._string = False
        self._escape = False
        self._state = "start"
        """``start`` (before ``[``), ``element`` (an element or ``]`` is due), ``after`` (a
        separator or ``]`` is due), ``end`` (the array closed)."""
        self.whole = False  # (its frames are never passed on as they came)

    def feed(self, data: bytes) -> list[Any]:
        out: list[Any] = []
        for byte in data:
            if self._depth:
                self._in_element(byte, out)
                continue
            if byte in _WS:
                continue
            state = self._state
            if state == "start":
                if byte != 0x5B:  # [
                    raise FramingError("a JSON-array stream that does not start with [")
                self._state = "element"
            elif byte == 0x5D and state in ("element", "after"):  # ]
                self._state = "end"
            elif state == "after" and byte == 0x2C:  # ,
                self._state = "element"
            elif state == "element" and byte in b"{[":
                self._buf.clear()
                self._in_element(byte, out)
            else:
                raise FramingError(f"unexpected {chr(byte)!r} between the array's elements")
        return out

    def _in_element(self, byte: int, out: list[Any]) -> None:
        self._buf.append(byte)
        if len(self._buf) > self._max:
            raise FramingError(f"an element is over {self._max} bytes")
        if self._string:
            if self._escape:
                self._escape = False
            elif byte == 0x5C:
                self._escape = True
            elif byte == 0x22:
                self._string = False
        elif byte == 0x22:
            self._string = True
        elif byte in b"{[":
            self._depth += 1
        elif byte in b"}]":
            self._depth -= 1
            if self._depth == 0:
                try:
                    out.append(orjson.loads(self._buf))
                except orjson.JSONDecodeError as e:
                    raise FramingError(f"an element is not JSON ({e.msg})") from e
                self._state = "after"

    def finish(self) -> list[Any]:
        if self._state not in ("end", "start") or self._depth:
            raise FramingError("the JSON array ended before its ]")
        return []
