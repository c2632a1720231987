"""Fuzz targets: whatever bytes or JSON arrive, a framing reader or a registered dialect's parser
or decoder lets nothing but :class:`ParseError` escape, and :class:`StreamTranslator` raises
nothing at all and always writes its client's framing.

The JSON is arbitrary, or a dialect's own sample payloads mutated (a value replaced, a key
dropped or added), so that each decoder gets past its first checks; the keys come from every
dialect's samples. The example count comes from the loaded hypothesis profile:
``HYPOTHESIS_PROFILE=fuzz`` runs 10,000 examples per target (and lifts the per-test timeout in
proportion).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.canonical import (
    ChatRequest,
    ContextUpdate,
    Message,
    ReasoningDelta,
    StreamError,
    StreamFinish,
    StreamStart,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from gateway.dialects import DIALECTS, Dialect
from gateway.errors import ParseError
from gateway.framing import Named, RawData, SniffingReader, encoder_for, reader_for
from gateway.framing.jsonlines import JsonLinesReader
from gateway.framing.sse import SSEReader
from gateway.pipeline import StreamTranslator

# pyproject's 60 s per test is sized for the default profile's 200 examples.
pytestmark = pytest.mark.timeout(60 * max(1, settings().max_examples // 200))

NAMES = list(DIALECTS)
PAIRS = [(up, client) for up in NAMES for client in NAMES]
STREAM_EVENTS = (StreamStart, TextDelta, ReasoningDelta, ToolCallStart, ToolCallDelta,
                 ToolCallEnd, ContextUpdate, StreamFinish, StreamError)


def _small(value: Any) -> Any:
    """The same shape, smaller: lists of at most two items, strings of at most 16 characters
    (the samples' contexts run to kilobytes, which only slows the fuzzing down)."""
    if isinstance(value, Named):
        return Named(value.event, _small(value.data))
    if isinstance(value, dict):
        return {k: _small(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_small(v) for v in value[:2]]
    if isinstance(value, str):
        return value[:16]
    return value


@cache
def sample_payloads(name: str) -> list[Any]:
    """The payloads of a dialect's sample streams, as its decoder receives them."""
    d = DIALECTS[name]
    out: list[Any] = []
    for data in d.samples.streams.values():
        reader = SniffingReader(named=d.named_events)
        out += reader.feed(data) + reader.finish()
    return out


@cache
def seeds_of(name: str, kind: str) -> list[tuple[Any, list[tuple[Any, ...]]]]:
    """Small copies of a dialect's sample payloads (``stream``) or bodies (``body``), each with
    the paths into it."""
    if kind == "stream":
        values = [_small(p) for p in sample_payloads(name)]
    else:
        s = DIALECTS[name].samples
        values = [_small(v) for v in [*s.requests.values(), *s.responses.values(), s.error]]
    return [(v, _paths(v.data if isinstance(v, Named) else v)) for v in values]


def _keys(value: Any, out: set[str]) -> None:
    if isinstance(value, Named):
        out.add(value.event)
        _keys(value.data, out)
    elif isinstance(value, dict):
        out.update(value)
        for v in value.values():
            _keys(v, out)
    elif isinstance(value, list):
        for v in value:
            _keys(v, out)


@cache
def known_keys() -> list[str]:
    found: set[str] = set()
    for name in NAMES:
        for value, _ in [*seeds_of(name, "stream"), *seeds_of(name, "body")]:
            _keys(value, found)
    return sorted(found)


# --- bytes ---------------------------------------------------------------------------------------

TOKENS = st.sampled_from([
    b"{", b"}", b"[", b"]", b'"', b"\\", b"\\u", b"\n", b"\r", b"\r\n", b"\n\n", b" ", b":",
    b",", b"data:", b"data: ", b"event: ", b"id: ", b"retry: ", b": ping", b"\xef\xbb\xbf",
    b"\x00", b"\xff", b"\xc3", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80", b"[DONE]", b"null", b"1e400",
    b"-", b'{"a":1}', b'{"error":"x"}',
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


# --- JSON ----------------------------------------------------------------------------------------

KEYS = st.one_of(st.text(max_size=8), st.deferred(lambda: st.sampled_from(known_keys())))
WORDS = st.sampled_from(["assistant", "user", "tool", "completed", "failed", "processing",
                         "stop", "length", "tool_calls", "TextContent", "[DONE]", "http://x",
                         "a: b", "", "function", "text", "image_url"])


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


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*path, i))
    return out


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        value = value[p]
    return value


@st.composite
def mutated(draw: st.DrawFn, seeds: list[tuple[Any, list[tuple[Any, ...]]]], *,
            wire: bool = False) -> Any:
    """One of ``seeds`` with up to three changes: a value replaced, a key dropped, a key added
    (each at a place the seed has, while the seed's shape still holds it)."""
    seed, paths = draw(st.sampled_from(seeds))
    value = copy.deepcopy(seed)
    named = value if isinstance(value, Named) else None
    body = named.data if named is not None else value
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(paths))
        new = draw(WIRE_JSON if wire else JSON)
        if not path:
            body = new
            continue
        try:
            parent, key = _at(body, path[:-1]), path[-1]
            parent[key]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change took this place away
        if not isinstance(parent, dict | list):
            continue  # ... or put a string there
        match draw(st.sampled_from(["replace", "drop", "add"])):
            case "replace":
                parent[key] = new
            case "drop":
                del parent[key]
            case "add" if isinstance(parent, dict):
                parent[draw(KEYS)] = new
            case _:
                parent.insert(key, new)
    if named is not None:
        event = draw(st.sampled_from([named.event, named.event, "message"]) | st.text(max_size=6))
        return Named(event, body)
    return body


def payloads(name: str) -> st.SearchStrategy[Any]:
    return st.one_of(JSON, mutated(seeds_of(name, "stream")),
                     st.builds(RawData, st.text(max_size=10) | WORDS),
                     st.builds(Named, st.text(max_size=6), JSON))


# --- readers -------------------------------------------------------------------------------------

READERS: dict[str, Callable[[], Any]] = {
    "jsonlines": JsonLinesReader,
    "jsonlines-small": lambda: JsonLinesReader(64),
    "sse": SSEReader,
    "sse-small": lambda: SSEReader(64),
    "sniffing": SniffingReader,
    "sniffing-small": lambda: SniffingReader(64),
    "sniffing-named": lambda: SniffingReader(named=True),
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


# --- dialect parsers -----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["parse_request", "parse_response", "parse_error"])
@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_dialect_parsers_let_only_parse_errors_escape(name: str, method: str,
                                                      data: st.DataObject) -> None:
    body = data.draw(JSON | mutated(seeds_of(name, "body")), label="body")
    with contextlib.suppress(ParseError):
        getattr(DIALECTS[name], method)(body)


# One value of each JSON type, and the nesting the parsers walk into: the random search above
# meets a wrong type at a given place only by luck, this sweep meets every one of them.
WRONG_TYPES: list[Any] = [None, True, 1, 1.5, "x", [], [1], {}, {"x": 1}]


def wrong_typed(seeds: list[tuple[Any, list[tuple[Any, ...]]]]) -> Iterator[tuple[Any, str]]:
    """Each seed with one place (never the whole) given each of :data:`WRONG_TYPES`, and what
    was changed where."""
    for seed, paths in seeds:
        for path, wrong in itertools.product([p for p in paths if p], WRONG_TYPES):
            value = copy.deepcopy(seed)
            _at(value.data if isinstance(value, Named) else value, path[:-1])[path[-1]] = wrong
            yield value, f"{wrong!r} at {path}"


@pytest.mark.parametrize("method", ["parse_request", "parse_response", "parse_error"])
@pytest.mark.parametrize("name", NAMES)
def test_dialect_parsers_meet_a_wrong_type_anywhere_with_a_parse_error(name: str,
                                                                      method: str) -> None:
    parse = getattr(DIALECTS[name], method)
    for body, change in wrong_typed(seeds_of(name, "body")):
        try:
            parse(body)
        except ParseError:
            pass
        except Exception as e:
            raise AssertionError(f"{method} raised {e!r} with {change}") from e


@pytest.mark.parametrize("name", NAMES)
def test_stream_decoders_meet_a_wrong_type_anywhere_with_a_parse_error(name: str) -> None:
    for payload, change in wrong_typed(seeds_of(name, "stream")):
        decoder = DIALECTS[name].decoder()
        try:
            events = decoder.decode(payload) + decoder.end()
        except ParseError:
            continue
        except Exception as e:
            raise AssertionError(f"decode raised {e!r} with {change}") from e
        assert all(isinstance(e, STREAM_EVENTS) for e in events), change


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_stream_decoders_let_only_parse_errors_escape(name: str, data: st.DataObject) -> None:
    decoder = DIALECTS[name].decoder()
    for payload in data.draw(st.lists(payloads(name), max_size=8), label="payloads"):
        try:
            events = decoder.decode(payload)
        except ParseError:
            continue
        assert all(isinstance(e, STREAM_EVENTS) for e in events)
    assert all(isinstance(e, STREAM_EVENTS) for e in decoder.end())


# --- the stream pipeline -------------------------------------------------------------------------


def _framed(d: Dialect, payload: Any) -> bytes:
    frame = encoder_for(d.framing)
    if isinstance(payload, Named):
        return frame(Named(payload.event, orjson.dumps(payload.data)))
    if isinstance(payload, RawData):
        return frame(payload.text.encode())
    return frame(orjson.dumps(payload))


@st.composite
def upstream_bodies(draw: st.DrawFn, upstream: str) -> bytes:
    """Arbitrary bytes, or framed payloads (mostly the upstream's own, mutated) with the odd
    stray bytes between."""
    if draw(st.integers(0, 3)) == 0:
        return draw(BYTES)
    d = DIALECTS[upstream]
    seeds = seeds_of(upstream, "stream")
    parts: list[bytes] = []
    for kind in draw(st.lists(st.integers(0, 19), max_size=8)):
        if kind < 14:
            payload = draw(mutated(seeds, wire=True))
        elif kind < 18:
            payload = draw(WIRE_JSON)
        else:
            payload = RawData(draw(st.sampled_from(["[DONE]", "", "oops"])))
        parts.append(_framed(d, payload))
        if draw(st.integers(0, 19)) == 0:
            parts.append(draw(TOKENS))
    return b"".join(parts)


REQ = ChatRequest(messages=[Message("user", "hi")])


@pytest.mark.parametrize("upstream", NAMES)
@given(data=st.data())
def test_stream_translator_never_raises(upstream: str, data: st.DataObject) -> None:
    """Every client of the upstream's body, each fed the same random reads."""
    body = data.draw(upstream_bodies(upstream), label="body")
    reads = pieces_of(data, body)
    policy = data.draw(st.sampled_from(["reject", "drop"]), label="policy")
    for client in DIALECTS.values():
        translator = StreamTranslator(DIALECTS[upstream], client, REQ, policy=policy)
        sent: list[bytes] = []
        for piece in reads:
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
        reader = reader_for(client.framing, named=client.named_events)
        reader.feed(b"".join(sent))
        reader.finish()


def _deeply(u: Dialect, payload: Any, path: tuple[Any, ...], depth: int) -> bytes:
    """``payload`` framed with the value at ``path`` replaced by one ``depth`` levels deep
    (written by hand: orjson writes only 254 levels)."""
    changed = copy.deepcopy(payload)
    body = changed.data if isinstance(changed, Named) else changed
    _at(body, path[:-1])[path[-1]] = "\u0000deep\u0000"
    deep = b'{"context":' * depth + b"1" + b"}" * depth
    return _framed(u, changed).replace(b'"\\u0000deep\\u0000"', deep)


@pytest.mark.parametrize(("upstream", "client"), PAIRS, ids=[f"{u}->{c}" for u, c in PAIRS])
def test_translator_fails_cleanly_on_chunks_too_deep_to_write(upstream: str,
                                                               client: str) -> None:
    """orjson reads 1024 levels but writes 254: a chunk the client's dialect must carry on
    becomes an error event, never an exception. Each place (two levels down) of the upstream's
    first payloads in turn gets a value 255 and 1,000 levels deep; a same-dialect route passes
    a read of whole frames on byte for byte (nothing is written, so nothing can fail) or, when
    the decoder refuses the payload first, fails; any other fails cleanly or never carries it."""
    u, c = DIALECTS[upstream], DIALECTS[client]
    seeds = sample_payloads(upstream)[:3]
    for n, seed in enumerate(seeds):
        if isinstance(seed, RawData):
            continue
        body = seed.data if isinstance(seed, Named) else seed
        for path in [p for p in _paths(body) if 0 < len(p) <= 2]:
            for depth in (255, 1000):
                deep = _deeply(u, seed, path, depth)
                assert deep.count(b'{"context":') >= depth
                head = b"".join(_framed(u, p) for p in seeds[:n])
                tr = StreamTranslator(u, c, REQ, policy="drop")
                out = tr.feed(head) + tr.feed(deep) + tr.finish()
                assert isinstance(out, bytes)
                if tr.error is not None:
                    assert tr.feed(_framed(u, seeds[0])) == b""
                if u is c:  # passed on as it came, or refused by the decoder first
                    assert (tr.error is not None and tr.broken) or \
                        (tr.error is None and deep in out), (n, path, depth)
