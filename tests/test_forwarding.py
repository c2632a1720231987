"""What the client's request hands on upstream and what the access log says of the client:
``X-Forwarded-For``/``X-Forwarded-Proto`` (a chain kept only from trusted proxies), the client's
address behind them, ``traceparent``/``tracestate``, ``User-Agent`` as configured, an OpenAI
organization and project only beside the client's own key, and the request's and answer's byte
counts. Through the real app over the in-memory transport (which records every header it is
given), plus one real upstream socket for what the HTTP client itself adds."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any
from unittest import mock

import orjson
import pytest
import structlog
from aiohttp.test_utils import TestClient, make_mocked_request
from fakes import Fakes, client_request, dialect_at, upstream_config

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import Dialect, get
from gateway.errors import ConfigError
from gateway.forwarding import client_address, forwarded_headers
from gateway.log import configure_logging
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

D = get(dialect_at(0))  # some dialect, both sides: this is about headers, not translation
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def asked_stream(d: Dialect, req: UpstreamRequest) -> bool:
    """Whether the gateway asked the upstream (of dialect ``d``) for a stream."""
    if d.stream_path:
        return req.url.endswith(d.stream_path)
    if req.headers.get("Accept") == "text/event-stream":
        return True
    body = orjson.loads(req.body)
    return isinstance(body, dict) and body.get("stream") is True


def answer(d: Dialect, stream: bool) -> MemoryResponse:
    if stream:
        return MemoryResponse(200, {"Content-Type": d.stream_content_type},
                              d.samples.streams["text"])
    return MemoryResponse(200, {"Content-Type": "application/json"},
                          orjson.dumps(d.samples.responses["text"]))


async def start(aiohttp_client: Any, server: dict[str, Any] | None = None,
                upstream: dict[str, Any] | None = None, auth: dict[str, Any] | None = None,
                ) -> tuple[TestClient[Any, Any], MemoryTransport]:
    async def handler(req: UpstreamRequest) -> MemoryResponse:
        return answer(D, asked_stream(D, req))

    transport = MemoryTransport(handler)
    cfg = {"server": server or {}, "auth": auth or {},
           "upstreams": {"u": {"dialect": D.name, "url": "http://u.test/chat",
                               "model": "m", **(upstream or {})}},
           "routes": [{"path": "/c", "dialect": D.name, "upstream": "u"}]}
    app = create_app(parse_config(cfg, env={}), transport=transport)
    client: TestClient[Any, Any] = await aiohttp_client(app)
    return client, transport


async def sent(client: TestClient[Any, Any], transport: MemoryTransport,
               headers: dict[str, str] | list[tuple[str, str]]) -> dict[str, str]:
    path, body, _ = client_request(D.name, stream=False)
    resp = await client.post(path, json=body, headers=headers)
    assert resp.status == 200, await resp.text()
    await resp.read()
    return {k.lower(): v for k, v in transport.requests[-1].headers.items()}


# --- X-Forwarded-For / -Proto and the client's address ---------------------------------------


async def test_an_untrusted_peer_starts_a_new_chain(aiohttp_client: Any) -> None:
    client, transport = await start(aiohttp_client)
    h = await sent(client, transport, {"X-Forwarded-For": "6.6.6.6",
                                       "X-Forwarded-Proto": "https"})
    assert h["x-forwarded-for"] == "127.0.0.1"  # the planted address is not passed on
    assert h["x-forwarded-proto"] == "http"


async def test_a_trusted_peer_has_its_chain_kept_and_extended(aiohttp_client: Any) -> None:
    client, transport = await start(aiohttp_client,
                                    {"trusted_proxies": ["127.0.0.0/8", "10.0.0.0/8"]})
    h = await sent(client, transport, [("X-Forwarded-For", "203.0.113.7, 10.0.0.5"),
                                       ("X-Forwarded-For", "10.0.0.6"),
                                       ("X-Forwarded-Proto", "https, http")])
    assert h["x-forwarded-for"] == "203.0.113.7, 10.0.0.5, 10.0.0.6, 127.0.0.1"
    assert h["x-forwarded-proto"] == "https"
    h = await sent(client, transport, {})
    assert h["x-forwarded-for"] == "127.0.0.1" and h["x-forwarded-proto"] == "http"


def request_from(peer: str, headers: dict[str, str]) -> Any:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (peer, 1234) if name == "peername" else default)
    return make_mocked_request("POST", "/c", headers=headers, transport=transport)


@pytest.mark.parametrize(("peer", "chain", "trusted", "client"), [
    ("198.51.100.1", "203.0.113.7", [], "198.51.100.1"),
    ("198.51.100.1", "203.0.113.7", ["10.0.0.0/8"], "198.51.100.1"),  # peer not trusted
    ("10.0.0.2", "203.0.113.7, 10.0.0.9", ["10.0.0.0/8"], "203.0.113.7"),
    ("10.0.0.2", "198.51.100.5, 203.0.113.7", ["10.0.0.0/8"], "203.0.113.7"),  # the nearest
    ("10.0.0.2", "", ["10.0.0.0/8"], "10.0.0.2"),
    ("10.0.0.2", "10.0.0.3, 10.0.0.4", ["10.0.0.0/8"], "10.0.0.3"),  # all ours: the farthest
    ("10.0.0.2", "203.0.113.7, unknown", ["10.0.0.0/8"], "unknown"),  # never trusted
    ("::ffff:10.0.0.2", "203.0.113.7", ["10.0.0.0/8"], "203.0.113.7"),  # v4-mapped peer
    ("fd00::1", "2001:db8::7", ["fd00::/8"], "2001:db8::7"),
    ("127.0.0.1", "203.0.113.7", ["127.0.0.1"], "203.0.113.7"),  # a plain address
])
def test_the_client_behind_trusted_proxies(peer: str, chain: str, trusted: list[str],
                                           client: str) -> None:
    headers = {"X-Forwarded-For": chain} if chain else {}
    request = request_from(peer, headers)
    assert client_address(request, trusted) == client
    passed_on = forwarded_headers(request, trusted)["X-Forwarded-For"]
    peer_trusted = trusted and client != peer
    assert passed_on == (f"{chain}, {peer}" if chain and peer_trusted else peer)


def test_trusted_proxies_must_be_addresses_or_networks() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"server": {"trusted_proxies": ["10.0.0.0/8", "proxy.internal"]},
                      "upstreams": {}, "routes": [{"path": "/c", "dialect": D.name,
                                                   "upstream": "u"}]}, env={})
    assert any(w == "server.trusted_proxies" and "proxy.internal" in m
               for w, m in e.value.problems), e.value.problems


# --- trace context, user agent, OpenAI organization ------------------------------------------


async def test_trace_context_is_passed_on_unchanged_when_tracing_is_off(
        aiohttp_client: Any) -> None:
    client, transport = await start(aiohttp_client)
    h = await sent(client, transport, {"traceparent": TRACEPARENT, "tracestate": "vendor=1"})
    assert h["traceparent"] == TRACEPARENT and h["tracestate"] == "vendor=1"
    h = await sent(client, transport, {})
    assert "traceparent" not in h and "tracestate" not in h


@pytest.mark.parametrize(("setting", "expected"), [
    ("pass", "client-app/2.1"), ("none", None), ("chat-gateway/9", "chat-gateway/9")])
async def test_user_agent_as_configured(aiohttp_client: Any, setting: str,
                                        expected: str | None) -> None:
    client, transport = await start(aiohttp_client, {"upstream_user_agent": setting})
    h = await sent(client, transport, {"User-Agent": "client-app/2.1"})
    assert h.get("user-agent") == expected


async def test_an_upstreams_own_user_agent_wins(aiohttp_client: Any) -> None:
    client, transport = await start(aiohttp_client, upstream={"headers": {
        "User-Agent": "fixed/1", "X-Forwarded-For": "hidden"}})
    h = await sent(client, transport, {"User-Agent": "client-app/2.1"})
    assert h["user-agent"] == "fixed/1" and h["x-forwarded-for"] == "hidden"


ORG = {"OpenAI-Organization": "org-abc", "OpenAI-Project": "proj_123"}


async def test_openai_organization_goes_with_the_clients_own_key(aiohttp_client: Any) -> None:
    client, transport = await start(aiohttp_client)
    h = await sent(client, transport, {"Authorization": "Bearer sk-client", **ORG})
    assert h["authorization"] == "Bearer sk-client"
    assert h["openai-organization"] == "org-abc" and h["openai-project"] == "proj_123"


async def test_openai_organization_never_goes_beside_the_upstreams_key(
        aiohttp_client: Any) -> None:
    client, transport = await start(aiohttp_client, upstream={"headers": {
        "Authorization": "Bearer sk-upstream"}})
    h = await sent(client, transport, {"Authorization": "Bearer sk-client", **ORG})
    assert h["authorization"] == "Bearer sk-upstream"
    assert "openai-organization" not in h and "openai-project" not in h
    client, transport = await start(aiohttp_client, auth={"api_keys": ["gw-key"]})
    h = await sent(client, transport, {"Authorization": "Bearer gw-key", **ORG})
    assert "authorization" not in h and "openai-organization" not in h


async def test_what_the_http_client_sends_on_a_real_socket(aiohttp_client: Any,
                                                           fakes: Fakes) -> None:
    """``none`` means none: the HTTP client adds no user agent of its own either."""
    fake = await fakes.start(D.name)
    path, body, _ = client_request(D.name, stream=False)
    for setting, expected in (("none", None), ("pass", "client-app/2.1")):
        cfg = {"server": {"upstream_user_agent": setting},
               "upstreams": {"u": upstream_config(fake)},
               "routes": [{"path": "/c", "dialect": D.name, "upstream": "u"}]}
        client = await aiohttp_client(create_app(parse_config(cfg, env={})))
        resp = await client.post(path, json=body, headers={
            "User-Agent": "client-app/2.1", "traceparent": TRACEPARENT})
        assert resp.status == 200
        seen = fake.seen[-1].headers
        assert seen.get("User-Agent") == expected
        assert seen["traceparent"] == TRACEPARENT
        assert seen["X-Forwarded-For"] == "127.0.0.1"
        assert seen["X-Forwarded-Proto"] == "http"


# --- the access log ------------------------------------------------------------------------------


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    yield out
    structlog.reset_defaults()


def access_lines(log: io.StringIO) -> list[dict[str, Any]]:
    return [e for e in map(orjson.loads, log.getvalue().splitlines()) if e["event"] == "access"]


async def test_the_access_log_has_client_agent_and_bytes(aiohttp_client: Any,
                                                        log_stream: io.StringIO) -> None:
    client, _ = await start(aiohttp_client, {"trusted_proxies": ["127.0.0.1/32"]})
    sizes = []
    for stream in (False, True):
        path, body, headers = client_request(D.name, stream=stream)
        raw = orjson.dumps(body)
        resp = await client.post(path, data=raw, headers={
            **headers, "Content-Type": "application/json", "User-Agent": "client-app/2.1",
            "X-Forwarded-For": "203.0.113.7"})
        got = await resp.read()
        assert resp.status == 200
        sizes.append((len(raw), len(got)))
    refused = await client.post("/c", data=b"{not json", headers={"User-Agent": "x"})
    refused_body = await refused.read()
    unknown = await client.get("/nowhere", headers={"User-Agent": "scanner"})
    unknown_body = await unknown.read()
    access = access_lines(log_stream)
    assert len(access) == 4
    for e, (sent_bytes, got_bytes) in zip(access[:2], sizes, strict=True):
        assert e["client"] == "203.0.113.7" and e["user_agent"] == "client-app/2.1"
        assert e["request_bytes"] == sent_bytes and e["response_bytes"] == got_bytes
    assert access[1]["stream"] is True
    assert access[2]["status"] == 400
    assert access[2]["request_bytes"] == 9 and access[2]["response_bytes"] == len(refused_body)
    assert access[3]["status"] == 404 and access[3]["user_agent"] == "scanner"
    assert access[3]["client"] == "127.0.0.1"  # no chain sent: the (trusted) peer itself
    assert access[3]["response_bytes"] == len(unknown_body)
