"""The SSE reader against the WHATWG event-stream interpretation
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation), fed
whole, split at every offset and split at random points."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import FramingError
from gateway.framing.sse import SSEEvent, SSEReader, encode_comment, encode_event

BOM = b"\xef\xbb\xbf"

# pyproject's 60 s per test is sized for the default profile's 200 examples.
pytestmark = pytest.mark.timeout(60 * max(1, settings().max_examples // 200))


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at ``cuts`` (duplicates give empty reads, which must be harmless too)."""
    points = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


def read(pieces: list[bytes], max_event: int | None = None) -> list[SSEEvent]:
    reader = SSEReader() if max_event is None else SSEReader(max_event)
    out: list[SSEEvent] = []
    for piece in pieces:
        out.extend(reader.feed(piece))
    out.extend(reader.finish())
    return out


def read_all(data: bytes) -> list[SSEEvent]:
    return read([data])


def datas(data: bytes) -> list[str]:
    return [e.data for e in read_all(data)]


# --- fields -----------------------------------------------------------------------------------


def test_one_event() -> None:
    assert read_all(b"data: hello\n\n") == [SSEEvent("hello")]


def test_multiple_data_lines_are_joined_with_lf() -> None:
    assert datas(b"data: a\ndata: b\ndata:\ndata: c\n\n") == ["a\nb\n\nc"]


def test_an_empty_data_line_is_an_event_with_empty_data() -> None:
    assert datas(b"data:\n\n") == [""]
    assert datas(b"data\ndata\n\n") == ["\n"]


def test_comments_are_ignored() -> None:
    assert read_all(b": keep-alive\n\n") == []
    assert datas(b":\n: x\ndata: a\n:comment: with colon\ndata: b\n\n") == ["a\nb"]


def test_data_without_a_space_after_the_colon() -> None:
    assert datas(b"data:x\n\n") == ["x"]


def test_only_one_leading_space_is_dropped() -> None:
    assert datas(b"data:  x \n\n") == [" x "]


def test_a_colon_in_the_value_is_kept() -> None:
    assert datas(b'data: {"a": "b:c"}\n\n') == ['{"a": "b:c"}']


def test_a_field_with_no_colon_has_an_empty_value() -> None:
    assert read_all(b"data\n\n") == [SSEEvent("")]
    assert read_all(b"event\ndata: x\n\n") == [SSEEvent("x", "message")]


def test_unknown_fields_are_ignored() -> None:
    assert datas(b"foo: bar\nDATA: no\ndata : no\ndata: yes\n\n") == ["yes"]


def test_event_names_the_type_and_is_reset_after_dispatch() -> None:
    body = b"event: delta\ndata: a\n\ndata: b\n\n"
    assert read_all(body) == [SSEEvent("a", "delta"), SSEEvent("b", "message")]


def test_event_type_is_reset_by_an_event_with_no_data() -> None:
    assert read_all(b"event: ping\n\ndata: b\n\n") == [SSEEvent("b", "message")]


def test_id_is_kept_and_carries_over_to_later_events() -> None:
    body = b"id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n"
    assert [e.id for e in read_all(body)] == ["7", "7", ""]


def test_id_with_nul_is_ignored() -> None:
    body = b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n"
    assert [e.id for e in read_all(body)] == ["1", "1"]


def test_id_on_an_event_with_no_data_still_counts() -> None:
    assert [e.id for e in read_all(b"id: 5\n\ndata: x\n\n")] == ["5"]


@pytest.mark.parametrize(("value", "want"), [
    (b"3000", 3000), (b"0", 0), (b"007", 7), (b"", None), (b"3s", None), (b"-1", None),
    (b"1.5", None), (b" 10", None), (b"\xef\xbc\x93", None),  # a fullwidth digit is not ASCII
])
def test_retry_takes_ascii_digits_only(value: bytes, want: int | None) -> None:
    assert [e.retry for e in read_all(b"retry: " + value + b"\ndata: x\n\n")] == [want]


def test_retry_is_kept_for_later_events() -> None:
    body = b"retry: 10\ndata: a\n\nretry: x\ndata: b\n\n"
    assert [e.retry for e in read_all(body)] == [10, 10]


def test_an_event_with_no_data_is_not_dispatched() -> None:
    assert read_all(b"event: ping\nid: 1\nretry: 5\n\n") == []
    assert read_all(b"\n\n\n") == []


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert datas(b"data: a\xffb\n\n") == ["a\ufffdb"]


def test_nul_in_data_is_kept() -> None:
    assert datas(b"data: a\x00b\n\n") == ["a\x00b"]


