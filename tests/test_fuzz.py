"""Fuzz targets: whatever bytes or JSON arrive, a reader or a dialect parser lets nothing but
:class:`ParseError` escape, and :class:`StreamTranslator` raises nothing at all.

The example count comes from the loaded hypothesis profile: ``HYPOTHESIS_PROFILE=fuzz`` runs
10,000 examples per target (and lifts the per-test timeout in proportion).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.canonical import (
    ChatRequest,
    ContextUpdate,
    Message,
    StreamError,
    StreamFinish,
    StreamStart,
    TextDelta,
)
from gateway.dialects import DIALECTS
from gateway.errors import ParseError
from gateway.framing import RawData, SniffingReader, reader_for
from gateway.framing.jsonlines import JsonLinesReader, encode_line
from gateway.framing.sse import SSEReader, encode_event
from gateway.pipeline import StreamTranslator

# pyproject's 60 s per test is sized for the default profile's 200 examples.
pytestmark = pytest.mark.timeout(60 * max(1, settings().max_examples // 200))

DIALECT_NAMES = list(DIALECTS)
PAIRS = [(up, client) for up in DIALECT_NAMES for client in DIALECT_NAMES]
STREAM_EVENTS = (StreamStart, TextDelta, ContextUpdate, StreamFinish, StreamError)

# --- bytes ------------------------------------------------------------------------------------

TOKENS = st.sampled_from([
    b"{", b"}", b"[", b"]", b'"', b"\\", b"\\u", b"\n", b"\r", b"\r\n", b"\n\n", b" ", b":",
    b",", b"data:", b"data: ", b"event: ", b"id: ", b"retry: ", b": ping", b"\xef\xbb\xbf",
    b"\x00", b"\xff", b"\xc3", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80", b"[DONE]", b"null", b"1e400",
    b"-", b'{"a":1}', b'{"error":"x"}', b'{"delta":{"content":"hi"}}',
    b'{"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}',
    b'{"messageId":"m","status":"completed","content":"hi"}',
])
BYTES = st.one_of(
    st.binary(max_size=300),
    st.lists(st.one_of(TOKENS, st.binary(max_size=6)), max_size=60).map(b"".join),
)


def pieces_of(data: st.DataObject, body: bytes) -> list[bytes]:
    """``body`` cut at random points (empty reads included)."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=16), label="cuts"))
    points = [0, *cuts, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(points)]


# --- JSON -------------------------------------------------------------------------------------

KEYS = st.one_of(
    st.text(max_size=8),
    st.sampled_from([
        "messages", "role", "content", "context", "session_state", "sessionState", "stream",
        "choices", "message", "delta", "error", "status", "Items", "$type", "Text", "text",
        "messageId", "conversationId", "agentName", "sources", "usage", "finish_reason", "id",
        "created", "model", "temperature", "overrides", "data_points", "citations",
        "followup_questions", "name", "type", "stream_options", "include_usage", "Role", "Label",
        "label", "title", "url", "snippet", "code", "AuthorName", "contentType", "index", "param",
    ]),
)
WORDS = st.sampled_from(["assistant", "user", "completed", "failed", "processing", "stop",
                         "TextContent", "textcontent", "[DONE]", "http://x", "a: b", ""])


def json_values(ints: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    scalars = (st.none() | st.booleans() | ints | st.floats(allow_nan=False)
               | st.text(max_size=10) | WORDS)
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=6),
        max_leaves=25,
    )


JSON = json_values(st.integers())
# What orjson can write back (64-bit integers, no infinities), for bodies framed on the wire.
WIRE_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10) | WORDS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=6),
    max_leaves=25,
)
TEXT = st.text(max_size=10) | WORDS
# Chunks shaped like each dialect's, so the decoders and encoders get past their first checks.
DELTA_CHUNKS = st.fixed_dictionaries(
    {"delta": st.fixed_dictionaries({}, optional={"content": st.none() | TEXT,
                                                  "role": st.none() | TEXT})},
    optional={"context": WIRE_JSON, "session_state": WIRE_JSON, "sessionState": WIRE_JSON})
CHOICES_CHUNKS = st.fixed_dictionaries(
    {"choices": st.lists(st.fixed_dictionaries({}, optional={
        "delta": st.fixed_dictionaries({}, optional={"content": st.none() | TEXT}),
        "finish_reason": st.none() | TEXT, "context": WIRE_JSON, "session_state": WIRE_JSON,
    }), max_size=2)},
    optional={"usage": WIRE_JSON, "id": TEXT, "created": st.integers(0, 2**40), "model": TEXT})
CHATUI_CHUNKS = st.fixed_dictionaries(
    {"messageId": TEXT, "content": TEXT},
    optional={"status": WORDS, "agentName": TEXT, "conversationId": TEXT, "error": WIRE_JSON,
              "sources": st.lists(st.fixed_dictionaries({}, optional={
                  "id": TEXT, "title": TEXT, "url": TEXT, "snippet": TEXT}), max_size=3)})
ERROR_CHUNKS = st.fixed_dictionaries({"error": WIRE_JSON})
CHUNKS = st.one_of(DELTA_CHUNKS, CHOICES_CHUNKS, CHATUI_CHUNKS, ERROR_CHUNKS)
SHAPES = {
    "protocol-2024-01-28": CHOICES_CHUNKS,
    "protocol-2024-05-29": DELTA_CHUNKS,
    "chatui": CHATUI_CHUNKS,
    "openai": CHOICES_CHUNKS,
}
PAYLOADS = st.one_of(JSON, CHUNKS, st.builds(RawData, TEXT))


