"""A stream's text frames, read without parsing them. Knows nothing of dialects.

Nearly every frame of a model's stream is the frame before it with another piece of text, e.g.
``{"choices":[{"delta":{"content":"tok"},"index":0}],"id":"c1","created":1}``. Parsing one builds
its dicts and lists only for the caller to read one string and throw the rest away: most of what
a stream frame costs the gateway.

:class:`FrameTemplate` is the bytes before and after that string in one such frame, learned once
the frame was parsed (:func:`learn`). A later frame made of those same bytes around a plain string
body (no quote, no backslash, no control character, valid UTF-8, not empty) is, by JSON's
grammar, the same value with that string changed and nothing else: a string token ends at its
first unescaped quote, so the tokens before and after it are the learned frame's own. Its text is
then read from the bytes (:class:`Slot`). Any other frame is parsed as before.

Which string is the text is the caller's to say, as a path into the value. A template is learned
only where that string's JSON form occurs once in the frame and putting another string in its
place changes the value at that path and nothing else (checked by parsing the substituted frame
once): an upstream that spells its strings another way, or repeats the text elsewhere in the
frame, is simply parsed frame by frame.

A stream may also number its frames (``"sequence_number":7``): the caller then gives the path of
that counter too, and the template holds a slot for it, filled with the number that follows the
last frame's. A frame is read by its template only when it carries exactly that number, spelled
as JSON spells an integer (the digits alone, as a compact writer puts them); any other number is
parsed, and a parsed frame's counter sets the one expected next. An integer token ends at its
first non-digit, so, as for the text, the tokens around it are the learned frame's own.

A stream may also carry numbers that change from frame to frame, any of them (Gemini's running
usage counts): the caller gives their paths, and the template holds a slot for each one found
after the text, which any integer spelled as JSON spells it (``0`` or digits without a leading
zero) fills. A frame of such a template is, in order, the prefix, the text's plain string body,
each literal piece followed by a number, and the last piece; it holds those numbers at those
paths and is the learned frame's value otherwise, for the reasons above. Its caller reads the
numbers, when it needs them, by parsing it (:meth:`Slot.parsed`).

A stream may also carry strings that change from frame to frame (Ollama's ``created_at``, a time
stamp on every line; OpenAI's ``obfuscation``, random padding) or from stream to stream (Gemini's
``responseId``): the caller gives their paths, and the template holds a slot for each one found
(its JSON spelling, quotes included, at its first place in the prefix that no other slot took, else
at its first place after the text that none took, proved by the same one parse). A frame of such a
template is, in order, each literal piece followed by a plain ASCII string body (printable, no
quote or backslash, perhaps empty), the last piece, then the text and the rest as above, where a
slot after the text holds such a body as a number slot holds a number: a string token ends at its
first unescaped quote, so, again, the tokens around each slot are the learned frame's own. A run of
frames with slots before their text (and none after it) is cut frame by frame at the framing's
tail, each frame read as one read alone is, and its texts then proved at once as above.

A template says nothing of the stream it was learned from but its bytes: a source's next stream
(:class:`TemplateMemory`) tries it first, and learns its own only when its frames do not fit.

What a :class:`Slot` means (a text-only event) is not this module's to say: the stream's decoder
confirms it (``gateway.pipeline_fast.TemplateDecoding``).

**Runs.** A read that holds a whole answer holds twenty such frames in a row, and reading them one
at a time (cut out, compared, a :class:`Slot` each) is most of what an identity route's stream
costs the gateway. When its caller asks (:attr:`TemplateReader.runs`), the frames of the template
that follow a :class:`Slot` in the same read are read at once, as a :class:`TextRun`
(:meth:`FrameTemplate.run`). With ``H`` the framing's head and the template's prefix, ``T`` its
suffix and the framing's tail, and ``B = T + H`` (the bytes between two frames), the bytes from a
frame's start to a frame's end are ``n`` frames of the template exactly when they are ``H``, then
``n`` texts joined by ``B``, then ``T``, and each text is a plain string body (as above). The
frames are cut at the framing's own bytes between them (a line end, a blank line and ``data:``:
short, so found fast), each one's text is what lies between the prefix and the suffix, and one
comparison of the texts joined by ``B`` with the bytes proves the cut; the texts, joined, are
checked for quotes, backslashes and control characters at once (one search over the text alone,
not over the frames) and decoded at once, which proves them UTF-8 and counts their characters.
Whatever the cut found, the bytes are the texts joined by ``B``: a run is never wrong, at worst
shorter or not found (its frames are then read one by one): it is the frames from the first on
up to the first that does not fit (no prefix or suffix, an empty text, or one no plain string
body). A template with slots after its text has its last piece as its suffix: each frame's bytes
between the prefix and that piece must be a plain text, then each other piece followed by a
number spelled as JSON spells one or a plain ASCII string body, to their end (as a frame read
alone is matched); what follows each text is kept, to give each frame's bytes. A template
that numbers its frames after their text (a counter slot in its suffix: ``before``, the number,
the frame's end) is cut at each ``before`` instead: each piece must be the next number, spelled
as JSON spells it, ``B`` and the next text; the last one, the last number alone (such a run is
all the frames cut, or none). Frames numbered before their text are read one by one.
"""

from __future__ import annotations

import re
from typing import Any, Final, TypeAlias

import orjson

from gateway.framing.search import holds

__all__ = ["FrameTemplate", "Slot", "TemplateMemory", "TemplateReader", "TextPath", "TextRun",
           "learn"]

