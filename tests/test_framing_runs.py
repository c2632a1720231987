"""Runs of text frames read at once (gateway.framing.template, "Runs"): what a run says of its
bytes is what reading its frames one by one says, whatever the bytes; the framing readers give
the same frames with runs as without; and an identity stream forwards the same bytes, counts the
same and fails the same with runs as without, for every registered dialect."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.canonical import (
    ChatRequest,
    Message,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
)
from gateway.dialects import DIALECTS, Dialect
from gateway.framing import (
    RawData,
    Slot,
    SniffingReader,
    TextRun,
    encoder_for,
    named,
    slot_payload,
)
from gateway.framing.sse import SSEReader, encode_event
from gateway.framing.template import TemplateReader, TextPath
from gateway.pipeline_fast import FastStreamTranslator, TemplateDecoding, stream_translator

PATH: TextPath = ("choices", 0, "delta", "content")
FRAMINGS = {  # (head, tail) of a frame: JSON lines, an SSE event, a named SSE event
    "lines": (b"", b"\n"),
    "sse": (b"data: ", b"\n\n"),
    "named": (b"event: delta\ndata: ", b"\n\n"),
}
TEXT = st.text(st.characters(codec="utf-8"), max_size=8)
PLAIN = st.text(st.characters(codec="utf-8", blacklist_characters='"\\',
                              blacklist_categories=["Cc"]), min_size=1, max_size=8)


def frame(text: str, extra: dict[str, Any]) -> bytes:
    return orjson.dumps({"id": "c1", **extra, "choices": [{"delta": {"content": text}}]})


def learned(extra: dict[str, Any]) -> TemplateReader:
    reader = TemplateReader(PATH)
    assert isinstance(reader.read(frame("first", extra), "delta"), Slot)
    reader.runs = True
    return reader


def one_by_one(reader: TemplateReader, data: bytes, start: int, end: int, head: bytes,
               tail: bytes) -> list[str] | None:
    """The texts of the frames in ``data[start:end]`` read one at a time by the template, or
    ``None`` when that span is not whole frames that each fit it."""
    template = reader.template
    assert template is not None
    texts = []
    at = start
    while at < end:
        if not data.startswith(head, at):
            return None
        stop = data.find(tail, at + len(head))
        if stop < 0 or stop + len(tail) > end:
            return None
        text = template.match(data[at + len(head):stop])
        if text is None:
            return None
        texts.append(text)
        at = stop + len(tail)
    return texts


def read_run(reader: TemplateReader, data: bytes, cuts: list[tuple[int, bytes]], head: bytes,
             tail: bytes) -> tuple[TextRun | None, bytes]:
    """The run read from the start of ``data`` with a few bytes changed anywhere (``cuts``),
    checked against reading its frames one by one; and the bytes it was read from."""
    for at, junk in cuts:
        data = data[:at] + junk + data[at + len(junk):]
    run = reader.run(data, 0, head, tail, 1 << 20)
    if run is None:
        return None, data
    expected = one_by_one(reader, data, run.start, run.end, head, tail)
    assert expected is not None, (data, run)
    assert run.count == len(expected) >= 2
    assert [t.decode() for t in run.texts()] == expected
    assert run.chars == sum(map(len, expected))
    return run, data


def rests_hold(run: TextRun, head: bytes, tail: bytes) -> None:
    """Each :meth:`TextRun.rest` of ``run`` is its frames from the k-th on, as reading them one
    by one gives them: the bytes from that frame's start, their texts, characters and counter."""
    slots = run.slots()
    first, after = run.split()
    assert (first.text, first.raw, first.event, first.counter, first.value) == \
        (slots[0].text, slots[0].raw, slots[0].event, slots[0].counter, None)
    assert after is not None and (after.start, after.count) == (run.rest(1).start, run.count - 1)
    for k in range(1, run.count):
        rest = run.rest(k)
        skipped = sum(len(head) + len(s.raw) + len(tail) for s in slots[:k])
        assert (rest.data, rest.start, rest.end) == (run.data, run.start + skipped, run.end)
        assert rest.count == run.count - k and rest.texts() == run.texts()[k:]
        assert rest.chars == sum(len(s.text) for s in slots[k:])
        assert (rest.counter, rest.event) == (run.counter, run.event)
        assert [(s.text, s.raw, s.event, s.counter) for s in rest.slots()] == \
            [(s.text, s.raw, s.event, s.counter) for s in slots[k:]]