# --- readers ----------------------------------------------------------------------------------

READERS: dict[str, Callable[[], Any]] = {
    "jsonlines": JsonLinesReader,
    "jsonlines-small": lambda: JsonLinesReader(64),
    "sse": SSEReader,
    "sse-small": lambda: SSEReader(64),
    "sniffing": SniffingReader,
    "sniffing-small": lambda: SniffingReader(64),
}


@pytest.mark.parametrize("make", READERS.values(), ids=READERS.keys())
@given(body=BYTES, data=st.data())
def test_readers_let_only_parse_errors_escape(
    make: Callable[[], Any], body: bytes, data: st.DataObject,
) -> None:
    reader = make()
    try:
        for piece in pieces_of(data, body):
            assert isinstance(reader.feed(piece), list)
        assert isinstance(reader.finish(), list)
    except ParseError:
        pass


# --- dialect parsers --------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["parse_request", "parse_response", "parse_error"])
@pytest.mark.parametrize("name", DIALECT_NAMES)
@given(body=JSON | CHUNKS)
def test_dialect_parsers_let_only_parse_errors_escape(name: str, method: str, body: Any) -> None:
    with contextlib.suppress(ParseError):
        getattr(DIALECTS[name], method)(body)


@pytest.mark.parametrize("name", DIALECT_NAMES)
@given(payloads=st.lists(PAYLOADS, max_size=8))
def test_stream_decoders_let_only_parse_errors_escape(name: str, payloads: list[Any]) -> None:
    decoder = DIALECTS[name].decoder()
    for payload in payloads:
        try:
            events = decoder.decode(payload)
        except ParseError:
            continue
        assert all(isinstance(e, STREAM_EVENTS) for e in events)
    assert all(isinstance(e, STREAM_EVENTS) for e in decoder.end())


# --- the stream pipeline ----------------------------------------------------------------------


@st.composite
def upstream_bodies(draw: st.DrawFn, upstream: str) -> bytes:
    """Arbitrary bytes, or framed payloads (mostly shaped like ``upstream``'s chunks) with the odd
    stray bytes between."""
    if draw(st.integers(0, 3)) == 0:
        return draw(BYTES)
    frame = draw(st.sampled_from([encode_line, encode_event]))
    parts: list[bytes] = []
    for kind in draw(st.lists(st.integers(0, 19), max_size=8)):
        if kind < 14:
            payload = orjson.dumps(draw(SHAPES[upstream]))
        elif kind < 17:
            payload = orjson.dumps(draw(CHUNKS))
        elif kind < 18:
            payload = orjson.dumps(draw(WIRE_JSON))
        else:
            payload = draw(st.sampled_from([b"[DONE]", b"", b"oops"]))
        parts.append(frame(payload))
        if draw(st.integers(0, 19)) == 0:
            parts.append(draw(TOKENS))
    return b"".join(parts)


REQ = ChatRequest(messages=[Message("user", "hi")])


@pytest.mark.parametrize(("upstream", "client"), PAIRS, ids=[f"{u}->{c}" for u, c in PAIRS])
@given(data=st.data())
def test_stream_translator_never_raises(upstream: str, client: str, data: st.DataObject) -> None:
    body = data.draw(upstream_bodies(upstream), label="body")
    translator = StreamTranslator(DIALECTS[upstream], DIALECTS[client], REQ)
    sent: list[bytes] = []
    for piece in pieces_of(data, body):
        failed_before = translator.error is not None
        out = translator.feed(piece)
        assert isinstance(out, bytes)
        if failed_before:
            assert out == b"", "output after the stream failed"
        sent.append(out)
    failed_before = translator.error is not None
    out = translator.finish()
    assert isinstance(out, bytes)
    if failed_before:
        assert out == b"", "output after the stream failed"
    sent.append(out)
    # What the client gets is always well framed in its own dialect's framing.
    reader = reader_for(DIALECTS[client].framing)
    reader.feed(b"".join(sent))
    reader.finish()


@pytest.mark.parametrize("client", sorted(DIALECTS))
@pytest.mark.parametrize("depth", [255, 1000])
def test_translator_fails_cleanly_on_chunks_too_deep_to_write(client: str, depth: int) -> None:
    """orjson reads 1024 levels but writes 254: a chunk the client's dialect must carry on
    becomes an error event, never an exception (the same-dialect pass-through and the chatui
    citation walk both used to raise); a client whose dialect drops context never sees it."""
    upstream = DIALECTS["protocol-2024-05-29"]
    tr = StreamTranslator(upstream, DIALECTS[client], ChatRequest(messages=[Message("user", "hi")]))
    head = tr.feed(b'{"delta":{"role":"assistant"}}\n{"delta":{"content":"ok"}}\n')
    assert head and tr.error is None
    deep = b'{"context":' * depth + b"1" + b"}" * depth + b"\n"
    out = tr.feed(deep) + tr.finish()
    if client.startswith("protocol-"):  # these carry the context on, so it must fail
        assert tr.error is not None and tr.broken
        assert b"nested too deeply" in out
    if tr.error is not None:
        assert tr.feed(b'{"delta":{"content":"late"}}\n') == b""
    else:
        assert tr.done and b"ok" in head
