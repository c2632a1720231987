"""Stream framing: bytes to JSON payloads and back. Knows nothing of dialects.

A dialect only declares which framing it *emits*; what an upstream actually sends is sniffed from
its first bytes, because real backends send JSON lines as ``text/event-stream`` or with no
Content-Type at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple, Protocol, TypeAlias

import orjson

from gateway.errors import FramingError
from gateway.framing.jsonarray import JsonArrayReader, JsonArrayWriter
from gateway.framing.jsonlines import DEFAULT_MAX_LINE, JsonLinesReader, encode_line, encode_lines
from gateway.framing.named_event import Named
from gateway.framing.sse import SSEEvent, SSEReader, encode_event, encode_events
from gateway.framing.template import Slot, TemplateMemory, TemplateReader, TextPath, TextRun
from gateway.framing.verbatim import Verbatim

__all__ = [
    "Framing",
    "Named",
    "Payload",
    "PayloadReader",
    "RawData",
    "SSEEvent",
    "Slot",
    "SniffingReader",
    "TextPath",
    "TextRun",
    "Verbatim",
    "closing",
    "detect_framing",
    "encoder_for",
    "frames_writer",
    "named",
    "slot_payload",
]

Framing = Literal["jsonlines", "sse", "jsonarray"]
"""``jsonarray`` is never sniffed (an upstream's body that starts with ``[`` is read as JSON
lines): a client's request chooses it (:mod:`gateway.framing.jsonarray`)."""


class RawData(NamedTuple):
    """An SSE event whose data is not JSON (e.g. OpenAI's ``[DONE]``); the dialect decides.
    (A named tuple: immutable.)"""

    text: str


def named(event: str, data: Any) -> Named:
    """``Named(event, data)`` (kept: the callers on the hot paths were written against it)."""
    return Named(event, data)


def slot_payload(slot: Slot) -> Any:
    """What the reader would have returned for ``slot``'s frame had it parsed it: its value, as
    a :class:`Named` when its event has a name."""
    value = slot.parsed()
    return value if slot.event == "message" else Named(slot.event, value)


Payload: TypeAlias = bytes | Named
"""What an encoder hands to the framing: JSON bytes, or a named SSE event."""


class PayloadReader(Protocol):
    whole: bool
    """The last read was exactly whole frames, nothing pending before or after it, each written
    as this framing's writer (:func:`encoder_for`) writes the bytes of its payload and nothing
    else: its bytes are those frames written again, and may be passed on as they came."""

    def feed(self, data: bytes) -> list[Any]: ...
    def finish(self) -> list[Any]: ...


_HEADS: dict[str, bytes] = {"message": b"data: "}
"""The bytes before an event's data, by its name, as :func:`encode_event` writes them: kept for
the names streams send (a few a dialect), built once rather than by every stream."""


def _head(name: str) -> bytes:
    head = b"event: " + name.encode() + b"\ndata: "
    if len(_HEADS) < 64 and len(name) <= 64:  # (an upstream's names: a bounded few, short)
        _HEADS[name] = head
    return head