def frames_hold(run: TextRun, data: bytes, head: bytes, tail: bytes, text_of: Any) -> None:
    """Each of ``run``'s frames, as reading it alone gives it, is its bytes as they came in
    ``data``, never parsed, its text ``text_of`` its parsed value; and its rests hold."""
    at = run.start
    for slot in run.slots():
        frame = head + slot.raw + tail
        assert data.startswith(frame, at) and slot.value is None
        assert text_of(orjson.loads(slot.raw)) == slot.text
        at += len(frame)
    assert at == run.end
    rests_hold(run, head, tail)


@settings(max_examples=400, deadline=None)
@given(kind=st.sampled_from(sorted(FRAMINGS)),
       extra=st.dictionaries(st.sampled_from(["a", "b", "model"]),
                             st.integers(0, 9) | st.text(max_size=3), max_size=2),
       texts=st.lists(TEXT, min_size=1, max_size=8), after=st.booleans(),
       cuts=st.lists(st.tuples(st.integers(0, 400), st.binary(max_size=3)), max_size=3))
def test_a_run_is_what_reading_its_frames_one_by_one_gives(
        kind: str, extra: dict[str, Any], texts: list[str], after: bool,
        cuts: list[tuple[int, bytes]]) -> None:
    head, tail = FRAMINGS[kind]
    reader = learned(extra)
    data = b"".join(head + frame(t, extra) + tail for t in texts)
    if after:  # a frame of another shape after the run (a finish)
        data += head + orjson.dumps({"id": "c1", "choices": [{"finish_reason": "stop"}]}) + tail
    run, data = read_run(reader, data, cuts, head, tail)
    if run is None:
        return
    expected = [t.decode() for t in run.texts()]
    assert [s.text for s in run.slots()] == expected
    assert all(s.raw == frame(s.text, extra) or s.parsed() == orjson.loads(s.raw)
               for s in run.slots())
    rests_hold(run, head, tail)


@pytest.mark.parametrize("kind", sorted(FRAMINGS))
def test_plain_frames_after_the_learned_one_are_one_run(kind: str) -> None:
    head, tail = FRAMINGS[kind]
    reader = learned({})
    texts = ["tok ", "wörld", " 😀", "a/b", "x" * 300]
    data = b"".join(head + frame(t, {}) + tail for t in texts)
    finish = head + orjson.dumps({"choices": [{"finish_reason": "stop"}]}) + tail
    run = reader.run(data + finish, 0, head, tail, 1 << 20)
    assert run is not None and (run.start, run.end, run.count) == (0, len(data), len(texts))
    assert run.text() == "".join(texts)


@pytest.mark.parametrize("bad", ['a "quote"', "back\\slash", "tab\t", "", "\x7f ok"])
def test_a_frame_that_needs_unescaping_or_is_empty_is_no_part_of_a_run(bad: str) -> None:
    """The run ends before such a frame (read one by one, as are those after it); one that
    would start with it is none."""
    reader = learned({})
    texts = ["a", "b", bad, "c"]
    data = b"".join(frame(t, {}) + b"\n" for t in texts)
    run = reader.run(data, 0, b"", b"\n", 1 << 20)
    assert run is not None
    if bad == "\x7f ok":  # a plain string after all (DEL is no control character to JSON)
        assert run.count == 4
    else:
        two = len(frame("a", {}) + frame("b", {})) + 2
        assert (run.count, run.text(), run.end) == (2, "ab", two)
        assert data[run.end:].startswith(frame(bad, {}))
        assert reader.run(data, len(frame("a", {})) + 1, b"", b"\n", 1 << 20) is None


def test_no_run_past_the_size_limit_nor_of_one_frame_nor_across_a_line_cut() -> None:
    reader = learned({})
    data = b"".join(frame(t, {}) + b"\n" for t in ["a", "b", "c"])
    assert reader.run(data, 0, b"", b"\n", len(data) - 1) is None
    assert reader.run(frame("a", {}) + b"\n", 0, b"", b"\n", 1 << 20) is None
    assert reader.run(data[:-5], 0, b"", b"\n", 1 << 20) is not None  # the whole ones
    assert reader.run(data.replace(b"\n", b"\r\n"), 0, b"", b"\n", 1 << 20) is None


