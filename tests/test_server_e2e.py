"""The gateway server end to end: the real app (``create_app``) in front of in-process fake
upstreams on 127.0.0.1, every client dialect of the registry against every upstream dialect, whole
and streamed, plus the HTTP surface (paths, headers, errors, CORS, limits), disconnects, metrics
and logs. No test names a dialect: each asks the registry and the dialects' declarations."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
import yaml
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from fakes import (
    QUESTION,
    TEXT,
    USAGE,
    Fakes,
    FakeUpstream,
    Script,
    assert_failed_stream,
    check_carried,
    client_request,
    closed_port,
    dialect_at,
    error_message,
    eventually,
    other,
    pairs,
    read_answer,
    reader_for,
    text_so_far,
    upstream_config,
)
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config import load_config, parse_config
from gateway.dialects import client_path, get, names
from gateway.log import configure_logging
from gateway.upstream import Transport, UpstreamRequest, UpstreamResponse

PAIRS = pairs()
PAIR_IDS = [f"{c}<-{u}" for c, u in PAIRS]


async def gateway(aiohttp_client: Any, cfg: dict[str, Any],
                  env: dict[str, str] | None = None,
                  transport: Transport | None = None) -> TestClient[Any, Any]:
    """The real app, served like ``serve`` does (handlers cancelled when their client leaves);
    ``transport``: the app's own by default."""
    app = create_app(parse_config(cfg, env=env or {}), transport=transport)
    client: TestClient[Any, Any] = await aiohttp_client(
        app, server_kwargs={"handler_cancellation": True})
    return client


_JSON = {"Content-Type": "application/json"}


def _whole_path(client: str) -> str:
    """Where a client of ``client``'s dialect posts a whole request to the route ``/c``."""
    return client_path(get(client), "/c", "m", stream=False)


def one_route(client: str, upstream: dict[str, Any], path: str = "/c",
              **route: Any) -> dict[str, Any]:
    return {"upstreams": {"u": upstream},
            "routes": [{"path": path, "dialect": client, "upstream": "u", **route}]}


async def ask(gw: TestClient[Any, Any], client: str, *, stream: bool, path: str = "/c",
              headers: dict[str, str] | None = None) -> ClientResponse:
    """One request as a client of ``client`` sends it."""
    path, body, extra = client_request(client, path, stream=stream)
    return await gw.post(path, json=body, headers={**extra, **(headers or {})})


def check_stream_headers(client: str, resp: ClientResponse) -> None:
    assert resp.headers["Content-Type"] == get(client).stream_content_type
    assert resp.headers["Cache-Control"] == "no-cache"


async def read_until_text(dialect: str, resp: ClientResponse) -> tuple[bytes, str]:
    """Read the client's stream until its first answer text arrived (bounded)."""
    buf = b""
    async with asyncio.timeout(5):
        while True:
            chunk = await resp.content.readany()
            assert chunk, f"the stream ended before any text: {buf!r}"
            buf += chunk
            text = text_so_far(dialect, buf)
            if text:
                return buf, text


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
    """A scripted answer (known citations, follow-ups, state, usage: what survives is the point)
    reaches the client with every field both dialects carry."""
    fake = await fakes.start(upstream, Script(scripted=True))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    resp = await ask(gw, client, stream=stream)
    assert resp.status == 200, await resp.text()
    if stream:
        check_stream_headers(client, resp)
        seen = reader_for(client).read_stream(await resp.read())
    else:
        assert resp.headers["Content-Type"] == "application/json"
        seen = reader_for(client).read_whole(await resp.json())
    # an upstream that only streams is asked for its stream for a whole answer too
    up_stream = stream or getattr(get(upstream), "streams_only", False)
    check_carried(seen, client, upstream, streamed=stream, up_streamed=up_stream)
    # the upstream was asked in its own dialect, streamed exactly when the client streams
    [up] = fake.seen
    assert up.stream is up_stream
    assert fake.is_path_for(up.path, up_stream)
    assert reader_for(upstream).read_request(up.body).messages[-1].text == QUESTION