TextPath: TypeAlias = tuple[str | int, ...]
"""Keys and list indexes from a frame's value to its text, e.g. ``("delta", "text")``."""

_NOT_PLAIN = re.compile(rb'["\\\x00-\x1f]')
"""What a string body read from the bytes may not hold: a quote or a backslash (its token would
end, or need unescaping) or a control character (not valid in a JSON string)."""

_DELIMITS = frozenset(b' \t\r\n:,[]{}')
"""The bytes that may stand before and after a number token in JSON (its neighbours)."""

_COUNTER_SPOTS = 4
"""Places where a counter's digits occur in a frame that learning tries (a parse each)."""

_NUMBER: Final = 0
"""What a slot after the text holds: a number, a string that may change from frame to frame,
or a string the same on every frame of a stream (:meth:`FrameTemplate.specialized`)."""
_STRING: Final = 1
_STREAM: Final = 2

_LEARN_TRIES = 4
"""Frames with text at the path that a stream may try to learn a template from: an upstream whose
frames never fit one costs a few parses more, not one per frame."""


class Slot:
    """A frame read by its template: its text and its raw JSON bytes, the SSE event it came in
    (``message`` when unnamed), its counter when the template has one, and its parsed value when
    it was parsed anyway (the frame the template was learned from)."""

    __slots__ = ("counter", "event", "raw", "text", "value")

    def __init__(self, text: str, raw: bytes, event: str, value: Any = None,
                 counter: int | None = None) -> None:
        self.text = text
        self.raw = raw
        self.event = event
        self.value = value
        self.counter = counter

    def parsed(self) -> Any:
        """The frame's JSON value (parsed now, if it was not)."""
        if self.value is None:
            self.value = orjson.loads(self.raw)
        return self.value

    def __repr__(self) -> str:
        return f"Slot({self.text!r}, {self.raw!r}, {self.event!r})"


class TextRun:
    """Frames of one template in a row, read at once (see the module's docstring): the
    :class:`Slot` s reading them one by one would have given (:meth:`slots`), held as the bytes
    they came in, ``data[start:end]``, with how many frames (:attr:`count`), how many characters
    of text (:attr:`chars`) they hold and, when the template numbers its frames, the number of
    the last one (:attr:`counter`)."""

    __slots__ = ("_framed", "_leads", "_numbers", "_texts", "chars", "count", "counter", "data",
                 "end", "event", "start")

    def __init__(self, data: bytes, start: int, end: int, count: int, chars: int, event: str,
                 framed: _Framed, texts: list[bytes], numbers: list[bytes] | None = None,
                 leads: list[bytes] | None = None) -> None:
        self.data = data
        self.start = start
        self.end = end
        self.count = count
        self.chars = chars
        self.event = event
        self._framed = framed
        self._texts = texts
        self._numbers = numbers
        """With number slots, each frame's bytes between its text and its last piece."""
        self._leads = leads
        """With string slots, each frame's bytes before its text."""
        self.counter: int | None = None
        """The last frame's number, when the template numbers its frames."""

    def texts(self) -> list[bytes]:
        """Each frame's text, as the bytes of its plain JSON string body."""
        return self._texts

    def text(self) -> str:
        """All the run's text."""
        return b"".join(self.texts()).decode()

    def slots(self) -> list[Slot]:
        """What reading the frames one by one would have given."""
        return [self._slot(k) for k in range(self.count)]

    def last(self) -> Slot:
        """Its last frame, as reading it alone gives it."""
        return self._slot(self.count - 1)

    def split(self) -> tuple[Slot, TextRun | None]:
        """Its first frame, as reading it alone gives it, and the run of the others (``None``:
        it has no other)."""
        return self._slot(0), (self.rest(1) if self.count > 1 else None)

    def _slot(self, k: int) -> Slot:
        """Its ``k``-th frame, as reading it alone gives it."""
        framed, text = self._framed, self._texts[k]
        if self._leads is not None:
            return Slot(text.decode(), self._leads[k] + text + framed.suffix, self.event)
        if self._numbers is not None:
            return Slot(text.decode(), b"".join((framed.prefix, text, self._numbers[k],
                                                 framed.suffix)), self.event)
        if self.counter is None:
            return Slot(text.decode(), framed.prefix + text + framed.suffix, self.event)
        number = self.counter - self.count + 1 + k
        return Slot(text.decode(), b"".join((framed.prefix, text, framed.before,
                                             str(number).encode(), framed.suffix)),
                    self.event, None, number)

    def rest(self, k: int) -> TextRun:
        """The run of its frames from the ``k``-th on (``0 < k < count``): the same bytes from
        where that frame starts, the same last frame. Each frame before it is the framing's
        head, the prefix, its text, (``before`` and its number,) the suffix and the tail."""
        framed, texts = self._framed, self._texts
        skipped = texts[:k]
        start = self.start + k * (len(framed.first) + len(framed.last) + len(framed.before)) \
            + sum(map(len, skipped))
        if self.counter is not None:
            first = self.counter - self.count + 1
            start += sum(len(str(first + j)) for j in range(k))
        numbers, leads = self._numbers, self._leads
        if numbers is not None:
            start += sum(map(len, numbers[:k]))
        if leads is not None:
            start += sum(map(len, leads[:k]))
        run = TextRun(self.data, start, self.end, self.count - k,
                      self.chars - len(b"".join(skipped).decode()), self.event, framed, texts[k:],
                      None if numbers is None else numbers[k:],
                      None if leads is None else leads[k:])
        run.counter = self.counter
        return run

    def __repr__(self) -> str:
        return f"TextRun({self.count} frames, {self.data[self.start:self.end]!r})"