def test_numbered_frames_are_a_run_when_their_numbers_follow() -> None:
    reader = TemplateReader(("delta",), ("n",))

    def numbered(text: str, n: int) -> bytes:
        return orjson.dumps({"type": "delta", "delta": text, "n": n}) + b"\n"

    assert isinstance(reader.read(numbered("a", 7)[:-1], "message"), Slot)
    reader.runs = True
    data = b"".join(numbered(t, n) for n, t in zip(range(8, 12), "bcde", strict=True))
    run = reader.run(data, 0, b"", b"\n", 1 << 20)
    assert run is not None and run.count == 4 and run.counter == 11 and run.text() == "bcde"
    assert [(s.text, s.counter) for s in run.slots()] == list(zip("bcde", range(8, 12),
                                                                  strict=True))
    assert [s.raw + b"\n" for s in run.slots()] == [numbered(t, n) for n, t in
                                                     zip(range(8, 12), "bcde", strict=True)]
    assert reader.template is not None and reader.template.count == 11  # the next is 12
    # a number that does not follow, or one spelled another way: no run
    for bad in (numbered("f", 14), numbered("f", 13).replace(b"13", b"013")):
        assert reader.run(numbered("e", 12) + bad, 0, b"", b"\n", 1 << 20) is None


def test_frames_numbered_before_their_text_are_read_one_by_one() -> None:
    reader = TemplateReader(("delta",), ("n",))
    frames = [orjson.dumps({"n": n, "delta": t}) + b"\n" for n, t in enumerate("abcd")]
    assert isinstance(reader.read(frames[0][:-1], "message"), Slot)
    reader.runs = True
    assert reader.run(b"".join(frames[1:]), 0, b"", b"\n", 1 << 20) is None


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(FRAMINGS)), start=st.integers(0, 2**20),
       steps=st.lists(st.tuples(TEXT, st.integers(-1, 2)), min_size=1, max_size=8),
       cuts=st.lists(st.tuples(st.integers(0, 500), st.binary(max_size=3)), max_size=3))
def test_a_numbered_run_is_what_reading_its_frames_one_by_one_gives(
        kind: str, start: int, steps: list[tuple[str, int]],
        cuts: list[tuple[int, bytes]]) -> None:
    head, tail = FRAMINGS[kind]

    def numbered(text: str, n: int) -> bytes:
        return orjson.dumps({"type": "delta", "item_id": "m1", "delta": text, "logprobs": [],
                             "sequence_number": n})

    reader = TemplateReader(("delta",), ("sequence_number",))
    assert isinstance(reader.read(numbered("first", start), "delta"), Slot)
    reader.runs = True
    n, frames = start, []
    for text, step in steps:  # mostly the number that follows, sometimes another
        n += step
        frames.append(head + numbered(text, n) + tail)
    data = b"".join(frames)
    for at, junk in cuts:
        data = data[:at] + junk + data[at + len(junk):]
    template = reader.template
    assert template is not None
    expected_first = template.count + 1
    run = reader.run(data, 0, head, tail, 1 << 20)
    if run is None:
        return
    # frame by frame, with a template that expects the same numbers
    assert run.counter == expected_first + run.count - 1 == template.count
    slots = run.slots()
    at = run.start
    for k, slot in enumerate(slots):
        frame = head + slot.raw + tail
        assert data.startswith(frame, at)
        at += len(frame)
        value = orjson.loads(slot.raw)
        assert value["delta"] == slot.text and value["sequence_number"] == slot.counter
        assert slot.counter == expected_first + k
        assert slot.raw == numbered(slot.text, slot.counter)  # a plain string, as written
    assert at == run.end and run.chars == sum(len(s.text) for s in slots)
    rests_hold(run, head, tail)


USAGE: tuple[TextPath, ...] = (("usage", "prompt"), ("usage", "output"), ("usage", "total"))


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(FRAMINGS)),
       steps=st.lists(st.tuples(TEXT, st.integers(0, 2**40), st.sampled_from(["", "0", "01"])),
                      min_size=1, max_size=8),
       cuts=st.lists(st.tuples(st.integers(0, 600), st.binary(max_size=3)), max_size=3))
def test_a_run_with_number_slots_is_what_reading_its_frames_one_by_one_gives(
        kind: str, steps: list[tuple[str, int, str]], cuts: list[tuple[int, bytes]]) -> None:
    """Frames whose numbers change from frame to frame (any of them, some spelled as no JSON
    writer spells them), with stray bytes anywhere: a run found is the frames that reading them
    one by one reads, each frame's bytes given back as they came."""
    head, tail = FRAMINGS[kind]

    def make(text: str, output: int, spelled: str = "") -> bytes:
        raw = orjson.dumps({"choices": [{"delta": {"content": text}, "index": 0}],
                            "usage": {"prompt": 7, "output": output, "total": output + 7},
                            "model": "m"})
        return raw.replace(b'"output":', b'"output":' + spelled.encode(), 1)

    reader = TemplateReader(PATH, None, USAGE)
    assert isinstance(reader.read(make("first", 1), "message"), Slot)
    reader.runs = True
    data = b"".join(head + make(t, n, s) + tail for t, n, s in steps)
    run, data = read_run(reader, data, cuts, head, tail)
    if run is None:
        return
    assert run.counter is None
    frames_hold(run, data, head, tail, lambda v: v["choices"][0]["delta"]["content"])