@pytest.mark.parametrize(("client", "upstream"), PAIRS, ids=PAIR_IDS)
async def test_stream_is_flushed_chunk_by_chunk(aiohttp_client: Any, fakes: Fakes, client: str,
                                               upstream: str) -> None:
    """The upstream sends its first text then waits for the test, which lets it go on only once
    the client has read that text: nothing in between may buffer the stream. (Scripted: an answer
    in several known pieces.)"""
    gate = asyncio.Event()
    fake = await fakes.start(upstream, Script(scripted=True, hold_after_first=gate))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    resp = await ask(gw, client, stream=True)
    assert resp.status == 200
    head, text = await read_until_text(client, resp)
    assert TEXT.startswith(text) and text != TEXT
    assert fake.finished == 0
    gate.set()
    async with asyncio.timeout(5):
        rest = await resp.read()
    whole = reader_for(client).read_stream(head + rest)
    assert whole.text == TEXT and whole.error is None


# --- paths and headers ----------------------------------------------------------------------------


@pytest.mark.parametrize("client", names())
async def test_route_paths_with_and_without_trailing_slash(aiohttp_client: Any, fakes: Fakes,
                                                           client: str) -> None:
    """A route configured with or without a trailing slash serves its path both ways, whole and
    streamed however the dialect asks for a stream (a stream path too)."""
    fake = await fakes.start(other(client))
    only_streams = getattr(get(other(client)), "streams_only", False)
    asked = []
    for configured in ("/chat", "/chat/"):
        gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake),
                                                     path=configured))
        for stream in (False, True):
            path, body, headers = client_request(client, "/chat", stream=stream)
            at, query, rest = path.partition("?")  # (the slash before any query)
            for sent in (path, at + "/" + query + rest):
                resp = await gw.post(sent, json=body, headers=headers)
                assert resp.status == 200, sent
                if stream:
                    check_stream_headers(client, resp)
                else:
                    assert resp.headers["Content-Type"] == "application/json"
                seen = read_answer(client, resp.headers["Content-Type"], await resp.read())
                assert seen.text == fake.said(stream or only_streams), sent
                asked.append(stream or only_streams)
    assert [s.stream for s in fake.seen] == asked


@pytest.mark.parametrize("client", names())
async def test_accept_header_streams_where_the_dialect_says_it_does(
        aiohttp_client: Any, fakes: Fakes, client: str) -> None:
    """``Accept: text/event-stream`` alone asks for a stream exactly where the client's dialect
    declares ``stream_by_accept``; elsewhere the same request gets a whole answer."""
    fake = await fakes.start(other(client))
    # (an upstream that only streams is asked for its stream for a whole answer too)
    only_streams = getattr(get(other(client)), "streams_only", False)
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    path, body, _ = client_request(client, "/c", stream=False)
    whole = await gw.post(path, json=body)
    assert whole.headers["Content-Type"] == "application/json"
    assert reader_for(client).read_whole(await whole.json()).text == fake.said(only_streams)
    by_accept = get(client).stream_by_accept
    accepted = await gw.post(path, json=body, headers={"Accept": "text/event-stream"})
    assert accepted.status == 200
    if by_accept:
        check_stream_headers(client, accepted)
        seen = reader_for(client).read_stream(await accepted.read())
        assert seen.text == fake.said(True) and seen.error is None
    else:
        assert accepted.headers["Content-Type"] == "application/json"
        assert reader_for(client).read_whole(await accepted.json()).text == \
            fake.said(only_streams)
    assert [s.stream for s in fake.seen] == [only_streams, by_accept or only_streams]


@pytest.mark.parametrize("client", names())
async def test_route_content_type_for_json_lines(aiohttp_client: Any, fakes: Fakes,
                                                 client: str) -> None:
    """``content_type`` names the stream's type on a JSON-lines route; other framings keep their
    own."""
    fake = await fakes.start(other(client))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake),
                                                 content_type="application/jsonl"))
    resp = await ask(gw, client, stream=True)
    d = get(client)
    want = "application/jsonl" if d.framing == "jsonlines" else d.stream_content_type
    assert resp.headers["Content-Type"] == want
    assert reader_for(client).read_stream(await resp.read()).text == fake.said(True)


