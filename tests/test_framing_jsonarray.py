"""The streamed JSON array framing (gateway.framing.jsonarray): written element by element and
closed once, read element by element whatever the reads' boundaries."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import FramingError
from gateway.framing import Named, closing, encoder_for, reader_for

ELEMENTS: list[Any] = [{"a": "x,]}\"[{"}, {"b": [1, {"c": "é 👋"}]}, {"d": None}]


def written(elements: list[Any]) -> bytes:
    frame = encoder_for("jsonarray")
    out = b"".join(frame(json.dumps(e, ensure_ascii=False).encode()) for e in elements)
    return out + closing(frame)


def test_the_writer_opens_separates_and_closes_once() -> None:
    data = written(ELEMENTS)
    assert data.startswith(b"[{") and data.endswith(b"}\r\n]")
    assert json.loads(data) == ELEMENTS
    assert written([]) == b"[]"
    frame = encoder_for("jsonarray")
    assert frame(Named("ignored", b"{}")) == b"[{}"
    assert closing(frame) == b"\r\n]" and closing(frame) == b""
    with pytest.raises(FramingError):
        frame(b"{}")
    assert encoder_for("jsonarray") is not encoder_for("jsonarray")  # one writer per stream
    assert closing(encoder_for("sse")) == b"" and closing(encoder_for("jsonlines")) == b""


@pytest.mark.parametrize("data", [written(ELEMENTS),
                                  b'\r\n [ {"a": "x,]}\\"[{"} ,\n{"b": [1, {"c": "\xc3\xa9 '
                                  b'\xf0\x9f\x91\x8b"}]}\r\n,\r\n{"d": null}\n]\n'])
def test_the_reader_gives_each_element_whatever_the_reads(data: bytes) -> None:
    for cut in range(len(data) + 1):
        reader = reader_for("jsonarray")
        got = reader.feed(data[:cut]) + reader.feed(data[cut:]) + reader.finish()
        assert got == ELEMENTS, cut
    reader = reader_for("jsonarray")
    got = [e for i in range(len(data)) for e in reader.feed(data[i:i + 1])]
    assert got + reader.finish() == ELEMENTS


def test_an_element_is_given_as_soon_as_it_completes() -> None:
    reader = reader_for("jsonarray")
    assert reader.feed(b'[{"a": 1}') == [{"a": 1}]
    assert reader.feed(b',\r\n{"b"') == []
    assert reader.feed(b": 2}") == [{"b": 2}]


@pytest.mark.parametrize("data", [b'{"a": 1}', b'[{"a": 1} {"b": 2}]', b"[1]", b'[{"a": 1},]x'])
def test_what_is_not_a_streamed_array_is_a_framing_error(data: bytes) -> None:
    with pytest.raises(FramingError):
        reader_for("jsonarray").feed(data)


@pytest.mark.parametrize("data", [b'[{"a": 1}', b'[{"a": 1},', b'[{"a": '])
def test_an_array_cut_short_is_a_framing_error(data: bytes) -> None:
    reader = reader_for("jsonarray")
    reader.feed(data)
    with pytest.raises(FramingError):
        reader.finish()


def test_an_element_over_the_limit_is_refused() -> None:
    with pytest.raises(FramingError):
        reader_for("jsonarray", 16).feed(b'[{"a": "' + b"x" * 32 + b'"}]')
