"""Where requests go, which credentials go with them, and what error bodies and logs give away.

- Upstream URLs come from the config only: no request path, ``Host`` or ``X-Forwarded-*`` header
  steers the gateway anywhere else. A second server (``evil``) stands for "anywhere else" and must
  never see a connection; the real upstream's request log must show only the configured path.
- The client's credentials go to an upstream only when the gateway checks no keys and the
  upstream has none of its own (headers or URL userinfo).
- Secrets (upstream headers, URL userinfo, the client's key) appear in no log line and no error
  body; error bodies hold no stack trace and no internal address.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
import structlog
from fakes import dialect_at, reader_for
from faults.harness import (
    TIMEOUTS,
    UPSTREAM_CLIENTS,
    client_request,
    gateway_config,
    settle,
)
from faults.upstream import TEXT, FaultUpstream, closed_port

from gateway.app import create_app
from gateway.canonical import ChatError
from gateway.config import parse_config
from gateway.dialects import get, names
from gateway.log import configure_logging

# Dialects by registry position: where requests go and what they carry does not depend on them.
CLIENT, UPSTREAM, OTHER = dialect_at(3), dialect_at(0), dialect_at(2)
UP_SECRET = "up-secret-8d1f0a"
URL_SECRET = "url-secret-77c2e9"
CLIENT_SECRET = "client-secret-3b5a44"
GATEWAY_KEY = "gw-key-c0ffee12"
ANSWERING = {"timeout": 5.0, "connect_timeout": 3.0}
"""Timeouts for an upstream that answers at once: none of these tests is about time, and a busy
machine must not make one of them so."""
SILENT = frozenset({"never", "slow"})
"""The faults that end only in the gateway's own timeout."""


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    saved = structlog.get_config()
    buf = io.StringIO()
    configure_logging(stream=buf, level="debug")
    yield buf
    structlog.configure(**saved)


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FaultUpstream, FaultUpstream]]:
    async with FaultUpstream() as up, FaultUpstream() as evil:
        yield up, evil


async def _raw(port: int, request: bytes, limit: float = 3.0) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        buf = b""
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(limit):
                while chunk := await reader.read(65536):
                    buf += chunk
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return int(buf.split(b" ", 2)[1]), buf


def _asked(dialect: str, stream: bool, path: str = "/chat") -> tuple[str, bytes, dict[str, str]]:
    """A request as a client of ``dialect`` sends it: path, JSON body, headers."""
    sent, body, headers = client_request(dialect, stream, path)
    return sent, orjson.dumps(body), headers