@pytest.mark.parametrize("client", names())
async def test_request_id_taken_or_generated(aiohttp_client: Any, fakes: Fakes,
                                             client: str) -> None:
    fake = await fakes.start(other(client))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    given = await ask(gw, client, stream=False, headers={"X-Request-ID": "req-abc-123"})
    assert given.headers["X-Request-ID"] == "req-abc-123"
    assert fake.seen[0].headers["X-Request-ID"] == "req-abc-123"
    made = await ask(gw, client, stream=False)
    rid = made.headers["X-Request-ID"]
    assert rid and rid != "req-abc-123"
    assert fake.seen[1].headers["X-Request-ID"] == rid
    streamed = await ask(gw, client, stream=True, headers={"X-Request-ID": "req-stream-1"})
    await streamed.read()
    assert streamed.headers["X-Request-ID"] == "req-stream-1"
    assert fake.seen[2].headers["X-Request-ID"] == "req-stream-1"
    error = await gw.post(_whole_path(client), data=b"not json",
                          headers={"X-Request-ID": "req-bad-1"})
    assert error.status == 400 and error.headers["X-Request-ID"] == "req-bad-1"


async def test_client_authorization_forwarded_unless_upstream_has_its_own(
        aiohttp_client: Any, fakes: Fakes) -> None:
    client = dialect_at(3)
    plain = await fakes.start(client)
    owned = await fakes.start(client)
    cfg = {
        "upstreams": {
            "plain": upstream_config(plain),
            "owned": upstream_config(owned, headers={"Authorization": "Bearer upstream-own"}),
        },
        "routes": [{"path": "/plain", "dialect": client, "upstream": "plain"},
                   {"path": "/owned", "dialect": client, "upstream": "owned"}],
    }
    gw = await gateway(aiohttp_client, cfg)
    auth = {"Authorization": "Bearer client-token"}
    assert (await ask(gw, client, stream=False, path="/plain", headers=auth)).status == 200
    assert (await ask(gw, client, stream=False, path="/owned", headers=auth)).status == 200
    assert plain.seen[0].headers["Authorization"] == "Bearer client-token"
    assert owned.seen[0].headers["Authorization"] == "Bearer upstream-own"


async def test_hop_by_hop_headers_not_forwarded(aiohttp_client: Any, fakes: Fakes) -> None:
    client = dialect_at(0)
    fake = await fakes.start(client)
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    hop = {"Connection": "keep-alive, X-Hop-Custom", "Keep-Alive": "timeout=5",
           "Proxy-Authorization": "Basic c2VjcmV0", "TE": "trailers", "Trailer": "X-Trail",
           "X-Hop-Custom": "1", "Proxy-Connection": "keep-alive"}
    resp = await ask(gw, client, stream=False, headers=hop)
    assert resp.status == 200
    sent = {k.lower() for k in fake.seen[0].headers}
    for name in ("keep-alive", "proxy-authorization", "te", "trailer", "x-hop-custom",
                 "proxy-connection", "upgrade"):
        assert name not in sent
    assert fake.seen[0].headers.get("Connection", "keep-alive").lower() == "keep-alive"


# --- the gateway's own endpoints ------------------------------------------------------------------


async def test_healthz_metrics_unknown_path_and_method(aiohttp_client: Any,
                                                      fakes: Fakes) -> None:
    fake = await fakes.start(dialect_at(3))
    gw = await gateway(aiohttp_client, one_route(dialect_at(0), upstream_config(fake)))
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
    for client in names():
        gw2 = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
        wrong = await gw2.get(_whole_path(client))
        assert wrong.status == 405
        assert wrong.headers["Content-Type"].startswith("application/json")
        assert "POST" in wrong.headers["Allow"]
        assert "GET" in error_message(client, await wrong.json())
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
    client = dialect_at(1)
    fake = await fakes.start(other(client))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    origin = {"Origin": "https://app.example.com"}
    resp = await ask(gw, client, stream=False, headers=origin)
    assert resp.status == 200
    assert "Access-Control-Allow-Origin" not in resp.headers
    pre = await gw.options("/c", headers={**origin, "Access-Control-Request-Method": "POST"})
    assert "Access-Control-Allow-Origin" not in pre.headers
    assert pre.status >= 400


async def test_cors_preflight_when_configured(aiohttp_client: Any, fakes: Fakes) -> None:
    client = dialect_at(2)
    fake = await fakes.start(other(client))
    cfg = one_route(client, upstream_config(fake))
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
    post = await ask(gw, client, stream=False, headers=origin)
    assert post.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert "X-Request-ID" in post.headers["Access-Control-Expose-Headers"]
    other_origin = await gw.options("/c", headers={"Origin": "https://evil.example.com",
                                                   "Access-Control-Request-Method": "POST"})
    assert "Access-Control-Allow-Origin" not in other_origin.headers
    assert fake.seen and all(s.path == "/chat" for s in fake.seen) and len(fake.seen) == 1