class FrameTemplate:
    """The bytes around the text of one frame, and around its counter when it has one (see the
    module's docstring)."""

    __slots__ = ("_after", "_before", "_counted_first", "_framed", "_lead", "_least", "_pieces",
                 "_prefix", "_strings", "_suffix", "count", "counter", "event")

    def __init__(self, prefix: bytes, suffix: bytes, event: str,
                 counter: tuple[bytes, bytes, bool, int] | None = None,
                 pieces: list[bytes] | None = None, lead: list[bytes] | None = None,
                 strings: list[int] | None = None) -> None:
        self._pieces = pieces
        """With slots after the text, the bytes around them (one more than there are slots):
        the first starts with the text's closing quote."""
        self._strings = strings
        """With string slots among those, what each slot is: :data:`_NUMBER`, :data:`_STRING`
        or :data:`_STREAM` (a string: the piece before it ends with its opening quote, the one
        after starts with its closing quote); ``None``: all are numbers."""
        self._lead = lead
        """With string slots, the bytes before the text around them (one more than there are
        slots): the first ends with the first slot's opening quote, each other starts with the
        closing quote of the slot before it, and the last ends with the text's opening quote."""
        self._prefix = prefix
        self._suffix = suffix
        self.event = event
        self.counter = counter is not None
        """The template has a counter slot."""
        self.count = -1
        """The counter of the last frame of the stream seen."""
        self._before = self._after = b""
        self._counted_first = False
        if counter is not None:
            # (the bytes before and after the counter's digits on their side of the text,
            # whether that side is the prefix, and the learned frame's counter)
            self._before, self._after, self._counted_first, count = counter
            self.counted(count)
        self._least = len(self._prefix) + len(self._suffix)
        self._framed: _Framed | None = None
        """What :meth:`run` counts with, for the framing it was last given."""

    def counted(self, count: int) -> None:
        """A frame of the stream carried ``count``: the next one to match carries the next."""
        if not self.counter:
            return
        self.count = count
        spelled = b"".join((self._before, str(count + 1).encode(), self._after))
        if self._counted_first:
            self._prefix = spelled
        else:
            self._suffix = spelled
        self._least = len(self._prefix) + len(self._suffix)

    def match(self, raw: bytes) -> str | None:
        """The text of ``raw`` when it is the template's frame with another plain string (and,
        when it has one, the next counter: :attr:`count` is then that frame's)."""
        if self._lead is not None:
            start = self._lead_end(raw)
            if start < 0:
                return None
            return self._numbers_match(raw, start) if self._pieces is not None \
                else self._suffix_match(raw, start)
        if self._pieces is not None:
            prefix = self._prefix
            if len(raw) <= len(prefix) + 1 or raw[:len(prefix)] != prefix:
                return None
            return self._numbers_match(raw, len(prefix))
        # (the suffix compared as a slice: compiled, ``endswith`` is a method call)
        if len(raw) <= self._least or not raw.startswith(self._prefix) \
                or raw[len(raw) - len(self._suffix):] != self._suffix:
            return None
        text = _plain(raw[len(self._prefix):len(raw) - len(self._suffix)])
        if text is None:
            return None
        if self.counter:
            self.counted(self.count + 1)
        return text

    def _lead_end(self, raw: bytes) -> int:
        """Where the text's body starts in ``raw`` when it begins as the template's frame with
        a plain ASCII string body (printable, no quote or backslash, perhaps empty) in each
        string slot, else -1: a string token ends at its first unescaped quote, so the tokens
        around each slot are the learned frame's own. (Read byte by byte, which compiles to
        plain operations: for a time stamp's few bytes, cheaper than a search, a method call.)"""
        lead = self._lead
        assert lead is not None
        at = len(lead[0])
        if raw[:at] != lead[0]:
            return -1
        size = len(raw)
        for k in range(1, len(lead)):
            while True:
                if at >= size:
                    return -1
                c = raw[at]
                if c == 34:  # (its closing quote)
                    break
                if c < 32 or c == 92 or c > 126:  # (a control character, a backslash, not ASCII)
                    return -1
                at += 1
            piece = lead[k]
            end = at + len(piece)
            if raw[at:end] != piece:
                return -1
            at = end
        return at

    def _suffix_match(self, raw: bytes, start: int) -> str | None:
        """:meth:`match` of a template without number slots or counter, from ``start``, where
        the text's body starts: that body, a plain string, then the suffix, which ends the
        frame."""
        suffix = self._suffix
        end = len(raw) - len(suffix)
        if end <= start or raw[end:] != suffix:
            return None
        return _plain(raw[start:end])

    def _numbers_match(self, raw: bytes, start: int) -> str | None:
        """:meth:`match` for a template with number slots, from ``start``, where the text's
        body starts: a plain string body (up to the first quote), then each piece followed by a
        number spelled as JSON spells a non-negative integer, and the last piece, which ends the
        frame. (Compared by slices and byte values, which compile to plain operations, rather
        than by method calls.)"""
        pieces = self._pieces
        assert pieces is not None
        size = len(raw)
        at = raw.find(b'"', start)
        if at <= start:
            return None
        body = raw[start:at]
        last = len(pieces) - 1
        strings = self._strings
        for k in range(last):
            piece = pieces[k]
            end = at + len(piece)
            if raw[at:end] != piece:
                return None
            at = end
            if strings is not None and strings[k]:
                # a plain ASCII string body, up to its closing quote (the next piece's first
                # byte: compared next), as :meth:`_lead_end` reads one
                while at < size:
                    c = raw[at]
                    if c == 34:
                        break
                    if c < 32 or c == 92 or c > 126:
                        return None
                    at += 1
                continue
            while at < size and 48 <= raw[at] <= 57:  # (the ASCII digits)
                at += 1
            if at == end or (raw[end] == 48 and at - end > 1):
                return None
        if raw[at:] != pieces[last]:
            return None
        return _plain(body)

    def specialized(self, raw: bytes) -> FrameTemplate:
        """This template with each slot for a string the same on every frame of a stream
        (:data:`_STREAM`) filled with what ``raw``, a frame it matches, holds there: a
        template that matches fewer frames (those of that stream), so again one whose frames are
        what parsing them gives, read with fewer slots. Itself when it has no such slot."""
        strings, pieces = self._strings, self._pieces
        if strings is None or pieces is None or _STREAM not in strings:
            return self
        start = self._lead_end(raw) if self._lead is not None else len(self._prefix)
        at = raw.find(b'"', start)  # (the text's end: its body is plain)
        text_end = at
        kept: list[bytes] = []
        kinds: list[int] = []
        piece = pieces[0]
        for k in range(len(pieces) - 1):
            at += len(pieces[k])
            end = at
            if strings[k] != _NUMBER:
                end = raw.find(b'"', at)
            else:
                while end < len(raw) and 48 <= raw[end] <= 57:
                    end += 1
            if strings[k] == _STREAM:
                piece = piece + raw[at:end] + pieces[k + 1]
            else:
                kept.append(piece)
                kinds.append(strings[k])
                piece = pieces[k + 1]
            at = end
        kept.append(piece)
        return FrameTemplate(self._prefix, raw[text_end:], self.event, None,
                             kept if kinds else None, self._lead,
                             kinds if _STRING in kinds else None)

    def run(self, data: bytes, start: int, head: bytes, tail: bytes,
            limit: int) -> TextRun | None:
        """The frames of this template (each ``head`` + the frame + ``tail``: its framing) that
        follow one another from ``start``, a frame's start, in ``data``, read at once: ``None``
        unless there are at least two of them and none is longer than ``limit`` (see the
        module's docstring for why the counting below is exact)."""
        if self.counter and self._counted_first:
            return None  # (a counter before the text: read frame by frame)
        if self._lead is not None:
            return self._lead_run(data, start, head, tail, limit)
        pieces = self._pieces
        framed = self._framed
        if framed is None or framed.head != head or framed.tail != tail:
            framed = self._framed = (
                _Framed(self._prefix, self._after, head, tail, self._before) if self.counter
                else _Framed(self._prefix, pieces[-1], head, tail, b"", pieces[:-1],
                             strings=self._strings)
                if pieces is not None else _Framed(self._prefix, self._suffix, head, tail))
        first, last = framed.first, framed.last
        if not framed.plain or data[start:start + len(first)] != first:  # (no method call)
            return None
        between = framed.between
        at = data.rfind(between, start)
        if at < 0:
            return None
        end = data.find(last, at + len(between))
        # (no end after the last boundary: the read ends inside a frame, the run before it)
        end = at + len(last) if end < 0 else end + len(last)
        if end - start > limit:
            return None
        body = data[start + len(first):end - len(last)]
        # Without a counter, the run is the frames that fit from the first on (the frames of a
        # read that follow it, a text that needs unescaping or a finish of the same bytes around
        # an empty text, are read one by one). The frames are cut at the framing's tail and head
        # (short: a long separator is searched for slowly), and proved by one comparison.
        numbers: list[bytes] | None = None
        whole = True
        if not framed.before:
            frames = data[start + len(head):end - len(tail)].split(framed.cut)
            texts, whole = _insides(frames, framed, body)
            if pieces is not None:
                fitting = len(texts)
                texts, numbers = _numbered_texts(texts, framed.numbers, framed.strings)
                whole = whole and len(texts) == fitting
            elif b"" in texts:
                texts = texts[:texts.index(b"")]
                whole = False
        else:
            # A numbered run: cut at each ``before``, each piece is the frame's number (the one
            # after the last's, spelled as JSON spells it), the bytes between two frames and the
            # next frame's text; the last piece, the last number alone
            pieces = body.split(framed.before)
            if len(pieces) < 3:
                return None
            texts = [pieces[0]]
            number = self.count
            for k in range(1, len(pieces)):
                number += 1
                spelled = str(number).encode()
                piece = pieces[k]
                if k == len(pieces) - 1:
                    if piece != spelled:
                        return None
                    break
                # joined, then one startswith at the start
                spelled = spelled + between
                if not piece.startswith(spelled):
                    return None
                texts.append(piece[len(spelled):])
        if len(texts) < 2 or (framed.before and b"" in texts):
            return None
        joined = b"".join(texts)
        bad = _NOT_PLAIN.search(joined)
        if bad is not None:
            if framed.before:
                return None
            texts = _before(texts, bad.start())
            if len(texts) < 2:
                return None
            joined = joined[:sum(map(len, texts))]
            whole = False
        n = len(texts)
        if not whole:
            if numbers is not None:
                numbers = numbers[:n]
            end = start + len(first) + len(joined) + (n - 1) * len(between) + len(last) \
                + (0 if numbers is None else sum(map(len, numbers)))
        try:
            chars = len(joined.decode())
        except UnicodeDecodeError:
            return None
        run = TextRun(data, start, end, n, chars, self.event, framed, texts, numbers)
        if framed.before:
            run.counter = self.count + n
            self.counted(run.counter)
        return run


    def _lead_run(self, data: bytes, start: int, head: bytes, tail: bytes,
                  limit: int) -> TextRun | None:
        """:meth:`run` for a template with string slots (and none for numbers): the frames
        from ``start`` on, each cut at the first ``tail`` after its ``head`` and read as
        :meth:`match` reads one (its slots, then its text up to the suffix, which ends it), up
        to the first that is not; their texts then proved plain and UTF-8 at once, as the other
        runs' are. (A frame read so holds no line end: its pieces hold none, nor may its slots
        and text; so its first ``tail`` is its end.)"""
        lead = self._lead
        if self._pieces is not None or lead is None:
            return None
        framed = self._framed
        if framed is None or framed.head != head or framed.tail != tail:
            framed = self._framed = _Framed(b"", self._suffix, head, tail, lead=lead)
        if not framed.plain:
            return None
        suffix = self._suffix
        texts: list[bytes] = []
        leads: list[bytes] = []
        at, end, size = start, start, len(data)
        while at < size:
            own = at + len(head)
            if data[at:own] != head:
                break
            cut = data.find(tail, own)
            if cut < 0 or cut + len(tail) - start > limit:
                break
            raw = data[own:cut]
            body = self._lead_end(raw)
            after = len(raw) - len(suffix)
            if body < 0 or after <= body or raw[after:] != suffix:
                break
            leads.append(raw[:body])
            texts.append(raw[body:after])
            at = end = cut + len(tail)
        if len(texts) < 2:
            return None
        joined = b"".join(texts)
        bad = _NOT_PLAIN.search(joined)
        if bad is not None:
            texts = _before(texts, bad.start())
            n = len(texts)
            if n < 2:
                return None
            leads = leads[:n]
            joined = joined[:sum(map(len, texts))]
            end = start + n * (len(head) + len(framed.last)) + sum(map(len, leads)) + len(joined)
        try:
            chars = len(joined.decode())
        except UnicodeDecodeError:
            return None
        return TextRun(data, start, end, len(texts), chars, self.event, framed, texts, None, leads)