def _post(target: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"POST {target} HTTP/1.1", "Content-Type: application/json",
             f"Content-Length: {len(body)}", "Connection: close"]
    hdrs = {"Host": "127.0.0.1", **(headers or {})}
    lines += [f"{k}: {v}" for k, v in hdrs.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# --- where requests go -------------------------------------------------------------------------


def _targets(evil: int) -> list[str]:
    return [
        "/chat",
        "/chat/",
        "/../chat",
        "/chat/../chat",
        "/x/../chat",
        "/metrics/../chat",
        "/%2e%2e/chat",
        "/chat%2f..%2f..%2fevil",
        "/%2Fchat",
        "/chat/%2e%2e/%2e%2e/admin/reload",
        "//evil.example/chat",
        f"//127.0.0.1:{evil}/chat",
        "///chat",
        "/chat?url=http://evil.example/&upstream=evil",
        f"http://127.0.0.1:{evil}/chat",
        "http://evil.example/chat",
        f"http://user:pw@127.0.0.1:{evil}/chat",
        "/CHAT",
        "/chat;evil",
        "/chat%00",
        "/chat\\..\\evil",
    ]


async def test_no_path_reaches_anything_but_the_configured_upstream(
        aiohttp_client: Any, servers: tuple[FaultUpstream, FaultUpstream],
        logs: io.StringIO) -> None:
    up, evil = servers
    configured = up.url(UPSTREAM, "ok")
    app = create_app(gateway_config(configured, UPSTREAM, CLIENT, upstream_extra=ANSWERING))
    client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
    _, body, headers = _asked(CLIENT, False)
    proxied = 0
    for target in _targets(evil.port):
        status, raw = await _raw(client.server.port, _post(target, body, headers))
        assert status in (200, 400, 404), (target, raw[:300])
        if status == 200:
            proxied += 1
            answer = orjson.loads(raw.split(b"\r\n\r\n", 1)[1])
            assert reader_for(CLIENT).read_whole(answer).text == TEXT
        elif status == 404:
            assert b"no route" in raw or b"Not Found" in raw
    await settle(app)
    assert evil.connections == 0
    assert len(up.requests) == proxied
    assert {r.target for r in up.requests} <= {f"/{UPSTREAM}/ok/chat"}
    assert "internal_error" not in logs.getvalue()


async def test_host_and_forwarded_headers_do_not_steer(
        aiohttp_client: Any, servers: tuple[FaultUpstream, FaultUpstream]) -> None:
    up, evil = servers
    app = create_app(gateway_config(up.url(UPSTREAM, "ok"), UPSTREAM, CLIENT,
                                    upstream_extra=ANSWERING))
    client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
    steer = {
        "Host": f"127.0.0.1:{evil.port}",
        "X-Forwarded-Host": f"127.0.0.1:{evil.port}",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-For": "10.0.0.1",
        "X-Forwarded-Port": str(evil.port),
        "Forwarded": f"for=10.0.0.1;host=127.0.0.1:{evil.port};proto=https",
        "X-Original-URL": f"http://127.0.0.1:{evil.port}/chat",
        "X-Rewrite-URL": "/evil",
    }
    for stream in (False, True):
        path, body, headers = _asked(CLIENT, stream)
        status, raw = await _raw(client.server.port, _post(path, body, {**headers, **steer}))
        assert status == 200, raw[:300]
    assert evil.connections == 0
    assert len(up.requests) == 2
    for seen, stream in zip(up.requests, (False, True), strict=True):
        want = "/chat" + (get(UPSTREAM).stream_path or "") if stream else "/chat"
        assert seen.target == f"/{UPSTREAM}/ok{want}"
        assert seen.header("Host") == f"127.0.0.1:{up.port}"
        names = {k.lower() for k, _ in seen.headers}
        assert not names & {"x-forwarded-host", "x-forwarded-port", "forwarded",
                            "x-original-url", "x-rewrite-url"}
        # The gateway's own chain, started afresh: the peer is no trusted proxy.
        assert seen.header("X-Forwarded-For") == "127.0.0.1"
        assert seen.header("X-Forwarded-Proto") == "http"


async def test_paths_that_are_no_route_are_404(
        aiohttp_client: Any, servers: tuple[FaultUpstream, FaultUpstream]) -> None:
    up, _ = servers
    app = create_app(gateway_config(up.url(UPSTREAM, "ok"), UPSTREAM, CLIENT,
                                    upstream_extra=ANSWERING))
    client = await aiohttp_client(app)
    _, body, headers = client_request(CLIENT, False)
    # every other dialect's conventional path and stream path too: no route is implied
    others = {get(n).default_path for n in names()} | {
        "/chat" + get(n).stream_path for n in names() if get(n).stream_path}
    if get(CLIENT).stream_path:  # the client's own stream path is served: the route's
        others.discard("/chat" + get(CLIENT).stream_path)
    others.discard("/chat")
    for path in ("/chat2", "/etc/passwd", "/admin", *sorted(others)):
        async with client.post(path, json=body, headers=headers) as resp:
            assert resp.status == 404, path
    assert up.requests == []


# --- credentials -------------------------------------------------------------------------------


def _config(url: str, client: str, *, headers: dict[str, str] | None = None,
            api_keys: list[str] | None = None, upstream_client: str = "fast") -> Any:
    data: dict[str, Any] = {
        "upstreams": {"up": {"dialect": UPSTREAM, "url": url, "headers": headers or {},
                             **ANSWERING}},
        "routes": [{"path": "/chat", "dialect": client, "upstream": "up"}],
        "health": {"failure_threshold": 1000},
        "server": {"upstream_client": upstream_client},
    }
    if api_keys:
        data["auth"] = {"api_keys": api_keys}
    return parse_config(data, env={})


def _leaks(up: FaultUpstream, secret: str) -> list[str]:
    return [f"{r.target} {r.headers}" for r in up.requests
            if secret in str(r.headers) or secret.encode() in r.body]


@pytest.mark.parametrize("upstream_client", UPSTREAM_CLIENTS)
@pytest.mark.parametrize("own", ["authorization", "api-key", "userinfo", "userinfo+header"])
async def test_client_credentials_never_reach_an_upstream_that_has_its_own(
        aiohttp_client: Any, servers: tuple[FaultUpstream, FaultUpstream], own: str,
        upstream_client: str) -> None:
    up, _ = servers
    url = up.url(UPSTREAM, "ok")
    headers: dict[str, str] = {}
    if own == "authorization":
        headers = {"Authorization": f"Bearer {UP_SECRET}"}
    elif own == "api-key":
        headers = {"api-key": UP_SECRET}
    else:
        url = url.replace("http://", f"http://svc:{UP_SECRET}@")
        if own == "userinfo+header":  # the explicit header wins over the URL's userinfo
            headers = {"Authorization": "Bearer from-header"}
    app = create_app(_config(url, CLIENT, headers=headers, upstream_client=upstream_client))
    client = await aiohttp_client(app)
    for stream in (False, True):
        path, body, asked = client_request(CLIENT, stream)
        async with client.post(path, json=body, headers={
                **asked, "Authorization": f"Bearer {CLIENT_SECRET}",
                "api-key": CLIENT_SECRET}) as resp:
            assert resp.status == 200, await resp.read()
            await resp.read()
    assert len(up.requests) == 2
    assert _leaks(up, CLIENT_SECRET) == []
    for seen in up.requests:
        if own == "authorization":
            assert seen.header("Authorization") == f"Bearer {UP_SECRET}"
        elif own == "api-key":
            assert seen.header("api-key") == UP_SECRET
            assert seen.header("Authorization") is None
        elif own == "userinfo":
            basic = base64.b64encode(f"svc:{UP_SECRET}".encode()).decode()
            assert seen.header("Authorization") == f"Basic {basic}"
        else:
            assert seen.header("Authorization") == "Bearer from-header"


def _carries_codes(dialect: str) -> bool:
    """Whether the dialect's error bodies carry an error code (one it writes it reads back)."""
    d = get(dialect)
    err = d.parse_error(d.render_error(ChatError(401, "m", code="UNAUTHORIZED")))
    return err is not None and err.code == "UNAUTHORIZED"


@pytest.mark.parametrize("client_dialect", names())
async def test_the_gateways_own_key_is_never_forwarded(
        aiohttp_client: Any, servers: tuple[FaultUpstream, FaultUpstream],
        client_dialect: str) -> None:
    up, _ = servers
    app = create_app(_config(up.url(UPSTREAM, "ok"), client_dialect, api_keys=[GATEWAY_KEY]))
    client = await aiohttp_client(app)
    path, body, asked = client_request(client_dialect, False)
    for headers in ({"Authorization": f"Bearer {GATEWAY_KEY}"}, {"api-key": GATEWAY_KEY}):
        async with client.post(path, json=body, headers={**asked, **headers}) as resp:
            assert resp.status == 200, await resp.read()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"api-key": "wrong"},
                    {"Authorization": f"Basic {GATEWAY_KEY}"}):
        async with client.post(path, json=body, headers={**asked, **headers}) as resp:
            assert resp.status == 401
            answer = await resp.json()
            message = reader_for(client_dialect).read_error(answer)
            if _carries_codes(client_dialect):
                err = get(client_dialect).parse_error(answer)
                assert err is not None and err.code == "UNAUTHORIZED"
            assert "wrong" not in message and GATEWAY_KEY not in message
    assert len(up.requests) == 2
    assert _leaks(up, GATEWAY_KEY) == []
    assert all(seen.header("Authorization") is None for seen in up.requests)


