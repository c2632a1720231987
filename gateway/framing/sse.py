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
from typing import Final

from gateway.errors import FramingError
from gateway.framing.named_event import Named

__all__ = ["DEFAULT_MAX_EVENT", "SSEEvent", "SSEReader", "encode_comment", "encode_event",
           "encode_events"]

DEFAULT_MAX_EVENT = 8 * 1024 * 1024


@dataclass(slots=True, frozen=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


def encode_event(payload: bytes | Named) -> bytes:
    """Frame one compact JSON payload (no raw newline in it) as an event; flushed on its own. A
    :class:`Named` one gets an ``event:`` line first (in one join: nearly every event of some
    streams is named)."""
    if isinstance(payload, Named):
        return b"".join((b"event: ", payload.event.encode(), b"\ndata: ", payload.data,
                         b"\n\n"))
    return b"data: " + payload + b"\n\n"


def encode_events(payloads: list[bytes | Named]) -> bytes:
    """:func:`encode_event` of each payload in turn, joined: one join, not a call per payload
    (a run of text frames writes twenty at once)."""
    if not payloads:
        return b""
    first = payloads[0]
    if type(first) is not Named:
        try:
            return b"data: " + b"\n\ndata: ".join(payloads) + b"\n\n"  # type: ignore[arg-type]
        except TypeError:  # a Named further on
            pass
    else:
        # Events of one name alone (a run of text deltas): their data joined at once, each
        # between that name's head and the blank line
        event = first.event
        datas: list[bytes] = []
        for p in payloads:
            if type(p) is not Named or p.event != event:
                break
            datas.append(p.data)
        else:
            head = _event_head(event)
            return head + (b"\n\n" + head).join(datas) + b"\n\n"
    parts: list[bytes] = []
    for p in payloads:
        if type(p) is Named:  # (a final class)
            parts.append(_event_head(p.event))
            parts.append(p.data)
        else:
            parts.append(b"data: ")
            parts.append(p)
        parts.append(b"\n\n")
    return b"".join(parts)


def _event_head(event: str) -> bytes:
    """The bytes before the data of an event named ``event``."""
    head = _EVENT_HEADS.get(event)
    if head is None:
        head = b"event: " + event.encode() + b"\ndata: "
        if len(_EVENT_HEADS) < _EVENT_HEADS_KEPT:
            _EVENT_HEADS[event] = head
    return head


_EVENT_HEADS: dict[str, bytes] = {}
"""The bytes before an event's data, by its name: the names a stream writes are few, and the
same in every stream. An upstream's own names pass through here too (an identity route), so
at most :data:`_EVENT_HEADS_KEPT` are kept."""
_EVENT_HEADS_KEPT: Final = 256


def encode_comment(text: bytes = b"") -> bytes:
    return b":" + text + b"\n\n"


class SSEReader:
    """``feed(bytes) -> events``, ``finish() -> events``; raises :class:`FramingError`.

    Linear in the bytes fed, however a line is split: an unfinished line is kept as a list of
    its pieces, each new read is scanned for its end (CR or LF) on its own, and the pieces are
    joined once, when the line ends."""

    __slots__ = ("_cr", "_data", "_event", "_first", "_held", "_last_id", "_max", "_parts",
                 "_retry", "_size", "canonical", "scanned")

    def __init__(self, max_event: int = DEFAULT_MAX_EVENT) -> None:
        self._parts: list[bytes] = []
        """The pieces of an unfinished line (before the first line: of a BOM, at most 2
        bytes)."""
        self._held = 0
        self._cr = False  # the previous read ended in CR: a leading LF now belongs to it
        self._first = True
        self._data: list[str] = []
        self._size = 0  # of the data so far, with the LF that will join each line
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._max = max_event
        self.scanned = 0
        """Bytes scanned for line ends or copied into lines so far: linear in the bytes fed
        (what the tests check, in place of timing)."""
        self.canonical = False
        """The events the last :meth:`plain_data` or :meth:`plain_named` returned were each
        written as :func:`encode_event` writes one (a space after each field's colon, no
        ``event:`` line for an unnamed event): the read is those events written again."""

    def feed(self, data: bytes) -> list[SSEEvent]:
        if self._cr and data:  # an empty read must not forget the pending CR
            self._cr = False
            if data.startswith(b"\n"):
                data = data[1:]
        parts = self._parts
        if self._first:
            if parts:  # at most the first 2 bytes of a BOM
                data = b"".join(parts) + data
                parts.clear()
                self._held = 0
            if not data:
                return []
            if len(data) < 3 and b"\xef\xbb\xbf".startswith(data):
                self._hold(data)
                return []
            self._first = False
            if data.startswith(b"\xef\xbb\xbf"):
                data = data[3:]
        out: list[SSEEvent] = []
        self.scanned += len(data)
        # Line ends are found in the new bytes alone: a CRLF split across reads is the one
        # case that spans two, and ``_cr`` takes care of it.
        ended_cr = data.endswith(b"\r")
        if data.find(b"\r") >= 0:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        tail = lines.pop()
        if ended_cr:
            self._cr = True
        if parts and lines:  # the held line ends in this read: joined once
            parts.append(lines[0])
            lines[0] = b"".join(parts)
            parts.clear()
            self._held = 0
            self.scanned += len(lines[0])
        for line in lines:
            self._line(line, out)
        if tail:
            self._hold(tail)
        return out

    def _hold(self, piece: bytes) -> None:
        self._parts.append(piece)
        self._held += len(piece)
        if self._held > self._max:
            raise FramingError(f"an event is longer than {self._max} bytes")

    def plain_data(self, data: bytes) -> list[bytes] | None:
        """The data of each event in ``data`` when it holds only whole, plain events (a
        ``data:`` line then a blank line, LF only) and the reader is between events; else
        ``None``, and nothing was consumed: call :meth:`feed`.

        This is the shape nearly every model server sends (OpenAI, chatui backends), and taking
        it without the line-by-line state machine makes an event about five times cheaper. What
        it returns is what :meth:`feed` would have returned as ``SSEEvent.data``, still as bytes.
        """
        blocks = self._whole_blocks(data)
        if blocks is None:
            return None
        out: list[bytes] = []
        canonical = True
        for block in blocks:
            if (not block.startswith(b"data:") or block.find(b"\n") >= 0
                    or len(block) > self._max):
                return None
            if block[5:6] == b" ":
                out.append(block[6:])
            else:
                out.append(block[5:])
                canonical = False
        self._first = False  # it began with "data:", so there was no BOM to drop
        self.canonical = canonical
        return out

    def _whole_blocks(self, data: bytes) -> list[bytes] | None:
        """The events of ``data`` (the text between blank lines) when it holds whole events with
        LF line ends and the reader is between events; else ``None``: the fast paths' shared
        precondition."""
        if (self._parts or self._data or self._cr or self._event
                or data[-2:] != b"\n\n" or data.find(b"\r") >= 0):
            return None
        blocks = data.split(b"\n\n")
        if blocks.pop():  # what follows the last blank line: nothing, or a line more (the
            return None   # general path's, which writes no event of it)
        return blocks

    def plain_block(self, data: bytes, at: int, named: bool) -> tuple[str, bytes, int] | None:
        """One event of :meth:`plain_data` (or, ``named``, :meth:`plain_named`) read from
        ``data[at:]`` alone: ``(name, data, where the next event begins)``, or ``None`` (nothing
        consumed). For a caller that skips some events by reading them another way; it checks
        :meth:`whole_events` first. The stream has begun once one is read."""
        # Found line by line, each end by a one-byte find (memchr), then a field name compared
        # as a slice of its few bytes (compiled, cheaper than ``startswith`` at an offset, a
        # method call that parses its arguments) and a byte by its index: a two-byte find, a
        # split or ``in`` would scan the event again, byte by byte; an event is read per call.
        end = data.find(b"\n", at)
        if end < 0:
            return None
        begin, name = at, "message"
        if named and data[at:at + 6] == b"event:":
            # (the line's end is within ``data``: indexing it is safe when the value is empty)
            value = at + 7 if data[at + 6] == 32 else at + 6  # (one space after the colon)
            name = data[value:end].decode("utf-8", "replace") or "message"
            at = end + 1
            end = data.find(b"\n", at)
            if end < 0:
                return None
        # a data line, then the blank line that ends the event
        if data[at:at + 5] != b"data:" or end + 1 >= len(data) or data[end + 1] != 10 \
                or end - begin > self._max:
            return None
        self._first = False  # it began with a field name, so there was no BOM to drop
        return name, data[at + 6 if data[at + 5] == 32 else at + 5:end], end + 2

    def cut(self, data: bytes) -> tuple[bytes, bytes, bytes] | None:
        """``data`` as ``(first, whole, last)``: the end of an event begun in an earlier read,
        whole events, and the start of an event a later read ends, for a read that does not
        hold only whole events (TCP cuts reads where it likes); ``None`` when it holds no whole
        event past the one it ends, or CRs (the general path reads it). The caller feeds
        ``first`` to :meth:`feed`, then ``whole`` the fast way if :meth:`whole_events` says the
        reader is between events, and ``last`` to :meth:`feed`."""
        if self._cr or data.find(b"\r") >= 0:
            return None
        start = 0
        if self._parts or self._data or self._event:
            # (the first bytes of a BOM held at the stream's start are such a begun event:
            # feed joins them to ``first``)
            if not self._parts and data.startswith(b"\n"):
                start = 1  # (the read before ended a line: this LF is the blank line)
            else:
                start = data.find(b"\n\n")
                if start < 0:
                    return None
                start += 2
        end = data.rfind(b"\n\n", start)
        if end < 0 or end + 2 == start:
            return None
        return data[:start], data[start:end + 2], data[end + 2:]

    def whole_events(self, data: bytes) -> bool:
        """``data`` holds whole events with LF line ends and the reader is between events: the
        fast paths' shared precondition."""
        # (``find`` on the hot paths here, not ``search.holds``: the same search, a call less;
        # and a slice, not ``endswith``, which compiled is a method call)
        return not (self._parts or self._data or self._cr or self._event
                    or data[-2:] != b"\n\n" or data.find(b"\r") >= 0)

    def plain_named(self, data: bytes) -> list[tuple[str, bytes]] | None:
        """As :meth:`plain_data`, for streams of named events: each event a ``data:`` line,
        optionally after one ``event:`` line, then a blank line; ``(name, data)`` for each
        (``message`` when unnamed, as :meth:`feed` says). The shape of the Anthropic and
        Responses streams, three lines an event, which the line-by-line state machine reads at
        about three times the cost of a plain one."""
        blocks = self._whole_blocks(data)
        if blocks is None:
            return None
        out: list[tuple[str, bytes]] = []
        canonical = True
        for block in blocks:
            if len(block) > self._max:
                return None
            if block.startswith(b"data:"):
                name, line = "message", block
            elif block.startswith(b"event:"):
                head, _, line = block.partition(b"\n")
                spaced = head[6:7] == b" "
                value = head[7:] if spaced else head[6:]
                name = value.decode("utf-8", "replace") or "message"
                # (written again, it would have its space, and no name when it is "message")
                canonical = canonical and spaced and name != "message" \
                    and name.encode() == value
            else:
                return None
            if not line.startswith(b"data:") or line.find(b"\n") >= 0:
                return None
            if line[5:6] == b" ":
                out.append((name, line[6:]))
            else:
                out.append((name, line[5:]))
                canonical = False
        self._first = False  # it began with a field name, so there was no BOM to drop
        self.canonical = canonical
        return out

    def finish(self) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        if self._parts:
            rest = b"".join(self._parts)
            self._parts.clear()
            self._held = 0
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
