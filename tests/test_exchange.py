"""The exchange driven through the in-memory transport: no upstream sockets.

What it proves, for every registered dialect as client and as upstream where it matters:
every request is recorded exactly once, with the status the client saw; the attempts end in one
typed result each (failover on a 5xx or a refused connection, no retry after a 4xx, Retry-After
honoured within its bound); the answer modes (whole, stream, bridged) and what the transport
holds afterwards (nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from fakes import reader_for, sample_text, split_frames

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import DIALECTS, Dialect, client_path, routes_by_prefix
from gateway.errors import UpstreamError
from gateway.exchange.outcome import Outcome
from gateway.exchange.sink import AiohttpSink
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

DIALECT_LIST = list(DIALECTS.values())
IDS = [d.name for d in DIALECT_LIST]


def sample_body(d: Dialect) -> dict[str, Any]:
    body = d.samples.requests.get("text")
    assert body is not None, f"{d.name} ships no text request sample"
    return dict(body)


def stream_request(d: Dialect, path: str, stream: bool) -> tuple[str, dict[str, Any],
                                                                    dict[str, str]]:
    """How a client of ``d`` asks for a stream (or not), from the dialect's declarations."""
    body = sample_body(d)
    headers: dict[str, str] = {}
    if d.stream_path or routes_by_prefix(d):  # the path alone asks
        return client_path(d, path, "m", stream=stream), body, headers
    body["stream"] = stream
    if stream and d.stream_by_accept:
        headers["Accept"] = "text/event-stream"
    return path, body, headers


def answer_from(d: Dialect, *, stream: bool) -> MemoryResponse:
    """The upstream's own sample answer, byte for byte."""
    if stream:
        return MemoryResponse(200, {"Content-Type": d.stream_content_type},
                              d.samples.streams["text"])
    import orjson

    return MemoryResponse(200, {"Content-Type": "application/json"},
                          orjson.dumps(d.samples.responses["text"]))


def config(client: Dialect, upstreams: dict[str, Dialect], **route: Any) -> dict[str, Any]:
    return {
        "upstreams": {name: {"dialect": d.name, "url": f"http://{name}.test/chat",
                             "timeout": 5, "connect_timeout": 1, "model": "m"}
                      for name, d in upstreams.items()},
        "routes": [{"path": "/c", "dialect": client.name, "upstream": list(upstreams),
                    **route}],
        "health": {"failure_threshold": 1000},
    }


class Recorder:
    """The app's ``on_outcome``: every outcome the app recorded, in order."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def __call__(self, o: Outcome) -> None:
        self.outcomes.append(o)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


async def start(aiohttp_client: Any, recorder: Recorder, cfg: dict[str, Any],
                handler: Callable[[UpstreamRequest], Any]) -> tuple[TestClient[Any, Any],
                                                                    MemoryTransport]:
    transport = MemoryTransport(handler)
    app = create_app(parse_config(cfg, env={}), transport=transport, on_outcome=recorder)
    client: TestClient[Any, Any] = await aiohttp_client(
        app, server_kwargs={"handler_cancellation": True})
    return client, transport


def by_host(answers: dict[str, Callable[[], MemoryResponse]]) -> Callable[[UpstreamRequest],
                                                                          Any]:
    async def handler(req: UpstreamRequest) -> MemoryResponse:
        host = req.url.split("/")[2].split(".")[0]
        return answers[host]()
    return handler


async def until(ready: Callable[[], bool], limit: float = 10.0) -> None:
    """Poll ``ready`` (a busy machine may take a while); the asserts after it tell if it never
    held."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while True:
        if ready() or loop.time() > end:
            return
        await asyncio.sleep(0.01)


# --- answer modes ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("up", DIALECT_LIST, ids=IDS)
@pytest.mark.parametrize("cl", DIALECT_LIST, ids=IDS)
async def test_every_mode_is_recorded_once_with_the_status_sent(
        aiohttp_client: Any, recorder: Recorder, cl: Dialect, up: Dialect,
        stream: bool) -> None:
    """Whole and streamed clients, in front of an upstream asked the same way (its sample), or
    for its stream when it only streams."""
    up_stream = stream or getattr(up, "streams_only", False)
    client, transport = await start(
        aiohttp_client, recorder, config(cl, {"a": up}, on_unsupported="drop"),
        by_host({"a": lambda: answer_from(up, stream=up_stream)}))
    path, body, headers = stream_request(cl, "/c", stream)
    async with client.post(path, json=body, headers=headers) as resp:
        data = await resp.read()
        assert resp.status == 200, data
    assert len(recorder.outcomes) == 1
    o = recorder.outcomes[0]
    assert (o.status, o.stream, o.upstream, o.client_dialect) == (200, stream, "a", cl.name)
    assert [a.outcome for a in o.attempts] == ["ok"]
    assert o.ttft is not None and o.ttft <= o.duration
    if stream:
        assert o.chunks > 0 and resp.headers["Content-Type"].startswith(cl.stream_content_type)
    assert transport.in_use() == 0