def test_frames_with_number_slots_in_a_row_are_one_run() -> None:
    def make(text: str, output: int) -> bytes:
        return orjson.dumps({"choices": [{"delta": {"content": text}}],
                             "usage": {"output": output, "total": output + 7}})

    reader = TemplateReader(PATH, None, USAGE)
    assert isinstance(reader.read(make("a", 1), "message"), Slot)
    reader.runs = True
    frames = [b"data: " + make(t, n) + b"\n\n" for n, t in enumerate("bcde", 2)]
    run = reader.run(b"".join(frames), 0, b"data: ", b"\n\n", 1 << 20)
    assert run is not None and run.text() == "bcde" and run.end == len(b"".join(frames))
    assert [b"data: " + s.raw + b"\n\n" for s in run.slots()] == frames
    assert run.last().parsed() == orjson.loads(make("e", 5))
    # a number left out, or spelled with a leading zero, or an empty text (a finish): the run
    # ends before that frame
    for bad in (make("f", 6).replace(b'"output":6,', b""), make("f", 6).replace(b":6,", b":06,"),
                make("", 6)):
        data = b"".join(frames) + b"data: " + bad + b"\n\n"
        run = reader.run(data, 0, b"data: ", b"\n\n", 1 << 20)
        assert run is not None and run.text() == "bcde" and run.end == len(b"".join(frames))
        assert data[run.end:].startswith(b"data: " + bad)


AFTER: tuple[TextPath, ...] = (("model",), ("id",))


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(FRAMINGS)),
       steps=st.lists(st.tuples(TEXT, st.integers(0, 2**40), TEXT, TEXT), min_size=1,
                      max_size=8),
       cuts=st.lists(st.tuples(st.integers(0, 600), st.binary(max_size=3)), max_size=3))
@example(kind="sse", steps=[("b", 2, "m", "r1"), ("c", 3, "m", "r2"), ("d", 4, "", "r3")],
         cuts=[])
def test_a_run_with_string_slots_after_the_text_is_what_reading_its_frames_one_by_one_gives(
        kind: str, steps: list[tuple[str, int, str, str]], cuts: list[tuple[int, bytes]]) -> None:
    """Frames whose strings and numbers after the text change from frame to frame (any of
    them, some strings that fit no slot), with stray bytes anywhere: a run found is the frames
    that reading them one by one reads, each frame's bytes given back as they came."""
    head, tail = FRAMINGS[kind]

    def make(text: str, output: int, model: str, ident: str) -> bytes:
        return orjson.dumps({"choices": [{"delta": {"content": text}, "index": 0}],
                             "usage": {"prompt": 7, "output": output, "total": output + 7},
                             "model": model, "id": ident})

    reader = TemplateReader(PATH, None, USAGE, AFTER)
    assert isinstance(reader.read(make("first", 1, "m", "r0"), "message"), Slot)
    reader.runs = True
    data = b"".join(head + make(*step) + tail for step in steps)
    run, data = read_run(reader, data, cuts, head, tail)
    if run is None:
        return
    frames_hold(run, data, head, tail, lambda v: v["choices"][0]["delta"]["content"])


def test_frames_with_strings_after_their_text_in_a_row_are_one_run() -> None:
    def make(text: str, ident: str, output: int = 1) -> bytes:
        return orjson.dumps({"choices": [{"delta": {"content": text}}],
                             "usage": {"output": output}, "id": ident})

    reader = TemplateReader(PATH, None, USAGE, AFTER)
    assert isinstance(reader.read(make("a", "r1"), "message"), Slot)
    reader.runs = True
    frames = [b"data: " + make(t, i, n) + b"\n\n"
              for t, i, n in (("b", "pad", 2), ("c", "", 3), ("d", "xyz-1", 4))]
    run = reader.run(b"".join(frames), 0, b"data: ", b"\n\n", 1 << 20)
    assert run is not None and run.text() == "bcd" and run.end == len(b"".join(frames))
    assert [b"data: " + s.raw + b"\n\n" for s in run.slots()] == frames
    # a string that needs unescaping or is not ASCII: the run ends before that frame
    for bad in (make("e", 'q"q'), make("e", "wö"), make("e", "t\tab")):
        data = b"".join(frames) + b"data: " + bad + b"\n\n"
        run = reader.run(data, 0, b"data: ", b"\n\n", 1 << 20)
        assert run is not None and run.text() == "bcd" and run.end == len(b"".join(frames))


