"""The upstream connection's byte-level logic (:mod:`gateway.upstream.http1`), no sockets: a
scripted transport (in the manner of httpcore's ``MockStream``) feeds each response, and each
misbehaviour, split at every byte boundary, and the tests read back exactly what a caller of the
gateway would get and whether the connection would be handed to another request.

The rule under test: a connection is reused only when its answer is complete, the whole read
that completed it was parsed, and not one byte followed the answer's last one; and a byte that
nobody asked for (after the answer, in the same read or a later one, while idle, before the
request) makes sure it never carries another request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.errors import UpstreamError
from gateway.upstream.http1 import (
    DRAIN_BYTES,
    MAX_HEAD,
    MAX_HEADERS,
    MAX_LINE,
    Http1Connection,
    Http1Response,
    State,
)

REQUEST = b"POST /chat HTTP/1.1\r\nHost: up\r\nContent-Length: 2\r\n\r\n{}"
TEXT = "Héllo wörld 👋🏽 — 日本語 ".encode() * 2


class Wire(asyncio.Transport):
    """A transport that records what the connection does to it."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.aborted = False
        self.paused = False

    def write(self, data: Any) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


@dataclass
class Outcome:
    conn: Http1Connection
    wire: Wire
    status: int = 0
    body: bytes = b""
    error: UpstreamError | None = None
    released: list[str] = field(default_factory=list)
    delivered: int = 0
    """Bytes the connection was given before it closed (the loop reads no more after that)."""

    @property
    def reused(self) -> bool:
        return self.released == ["reuse"]


def state(conn: Http1Connection) -> State:
    """(Read through a call: a type checker would keep what an earlier assert narrowed.)"""
    return conn.state


def connect() -> tuple[Http1Connection, Wire]:
    conn = Http1Connection(lambda c: None)
    wire = Wire()
    conn.connection_made(wire)
    return conn, wire


def deliver(conn: Http1Connection, wire: Wire, pieces: list[bytes]) -> int:
    """What the event loop does: each piece to ``data_received`` until the transport is
    aborted (then no more is read, and ``connection_lost`` follows)."""
    given = 0
    for piece in pieces:
        if wire.aborted:
            break
        conn.data_received(piece)
        given += len(piece)
    return given


async def exchange(pieces: list[bytes], *, eof: bool = False,
                   reset: bool = False) -> Outcome:
    """One request; ``pieces`` as successive reads; then (``eof``/``reset``) the server's
    close. Reads the answer the way the gateway does and releases it."""
    conn, wire = connect()
    head = conn.begin(REQUEST)
    assert wire.written == REQUEST
    out = Outcome(conn, wire)
    out.delivered = deliver(conn, wire, pieces)
    if wire.aborted or eof or reset:
        conn.connection_lost(ConnectionResetError() if reset and not wire.aborted else None)
    if not head.done():
        raise AssertionError("no head and no failure: the exchange is not over")
    response = Http1Response(conn, lambda c, how: out.released.append(how))
    try:
        await head
        out.status = response.status
        got = []
        async with asyncio.timeout(1):
            while piece := await response.read():
                got.append(piece)
        out.body = b"".join(got)
    except UpstreamError as e:
        out.error = e
    finally:
        response.close()
    return out


def splits(raw: bytes) -> Iterator[list[bytes]]:
    """``raw`` as two reads split at every byte, then as one read a byte."""
    for i in range(1, len(raw)):
        yield [raw[:i], raw[i:]]
    yield [raw[i:i + 1] for i in range(len(raw))]


def chunked(*pieces: bytes, trailer: bytes = b"") -> bytes:
    out = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return out + b"0\r\n" + trailer + b"\r\n"


def length_answer(body: bytes = TEXT, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (len(body), extra)) + body


CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n" + chunked(TEXT[:7], TEXT[7:40], TEXT[40:]))
CLEAN = {
    "length": length_answer(),
    "chunked": CHUNKED,
    "chunked-trailer": CHUNKED[:-2] + b"X-Trailer: yes\r\n\r\n",
    "interim-103": b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + length_answer(),
    "interim-100-twice": (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"
                          + CHUNKED),
}
STRAYS = {
    "answer": length_answer(b"STRAY BYTES", b"X-Id: someone-else\r\n"),
    "crlf": b"\r\n",
    "lf": b"\n",
    "byte": b"X",
    "head-start": b"HTTP/1.1 2",
}


# --- clean answers: every split reads the same, and only these are reused ---------------------


@pytest.mark.parametrize("name", list(CLEAN))
async def test_a_clean_answer_split_anywhere_is_read_whole_and_reused(name: str) -> None:
    for pieces in splits(CLEAN[name]):
        out = await exchange(pieces)
        assert (out.status, out.body, out.error) == (200, TEXT, None), pieces
        assert out.reused and out.conn.state is State.DONE, pieces


# --- stray bytes after the answer ---------------------------------------------------------------