async def _pieces(chunks: list[bytes]) -> AsyncIterator[bytes]:
    """An upstream body whose end shows only once its last chunk was read."""
    for c in chunks:
        await asyncio.sleep(0)
        yield c


@pytest.mark.parametrize("batch", [True, False])
async def test_complete_answers_and_their_requests_leave_in_batches_streams_at_once(
        aiohttp_client: Any, recorder: Recorder, batch: bool) -> None:
    """``server.batch_writes``: an answer complete before any of it went out (a whole answer,
    or a stream whose upstream answered at once) is handed to aiohttp (which prepares and
    writes it) on the loop's next turn, and a whole answer's upstream request is marked to wait
    for it too; a stream's request, and a stream whose first frames come before its end, are
    written at once. Off: everything at once."""
    d = next(d for d in DIALECT_LIST if not getattr(d, "streams_only", False))
    seen: list[str] = []

    def made() -> None:  # the answer is made: mark this turn
        asyncio.get_running_loop().call_soon(seen.append, "next turn")

    class Watched:  # (wraps the sink: compiled, AiohttpSink takes no subclass)
        def __init__(self, request: web.BaseRequest) -> None:
            self.inner = AiohttpSink(request)

        async def whole(self, status: int, headers: dict[str, str], body: bytes) -> None:
            await self.inner.whole(status, headers, body)
            made()

        async def start(self, headers: dict[str, str]) -> None:
            await self.inner.start(headers)

        async def write(self, data: bytes) -> None:
            await self.inner.write(data)

        async def finish(self, last: bytes = b"") -> None:
            await self.inner.finish(last)
            made()

        def cut(self) -> web.StreamResponse:
            return self.inner.cut()

        def response(self) -> web.StreamResponse:
            return self.inner.response()

    async def prepared(request: web.BaseRequest, response: web.StreamResponse) -> None:
        seen.append("written")

    cfg = config(d, {"a": d})
    cfg["server"] = {"batch_writes": batch}
    frames = [f.data for f in split_frames(d, d.samples.streams["text"])]
    assert len(frames) > 1
    streamed = MemoryResponse(200, {"Content-Type": d.stream_content_type},
                              _pieces([b"".join(frames[:-1]), frames[-1]]))
    answers = iter([answer_from(d, stream=False), answer_from(d, stream=True), streamed])

    async def upstream(r: UpstreamRequest) -> MemoryResponse:
        return next(answers)

    transport = MemoryTransport(upstream)
    app = create_app(parse_config(cfg, env={}), transport=transport, on_outcome=recorder,
                     sink=Watched)
    app.on_response_prepare.append(prepared)
    client: TestClient[Any, Any] = await aiohttp_client(app)
    texts = []
    for stream, at_once in ((False, True), (True, True), (True, False)):
        path, body, headers = stream_request(d, "/c", stream)
        async with client.post(path, json=body, headers=headers) as resp:
            assert resp.status == 200, await resp.read()
            raw = await resp.read()
        if stream:
            assert resp.headers["Transfer-Encoding"] == "chunked"
            texts.append(reader_for(d).read_stream(raw).text)
        assert transport.requests[-1].batched == (batch and not stream)
        assert seen == (["next turn", "written"] if batch and at_once
                        else ["written", "next turn"]), (stream, at_once)
        seen.clear()
    assert texts[0] == texts[1] == sample_text(d.name, stream=True)
    assert [o.stream for o in recorder.outcomes] == [False, True, True]
    assert [o.status for o in recorder.outcomes] == [200, 200, 200]


