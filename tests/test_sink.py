"""How a chat answer reaches the wire (gateway/exchange/sink.py, through aiohttp's response
objects): the same answer each time it is asked, HTTP/1.0 and keep-alive kept right, pipelined
requests answered in order, ``Expect: 100-continue``, and a stream cut by a gateway bug never
passed off as a clean finish. ``server.http_layer: fast`` is retired and served as ``aiohttp``:
both values are run, and must put the same answer on the wire."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httptools
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from fakes import reader_for, sample_text
from faults.harness import client_request

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import DIALECTS, names
from gateway.exchange.sink import AiohttpSink
from gateway.server import open_listeners
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

Upstream = Callable[[UpstreamRequest], Awaitable[MemoryResponse]]
LAYERS = ("fast", "aiohttp")
"""``server.http_layer``'s values: ``fast`` is retired, and must serve exactly as ``aiohttp``."""
ORIGIN = "https://app.example"


@dataclass
class Answer:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    complete: bool = False


def _parse(raw: bytes, n: int = 1) -> list[Answer]:
    """The first ``n`` HTTP answers in ``raw`` (chunked bodies decoded)."""
    answers: list[Answer] = []

    class Sink:
        def on_message_begin(self) -> None:
            answers.append(Answer())

        def on_headers_complete(self) -> None:
            answers[-1].status = parser.get_status_code()

        def on_header(self, name: bytes, value: bytes) -> None:
            answers[-1].headers[name.decode().lower()] = value.decode()

        def on_body(self, body: bytes) -> None:
            answers[-1].body += body

        def on_message_complete(self) -> None:
            answers[-1].complete = True

    parser = httptools.HttpResponseParser(Sink())
    parser.feed_data(raw)
    return answers[:n]


@asynccontextmanager
async def _gateway(dialect: str, layer: str, streamed: Upstream | None = None,
                   sink: Any = AiohttpSink) -> AsyncIterator[tuple[int, Any]]:
    """A gateway on ``layer`` with one route of ``dialect`` to an upstream of the same dialect
    that answers whole (a stream is bridged), or ``streamed`` (which then streams)."""
    whole = orjson.dumps(DIALECTS[dialect].samples.responses["text"])

    async def upstream(req: UpstreamRequest) -> MemoryResponse:
        return MemoryResponse(200, {"Content-Type": "application/json"}, whole)

    cfg = parse_config({
        "server": {"http_layer": layer, "admin": False,
                   "cors": {"allow_origins": [ORIGIN]}},
        "upstreams": {"up": {"dialect": dialect, "url": "http://up.invalid/chat",
                             "streaming": "never" if streamed is None else "auto"}},
        "routes": [{"path": "/chat", "dialect": dialect, "upstream": "up"}],
    }, env={})
    app = create_app(cfg, transport=MemoryTransport(streamed or upstream), sink=sink)
    runner, _, _ = await open_listeners(app, cfg, "127.0.0.1", 0)
    try:
        yield runner.addresses[0][1], app
    finally:
        await runner.cleanup()


