"""Text frames read by their template (gateway.framing.template): a frame that fits is read as
exactly what parsing it would give, a frame that does not is parsed, and a stream decodes to the
same events, and an identity route forwards the same bytes, with the template as without it, for
every registered dialect."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.canonical import (
    ChatRequest,
    ContextUpdate,
    Message,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
)
from gateway.dialects import DIALECTS, Dialect
from gateway.framing import Slot, SniffingReader, encoder_for, slot_payload
from gateway.framing.jsonlines import DEFAULT_MAX_LINE
from gateway.framing.template import TemplateMemory, TemplateReader, TextPath, learn
from gateway.pipeline import StreamDecoding
from gateway.pipeline_fast import FastStreamTranslator, TemplateDecoding

PATH: TextPath = ("choices", 0, "delta", "content")


def frame(text: str, **extra: Any) -> bytes:
    return orjson.dumps({"choices": [{"delta": {"content": text}, "index": 0}],
                         "id": "c1", **extra})


def read_all(reader: TemplateReader, frames: list[bytes], event: str = "message") -> list[Any]:
    return [reader.read(f, event) for f in frames]


def as_parsed(item: Any) -> Any:
    return item.parsed() if isinstance(item, Slot) else item


def test_frames_of_the_template_are_read_as_their_text() -> None:
    texts = ["Hello", " wörld", " 😀", " a/b", " \u2028 ", " tok"]
    frames = [frame(t) for t in texts]
    out = read_all(TemplateReader(PATH), frames)
    assert all(isinstance(o, Slot) for o in out)
    assert [o.text for o in out] == texts
    assert [o.raw for o in out] == frames
    assert [as_parsed(o) for o in out] == [orjson.loads(f) for f in frames]


@pytest.mark.parametrize("text", ['a "quote"', "back\\slash", "line\nbreak", "tab\t", "\x00"])
def test_a_text_that_needs_unescaping_is_parsed(text: str) -> None:
    reader = TemplateReader(PATH)
    reader.read(frame("first"), "message")
    got = reader.read(frame(text), "message")
    # parsed (a template may be learned from it, but its value is the parser's)
    assert not isinstance(got, Slot) or (got.value is not None and got.text == text)
    assert as_parsed(got) == orjson.loads(frame(text))


def test_bytes_around_the_text_that_differ_are_parsed() -> None:
    reader = TemplateReader(PATH)
    reader.read(frame("first"), "message")
    template = reader.template
    assert template is not None
    for raw in (frame("x", usage={"total": 3}), frame("x").replace(b'"c1"', b'"c2"'),
                b" " + frame("x"), frame("")):
        assert template.match(raw) is None
        got = reader.read(raw, "message")
        assert not isinstance(got, Slot) or got.value is not None  # parsed
        assert as_parsed(got) == orjson.loads(raw)


def test_invalid_utf8_in_the_text_is_not_read_from_the_bytes() -> None:
    reader = TemplateReader(PATH)
    reader.read(frame("first"), "message")
    bad = frame("ab").replace(b"ab", b"a\xff")
    with pytest.raises(orjson.JSONDecodeError):
        reader.read(bad, "message")


def test_no_template_where_the_text_is_spelled_twice_or_otherwise() -> None:
    value = orjson.loads(frame("tok"))
    twice = orjson.dumps({"choices": [{"delta": {"content": "tok"}}], "echo": "tok"})
    assert learn(twice, orjson.loads(twice), PATH, "tok", "message") is None
    escaped = b'{"choices":[{"delta":{"content":"\\u0074ok"}}],"x":"tok"}'
    assert learn(escaped, orjson.loads(escaped), PATH, "tok", "message") is None
    duplicate = b'{"choices":[{"delta":{"content":"tok","content":"b"}}]}'
    assert learn(duplicate, orjson.loads(duplicate), PATH, "b", "message") is not None
    first_of_two = b'{"choices":[{"delta":{"content":"tok","content":"bee"}}]}'
    assert learn(first_of_two, orjson.loads(first_of_two), PATH, "bee", "message") is not None
    shadowed = b'{"choices":[{"delta":{"content":"tok","content":"bee"}}]}'
    assert learn(shadowed, {"choices": [{"delta": {"content": "tok"}}]}, PATH, "tok",
                 "message") is None
    assert learn(frame("tok"), value, PATH, "tok", "message") is not None
    assert value == orjson.loads(frame("tok"))  # learning leaves the parsed value as it was


def test_a_template_holds_for_its_event_name_only() -> None:
    reader = TemplateReader(("delta", "text"))
    data = b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"%s"}}'
    assert isinstance(reader.read(data % b"a", "content_block_delta"), Slot)
    assert isinstance(reader.read(data % b"b", "content_block_delta"), Slot)
    other = reader.read(data % b"c", "other")  # parsed (and learned from, for its own name)
    assert not isinstance(other, Slot) or (other.value is not None and other.event == "other")
    assert isinstance(reader.read(data % b"d", "other"), Slot)
    assert reader.read(data % b"e", "content_block_delta").value is not None


def test_learning_stops_after_a_few_frames_that_fit_no_template() -> None:
    reader = TemplateReader(PATH)
    for n in range(10):  # the text is also the id: never found once
        raw = orjson.dumps({"choices": [{"delta": {"content": f"t{n}"}}], "id": f"t{n}"})
        assert not isinstance(reader.read(raw, "message"), Slot)
    assert reader.template is None and reader._tries == 0


# --- numbered frames: a slot for the counter ----------------------------------------------------

COUNTER: TextPath = ("n",)


def numbered(text: str, n: Any, *, first: bool = True, **extra: Any) -> bytes:
    body = {"type": "delta", "index": 0, "delta": text, **extra}
    return orjson.dumps({"n": n, **body} if first else {**body, "n": n})


@pytest.mark.parametrize("first", [True, False], ids=["counter first", "text first"])
def test_numbered_frames_are_read_with_their_number(first: bool) -> None:
    reader = TemplateReader(("delta",), COUNTER)
    got = [reader.read(numbered(f"t{k}", k, first=first), "message") for k in range(8)]
    assert all(isinstance(g, Slot) for g in got)
    assert [g.counter for g in got] == list(range(8))
    assert [g.text for g in got] == [f"t{k}" for k in range(8)]
    assert got[0].value is not None and all(g.value is None for g in got[1:])


def test_a_number_that_does_not_follow_is_parsed_and_the_count_goes_on_from_it() -> None:
    reader = TemplateReader(("delta",), COUNTER)
    assert isinstance(reader.read(numbered("a", 0), "message"), Slot)
    assert isinstance(reader.read(numbered("b", 1), "message"), Slot)
    skipped = reader.read(numbered("c", 3), "message")  # parsed: not the number that follows
    assert not isinstance(skipped, Slot) or skipped.value is not None
    assert as_parsed(skipped) == orjson.loads(numbered("c", 3))
    # a frame of another kind in between, numbered: the next text frame follows its number
    other = reader.read(orjson.dumps({"n": 4, "type": "note"}), "message")
    assert other == {"n": 4, "type": "note"}
    after = reader.read(numbered("d", 5), "message")
    assert isinstance(after, Slot) and after.value is None and after.counter == 5
    for raw in (numbered("e", 6.0), numbered("e", -6), numbered("e", True),
                numbered("e", 66), numbered("e", "6"), numbered("e", 6).replace(b"6", b"6 ", 1)):
        got = reader.read(raw, "message")
        assert not isinstance(got, Slot) or got.value is not None, raw
        assert as_parsed(got) == orjson.loads(raw)


def test_the_counter_is_found_where_its_digits_also_spell_other_numbers() -> None:
    # the counter is 0, as are the index and a number in the text: only the counter is its slot
    raw = orjson.dumps({"index": 0, "delta": "0 and 10", "n": 0, "m": [0, 10]})
    template = learn(raw, orjson.loads(raw), ("delta",), "0 and 10", "message", COUNTER)
    assert template is not None and template.counter and template.count == 0
    nxt = orjson.dumps({"index": 0, "delta": "x", "n": 1, "m": [0, 10]})
    assert template.match(nxt) == "x" and template.count == 1
    assert template.match(orjson.dumps({"index": 1, "delta": "x", "n": 2, "m": [0, 10]})) is None
    # a counter that is no whole non-negative number, or is not in the frame: no template
    for value in (-1, 1.5, True, None, "1"):
        raw = orjson.dumps({"delta": "tok", "n": value})
        assert learn(raw, orjson.loads(raw), ("delta",), "tok", "message", COUNTER) is None


# --- what a frame that fits is, whatever its bytes: a property --------------------------------

JSON_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
SCALARS = (st.none() | st.booleans() | st.integers(-(2**53), 2**53)
           | st.floats(allow_nan=False, allow_infinity=False) | JSON_TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(JSON_TEXT, inner, max_size=3), max_leaves=8)
EXTRA_KEYS = JSON_TEXT.filter(lambda k: k not in {"text", "stamp", "n", "first"})
"""Keys of the members a frame holds beside its own (not the frame builders' parameters)."""


@settings(max_examples=300, deadline=None)
@given(extra=st.dictionaries(EXTRA_KEYS, VALUES, max_size=4), first=JSON_TEXT.filter(bool),
       texts=st.lists(JSON_TEXT, max_size=6),
       cuts=st.lists(st.tuples(st.integers(0, 300), st.binary(max_size=3)), max_size=3))
def test_a_frame_read_by_its_template_is_what_parsing_it_gives(
        extra: dict[str, Any], first: str, texts: list[str],
        cuts: list[tuple[int, bytes]]) -> None:
    def make(text: str) -> bytes:
        return orjson.dumps({**extra, "choices": [{"delta": {"content": text}}]})

    frames = [make(first), *(make(t) for t in texts)]
    _reads_as_parsed(TemplateReader(("choices", 0, "delta", "content")), frames, cuts,
                     lambda v: (v["choices"][0]["delta"]["content"], None))


def _reads_as_parsed(reader: TemplateReader, frames: list[bytes], cuts: list[tuple[int, bytes]],
                     slot_of: Any) -> None:
    """Each frame, and the last with a few bytes changed anywhere (it may fit the template or
    not), reads as parsing gives; a :class:`Slot`'s text and counter are ``slot_of`` the
    parsed value."""
    frames = list(frames)
    for at, junk in cuts:
        base = frames[-1]
        frames.append(base[:at] + junk + base[at + len(junk):])
    for raw in frames:
        try:
            expected = orjson.loads(raw)
        except orjson.JSONDecodeError:
            with pytest.raises(orjson.JSONDecodeError):
                reader.read(raw, "message")
            continue
        got = reader.read(raw, "message")
        if isinstance(got, Slot):
            assert got.raw == raw
            assert (got.text, got.counter) == slot_of(expected)
            got = Slot(got.text, got.raw, got.event).parsed()  # parsed from its bytes
        assert got == expected


@settings(max_examples=300, deadline=None)
@given(extra=st.dictionaries(EXTRA_KEYS, VALUES, max_size=4), first=JSON_TEXT.filter(bool),
       start=st.integers(0, 2**40), steps=st.lists(st.tuples(JSON_TEXT, st.integers(-2, 3)),
                                                   max_size=6),
       before=st.booleans(),
       cuts=st.lists(st.tuples(st.integers(0, 300), st.binary(max_size=3)), max_size=3))
def test_a_numbered_frame_read_by_its_template_is_what_parsing_it_gives(
        extra: dict[str, Any], first: str, start: int, steps: list[tuple[str, int]],
        before: bool, cuts: list[tuple[int, bytes]]) -> None:
    def make(text: str, n: int) -> bytes:
        body = {**extra, "delta": text}
        return orjson.dumps({"seq": n, **body} if before else {**body, "seq": n})

    frames, n = [make(first, start)], start
    for text, step in steps:  # mostly the number that follows, sometimes another
        n += step
        frames.append(make(text, n))
    _reads_as_parsed(TemplateReader(("delta",), ("seq",)), frames, cuts,
                     lambda v: (v["delta"], v["seq"]))


USAGE: tuple[TextPath, ...] = (("usage", "prompt"), ("usage", "output"), ("usage", "total"))


@settings(max_examples=300, deadline=None)
@given(extra=st.dictionaries(EXTRA_KEYS, VALUES, max_size=3), first=JSON_TEXT.filter(bool),
       counts=st.lists(st.tuples(JSON_TEXT, st.integers(0, 2**40), st.integers(-3, 2**40)),
                       max_size=6),
       cuts=st.lists(st.tuples(st.integers(0, 300), st.binary(max_size=3)), max_size=3))
def test_a_frame_with_number_slots_read_by_its_template_is_what_parsing_it_gives(
        extra: dict[str, Any], first: str, counts: list[tuple[str, int, int]],
        cuts: list[tuple[int, bytes]]) -> None:
    """Numbers that change from frame to frame, any of them (a negative one is no number a slot
    holds: parsed), each frame read as parsing it gives."""
    def make(text: str, output: int, total: int) -> bytes:
        return orjson.dumps({"choices": [{"delta": {"content": text}}], **extra,
                             "usage": {"prompt": 7, "output": output, "total": total}})

    frames = [make(first, 1, 8), *(make(t, o, n) for t, o, n in counts)]
    _reads_as_parsed(TemplateReader(PATH, None, USAGE), frames, cuts,
                     lambda v: (v["choices"][0]["delta"]["content"], None))


def test_frames_with_other_numbers_in_their_slots_are_read_by_the_template() -> None:
    def make(text: str, output: int, total: int, model: str = "m") -> bytes:
        return orjson.dumps({"choices": [{"delta": {"content": text}, "index": 0}],
                             "usage": {"prompt": 7, "output": output, "total": total},
                             "model": model})

    reader = TemplateReader(PATH, None, USAGE)
    frames = [make("a", 1, 8), make("b", 2, 9), make("c", 120, 127), make("d", 0, 7)]
    out = read_all(reader, frames)
    assert all(isinstance(o, Slot) for o in out) and [o.text for o in out] == list("abcd")
    assert [o.parsed() for o in out] == [orjson.loads(f) for f in frames]
    # another model, a number spelled otherwise (a leading zero, a fraction), or one left out:
    # parsed (or learned from, a template of their own)
    others = [make("e", 3, 10, "n"), make("f", 3, 10).replace(b'"output":3', b'"output":03'),
              make("g", 3, 10).replace(b'"output":3', b'"output":3.0'),
              make("h", 3, 10).replace(b'"output":3,', b'')]
    _reads_as_parsed(reader, others, [], lambda v: (v["choices"][0]["delta"]["content"], None))


def test_number_slots_are_found_only_after_the_text_and_checked() -> None:
    """A number at a path before the text, or whose digits cannot be told from another's in
    the frame's value, gives no template (the stream's frames are parsed); a path the frame
    does not hold is no slot."""
    before = orjson.dumps({"usage": {"prompt": 7, "output": 1, "total": 8},
                           "choices": [{"delta": {"content": "a"}}]})
    assert learn(before, orjson.loads(before), PATH, "a", "message", None, USAGE) is None
    after = orjson.dumps({"choices": [{"delta": {"content": "a"}}], "usage": {"output": 1}})
    template = learn(after, orjson.loads(after), PATH, "a", "message", None, USAGE)
    assert template is not None
    assert template.match(after.replace(b'"a"', b'"bc"').replace(b":1}", b":42}")) == "bc"
    assert learn(after, orjson.loads(after), PATH, "a", "message", None,
                 (("usage", "output"), ("usage", "missing"))) is not None
    strange = orjson.dumps({"choices": [{"delta": {"content": "a"}}], "usage": {"output": "1"}})
    assert learn(strange, orjson.loads(strange), PATH, "a", "message", None, USAGE) is None


STAMP: tuple[TextPath, ...] = (("created_at",),)
LINE_TEXT: TextPath = ("message", "content")


def line(text: str, stamp: str, **extra: Any) -> bytes:
    return orjson.dumps({"model": "m", "created_at": stamp, **extra,
                         "message": {"role": "assistant", "content": text}, "done": False})


@settings(max_examples=300, deadline=None)
@given(extra=st.dictionaries(EXTRA_KEYS, VALUES, max_size=3), first=JSON_TEXT.filter(bool),
       stamp=JSON_TEXT, lines=st.lists(st.tuples(JSON_TEXT, JSON_TEXT), max_size=6),
       cuts=st.lists(st.tuples(st.integers(0, 300), st.binary(max_size=3)), max_size=3))
def test_a_frame_with_string_slots_read_by_its_template_is_what_parsing_it_gives(
        extra: dict[str, Any], first: str, stamp: str, lines: list[tuple[str, str]],
        cuts: list[tuple[int, bytes]]) -> None:
    """Strings before the text that change from frame to frame, any of them (one that needs
    unescaping, or is not ASCII, fits no slot: parsed), each frame read as parsing it gives."""
    frames = [line(first, stamp, **extra), *(line(t, s, **extra) for t, s in lines)]
    _reads_as_parsed(TemplateReader(LINE_TEXT, None, (), STAMP), frames, cuts,
                     lambda v: (v["message"]["content"], None))


def test_frames_with_other_strings_in_their_slots_are_read_by_the_template() -> None:
    reader = TemplateReader(LINE_TEXT, None, (), STAMP)
    stamps = ["2025-01-02T03:04:05.123456789Z", "2025-01-02T03:04:05.1Z", "", "now",
              "2025-01-02T03:04:05-07:00"]
    frames = [line(t, s) for t, s in zip("abcde", stamps, strict=True)]
    out = read_all(reader, frames)
    assert all(isinstance(o, Slot) for o in out) and [o.text for o in out] == list("abcde")
    assert [o.parsed() for o in out] == [orjson.loads(f) for f in frames]
    # a stamp that needs unescaping, is not ASCII or has a control character, or a frame cut
    # inside its slot, another model, a member more: parsed (or learned from), or refused as
    # parsing refuses it
    others = [line("f", 'a "quoted" time'), line("g", "back\\slash"), line("h", "wörld"),
              line("i", "tab\there"), line("j", "x", model="n"),
              line("k", "x").replace(b'"created_at":"x"', b'"created_at":"x\x01"'),
              b'{"model":"m","created_at":"2025', line("l", "x", more=1)]
    _reads_as_parsed(reader, others, [], lambda v: (v["message"]["content"], None))
    # (those that fit no slot were parsed, not read by the template: a Slot of theirs, if any,
    # is of a template learned from them)
    for f in others[:4]:
        fresh = TemplateReader(LINE_TEXT, None, (), STAMP)
        read_all(fresh, frames[:1])
        got = fresh.read(f, "message")
        assert not isinstance(got, Slot) or got.value is not None, f


def test_string_slots_are_found_before_the_text_else_after_it_and_checked() -> None:
    """A string at a path after the text is a slot there; one whose spelling cannot be told
    from another string's gives no template (the stream's frames are parsed); a path the frame
    does not hold is no slot; a value there that is no string, no template."""
    after = orjson.dumps({"message": {"content": "a"}, "created_at": "t1"})
    template = learn(after, orjson.loads(after), LINE_TEXT, "a", "message", None, (), STAMP)
    assert template is not None
    assert template.match(after.replace(b'"a"', b'"bc"').replace(b'"t1"', b'"t22"')) == "bc"
    assert template.match(after.replace(b'"t1"', b'""')) == "a"
    for other in (b'"t\\"2"', b'"t\\\\2"', b'"w\\u00f6"', '"wö"'.encode(), b'"t\\t"',
                  b"1"):
        assert template.match(after.replace(b'"t1"', other)) is None, other
    spelled_twice = orjson.dumps({"message": {"content": "a"}, "created_at": "t1", "id": "t1"})
    assert learn(spelled_twice, orjson.loads(spelled_twice), LINE_TEXT, "a", "message", None,
                 (), (("id",),)) is None
    twice = orjson.dumps({"id": "t1", "created_at": "t1", "message": {"content": "a"}})
    assert learn(twice, orjson.loads(twice), LINE_TEXT, "a", "message", None, (), STAMP) is None
    raw = line("a", "t1")
    template = learn(raw, orjson.loads(raw), LINE_TEXT, "a", "message", None, (), STAMP)
    assert template is not None
    assert template.match(line("bc", "t22")) == "bc"
    missing = learn(raw, orjson.loads(raw), LINE_TEXT, "a", "message", None, (),
                    (*STAMP, ("missing",)))
    assert missing is not None and missing.match(line("d", "")) == "d"
    for value in (1, None, True):
        odd = orjson.dumps({"created_at": value, "message": {"content": "a"}})
        found = learn(odd, orjson.loads(odd), LINE_TEXT, "a", "message", None, (), STAMP)
        assert (found is None) == (value is not None)  # (null at the path: no slot)
    # with number slots after the text too
    both = orjson.dumps({"created_at": "t1", "message": {"content": "a"}, "usage": {"output": 1}})
    template = learn(both, orjson.loads(both), LINE_TEXT, "a", "message", None, USAGE, STAMP)
    assert template is not None
    assert template.match(both.replace(b'"t1"', b'"t22"').replace(b":1}", b":9}")) == "a"
    assert template.match(both.replace(b'"t1"', b'"t\\"2"')) is None


STREAM: tuple[TextPath, ...] = (("model",), ("id",))


@settings(max_examples=300, deadline=None)
@given(extra=st.dictionaries(EXTRA_KEYS, VALUES, max_size=3), first=JSON_TEXT.filter(bool),
       model=JSON_TEXT, steps=st.lists(st.tuples(JSON_TEXT, st.integers(-3, 2**40), JSON_TEXT,
                                                  JSON_TEXT), max_size=6),
       cuts=st.lists(st.tuples(st.integers(0, 300), st.binary(max_size=3)), max_size=3))
def test_a_frame_with_slots_after_its_text_read_by_its_template_is_what_parsing_it_gives(
        extra: dict[str, Any], first: str, model: str, steps: list[tuple[str, int, str, str]],
        cuts: list[tuple[int, bytes]]) -> None:
    """Strings and numbers after the text that change from frame to frame, and strings that
    should not (a stream's own), any of them (a string that needs unescaping or is not ASCII,
    a negative number, a stream's string changed: parsed), each frame read as parsing it
    gives."""
    def make(text: str, output: int, ident: str, pad: str) -> bytes:
        return orjson.dumps({"choices": [{"delta": {"content": text}}], **extra,
                             "usage": {"output": output, "total": 7}, "model": model,
                             "id": ident, "pad": pad})

    frames = [make(first, 1, "r1", "x"), *(make(t, o, i, p) for t, o, i, p in steps)]
    _reads_as_parsed(TemplateReader(PATH, None, USAGE, (("pad",),), STREAM), frames, cuts,
                     lambda v: (v["choices"][0]["delta"]["content"], None))


def test_a_template_is_tried_on_the_next_stream_of_its_source() -> None:
    """A reader given its source's memory tries the template the source's last stream learned
    (a frame of another stream, with its own strings in the stream's slots, is read by it, its
    parsed value left to its decoder); one whose frames do not fit learns its own and leaves
    it for the next; a dropped one is forgotten; one with a counter is never kept."""
    def make(text: str, ident: str, pad: str = "p") -> bytes:
        return orjson.dumps({"choices": [{"delta": {"content": text}}], "pad": pad, "id": ident})

    def reader() -> TemplateReader:
        return TemplateReader(PATH, None, (), (("pad",),), (("id",),), memory)

    memory = TemplateMemory()
    first = reader()
    learned = first.read(make("a", "s1"), "message")
    assert isinstance(learned, Slot) and learned.value is not None
    assert memory.template is not None
    second = reader()
    frames = [make("b", "s2"), make("c", "s2", "other-pad")]
    out = read_all(second, frames)
    assert [(type(o), o.text, o.value) for o in out] == [(Slot, "b", None), (Slot, "c", None)]
    assert [o.parsed() for o in out] == [orjson.loads(f) for f in frames]
    # within a stream its own strings are the template's: another's frame is parsed
    got = second.read(make("d", "s1"), "message")
    assert isinstance(got, Slot) and got.value == orjson.loads(make("d", "s1"))
    # frames of another shape: parsed, then learned, and that template kept
    other = orjson.dumps({"choices": [{"delta": {"content": "d"}, "index": 0}], "id": "s3"})
    third = reader()
    got = third.read(other, "message")
    assert isinstance(got, Slot) and got.value == orjson.loads(other)
    kept = memory.template
    assert kept is not None and reader().read(other.replace(b"s3", b"s4"), "message").value \
        is None
    third.drop()
    assert memory.template is None
    assert reader().read(other, "message").value == orjson.loads(other)  # (learned again)
    # a counter is one stream's state: a numbered template is not kept
    numbered_memory = TemplateMemory()
    counted = TemplateReader(PATH, ("n",), memory=numbered_memory)
    assert isinstance(counted.read(orjson.dumps(
        {"choices": [{"delta": {"content": "a"}}], "n": 3}), "message"), Slot)
    assert counted.template is not None and numbered_memory.template is None


def test_a_stream_string_spelled_as_another_is_no_slot() -> None:
    """A stream's string whose spelling another string after the text shares: the frame's
    template has no slot for it (the stream still reads its frames by their template)."""
    raw = orjson.dumps({"choices": [{"delta": {"content": "a"}}], "model": "m", "id": "m"})
    template = learn(raw, orjson.loads(raw), PATH, "a", "message", None, (), (), (("id",),))
    assert template is not None and template.match(raw.replace(b'"a"', b'"b"')) == "b"
    assert template.match(raw.replace(b'"id":"m"', b'"id":"n"')) is None


# --- streams: the same events, the same bytes, with the template as without -------------------


class _Untemplated:
    """A dialect as it is, but declaring no text path: frames are all parsed."""

    text_path = None

    def __init__(self, inner: Dialect) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


TEXTS = ["Hello", ", ", "wörld", " 😀", ' "quoted"', " back\\slash", "\n", " plain", " more",
         " text", "!"]
TEMPLATED = [d for d in DIALECTS.values() if getattr(d, "text_path", None) is not None]


_WHEN = re.compile(rb'\d{4}-\d\d-\d\dT[\d:.]+Z|(?<="created":)\d+|(?<="created_at":)\d+')
"""A time an encoder writes of its own (ISO 8601, or seconds since the epoch)."""


def _request() -> ChatRequest:
    return ChatRequest(messages=[Message("user", "hi")], stream=True)


def _stream(d: Dialect) -> list[bytes]:
    """A stream as the dialect's own encoder writes it, one frame per write."""
    encoder, framed = d.encoder(_request()), encoder_for(d.framing)
    events: list[StreamEvent] = [StreamStart(model="m"), *(TextDelta(t) for t in TEXTS),
                                 StreamFinish("stop")]
    return [framed(p) for e in events for p in encoder.encode(e)]


def _decoded(d: Any, reads: list[bytes]) -> list[StreamEvent]:
    decoding = TemplateDecoding.of(d, DEFAULT_MAX_LINE, None) or StreamDecoding(d)
    out = [e for r in reads for e in decoding.feed(r)]
    return out + decoding.finish()


def test_some_dialects_declare_a_text_path() -> None:
    assert TEMPLATED


@pytest.mark.parametrize("d", list(DIALECTS.values()), ids=list(DIALECTS))
def test_a_stream_decodes_alike_with_its_template(d: Dialect) -> None:
    frames = _stream(d)
    streams = [frames, [b"".join(frames)], *d.samples.streams.values()]
    for reads in streams:
        reads = [reads] if isinstance(reads, bytes) else reads
        assert _decoded(d, reads) == _decoded(_Untemplated(d), reads)
    assert [e.text for e in _decoded(d, frames) if isinstance(e, TextDelta)] == TEXTS


def _stream_of(d: Dialect, ident: str, texts: list[str]) -> list[bytes]:
    encoder, framed = d.encoder(_request()), encoder_for(d.framing)
    events: list[StreamEvent] = [StreamStart(id=ident, model="m"),
                                 *(TextDelta(t) for t in texts), StreamFinish("stop")]
    return [framed(p) for e in events for p in encoder.encode(e)]


@pytest.mark.parametrize("d", list(DIALECTS.values()), ids=list(DIALECTS))
def test_streams_of_one_source_decode_alike_with_the_template_it_kept(d: Dialect) -> None:
    """Each stream of a source, whatever it sends (its own ids, its captured samples, frames
    cut anywhere), decodes with the template its earlier streams left as without templates,
    identity routes forward the same bytes, and, where the dialect's text frames fit a
    template kept across streams, a later stream starts with it."""
    samples = [list(r) if not isinstance(r, bytes) else [r] for r in d.samples.streams.values()]
    streams = [_stream_of(d, "s1", TEXTS), _stream_of(d, "other-id-2", TEXTS[::-1]),
               *samples, _stream_of(d, "s3", TEXTS)]
    streams.append([b"".join(streams[-1])])
    memory = TemplateMemory()
    identity = TemplateMemory()
    for reads in streams:
        decoding = TemplateDecoding.of(d, DEFAULT_MAX_LINE, None, memory=memory) \
            or StreamDecoding(d)
        got = [e for r in reads for e in decoding.feed(r)] + decoding.finish()
        assert got == _decoded(_Untemplated(d), reads)
        outs = []
        for dialect, kept in ((d, identity), (_Untemplated(d), None)):
            tr = FastStreamTranslator(dialect, dialect, _request(),  # type: ignore[arg-type]
                                      memory=kept)
            outs.append(b"".join(tr.feed(r) for r in reads) + tr.finish())
        assert outs[0] == outs[1]
    if d in TEMPLATED and getattr(d, "counter_path", None) is None:
        assert memory.template is not None
        fresh, kept = _unparsed_slots(d, None), _unparsed_slots(d, memory)
        assert kept >= fresh


def _unparsed_slots(d: Dialect, memory: TemplateMemory | None, ident: str = "s4") -> int:
    """Text frames of a stream read by a template and never parsed (none parsed to learn)."""
    reader = SniffingReader(named=d.named_events,
                            text_path=d.text_path,  # type: ignore[attr-defined]
                            number_paths=getattr(d, "number_paths", ()),
                            string_paths=getattr(d, "string_paths", ()),
                            stream_string_paths=getattr(d, "stream_string_paths", ()),
                            memory=memory)
    payloads = [p for f in _stream_of(d, ident, TEXTS) for p in reader.feed(f)]
    return sum(isinstance(p, Slot) and p.value is None for p in payloads)


def test_most_sources_start_their_next_stream_with_the_template_they_kept() -> None:
    """Where a dialect's text frames hold nothing of their stream's own but in slots (its id,
    its time in a slot's place), the next stream parses none of them to learn a template."""
    kept = [d for d in TEMPLATED if getattr(d, "counter_path", None) is None]
    spared = []
    for d in kept:
        memory = TemplateMemory()
        _unparsed_slots(d, memory, "first-id")
        if _unparsed_slots(d, memory) > _unparsed_slots(d, None):
            spared.append(d.name)
    assert len(spared) * 2 > len(kept), spared


@pytest.mark.parametrize("d", TEMPLATED, ids=[d.name for d in TEMPLATED])
def test_most_text_frames_of_a_stream_are_read_by_the_template(d: Dialect) -> None:
    reader = SniffingReader(named=d.named_events, text_path=d.text_path,  # type: ignore[attr-defined]
                            counter_path=getattr(d, "counter_path", None),
                            number_paths=getattr(d, "number_paths", ()),
                            string_paths=getattr(d, "string_paths", ()),
                            stream_string_paths=getattr(d, "stream_string_paths", ()))
    payloads = [p for f in _stream(d) for p in reader.feed(f)]
    assert sum(isinstance(p, Slot) for p in payloads) >= len(TEXTS) - 4


@pytest.mark.parametrize("d", list(DIALECTS.values()), ids=list(DIALECTS))
def test_an_identity_route_forwards_the_same_bytes_with_its_template(d: Dialect) -> None:
    frames = _stream(d)
    blob = b"".join(frames)
    # whole frames, one read, and reads cut inside frames (their frames are written back)
    cuts = [blob[i:i + 37] for i in range(0, len(blob), 37)]
    for reads in (frames, [blob], cuts):
        outs = []
        for dialect in (d, _Untemplated(d)):
            tr = FastStreamTranslator(dialect, dialect, _request())  # type: ignore[arg-type]
            outs.append(b"".join(tr.feed(r) for r in reads) + tr.finish())
            assert tr.text_chars == sum(map(len, TEXTS))
            assert tr.finish_reason == "stop"
        assert outs[0] == outs[1]


@pytest.mark.parametrize("d", list(DIALECTS.values()), ids=list(DIALECTS))
def test_an_identity_stream_cut_short_ends_alike_with_its_template(d: Dialect) -> None:
    """What an encoder writes after the upstream's own frames (the error of a stream cut short)
    continues them the same when they were read by the template: numbering, ids, text kept."""
    frames = _stream(d)
    for cut in range(1, len(frames)):
        outs = []
        for dialect in (d, _Untemplated(d)):
            tr = FastStreamTranslator(dialect, dialect, _request())  # type: ignore[arg-type]
            out = b"".join(tr.feed(f) for f in frames[:cut]) \
                + tr.abort("the upstream reset the connection")
            outs.append(_WHEN.sub(b"<when>", out))  # the clock is no part of it
            assert tr.failed and tr.broken
        assert outs[0] == outs[1]
        assert outs[0].startswith(_WHEN.sub(b"<when>", b"".join(frames[:cut])))


@pytest.mark.parametrize("d", [d for d in DIALECTS.values() if d.framing == "jsonlines"],
                         ids=lambda d: d.name)
def test_lines_that_end_in_crlf_go_out_with_lf_alone(d: Dialect) -> None:
    """A CR is whitespace to JSON: an upstream's CRLF lines, even a read of whole ones, reach
    the client of an identity route with LF alone (and the same text)."""
    blob = b"".join(_stream(d)).replace(b"\n", b"\r\n")
    for reads in ([blob], [blob[:blob.index(b"\n") + 1], blob[blob.index(b"\n") + 1:]]):
        outs = []
        for dialect in (d, _Untemplated(d)):
            tr = FastStreamTranslator(dialect, dialect, _request())  # type: ignore[arg-type]
            outs.append(b"".join(tr.feed(r) for r in reads) + tr.finish())
            assert b"\r" not in outs[-1]
            assert tr.text_chars == sum(map(len, TEXTS)) and tr.finish_reason == "stop"
        assert outs[0] == outs[1]


class _ContextEveryFrame:
    """A decoder that reads each text frame as more than its text (a context update too), under
    a dialect that still declares a text path: the template must not be trusted."""

    def __init__(self) -> None:
        self.started = False

    def decode(self, payload: Any) -> list[StreamEvent]:
        text = payload["choices"][0]["delta"]["content"]
        return [ContextUpdate({"seen": text}), TextDelta(text)]

    def end(self) -> list[StreamEvent]:
        return [StreamFinish("stop")]


class _Fixture:
    name = "fixture"
    named_events = False
    text_path = PATH

    def decoder(self) -> _ContextEveryFrame:
        return _ContextEveryFrame()


def test_frames_the_decoder_does_not_read_as_text_alone_are_decoded_in_full() -> None:
    reads = [frame(t) + b"\n" for t in ("a", "b", "c", "d")]
    events = _decoded(_Fixture(), reads)
    assert events == [e for t in "abcd" for e in (ContextUpdate({"seen": t}), TextDelta(t))] + \
        [StreamFinish("stop")]
    assert slot_payload(Slot("a", frame("a"), "message")) == orjson.loads(frame("a"))


def test_a_frame_nested_too_deeply_to_compare_gets_no_template() -> None:
    deep = b'{"a":' * 1000 + b"1" + b"}" * 1000
    raw = b'{"choices":[{"delta":{"content":"tok"}}],"deep":' + deep + b"}"
    reader = TemplateReader(PATH)
    got = reader.read(raw, "message")
    assert not isinstance(got, Slot) and reader.template is None