STAMP: tuple[TextPath, ...] = (("created_at",),)
LINE_TEXT: TextPath = ("message", "content")


def stamped(text: str, stamp: str) -> bytes:
    return orjson.dumps({"model": "m", "created_at": stamp,
                         "message": {"role": "assistant", "content": text}, "done": False})


def stamped_reader() -> TemplateReader:
    reader = TemplateReader(LINE_TEXT, None, (), STAMP)
    assert isinstance(reader.read(stamped("first", "2025-01-01T00:00:00Z"), "message"), Slot)
    reader.runs = True
    return reader


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(FRAMINGS)),
       steps=st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=8),
       cuts=st.lists(st.tuples(st.integers(0, 600), st.binary(max_size=3)), max_size=3))
def test_a_run_with_string_slots_is_what_reading_its_frames_one_by_one_gives(
        kind: str, steps: list[tuple[str, str]], cuts: list[tuple[int, bytes]]) -> None:
    """Frames whose strings before the text change from frame to frame (any of them, some that
    fit no slot), with stray bytes anywhere: a run found is the frames that reading them one by
    one reads, each frame's bytes given back as they came."""
    head, tail = FRAMINGS[kind]
    reader = stamped_reader()
    data = b"".join(head + stamped(t, s) + tail for t, s in steps)
    run, data = read_run(reader, data, cuts, head, tail)
    if run is None:
        return
    frames_hold(run, data, head, tail, lambda v: v["message"]["content"])


def test_frames_with_string_slots_in_a_row_are_one_run() -> None:
    reader = stamped_reader()
    stamps = ["2025-01-01T00:00:00.5Z", "", "2025-01-01T00:00:01.123456789-07:00", "now"]
    frames = [stamped(t, s) + b"\n" for t, s in zip("bcde", stamps, strict=True)]
    run = reader.run(b"".join(frames), 0, b"", b"\n", 1 << 20)
    assert run is not None and run.text() == "bcde" and run.end == len(b"".join(frames))
    assert [s.raw + b"\n" for s in run.slots()] == frames
    # a stamp that is no plain ASCII string, a text that is none (a quote) or empty (a finish):
    # the run ends before that frame; a frame past the size limit: none after it either
    for bad in (stamped("f", 'a "q"'), stamped("f", "wörld"), stamped('"f"', "x"),
                stamped("", "x")):
        data = b"".join(frames) + bad + b"\n" + frames[0]
        run = reader.run(data, 0, b"", b"\n", 1 << 20)
        assert run is not None and run.text() == "bcde" and run.end == len(b"".join(frames))
        assert data[run.end:].startswith(bad)
    run = reader.run(b"".join(frames), 0, b"", b"\n", len(frames[0]) + len(frames[1]))
    assert run is not None and run.text() == "bc"


# --- the framing readers: the same frames with runs as without ---------------------------------


def _flat(payloads: list[Any]) -> list[Any]:
    """The frames' values (a Slot's and a run's frames' as parsing gives them)."""
    out: list[Any] = []
    for p in payloads:
        out.extend(p.slots() if isinstance(p, TextRun) else [p])
    return [slot_payload(Slot(p.text, p.raw, p.event)) if isinstance(p, Slot) else p for p in out]


@settings(max_examples=200, deadline=None)
@example(framing="sse", texts=["0"], cut=85, junk=b"\n")  # a blank line after the last event
@given(framing=st.sampled_from(["lines", "sse", "named"]),
       texts=st.lists(PLAIN | TEXT, min_size=1, max_size=10),
       cut=st.integers(0, 2000), junk=st.binary(max_size=2))
def test_a_reader_gives_the_same_frames_with_runs_as_without(
        framing: str, texts: list[str], cut: int, junk: bytes) -> None:
    head, tail = FRAMINGS[framing]
    start = head + orjson.dumps({"role": "assistant"}) + tail
    data = start + b"".join(head + frame(t, {}) + tail for t in texts)
    data = data[:cut] + junk + data[cut + len(junk):]
    outs: list[Any] = []
    for runs in (True, False):
        reader = SniffingReader(named=framing == "named", text_path=PATH)
        reader.allow_runs(runs)
        try:
            got = reader.feed(data)
        except Exception as e:
            outs.append((type(e), str(e)))
            continue
        outs.append((_flat(got), reader.whole))
    assert outs[0] == outs[1]


_LINES = st.sampled_from([
    b"event: delta", b"event:delta", b"event:", b"event:  two", b"data: {}", b'data:{"a":1}',
    b"data: 1", b"data:", b"data:  x", b": a comment", b"id: 7", b"retry: 5", b"",
    b"data: " + frame("t", {}), b"data:" + frame("u", {})])


