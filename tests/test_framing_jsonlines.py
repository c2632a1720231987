"""The JSON lines reader: values split anywhere across reads, every line ending, the ``}{`` and
pretty-printed shapes of the spec examples, and errors that are never a silent end of stream."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import FramingError
from gateway.framing.jsonlines import JsonLinesReader, encode_line

# Text as chat servers send it: any Unicode scalar (no surrogates), with emoji, newlines, quotes,
# backslashes and brackets over-represented because they are what a framer can get wrong.
TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\n", "\r", '"', "\\", "{", "}", "[", "]", "😀", "\U0001f1eb", "é",
                         "\u2028", "\x00"]),
    ),
    max_size=20,
)
SCALARS = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
OBJECTS = st.dictionaries(TEXT, VALUES, max_size=5)

# pyproject's 60 s per test is sized for the default profile's 200 examples.
pytestmark = pytest.mark.timeout(60 * max(1, settings().max_examples // 200))


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at ``cuts`` (duplicates give empty reads, which must be harmless too)."""
    points = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


def read(pieces: list[bytes], max_line: int | None = None) -> list[Any]:
    reader = JsonLinesReader() if max_line is None else JsonLinesReader(max_line)
    out: list[Any] = []
    for piece in pieces:
        out.extend(reader.feed(piece))
    out.extend(reader.finish())
    return out


def read_all(data: bytes) -> list[Any]:
    return read([data])


# --- split anywhere --------------------------------------------------------------------------


@given(objects=st.lists(OBJECTS, max_size=6), newline=st.sampled_from([b"\n", b"\r\n"]),
       final_newline=st.booleans(), data=st.data())
def test_objects_split_anywhere(
    objects: list[dict[str, Any]], newline: bytes, final_newline: bool, data: st.DataObject,
) -> None:
    body = newline.join(orjson.dumps(o) for o in objects)
    if final_newline and objects:
        body += newline
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=12), label="cuts")
    assert read(split(body, cuts)) == objects


@given(objects=st.lists(OBJECTS, min_size=1, max_size=5),
       joiner=st.sampled_from([b"", b"\n", b" ", b"\r\n\r\n"]), data=st.data())
def test_pretty_printed_objects_split_anywhere(
    objects: list[dict[str, Any]], joiner: bytes, data: st.DataObject,
) -> None:
    body = joiner.join(orjson.dumps(o, option=orjson.OPT_INDENT_2) for o in objects)
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=12), label="cuts")
    assert read(split(body, cuts)) == objects


def test_every_single_split_point() -> None:
    body = (b'{"a":"x\\ny"}\r\n\n{"b":[1,{"c":"}{"}]}{"d":"\\"}"}\n'
            b'{\n  "e": "\xf0\x9f\x98\x80",\n  "f": null\n}{\n  "g": 2\n}')
    want = [{"a": "x\ny"}, {"b": [1, {"c": "}{"}]}, {"d": '"}'},
            {"e": "😀", "f": None}, {"g": 2}]
    assert read_all(body) == want
    for i in range(len(body) + 1):
        assert read([body[:i], body[i:]]) == want, i


def test_one_byte_at_a_time() -> None:
    body = b'{"a":1}\n{"b":"\xc3\xa9"}\n'
    assert read([body[i:i + 1] for i in range(len(body))]) == [{"a": 1}, {"b": "é"}]


# --- what one read may hold --------------------------------------------------------------------


def test_several_objects_in_one_read() -> None:
    reader = JsonLinesReader()
    assert reader.feed(b'{"a":1}\n{"b":2}\n{"c":3}\n') == [{"a": 1}, {"b": 2}, {"c": 3}]
    assert reader.finish() == []


