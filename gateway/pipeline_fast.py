"""Fast paths beside the plain stream path of :mod:`gateway.pipeline`, each switchable, each giving
the very bytes the plain path gives (``tests/test_accelerators.py`` runs every pair of registered
dialects both ways).

The accelerators, by name (:data:`ACCELERATORS`):

``forward``
    On an identity route, a read made of whole frames, every payload of it passed on, is sent as
    the very bytes that came: the framing reader proved them the frames the plain path would
    write (:attr:`gateway.framing.PayloadReader.whole`), so none is built.
``templates``
    An upstream dialect that names where a text-only chunk holds its text (``text_path``) has
    such chunks read without parsing them, once one was (:mod:`gateway.framing.template`): its
    decoder reads the first of them, and the dialect promises it reads the others alike.
``runs``
    With ``templates``: the text frames that follow one another in a read are read at once (a
    :class:`TextRun`), passed on as their bytes on an identity route, or written by an encoder
    that takes their texts as they are (``plain_texts``) on another; a whole answer assembled
    from a stream appends their texts at once. On a translating route, the texts of the other
    frames that follow one another in a read (parsed, or read by a template that gives no
    runs), each decoded as its text alone and a plain string body (no quote, backslash or
    control character), are written at once by such an encoder too.

:func:`stream_translator` and :func:`stream_assembler` build the plain path's objects with the
accelerators asked for (all of them by default).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from gateway.canonical import ChatRequest, StreamError, StreamEvent, StreamStart, TextDelta
from gateway.carry import Policies
from gateway.dialects import Dialect
from gateway.framing import (
    Named,
    Payload,
    Slot,
    SniffingReader,
    TextRun,
    Verbatim,
    slot_payload,
)
from gateway.framing.jsonlines import DEFAULT_MAX_LINE
from gateway.framing.search import holds
from gateway.framing.template import TemplateMemory
from gateway.pipeline import (
    DialectPair,
    Scrub,
    StreamAssembler,
    StreamDecoding,
    StreamTranslator,
    optional,
)

__all__ = [
    "ACCELERATORS",
    "Accelerate",
    "FastStreamAssembler",
    "FastStreamTranslator",
    "TemplateDecoding",
    "accelerators",
    "stream_assembler",
    "stream_translator",
    "template_memory",
]

ACCELERATORS: frozenset[str] = frozenset({"forward", "templates", "runs"})
"""Every accelerator's name (see the module's docstring)."""

_NOT_PLAIN_TEXT = re.compile(r'["\\\x00-\x1f\ud800-\udfff]')
"""What a text may not hold to be written as the body of a JSON string as it is (as the text of
a :class:`TextRun`, ``gateway.framing.template``, never does): a quote, a backslash, a control
character, or a lone surrogate (not UTF-8, and no JSON writer's)."""

Accelerate = bool | Iterable[str]
"""``True``: every accelerator; ``False``: none (the plain path); or the names of those to use."""


def accelerators(accelerate: Accelerate) -> frozenset[str]:
    """The accelerators ``accelerate`` asks for; :class:`ValueError` for an unknown name."""
    if accelerate is True:
        return ACCELERATORS
    if accelerate is False:
        return frozenset()
    chosen = frozenset(accelerate)
    unknown = chosen - ACCELERATORS
    if unknown:
        raise ValueError(f"unknown stream accelerators: {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted(ACCELERATORS))}")
    return chosen


_MEMORIES: dict[int, tuple[object, TemplateMemory]] = {}
"""Each source's :class:`TemplateMemory`, by the source's identity (kept with it, so that its
identity is never another's while its entry lives)."""
_MEMORIES_KEPT = 1024
"""At most this many sources (a reload's new upstreams are new sources: the old ones' entries
are let go when there are too many, at the cost of one template learned again per source)."""


def template_memory(source: object | None) -> TemplateMemory | None:
    """The :class:`TemplateMemory` of ``source`` (what a stream's frames come from: its
    upstream's configuration), made on first use; ``None`` for no source."""
    if source is None:
        return None
    kept = _MEMORIES.get(id(source))
    if kept is not None and kept[0] is source:
        return kept[1]
    if len(_MEMORIES) >= _MEMORIES_KEPT:
        _MEMORIES.clear()
    memory = TemplateMemory()
    _MEMORIES[id(source)] = (source, memory)
    return memory


def stream_translator(
    upstream: Dialect, client: Dialect, req: ChatRequest, *,
    max_size: int = DEFAULT_MAX_LINE, policy: Policies = "reject", scrub: Scrub | None = None,
    accelerate: Accelerate = True, custom_tools: str = "native", source: object | None = None,
) -> StreamTranslator:
    """A :class:`StreamTranslator` with the accelerators asked for (the plain one with none).
    ``source``: what the stream comes from (its upstream's configuration), whose earlier streams'
    template its text frames are tried on first (``templates``)."""
    chosen = accelerators(accelerate)
    if not chosen:
        return StreamTranslator(upstream, client, req, max_size=max_size, policy=policy,
                                scrub=scrub, custom_tools=custom_tools)
    return FastStreamTranslator(upstream, client, req, max_size=max_size, policy=policy,
                                scrub=scrub, accelerators=chosen, custom_tools=custom_tools,
                                memory=template_memory(source))


def stream_assembler(upstream: Dialect, max_size: int = DEFAULT_MAX_LINE,
                     scrub: Scrub | None = None, *,
                     accelerate: Accelerate = True,
                     source: object | None = None) -> StreamAssembler:
    """A :class:`StreamAssembler` that reads text frames by their template, and runs of them at
    once, when asked (``forward`` is of no use to a whole answer). ``source``: as for
    :func:`stream_translator`."""
    chosen = accelerators(accelerate)
    decoding = None
    if "templates" in chosen:
        decoding = TemplateDecoding.of(upstream, max_size, scrub,
                                       memory=template_memory(source))
        if decoding is not None and "runs" in chosen:
            return FastStreamAssembler(upstream, max_size, scrub, decoding=decoding)
    return StreamAssembler(upstream, max_size, scrub, decoding=decoding)


def template_reader(upstream: Dialect, max_size: int, verbatim: bool,
                    memory: TemplateMemory | None = None) -> SniffingReader | None:
    """A framing reader that reads ``upstream``'s text frames by their template (the one
    ``memory`` holds first, when given), or ``None`` when its dialect names no ``text_path``."""
    path = optional(upstream, "text_path")
    if path is None:
        return None
    return SniffingReader(max_size, named=upstream.named_events, text_path=path,
                          counter_path=optional(upstream, "counter_path"),
                          number_paths=optional(upstream, "number_paths") or (),
                          string_paths=optional(upstream, "string_paths") or (),
                          stream_string_paths=optional(upstream, "stream_string_paths") or (),
                          verbatim=verbatim, memory=memory)


def _text_alone(event: StreamEvent, text: str) -> bool:
    """``event == TextDelta(text)``, without building one to compare."""
    return (type(event) is TextDelta and event.text == text and event.agent is None
            and event.message_id is None)


def _first_of_message(event: StreamEvent, text: str) -> bool:
    """``event`` is ``text`` as the first text of a message the upstream named."""
    return (type(event) is TextDelta and event.text == text and event.agent is None
            and event.message_id is not None)


class TemplateDecoding(StreamDecoding):
    """:class:`StreamDecoding` whose reader reads text frames by their template (a
    :class:`Slot`), and, when asked (:meth:`allow_runs`), runs of them at once (a
    :class:`TextRun`). What a :class:`Slot` means its decoder confirms on the first of a
    template; the others it is not given (``again`` tells a decoder that counts them)."""

    __slots__ = ("_again", "_again_frame", "_text_alone", "ran")

    def __init__(self, upstream: Dialect, max_size: int, scrub: Scrub | None,
                 reader: SniffingReader) -> None:
        super().__init__(upstream, max_size, scrub, reader=reader)
        self._text_alone = False
        """The last payload decoded was a :class:`Slot` its decoder read as its text alone."""
        self.ran = 0
        """Frames taken in runs (:meth:`take_run`), which no decoder was given: what the
        accelerator spared, for tests and profiles."""
        self._again: Callable[[int], None] | None = optional(self._decoder, "again")
        """A decoder that counts what a text frame gave (optional) is told of each text frame
        read by the template, which it is not given to decode."""
        self._again_frame: Callable[[Slot], None] | None = optional(self._decoder, "again_frame")
        """A decoder that keeps numbers its text frames carry (optional) is given the last text
        frame read by the template, to parse if it needs them."""

    @classmethod
    def of(cls, upstream: Dialect, max_size: int, scrub: Scrub | None, *,
           verbatim: bool = False, memory: TemplateMemory | None = None) -> TemplateDecoding | None:
        """One for ``upstream``, or ``None`` when its dialect names no ``text_path``."""
        reader = template_reader(upstream, max_size, verbatim, memory)
        return None if reader is None else cls(upstream, max_size, scrub, reader)

    def allow_runs(self, on: bool = True) -> None:
        """Whether the caller takes :class:`TextRun` s (:meth:`take_run`)."""
        self._reader.allow_runs(on)

    def take_run(self, run: TextRun) -> bool:
        """The frames of ``run`` are text alone, as the :class:`Slot` right before them was
        (the dialect's promise, with ``text_path``): counted as read, and ``True``. ``False``:
        the caller reads its first frame alone and offers the others again
        (:meth:`TextRun.split`)."""
        if not self._text_alone or self.ended:
            return False
        self.events += run.count
        self.ran += run.count
        if self._again is not None:
            self._again(run.chars)
        if self._again_frame is not None:
            self._again_frame(run.last())
        return True

    def decode(self, payload: Any) -> list[StreamEvent]:
        if type(payload) is not Slot:
            self._text_alone = False
            self.events += 1  # (StreamDecoding.decode, without a call more each payload)
            return self._decoded(payload.payload if type(payload) is Verbatim else payload)
        self.events += 1
        # (a Slot with its parsed value is the first of a template just learned, maybe of
        # another shape than the one confirmed: its decoder reads it, as it read that one's)
        if self._text_alone and payload.value is None:
            if self._again is not None:
                self._again(len(payload.text))
            if self._again_frame is not None:
                self._again_frame(payload)
            return [TextDelta(payload.text)]
        events = self._decoded(slot_payload(payload))
        # The decoder read this frame as its text alone: it reads so every frame of the same
        # template that follows it (the dialect's promise, with ``text_path``), until another
        # payload comes between and may change what it expects. If it did not, the template is
        # not one of text frames: every frame is parsed from now on.
        # A decoder that holds its start until the first content (to send sources that come
        # before the text with it) releases it with that frame: the frames after it are still
        # text alone.
        # A decoder that gives a message's first text with the message's id (AG-UI's first
        # content event) promises nothing of that frame: the template is kept, and its next
        # frame decoded in full to confirm.
        starts = bool(events) and (len(events) == 1
                                   or all(type(e) is StreamStart for e in events[:-1]))
        self._text_alone = starts and _text_alone(events[-1], payload.text)
        if not self._text_alone and not (starts and _first_of_message(events[-1], payload.text)):
            self._reader.drop_template()
        return events


def _taken(runs: TemplateDecoding, run: TextRun, payloads: list[Any], at: int) -> bool:
    """Whether ``runs`` takes ``run`` (a read's payload, the next ones from ``at``). One it does
    not take is read as it would have been: its first frame alone, then the others offered
    again as a run (both put back at ``at``); a run is taken once a frame was read as text
    alone (a message's first text, named by its id, is not)."""
    if runs.take_run(run):
        return True
    first, rest = run.split()
    payloads[at:at] = (first,) if rest is None else (first, rest)
    return False


class FastStreamTranslator(StreamTranslator):
    """:class:`StreamTranslator` with accelerators (see the module's docstring): the same bytes,
    the same state after each read. A run its decoding does not take is read frame by frame,
    until its decoding would take the rest (:meth:`TextRun.split`)."""

    __slots__ = ("_batch", "_forward", "_plain", "_reader", "_runs", "batched")

    def __init__(
        self, upstream: Dialect, client: Dialect, req: ChatRequest, *,
        max_size: int = DEFAULT_MAX_LINE, policy: Policies = "reject", scrub: Scrub | None = None,
        accelerators: frozenset[str] = ACCELERATORS, custom_tools: str = "native",
        memory: TemplateMemory | None = None,
    ) -> None:
        pair = DialectPair.of(upstream, client)
        same = pair.same
        path = pair.text_path if "templates" in accelerators else None
        reader = SniffingReader(max_size, named=pair.named, text_path=path,
                                counter_path=pair.counter_path,
                                number_paths=pair.number_paths,
                                string_paths=pair.string_paths,
                                stream_string_paths=pair.stream_string_paths, verbatim=same,
                                memory=memory)
        decoding = StreamDecoding(upstream, max_size, scrub, reader=reader) if path is None \
            else TemplateDecoding(upstream, max_size, scrub, reader)
        self._reader = reader
        """Its :attr:`~gateway.framing.SniffingReader.whole` says whether a read may be
        forwarded as it came."""
        super().__init__(upstream, client, req, max_size=max_size, policy=policy, scrub=scrub,
                         decoding=decoding, custom_tools=custom_tools, pair=pair)
        self._forward = "forward" in accelerators and same
        self._plain: Callable[[list[bytes]], list[Payload] | None] | None = optional(
            self._encoder, "plain_texts")
        """An encoder that writes the texts of a run as they are (optional: see
        :class:`gateway.dialects.base.StreamEncoder`)."""
        # An identity route reads its text frames only to count them (runs are passed on as
        # their bytes), a translating one to cut their texts out. A cumulative client's encoder
        # keeps the text it was shown, which a run does not replay: its frames are read one by
        # one. A route whose identity waits on the first payload starts without runs.
        self._runs: TemplateDecoding | None = None
        """The decoding that gives runs, when they are read."""
        if "runs" in accelerators and isinstance(decoding, TemplateDecoding) and (
                (self._identity and not client.cumulative_stream) or not same):
            self._runs = decoding
            decoding.allow_runs()
        self._batch = "runs" in accelerators and not same and self._plain is not None
        """A translating route whose encoder takes plain texts: the texts of its text frames in
        a row are written at once, read as runs or not (:meth:`_translate_texts`)."""
        self.batched = 0
        """Texts of frames read one by one (parsed, or by a template) written at once so far:
        what the accelerator spared, for tests and profiles."""

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return b""
        payloads = self._in.payloads(data)
        if isinstance(payloads, StreamError):
            return self._events([payloads])
        if self._batch:
            return self._translate_texts(payloads)
        runs = self._runs
        if runs is None and not self._forward:
            return self._translate(payloads)
        out: list[bytes] = []
        passed: list[Any] = []
        """Payloads passed on as they came whose frames are not built yet."""
        i = 0
        while i < len(payloads):
            payload = payloads[i]
            i += 1
            frame: bytes | None
            if type(payload) is TextRun:
                assert runs is not None  # (only a decoding asked for runs gives them)
                if not _taken(runs, payload, payloads, i):
                    continue
                if self._identity:
                    self._ran(payload)
                    frame = None
                else:
                    frame = self._run(payload)
            else:
                frame = self._payload(payload)
            if frame is None:
                passed.append(payload)
            else:
                out.extend(self._as_it_came(p) for p in passed)
                passed = []
                out.append(frame)
            if self.done:
                break
        if self._forward and passed and not out and i == len(payloads) and self._reader.whole:
            # Every frame of this read passes on as it came, and the read is those frames
            return data
        out.extend(self._as_it_came(p) for p in passed)
        return b"".join(out)

    @property
    def frames_in_runs(self) -> int:
        """Frames taken in runs so far (:attr:`TemplateDecoding.ran`)."""
        return 0 if self._runs is None else self._runs.ran

    def _translate_texts(self, payloads: list[Any]) -> bytes:
        """A translating route's read (:meth:`feed`'s loop, which reads a run the same way):
        the texts of the frames in a row that decode to their text alone, each a plain string
        body (as a :class:`TextRun`'s frames' are), written at once (:meth:`_texts`)."""
        out: list[bytes] = []
        texts: list[TextDelta] = []
        decode = self._in.decode
        plain = _NOT_PLAIN_TEXT.search
        runs = self._runs
        i = 0
        while i < len(payloads):
            payload = payloads[i]
            i += 1
            if type(payload) is TextRun:
                assert runs is not None  # (only a decoding asked for runs gives them)
                if not _taken(runs, payload, payloads, i):
                    continue
                if texts:
                    out.append(self._texts(texts))
                    texts = []
                out.append(self._run(payload))
            else:
                events = decode(payload)
                if len(events) == 1:
                    e = events[0]
                    if type(e) is TextDelta and e.text and e.agent is None \
                            and e.message_id is None and plain(e.text) is None:
                        texts.append(e)
                        continue
                if texts:
                    out.append(self._texts(texts))
                    texts = []
                out.append(self._events(events) if events else b"")
            if self.done:
                break
        if texts:
            out.append(self._texts(texts))
        return b"".join(out)

    def _texts(self, deltas: list[TextDelta]) -> bytes:
        """Plain texts alone, decoded from frames in a row: written by an encoder that takes
        texts as they are, as :meth:`_run` writes a run's, else as :meth:`_events` writes the
        deltas. An encoder that does not take them yet (the first text opens a message) is
        given the first as :meth:`_events` gives it, then the others (as a run not taken is
        split)."""
        if self._plain is None or len(deltas) < 2:
            return self._events([*deltas])
        texts = [d.text.encode() for d in deltas]
        out = b""
        written = self._plain_written(texts, sum([len(d.text) for d in deltas]))
        if written is None:
            out = self._events([deltas[0]])
            deltas, texts = deltas[1:], texts[1:]
            written = None if len(deltas) < 2 else self._plain_written(
                texts, sum([len(d.text) for d in deltas]))
            if written is None:
                return out + self._events([*deltas])
        self.batched += len(deltas)
        return out + written

    def _writes_as_it_came(self, payload: Any) -> bool:
        if type(payload) is Slot:  # (its template's bytes hold no line end: a CR, at most)
            return not holds(payload.raw, b"\r")
        return StreamTranslator._writes_as_it_came(self, payload)

    def _as_it_came(self, payload: Any) -> bytes:
        if type(payload) is Slot:
            return self._frame(payload.raw if payload.event == "message"
                               else Named(payload.event, payload.raw))
        if type(payload) is TextRun:  # its frames, which hold no CR (gateway.framing.template)
            return payload.data[payload.start:payload.end]
        return StreamTranslator._as_it_came(self, payload)

    def _written_again(self, payload: Any) -> bytes:
        if type(payload) is Slot:
            payload = slot_payload(payload)
        return StreamTranslator._written_again(self, payload)

    def _followed(self, payload: Any) -> Any:
        # A frame read by the template and never parsed goes as the Slot it is: the frame
        # followed last but for its text (and counter), as the dialect promised.
        if type(payload) is Slot and payload.value is not None:
            return slot_payload(payload)
        return StreamTranslator._followed(self, payload)

    def _ran(self, run: TextRun) -> None:
        """Identity mode: a run of text frames passed on, counted as :meth:`_pass_through`
        counts each of them."""
        self.text_chars += run.chars
        self.content_started = True
        if self._follow is None:
            # Kept as its length, not as the run: a run holds the read's bytes, which kept for
            # the stream's life would hold every read. Runs are only read for a client whose
            # encoder keeps nothing of the text it wrote (see __init__).
            self._replay.append(run.chars)
        else:
            self._follow(run)
        self._started = True
        self.chunks += run.count

    def _run(self, run: TextRun) -> bytes:
        """A translating route's run of text frames: each the TextDelta decoding it gives (the
        dialect's promise), written by an encoder that takes its texts as they are
        (``plain_texts``) when it can, counted as :meth:`_events` counts their TextDeltas
        (which every gate lets through)."""
        written = self._plain_written(run.texts(), run.chars)
        return self._events([TextDelta(t.decode()) for t in run.texts()]) if written is None \
            else written

    def _plain_written(self, texts: list[bytes], chars: int) -> bytes | None:
        """``texts`` (plain string bodies, ``chars`` characters in all) written by an encoder
        that takes them as they are, and counted as :meth:`_events` counts their TextDeltas
        (which every gate lets through); ``None``, nothing changed, when it does not take them
        now."""
        plain = self._plain
        if plain is None or not self._started or self.done or self._replay:
            return None
        payloads = plain(texts)
        if payloads is None:
            return None
        self.text_chars += chars
        self.content_started = True
        self.chunks += len(payloads)
        return self._frames(payloads)


class FastStreamAssembler(StreamAssembler):
    """:class:`StreamAssembler` whose decoding gives runs of text frames (:class:`TextRun`): a
    run its decoding takes is the TextDeltas decoding its frames gives (the dialect's promise),
    their texts added at once; one it does not take is read frame by frame, until its decoding
    would take the rest. The same answer, error and counts after each read."""

    __slots__ = ("_runs",)

    def __init__(self, upstream: Dialect, max_size: int, scrub: Scrub | None, *,
                 decoding: TemplateDecoding) -> None:
        super().__init__(upstream, max_size, scrub, decoding=decoding)
        self._runs = decoding
        decoding.allow_runs()

    def feed(self, data: bytes) -> None:
        # (StreamDecoding.feed, with runs)
        runs = self._runs
        if runs.ended:
            return
        assembler = self._assembler
        payloads = runs.payloads(data)
        if isinstance(payloads, StreamError):
            assembler.add(payloads)
            return
        for payload in payloads:
            if type(payload) is TextRun:
                self._run(payload)
            else:
                for event in runs.decode(payload):
                    assembler.add(event)
            if runs.ended:
                break

    def _run(self, run: TextRun) -> None:
        """A run taken is its texts added at once (one piece, decoded once: a message's text
        is its pieces joined); one not taken is read as the translator reads it: its first
        frame alone, then the others offered again as a run."""
        runs, assembler = self._runs, self._assembler
        while not runs.take_run(run):
            first, rest = run.split()
            for event in runs.decode(first):
                assembler.add(event)
            if rest is None or runs.ended:
                return
            run = rest
        assembler.add_texts([run.text()])

    @property
    def frames_in_runs(self) -> int:
        """Frames taken in runs so far (:attr:`TemplateDecoding.ran`)."""
        return self._runs.ran