async def test_without_keys_of_its_own_the_clients_authorization_passes_through(
        aiohttp_client: Any, servers: tuple[FaultUpstream, FaultUpstream]) -> None:
    """The documented pass-through: no gateway keys, no upstream credentials."""
    up, _ = servers
    app = create_app(_config(up.url(UPSTREAM, "ok"), OTHER))
    client = await aiohttp_client(app)
    path, body, asked = client_request(OTHER, False)
    async with client.post(path, json=body,
                           headers={**asked, "Authorization": f"Bearer {CLIENT_SECRET}",
                                    "api-key": CLIENT_SECRET, "Cookie": "s=1"}) as resp:
        assert resp.status == 200
    seen = up.requests[0]
    assert seen.header("Authorization") == f"Bearer {CLIENT_SECRET}"
    assert seen.header("api-key") is None and seen.header("Cookie") is None


# --- what logs and error bodies give away ------------------------------------------------------

LEAKS = ("Traceback", 'File "', "<html", "hunter2")


@pytest.mark.parametrize("client_dialect", names())
async def test_secrets_and_internals_stay_out_of_logs_and_error_bodies(
        aiohttp_client: Any, servers: tuple[FaultUpstream, FaultUpstream], logs: io.StringIO,
        client_dialect: str) -> None:
    up, _ = servers
    userinfo = f"svc:{URL_SECRET}@"
    faults = ["ok", "never", "html500", "notjson", "r429", "errbody", "malformed", "cut",
              "reset_early", "slow"]
    upstreams: dict[str, Any] = {}
    routes = []
    for fault in [*faults, "refused"]:
        port = closed_port() if fault == "refused" else up.port
        url = f"http://{userinfo}127.0.0.1:{port}/{UPSTREAM}/{fault}/chat"
        # Only the silent faults wait out the short timeouts: the answering ones keep roomy ones,
        # so that 22 exchanges at once on a starved CI worker still end in their own statuses.
        timeouts = TIMEOUTS if fault in SILENT else ANSWERING
        upstreams[fault] = {"dialect": UPSTREAM, "url": url, **timeouts,
                            "headers": {"X-Api-Token": UP_SECRET}}
        routes.append({"path": f"/{fault}", "dialect": client_dialect, "upstream": fault})
    cfg = parse_config({"upstreams": upstreams, "routes": routes,
                        "health": {"failure_threshold": 1000}}, env={})
    app = create_app(cfg)
    client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
    bodies: list[bytes] = []
    statuses = set()

    async def ask(route: str, stream: bool) -> None:
        path, body, asked = client_request(client_dialect, stream, route)
        async with client.post(path, json=body, headers={
                **asked, "Authorization": f"Bearer {CLIENT_SECRET}"}) as resp:
            raw = await resp.read()
            statuses.add(resp.status)
            if resp.status != 200 or b"error" in raw:
                bodies.append(raw)

    await asyncio.gather(*(ask(r["path"], s) for r in routes for s in (False, True)))
    for path in ("/api/status", "/metrics", "/readyz", "/nope"):
        async with client.get(path) as resp:
            bodies.append(await resp.read())
    await settle(app)
    assert {200, 429, 500, 502, 504} <= statuses
    log_text = logs.getvalue()
    assert "upstream_error" in log_text  # the failures were logged...
    for secret in (UP_SECRET, URL_SECRET, CLIENT_SECRET):  # ...without any secret
        assert secret not in log_text, secret
    internal = f"127.0.0.1:{up.port}"
    for raw in bodies:
        text = raw.decode("utf-8", "replace")
        for bad in (UP_SECRET, URL_SECRET, CLIENT_SECRET, *LEAKS):
            assert bad not in text, (bad, text[:500])
        if not text.startswith("# HELP") and '"upstreams"' not in text:
            assert internal not in text, text[:500]  # /api/status names upstream URLs
