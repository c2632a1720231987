"""The gateway server end to end: the real app (``create_app``) in front of in-process fake
upstreams on 127.0.0.1, every client dialect against every upstream dialect, whole and streamed,
plus the HTTP surface (paths, headers, errors, CORS, limits), disconnects, metrics and logs."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
import structlog
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from fakes import (
    CHATUI,
    CITATION_NAMES,
    CLIENT_STATE,
    FOLLOWUPS,
    OPENAI,
    P0128,
    P0529,
    TEXT,
    UP_STATE,
    USAGE,
    ClientView,
    Fakes,
    FakeUpstream,
    Script,
    closed_port,
    error_of,
    eventually,
    read_stream,
    read_whole,
    stream_request,
    upstream_config,
)
from prometheus_client.parser import text_string_to_metric_families
from readback import CAN_CITE

from gateway import proxy
from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import DIALECT_NAMES
from gateway.log import configure_logging

PAIRS = [(c, u) for c in DIALECT_NAMES for u in DIALECT_NAMES]
PAIR_IDS = [f"{c}<-{u}" for c, u in PAIRS]
STREAM_TYPES = {P0128: "application/json-lines", P0529: "application/json-lines",
                CHATUI: "text/event-stream", OPENAI: "text/event-stream"}
CAN_FOLLOW = {P0128, P0529}
USAGE_BOTH = {P0128, OPENAI}


async def gateway(aiohttp_client: Any, cfg: dict[str, Any],
                  env: dict[str, str] | None = None) -> TestClient[Any, Any]:
    """The real app, served like ``serve`` does (handlers cancelled when their client leaves)."""
    app = create_app(parse_config(cfg, env=env or {}))
    client: TestClient[Any, Any] = await aiohttp_client(
        app, server_kwargs={"handler_cancellation": True})
    return client


def one_route(client: str, upstream: dict[str, Any], path: str = "/c",
              **route: Any) -> dict[str, Any]:
    return {"upstreams": {"u": upstream},
            "routes": [{"path": path, "dialect": client, "upstream": "u", **route}]}


def expected_state(client: str, upstream: str) -> Any:
    if client == OPENAI:
        return None
    return CLIENT_STATE if upstream == OPENAI else UP_STATE


def complete_frames(dialect: str, buf: bytes) -> bytes:
    sep = b"\n" if dialect in (P0128, P0529) else b"\n\n"
    cut = buf.rfind(sep)
    return buf[:cut + len(sep)] if cut >= 0 else b""


async def read_until_text(dialect: str, resp: ClientResponse) -> tuple[bytes, ClientView]:
    """Read the client's stream until its first answer text arrived (bounded)."""
    buf = b""
    async with asyncio.timeout(5):
        while True:
            chunk = await resp.content.readany()
            assert chunk, f"the stream ended before any text: {buf!r}"
            buf += chunk
            view = read_stream(dialect, complete_frames(dialect, buf))
            if view.text:
                return buf, view