def _plain(body: bytes) -> str | None:
    """``body`` as the string it is when it is a plain string body (no quote, backslash or
    control character, valid UTF-8), else ``None``."""
    if _NOT_PLAIN.search(body) is not None:
        return None
    try:
        return body.decode()
    except UnicodeDecodeError:
        return None


def _insides(frames: list[bytes], framed: _Framed, body: bytes) -> tuple[list[bytes], bool]:
    """The bytes of each of ``frames`` (the frames of a run cut at the framing's tail and head,
    ``body`` those from the first one's text to the last one's suffix) between the template's
    prefix and suffix, for the frames that have both from the first on; and whether all have."""
    prefix, suffix = framed.prefix, framed.suffix
    start, least = len(prefix), len(prefix) + len(suffix)
    # (a frame too short to hold both is nothing: compiled, a slice whose end is before its
    # start raises SystemError where Python gives b"")
    insides = [f[start:len(f) - len(suffix)] if len(f) >= least else b"" for f in frames]
    if framed.between.join(insides) == body:  # (then each frame is its inside framed)
        return insides, True
    for k, f in enumerate(frames):
        if len(f) < least or not f.startswith(prefix) or not f.endswith(suffix):
            return insides[:k], False
    return insides, True


def _before(texts: list[bytes], at: int) -> list[bytes]:
    """The texts before the one that holds byte ``at`` of their join."""
    size = 0
    for k, text in enumerate(texts):
        size += len(text)
        if size > at:
            return texts[:k]
    return texts