@pytest.mark.parametrize("stray", list(STRAYS))
@pytest.mark.parametrize("answer", ["chunked", "length", "chunked-trailer"])
async def test_bytes_after_the_answer_in_any_read_mean_it_is_never_reused(answer: str,
                                                                          stray: str) -> None:
    """The stray bytes in the answer's last read, or in a read of their own, split anywhere:
    the answer is read exactly, the stray is not part of it, and the connection is closed."""
    raw = CLEAN[answer] + STRAYS[stray]
    for pieces in splits(raw):
        out = await exchange(pieces)
        assert (out.status, out.body, out.error) == (200, TEXT, None), pieces
        assert not out.reused, pieces
        assert out.wire.aborted and out.conn.state is State.CLOSED, pieces


@pytest.mark.parametrize("stray", list(STRAYS))
async def test_a_stray_read_after_the_answer_completed_closes_it(stray: str) -> None:
    """The answer complete (DONE) and not yet released by its reader: a later read."""
    conn, wire = connect()
    conn.begin(REQUEST)
    conn.data_received(CHUNKED)
    assert conn.state is State.DONE and conn.reusable
    conn.data_received(STRAYS[stray])
    assert state(conn) is State.MUST_CLOSE and wire.aborted and not conn.reusable
    assert b"".join(conn.take()) == TEXT  # the answer itself is intact


@pytest.mark.parametrize("stray", list(STRAYS))
async def test_bytes_while_idle_in_the_pool_close_it(stray: str) -> None:
    conn, wire = connect()
    conn.begin(REQUEST)
    conn.data_received(length_answer())
    conn.finished()  # released to the pool
    assert conn.state is State.IDLE
    conn.data_received(STRAYS[stray])
    assert state(conn) is State.MUST_CLOSE and wire.aborted
    conn.connection_lost(None)
    assert state(conn) is State.CLOSED
    with pytest.raises(AssertionError):
        conn.begin(REQUEST)  # nothing can send on it
    assert wire.written == REQUEST


async def test_an_answer_before_the_request_was_sent_closes_it() -> None:
    conn, wire = connect()
    conn.data_received(length_answer())
    assert conn.state is State.MUST_CLOSE and wire.aborted and wire.written == b""


@pytest.mark.parametrize("stray", list(STRAYS))
async def test_a_drained_answer_followed_by_strays_is_not_reused(stray: str) -> None:
    """The reader stopped before the end (a stream after its finish): the rest is drained, and
    the drain's verdict comes after the whole read, strays included, was parsed."""
    head = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n" % (len(TEXT), TEXT))
    rest = chunked(b"data: [DONE]\n\n")
    for with_stray in (False, True):
        raw = rest + (STRAYS[stray] if with_stray else b"")
        for pieces in splits(raw):
            conn, wire = connect()
            conn.begin(REQUEST)
            conn.data_received(head)
            assert conn.drainable()
            verdicts: list[bool] = []

            def pool(ok: bool, conn: Http1Connection = conn, verdicts: list[bool] = verdicts
                     ) -> None:
                verdicts.append(ok)
                if ok:
                    conn.finished()  # as the pool does: idle, for the next request

            conn.drain(pool)
            deliver(conn, wire, pieces)
            assert len(verdicts) == 1, pieces
            if with_stray:
                # a verdict for the answer alone (it ended a read) and then the stray, or one
                # for the answer and its stray together: either way, never usable after it
                assert conn.state is State.MUST_CLOSE and wire.aborted, pieces
                ends = {sum(map(len, pieces[:n])) for n in range(1, len(pieces) + 1)}
                assert verdicts == [len(rest) in ends], pieces
            else:
                assert verdicts == [True] and conn.state is State.IDLE, pieces


async def test_a_drain_past_its_bound_closes() -> None:
    conn, _ = connect()
    conn.begin(REQUEST)
    conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
    verdicts: list[bool] = []
    conn.drain(verdicts.append)
    conn.data_received(b"%x\r\n%s\r\n" % (DRAIN_BYTES + 1, b"x" * (DRAIN_BYTES + 1)))
    assert verdicts == [False]


# --- the close-delimited answers ----------------------------------------------------------------


async def test_connection_close_is_read_whole_and_not_reused() -> None:
    raw = length_answer(extra=b"Connection: close\r\n")
    for pieces in splits(raw):
        out = await exchange(pieces)
        assert (out.status, out.body, out.error) == (200, TEXT, None), pieces
        assert not out.reused and out.wire.aborted, pieces


async def test_http_1_0_reads_until_the_close() -> None:
    raw = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + TEXT
    for pieces in splits(raw):
        out = await exchange(pieces, eof=True)
        assert (out.status, out.body, out.error) == (200, TEXT, None), pieces
        assert not out.reused, pieces


async def test_a_reset_cuts_an_answer_read_until_the_close() -> None:
    out = await exchange([b"HTTP/1.0 200 OK\r\n\r\n" + TEXT[:10]], reset=True)
    assert out.error is not None and out.error.kind == "connect"
    assert not out.reused


