"""JSON lines: an incremental reader and the writer. Knows nothing of dialects.

Real servers send one compact object per ``\\n``-terminated line, and that is the fast path:
split on ``\\n``, ``orjson.loads`` each line. Documentation examples (and a few servers) also
print objects back to back (``}{``) or pretty-printed over several lines; a line that does not
parse on its own falls back to a string-aware bracket scanner that cuts concatenated values out of
the bytes. A line that is neither is a :class:`FramingError`, never a silent end of stream.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import FramingError
from gateway.framing.named_event import Named
from gateway.framing.template import Slot, TemplateReader
from gateway.framing.verbatim import Verbatim

__all__ = ["DEFAULT_MAX_LINE", "JsonLinesReader", "encode_line", "encode_lines"]

DEFAULT_MAX_LINE = 8 * 1024 * 1024
_WS = b" \t\r\n"


def encode_line(payload: bytes | Named) -> bytes:
    """Frame one compact JSON payload (which never holds a raw newline) as a line (an SSE event
    name, if any, has no place in JSON lines)."""
    if isinstance(payload, Named):
        data: bytes = payload.data
        return data + b"\n"
    return payload + b"\n"


def encode_lines(payloads: list[bytes | Named]) -> bytes:
    """:func:`encode_line` of each payload in turn, joined: one join, not a call per payload (a
    run of text frames writes twenty at once)."""
    if not payloads:
        return b""
    try:
        return b"\n".join(payloads) + b"\n"  # type: ignore[arg-type]
    except TypeError:  # a Named among them: its data alone makes its line
        return b"".join([encode_line(p) for p in payloads])


class _Scanner:
    """Cuts concatenated JSON objects/arrays out of bytes fed in pieces (string-aware)."""

    __slots__ = ("_buf", "_depth", "_escape", "_in_string")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._depth = 0
        self._in_string = False
        self._escape = False

    @property
    def pending(self) -> bool:
        return self._depth > 0

    @property
    def size(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        for byte in data:
            if self._depth == 0:
                if byte in _WS:
                    continue
                if byte not in b"{[":
                    raise FramingError("a line is not JSON")
                self._buf.clear()
            self._buf.append(byte)
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif byte == 0x5C:  # backslash
                    self._escape = True
                elif byte == 0x22:  # quote
                    self._in_string = False
            elif byte == 0x22:
                self._in_string = True
            elif byte in b"{[":
                self._depth += 1
            elif byte in b"}]":
                self._depth -= 1
                if self._depth == 0:
                    out.append(bytes(self._buf))
        return out


class JsonLinesReader:
    """``feed(bytes) -> values``, ``finish() -> values``; raises :class:`FramingError`.

    Linear in the bytes fed, however a line is split: an unfinished line is kept as a list of
    its pieces, each new read is scanned for ``\n`` on its own, and a line's pieces are joined
    once, when it ends (re-joining the held bytes on every read made a long line arriving in
    small reads quadratic: 8 MiB in 2 KiB reads cost seconds of CPU)."""

    __slots__ = ("_held", "_max_line", "_parts", "_scanner", "_text", "_verbatim", "scanned",
                 "whole")

    def __init__(self, max_line: int = DEFAULT_MAX_LINE,
                 text: TemplateReader | None = None, *, verbatim: bool = False) -> None:
        self._text = text
        """Reads a line by the stream's template when it fits (:mod:`gateway.framing.template`)."""
        self._verbatim = verbatim
        """Each value comes as a :class:`Verbatim`, with the bytes it was parsed from (a
        :class:`Slot` holds them already)."""
        self._parts: list[bytes] = []
        """The pieces of an unfinished line."""
        self._held = 0
        """Their length."""
        self._max_line = max_line
        self._scanner: _Scanner | None = None
        self.whole = False
        """The last :meth:`feed`'s bytes were exactly whole lines, each one JSON value and
        nothing else (no blank line, no CR): the lines :func:`encode_line` writes of each
        value's bytes, so the read may be passed on as they would be."""
        self.scanned = 0
        """Bytes scanned for line ends or copied into lines so far: linear in the bytes fed
        (what the tests check, in place of timing)."""

    def feed(self, data: bytes) -> list[Any]:
        parts = self._parts
        # (a CR is only ever whitespace between JSON tokens: passed on, it would be the only
        # CR the client sees, whose lines the gateway ends with LF alone)
        # (``find``, not ``search.holds``: the same search, a call less each read)
        self.whole = not parts and data[-1:] == b"\n" and self._scanner is None \
            and data.find(b"\r") < 0
        out: list[Any] = []
        start, size = 0, len(data)
        find = data.find
        if parts:
            nl = find(b"\n")
            if nl < 0:
                self.scanned += len(data)
                self._hold(data)
                return out
            parts.append(data[:nl])
            line = b"".join(parts)
            parts.clear()
            self._held = 0
            self.scanned += len(line)
            self._line(line, out)
            start = nl + 1
        text = self._text
        if text is not None and text.runs:
            # A Slot may be followed by more frames of its template: read at once
            while (nl := find(b"\n", start)) >= 0:
                self._line(data[start:nl], out)
                start = nl + 1
                # (no run without a frame after this one: none looked for at the read's end)
                if start < size and out and type(out[-1]) is Slot and self._scanner is None:
                    run = text.run(data, start, b"", b"\n", self._max_line)
                    if run is not None:
                        out.append(run)
                        start = run.end
        else:
            while (nl := find(b"\n", start)) >= 0:
                self._line(data[start:nl], out)
                start = nl + 1
        self.scanned += size
        if start < size:
            self._hold(data[start:] if start else data)
        return out

    def _hold(self, piece: bytes) -> None:
        self._parts.append(piece)
        self._held += len(piece)
        if self._held > self._max_line:
            raise FramingError(f"a line is longer than {self._max_line} bytes")

    def finish(self) -> list[Any]:
        """The body ended: a last line without ``\n`` still counts; an unfinished value is an
        error."""
        out: list[Any] = []
        rest = b"".join(self._parts)
        self._parts.clear()
        self._held = 0
        if rest:
            self._line(rest, out)
        if self._scanner is not None and self._scanner.pending:
            self._scanner = None
            raise FramingError("the stream ended inside a JSON value")
        return out

    def _line(self, line: bytes, out: list[Any]) -> None:
        # Checked here too, not only on the unfinished tail, so that a long line is refused
        # however the reads happen to split it.
        if len(line) > self._max_line:
            raise FramingError(f"a line is longer than {self._max_line} bytes")
        if self._scanner is None or not self._scanner.pending:
            try:
                value = orjson.loads(line) if self._text is None \
                    else self._text.read(line, "message")
            except orjson.JSONDecodeError:
                if not line.strip(_WS):
                    self.whole = False  # a blank line: no value, nothing to pass on
                    return
            else:
                out.append(Verbatim(value, line) if self._verbatim and type(value) is not Slot
                           else value)
                return
            self._scanner = _Scanner()
        self.whole = False
        scanner = self._scanner
        for piece in scanner.feed(line + b"\n"):
            try:
                value = orjson.loads(piece)
            except orjson.JSONDecodeError as e:
                raise FramingError(f"a line is not JSON ({e})") from e
            out.append(Verbatim(value, piece) if self._verbatim else value)
        if scanner.size > self._max_line:
            raise FramingError(f"a value is longer than {self._max_line} bytes")