def _numbered_texts(pieces: list[bytes], numbers: list[bytes],
                    strings: list[int] | None = None) -> tuple[list[bytes], list[bytes]]:
    """The texts of frames with slots after their text (each piece a frame's bytes between the
    prefix and the last piece), and what follows each text, up to the first piece that does not
    end in each of ``numbers`` followed by its slot's value, after a text that is not empty: a
    number spelled as JSON spells a non-negative integer or, where ``strings`` says so, a plain
    ASCII string body. Read from the end (a literal piece ends and starts with no digit, and one
    before a string ends with its opening quote, which its body does not hold, so each slot's
    value is the same read either way), with no search: the caller proves each text holds no
    quote, so that it ends where the first quote is, as :meth:`FrameTemplate._numbers_match`
    reads a frame."""
    texts: list[bytes] = []
    after: list[bytes] = []
    for piece in pieces:
        at = len(piece)
        for k in range(len(numbers) - 1, -1, -1):
            end = at
            if strings is not None and strings[k]:
                while at > 0:
                    c = piece[at - 1]
                    if c == 34:  # (its opening quote, the end of the piece before it)
                        break
                    if c < 32 or c == 92 or c > 126:
                        at = 0
                        break
                    at -= 1
                if at <= 0:
                    at = -1
                    break
            else:
                while at > 0 and 48 <= piece[at - 1] <= 57:  # (the ASCII digits)
                    at -= 1
                if at == end or (piece[at] == 48 and end - at > 1):
                    at = -1
                    break
            literal = numbers[k]
            start = at - len(literal)
            if start <= 0 or piece[start:at] != literal:
                at = -1
                break
            at = start
        if at <= 0:
            break
        texts.append(piece[:at])
        after.append(piece[at:])
    return texts, after