# --- line endings -----------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_each_line_ending(eol: bytes) -> None:
    body = b"event: e" + eol + b"data: a" + eol + b"data: b" + eol + eol + b"data: c" + eol + eol
    assert read_all(body) == [SSEEvent("a\nb", "e"), SSEEvent("c")]


def test_mixed_line_endings() -> None:
    body = b"data: a\rdata: b\r\ndata: c\n\r\ndata: d\r\rdata: e\n\n"
    assert datas(body) == ["a\nb\nc", "d", "e"]


def test_crlf_split_across_two_reads_is_one_line_break() -> None:
    reader = SSEReader()
    assert reader.feed(b"data: a\r") == []
    assert reader.feed(b"\ndata: b\r") == []
    assert reader.feed(b"\n\r") == [SSEEvent("a\nb")]
    assert reader.feed(b"\n") == []
    assert reader.finish() == []


def test_crlf_split_by_an_empty_read_is_still_one_line_break() -> None:
    reader = SSEReader()
    assert reader.feed(b"data: a\r") == []
    assert reader.feed(b"") == []
    assert reader.feed(b"\ndata: b\r\n\r\n") == [SSEEvent("a\nb")]


def test_cr_at_the_end_of_a_read_then_cr_is_two_line_breaks() -> None:
    reader = SSEReader()
    assert reader.feed(b"data: a\r") == []
    assert reader.feed(b"\r") == [SSEEvent("a")]


def test_cr_at_the_end_of_a_read_then_other_bytes() -> None:
    assert read([b"data: a\r", b"data: b\r", b"\r"]) == [SSEEvent("a\nb")]


def test_crlf_stream_split_at_every_offset() -> None:
    body = b"data: a\r\ndata: b\r\n\r\n: c\r\n\r\nevent: x\r\ndata: d\r\n\r\n"
    want = [SSEEvent("a\nb"), SSEEvent("d", "x")]
    for i in range(len(body) + 1):
        assert read([body[:i], body[i:]]) == want, i
    assert read([body[i:i + 1] for i in range(len(body))]) == want


# --- BOM --------------------------------------------------------------------------------------


def test_bom_at_start_is_dropped() -> None:
    assert datas(BOM + b"data: x\n\n") == ["x"]


def test_bom_split_across_reads() -> None:
    body = BOM + b"data: x\n\n"
    for i in range(len(body) + 1):
        assert [e.data for e in read([body[:i], body[i:]])] == ["x"], i
    assert [e.data for e in read([body[i:i + 1] for i in range(len(body))])] == ["x"]


def test_only_one_bom_is_dropped() -> None:
    # The second BOM is part of the first line's field name, so that line is an unknown field.
    assert datas(BOM + BOM + b"data: x\n\ndata: y\n\n") == ["y"]


def test_a_bom_later_in_the_stream_is_data() -> None:
    assert datas(b"data: a\n\n" + b"data: " + BOM + b"b\n\n") == ["a", "\ufeffb"]


# --- the end of the stream --------------------------------------------------------------------


def test_finish_dispatches_an_event_missing_its_blank_line() -> None:
    # A documented leniency: the spec would drop it, but servers that omit the final blank line
    # are common.
    reader = SSEReader()
    assert reader.feed(b"data: a\n\ndata: b\n") == [SSEEvent("a")]
    assert reader.finish() == [SSEEvent("b")]


def test_finish_dispatches_a_last_line_without_line_ending() -> None:
    reader = SSEReader()
    assert reader.feed(b"event: e\ndata: b") == []
    assert reader.finish() == [SSEEvent("b", "e")]


def test_finish_with_nothing_pending() -> None:
    reader = SSEReader()
    assert reader.feed(b"data: a\n\n: bye\n") == [SSEEvent("a")]
    assert reader.finish() == []


def test_finish_does_not_dispatch_a_pending_event_with_no_data() -> None:
    assert read_all(b"event: e\nid: 1") == []


# --- the size limit ---------------------------------------------------------------------------


def test_an_event_over_the_limit_raises_in_one_read() -> None:
    with pytest.raises(FramingError):
        read([b"data: " + b"x" * 100 + b"\n\n"], max_event=32)


def test_an_event_over_the_limit_raises_however_it_is_split() -> None:
    body = b"data: " + b"x" * 100 + b"\n\n"
    for i in range(len(body) + 1):
        with pytest.raises(FramingError):
            read([body[:i], body[i:]], max_event=32)


def test_many_short_data_lines_over_the_limit_raise() -> None:
    with pytest.raises(FramingError):
        read([b"data: xxxxxxxx\n" * 10 + b"\n"], max_event=32)