class _SSEPayloadReader:
    __slots__ = ("_max", "_named", "_sse", "_text", "_verbatim", "whole")

    def __init__(self, max_size: int, named: bool, text: TemplateReader | None = None,
                 verbatim: bool = False) -> None:
        self._sse = SSEReader(max_size)
        self._max = max_size
        self._named = named
        self._text = text
        """Reads an event of the plain shapes by the stream's template when it fits."""
        self._verbatim = verbatim
        """Each payload comes as a :class:`Verbatim` (a :class:`Slot` holds its bytes already)."""
        self.whole = False

    def feed(self, data: bytes) -> list[Any]:
        text = self._text
        if text is not None and text.runs:
            read = self._with_runs(data, text)
            if read is not None:
                return read
        if self._named:
            events = self._sse.plain_named(data)
            if events is not None:
                self.whole = self._sse.canonical
                return [self._value(d, n) for n, d in events]
        else:
            plain = self._sse.plain_data(data)
            if plain is not None:
                self.whole = self._sse.canonical
                if self._text is None and not self._verbatim:  # (each value as it parses)
                    return [_payload_of_bytes(d) for d in plain]
                return [self._value(d, "message") for d in plain]
        # Lines of other kinds (comments, ids, data over several lines, CRs) or events cut
        # between reads: never the events written again.
        self.whole = False
        cut = self._sse.cut(data)
        if cut is not None and (cut[0] or cut[2]):
            return self._cut(*cut)
        return self._payloads(self._sse.feed(data))

    def _cut(self, first: bytes, events: bytes, last: bytes) -> list[Any]:
        """A read cut inside events (TCP cuts reads where it likes): the events whole in it
        are read as a read of whole events is (templates, runs), those it cuts by the general
        path."""
        sse = self._sse
        out = self._payloads(sse.feed(first)) if first else []
        out.extend(self.feed(events) if sse.whole_events(events)
                   else self._payloads(sse.feed(events)))
        if last:
            out.extend(self._payloads(sse.feed(last)))
        self.whole = False  # (the read is not only whole events: never forwarded as it came)
        return out

    def finish(self) -> list[Any]:
        return self._payloads(self._sse.finish())

    def _with_runs(self, data: bytes, text: TemplateReader) -> list[Any] | None:
        """As the plain shapes' fast path, event by event, except that the events of the
        stream's template that follow a :class:`Slot` are read at once (a :class:`TextRun`).
        From an event that is not of the plain shapes on, the rest goes the general way (the
        events before it were whole); ``None``, with nothing consumed, if the first is not."""
        sse = self._sse
        if not sse.whole_events(data):
            return None
        out: list[Any] = []
        at, size, named = 0, len(data), self._named
        canonical = True
        self.whole = True  # (until an event's data is mended: see _value)
        while at < size:
            block = sse.plain_block(data, at, named)
            if block is None:
                if not at:
                    return None
                out.extend(self._payloads(sse.feed(data[at:])))
                self.whole = False
                return out
            name, payload, end = block
            head = _HEADS.get(name) or _head(name)
            if canonical:
                canonical = data[at:at + len(head)] == head  # (compiled: no method call)
            at = end
            value = self._value(payload, name)
            out.append(value)
            if at < size and type(value) is Slot:  # (a run needs a frame after this one)
                run = text.run(data, at, head, b"\n\n", self._max)
                if run is not None:  # (its frames are the head, the frame, a blank line)
                    out.append(run)
                    at = run.end
        self.whole = canonical and self.whole
        return out

    def _value(self, data: bytes, event: str) -> Any:
        """The payload of an event of the plain shapes, whose data is ``data``."""
        value: Any
        if len(data) <= _SHORT and (known := _NOT_JSON.get(data)) is not None:
            value = known  # (never a frame of a template either: those are JSON)
        else:
            try:
                value = orjson.loads(data) if self._text is None else self._text.read(data, event)
            except orjson.JSONDecodeError:
                value = _not_json(data)
                if self._verbatim and (read := _as_read(data)) is not data:
                    # The read is then not the frames passed on: never forwarded whole.
                    data = read
                    self.whole = False
            if type(value) is Slot:
                return value
        if event != "message":
            value = Named(event, value)
        return Verbatim(value, data) if self._verbatim else value

    def _payloads(self, events: list[SSEEvent]) -> list[Any]:
        out: list[Any] = []
        for e in events:
            value = _payload(e.data)
            if self._named and e.event != "message":
                value = Named(e.event, value)
            out.append(Verbatim(value, e.data.encode()) if self._verbatim else value)
        return out


