"""Streams at the edges, through the real app and real sockets on 127.0.0.1: what a streamed
request tells its upstream (the ``Accept`` its dialect declares), an upstream's own error event
that would wipe what a cumulative client shows, and what a stream its client cut off is
recorded as. No dialect is named: each test asks the registry and the declarations."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import structlog
from aiohttp.test_utils import TestClient
from fakes import Fakes, Script, client_request, eventually, pairs, upstream_config
from prometheus_client.parser import text_string_to_metric_families
from strict import reader_for as strict_reader_for

from gateway.app import create_app
from gateway.canonical import ChatError, StreamError, StreamFinish, TextDelta
from gateway.config import parse_config
from gateway.dialects import Dialect, get, names
from gateway.errors import DialectError
from gateway.framing import SniffingReader, encoder_for
from gateway.log import configure_logging


async def gateway(aiohttp_client: Any, client: str, upstream: dict[str, Any],
                  **route: Any) -> TestClient[Any, Any]:
    cfg = {"upstreams": {"u": upstream},
           "routes": [{"path": "/c", "dialect": client, "upstream": "u", **route}]}
    gw: TestClient[Any, Any] = await aiohttp_client(
        create_app(parse_config(cfg, env={})), server_kwargs={"handler_cancellation": True})
    return gw


# --- the Accept of a streamed upstream request ---------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("name", names())
async def test_the_upstream_is_asked_for_its_stream_by_accept(
        aiohttp_client: Any, fakes: Fakes, name: str, stream: bool) -> None:
    """A backend may choose its stream by ``Accept`` alone (as a Chat UI backend does): a
    streamed request carries its dialect's declared ``Accept`` (``text/event-stream`` for every
    SSE dialect), and a whole one never asks for an event stream (but of a dialect that only
    streams, whose whole answers are assembled from its stream)."""
    d = get(name)
    stream_up = stream or getattr(d, "streams_only", False)
    fake = await fakes.start(name)
    gw = await gateway(aiohttp_client, name, upstream_config(fake))
    path, body, headers = client_request(name, stream=stream)
    async with gw.post(path, json=body, headers=headers) as resp:
        assert resp.status == 200
        await resp.read()
    (seen,) = fake.seen
    accept = seen.headers.get("Accept", "")
    if stream_up:
        assert accept == d.stream_accept
        if d.framing == "sse":
            assert accept == "text/event-stream"
        assert seen.stream
    else:
        assert "text/event-stream" not in accept
        assert not seen.stream


# --- an upstream's own error event, mid-stream ---------------------------------------------------

FAILURE = "the backend broke down"


def frames_of(d: Dialect, data: bytes) -> list[tuple[bytes, list[Any]]]:
    """A stream body's frames as sent, each with the events the dialect's decoder reads in it."""
    sep = b"\n\n" if d.framing == "sse" else b"\n"
    reader, decoder = SniffingReader(named=d.named_events), d.decoder()
    out = []
    for piece in data.split(sep):
        if piece.strip():
            frame = piece + sep
            out.append((frame, [e for p in reader.feed(frame) for e in decoder.decode(p)]))
    return out


def error_body_event(d: Dialect) -> bytes | None:
    """The dialect's error body sent as a stream event (a backend that writes its errors one way
    does so mid-stream too: a Chat UI backend's is a ``failed`` message with a new id and no
    content), or ``None`` where the dialect's stream does not read that as an error or names
    its events (an error body sent without its event's name is no backend's)."""
    if d.named_events:
        return None
    frame = encoder_for(d.framing)(orjson.dumps(d.render_error(ChatError(500, FAILURE))))
    try:
        events = [e for _, evs in frames_of(d, frame) for e in evs]
    except DialectError:  # not a chunk of its stream at all (its events are named, or typed)
        return None
    return frame if any(isinstance(e, StreamError) for e in events) else None


def broken_sample(d: Dialect) -> tuple[bytes, str]:
    """The dialect's sample stream up to its second text frame (before any finish), then its
    error body as an event; and the text sent before the error."""
    error = error_body_event(d)
    assert error is not None
    head, text, pieces = b"", "", 0
    for frame, events in frames_of(d, d.samples.streams["text"]):
        if any(isinstance(e, StreamFinish | StreamError) for e in events):
            break
        head += frame
        deltas = [e.text for e in events if isinstance(e, TextDelta)]
        text += "".join(deltas)
        pieces += bool(deltas)
        if pieces == 2:
            break
    assert text, f"{d.name}: no text before the sample's finish"
    return head + error, text


ERROR_PAIRS = [(c, u) for c, u in pairs() if error_body_event(get(u)) is not None]


@pytest.mark.parametrize(("client", "upstream"), ERROR_PAIRS,
                         ids=[f"{c}<-{u}" for c, u in ERROR_PAIRS])
async def test_an_upstream_error_event_keeps_what_the_client_was_shown(
        aiohttp_client: Any, fakes: Fakes, client: str, upstream: str) -> None:
    """The upstream fails mid-stream with its own error event. The client reads (strictly, by
    its dialect's reader) the text sent so far and then the error: a cumulative stream keeps its
    message id and never shrinks its content, so its failed event carries both."""
    up = get(upstream)
    body, sent_text = broken_sample(up)
    fake = await fakes.start(upstream, Script(body=body, content_type=up.stream_content_type))
    gw = await gateway(aiohttp_client, client, upstream_config(fake), on_unsupported="drop")
    path, req, headers = client_request(client, stream=True)
    async with gw.post(path, json=req, headers=headers) as resp:
        assert resp.status == 200
        data = await resp.read()
    cl = get(client)
    seen = strict_reader_for(cl).read_stream(data)
    assert seen.error is not None and FAILURE in seen.error, seen
    if cl.cumulative_stream:  # its reader shows the last event's content: all of it
        assert seen.text == sent_text, (seen.text, data)
    else:  # deltas shown stay shown (a reader may count only the items that were completed)
        assert sent_text.startswith(seen.text), (seen.text, data)


# --- a stream its client cut off ----------------------------------------------------------------


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    yield out
    structlog.reset_defaults()


def access_lines(log: io.StringIO) -> list[dict[str, Any]]:
    return [e for e in map(orjson.loads, log.getvalue().splitlines()) if e["event"] == "access"]


async def metric(gw: TestClient[Any, Any], name: str, **labels: str) -> float:
    resp = await gw.get("/metrics")
    assert resp.status == 200
    want = set(labels.items())
    return sum(s.value for f in text_string_to_metric_families(await resp.text())
               for s in f.samples if s.name == name and want <= set(s.labels.items()))


CUT_AFTER = 10


@pytest.mark.parametrize("name", names())
async def test_a_stream_cut_off_by_its_client_is_recorded_with_what_it_sent(
        aiohttp_client: Any, fakes: Fakes, log_stream: io.StringIO, name: str) -> None:
    """The client reads ten chunks and goes away while the upstream still streams: the access
    line says 499, the chunks sent (at least ten) and the one attempt; the chunk counter counts
    them."""
    fake = await fakes.start(name, Script(scripted=True, pieces=40, chunk_delay=0.02))
    gw = await gateway(aiohttp_client, name, upstream_config(fake))
    path, body, headers = client_request(name, stream=True)
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == 200
    got = 0
    async with asyncio.timeout(10):
        while got < CUT_AFTER:
            chunk = await resp.content.readany()
            assert chunk, "the stream ended before the client cut it off"
            got += chunk.count(b"\n\n" if get(name).framing == "sse" else b"\n")
    resp.close()
    await eventually(lambda: bool(access_lines(log_stream)), within=10)
    (line,) = access_lines(log_stream)
    got_line = (line["status"], line["client_disconnected"], line["chunks"] >= CUT_AFTER,
                len(line["attempts"] or ()))
    assert got_line == (499, True, True, 1), (line["chunks"], line["attempts"], line)
    assert await metric(gw, "gateway_stream_chunks_total", route="/c") >= CUT_AFTER
    assert await metric(gw, "gateway_client_disconnects_total", route="/c") == 1