def test_values_come_out_as_soon_as_their_line_ends() -> None:
    reader = JsonLinesReader()
    assert reader.feed(b'{"a":1}\n{"b"') == [{"a": 1}]
    assert reader.feed(b':2}') == []
    assert reader.feed(b'\n') == [{"b": 2}]
    assert reader.finish() == []


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_line_endings(newline: bytes) -> None:
    body = b'{"a":1}' + newline + b'{"b":2}' + newline
    assert read_all(body) == [{"a": 1}, {"b": 2}]


def test_blank_lines_are_skipped() -> None:
    body = b'\n\r\n  \n{"a":1}\n\n\t\r\n{"b":2}\n\n'
    assert read_all(body) == [{"a": 1}, {"b": 2}]


def test_only_blank_lines_give_nothing() -> None:
    assert read_all(b"\n \r\n\t\n") == []
    assert read_all(b"") == []


def test_missing_final_newline_counts_at_finish() -> None:
    reader = JsonLinesReader()
    assert reader.feed(b'{"a":1}\n{"b":2}') == [{"a": 1}]
    assert reader.finish() == [{"b": 2}]


def test_missing_final_newline_after_crlf_lines() -> None:
    assert read_all(b'{"a":1}\r\n{"b":2}') == [{"a": 1}, {"b": 2}]


def test_back_to_back_objects_on_one_line() -> None:
    assert read_all(b'{"a":1}{"b":2} {"c":3}\n') == [{"a": 1}, {"b": 2}, {"c": 3}]


def test_back_to_back_objects_without_any_newline() -> None:
    assert read_all(b'{"a":1}{"b":2}') == [{"a": 1}, {"b": 2}]


def test_scanner_is_string_aware() -> None:
    body = b'{"a":"}{[\\"]"}{"b":"\\\\"}\n'
    assert read_all(body) == [{"a": '}{["]'}, {"b": "\\"}]


def test_arrays_are_values_too() -> None:
    assert read_all(b'[1,2]\n[{"a":[]}][3]\n') == [[1, 2], [{"a": []}], [3]]


def test_pretty_printed_objects_joined_like_the_spec_examples() -> None:
    # protocol-2024-01-28's examples print each chunk indented and join them with "}{".
    body = (
        b'{\n'
        b'    "id": "chatcmpl-1",\n'
        b'    "choices": [\n'
        b'        {\n'
        b'            "delta": {"content": "The", "role": null},\n'
        b'            "finish_reason": null,\n'
        b'            "index": 0\n'
        b'        }\n'
        b'    ],\n'
        b'    "object": "chat.completion.chunk"\n'
        b'}{\n'
        b'    "id": "chatcmpl-1",\n'
        b'    "choices": [{"delta": {"content": " end"}, "finish_reason": "stop", "index": 0}]\n'
        b'}'
    )
    want = [
        {"id": "chatcmpl-1", "choices": [{"delta": {"content": "The", "role": None},
                                          "finish_reason": None, "index": 0}],
         "object": "chat.completion.chunk"},
        {"id": "chatcmpl-1", "choices": [{"delta": {"content": " end"}, "finish_reason": "stop",
                                          "index": 0}]},
    ]
    assert read_all(body) == want
    assert read_all(body.replace(b"\n", b"\r\n")) == want
    assert read([body[i:i + 1] for i in range(len(body))]) == want


def test_compact_lines_resume_after_a_pretty_printed_object() -> None:
    body = b'{\n "a": 1\n}\n{"b":2}\n{"c":\n3}\n{"d":4}\n'
    assert read_all(body) == [{"a": 1}, {"b": 2}, {"c": 3}, {"d": 4}]


# --- errors: never a silent end ---------------------------------------------------------------


@pytest.mark.parametrize("line", [
    b"hello", b"data: {}", b"<html>", b'{"a":1} trailing', b"{'a': 1}", b'{"a" 1}', b"{]",
    b'{"a":1]', b"\xff\xfe{}",
])
def test_a_line_that_is_not_json_raises(line: bytes) -> None:
    reader = JsonLinesReader()
    with pytest.raises(FramingError):
        reader.feed(line + b"\n")