def test_a_flood_of_empty_data_lines_is_over_the_limit_too() -> None:
    # Each empty line adds an LF to the event's data, and a list entry to memory.
    with pytest.raises(FramingError):
        read([b"data:\n" * 100], max_event=32)
    with pytest.raises(FramingError):
        read([b"data:\n"] * 100, max_event=32)


def test_the_limit_is_per_event() -> None:
    assert len(read([b"data: xxxxxxxx\n\n" * 100], max_event=32)) == 100


def test_an_unfinished_line_over_the_limit_raises_before_its_end() -> None:
    reader = SSEReader(32)
    with pytest.raises(FramingError):
        reader.feed(b"data: " + b"x" * 100)


def test_events_under_the_limit_are_fine() -> None:
    assert datas(b"data: " + b"x" * 20 + b"\n\n") == ["x" * 20]
    assert len(read([b"data: " + b"x" * 20 + b"\n\n"] * 50, max_event=32)) == 50


# --- UTF-8 and random splits ------------------------------------------------------------------


def test_multi_byte_utf8_split_at_every_byte_offset() -> None:
    text = "h\u00e9llo \u4e16\u754c \U0001f600 \U0001f1eb\U0001f1f7"
    body = BOM + b"event: \xc3\xa9\ndata: " + text.encode() + b"\r\ndata: " + text.encode() \
        + b"\r\n\r\n"
    want = [SSEEvent(text + "\n" + text, "é")]
    assert read_all(body) == want
    for i in range(len(body) + 1):
        assert read([body[:i], body[i:]]) == want, i
    for i in range(len(body) + 1):
        for j in range(i, min(i + 5, len(body) + 1)):
            assert read([body[:i], body[i:j], body[j:]]) == want, (i, j)


LINE_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8", exclude_characters="\r\n"),
        st.sampled_from([":", " ", "\x00", "\U0001f600", "é", "\ufeff"]),
    ),
    max_size=12,
)
EVENTS = st.lists(
    st.fixed_dictionaries(
        {"data": st.lists(LINE_TEXT, max_size=3)},
        optional={"event": LINE_TEXT, "id": LINE_TEXT, "retry": st.integers(0, 10**6),
                  "comment": LINE_TEXT},
    ),
    max_size=6,
)


@given(events=EVENTS, eol=st.sampled_from([b"\n", b"\r", b"\r\n"]), bom=st.booleans(),
       final_blank=st.booleans(), data=st.data())
def test_random_splits_give_the_same_events_as_one_read(
    events: list[dict[str, Any]], eol: bytes, bom: bool, final_blank: bool,
    data: st.DataObject,
) -> None:
    wire: list[bytes] = []
    want: list[SSEEvent] = []
    last_id: str | None = None
    retry: int | None = None
    for ev in events:
        if "comment" in ev:
            wire.append(b":" + ev["comment"].encode() + eol)
        if "event" in ev:
            wire.append(b"event: " + ev["event"].encode() + eol)
        if "id" in ev:
            wire.append(b"id: " + ev["id"].encode() + eol)
            if "\0" not in ev["id"]:
                last_id = ev["id"]
        if "retry" in ev:
            wire.append(b"retry: %d" % ev["retry"] + eol)
            retry = ev["retry"]
        lines: list[str] = ev["data"]
        wire.extend(b"data: " + line.encode() + eol for line in lines)
        wire.append(eol)
        if lines:
            want.append(SSEEvent("\n".join(lines), ev.get("event") or "message",
                                 last_id, retry))
    body = (BOM if bom else b"") + b"".join(wire)
    if not final_blank and body.endswith(eol + eol):
        body = body[:-len(eol)]  # the leniency: finish() dispatches it anyway
    assert read_all(body) == want
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=12), label="cuts")
    assert read(split(body, cuts)) == want


@given(body=st.binary(max_size=200), data=st.data())
def test_random_splits_of_any_bytes_agree_with_one_read(body: bytes, data: st.DataObject) -> None:
    try:
        whole: list[SSEEvent] | None = read_all(body)
    except FramingError:
        whole = None
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=12), label="cuts")
    try:
        pieces: list[SSEEvent] | None = read(split(body, cuts))
    except FramingError:
        pieces = None
    assert pieces == whole


# --- the writer -------------------------------------------------------------------------------