@settings(max_examples=400, deadline=None)
@given(named_events=st.booleans(), runs=st.booleans(),
       events=st.lists(st.lists(_LINES, min_size=1, max_size=3), min_size=1, max_size=8))
def test_whole_events_read_fast_are_what_the_line_by_line_reader_gives(
        named_events: bool, runs: bool, events: list[list[bytes]]) -> None:
    """Whatever lines an event holds (names with and without their space, comments, ids, data
    over two lines, no data), the readers' fast paths, with runs or without, give what the
    spec's line-by-line reader (gateway.framing.sse.SSEReader.feed) gives."""
    data = b"data: {}\n\n" + b"".join(b"\n".join(lines) + b"\n\n" for lines in events)
    reader = SniffingReader(named=named_events, text_path=PATH)
    reader.allow_runs(runs)
    got = _flat(reader.feed(data))
    events = SSEReader().feed(data)
    want = [_parsed(e.data) if e.event == "message" or not named_events
            else named(e.event, _parsed(e.data)) for e in events]
    assert got == want
    # whole: the read is its events as the gateway writes them, and nothing else
    again = b"".join(encode_event(e.data.encode() if e.event == "message" or not named_events
                                  else named(e.event, e.data.encode())) for e in events)
    assert reader.whole == (data == again)


@settings(max_examples=400, deadline=None)
@given(named_events=st.booleans(), runs=st.booleans(),
       events=st.lists(st.lists(_LINES, min_size=1, max_size=3), min_size=1, max_size=8),
       cuts=st.lists(st.integers(1, 1 << 12), max_size=5), bom=st.booleans())
def test_events_in_reads_cut_anywhere_are_what_the_line_by_line_reader_gives(
        named_events: bool, runs: bool, events: list[list[bytes]], cuts: list[int],
        bom: bool) -> None:
    """Reads cut inside events (the whole events between the cuts go the fast way, the cut
    ones the general way) give, in all, what the spec's line-by-line reader gives the
    bytes at once; a read that is not whole events is never said to be."""
    data = b"\xef\xbb\xbf" * bom + b"data: {}\n\n" + b"".join(
        b"\n".join(lines) + b"\n\n" for lines in events)
    edges = sorted({k % len(data) for k in cuts if k % len(data)})
    reads = [data[a:b] for a, b in zip([0, *edges], [*edges, len(data)], strict=True)]
    reader = SniffingReader(named=named_events, text_path=PATH)
    reader.allow_runs(runs)
    got: list[Any] = []
    for r in reads:
        got.extend(_flat(reader.feed(r)))
        assert not reader.whole or r.endswith(b"\n\n")
    got.extend(_flat(reader.finish()))
    events_read = SSEReader().feed(data)
    want = [_parsed(e.data) if e.event == "message" or not named_events
            else named(e.event, _parsed(e.data)) for e in events_read]
    assert got == want


