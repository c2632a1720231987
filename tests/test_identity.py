"""Identity routes (the same dialect both sides) pass the upstream's bytes on as they came, for
every registered dialect: a stream read made of whole frames and a whole answer are forwarded
unchanged, while the events are still read for usage, finish and errors; a stream that breaks
still ends in the client dialect's own error event, after exactly what was forwarded."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.canonical import ChatRequest, Message, StreamError, StreamEvent, StreamFinish
from gateway.config import parse_config
from gateway.dialects import DIALECTS, Dialect, client_path
from gateway.framing import SniffingReader
from gateway.pipeline import StreamTranslator
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

DIALECT_LIST = list(DIALECTS.values())
IDS = [d.name for d in DIALECT_LIST]
# An SSE dialect whose sample stream reports usage, and one without named events: what the two
# tests below need, whichever dialect that is.
USAGE_SSE = next(d for d in DIALECT_LIST if d.framing == "sse"
                 and b'"usage"' in d.samples.streams.get("text", b""))
PLAIN_SSE = next(d for d in DIALECT_LIST if d.framing == "sse" and not d.named_events)


def frames(d: Dialect, raw: bytes) -> list[bytes]:
    """The stream as its server writes it: one frame per write."""
    sep = b"\n\n" if d.framing == "sse" else b"\n"
    parts = raw.split(sep)
    out = [p + sep for p in parts[:-1]]
    return out + ([parts[-1]] if parts[-1] else [])


def spaced(d: Dialect, frame: bytes) -> bytes:
    """The frame with its JSON written with spaces (``{"a": 1}``), as some servers write it and
    the gateway's own writer never would: what comes out shows whether it was re-written. In an
    SSE frame each ``data:`` line is re-written and the other lines (``event:``) kept."""
    prefix = b"data: " if d.framing == "sse" else b""
    lines = frame.split(b"\n")
    return b"\n".join(_spaced_line(ln, prefix) if ln.startswith(prefix) else ln for ln in lines)


def _spaced_line(line: bytes, prefix: bytes) -> bytes:
    try:
        value = json.loads(line[len(prefix):])
    except ValueError:
        return line
    return prefix + json.dumps(value, ensure_ascii=False).encode()


def events_of(d: Dialect, raw: bytes) -> list[StreamEvent]:
    reader = SniffingReader(named=d.named_events)
    decoder = d.decoder()
    out: list[StreamEvent] = []
    for payload in [*reader.feed(raw), *reader.finish()]:
        out.extend(decoder.decode(payload))
    return out + decoder.end()


def request() -> ChatRequest:
    return ChatRequest(messages=[Message("user", "hi")], stream=True)


def translate(d: Dialect, reads: list[bytes]) -> tuple[StreamTranslator, bytes]:
    tr = StreamTranslator(d, d, request())
    out = [tr.feed(r) for r in reads]
    return tr, b"".join(out) + tr.finish()


@pytest.mark.parametrize("d", DIALECT_LIST, ids=IDS)
def test_a_stream_of_whole_frames_is_forwarded_byte_for_byte(d: Dialect) -> None:
    for case, raw in d.samples.streams.items():
        if b"\r" in raw:
            continue  # CR line ends are normalised by the reader: not a plain stream
        reads = [spaced(d, f) for f in frames(d, raw)]
        tr, out = translate(d, reads)
        # comments (keep-alives) carry nothing for the client and were never passed on
        assert out == b"".join(f for f in reads if not f.startswith(b":")), case
        assert b'": ' in out
        # a sample that ends in the dialect's error event is passed on as one, and known as one
        broken = any(isinstance(e, StreamError) for e in events_of(d, raw))
        assert (tr.error is not None) == broken, case
        assert tr.content_started


@pytest.mark.parametrize("d", DIALECT_LIST, ids=IDS)
def test_reads_split_anywhere_still_give_the_same_events(d: Dialect) -> None:
    rng = random.Random(7)
    raw = d.samples.streams["text"]
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(raw)), 5))
        reads = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
        _, out = translate(d, reads)
        assert events_of(d, out) == events_of(d, raw)


@pytest.mark.parametrize("d", DIALECT_LIST, ids=IDS)
def test_a_broken_stream_ends_in_the_clients_error_event_after_what_was_forwarded(
        d: Dialect) -> None:
    whole = [f for f in frames(d, d.samples.streams["text"]) if not f.startswith(b":")]
    good = whole[:2]
    bad = b"data: {not json\n\n" if d.framing == "sse" else b"{not json\n"
    tr, out = translate(d, [*good, bad, *whole[2:]])
    assert out.startswith(b"".join(good))  # forwarded as it came
    events = events_of(d, out)
    assert isinstance(events[-1], StreamError), events[-1]
    assert not any(isinstance(e, StreamFinish) for e in events)
    assert tr.broken and tr.error is not None


def test_usage_is_read_from_a_forwarded_stream() -> None:
    d = USAGE_SSE
    raw = d.samples.streams["text"]
    tr, out = translate(d, frames(d, raw))
    assert out.endswith(frames(d, raw)[-1])  # the stream's own end, passed on
    assert tr.usage is not None and tr.usage.output_tokens


# --- whole answers, through the exchange ---------------------------------------------------------


WHOLE = [d for d in DIALECT_LIST if not getattr(d, "streams_only", False)]
"""The dialects an upstream may answer whole (one that only streams is always asked for its
stream)."""


@pytest.mark.parametrize("d", WHOLE, ids=[d.name for d in WHOLE])
async def test_a_whole_answer_is_passed_on_as_it_came(d: Dialect) -> None:
    # pretty-printed, keys as the upstream ordered them: what the client gets is these bytes
    sample = d.samples.responses["text"]
    body = orjson.dumps(sample, option=orjson.OPT_INDENT_2)

    async def answer(request: UpstreamRequest) -> MemoryResponse:
        return MemoryResponse(200, {"Content-Type": "application/json"}, body)

    cfg = parse_config({
        "upstreams": {"up": {"dialect": d.name, "url": "http://up.test/chat", "model": "m"}},
        "routes": [{"path": "/c", "dialect": d.name, "upstream": "up"}]}, env={})
    app = create_app(cfg, transport=MemoryTransport(answer))
    async with TestClient(_server(app)) as client:
        # a request with nothing of its own to put in the answer (a session-state spelling)
        req = d.render_request(ChatRequest(messages=[Message("user", "hi")]), stream=False,
                               model="m")
        assert not d.parse_request(req).hints.get("session_key")
        resp = await client.post(client_path(d, "/c", "m", stream=False), json=req)
        assert resp.status == 200
        assert await resp.read() == body


def _server(app: Any) -> Any:
    from aiohttp.test_utils import TestServer

    return TestServer(app)


# --- a dialect whose SSE events are named ----------------------------------------------------


class _NamedDecoder:
    def decode(self, payload: Any) -> list[StreamEvent]:
        from gateway.canonical import StreamStart, TextDelta
        from gateway.framing import Named

        assert isinstance(payload, Named), payload
        if payload.event == "start":
            return [StreamStart()]
        if payload.event == "delta":
            return [TextDelta(payload.data["text"])]
        return [StreamFinish("stop")]

    def end(self) -> list[StreamEvent]:
        return [StreamError("ended before its finish")]


class _NamedEvents:
    """The least a dialect with named SSE events needs here (no such dialect is registered
    on every branch)."""

    name = "named-fixture"
    named_events = True
    framing = "sse"
    cumulative_stream = False

    @property
    def capabilities(self) -> Any:
        return PLAIN_SSE.capabilities

    def decoder(self) -> _NamedDecoder:
        return _NamedDecoder()

    def encoder(self, req: ChatRequest) -> Any:
        return PLAIN_SSE.encoder(req)


def test_named_events_keep_their_names_when_re_encoded() -> None:
    d: Any = _NamedEvents()
    raw = (b'event: start\ndata: {}\n\nevent: delta\ndata: {"text": "a"}\n\n'
           b'event: delta\ndata: {"text": "b"}\n\nevent: done\ndata: {}\n\n')
    for cut in range(1, len(raw)):  # every split: some reads hold part of a frame
        tr = StreamTranslator(d, d, request())
        out = tr.feed(raw[:cut]) + tr.feed(raw[cut:]) + tr.finish()
        assert events_of(d, out) == events_of(d, raw), cut


def test_named_events_in_whole_frames_are_forwarded_byte_for_byte() -> None:
    d: Any = _NamedEvents()
    frames_ = [b'event: start\ndata: {}\n\n', b'event: delta\ndata: {"text":  "a"}\n\n',
               b'event: done\ndata: {}\n\n']
    tr = StreamTranslator(d, d, request())
    out = b"".join(tr.feed(f) for f in frames_) + tr.finish()
    assert out == b"".join(frames_)


def test_what_is_passed_on_is_the_payloads_whatever_the_reads() -> None:
    """Each payload's own bytes, in a frame as the gateway writes one: comments, ids and the
    shape of the upstream's lines are not payloads, and are never passed on, whether a read
    holds whole frames or not (what the client gets does not depend on how the reads fell)."""
    d: Any = _NamedEvents()
    raw = (b'event: start\ndata: {}\n\n: a comment\nevent: delta\nid: 7\ndata: {"text":  "b"}'
           b'\n\nevent:delta\ndata:{"text": "c"}\n\nevent: done\ndata: {}\n\n')
    want = (b'event: start\ndata: {}\n\nevent: delta\ndata: {"text":  "b"}\n\n'
            b'event: delta\ndata: {"text": "c"}\n\nevent: done\ndata: {}\n\n')
    for cut in range(len(raw) + 1):
        tr = StreamTranslator(d, d, request())
        assert tr.feed(raw[:cut]) + tr.feed(raw[cut:]) + tr.finish() == want, cut
