"""The chat routes' short lane (gateway/lane.py): which requests it takes, and that everything
else on the same connection is still aiohttp's, answered in order, with the edge's limits. Each
test counts the requests the lane started, so that a request aiohttp answered instead (the
answers are the same) fails it."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
from faults.harness import client_request, route_already_seen
from test_edge import HEADER_TIMEOUT, MARGIN, Running, _closed_within, _until, running
from test_sink import _gateway, _parse

import gateway.lane as lane_module
from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import DIALECTS, names
from gateway.keys import METRICS
from gateway.server import open_listeners
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

DIALECT = names()[0]
KEY = "sk-lane-test"


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths of the requests the lane started, in order."""
    seen: list[str] = []
    start = lane_module.Lane._start

    def counting(self: lane_module.Lane) -> None:
        assert self.request is not None
        seen.append(self.request.path)
        start(self)

    monkeypatch.setattr(lane_module.Lane, "_start", counting)
    yield seen


@asynccontextmanager
async def gateway(*, pause: float = 0.0, api_key: bool = False, max_body: int = 1 << 20,
                  grace: float = 5.0) -> AsyncIterator[tuple[int, Any, Any]]:
    """A fast-layer gateway whose route's paths the router has already seen (so that the lane
    takes them); its upstream answers the dialect's sample stream, ``pause`` s per line."""
    d = DIALECTS[DIALECT]
    raw = d.samples.streams["text"]

    async def upstream(req: UpstreamRequest) -> MemoryResponse:
        async def paced() -> AsyncIterator[bytes]:
            for line in raw.splitlines(keepends=True):
                await asyncio.sleep(pause)
                yield line
        return MemoryResponse(200, {"Content-Type": d.stream_content_type}, paced())

    cfg = parse_config({
        "server": {"http_layer": "fast", "admin": False, "max_body_bytes": max_body,
                   "shutdown_grace": grace, "header_timeout": HEADER_TIMEOUT},
        "auth": {"api_keys": [KEY] if api_key else []},
        "upstreams": {"up": {"dialect": DIALECT, "url": "http://up.invalid/chat",
                             "streaming": "always"}},
        "routes": [{"path": "/chat", "dialect": DIALECT, "upstream": "up"}],
    }, env={})
    app = create_app(cfg, transport=MemoryTransport(upstream))
    runner, _, _ = await open_listeners(app, cfg, "127.0.0.1", 0)
    route_already_seen(app, DIALECT)
    try:
        yield runner.addresses[0][1], app, runner
    finally:
        await runner.cleanup()


def ask(stream: bool = False, *, rid: str = "rid", extra: tuple[str, ...] = (),
        body: bytes | None = None, path: str | None = None, chunked: bool = False) -> bytes:
    route_path, parsed, headers = client_request(DIALECT, stream)
    data = orjson.dumps(parsed) if body is None else body
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(data)}"
    head = [f"POST {path or route_path} HTTP/1.1", "Host: 127.0.0.1",
            "Content-Type: application/json", framing, f"X-Request-ID: {rid}",
            f"Authorization: Bearer {KEY}",
            *(f"{k}: {v}" for k, v in headers.items()), *extra]
    if chunked:
        data = b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data)
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


GET_HEALTH = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-ID: rid-get\r\n\r\n"