def _payload(data: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return RawData(data)


def _payload_of_bytes(data: bytes) -> Any:
    if len(data) <= _SHORT and (known := _NOT_JSON.get(data)) is not None:
        return known
    try:
        return orjson.loads(data)  # no detour through str for the common case
    except orjson.JSONDecodeError:
        return _not_json(data)


_SHORT = 32
"""The longest data :data:`_NOT_JSON` keeps."""
_NOT_JSON: dict[bytes, RawData] = {}
"""Short event data found not to be JSON, and the text it reads as (a stream's closing
``[DONE]``): each stream that ends so would otherwise pay a failed parse, whose exception costs
more than a parse. What a stream sends that no other did (at most :data:`_NOT_JSON_KEPT` of them)
is not kept."""
_NOT_JSON_KEPT = 64


def _as_read(data: bytes) -> bytes:
    """The bytes of what the general path reads ``data`` as: itself when it is UTF-8, else its
    text decoded with replacement (so that an event passed on as it came is what the plain path
    writes, never bytes that are not UTF-8)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode()
    return data


def _not_json(data: bytes) -> Any:
    """What the general path makes of ``data``, which ``orjson.loads`` refused: its text, when
    it is UTF-8 (parsing it again would fail again: a stream's ``[DONE]`` pays one failed parse,
    not two), else the text decoded with replacement, which may then parse."""
    try:
        raw = RawData(data.decode("utf-8"))
    except UnicodeDecodeError:
        return _payload(data.decode("utf-8", "replace"))
    if len(data) <= _SHORT and len(_NOT_JSON) < _NOT_JSON_KEPT:
        _NOT_JSON[data] = raw  # (immutable: shared by the streams that send it)
    return raw


def detect_framing(head: bytes) -> Framing | None:
    """The framing of a body from its first bytes: JSON starts with ``{`` or ``[``; SSE with a
    field name or a comment. ``None`` while only whitespace has arrived."""
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if not stripped:
        return None
    return "jsonlines" if stripped[:1] in (b"{", b"[") else "sse"


def reader_for(framing: Framing, max_size: int = DEFAULT_MAX_LINE, *,
               named: bool = False, text: TemplateReader | None = None,
               verbatim: bool = False) -> PayloadReader:
    """``named``: SSE events with an ``event:`` name other than ``message`` are returned as
    :class:`Named` (for dialects whose events are named). ``text``: frames that fit the
    stream's template come as :class:`Slot` (see :mod:`gateway.framing.template`).
    ``verbatim``: every other payload comes as a :class:`Verbatim`, with its bytes."""
    if framing == "jsonlines":
        return JsonLinesReader(max_size, text, verbatim=verbatim)
    if framing == "jsonarray":
        return JsonArrayReader(max_size)
    return _SSEPayloadReader(max_size, named, text, verbatim)


class SniffingReader:
    """Buffers until the first non-blank byte tells the framing, then delegates."""

    __slots__ = ("_head", "_held", "_max", "_named", "_reader", "_text", "_verbatim", "framing",
                 "whole")

    def __init__(self, max_size: int = DEFAULT_MAX_LINE, *, named: bool = False,
                 text_path: TextPath | None = None, counter_path: TextPath | None = None,
                 number_paths: tuple[TextPath, ...] = (),
                 string_paths: tuple[TextPath, ...] = (), verbatim: bool = False,
                 stream_string_paths: tuple[TextPath, ...] = (),
                 memory: TemplateMemory | None = None) -> None:
        self._text = TemplateReader(text_path, counter_path, number_paths, string_paths,
                                    stream_string_paths, memory) if text_path is not None else None
        """Given the path of a text frame's text (and of its counter, when the stream numbers
        its frames, or of numbers or strings that change from frame to frame), frames that fit
        the template learned from one come as :class:`Slot`, unparsed
        (:mod:`gateway.framing.template`)."""
        self._head: list[bytes] = []
        """The blank reads so far (kept as they came: joined once, when the framing is
        known)."""
        self._held = 0
        self._max = max_size
        self._named = named
        self._verbatim = verbatim
        """Payloads come with their bytes (:class:`Verbatim`)."""
        self._reader: PayloadReader | None = None
        self.framing: Framing | None = None
        self.whole = False
        """As :attr:`PayloadReader.whole` (never for a read that completed the sniffing)."""

    def feed(self, data: bytes) -> list[Any]:
        reader = self._reader
        if reader is not None:
            out = reader.feed(data)
            self.whole = reader.whole
            return out
        fresh = not self._head and not data.startswith(b"\xef\xbb\xbf")
        self.whole = False
        if self._reader is None:
            # All that came before was blank, so the new read alone tells the framing.
            framing = detect_framing(data)
            if framing is None:
                self._head.append(data)
                self._held += len(data)
                if self._held > self._max:  # only blanks, but they are held in memory
                    raise FramingError(f"more than {self._max} blank bytes before any payload")
                return []
            self.framing = framing
            self._reader = reader_for(framing, self._max, named=self._named, text=self._text,
                                      verbatim=self._verbatim)
            if self._head:
                data = b"".join([*self._head, data])
                self._head = []
            if framing == "jsonlines":  # JSON has no BOM; the SSE reader drops its own
                data = data.removeprefix(b"\xef\xbb\xbf")
        out = self._reader.feed(data)
        self.whole = fresh and self._reader.whole  # this read alone began the stream
        return out

    def finish(self) -> list[Any]:
        return [] if self._reader is None else self._reader.finish()

    def allow_runs(self, on: bool) -> None:
        """Whether the caller takes runs of text frames read at once (:class:`TextRun`, after a
        :class:`Slot`; see :mod:`gateway.framing.template`)."""
        if self._text is not None:
            self._text.runs = on

    def drop_template(self) -> None:
        """Frames that fit the template are not text alone (their decoder said): every frame is
        parsed from now on."""
        if self._text is not None:
            self._text.drop()


def encoder_for(framing: Framing) -> Callable[[Payload], bytes]:
    """The function that frames one payload: ``Payload -> bytes`` (for ``jsonarray``, a new
    writer: one per stream, which :func:`closing` ends)."""
    if framing == "jsonarray":
        return JsonArrayWriter()
    return encode_line if framing == "jsonlines" else encode_event


def frames_writer(frame: Callable[[Payload], bytes]) -> Callable[[list[Payload]], bytes]:
    """The function that frames a list of payloads as ``frame`` (from :func:`encoder_for`)
    frames each in turn, joined: at once for lines and events."""
    if frame is encode_line:
        return encode_lines
    if frame is encode_event:
        return encode_events
    return lambda payloads: b"".join([frame(p) for p in payloads])


def closing(frame: Callable[[Payload], bytes]) -> bytes:
    """What ends a stream framed by ``frame`` (an array's ``]``; nothing for lines and events)."""
    return frame.close() if isinstance(frame, JsonArrayWriter) else b""
