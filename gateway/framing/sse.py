"""Server-sent events: an incremental reader and the writer. Knows nothing of dialects.

Follows https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation:
lines end in CRLF, LF or CR (a CR at the end of one read may be the first half of a CRLF split
across reads); ``data:`` lines are joined with ``\\n``; ``:`` starts a comment; ``event:``,
``id:`` (ignored when it holds NUL) and ``retry:`` (digits only) are kept; a blank line
dispatches; an event with no data is not dispatched.

One deliberate leniency: the spec discards an event the stream ends inside; :meth:`finish`
dispatches it, because servers that omit the final blank line are common and dropping their last
event would lose text. A truncated JSON payload still fails where the caller parses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import FramingError

__all__ = ["DEFAULT_MAX_EVENT", "SSEEvent", "SSEReader", "encode_comment", "encode_event"]

DEFAULT_MAX_EVENT = 8 * 1024 * 1024


@dataclass(slots=True, frozen=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


def encode_event(payload: bytes | tuple[str, bytes]) -> bytes:
    """Frame one compact JSON payload (no raw newline in it) as an event; flushed on its own. A
    ``(name, payload)`` pair (:class:`gateway.framing.Named`) gets an ``event:`` line first."""
    if isinstance(payload, bytes):
        return b"data: " + payload + b"\n\n"
    name, data = payload
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


def encode_comment(text: bytes = b"") -> bytes:
    return b":" + text + b"\n\n"


class SSEReader:
    """``feed(bytes) -> events``, ``finish() -> events``; raises :class:`FramingError`."""

    __slots__ = ("_buf", "_cr", "_data", "_event", "_first", "_last_id", "_max", "_retry",
                 "_size")

    def __init__(self, max_event: int = DEFAULT_MAX_EVENT) -> None:
        self._buf = b""
        self._cr = False  # the previous read ended in CR: a leading LF now belongs to it
        self._first = True
        self._data: list[str] = []
        self._size = 0  # of the data so far, with the LF that will join each line
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._max = max_event

    def feed(self, data: bytes) -> list[SSEEvent]:
        if self._cr and data:  # an empty read must not forget the pending CR
            self._cr = False
            if data.startswith(b"\n"):
                data = data[1:]
        buf = self._buf + data if self._buf else data
        if self._first and buf:
            if len(buf) < 3 and b"\xef\xbb\xbf".startswith(buf):
                self._buf = buf
                return []
            self._first = False
            if buf.startswith(b"\xef\xbb\xbf"):
                buf = buf[3:]
        ended_cr = buf.endswith(b"\r")
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        if ended_cr:
            self._cr = True
        out: list[SSEEvent] = []
        for line in lines:
            self._line(line, out)
        if len(self._buf) > self._max:
            raise FramingError(f"an event is longer than {self._max} bytes")
        return out

    @property
    def between_events(self) -> bool:
        """Nothing of an unfinished line or event is held."""
        return not (self._buf or self._data or self._cr or self._event)

    def plain_data(self, data: bytes) -> list[bytes] | None:
        """The data of each event in ``data`` when it holds only whole, plain events (a
        ``data:`` line then a blank line, LF only) and the reader is between events; else
        ``None``, and nothing was consumed: call :meth:`feed`.

        This is the shape nearly every model server sends (OpenAI, chatui backends), and taking
        it without the line-by-line state machine makes an event about five times cheaper. What
        it returns is what :meth:`feed` would have returned as ``SSEEvent.data``, still as bytes.
        """
        if (self._buf or self._data or self._cr or self._event
                or not data.endswith(b"\n\n") or b"\r" in data):
            return None
        blocks = data.split(b"\n\n")
        blocks.pop()  # what follows the last blank line: nothing
        out: list[bytes] = []
        for block in blocks:
            if (not block.startswith(b"data:") or b"\n" in block
                    or len(block) > self._max):
                return None
            out.append(block[6:] if block[5:6] == b" " else block[5:])
        self._first = False  # it began with "data:", so there was no BOM to drop
        return out

    def finish(self) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        if self._buf:
            rest, self._buf = self._buf, b""
            self._line(rest, out)
        self._line(b"", out)
        return out

    def _line(self, raw: bytes, out: list[SSEEvent]) -> None:
        # The size limit holds however the reads split the stream, not only for the unfinished
        # tail of one read.
        if len(raw) > self._max:
            raise FramingError(f"an event is longer than {self._max} bytes")
        if not raw:
            if self._data:
                out.append(SSEEvent("\n".join(self._data), self._event or "message",
                                    self._last_id, self._retry))
            self._data = []
            self._size = 0
            self._event = ""
            return
        line = raw.decode("utf-8", "replace")
        name, colon, value = line.partition(":")
        if colon and not name:
            return  # a comment, e.g. a keep-alive
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            # Counting the joining LFs bounds a flood of empty ``data:`` lines too.
            self._size += len(value) + 1
            if self._size > self._max:
                raise FramingError(f"an event is longer than {self._max} bytes")
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