async def metric_samples(gw: TestClient[Any, Any]) -> dict[tuple[str, frozenset[Any]], float]:
    resp = await gw.get("/metrics")
    assert resp.status == 200
    out: dict[tuple[str, frozenset[Any]], float] = {}
    for family in text_string_to_metric_families(await resp.text()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(samples: dict[tuple[str, frozenset[Any]], float], name: str,
           **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert found, f"no sample {name}{labels}"
    return sum(found)


# --- every client dialect x every upstream dialect ------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("client", "upstream"), PAIRS, ids=PAIR_IDS)
async def test_every_pair(aiohttp_client: Any, fakes: Fakes, client: str, upstream: str,
                          stream: bool) -> None:
    fake = await fakes.start(upstream)
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    path, body, headers = stream_request(client, "/c", stream=stream)
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == 200, await resp.text()
    if stream:
        assert resp.headers["Content-Type"] == STREAM_TYPES[client]
        if STREAM_TYPES[client] == "text/event-stream":
            assert resp.headers["Cache-Control"] == "no-cache"
        view = read_stream(client, await resp.read())
    else:
        assert resp.headers["Content-Type"] == "application/json"
        view = read_whole(client, await resp.json())
    assert view.error is None
    assert view.finished
    assert view.text == TEXT
    if client in CAN_CITE and upstream in CAN_CITE:
        assert view.citations == CITATION_NAMES
    if client in CAN_FOLLOW and upstream in CAN_FOLLOW:
        assert view.followups == FOLLOWUPS
    assert view.session_state == expected_state(client, upstream)
    if client in USAGE_BOTH and upstream in USAGE_BOTH:
        assert view.usage == USAGE
    if client != P0529:  # its answers name no finish reason
        assert view.finish_reason == "stop"
    # the upstream was asked in its own dialect, streamed exactly when the client streams
    [seen] = fake.seen
    assert seen.stream is stream
    assert seen.path == ("/chat/stream" if stream and upstream == P0529 else "/chat")
    assert seen.body["messages"][-1]["content"] == "What is covered?"


@pytest.mark.parametrize(("client", "upstream"), PAIRS, ids=PAIR_IDS)
async def test_stream_is_flushed_chunk_by_chunk(aiohttp_client: Any, fakes: Fakes, client: str,
                                               upstream: str) -> None:
    """The upstream sends its first text then waits for the test, which lets it go on only once
    the client has read that text: nothing in between may buffer the stream."""
    gate = asyncio.Event()
    fake = await fakes.start(upstream, Script(hold_after_first=gate))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    path, body, headers = stream_request(client, "/c", stream=True)
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == 200
    head, view = await read_until_text(client, resp)
    assert TEXT.startswith(view.text) and view.text != TEXT
    assert fake.finished == 0
    gate.set()
    async with asyncio.timeout(5):
        rest = await resp.read()
    whole = read_stream(client, head + rest)
    assert whole.text == TEXT and whole.finished and whole.error is None


# --- paths and headers ----------------------------------------------------------------------------


async def test_protocol_2024_05_29_serves_path_and_stream_with_trailing_slash(
        aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(P0128)
    gw = await gateway(aiohttp_client, one_route(P0529, upstream_config(fake), path="/chat"))
    for path, streamed in [("/chat", False), ("/chat/", False), ("/chat/stream", True),
                           ("/chat/stream/", True)]:
        resp = await gw.post(path, json={"messages": [{"role": "user", "content": "q"}]})
        assert resp.status == 200, path
        if streamed:
            assert resp.headers["Content-Type"] == "application/json-lines"
            view = read_stream(P0529, await resp.read())
        else:
            assert resp.headers["Content-Type"] == "application/json"
            view = read_whole(P0529, await resp.json())
        assert view.text == TEXT, path
    assert [s.stream for s in fake.seen] == [False, False, True, True]


async def test_trailing_slash_on_other_routes(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(OPENAI)
    gw = await gateway(aiohttp_client, one_route(OPENAI, upstream_config(fake),
                                                 path="/v1/chat/completions/"))
    for path in ("/v1/chat/completions", "/v1/chat/completions/"):
        resp = await gw.post(path, json={"messages": [{"role": "user", "content": "q"}]})
        assert resp.status == 200
        assert read_whole(OPENAI, await resp.json()).text == TEXT


async def test_chatui_streams_by_accept_header(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(OPENAI)
    gw = await gateway(aiohttp_client, one_route(CHATUI, upstream_config(fake)))
    body = {"messages": [{"role": "user", "content": "q"}]}
    whole = await gw.post("/c", json=body)
    assert whole.headers["Content-Type"] == "application/json"
    assert read_whole(CHATUI, await whole.json()).text == TEXT
    streamed = await gw.post("/c", json=body, headers={"Accept": "text/event-stream"})
    assert streamed.headers["Content-Type"] == "text/event-stream"
    assert streamed.headers["Cache-Control"] == "no-cache"
    view = read_stream(CHATUI, await streamed.read())
    assert view.text == TEXT and view.finished
    assert [s.stream for s in fake.seen] == [False, True]


@pytest.mark.parametrize("client", [P0128, P0529])
async def test_route_content_type_for_json_lines(aiohttp_client: Any, fakes: Fakes,
                                                 client: str) -> None:
    fake = await fakes.start(OPENAI)
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake),
                                                 content_type="application/jsonl"))
    path, body, headers = stream_request(client, "/c", stream=True)
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.headers["Content-Type"] == "application/jsonl"
    assert read_stream(client, await resp.read()).text == TEXT


async def test_request_id_taken_or_generated(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(P0128)
    gw = await gateway(aiohttp_client, one_route(OPENAI, upstream_config(fake)))
    body = {"messages": [{"role": "user", "content": "q"}]}
    given = await gw.post("/c", json=body, headers={"X-Request-ID": "req-abc-123"})
    assert given.headers["X-Request-ID"] == "req-abc-123"
    assert fake.seen[0].headers["X-Request-ID"] == "req-abc-123"
    made = await gw.post("/c", json=body)
    rid = made.headers["X-Request-ID"]
    assert rid and rid != "req-abc-123"
    assert fake.seen[1].headers["X-Request-ID"] == rid
    streamed = await gw.post("/c", json={**body, "stream": True},
                             headers={"X-Request-ID": "req-stream-1"})
    await streamed.read()
    assert streamed.headers["X-Request-ID"] == "req-stream-1"
    assert fake.seen[2].headers["X-Request-ID"] == "req-stream-1"
    error = await gw.post("/c", data=b"not json", headers={"X-Request-ID": "req-bad-1"})
    assert error.status == 400 and error.headers["X-Request-ID"] == "req-bad-1"


async def test_client_authorization_forwarded_unless_upstream_has_its_own(
        aiohttp_client: Any, fakes: Fakes) -> None:
    plain = await fakes.start(OPENAI)
    owned = await fakes.start(OPENAI)
    cfg = {
        "upstreams": {
            "plain": upstream_config(plain),
            "owned": upstream_config(owned, headers={"Authorization": "Bearer upstream-own"}),
        },
        "routes": [{"path": "/plain", "dialect": OPENAI, "upstream": "plain"},
                   {"path": "/owned", "dialect": OPENAI, "upstream": "owned"}],
    }
    gw = await gateway(aiohttp_client, cfg)
    body = {"messages": [{"role": "user", "content": "q"}]}
    auth = {"Authorization": "Bearer client-token"}
    assert (await gw.post("/plain", json=body, headers=auth)).status == 200
    assert (await gw.post("/owned", json=body, headers=auth)).status == 200
    assert plain.seen[0].headers["Authorization"] == "Bearer client-token"
    assert owned.seen[0].headers["Authorization"] == "Bearer upstream-own"


async def test_hop_by_hop_headers_not_forwarded(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(P0128)
    gw = await gateway(aiohttp_client, one_route(P0128, upstream_config(fake)))
    hop = {"Connection": "keep-alive, X-Hop-Custom", "Keep-Alive": "timeout=5",
           "Proxy-Authorization": "Basic c2VjcmV0", "TE": "trailers", "Trailer": "X-Trail",
           "X-Hop-Custom": "1", "Proxy-Connection": "keep-alive"}
    resp = await gw.post("/c", json={"messages": [{"role": "user", "content": "q"}]},
                         headers=hop)
    assert resp.status == 200
    sent = {k.lower() for k in fake.seen[0].headers}
    for name in ("keep-alive", "proxy-authorization", "te", "trailer", "x-hop-custom",
                 "proxy-connection", "upgrade"):
        assert name not in sent
    assert fake.seen[0].headers.get("Connection", "keep-alive").lower() == "keep-alive"


# --- the gateway's own endpoints ------------------------------------------------------------------


async def test_healthz_metrics_unknown_path_and_method(aiohttp_client: Any,
                                                      fakes: Fakes) -> None:
    fake = await fakes.start(OPENAI)
    gw = await gateway(aiohttp_client, one_route(P0128, upstream_config(fake)))
    health = await gw.get("/healthz")
    assert health.status == 200 and (await health.json())["status"] == "ok"
    metrics = await gw.get("/metrics")
    assert metrics.status == 200
    assert metrics.headers["Content-Type"].startswith("text/plain")
    text = await metrics.text()
    assert "# TYPE gateway_requests_total counter" in text
    assert "# TYPE gateway_inflight_requests gauge" in text
    unknown = await gw.post("/nowhere", json={})
    assert unknown.status == 404
    assert unknown.headers["Content-Type"].startswith("application/json")
    assert "/nowhere" in (await unknown.json())["error"]["message"]
    for client in DIALECT_NAMES:
        gw2 = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
        wrong = await gw2.get("/c")
        assert wrong.status == 405
        assert wrong.headers["Content-Type"].startswith("application/json")
        assert "POST" in wrong.headers["Allow"]
        assert "GET" in error_of(client, await wrong.json())
        assert wrong.headers["X-Request-ID"]
        assert sample(await metric_samples(gw2), "gateway_requests_total", route="/c",
                      client_dialect=client, upstream="none", upstream_dialect="none",
                      status="405") == 1
    assert fake.seen == []
    assert unknown.headers["X-Request-ID"]
    # every unknown path shares one label set, so scanners cannot grow the series
    await gw.get("/wp-login.php")
    s = await metric_samples(gw)
    assert sample(s, "gateway_requests_total", route="none", client_dialect="none",
                  upstream="none", upstream_dialect="none", status="404") == 2
    assert not any(dict(labels).get("route") in ("/nowhere", "/wp-login.php")
                   for _, labels in s)


async def test_cors_off_by_default(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(OPENAI)
    gw = await gateway(aiohttp_client, one_route(OPENAI, upstream_config(fake)))
    origin = {"Origin": "https://app.example.com"}
    resp = await gw.post("/c", json={"messages": [{"role": "user", "content": "q"}]},
                         headers=origin)
    assert resp.status == 200
    assert "Access-Control-Allow-Origin" not in resp.headers
    pre = await gw.options("/c", headers={**origin, "Access-Control-Request-Method": "POST"})
    assert "Access-Control-Allow-Origin" not in pre.headers
    assert pre.status >= 400


async def test_cors_preflight_when_configured(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(OPENAI)
    cfg = one_route(OPENAI, upstream_config(fake))
    cfg["server"] = {"cors": {"allow_origins": ["https://app.example.com"], "max_age": 120}}
    gw = await gateway(aiohttp_client, cfg)
    origin = {"Origin": "https://app.example.com"}
    pre = await gw.options("/c", headers={
        **origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization"})
    assert pre.status in (200, 204)
    assert pre.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    allowed = {h.strip().lower() for h in pre.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"content-type", "authorization", "x-request-id"} <= allowed
    assert pre.headers["Access-Control-Max-Age"] == "120"
    post = await gw.post("/c", json={"messages": [{"role": "user", "content": "q"}]},
                         headers=origin)
    assert post.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert "X-Request-ID" in post.headers["Access-Control-Expose-Headers"]
    other = await gw.options("/c", headers={"Origin": "https://evil.example.com",
                                            "Access-Control-Request-Method": "POST"})
    assert "Access-Control-Allow-Origin" not in other.headers
    assert fake.seen and all(s.path == "/chat" for s in fake.seen) and len(fake.seen) == 1


# --- errors, in the client's dialect --------------------------------------------------------------


@pytest.mark.parametrize("client", DIALECT_NAMES)
async def test_body_over_limit_is_413(aiohttp_client: Any, fakes: Fakes, client: str) -> None:
    fake = await fakes.start(OPENAI)
    cfg = one_route(client, upstream_config(fake))
    cfg["server"] = {"max_body_bytes": 1000}
    gw = await gateway(aiohttp_client, cfg)
    big = orjson.dumps({"messages": [{"role": "user", "content": "x" * 5000}]})
    resp = await gw.post("/c", data=big, headers={"Content-Type": "application/json"})
    assert resp.status == 413
    assert "1000" in error_of(client, await resp.json())

    async def chunked() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 500):
            yield big[i:i + 500]

    resp = await gw.post("/c", data=chunked(), headers={"Content-Type": "application/json"})
    assert resp.status == 413
    error_of(client, await resp.json())
    ok = await gw.post("/c", json={"messages": [{"role": "user", "content": "small"}]})
    assert ok.status == 200
    assert len(fake.seen) == 1


@pytest.mark.parametrize("client", DIALECT_NAMES)
async def test_request_errors_are_400_in_client_dialect(aiohttp_client: Any, fakes: Fakes,
                                                        client: str) -> None:
    fake = await fakes.start(OPENAI)
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    bad = await gw.post("/c", data=b"{not json", headers={"Content-Type": "application/json"})
    assert bad.status == 400
    assert bad.headers["Content-Type"].startswith("application/json")
    assert "JSON" in error_of(client, await bad.json())
    missing = await gw.post("/c", json={"stream": False})
    assert missing.status == 400
    assert "messages" in error_of(client, await missing.json())
    assert fake.seen == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("client", DIALECT_NAMES)
async def test_upstream_refused_is_502(aiohttp_client: Any, client: str, stream: bool) -> None:
    up = upstream_config(OPENAI, f"http://127.0.0.1:{closed_port()}/chat")
    gw = await gateway(aiohttp_client, one_route(client, up))
    path, body, headers = stream_request(client, "/c", stream=stream)
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == 502
    assert resp.headers["Content-Type"].startswith("application/json")
    assert error_of(client, await resp.json())


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("client", DIALECT_NAMES)
async def test_upstream_timeout_is_504(aiohttp_client: Any, fakes: Fakes, client: str,
                                       stream: bool) -> None:
    fake = await fakes.start(P0128, Script(delay=3))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake, timeout=0.5)))
    path, body, headers = stream_request(client, "/c", stream=stream)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == 504
    assert loop.time() - t0 < 2.5
    assert error_of(client, await resp.json())
    await asyncio.wait_for(fake.gone.wait(), 5)  # the gateway hung up on the slow upstream


@pytest.mark.parametrize("status", [400, 404, 500, 503])
@pytest.mark.parametrize(("client", "upstream"), PAIRS, ids=PAIR_IDS)
async def test_upstream_status_passed_on_with_its_message(
        aiohttp_client: Any, fakes: Fakes, client: str, upstream: str, status: int) -> None:
    fake = await fakes.start(upstream, Script(status=status))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    path, body, headers = stream_request(client, "/c", stream=status % 2 == 0)
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == status
    assert error_of(client, await resp.json()) == "scripted failure"
    assert len(fake.seen) == 1


@pytest.mark.parametrize("client", DIALECT_NAMES)
async def test_upstream_non_json_body_is_502(aiohttp_client: Any, fakes: Fakes,
                                             client: str) -> None:
    fake = await fakes.start(P0529, Script(body=b"<html><body>oops</body></html>",
                                           content_type="text/html"))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    resp = await gw.post("/c", json={"messages": [{"role": "user", "content": "q"}]})
    assert resp.status == 502
    message = error_of(client, await resp.json())
    assert "oops" not in message


@pytest.mark.parametrize("upstream", DIALECT_NAMES)
async def test_upstream_non_json_stream_is_502(aiohttp_client: Any, fakes: Fakes,
                                               upstream: str) -> None:
    fake = await fakes.start(upstream, Script(body=b"<html><body>oops</body></html>",
                                              content_type="text/html"))
    gw = await gateway(aiohttp_client, one_route(OPENAI, upstream_config(fake)))
    resp = await gw.post("/c", json=client_msg(True))
    assert resp.status == 502, await resp.text()
    assert "oops" not in error_of(OPENAI, await resp.json())


@pytest.mark.parametrize("upstream", DIALECT_NAMES)
async def test_upstream_empty_stream_is_502(aiohttp_client: Any, fakes: Fakes,
                                            upstream: str) -> None:
    fake = await fakes.start(upstream, Script(body=b"\n", content_type="text/event-stream"))
    gw = await gateway(aiohttp_client, one_route(P0529, upstream_config(fake)))
    resp = await gw.post("/c/stream", json={"messages": [{"role": "user", "content": "q"}]})
    assert resp.status == 502, await resp.text()
    assert "empty" in error_of(P0529, await resp.json())


@pytest.mark.parametrize("client", DIALECT_NAMES)
async def test_upstream_html_error_page_not_shown(aiohttp_client: Any, fakes: Fakes,
                                                  client: str) -> None:
    fake = await fakes.start(OPENAI, Script(status=500, body=b"<html>Internal oops</html>",
                                            content_type="text/html"))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    resp = await gw.post("/c", json={"messages": [{"role": "user", "content": "q"}]})
    assert resp.status == 500
    message = error_of(client, await resp.json())
    assert "oops" not in message and "500" in message


@pytest.mark.parametrize(("client", "upstream"), PAIRS, ids=PAIR_IDS)
async def test_mid_stream_error_becomes_error_event_without_clean_finish(
        aiohttp_client: Any, fakes: Fakes, client: str, upstream: str) -> None:
    fake = await fakes.start(upstream, Script(error_after=2))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    path, body, headers = stream_request(client, "/c", stream=True)
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == 200
    data = await resp.read()
    view = read_stream(client, data)
    assert view.error == "upstream broke down mid-answer"
    assert not view.finished
    assert TEXT.startswith(view.text) and view.text != TEXT
    assert b"[DONE]" not in data
    if client == CHATUI:
        assert all(p["status"] != "completed" for p in view.payloads)
    if client == P0128:
        assert all(not (p.get("choices") or [{}])[0].get("finish_reason")
                   for p in view.payloads)


# --- clients that go away -------------------------------------------------------------------------


async def disconnect_counted(gw: TestClient[Any, Any]) -> bool:
    """One client disconnect counted on route /c, and nothing left in flight."""
    s = await metric_samples(gw)
    return (sample(s, "gateway_client_disconnects_total", route="/c") == 1
            and sample(s, "gateway_inflight_requests", route="/c") == 0)


@pytest.mark.parametrize("client", DIALECT_NAMES)
async def test_client_disconnect_mid_stream_closes_upstream(aiohttp_client: Any, fakes: Fakes,
                                                            client: str) -> None:
    never = asyncio.Event()
    fake = await fakes.start(OPENAI, Script(hold_after_first=never))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    path, body, headers = stream_request(client, "/c", stream=True)
    resp = await gw.post(path, json=body, headers=headers)
    await read_until_text(client, resp)
    resp.close()
    await asyncio.wait_for(fake.gone.wait(), 5)
    assert fake.finished == 0
    await eventually(lambda: disconnect_counted(gw))


@pytest.mark.parametrize("client", DIALECT_NAMES)
async def test_client_disconnect_before_first_token_closes_upstream(
        aiohttp_client: Any, fakes: Fakes, client: str) -> None:
    never = asyncio.Event()
    fake = await fakes.start(P0529, Script(hold_before=never))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake, timeout=30)))
    path, body, headers = stream_request(client, "/c", stream=True)
    task = asyncio.create_task(gw.post(path, json=body, headers=headers))
    await eventually(lambda: len(fake.seen) == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(fake.gone.wait(), 5)
    assert fake.finished == 0
    await eventually(lambda: disconnect_counted(gw))


# --- metrics and logs -----------------------------------------------------------------------------


async def traffic(aiohttp_client: Any, fakes: Fakes,
                  env: dict[str, str] | None = None) -> tuple[TestClient[Any, Any], FakeUpstream]:
    """Whole, streamed, failed and abandoned requests through a two-route gateway."""
    fake = await fakes.start(OPENAI)
    cfg = {
        "upstreams": {
            "llm": upstream_config(fake, headers={"api-key": "${UPSTREAM_SECRET}"}),
            "down": upstream_config(P0128, f"http://127.0.0.1:{closed_port()}/chat"),
        },
        "routes": [{"path": "/v1/chat", "dialect": OPENAI, "upstream": "llm"},
                   {"path": "/legacy", "dialect": P0128, "upstream": "down"}],
    }
    gw = await gateway(aiohttp_client, cfg, env=env or {"UPSTREAM_SECRET": "s3cr3t-hdr-value"})
    auth = {"Authorization": "Bearer planted-client-secret-42"}
    whole = await gw.post("/v1/chat", json=client_msg(False), headers=auth)
    assert whole.status == 200
    streamed = await gw.post("/v1/chat", json=client_msg(True), headers=auth)
    assert streamed.status == 200
    assert read_stream(OPENAI, await streamed.read()).text == TEXT
    failed = await gw.post("/legacy", json={"messages": [{"role": "user", "content": "q"}]},
                           headers=auth)
    assert failed.status == 502
    return gw, fake


def client_msg(stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "q"}],
                            "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def test_metrics_carry_labels_after_traffic(aiohttp_client: Any, fakes: Fakes) -> None:
    gw, fake = await traffic(aiohttp_client, fakes)
    # and one client that leaves mid-stream
    gate = asyncio.Event()
    fake.queue.append(Script(hold_after_first=gate))
    resp = await gw.post("/v1/chat", json=client_msg(True))
    await read_until_text(OPENAI, resp)
    resp.close()
    await asyncio.wait_for(fake.gone.wait(), 5)
    await asyncio.sleep(0.1)

    s = await metric_samples(gw)
    ok = {"route": "/v1/chat", "client_dialect": OPENAI, "upstream": "llm",
          "upstream_dialect": OPENAI}
    # the client that left had its 200 and its first chunks already
    assert sample(s, "gateway_requests_total", **ok, status="200") == 3
    assert sample(s, "gateway_requests_total", route="/legacy", client_dialect=P0128,
                  upstream="down", upstream_dialect=P0128, status="502") == 1
    assert sample(s, "gateway_request_duration_seconds_count", **ok, stream="true") == 2
    assert sample(s, "gateway_request_duration_seconds_count", **ok, stream="false") == 1
    assert sample(s, "gateway_time_to_first_token_seconds_count", route="/v1/chat",
                  upstream="llm") >= 2
    assert sample(s, "gateway_overhead_seconds_count", route="/v1/chat") == 3
    assert sample(s, "gateway_stream_chunks_total", route="/v1/chat", upstream="llm") > 2
    assert sample(s, "gateway_inflight_requests", route="/v1/chat") == 0
    assert sample(s, "gateway_inflight_requests", route="/legacy") == 0
    assert sample(s, "gateway_upstream_errors_total", upstream="down", kind="connect") == 1
    assert sample(s, "gateway_client_disconnects_total", route="/v1/chat") == 1
    assert sample(s, "gateway_tokens_total", upstream="llm", kind="prompt") == 2 * 11
    assert sample(s, "gateway_tokens_total", upstream="llm", kind="completion") == 2 * 7
    assert sample(s, "gateway_upstream_attempts_total", upstream="llm", outcome="ok") >= 2


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    configure_logging("json", "debug", stream=out)
    yield out
    structlog.reset_defaults()


async def test_access_log_per_request_without_secrets(aiohttp_client: Any, fakes: Fakes,
                                                      log_stream: io.StringIO) -> None:
    gw, _ = await traffic(aiohttp_client, fakes)
    bad = await gw.post("/v1/chat", data=b"nope",
                        headers={"Authorization": "Bearer planted-client-secret-42",
                                 "X-Request-ID": "req-log-1"})
    assert bad.status == 400
    text = log_stream.getvalue()
    events = [orjson.loads(line) for line in text.splitlines() if line.strip()]
    access = [e for e in events if e["event"] == "access"]
    assert len(access) == 4
    for e in access:
        for key in ("request_id", "route", "client_dialect", "upstream", "upstream_dialect",
                    "status", "duration_ms"):
            assert key in e, (key, e)
        assert isinstance(e["duration_ms"], float | int)
    assert [e["status"] for e in access] == [200, 200, 502, 400]
    assert access[0]["route"] == "/v1/chat" and access[0]["client_dialect"] == OPENAI
    assert access[0]["upstream"] == "llm" and access[0]["upstream_dialect"] == OPENAI
    assert access[1]["stream"] is True
    assert access[2]["upstream_dialect"] == P0128
    assert access[3]["request_id"] == "req-log-1"
    assert len({e["request_id"] for e in access}) == 4
    assert any(e["event"] == "upstream_error" for e in events)
    assert "planted-client-secret-42" not in text
    assert "s3cr3t-hdr-value" not in text


async def test_access_log_shows_unknown_paths_and_wrong_methods(
        aiohttp_client: Any, fakes: Fakes, log_stream: io.StringIO) -> None:
    fake = await fakes.start(OPENAI)
    gw = await gateway(aiohttp_client, one_route(P0529, upstream_config(fake)))
    assert (await gw.get("/nowhere?token=planted-query-secret")).status == 404
    assert (await gw.get("/c", headers={"X-Request-ID": "req-405"})).status == 405
    text = log_stream.getvalue()
    access = [e for e in map(orjson.loads, text.splitlines()) if e["event"] == "access"]
    assert [(e["status"], e["route"]) for e in access] == [(404, None), (405, "/c")]
    assert access[0]["path"] == "/nowhere" and access[0]["method"] == "GET"
    assert access[0]["request_id"]
    assert access[1]["request_id"] == "req-405" and access[1]["upstream"] == "none"
    assert "planted-query-secret" not in text
    assert fake.seen == []


@pytest.mark.parametrize("client", DIALECT_NAMES)
async def test_upstream_silent_mid_stream_hits_idle_timeout(aiohttp_client: Any, fakes: Fakes,
                                                           client: str) -> None:
    never = asyncio.Event()
    fake = await fakes.start(P0128, Script(hold_after_first=never))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(
        fake, timeout=5, idle_timeout=0.5)))
    path, body, headers = stream_request(client, "/c", stream=True)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == 200
    async with asyncio.timeout(4):
        data = await resp.read()
    assert loop.time() - t0 < 3
    view = read_stream(client, data)
    assert view.error and not view.finished
    assert TEXT.startswith(view.text) and view.text
    await asyncio.wait_for(fake.gone.wait(), 5)
    s = await metric_samples(gw)
    assert sample(s, "gateway_upstream_errors_total", upstream="u", kind="timeout") == 1