async def test_cors_origins_reload_when_on_and_need_a_restart_to_turn_on(
        aiohttp_client: Any, fakes: Fakes, tmp_path: Path, log_stream: io.StringIO) -> None:
    client = dialect_at(2)
    fake = await fakes.start(other(client))
    origin = {"Origin": "https://app.example.com"}
    started_off = tmp_path / "off.yaml"
    cfg = one_route(client, upstream_config(fake))
    started_off.write_text(yaml.safe_dump(cfg))
    gw = await aiohttp_client(create_app(load_config(started_off), config_path=started_off))
    started_off.write_text(yaml.safe_dump(
        {**cfg, "server": {"cors": {"allow_origins": ["https://app.example.com"]}}}))
    assert (await gw.post("/admin/reload")).status == 200
    assert "cors_config_needs_restart" in log_stream.getvalue()
    post = await ask(gw, client, stream=False, headers=origin)
    assert post.status == 200 and "Access-Control-Allow-Origin" not in post.headers
    # Started with origins, a reload's new ones apply at once, and no warning is logged.
    on = tmp_path / "on.yaml"
    on.write_text(yaml.safe_dump(
        {**cfg, "server": {"cors": {"allow_origins": ["https://a.example"]}}}))
    gw = await aiohttp_client(create_app(load_config(on), config_path=on))
    log_stream.seek(0)
    log_stream.truncate()
    on.write_text(yaml.safe_dump(
        {**cfg, "server": {"cors": {"allow_origins": ["https://app.example.com"]}}}))
    assert (await gw.post("/admin/reload")).status == 200
    assert "cors_config_needs_restart" not in log_stream.getvalue()
    post = await ask(gw, client, stream=False, headers=origin)
    assert post.headers["Access-Control-Allow-Origin"] == "https://app.example.com"

# --- errors, in the client's dialect --------------------------------------------------------------


@pytest.mark.parametrize("client", names())
async def test_body_over_limit_is_413(aiohttp_client: Any, fakes: Fakes, client: str) -> None:
    fake = await fakes.start(other(client))
    cfg = one_route(client, upstream_config(fake))
    cfg["server"] = {"max_body_bytes": 1000}
    gw = await gateway(aiohttp_client, cfg)
    big = orjson.dumps(client_request(client, stream=False, text="x" * 5000)[1])
    resp = await gw.post(_whole_path(client), data=big, headers=_JSON)
    assert resp.status == 413
    assert "1000" in error_message(client, await resp.json())

    async def chunked() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 500):
            yield big[i:i + 500]

    resp = await gw.post(_whole_path(client), data=chunked(), headers=_JSON)
    assert resp.status == 413
    error_message(client, await resp.json())
    ok = await ask(gw, client, stream=False)
    assert ok.status == 200
    assert len(fake.seen) == 1


@pytest.mark.parametrize("client", names())
async def test_request_errors_are_400_in_client_dialect(aiohttp_client: Any, fakes: Fakes,
                                                        client: str) -> None:
    fake = await fakes.start(other(client))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    bad = await gw.post(_whole_path(client), data=b"{not json", headers=_JSON)
    assert bad.status == 400
    assert bad.headers["Content-Type"].startswith("application/json")
    assert "JSON" in error_message(client, await bad.json())
    missing = await gw.post(_whole_path(client), json={"stream": False})
    assert missing.status == 400
    # the message names what is missing: a key every request of the dialect has
    _, good, _ = client_request(client, stream=False)
    message = error_message(client, await missing.json())
    assert any(key in message for key in good if key != "stream"), message
    assert fake.seen == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("client", names())
async def test_upstream_refused_is_502(aiohttp_client: Any, client: str, stream: bool) -> None:
    up = upstream_config(other(client), f"http://127.0.0.1:{closed_port()}/chat")
    gw = await gateway(aiohttp_client, one_route(client, up))
    resp = await ask(gw, client, stream=stream)
    assert resp.status == 502
    assert resp.headers["Content-Type"].startswith("application/json")
    assert error_message(client, await resp.json())


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("client", names())
async def test_upstream_timeout_is_504(aiohttp_client: Any, fakes: Fakes, client: str,
                                       stream: bool) -> None:
    fake = await fakes.start(other(client), Script(delay=3))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake, timeout=0.5)))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    resp = await ask(gw, client, stream=stream)
    assert resp.status == 504  # the timeout fired (the upstream answers after 3 s)
    # the connect has its own bound (connect_timeout, 10 s: a busy machine was seen to take
    # seconds over it), then timeout with room
    assert loop.time() - t0 < 10 + 4 * 0.5 + 2
    assert error_message(client, await resp.json())
    await asyncio.wait_for(fake.gone.wait(), 20)  # the gateway hung up on the slow upstream