class Conn:
    """One client connection: send, then read until ``n`` whole answers came."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.got = b""
        self.seen = 0

    async def answers(self, n: int, limit: float = 10.0) -> list[Any]:
        async with asyncio.timeout(limit):
            while True:
                parsed = _parse(self.got, self.seen + n)
                if len(parsed) == self.seen + n and all(a.complete for a in parsed):
                    self.seen += n
                    return parsed[-n:]
                chunk = await self.reader.read(65536)
                assert chunk, f"closed after {parsed}"
                self.got += chunk

    async def send(self, data: bytes, n: int = 1) -> list[Any]:
        self.writer.write(data)
        return await self.answers(n)


@asynccontextmanager
async def connect(port: int) -> AsyncIterator[Conn]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield Conn(reader, writer)
    finally:
        writer.close()


def rids(answers: list[Any]) -> list[str]:
    return [a.headers.get("x-request-id", "") for a in answers]


async def test_the_lane_takes_known_chat_posts_whole_and_streamed(started: list[str]) -> None:
    async with gateway() as (port, _, _), connect(port) as c:
        for i in range(3):
            (a,) = await c.send(ask(stream=i == 1, rid=f"r{i}"))
            assert a.status == 200 and a.headers["x-request-id"] == f"r{i}" and a.body
        assert (await c.send(ask(stream=True)))[0].headers["transfer-encoding"] == "chunked"
    assert len(started) == 4


OTHERS = {
    "GET of the gateway's own": (GET_HEALTH, 200),
    "a chunked body": (ask(rid="rid-other", chunked=True), 200),
    "a path not yet routed": (ask(rid="rid-other", path="/elsewhere"), 404),
    "a percent-encoded path": (ask(rid="rid-other", path="/ch%61t"), 200),
    "a body over max_body_bytes": (ask(rid="rid-other", body=b"{" + b" " * 5000 + b"}"), 413),
    "OPTIONS": (b"OPTIONS /chat HTTP/1.1\r\nHost: x\r\nX-Request-ID: rid-other\r\n\r\n", 405),
}


@pytest.mark.parametrize("case", list(OTHERS))
async def test_what_the_lane_does_not_take_is_aiohttps_and_the_lane_takes_the_next(
        case: str, started: list[str]) -> None:
    """A lane request, then one the lane leaves to aiohttp, then a lane request again, on one
    connection, one after the other."""
    raw, status = OTHERS[case]
    async with gateway(max_body=4096) as (port, _, _), connect(port) as c:
        (a,) = await c.send(ask(rid="r0"))
        assert a.status == 200 and len(started) == 1
        (b,) = await c.send(raw)
        assert b.status == status, (case, b.status, bytes(b.body[:200]))
        assert len(started) == 1, "not the lane's"
        (c2,) = await c.send(ask(rid="r2"))
        assert c2.status == 200 and c2.headers["x-request-id"] == "r2"
        assert len(started) == 2, "the lane took the connection back"


async def test_pipelined_requests_in_one_packet_are_answered_in_order(started: list[str]) -> None:
    """Lane requests back to back (each one's end is known), then one of aiohttp's, then more:
    every answer in order, the connection kept."""
    async with gateway() as (port, _, _), connect(port) as c:
        packet = ask(rid="p0") + ask(stream=True, rid="p1") + ask(rid="p2") + GET_HEALTH + \
            ask(rid="p4") + ask(rid="p5")
        answers = await c.send(packet, 6)
        assert rids(answers) == ["p0", "p1", "p2", "", "p4", "p5"]
        assert all(a.status == 200 for a in answers) and b'"ok"' in answers[3].body
        assert len(started) == 3, started  # aiohttp's from the GET on, in the same packet
        (a,) = await c.send(ask(rid="after"))
        assert a.status == 200 and len(started) == 4


async def test_a_request_that_comes_in_pieces_is_answered(started: list[str]) -> None:
    raw = ask(rid="bits")
    async with gateway() as (port, _, _), connect(port) as c:
        for i in range(len(raw)):  # a byte at a time, head and body
            c.writer.write(raw[i:i + 1])
            if i % 16 == 0:
                await c.writer.drain()
                await asyncio.sleep(0)
        (a,) = await c.answers(1)
        assert a.status == 200 and a.headers["x-request-id"] == "bits"
    assert len(started) == 1


async def test_a_request_the_parser_refuses_after_a_lane_answer_is_aiohttps_400(
        started: list[str]) -> None:
    async with gateway() as (port, _, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(ask(rid="ok") + b"garbage garbage\r\n\r\n")
        closed, got = await _closed_within(reader, MARGIN)
        writer.close()
        answers = _parse(got, 2)
        assert [a.status for a in answers] == [200, 400] and closed, got[:400]
        assert len(started) == 1


async def test_a_head_that_grows_past_the_lanes_limit_is_aiohttps_to_judge(
        started: list[str]) -> None:
    """The lane keeps a head's bytes until it is complete: not without bound. A head with a 64
    KiB header, sent in pieces, is handed to aiohttp, which answers it as it answers it on the
    ``aiohttp`` layer."""
    raw = ask(extra=("X-Big: " + "a" * 65536,))

    async def status_of(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for i in range(0, len(raw), 4096):
                writer.write(raw[i:i + 4096])
                await writer.drain()
            async with asyncio.timeout(MARGIN):
                return (await reader.readuntil(b"\r\n")).split(b" ")[1]
        finally:
            writer.close()

    async with gateway() as (port, _, _):
        lane_status = await status_of(port)
    async with _gateway(DIALECT, "aiohttp") as (port, _):
        assert lane_status == await status_of(port)
    assert not started


async def test_an_answer_before_the_body_ends_then_the_body_is_read_and_skipped(
        started: list[str]) -> None:
    """Without the API key the answer (401) comes before the rest of the body; the body is
    still read to its end, and the next request on the connection is answered."""
    async with gateway(api_key=True) as (port, _, _), connect(port) as c:
        raw = ask(rid="nokey").replace(f"Authorization: Bearer {KEY}\r\n".encode(), b"")
        head, body = raw.split(b"\r\n\r\n", 1)
        (a,) = await c.send(head + b"\r\n\r\n" + body[:5])
        assert a.status == 401
        c.writer.write(body[5:])
        (b,) = await c.send(ask(rid="key"))
        assert b.status == 200 and b.headers["x-request-id"] == "key"
    assert len(started) == 2


async def test_a_keep_alive_lane_connection_gets_header_timeout_from_the_last_answer(
        started: list[str]) -> None:
    async with gateway() as (port, _, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(HEADER_TIMEOUT * 0.6)
        writer.write(ask())
        async with asyncio.timeout(MARGIN):
            await reader.readuntil(b"\r\n\r\n")
        answered = time.monotonic()
        closed, _ = await _closed_within(reader, HEADER_TIMEOUT + MARGIN)
        idle = time.monotonic() - answered
        writer.close()
        assert closed and HEADER_TIMEOUT * 0.9 <= idle <= HEADER_TIMEOUT + MARGIN, idle
    assert len(started) == 1


async def test_a_shutdown_lets_the_lane_answer_in_progress_finish(started: list[str]) -> None:
    async with gateway(pause=0.05) as (port, app, runner):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(ask(stream=True, rid="drain"))
        async with asyncio.timeout(MARGIN):
            await reader.readuntil(b"\r\n\r\n")  # the stream began
        assert len(started) == 1
        cleanup = asyncio.ensure_future(runner.cleanup())
        closed, got = await _closed_within(reader, 10.0)
        await cleanup
        writer.close()
        assert closed and got.endswith(b"0\r\n\r\n"), got[-200:]
        assert app[METRICS].registry.get_sample_value("gateway_requests_total", {
            "route": "/chat", "client_dialect": DIALECT, "upstream": "up",
            "upstream_dialect": DIALECT, "status": "200"}) == 1


async def test_a_client_gone_mid_stream_cancels_the_lane_exchange(started: list[str]) -> None:
    async with running(DIALECT, pause=0.2, lane=True) as gw:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        writer.write(ask(stream=True))
        async with asyncio.timeout(MARGIN):
            await reader.readuntil(b"\r\n\r\n")
        writer.transport.abort()
        registry = gw.app[METRICS].registry

        def gone() -> float:
            return registry.get_sample_value("gateway_requests_total", {
                "route": "/chat", "client_dialect": DIALECT, "upstream": "up",
                "upstream_dialect": DIALECT, "status": "499"}) or 0.0

        assert await _until(lambda: gone() == 1, 5.0)
        assert not [t for t in asyncio.all_tasks() if "serve" in repr(t.get_coro())]
    assert len(started) == 1


KINDS = {
    "lane": (lambda i: ask(rid=f"f{i}"), 200),
    "lane stream": (lambda i: ask(stream=True, rid=f"f{i}"), 200),
    "chunked": (lambda i: ask(rid=f"f{i}", chunked=True), 200),
    "unknown path": (lambda i: ask(rid=f"f{i}", path="/nowhere"), 404),
    "GET": (lambda i: GET_HEALTH.replace(b"rid-get", b"f%d" % i), 200),
    "lane HTTP/1.0 keep-alive": (lambda i: ask(rid=f"f{i}").replace(
        b"HTTP/1.1", b"HTTP/1.0", 1).replace(b"Host:", b"Connection: keep-alive\r\nHost:", 1),
        200),
}


@pytest.mark.parametrize("seed", range(12))
async def test_any_mix_of_requests_in_any_packets_is_answered_in_order(
        seed: int, started: list[str]) -> None:
    """Random requests of every kind, pipelined or one by one, cut into random packets: every
    answer comes, in order, with its status; the connection stays open."""
    import random

    rng = random.Random(seed)
    kinds = [rng.choice(list(KINDS)) for _ in range(rng.randint(3, 9))]
    raw = [KINDS[k][0](i) for i, k in enumerate(kinds)]
    async with gateway() as (port, _, _), connect(port) as c:
        if rng.random() < 0.5:  # pipelined: everything at once, cut anywhere
            data = b"".join(raw)
            cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 12))))
            for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
                c.writer.write(data[a:b])
                await c.writer.drain()
                await asyncio.sleep(rng.choice((0, 0, 0.002)))
            answers = await c.answers(len(raw))
        else:  # one by one, each cut in two
            answers = []
            for r in raw:
                cut = rng.randint(1, len(r) - 1)
                c.writer.write(r[:cut])
                await c.writer.drain()
                await asyncio.sleep(0)
                answers += await c.send(r[cut:])
        assert [a.status for a in answers] == [KINDS[k][1] for k in kinds], (kinds, answers)
        got = [r for r, k in zip(rids(answers), kinds, strict=True) if k != "GET"]
        assert got == [f"f{i}" for i, k in enumerate(kinds) if k != "GET"]
    lane = [k.startswith("lane") for k in kinds]
    first_others = lane.index(False) if False in lane else len(lane)
    # the lane's requests ahead of any other are the lane's; after one, maybe (aiohttp may
    # still be finishing its answer when the next bytes come)
    assert first_others <= len(started) <= sum(lane), (kinds, started)


async def _closed_connection_garbage(r: Running, talk: Any) -> list[str]:
    """The server's objects of one client connection (its protocol, lane and parsers) that its
    close left in reference cycles: what only a full collection would free. They are told by
    their ids, taken while the connection is open (no reference is kept, which would keep them
    alive): other tests' leftovers can become garbage in the same window. The collector is off
    meanwhile, so that none is freed before it is counted."""
    gc.collect()
    gc.disable()
    try:
        async with connect(r.port) as c:
            await talk(c)
            ids = {id(o): f"{type(o).__module__}.{type(o).__qualname__}"
                   for o in _connection_objects(r.server)}
        assert ids, "the connection's protocol was not found"
        assert await _until(lambda: r.edge.open == 0, 5)
        await asyncio.sleep(0.05)  # the cancelled answer's task ends
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
    finally:
        gc.set_debug(0)
        gc.enable()
    left = sorted(ids[id(o)] for o in gc.garbage if id(o) in ids)
    gc.garbage.clear()
    return left


def _connection_objects(server: Any) -> list[object]:
    """The open connections' protocols and what hangs off them: lane, parsers, shadow."""
    out: list[object] = []
    for proto in server.connections:
        out.append(proto)
        lane = getattr(proto, "_lane", None)
        if lane is not None:
            out.append(lane)
            out.extend(o for o in (lane._parser, lane._shadow) if o is not None)
            if lane._shadow is not None:
                out.extend((lane._shadow.parser, lane._shadow.message))
        if getattr(proto, "_request_parser", None) is not None:
            out.append(proto._request_parser)
    return out


async def _lane_and_aiohttp(c: Conn) -> None:
    for raw in (ask(rid="r0"), ask(stream=True, rid="r1"), GET_HEALTH, ask(rid="r2")):
        (a,) = await c.send(raw)
        assert a.status == 200


async def _aiohttp_last(c: Conn) -> None:
    """Closed while aiohttp has the connection (the lane's shadow parser following)."""
    await _lane_and_aiohttp(c)
    (a,) = await c.send(GET_HEALTH)
    assert a.status == 200


async def _mid_stream(c: Conn) -> None:
    c.writer.write(ask(stream=True, rid="cut"))
    assert await c.reader.read(100)


@pytest.mark.parametrize("layer", ["fast", "aiohttp"])
@pytest.mark.parametrize("talk", [_lane_and_aiohttp, _aiohttp_last, _mid_stream],
                         ids=["lane-and-aiohttp", "aiohttp-last", "closed-mid-stream"])
async def test_a_closed_connection_leaves_no_reference_cycle(talk: Any, layer: str) -> None:
    """Under load, objects in a cycle outlive a young collection, are promoted, and wait for a
    full one, which the gateway's collector thresholds make rare: each closed connection's
    parser, lane and protocol would add to the RSS until then (docs/performance.md, "Closed
    connections freed at once"). With ``server.http_layer: aiohttp`` there is no lane."""
    async with running(DIALECT, pause=0.02, lane=True, http_layer=layer) as r:
        assert await _closed_connection_garbage(r, talk) == []


@pytest.mark.parametrize("layer", ["fast", "aiohttp"])
async def test_a_finished_answer_leaves_no_gateway_object_in_a_reference_cycle(
        layer: str) -> None:
    """An answer, whole or streamed, is freed by reference counting as soon as it is done:
    nothing of the gateway's waits in a cycle for a full collection, which the gateway's
    collector thresholds make rare. (A stream's upstream call and its chunks once referred to
    each other: 2 KiB a stream, 50 MiB over a minute and a half of the soak.)"""
    async with (running(DIALECT, pause=0.02, lane=True, http_layer=layer) as r,
                connect(r.port) as c):
        for raw in (ask(rid="w0"), ask(stream=True, rid="w1")):  # built once, built now
            (a,) = await c.send(raw)
            assert a.status == 200
        gc.collect()
        gc.disable()
        try:
            for i in range(3):
                for raw in (ask(rid=f"r{i}"), ask(stream=True, rid=f"s{i}")):
                    (a,) = await c.send(raw)
                    assert a.status == 200
            await asyncio.sleep(0.05)  # each answer's task ends
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
        finally:
            gc.set_debug(0)
            gc.enable()
    left = sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage
                   if type(o).__module__.startswith("gateway.")})
    gc.garbage.clear()
    assert left == []