def test_a_bad_line_after_good_ones_raises_instead_of_ending() -> None:
    reader = JsonLinesReader()
    with pytest.raises(FramingError):
        reader.feed(b'{"a":1}\nnot json\n{"b":2}\n')


def test_a_bad_last_line_without_newline_raises_at_finish() -> None:
    reader = JsonLinesReader()
    assert reader.feed(b'{"a":1}\ngarbage') == [{"a": 1}]
    with pytest.raises(FramingError):
        reader.finish()


@pytest.mark.parametrize("body", [
    b'{"a":', b'{"a":1', b'{"a":"}', b"[1,2", b'{\n  "a": 1\n', b'{"a":1}{"b":',
    b'{"a":1}\n{\n "b": [\n',
])
def test_an_unfinished_value_at_finish_raises(body: bytes) -> None:
    reader = JsonLinesReader()
    reader.feed(body)
    with pytest.raises(FramingError):
        reader.finish()


def test_an_unfinished_value_split_by_newlines_raises_at_finish() -> None:
    reader = JsonLinesReader()
    assert reader.feed(b'{\n"a": 1,\n') == []
    with pytest.raises(FramingError):
        reader.finish()


# --- the line limit ---------------------------------------------------------------------------


def test_a_line_at_the_limit_is_fine() -> None:
    line = b'{"a":"' + b"x" * 10 + b'"}'
    assert read([line + b"\n"], max_line=len(line)) == [{"a": "x" * 10}]


def test_a_whole_line_over_the_limit_in_one_read_raises() -> None:
    line = b'{"a":"' + b"x" * 40 + b'"}\n'
    with pytest.raises(FramingError):
        read([line], max_line=16)


def test_an_unfinished_line_over_the_limit_raises_before_its_end() -> None:
    reader = JsonLinesReader(16)
    with pytest.raises(FramingError):
        reader.feed(b'{"a":"' + b"x" * 40)


def test_a_long_line_raises_however_it_is_split() -> None:
    line = b'{"a":"' + b"x" * 40 + b'"}\n'
    for i in range(len(line) + 1):
        with pytest.raises(FramingError):
            read([line[:i], line[i:]], max_line=16)


def test_a_multi_line_value_over_the_limit_raises() -> None:
    body = b"{\n" + b'"a": 1,\n' * 10 + b'"z": 0\n}\n'
    with pytest.raises(FramingError):
        read([body], max_line=32)


def test_an_unfinished_line_raises_once_it_grows_over_the_limit() -> None:
    reader = JsonLinesReader(16)
    reader.feed(b'{"a":"0123456')  # 13 bytes: under the limit so far
    with pytest.raises(FramingError):
        reader.feed(b'789abcdef"}')


# --- UTF-8 ------------------------------------------------------------------------------------


def test_multi_byte_utf8_split_at_every_byte_offset() -> None:
    obj = {"t": "h\u00e9llo \u4e16\u754c \U0001f600 \U0001f1eb\U0001f1f7", "k\u00e9y": "\u2028"}
    body = orjson.dumps(obj) + b"\n" + orjson.dumps(obj, option=orjson.OPT_INDENT_2)
    for i in range(len(body) + 1):
        assert read([body[:i], body[i:]]) == [obj, obj], i
    for i in range(len(body) + 1):
        for j in range(i, min(i + 5, len(body) + 1)):
            assert read([body[:i], body[i:j], body[j:]]) == [obj, obj], (i, j)


# --- the writer -------------------------------------------------------------------------------


@given(obj=OBJECTS)
def test_encode_line_is_newline_terminated_and_reads_back(obj: dict[str, Any]) -> None:
    framed = encode_line(orjson.dumps(obj))
    assert framed.endswith(b"\n")
    assert framed.count(b"\n") == 1
    assert read_all(framed) == [obj]
    assert read_all(framed * 3) == [obj] * 3