@pytest.mark.parametrize("framing", ["sse", "named"])
def test_whole_events_of_a_read_cut_inside_events_are_read_by_the_template(
        framing: str) -> None:
    """TCP cuts reads where it likes: the events whole in a read that begins or ends inside
    one are still read by the stream's template (and runs), not parsed one by one."""
    head, tail = FRAMINGS[framing]
    texts = [f"piece {i}" for i in range(40)]
    data = b"".join(head + frame(t, {}) + tail for t in texts)
    size = len(head + frame(texts[0], {}) + tail)
    reads = [data[i:i + 5 * size + size // 2] for i in range(0, len(data), 5 * size + size // 2)]
    assert any(not r.endswith(b"\n\n") for r in reads)
    reader = SniffingReader(named=framing == "named", text_path=PATH)
    reader.allow_runs(True)
    parsed = by_template = 0
    for r in reads:
        for p in reader.feed(r):
            if isinstance(p, TextRun):
                by_template += p.count
            elif isinstance(p, Slot) and p.value is None:
                by_template += 1
            else:
                parsed += 1  # (the template's first frame, and the frames cut between reads)
    assert parsed + by_template == len(texts)
    assert parsed <= len(reads) + 1, (parsed, len(reads))


def _parsed(data: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return RawData(data)


# --- identity streams: the same bytes, counts and failures with runs as without ----------------

TEXTS = ["Hello", ", ", "wörld", " 😀", " plain", " more", " text", "!", " again", " end"]


def _request() -> ChatRequest:
    return ChatRequest(messages=[Message("user", "hi")], stream=True)


def _stream(d: Dialect, texts: list[str]) -> list[bytes]:
    encoder, framed = d.encoder(_request()), encoder_for(d.framing)
    events: list[StreamEvent] = [StreamStart(model="m"), *(TextDelta(t) for t in texts),
                                 StreamFinish("stop")]
    return [framed(p) for e in events for p in encoder.encode(e)]


_OWN = re.compile(rb'[0-9a-f]{24,}|\d{4}-\d\d-\d\dT[\d:.]+Z|(?<="created":)\d+'
                  rb'|(?<="created_at":)\d+|(?<=_duration":)\d+')
"""What an encoder writes of its own in an error event (a new id, the clock, durations it
measured)."""


def _identity(d: Dialect, reads: list[bytes], runs: bool, abort_at: int | None = None) -> Any:
    return _translated(d, d, reads, runs, abort_at)


@pytest.mark.parametrize("d", list(DIALECTS.values()), ids=list(DIALECTS))
def test_an_identity_stream_is_the_same_with_runs_as_without(d: Dialect) -> None:
    frames = _stream(d, TEXTS)
    blob = b"".join(frames)
    half = len(blob) // 2
    for reads in ([blob], frames, [blob[:half], blob[half:]], [blob[:7], blob[7:]]):
        assert _identity(d, reads, True) == _identity(d, reads, False)
        # cut short after each read: the error event continues what was shown, alike
        for k in range(1, len(reads) + 1):
            assert _identity(d, reads, True, k) == _identity(d, reads, False, k)


@settings(max_examples=60, deadline=None)
@given(d=st.sampled_from(list(DIALECTS.values())), texts=st.lists(PLAIN | TEXT, max_size=12),
       cuts=st.lists(st.integers(1, 4000), max_size=3),
       junk=st.tuples(st.integers(0, 4000), st.binary(max_size=2)))
def test_any_identity_stream_is_the_same_with_runs_as_without(
        d: Dialect, texts: list[str], cuts: list[int], junk: tuple[int, bytes]) -> None:
    blob = b"".join(_stream(d, texts))
    at, bad = junk
    blob = blob[:at] + bad + blob[at + len(bad):]
    edges = sorted({c for c in cuts if c < len(blob)})
    reads = [blob[a:b] for a, b in zip([0, *edges], [*edges, len(blob)], strict=True)]
    assert _identity(d, reads, True) == _identity(d, reads, False)


def _translated(up: Dialect, client: Dialect, reads: list[bytes], runs: bool,
                abort_at: int | None = None) -> Any:
    """What a stream from ``up`` gave ``client`` (an identity stream when they are one), read
    with or without runs, cut short after ``abort_at`` reads: its bytes and its accounting."""
    tr = stream_translator(up, client, _request(),
                           accelerate={"forward", "templates"} | ({"runs"} if runs else set()))
    out = [tr.feed(r) for r in reads[:abort_at]]
    out.append(tr.finish() if abort_at is None else tr.abort("the upstream reset"))
    return (_OWN.sub(b"<own>", b"".join(out)), tr.chunks, tr.text_chars, tr.content_started,
            tr.finish_reason, tr.error, tr.events_read(), tr.usage, tr.model, tr.dropped)


PAIRS = [(u, c) for u in DIALECTS.values() for c in DIALECTS.values() if u is not c]


@pytest.mark.parametrize(("up", "client"), PAIRS,
                         ids=[f"{c.name}<-{u.name}" for u, c in PAIRS])
def test_a_translated_stream_is_the_same_with_runs_as_without(up: Dialect,
                                                               client: Dialect) -> None:
    frames = _stream(up, TEXTS)
    blob = b"".join(frames)
    half = len(blob) // 2
    for reads in ([blob], frames, [blob[:half], blob[half:]]):
        assert _translated(up, client, reads, True) == _translated(up, client, reads, False)
        assert _translated(up, client, reads, True, 1) == _translated(up, client, reads, False, 1)


@settings(max_examples=60, deadline=None)
@given(pair=st.sampled_from(PAIRS), texts=st.lists(PLAIN | TEXT, max_size=12),
       cuts=st.lists(st.integers(1, 4000), max_size=3),
       junk=st.tuples(st.integers(0, 4000), st.binary(max_size=2)))
def test_any_translated_stream_is_the_same_with_runs_as_without(
        pair: tuple[Dialect, Dialect], texts: list[str], cuts: list[int],
        junk: tuple[int, bytes]) -> None:
    up, client = pair
    blob = b"".join(_stream(up, texts))
    at, bad = junk
    blob = blob[:at] + bad + blob[at + len(bad):]
    edges = sorted({c for c in cuts if c < len(blob)})
    reads = [blob[a:b] for a, b in zip([0, *edges], [*edges, len(blob)], strict=True)]
    assert _translated(up, client, reads, True) == _translated(up, client, reads, False)


def test_the_runs_are_taken_on_an_identity_stream() -> None:
    """(What the tests above compare is not two ways that never differ: runs are read, and
    taken whole.) The stream comes in two reads, the first ending after its second text frame:
    a decoder whose first text of a message carries the message's id confirms the template on
    the second, one by one, and takes the runs after it."""
    for d in DIALECTS.values():
        if getattr(d, "text_path", None) is None or getattr(d, "counter_path", None) is not None:
            continue
        tr = FastStreamTranslator(d, d, _request())
        decoding = tr._in
        assert isinstance(decoding, TemplateDecoding)
        taken = 0
        frames = _stream(d, ["tok "] * 20)
        second = [i for i, f in enumerate(frames) if b'"tok "' in f][1]
        for read in (frames[:second + 1], frames[second + 1:]):
            payloads = decoding.payloads(b"".join(read))
            assert isinstance(payloads, list)
            for p in payloads:
                if isinstance(p, TextRun) and decoding.take_run(p):
                    taken += p.count
                elif isinstance(p, TextRun):
                    assert taken == 0 and p.count == 1, d.name  # only while it confirms
                    decoding.decode(p.slots()[0])
                else:
                    decoding.decode(p)
        assert taken >= 17, d.name


# --- encoders that write a run's texts as they are ---------------------------------------------

PLAIN_WRITERS = [d for d in DIALECTS.values() if hasattr(d.encoder(_request()), "plain_texts")]


def _written(d: Dialect, payloads: list[Any]) -> bytes:
    framed = encoder_for(d.framing)
    return _OWN.sub(b"<own>", b"".join(framed(p) for p in payloads))


@settings(max_examples=150, deadline=None)
@given(d=st.sampled_from(PLAIN_WRITERS), before=st.lists(PLAIN | TEXT, max_size=3),
       texts=st.lists(PLAIN, min_size=1, max_size=6))
def test_an_encoder_writes_plain_texts_as_it_writes_their_text_deltas(
        d: Dialect, before: list[str], texts: list[str]) -> None:
    """``plain_texts`` (gateway.dialects.base.StreamEncoder) gives the bytes that encoding each
    text's TextDelta gives, and leaves the encoder where those would have: what it writes next
    (a finish that repeats the whole text, numbered on) is the same too."""
    fast, slow = d.encoder(_request()), d.encoder(_request())
    for e in [StreamStart(id="resp_1", model="m", created=1), *(TextDelta(t) for t in before)]:
        assert _written(d, fast.encode(e)) == _written(d, slow.encode(e))
    plain = fast.plain_texts([t.encode() for t in texts])  # type: ignore[attr-defined]
    if any(before):  # the stream has begun and its text is open: never the general path
        assert plain is not None, d.name
    deltas = [p for t in texts for p in slow.encode(TextDelta(t))]
    if plain is None:  # (nothing changed: the general path writes them)
        assert _written(d, [p for t in texts for p in fast.encode(TextDelta(t))]) \
            == _written(d, deltas)
    else:
        assert _written(d, plain) == _written(d, deltas)
    finish = StreamFinish("stop")
    assert _written(d, fast.encode(finish)) == _written(d, slow.encode(finish))


def test_some_encoders_write_plain_texts() -> None:
    """(The test above is not vacuous: the encoders the gateway's benchmarks translate to most
    write runs this way.)"""
    assert len(PLAIN_WRITERS) >= 4


@pytest.mark.parametrize("runs", [True, False])
@pytest.mark.parametrize("named_events", [True, False])
def test_a_bom_after_events_read_fast_is_not_dropped(runs: bool, named_events: bool) -> None:
    """Events read by the fast paths begin the stream: a BOM that comes after them is part of
    the next line's field name (an unknown field, not dropped as a stream's first BOM is), as
    the line-by-line reader reads it."""
    first = b"data: " + frame("t", {}) + b"\n\n"
    second = b"\xef\xbb\xbfdata: " + frame("u", {}) + b"\n\ndata: " + frame("v", {}) + b"\n\n"
    reader = SniffingReader(named=named_events, text_path=PATH)
    reader.allow_runs(runs)
    got = _flat(reader.feed(first)) + _flat(reader.feed(second))
    plain = SSEReader()
    want = [orjson.loads(e.data) for e in plain.feed(first) + plain.feed(second)]
    assert got == want == [orjson.loads(frame("t", {})), orjson.loads(frame("v", {}))]