@pytest.mark.parametrize("status", [400, 404, 500, 503])
@pytest.mark.parametrize(("client", "upstream"), PAIRS, ids=PAIR_IDS)
async def test_upstream_status_passed_on_with_its_message(
        aiohttp_client: Any, fakes: Fakes, client: str, upstream: str, status: int) -> None:
    """The upstream answers the status with its dialect's sample error body: the client gets the
    status, and the upstream's message in its own dialect."""
    fake = await fakes.start(upstream, Script(status=status))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    resp = await ask(gw, client, stream=status % 2 == 0)
    assert resp.status == status
    assert error_message(client, await resp.json()) == fake.error_text
    assert len(fake.seen) == 1


@pytest.mark.parametrize("client", names())
async def test_upstream_non_json_body_is_502(aiohttp_client: Any, fakes: Fakes,
                                             client: str) -> None:
    fake = await fakes.start(other(client), Script(body=b"<html><body>oops</body></html>",
                                                   content_type="text/html"))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    resp = await ask(gw, client, stream=False)
    assert resp.status == 502
    message = error_message(client, await resp.json())
    assert "oops" not in message


@pytest.mark.parametrize("upstream", names())
async def test_upstream_non_json_stream_is_502(aiohttp_client: Any, fakes: Fakes,
                                               upstream: str) -> None:
    fake = await fakes.start(upstream, Script(body=b"<html><body>oops</body></html>",
                                              content_type="text/html"))
    client = other(upstream)
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    resp = await ask(gw, client, stream=True)
    assert resp.status == 502, await resp.text()
    assert "oops" not in error_message(client, await resp.json())


@pytest.mark.parametrize("upstream", names())
async def test_upstream_empty_stream_is_502(aiohttp_client: Any, fakes: Fakes,
                                            upstream: str) -> None:
    fake = await fakes.start(upstream, Script(body=b"\n", content_type="text/event-stream"))
    client = other(upstream)
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    resp = await ask(gw, client, stream=True)
    assert resp.status == 502, await resp.text()
    assert "empty" in error_message(client, await resp.json())


@pytest.mark.parametrize("client", names())
async def test_upstream_html_error_page_not_shown(aiohttp_client: Any, fakes: Fakes,
                                                  client: str) -> None:
    fake = await fakes.start(other(client), Script(status=500, body=b"<html>Internal oops</html>",
                                                   content_type="text/html"))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    resp = await ask(gw, client, stream=False)
    assert resp.status == 500
    message = error_message(client, await resp.json())
    assert "oops" not in message and "500" in message


@pytest.mark.parametrize(("client", "upstream"), PAIRS, ids=PAIR_IDS)
async def test_mid_stream_error_becomes_error_event_without_clean_finish(
        aiohttp_client: Any, fakes: Fakes, client: str, upstream: str) -> None:
    """(Scripted: the upstream's own error event after two pieces of a known text.) The client
    reads the text so far, then the error, and nothing after it; no normal finish."""
    fake = await fakes.start(upstream, Script(error_after=2))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    resp = await ask(gw, client, stream=True)
    assert resp.status == 200
    seen = reader_for(client).read_stream(await resp.read())
    assert seen.error == "upstream broke down mid-answer"
    assert_failed_stream(seen, client)
    assert TEXT.startswith(seen.text) and seen.text != TEXT


# --- clients that go away -------------------------------------------------------------------------


def disconnect_counted_on(gw: TestClient[Any, Any],
                          route: str) -> Callable[[], Awaitable[bool]]:
    """A check for :func:`eventually`: one client disconnect counted on ``route`` and nothing
    left in flight there (the request was recorded)."""
    async def check() -> bool:
        s = await metric_samples(gw)
        def value(name: str) -> float | None:
            found = [v for (n, ls), v in s.items() if n == name and ("route", route) in ls]
            return sum(found) if found else None
        return (value("gateway_client_disconnects_total") == 1
                and value("gateway_inflight_requests") == 0)
    return check