@pytest.mark.parametrize("name", ["length", "chunked"])
async def test_an_answer_cut_short_is_an_error(name: str) -> None:
    raw = CLEAN[name]
    for i in range(1, len(raw)):
        out = await exchange([raw[:i]], eof=True)
        assert out.error is not None and out.error.kind == "connect", i
        assert not out.reused


# --- head limits: aiohttp's client's figures ----------------------------------------------------


def endless(start: bytes, filler: bytes, piece: int = 4096) -> Iterator[bytes]:
    """An upstream that never stops: ``start``, then ``filler`` forever (a bound on the test's
    side keeps a broken client from looping for ever)."""
    yield start
    for _ in range(100_000):
        yield filler * (piece // len(filler))


@pytest.mark.parametrize("start,filler", [
    (b"HTTP/1.1 200 ", b"x"),  # the status line
    (b"HTTP/1.1 200 OK\r\nX-Long: ", b"y"),  # one header line
    (b"HTTP/1.1 200 OK\r\n", b"X-Many: 1\r\n"),  # headers without end
    (b"HTTP/1.1 200 OK\r\n", b"X-Many: %s\r\n" % (b"z" * 1000)),  # the head in all
    (b"\r\n", b"\r\n"),  # empty lines for ever
], ids=["status-line", "header-line", "headers", "head", "empty-lines"])
async def test_an_endless_head_fails_after_one_read_past_its_limit(start: bytes,
                                                                   filler: bytes) -> None:
    conn, wire = connect()
    head = conn.begin(REQUEST)
    given = deliver(conn, wire, list(endless(start, filler)))
    assert wire.aborted and conn.state is State.MUST_CLOSE
    assert given <= MAX_HEAD + 4096, given
    with pytest.raises(UpstreamError) as e:
        await head
    assert e.value.kind == "connect" and "limits" in e.value.message


def head_with(lines: list[bytes]) -> bytes:
    return b"HTTP/1.1 200 OK\r\n" + b"".join(line + b"\r\n" for line in lines) + (
        b"Content-Length: %d\r\n\r\n" % len(TEXT)) + TEXT


@pytest.mark.parametrize("case,ok", [
    ("line-at-limit", True), ("line-past-limit", False),
    ("status-at-limit", True), ("status-past-limit", False),
    ("headers-at-limit", True), ("headers-past-limit", False),
    ("head-past-limit", False),
])
async def test_head_limits_split_anywhere(case: str, ok: bool) -> None:
    name = b"X-Long: "
    if case.startswith("line"):
        width = MAX_LINE + (0 if ok else 1)
        raw = head_with([name + b"v" * (width - len(name))])
    elif case.startswith("status"):
        width = MAX_LINE + (0 if ok else 1)
        status = b"HTTP/1.1 200 "
        raw = status + b"R" * (width - len(status)) + head_with([])[len(b"HTTP/1.1 200 OK"):]
    elif case.startswith("headers"):
        count = MAX_HEADERS - 1 + (0 if ok else 1)  # and Content-Length
        raw = head_with([b"X-N%d: 1" % n for n in range(count)])
    else:
        raw = head_with([b"X-N%d: %s" % (n, b"v" * 1000) for n in range(MAX_HEAD // 1000)])
    step = max(1, len(raw) // 97)  # every byte of a 100 KiB head would be slow: a spread
    for i in [*range(1, len(raw), step), len(raw) - 1]:
        out = await exchange([raw[:i], raw[i:]])
        if ok:
            assert (out.status, out.body, out.error) == (200, TEXT, None), i
            assert out.reused
        else:
            assert out.error is not None and out.error.kind == "connect", i
            assert "limits" in out.error.message and not out.reused, i


async def test_endless_trailers_are_bounded_like_a_head() -> None:
    conn, wire = connect()
    conn.begin(REQUEST)
    first = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n"
             b"X-Trailer: ")
    given = deliver(conn, wire, list(endless(first, b"t")))
    assert wire.aborted and conn.error is not None
    assert given <= 2 * MAX_HEAD, given


# --- malformed answers --------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",  # bare line feeds
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"SSH-2.0-OpenSSH\r\n\r\n",
], ids=["bare-lf", "two-lengths", "length-and-chunked", "upgrade", "bad-chunk", "not-http"])
async def test_a_malformed_answer_is_a_connect_error_and_closes(raw: bytes) -> None:
    out = await exchange([raw])
    assert out.error is not None and out.error.kind == "connect"
    assert out.wire.aborted and not out.reused


async def test_a_paused_connection_is_not_reused() -> None:
    """A reader that closed a complete answer it had not read: the socket was paused, so bytes
    after the answer may be waiting unread. Closed, not pooled."""
    big = b"b" * (3 * 64 * 1024)
    conn, wire = connect()
    conn.begin(REQUEST)
    conn.data_received(length_answer(big))
    assert conn.state is State.DONE and wire.paused
    assert not conn.reusable