class _Framed:
    """A template within its framing: what :meth:`FrameTemplate.run` looks for. A template with
    a counter after its text is given the bytes after the counter as ``suffix`` and those
    between the text and the counter as ``before``; one with number slots, its last piece as
    ``suffix`` and the others as ``numbers``; one with string slots, no ``prefix`` (each frame's
    own is kept) and its pieces as ``lead``, which may hold no line end either."""

    __slots__ = ("before", "between", "cut", "first", "head", "last", "numbers", "plain",
                 "prefix", "strings", "suffix", "tail")

    def __init__(self, prefix: bytes, suffix: bytes, head: bytes, tail: bytes,
                 before: bytes = b"", numbers: list[bytes] | None = None,
                 lead: list[bytes] | None = None, strings: list[int] | None = None) -> None:
        self.head = head
        self.tail = tail
        self.prefix = prefix
        self.suffix = suffix
        self.before = before
        self.numbers: list[bytes] = [] if numbers is None else numbers
        """The literal pieces that each precede a slot after the text, in order."""
        self.strings = strings
        """What each of those slots is (``None``: numbers all)."""
        self.cut = tail + head
        """The bytes between two frames' own bytes."""
        self.first = head + prefix
        """How a frame of the run begins."""
        self.last = suffix + tail
        """How it ends (after its counter, when it has one)."""
        self.between = self.last + self.first
        # A template whose own bytes hold a line end where it could be mistaken for the
        # framing's is read frame by frame (a line reader cuts there first; and a CR, whitespace
        # to JSON, is a line end to an SSE reader: such frames are written again, not passed on
        # as they came); so is a numbered one whose ``before`` is also between its frames (cut
        # there, its runs would never fit).
        around = prefix + suffix + before + b"".join(self.numbers) + b"".join(lead or ())
        self.plain = (not holds(around, b"\n") and not holds(around, b"\r")
                      and (not before or not holds(self.between, before)))


def _at(value: Any, path: TextPath) -> Any:
    for key in path:
        if isinstance(key, str):
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        else:
            if not isinstance(value, list) or not -len(value) <= key < len(value):
                return None
            value = value[key]
    return value


def _counter_spots(raw: bytes, digits: bytes, skip: tuple[int, int]) -> list[int]:
    """Where ``digits`` occur in ``raw`` as a whole number token (outside ``skip``, the text's
    own bytes): the places a counter of that value may be."""
    spots: list[int] = []
    at = raw.find(digits)
    while at >= 0 and len(spots) < _COUNTER_SPOTS:
        end = at + len(digits)
        if (at > 0 and raw[at - 1] in _DELIMITS and end < len(raw) and raw[end] in _DELIMITS
                and not skip[0] <= at < skip[1]):
            spots.append(at)
        at = raw.find(digits, end)
    return spots


def _free(at: int, end: int, taken: list[tuple[int, int, bytes, int]]
          | list[tuple[int, int, bytes]]) -> bool:
    """Bytes ``at`` to ``end`` overlap none of the ``taken`` slots (each from its first
    number to its second)."""
    return all(end <= slot[0] or slot[1] <= at for slot in taken)


def _free_spot(raw: bytes, digits: bytes, taken: list[tuple[int, int, bytes, int]]) -> int:
    """The first place of ``digits`` in ``raw`` as a whole number token that overlaps none of
    the ``taken`` slots, or -1."""
    at = raw.find(digits)
    while at >= 0:
        end = at + len(digits)
        if at > 0 and raw[at - 1] in _DELIMITS and end < len(raw) and raw[end] in _DELIMITS \
                and _free(at, end, taken):
            return at
        at = raw.find(digits, end)
    return -1


def _free_string(prefix: bytes, literal: bytes, taken: list[tuple[int, int, bytes]]) -> int:
    """The first place of ``literal`` (a string token) in ``prefix`` that ends before its last
    byte (the text's opening quote) and overlaps none of the ``taken`` slots, or -1."""
    at = prefix.find(literal)
    while at >= 0 and at + len(literal) < len(prefix):
        if _free(at, at + len(literal), taken):
            return at
        at = prefix.find(literal, at + 1)
    return -1


def _free_string_after(suffix: bytes, literal: bytes,
                       taken: list[tuple[int, int, bytes, int]]) -> int:
    """The first place of ``literal`` (a string token) in ``suffix`` after its first byte (the
    text's closing quote) that overlaps none of the ``taken`` slots, or -1."""
    at = suffix.find(literal, 1)
    while at >= 0:
        if _free(at, at + len(literal), taken):
            return at
        at = suffix.find(literal, at + 1)
    return -1