async def disconnect_counted(gw: TestClient[Any, Any]) -> bool:
    """One client disconnect counted on route /c, and nothing left in flight."""
    s = await metric_samples(gw)
    return (sample(s, "gateway_client_disconnects_total", route="/c") == 1
            and sample(s, "gateway_inflight_requests", route="/c") == 0)


@pytest.mark.parametrize("client", names())
async def test_client_disconnect_mid_stream_closes_upstream(aiohttp_client: Any, fakes: Fakes,
                                                            client: str) -> None:
    never = asyncio.Event()
    fake = await fakes.start(other(client), Script(hold_after_first=never))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
    resp = await ask(gw, client, stream=True)
    await read_until_text(client, resp)
    resp.close()
    await asyncio.wait_for(fake.gone.wait(), 5)
    assert fake.finished == 0
    await eventually(lambda: disconnect_counted(gw))


@pytest.mark.parametrize("client", names())
async def test_client_disconnect_before_first_token_closes_upstream(
        aiohttp_client: Any, fakes: Fakes, client: str) -> None:
    never = asyncio.Event()
    fake = await fakes.start(other(client), Script(hold_before=never))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake, timeout=30)))
    task = asyncio.create_task(ask(gw, client, stream=True))
    await eventually(lambda: len(fake.seen) == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(fake.gone.wait(), 5)
    assert fake.finished == 0
    await eventually(lambda: disconnect_counted(gw))


# --- metrics and logs -----------------------------------------------------------------------------


def counting() -> str:
    """A dialect that reports token usage whole and streamed (the token metrics need one)."""
    return next(n for n in names()
                if get(n).capabilities.usage_whole and get(n).capabilities.usage_stream)


TRAFFIC_CLIENT = dialect_at(3)
DOWN_DIALECT = dialect_at(0)


async def traffic(aiohttp_client: Any, fakes: Fakes,
                  env: dict[str, str] | None = None) -> tuple[TestClient[Any, Any], FakeUpstream]:
    """Whole, streamed, failed and abandoned requests through a two-route gateway. The upstream
    answers a scripted answer, for its known token usage."""
    fake = await fakes.start(counting(), Script(scripted=True))
    cfg = {
        "upstreams": {
            "llm": upstream_config(fake, headers={"api-key": "${UPSTREAM_SECRET}"}),
            "down": upstream_config(DOWN_DIALECT, f"http://127.0.0.1:{closed_port()}/chat"),
        },
        "routes": [{"path": "/v1/chat", "dialect": TRAFFIC_CLIENT, "upstream": "llm"},
                   {"path": "/legacy", "dialect": DOWN_DIALECT, "upstream": "down"}],
    }
    gw = await gateway(aiohttp_client, cfg, env=env or {"UPSTREAM_SECRET": "s3cr3t-hdr-value"})
    auth = {"Authorization": "Bearer planted-client-secret-42"}
    whole = await ask(gw, TRAFFIC_CLIENT, stream=False, path="/v1/chat", headers=auth)
    assert whole.status == 200
    streamed = await ask(gw, TRAFFIC_CLIENT, stream=True, path="/v1/chat", headers=auth)
    assert streamed.status == 200
    assert reader_for(TRAFFIC_CLIENT).read_stream(await streamed.read()).text == TEXT
    failed = await ask(gw, DOWN_DIALECT, stream=False, path="/legacy", headers=auth)
    assert failed.status == 502
    return gw, fake


async def test_metrics_carry_labels_after_traffic(aiohttp_client: Any, fakes: Fakes) -> None:
    gw, fake = await traffic(aiohttp_client, fakes)
    # and one client that leaves mid-stream
    gate = asyncio.Event()
    fake.queue.append(Script(scripted=True, hold_after_first=gate))
    resp = await ask(gw, TRAFFIC_CLIENT, stream=True, path="/v1/chat")
    await read_until_text(TRAFFIC_CLIENT, resp)
    resp.close()
    await asyncio.wait_for(fake.gone.wait(), 5)
    await eventually(disconnect_counted_on(gw, "/v1/chat"))  # recorded: read the metrics

    s = await metric_samples(gw)
    ok = {"route": "/v1/chat", "client_dialect": TRAFFIC_CLIENT, "upstream": "llm",
          "upstream_dialect": fake.name}
    # the client that left had its 200 and its first chunks already, not its whole answer
    assert sample(s, "gateway_requests_total", **ok, status="200") == 2
    assert sample(s, "gateway_requests_total", **ok, status="499") == 1
    assert sample(s, "gateway_upstream_attempts_total", upstream="llm", outcome="cancelled") == 1
    assert sample(s, "gateway_requests_total", route="/legacy", client_dialect=DOWN_DIALECT,
                  upstream="down", upstream_dialect=DOWN_DIALECT, status="502") == 1
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
    assert sample(s, "gateway_tokens_total", upstream="llm", kind="prompt") == 2 * USAGE[0]
    assert sample(s, "gateway_tokens_total", upstream="llm", kind="completion") == 2 * USAGE[1]
    assert sample(s, "gateway_upstream_attempts_total", upstream="llm", outcome="ok") >= 2


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    configure_logging("json", "debug", stream=out)
    yield out
    structlog.reset_defaults()


async def test_access_log_per_request_without_secrets(aiohttp_client: Any, fakes: Fakes,
                                                      log_stream: io.StringIO) -> None:
    gw, fake = await traffic(aiohttp_client, fakes)
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
    assert access[0]["route"] == "/v1/chat" and access[0]["client_dialect"] == TRAFFIC_CLIENT
    assert access[0]["upstream"] == "llm" and access[0]["upstream_dialect"] == fake.name
    assert access[1]["stream"] is True
    assert access[2]["upstream_dialect"] == DOWN_DIALECT
    assert access[3]["request_id"] == "req-log-1"
    assert len({e["request_id"] for e in access}) == 4
    assert any(e["event"] == "upstream_error" for e in events)
    assert "planted-client-secret-42" not in text
    assert "s3cr3t-hdr-value" not in text


async def test_access_log_shows_unknown_paths_and_wrong_methods(
        aiohttp_client: Any, fakes: Fakes, log_stream: io.StringIO) -> None:
    client = dialect_at(1)
    fake = await fakes.start(other(client))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)))
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