def _request(dialect: str, *, stream: bool = False, method: str = "POST", version: str = "1.1",
             extra: tuple[str, ...] = (), body: bytes | None = None) -> bytes:
    path, parsed, headers = client_request(dialect, stream)
    data = orjson.dumps(parsed) if body is None else body
    head = [f"{method} {path} HTTP/{version}", "Host: 127.0.0.1",
            "Content-Type: application/json", f"Content-Length: {len(data)}",
            "X-Request-ID: rid-1", f"Origin: {ORIGIN}",
            *(f"{k}: {v}" for k, v in headers.items()), *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


async def _exchange(port: int, raw: bytes, answers: int = 1, *, closes: bool = False,
                    limit: float = 10.0) -> tuple[list[Answer], bool]:
    """Send ``raw``; the answers read, and whether the gateway closed the connection after
    (waited for up to ``limit`` when it should, ``closes``; else a glance of 50 ms)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = b""
    closed = False
    try:
        async with asyncio.timeout(limit):
            while True:
                parsed = _parse(got, answers)
                if len(parsed) == answers and all(a.complete for a in parsed):
                    break
                if got == b"":
                    writer.write(raw)
                chunk = await reader.read(65536)
                if not chunk:
                    closed = True
                    break
                got += chunk
        if not closed:
            try:
                async with asyncio.timeout(limit if closes else 0.05):
                    closed = await reader.read(1) == b""
            except TimeoutError:
                closed = False
    finally:
        writer.close()
    return _parse(got, answers), closed


def _shape(value: Any) -> Any:
    """A JSON value's keys and types, not its values (some answers carry a time or an id)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


def _comparable(a: Answer) -> tuple[int, dict[str, str], Any]:
    headers = {k: v for k, v in a.headers.items() if k != "date"}
    try:
        body = _shape(orjson.loads(a.body))
    except orjson.JSONDecodeError:  # a stream, or a text error
        body = bytes(a.body) if "chunked" not in headers.get("transfer-encoding", "") else None
    return a.status, headers, body


@pytest.mark.parametrize("dialect", names())
@pytest.mark.parametrize("case", ["whole", "stream", "bad body", "GET", "bad method path"])
async def test_both_layers_put_the_same_answer_on_the_wire(dialect: str, case: str) -> None:
    """Status, headers (but ``Date``) and body are the same through either value of
    ``http_layer``, and asked twice."""
    raw = {"whole": _request(dialect), "stream": _request(dialect, stream=True),
           "bad body": _request(dialect, body=b"{not json"),
           "GET": _request(dialect, method="GET"),
           "bad method path": _request(dialect).replace(b"/chat", b"/healthz", 1)}[case]
    seen: dict[str, list[tuple[int, dict[str, str], Any]]] = {}
    for layer in LAYERS:
        async with _gateway(dialect, layer) as (port, _app):
            for _ in range(2):
                answers, closed = await _exchange(port, raw)
                assert answers and answers[0].complete and not closed, (layer, answers)
                assert case != "stream" or answers[0].body, "a stream with frames"
                seen.setdefault(layer, []).append(_comparable(answers[0]))
    answers = [a for layer in LAYERS for a in seen[layer]]
    assert all(a == answers[0] for a in answers), seen
    status, headers, body = answers[0]
    if case in ("whole", "stream"):
        assert status == 200 and headers["x-request-id"] == "rid-1"
        assert headers["access-control-allow-origin"] == ORIGIN
    if case == "whole":
        assert body, "an answer with a body"
    if case == "stream":
        assert headers["transfer-encoding"] == "chunked"
    if case == "bad body":
        assert status == 400 and headers["content-type"].startswith("application/json")
    if case == "GET":
        assert status == 405 and headers.get("allow") == "POST, OPTIONS"


async def test_a_stream_ended_before_its_first_write_is_on_the_wire_as_one_written_at_once(
) -> None:
    """A stream the exchange ends before it wrote any of it (the upstream answered at once)
    is handed to aiohttp whole, to go out in one write: the bytes a client reads are those of
    a stream prepared at once and ended with the same frames, head (but ``Date``) and chunked
    body alike."""
    head = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no"}
    frames = b"data: {\"a\": 1}\n\ndata: [DONE]\n\n"

    async def through_the_sink(request: web.Request) -> web.StreamResponse:
        sink = AiohttpSink(request)
        await sink.start(head)
        await sink.finish(frames)
        response = sink.response()
        assert not response.prepared  # (aiohttp writes it, after the handler)
        return response

    async def prepared_at_once(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=head)
        await response.prepare(request)
        await response.write_eof(frames)
        return response

    app = web.Application()
    app.router.add_post("/sink", through_the_sink)
    app.router.add_post("/plain", prepared_at_once)
    raw: dict[str, bytes] = {}
    async with TestServer(app, host="127.0.0.1") as server:
        for path in ("/sink", "/plain"):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            try:
                writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                             .encode())
                async with asyncio.timeout(5):
                    got = await reader.readuntil(b"\r\n0\r\n\r\n")
            finally:
                writer.close()
            raw[path] = re.sub(rb"\r\nDate: [^\r]*", b"", got)
    assert raw["/sink"] == raw["/plain"], raw
    (a,) = _parse(raw["/sink"])
    assert a.complete and a.body == frames and a.headers["transfer-encoding"] == "chunked"


@pytest.mark.parametrize("layer", LAYERS)
async def test_http_1_0_and_connection_close_are_kept(layer: str) -> None:
    dialect = names()[0]
    async with _gateway(dialect, layer) as (port, _):
        for _ in range(2):  # the connection's second request as its first
            # HTTP/1.0: closed after a whole answer unless the client asks to keep it
            (a,), closed = await _exchange(port, _request(dialect, version="1.0"), closes=True)
            assert a.status == 200 and "content-length" in a.headers and closed
            assert "connection" not in a.headers
            (a,), closed = await _exchange(
                port, _request(dialect, version="1.0", extra=("Connection: keep-alive",)))
            assert a.headers["connection"].lower() == "keep-alive" and not closed
            # an HTTP/1.0 stream cannot be chunked: its end is the connection's close
            (a,), closed = await _exchange(port, _request(dialect, stream=True, version="1.0"),
                                           closes=True)
            assert a.status == 200 and "transfer-encoding" not in a.headers and closed
            assert a.body
            # HTTP/1.1 asking to close
            (a,), closed = await _exchange(port, _request(dialect, extra=("Connection: close",)),
                                           closes=True)
            assert a.headers["connection"].lower() == "close" and closed


@pytest.mark.parametrize("layer", LAYERS)
async def test_pipelined_requests_are_answered_in_order(layer: str) -> None:
    dialect = names()[0]
    async with _gateway(dialect, layer) as (port, _):
        raw = b"".join(_request(dialect, stream=i == 1).replace(b"rid-1", b"rid-%d" % i)
                       for i in range(4))
        answers, closed = await _exchange(port, raw, answers=4)
        assert [a.headers["x-request-id"] for a in answers] == [f"rid-{i}" for i in range(4)]
        assert all(a.complete and a.status == 200 for a in answers) and not closed
        assert answers[1].headers["transfer-encoding"] == "chunked"


