"""Line readers are linear in the bytes fed: a long line arriving in small reads is scanned and
copied a bounded number of times, never re-joined or re-scanned on every read (it was quadratic:
8 MiB in 2 KiB reads cost 3 CPU-seconds before the limit refused it). Counted, not timed: each
reader counts the bytes it scans for line ends or copies into lines (``scanned``)."""

from __future__ import annotations

import pytest

from gateway.errors import FramingError
from gateway.framing import SniffingReader
from gateway.framing.jsonlines import JsonLinesReader
from gateway.framing.sse import SSEReader

PIECE = 2048
MIB = 1024 * 1024


def _pieces(data: bytes) -> list[bytes]:
    return [data[i:i + PIECE] for i in range(0, len(data), PIECE)]


def _json_line(n: int) -> bytes:
    """A JSON line of exactly ``n`` bytes (its ``\\n`` not counted)."""
    return b'"' + b"x" * (n - 2) + b'"'


@pytest.mark.parametrize("n", [MIB, 8 * MIB])
def test_json_lines_reads_a_long_line_in_linear_work(n: int) -> None:
    reader = JsonLinesReader(max_line=n)
    got = []
    for piece in _pieces(_json_line(n) + b"\n"):
        got += reader.feed(piece)
    assert got == ["x" * (n - 2)]
    assert reader.scanned <= 3 * n, reader.scanned


@pytest.mark.parametrize("n", [MIB, 8 * MIB])
def test_json_lines_refuses_a_line_over_the_limit_in_linear_work(n: int) -> None:
    reader = JsonLinesReader(max_line=n - 1)
    with pytest.raises(FramingError, match=f"a line is longer than {n - 1} bytes"):
        for piece in _pieces(_json_line(n) + b"\n"):
            reader.feed(piece)
    assert reader.scanned <= 3 * n, reader.scanned


@pytest.mark.parametrize("n", [MIB, 8 * MIB])
@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_sse_reads_a_long_line_in_linear_work(n: int, end: bytes) -> None:
    line = b"data: " + _json_line(n - 6)
    reader = SSEReader(max_event=n)
    events = []
    # the line end split from the line, and a CRLF split in two, as reads may split them
    for piece in [*_pieces(line + end[:1]), end[1:], end]:
        events += reader.feed(piece)
    events += reader.finish()
    assert [e.data for e in events] == ['"' + "x" * (n - 8) + '"']
    assert reader.scanned <= 3 * n, reader.scanned


@pytest.mark.parametrize("n", [MIB, 8 * MIB])
def test_sse_refuses_an_event_over_the_limit_in_linear_work(n: int) -> None:
    reader = SSEReader(max_event=n - 1)
    with pytest.raises(FramingError, match=f"an event is longer than {n - 1} bytes"):
        for piece in _pieces(b"data: " + _json_line(n - 6) + b"\n\n"):
            reader.feed(piece)
    assert reader.scanned <= 3 * n, reader.scanned


@pytest.mark.parametrize("split", range(1, 7))
def test_sse_line_ends_split_anywhere_after_a_held_line(split: int) -> None:
    """CR, LF and CRLF ends of a line that was held across reads, split at every offset."""
    stream = b"data: a\r\n\r\ndata: b\r\rdata: c\n\ndata: d\r\n"
    whole = SSEReader()
    want = [e.data for e in [*whole.feed(stream), *whole.finish()]]
    reader = SSEReader()
    got = []
    for i in range(0, len(stream), split):
        got += [e.data for e in reader.feed(stream[i:i + split])]
    got += [e.data for e in reader.finish()]
    assert got == want == ["a", "b", "c", "d"]


def test_blanks_before_the_first_payload_are_held_linearly_and_bounded() -> None:
    reader = SniffingReader(max_size=MIB)
    for piece in _pieces(b"\n" * MIB):
        assert reader.feed(piece) == []
    assert reader.feed(b"\n" * 10 + b'{"a": 1}\n') == [{"a": 1}]
    reader = SniffingReader(max_size=MIB)
    with pytest.raises(FramingError, match=f"more than {MIB} blank bytes"):
        for piece in _pieces(b"\n" * (MIB + 1)):
            reader.feed(piece)