@pytest.mark.parametrize("client", names())
async def test_upstream_silent_mid_stream_hits_idle_timeout(aiohttp_client: Any, fakes: Fakes,
                                                           client: str) -> None:
    never = asyncio.Event()
    fake = await fakes.start(other(client), Script(hold_after_first=never))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(
        fake, timeout=5, idle_timeout=0.5)))
    resp = await ask(gw, client, stream=True)
    assert resp.status == 200
    async with asyncio.timeout(4 * 0.5 + 2):  # idle_timeout with room, below timeout (5 s)
        data = await resp.read()
    seen = reader_for(client).read_stream(data)
    assert_failed_stream(seen, client)
    assert fake.said(True).startswith(seen.text) and seen.text
    await asyncio.wait_for(fake.gone.wait(), 5)
    s = await metric_samples(gw)
    assert sample(s, "gateway_upstream_errors_total", upstream="u", kind="timeout") == 1


async def test_large_chunked_body_over_limit_is_413(aiohttp_client: Any, fakes: Fakes) -> None:
    client = dialect_at(2)
    fake = await fakes.start(client)
    cfg = one_route(client, upstream_config(fake))
    cfg["server"] = {"max_body_bytes": 1000}
    gw = await gateway(aiohttp_client, cfg)

    async def chunked() -> AsyncIterator[bytes]:
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(200):
            yield b"x" * 16384
        yield b'"}]}'

    resp = await gw.post(_whole_path(client), data=chunked(), headers=_JSON)
    assert resp.status == 413
    error_message(client, await resp.json())
    assert fake.seen == []


class _BrokenTransport:
    """The gateway's upstream client with a bug planted (a plain exception, not the
    UpstreamError a failed upstream is): the exchange meets it where it sends the request."""

    async def send(self, request: UpstreamRequest) -> UpstreamResponse:
        raise RuntimeError("a planted gateway bug")

    def in_use(self) -> int:
        return 0

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("client", names())
async def test_internal_error_answers_500_in_client_dialect(
        aiohttp_client: Any, fakes: Fakes, client: str) -> None:
    fake = await fakes.start(other(client))
    gw = await gateway(aiohttp_client, one_route(client, upstream_config(fake)),
                       transport=_BrokenTransport())
    resp = await ask(gw, client, stream=True)
    assert resp.status == 500
    message = error_message(client, await resp.json())
    assert "planted" not in message
    s = await metric_samples(gw)
    assert sample(s, "gateway_requests_total", route="/c", status="500") == 1
    assert sample(s, "gateway_inflight_requests", route="/c") == 0
    assert fake.seen == []  # the planted bug is in the gateway, before any byte went out