@pytest.mark.parametrize("up", DIALECT_LIST, ids=IDS)
async def test_bridged_stream_from_a_whole_only_upstream(
        aiohttp_client: Any, recorder: Recorder, up: Dialect) -> None:
    cl = DIALECT_LIST[0]
    cfg = config(cl, {"a": up}, on_unsupported="drop")
    cfg["upstreams"]["a"]["streaming"] = "never"
    client, transport = await start(aiohttp_client, recorder, cfg,
                                    by_host({"a": lambda: answer_from(up, stream=False)}))
    path, body, headers = stream_request(cl, "/c", True)
    async with client.post(path, json=body, headers=headers) as resp:
        assert resp.status == 200
        await resp.read()
    (o,) = recorder.outcomes
    assert o.stream and o.chunks >= 2 and o.status == 200
    assert transport.in_use() == 0


# --- attempts --------------------------------------------------------------------------------


def error_answer(d: Dialect, status: int, retry_after: str | None = None) -> MemoryResponse:
    import orjson

    headers = {"Content-Type": "application/json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return MemoryResponse(status, headers, orjson.dumps(d.samples.error))


async def refused(_: UpstreamRequest) -> MemoryResponse:
    raise UpstreamError("connect", "the upstream refused the connection")


@pytest.mark.parametrize("d", DIALECT_LIST, ids=IDS)
async def test_failover_after_a_5xx_and_a_refused_connection(
        aiohttp_client: Any, recorder: Recorder, d: Dialect) -> None:
    calls: list[str] = []

    async def handler(req: UpstreamRequest) -> MemoryResponse:
        host = req.url.split("/")[2].split(".")[0]
        calls.append(host)
        if host == "a":
            return error_answer(d, 503)
        if host == "b":
            return await refused(req)
        return answer_from(d, stream=False)

    client, transport = await start(
        aiohttp_client, recorder, config(d, {"a": d, "b": d, "c": d}, strategy="failover"),
        handler)
    path, body, headers = stream_request(d, "/c", False)
    async with client.post(path, json=body, headers=headers) as resp:
        assert resp.status == 200
    assert calls == ["a", "b", "c"]
    (o,) = recorder.outcomes
    assert [(a.upstream, a.outcome) for a in o.attempts] == [
        ("a", "status"), ("b", "connect"), ("c", "ok")]
    assert o.upstream == "c" and o.status == 200
    assert transport.in_use() == 0


@pytest.mark.parametrize("d", DIALECT_LIST, ids=IDS)
async def test_a_4xx_is_final_and_answered_in_the_clients_dialect(
        aiohttp_client: Any, recorder: Recorder, d: Dialect) -> None:
    calls: list[str] = []

    async def handler(req: UpstreamRequest) -> MemoryResponse:
        calls.append(req.url)
        return error_answer(d, 400)

    client, _ = await start(aiohttp_client, recorder, config(d, {"a": d, "b": d}), handler)
    path, body, headers = stream_request(d, "/c", False)
    async with client.post(path, json=body, headers=headers) as resp:
        assert resp.status == 400
        assert d.parse_error(await resp.json()) is not None
    assert len(calls) == 1
    (o,) = recorder.outcomes
    assert o.status == 400 and [a.outcome for a in o.attempts] == ["status"]


async def test_retry_after_is_honoured_within_its_bound(
        aiohttp_client: Any, recorder: Recorder) -> None:
    d = DIALECT_LIST[0]
    seen: list[float] = []

    async def handler(req: UpstreamRequest) -> MemoryResponse:
        seen.append(asyncio.get_running_loop().time())
        if len(seen) == 1:
            return error_answer(d, 429, retry_after="30")
        return answer_from(d, stream=False)

    cfg = config(d, {"a": d}, retries={"attempts": 2, "retry_after_max": 0.2})
    client, _ = await start(aiohttp_client, recorder, cfg, handler)
    path, body, headers = stream_request(d, "/c", False)
    async with client.post(path, json=body, headers=headers) as resp:
        assert resp.status == 200
    assert 0.2 <= seen[1] - seen[0] < 5  # waited the bound, not the 30 s asked
    (o,) = recorder.outcomes
    assert [a.outcome for a in o.attempts] == ["status", "ok"]


async def test_all_upstreams_failing_is_one_502_recorded_once(
        aiohttp_client: Any, recorder: Recorder) -> None:
    d = DIALECT_LIST[0]
    client, transport = await start(aiohttp_client, recorder, config(d, {"a": d, "b": d}), refused)
    path, body, headers = stream_request(d, "/c", False)
    async with client.post(path, json=body, headers=headers) as resp:
        assert resp.status == 502
        assert d.parse_error(await resp.json()) is not None
    (o,) = recorder.outcomes
    assert o.status == 502 and [a.outcome for a in o.attempts] == ["connect", "connect"]
    assert transport.in_use() == 0


# --- refusals, timeouts, breaks, disconnects -------------------------------------------------


@pytest.mark.parametrize(("method", "body", "status"), [
    ("GET", None, 405), ("POST", b"{not json", 400), ("POST", b"x" * 2048, 413)])
async def test_refusals_are_recorded_once_and_never_reach_an_upstream(
        aiohttp_client: Any, recorder: Recorder, method: str, body: bytes | None,
        status: int) -> None:
    d = DIALECT_LIST[0]
    cfg = config(d, {"a": d})
    cfg["server"] = {"max_body_bytes": 1024}
    client, transport = await start(aiohttp_client, recorder, cfg, refused)
    async with client.request(method, "/c", data=body,
                              headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == status
    (o,) = recorder.outcomes
    assert o.status == status and o.attempts == () and transport.requests == []


async def test_a_silent_upstream_is_a_504_after_its_timeout(
        aiohttp_client: Any, recorder: Recorder) -> None:
    d = DIALECT_LIST[0]

    async def silent(_: UpstreamRequest) -> MemoryResponse:
        await asyncio.sleep(30)
        raise AssertionError("not reached")

    cfg = config(d, {"a": d})
    cfg["upstreams"]["a"]["timeout"] = 0.2
    client, transport = await start(aiohttp_client, recorder, cfg, silent)
    path, body, headers = stream_request(d, "/c", False)
    async with client.post(path, json=body, headers=headers) as resp:
        assert resp.status == 504
    (o,) = recorder.outcomes
    assert [a.outcome for a in o.attempts] == ["timeout"]
    assert transport.in_use() == 0


@pytest.mark.parametrize("d", DIALECT_LIST, ids=IDS)
async def test_a_stream_broken_mid_way_ends_in_an_error_event_not_a_clean_finish(
        aiohttp_client: Any, recorder: Recorder, d: Dialect) -> None:
    data = d.samples.streams["text"]

    async def broken() -> AsyncIterator[bytes]:
        yield data[: len(data) // 2]
        raise UpstreamError("connect", "the upstream stream was cut off")

    async def handler(_: UpstreamRequest) -> MemoryResponse:
        return MemoryResponse(200, {"Content-Type": d.stream_content_type}, broken())

    client, transport = await start(aiohttp_client, recorder, config(d, {"a": d}), handler)
    path, body, headers = stream_request(d, "/c", True)
    async with client.post(path, json=body, headers=headers) as resp:
        out = await resp.read()
    (o,) = recorder.outcomes
    if resp.status == 200:  # something went out before the break: it ends in an error event
        assert o.error is not None and out
        assert [a.outcome for a in o.attempts] == ["connect"]
    else:  # nothing went out: a plain 502
        assert resp.status == 502
    assert transport.in_use() == 0


async def test_a_client_that_leaves_mid_stream_is_recorded_once_as_disconnected(
        aiohttp_client: Any, recorder: Recorder) -> None:
    d = next(x for x in DIALECT_LIST if x.stream_path is None)
    release = asyncio.Event()

    async def endless() -> AsyncIterator[bytes]:
        data = d.samples.streams["text"]
        yield data[: data.index(b"\n") + 1]
        await release.wait()
        yield b""

    async def handler(_: UpstreamRequest) -> MemoryResponse:
        return MemoryResponse(200, {"Content-Type": d.stream_content_type}, endless())

    client, transport = await start(aiohttp_client, recorder, config(d, {"a": d}), handler)
    path, body, headers = stream_request(d, "/c", True)
    resp = await client.post(path, json=body, headers=headers)
    assert resp.status == 200
    await resp.content.readany()
    resp.close()  # the client goes away while the upstream holds its stream open
    await until(lambda: bool(recorder.outcomes))
    release.set()
    (o,) = recorder.outcomes
    assert o.disconnected and o.status == 499 and o.chunks >= 1
    assert [a.outcome for a in o.attempts] == ["cancelled"]
    await until(lambda: transport.in_use() == 0)
    assert transport.in_use() == 0