@given(payload=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n")))
def test_encode_event_ends_in_a_blank_line_and_reads_back(payload: str) -> None:
    framed = encode_event(payload.encode())
    assert framed.endswith(b"\n\n")
    assert framed.startswith(b"data: ")
    assert read_all(framed) == [SSEEvent(payload)]
    assert read_all(framed * 2) == [SSEEvent(payload)] * 2


def test_each_encoded_event_is_dispatched_by_its_own_read() -> None:
    reader = SSEReader()
    for payload in (b'{"a":1}', b"[DONE]"):
        assert reader.feed(encode_event(payload)) == [SSEEvent(payload.decode())]


def test_encode_comment_is_ignored_by_the_reader() -> None:
    assert encode_comment().endswith(b"\n\n")
    assert encode_comment(b"keep-alive") == b":keep-alive\n\n"
    assert read_all(encode_comment(b"keep-alive") + encode_event(b"x")) == [SSEEvent("x")]


# --- the fast path for plain events ------------------------------------------------------------

_BLOCKS = st.one_of(
    st.sampled_from([
        b'data: {"a":1}\n\n', b'data:{"b":[2]}\n\n', b"data: [DONE]\n\n", b"data:  {}\n\n",
        b": keep-alive\n\n", b"event: delta\ndata: {}\n\n", b"data: 1\ndata: 2\n\n",
        b"data: {}\r\n\r\n", b"id: 7\n", b"retry: 10\n", b"data\n\n", b"\n", b"data: \xff\n\n",
        BOM, b"data: \"\xc3\xa9\"\n\n", b'data: {"x":"' + b"y" * 40 + b'"}\n\n',
    ]),
    st.binary(max_size=12),
)


_NAMED_BLOCKS = st.one_of(
    _BLOCKS,
    st.sampled_from([
        b"event: delta\ndata: {}\n\n", b"event:x\ndata:1\n\n", b"event:\ndata: 2\n\n",
        b"event: message\ndata: [3]\n\n", b"event: a:b\ndata: {}\n\n", b"event: only\n\n",
        b"data: 4\nevent: late\n\n", b"event: x\nevent: y\ndata: 5\n\n",
        b"event: two\ndata: 6\ndata: 7\n\n", b"event: \xff\ndata: 8\n\n",
        b"event: e\ndata: \xff\n\n", b"event:  spaced\ndata:  9\n\n",
    ]),
)


def _reference(pieces: list[bytes], max_event: int, named: bool = False) -> list[Any]:
    """The payloads as the general state machine alone gives them."""
    from gateway.framing import Named, _payload

    reader = SSEReader(max_event)
    events = [e for piece in pieces for e in reader.feed(piece)]
    events.extend(reader.finish())
    return [Named(e.event, _payload(e.data)) if named and e.event != "message"
            else _payload(e.data) for e in events]


def _fast(pieces: list[bytes], max_event: int, named: bool = False) -> list[Any]:
    from gateway.framing import reader_for

    reader = reader_for("sse", max_event, named=named)
    out: list[Any] = []
    for piece in pieces:
        out.extend(reader.feed(piece))
    out.extend(reader.finish())
    return out


def _outcome(read: Any, pieces: list[bytes], max_event: int) -> Any:
    try:
        return read(pieces, max_event)
    except FramingError:
        return "FramingError"


@given(st.lists(_NAMED_BLOCKS, max_size=12), st.lists(st.integers(0, 400), max_size=6),
       st.sampled_from([30, 1 << 20]), st.booleans())
def test_the_fast_paths_read_exactly_what_the_state_machine_reads(
        blocks: list[bytes], cuts: list[int], max_event: int, named: bool) -> None:
    """Plain events (``plain_data``) for a reader of unnamed events, named ones
    (``plain_named``) for a reader that keeps the names: the same payloads either way."""
    pieces = split(b"".join(blocks), cuts)
    got = _outcome(lambda p, m: _fast(p, m, named), pieces, max_event)
    assert got == _outcome(lambda p, m: _reference(p, m, named), pieces, max_event)


def test_named_events_take_the_fast_path_and_odd_ones_do_not() -> None:
    reader = SSEReader()
    assert reader.plain_named(b"event: a\ndata: {}\n\ndata: 1\n\nevent:\ndata:2\n\n") == [
        ("a", b"{}"), ("message", b"1"), ("message", b"2")]
    for odd in (b"event: a\r\ndata: {}\r\n\r\n", b"event: a\n\n", b"data: 1\nevent: a\n\n",
                b"event: a\nevent: b\ndata: 1\n\n", b"event: a\ndata: 1\ndata: 2\n\n",
                b"id: 1\ndata: 1\n\n", b": ping\n\n", b"event: a\ndata: {}\n"):
        assert reader.plain_named(odd) is None, odd
    small = SSEReader(max_event=20)
    assert small.plain_named(b"event: a\ndata: 1\n\n") == [("a", b"1")]
    # longer than the limit as a whole: feed() decides, line by line
    assert small.plain_named(b"event: abcdefgh\ndata: 1\n\n") is None


def test_plain_events_take_the_fast_path_and_odd_ones_do_not() -> None:
    reader = SSEReader()
    assert reader.plain_data(BOM + b"data: {}\n\n") is None  # the BOM is feed()'s to drop
    # A first read that is the whole stream (an upstream that answers at once) is plain too.
    assert reader.plain_data(b'data: {"a":1}\n\n') == [b'{"a":1}']
    assert reader.plain_data(b'data: {"b":2}\n\ndata:[DONE]\n\n') == [b'{"b":2}', b"[DONE]"]
    for odd in (b"data: {}\r\n\r\n", b"data: 1\ndata: 2\n\n", b"event: x\ndata: {}\n\n",
                b": ping\n\n", b"data: {}\n", b"data: {}\n\ndata: {", b"\n\n"):
        assert reader.plain_data(odd) is None, odd
    reader.feed(b"data: {")  # inside an event: the state machine must finish it
    assert reader.plain_data(b"data: {}\n\n") is None
    small = SSEReader(max_event=8)
    small.feed(b"data:1\n\n")
    assert small.plain_data(b"data:123\n\n") == [b"123"]
    assert small.plain_data(b"data: 12345\n\n") is None  # over the limit: feed() says so


def test_short_data_that_is_not_json_reads_alike_in_every_stream() -> None:
    """What one stream's ``[END]`` read as is kept for the next (no parse that fails again), and
    reads the same, with a template or without; data that is not UTF-8 is not kept (decoded
    with replacement, it may parse)."""
    from gateway.framing import _NOT_JSON, RawData, Slot, reader_for
    from gateway.framing.template import TemplateReader

    for _ in range(2):
        plain = reader_for("sse").feed(b'data: {"d":"a"}\n\ndata: [END]\n\n')
        assert plain == [{"d": "a"}, RawData("[END]")]
        templated = reader_for("sse", text=TemplateReader(("d",))).feed(
            b'data: {"d":"a"}\n\ndata: [END]\n\ndata: {"d":"b"}\n\n')
        assert [type(p) for p in templated] == [Slot, RawData, Slot]
        assert templated[1] == RawData("[END]") and templated[2].text == "b"
        assert _NOT_JSON[b"[END]"] == RawData("[END]")
    assert reader_for("sse").feed(b'data: \xff"\n\n') == [RawData('\ufffd"')]
    assert b'\xff"' not in _NOT_JSON


def test_the_heads_of_named_events_are_kept_for_a_bounded_few_short_names() -> None:
    """Each event's head (``event: name`` and ``data: ``) is what tells a read of whole events
    written as the writer writes them; those of many names, or of long ones, are still right,
    and not kept."""
    from gateway.framing import _HEADS, Named, reader_for
    from gateway.framing.template import TemplateReader

    names = [f"n{k}" for k in range(100)] + ["x" * 5000]
    text = TemplateReader(("d",))
    text.runs = True
    reader = reader_for("sse", named=True, text=text)
    data = b"".join(encode_event(Named(n, b'{"e":1}')) for n in names)
    assert reader.feed(data) == [Named(n, {"e": 1}) for n in names]
    assert reader.whole
    assert len(_HEADS) <= 64 and "x" * 5000 not in _HEADS


@pytest.mark.parametrize("text", [None, ("delta",)], ids=["no-template", "template"])
@pytest.mark.parametrize("data", [b'{"role":"\x80ssistant"}', b"[DO\x80NE]"],
                         ids=["json", "not-json"])
def test_an_event_passed_on_as_it_came_is_what_the_plain_path_reads(
        text: tuple[str, ...] | None, data: bytes) -> None:
    """An event whose data is not UTF-8 reads as its text decoded with replacement; passed on
    as it came (a payload with its bytes), its bytes are those of that text, not the upstream's,
    which the plain path never writes (found by test_accelerators' damaged streams)."""
    from gateway.framing import TemplateReader, Verbatim, reader_for

    body = b"data: " + data + b"\n\n"
    plain = reader_for("sse", named=False).feed(body)
    for runs in (False, True):
        template = None if text is None else TemplateReader(text, None)
        if template is not None:
            template.runs = runs
        reader = reader_for("sse", named=False, verbatim=True, text=template)
        kept = reader.feed(body)
        assert len(plain) == len(kept) == 1
        assert type(kept[0]) is Verbatim
        assert kept[0].payload == plain[0]
        assert kept[0].raw == data.decode("utf-8", "replace").encode()
        # and the read is not "the frames as they came", which a route would forward whole
        assert not reader.whole