@pytest.mark.parametrize("layer", LAYERS)
async def test_expect_100_continue_is_answered_before_the_body(layer: str) -> None:
    """curl sends ``Expect: 100-continue`` with a body over 1 KiB and waits for the interim
    answer before it sends the body."""
    dialect = names()[0]
    async with _gateway(dialect, layer) as (port, _):
        for _ in range(2):
            raw = _request(dialect, extra=("Expect: 100-continue",))
            head, body = raw.split(b"\r\n\r\n", 1)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(head + b"\r\n\r\n")
                async with asyncio.timeout(5):
                    interim = await reader.readuntil(b"\r\n\r\n")
                    assert interim.startswith(b"HTTP/1.1 100 Continue"), interim
                    writer.write(body)
                    final = await reader.readuntil(b"\r\n\r\n")
                assert final.startswith(b"HTTP/1.1 200"), final
            finally:
                writer.close()


class _SpySink:
    """A sink as the exchange made it, its stream's writes and ends seen (``on_write`` may
    raise: a gateway bug planted where the answer is written)."""

    def __init__(self, inner: Any, on_write: Callable[[bytes], None],
                 on_finish: Callable[[bytes], None]) -> None:
        self._inner = inner
        self._on_write = on_write
        self._on_finish = on_finish

    async def whole(self, status: int, headers: dict[str, str], body: bytes) -> None:
        await self._inner.whole(status, headers, body)

    async def start(self, headers: dict[str, str]) -> None:
        await self._inner.start(headers)

    async def write(self, data: bytes) -> None:
        self._on_write(data)
        await self._inner.write(data)

    async def finish(self, last: bytes = b"") -> None:
        self._on_finish(last)
        await self._inner.finish(last)

    def cut(self) -> Any:
        return self._inner.cut()

    def response(self) -> Any:
        return self._inner.response()


def _spy_sinks(on_write: Callable[[bytes], None], on_finish: Callable[[bytes], None]) -> Any:
    """A sink factory for :func:`gateway.app.create_app`: every exchange's sink watched by a
    :class:`_SpySink`."""

    def sink(request: web.BaseRequest) -> Any:
        return _SpySink(AiohttpSink(request), on_write, on_finish)

    return sink


@pytest.mark.parametrize("layer", LAYERS)
async def test_a_gateway_bug_after_the_stream_began_cuts_it(layer: str) -> None:
    """Never passed off as a clean finish: no last chunk, the connection closed."""
    calls = 0

    def failing(data: bytes) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("a bug in the gateway")

    sink = _spy_sinks(failing, lambda last: None)
    dialect = names()[0]
    async with _gateway(dialect, layer, sink=sink) as (port, _):
        (a,), closed = await _exchange(port, _request(dialect, stream=True), closes=True)
    assert a.status == 200 and a.body and not a.complete and closed, (a, closed)


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("dialect", names())
async def test_a_stream_that_arrives_with_its_end_goes_out_in_one_write(
        dialect: str, layer: str) -> None:
    """When the upstream's last read also brought the body's end, its frames go out with the
    stream's end, in one write; with the last frame in a read of its own, the first read's
    frames go out at once. The client reads the same answer either way."""
    writes: list[bytes] = []
    finishes: list[bytes] = []
    sink = _spy_sinks(writes.append, finishes.append)
    sample = DIALECTS[dialect].samples.streams["text"]
    last = _last_frame_start(dialect, sample)
    texts = []
    for pieces in ([sample], [sample[:last], sample[last:]]):
        writes.clear()
        finishes.clear()

        async def upstream(req: UpstreamRequest, body: list[bytes] = pieces) -> MemoryResponse:
            return MemoryResponse(200, {"Content-Type": _stream_type(dialect)}, body)

        async with _gateway(dialect, layer, upstream, sink) as (port, _):
            (a,), closed = await _exchange(port, _request(dialect, stream=True))
        assert a.status == 200 and a.complete and not closed, a
        texts.append(reader_for(dialect).read_stream(bytes(a.body)).text)
        if len(pieces) == 1:
            assert writes == [] and len(finishes) == 1 and finishes[0], (writes, finishes)
        else:
            assert writes and all(writes), "the first read's frames went out at once"
    assert texts[0] == texts[1] == sample_text(dialect, stream=True)


def _last_frame_start(dialect: str, stream: bytes) -> int:
    """Where the stream's last frame begins (after a blank line for SSE, a line end else)."""
    body = stream.rstrip(b"\r\n")
    if DIALECTS[dialect].framing != "sse":
        return body.rindex(b"\n") + 1
    return max(i + len(sep) for sep in (b"\n\n", b"\r\n\r\n") if (i := body.rfind(sep)) >= 0)


def _stream_type(dialect: str) -> str:
    return ("text/event-stream" if DIALECTS[dialect].framing == "sse"
            else "application/x-ndjson")