def learn(raw: bytes, value: Any, path: TextPath, text: str, event: str,
          counter_path: TextPath | None = None, number_paths: tuple[TextPath, ...] = (),
          string_paths: tuple[TextPath, ...] = (),
          stream_string_paths: tuple[TextPath, ...] = ()) -> FrameTemplate | None:
    """The template of ``raw`` (whose parsed value is ``value``, with the non-empty ``text`` at
    ``path``, and a counter at ``counter_path`` when one is given, or numbers that may change at
    ``number_paths``, strings that may change at ``string_paths`` and strings the same on every
    frame of a stream at ``stream_string_paths``) around that string (and that counter, or those
    numbers and strings), or ``None`` when it is not one to read from the bytes (see the
    module's docstring)."""
    literal = orjson.dumps(text)  # the string as a compact JSON writer spells it
    at = raw.find(literal)
    if at < 0 or raw.find(literal, at + 1) >= 0:
        return None
    prefix, suffix = raw[:at + 1], raw[at + len(literal) - 1:]
    probe = "z" if text == "q" else "q"  # not a JSON literal's first letter (true, false, null)
    if (number_paths or string_paths or stream_string_paths) and counter_path is None:
        found = _numbered(value, prefix, suffix, event, (path, text, probe), number_paths,
                          string_paths, stream_string_paths)
        if found is None and stream_string_paths:
            # (a stream's string whose spelling is also another's: the stream's own template)
            found = _numbered(value, prefix, suffix, event, (path, text, probe), number_paths,
                              string_paths)
        return found
    if counter_path is None:
        return FrameTemplate(prefix, suffix, event) if _same_but(
            value, prefix + probe.encode() + suffix, ((path, text, probe),)) else None
    count = _at(value, counter_path)
    if type(count) is not int or count < 0:
        return None
    digits, following = str(count).encode(), str(count + 1).encode()
    for spot in _counter_spots(raw, digits, (at, at + len(literal))):
        end = spot + len(digits)
        first = spot < at
        if first:
            probed = raw[:spot] + following + raw[end:at + 1] + probe.encode() + suffix
        else:
            probed = prefix + probe.encode() + raw[at + len(literal) - 1:spot] + following \
                + raw[end:]
        if _same_but(value, probed, ((path, text, probe), (counter_path, count, count + 1))):
            if first:
                around = (raw[:spot], raw[end:at + 1], True, count)
            else:
                around = (raw[at + len(literal) - 1:spot], raw[end:], False, count)
            return FrameTemplate(prefix, suffix, event, around)
    return None


def _numbered(value: Any, prefix: bytes, suffix: bytes, event: str,
              text: tuple[TextPath, Any, Any], number_paths: tuple[TextPath, ...],
              string_paths: tuple[TextPath, ...] = (),
              stream_string_paths: tuple[TextPath, ...] = ()) -> FrameTemplate | None:
    """:func:`learn`'s template with a slot for each number at ``number_paths`` the frame holds
    (a path it does not hold is no slot), each found after the text: the first place of its
    digits in ``suffix``, as a whole number token, that no other slot took; and one for each
    string at ``string_paths`` it holds: the first place of its JSON spelling in ``prefix``
    that no other slot took, else the first in ``suffix`` after the text's closing quote that
    no other slot took. The template is the frame's only where the frame with another number or
    string in each slot (and another text) changes the value at those paths and nothing else
    (one parse: a wrong place found is no template, and the stream tries its next text frame).
    A string at ``stream_string_paths`` is a slot where found after the text (else it is the
    template's, as any other byte). ``text``: the text's path, the text and the string probed
    in its place."""
    holes: list[tuple[int, int, bytes, int]] = []
    """The slots after the text: where their value starts and ends in ``suffix`` (a string's
    body: the quotes stay in the pieces), the value probed there, and what it holds."""
    changes = [text]
    for number_path in number_paths:
        n = _at(value, number_path)
        if n is None:
            continue
        if type(n) is not int or n < 0:
            return None
        digits = str(n).encode()
        spot = _free_spot(suffix, digits, holes)
        if spot < 0:
            return None
        holes.append((spot, spot + len(digits), str(n + 1).encode(), _NUMBER))
        changes.append((number_path, n, n + 1))
    strings: list[tuple[int, int, bytes]] = []
    for string_path in string_paths:
        v = _at(value, string_path)
        if v is None:
            continue
        if type(v) is not str:
            return None
        literal = orjson.dumps(v)
        probe = "z" if v == "q" else "q"
        spot = _free_string(prefix, literal, strings)
        if spot >= 0:
            strings.append((spot, spot + len(literal), probe.encode()))
        else:
            spot = _free_string_after(suffix, literal, holes)
            if spot < 0:
                return None
            holes.append((spot + 1, spot + len(literal) - 1, probe.encode(), _STRING))
        changes.append((string_path, v, probe))
    for stream_path in stream_string_paths:
        v = _at(value, stream_path)
        if type(v) is not str:
            continue
        literal = orjson.dumps(v)
        spot = _free_string_after(suffix, literal, holes)
        if spot >= 0:
            probe = "z" if v == "q" else "q"
            holes.append((spot + 1, spot + len(literal) - 1, probe.encode(), _STREAM))
            changes.append((stream_path, v, probe))
    # Each string slot's piece keeps its quotes: the one before ends with the opening one, the
    # one after starts with the closing one.
    probed: list[bytes] = []
    lead: list[bytes] = []
    at = 0
    for start, end, other in sorted(strings):
        lead.append(prefix[at:start + 1])
        probed += [prefix[at:start + 1], other]
        at = end - 1
    lead.append(prefix[at:])
    probed += [prefix[at:], text[2].encode()]
    pieces: list[bytes] = []
    kinds: list[int] = []
    at = 0
    for start, end, other, kind in sorted(holes):
        probed += [suffix[at:start], other]
        pieces.append(suffix[at:start])
        kinds.append(kind)
        at = end
    probed.append(suffix[at:])
    pieces.append(suffix[at:])
    if not _same_but(value, b"".join(probed), tuple(changes)):
        return None
    return FrameTemplate(prefix, suffix, event, None, pieces if holes else None,
                         lead if strings else None, kinds if any(kinds) else None)