async def test_large_chunked_body_over_limit_is_413(aiohttp_client: Any, fakes: Fakes) -> None:
    fake = await fakes.start(OPENAI)
    cfg = one_route(OPENAI, upstream_config(fake))
    cfg["server"] = {"max_body_bytes": 1000}
    gw = await gateway(aiohttp_client, cfg)

    async def chunked() -> AsyncIterator[bytes]:
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(200):
            yield b"x" * 16384
        yield b'"}]}'

    resp = await gw.post("/c", data=chunked(), headers={"Content-Type": "application/json"})
    assert resp.status == 413
    error_of(OPENAI, await resp.json())
    assert fake.seen == []


@pytest.mark.parametrize("client", DIALECT_NAMES)
async def test_internal_error_answers_500_in_client_dialect(
        aiohttp_client: Any, fakes: Fakes, client: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("a planted gateway bug")

    monkeypatch.setattr(proxy.Exchange, "_upstream_headers", broken)
    fake = await fakes.start(OPENAI)
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    path, body, headers = stream_request(client, "/c", stream=True)
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == 500
    message = error_of(client, await resp.json())
    assert "planted" not in message
    s = await metric_samples(gw)
    assert sample(s, "gateway_requests_total", route="/c", status="500") == 1
    assert sample(s, "gateway_inflight_requests", route="/c") == 0