def _same_but(value: Any, probed: bytes, changes: tuple[tuple[TextPath, Any, Any], ...]) -> bool:
    """``probed`` parses to ``value`` with each change's path holding its new value instead of
    its old, and nothing else changed. Each path ends at a leaf of ``value`` (a string, a
    number), so no path runs through another: ``probed``'s value, holding each new value where
    ``value`` holds the old, with the old put back there, is ``value`` (which is left as it
    was: only the parsed copy is changed)."""
    try:
        substituted = orjson.loads(probed)
    except orjson.JSONDecodeError:
        return False
    try:
        for path, old, new in changes:
            if not path:
                return False
            parent = _at(substituted, path[:-1])
            key = path[-1]
            if isinstance(key, str):
                if not isinstance(parent, dict) or key not in parent:
                    return False
            elif not isinstance(parent, list) or not -len(parent) <= key < len(parent):
                return False
            if parent[key] != new:
                return False
            parent[key] = old
        return bool(substituted == value)
    except RecursionError:  # a value nested deeper than comparing can walk: no template
        return False


class TemplateMemory:
    """The template learned last from the streams of one source (an upstream), tried first on
    each stream of it that follows: learning one costs a parse and a comparison of the frame,
    and most of a source's streams have their text frames of the same bytes. Only templates
    without a counter are kept (a counter is the state of one stream). Safe to share: what a
    frame read by a template is follows from that frame's bytes alone (see the module's
    docstring), and each stream's decoder still confirms its first frame read so
    (``gateway.pipeline_fast.TemplateDecoding``)."""

    __slots__ = ("template",)

    def __init__(self) -> None:
        self.template: FrameTemplate | None = None


class TemplateReader:
    """What a framing reader calls for each complete frame's JSON bytes: a :class:`Slot` when
    the stream's template matches, else the parsed value, learning a template from it while
    tries are left (raises :class:`orjson.JSONDecodeError` as ``orjson.loads`` does)."""

    __slots__ = ("_counter_path", "_general", "_kept", "_memory", "_number_paths", "_path",
                 "_stream_string_paths", "_string_paths", "_tries", "runs", "template")

    def __init__(self, path: TextPath, counter_path: TextPath | None = None,
                 number_paths: tuple[TextPath, ...] = (),
                 string_paths: tuple[TextPath, ...] = (),
                 stream_string_paths: tuple[TextPath, ...] = (),
                 memory: TemplateMemory | None = None) -> None:
        self._path = path
        self._counter_path = counter_path
        """Where a frame holds its counter, when the stream numbers its frames."""
        self._number_paths = number_paths
        """Where a frame may hold numbers that change from frame to frame."""
        self._string_paths = string_paths
        """Where a frame may hold strings that change from frame to frame."""
        self._stream_string_paths = stream_string_paths
        """Where a frame may hold strings the same on every frame of a stream."""
        self._tries = _LEARN_TRIES
        self._memory = memory
        """Where the source's streams keep the template learned last (``None``: nowhere)."""
        self._kept: FrameTemplate | None = None if memory is None else memory.template
        """The source's template, tried while the stream has none of its own."""
        self._general: FrameTemplate | None = None
        """The template the stream's own was made from (:meth:`FrameTemplate.specialized`)."""
        self.template: FrameTemplate | None = None
        self.runs = False
        """The caller takes :class:`TextRun` s: the framing readers offer one after each
        :class:`Slot` (:meth:`run`)."""

    def read(self, raw: bytes, event: str) -> Any:
        template = self.template
        if template is not None:
            if event == template.event:
                text = template.match(raw)
                if text is not None:
                    return Slot(text, raw, event, None,
                                template.count if template.counter else None)
        elif self._kept is not None and event == self._kept.event:
            kept = self._kept
            text = kept.match(raw)
            if text is not None:
                self._general = kept
                self.template = kept.specialized(raw)
                return Slot(text, raw, event, None, None)
        value = orjson.loads(raw)
        if template is not None and template.counter:
            # a frame between two runs of text frames is numbered too: the next text frame's
            # counter follows this one's
            assert self._counter_path is not None
            count = _at(value, self._counter_path)
            if type(count) is int and count >= 0:
                template.counted(count)
        if self._tries:
            # no template yet, or text frames of another shape (a new content block): learn
            found = _at(value, self._path)
            if isinstance(found, str) and found:
                self._tries -= 1
                learned = learn(raw, value, self._path, found, event, self._counter_path,
                                self._number_paths, self._string_paths, self._stream_string_paths)
                if learned is not None:
                    self._general = learned
                    self.template = learned.specialized(raw)
                    if self._memory is not None and not learned.counter:
                        self._memory.template = learned
                    return Slot(found, raw, event, value,
                                learned.count if learned.counter else None)
        return value

    def run(self, data: bytes, start: int, head: bytes, tail: bytes,
            limit: int) -> TextRun | None:
        """Right after a :class:`Slot` read from ``data``, whose next frame begins at
        ``start``: the frames of the template from there, read at once (when asked for:
        :attr:`runs`), else ``None``."""
        template = self.template
        if template is None or start >= len(data):
            return None
        return template.run(data, start, head, tail, limit)

    def drop(self) -> None:
        """The decoder did not take a frame of the template as text alone: parse every frame
        from now on (and the source's next streams learn their own)."""
        memory = self._memory
        if memory is not None and self._general is not None \
                and memory.template is self._general:
            memory.template = None
        self.template = self._kept = self._general = None
        self._tries = 0
