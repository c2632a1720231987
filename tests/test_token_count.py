"""Token counts beside the routes whose dialect declares a count endpoint: where (the route's
path and the declared suffix), from whom (the upstream's own count endpoint when its dialect has
one, else an estimate), in whose shape (the client's), and the errors in the client's dialect.
Everything is derived from the registry's declarations. The real Anthropic SDK counting through
another dialect's upstream: tests/dialects/test_anthropic_sdk.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.canonical import ChatError, ChatRequest, Message, ToolDef
from gateway.config import parse_config
from gateway.dialects import DIALECTS, Dialect
from gateway.dialects import count_path as dialect_count_path
from gateway.errors import UpstreamError
from gateway.token_count import CHARS_PER_TOKEN, HEADER, count_url, count_url_for, estimate
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

COUNTING = [d for d in DIALECTS.values() if d.token_count is not None]
SILENT = [d for d in DIALECTS.values() if d.token_count is None]
PAIRS = [(c, u) for c in COUNTING for u in DIALECTS.values()]
UP_URL = "http://up.test/v1/chat?api-version=1"

Handler = Callable[[UpstreamRequest], Awaitable[MemoryResponse]]


def test_the_registry_has_dialects_that_count_and_some_that_do_not() -> None:
    # Without both kinds, the upstream and the estimate paths below would not both be tested.
    assert COUNTING and SILENT


def count_path(d: Dialect, route: str) -> str:
    where = dialect_count_path(d, route, "m")
    assert where is not None
    return where


def count_body(d: Dialect) -> bytes:
    """The dialect's text sample as its clients send it to count: cut to what counting takes."""
    assert d.token_count is not None
    return orjson.dumps(d.token_count.request(d.samples.requests["text"]))


async def start(aiohttp_client: Any, client: Dialect, upstream: Dialect, handler: Handler,
                **cfg: Any) -> tuple[TestClient[Any, Any], MemoryTransport]:
    transport = MemoryTransport(handler)
    config = parse_config({
        "upstreams": {"u": {"dialect": upstream.name, "url": UP_URL, "model": "up-model"}},
        "routes": [{"path": "/team" + client.default_path, "dialect": client.name,
                    "upstream": "u"}], **cfg}, env={})
    test_client: TestClient[Any, Any] = await aiohttp_client(
        create_app(config, transport=transport))
    return test_client, transport


async def never(req: UpstreamRequest) -> MemoryResponse:
    raise AssertionError(f"no upstream is asked ({req.url})")


@pytest.mark.parametrize(("c", "u"), PAIRS, ids=[f"{c.name}->{u.name}" for c, u in PAIRS])
async def test_a_count_in_the_clients_shape_from_the_upstream_or_an_estimate(
        aiohttp_client: Any, c: Dialect, u: Dialect) -> None:
    theirs = u.token_count

    async def upstream(req: UpstreamRequest) -> MemoryResponse:
        assert theirs is not None
        return MemoryResponse(200, {"Content-Type": "application/json"},
                              orjson.dumps(theirs.render(1234)))

    client, transport = await start(aiohttp_client, c, u, upstream if theirs else never)
    resp = await client.post(count_path(c, "/team" + c.default_path), data=count_body(c))
    assert resp.status == 200, await resp.text()
    assert c.token_count is not None
    body = await resp.json()
    if theirs is not None:
        assert resp.headers[HEADER] == "upstream"
        assert body == c.token_count.render(1234)
        (sent,) = transport.requests
        # (the model the client named, in its body or its path, else the upstream's)
        asked = c.parse_request(orjson.loads(count_body(c))).model
        assert sent.url in {count_url_for(u, UP_URL, m) for m in (asked, "m", "up-model")}
        assert set(orjson.loads(sent.body)) <= theirs.request_keys
    else:
        assert resp.headers[HEADER] == "estimate"
        tokens = c.token_count.parse(body)
        assert tokens is not None and tokens > 0
        assert body == c.token_count.render(tokens)
        assert tokens == estimate(c.parse_request(orjson.loads(count_body(c))))


def test_the_estimate_is_characters_over_four_of_the_text_and_the_tools() -> None:
    text = "x" * (CHARS_PER_TOKEN * 100)
    assert estimate(ChatRequest([Message("user", text)])) == 100
    assert estimate(ChatRequest([Message("system", text), Message("user", text)])) == 200
    tool = ToolDef("weather", "Weather in a city", {"type": "object"})
    with_tool = estimate(ChatRequest([Message("user", text)], tools=[tool]))
    tool_json = orjson.dumps({"name": "weather", "description": "Weather in a city",
                              "parameters": {"type": "object"}})
    assert with_tool == 100 + -(-len(tool_json) // CHARS_PER_TOKEN)


def test_the_count_url_is_the_chat_url_with_the_suffix_before_the_query() -> None:
    assert count_url("https://a.test/v1/messages", "/count_tokens") == \
        "https://a.test/v1/messages/count_tokens"
    assert count_url("https://a.test/openai/v1/responses/?api-version=x", "/input_tokens") == \
        "https://a.test/openai/v1/responses/input_tokens?api-version=x"


COUNTING_UPSTREAMS = [(c, u) for c, u in PAIRS if u.token_count is not None]
IDS = [f"{c.name}->{u.name}" for c, u in COUNTING_UPSTREAMS]


@pytest.mark.parametrize(("c", "u"), COUNTING_UPSTREAMS, ids=IDS)
async def test_an_upstream_without_the_endpoint_gives_an_estimate(
        aiohttp_client: Any, c: Dialect, u: Dialect) -> None:
    async def missing(req: UpstreamRequest) -> MemoryResponse:
        return MemoryResponse(404, {"Content-Type": "text/html"}, b"<h1>Not Found</h1>")

    client, _ = await start(aiohttp_client, c, u, missing)
    resp = await client.post(count_path(c, "/team" + c.default_path), data=count_body(c))
    assert resp.status == 200 and resp.headers[HEADER] == "estimate"


@pytest.mark.parametrize(("c", "u"), COUNTING_UPSTREAMS, ids=IDS)
async def test_upstream_errors_reach_the_client_in_its_dialect(
        aiohttp_client: Any, c: Dialect, u: Dialect) -> None:
    async def refusing(req: UpstreamRequest) -> MemoryResponse:
        return MemoryResponse(400, {"Content-Type": "application/json"}, orjson.dumps(
            u.render_error(ChatError(400, "messages: too many", code="invalid_request"))))

    async def broken(req: UpstreamRequest) -> MemoryResponse:
        raise UpstreamError("connect", "refused by http://up.test")

    async def garbled(req: UpstreamRequest) -> MemoryResponse:
        return MemoryResponse(200, {"Content-Type": "application/json"}, b'{"tokens": 3}')

    path = count_path(c, "/team" + c.default_path)
    for handler, status, words in ((refusing, 400, "too many"), (broken, 502, "reached"),
                                   (garbled, 502, "could not be read")):
        client, _ = await start(aiohttp_client, c, u, handler)
        resp = await client.post(path, data=count_body(c))
        assert resp.status == status, handler
        err = c.parse_error(orjson.loads(await resp.read()))
        assert err is not None and words in err.message, (handler, err)
        assert "up.test" not in err.message


@pytest.mark.parametrize("c", COUNTING, ids=[d.name for d in COUNTING])
async def test_keys_methods_and_bodies_are_checked_in_the_clients_dialect(
        aiohttp_client: Any, c: Dialect) -> None:
    client, _ = await start(aiohttp_client, c, c, never, auth={"api_keys": ["k-1"]})
    path = count_path(c, "/team" + c.default_path)
    key = {"Authorization": "Bearer k-1"}
    for resp, status in (
            (await client.post(path, data=count_body(c)), 401),
            (await client.get(path, headers=key), 405),
            (await client.post(path, data=b"[1]", headers=key), 400)):
        assert resp.status == status
        assert c.parse_error(orjson.loads(await resp.read())) is not None


@pytest.mark.parametrize("d", SILENT, ids=[d.name for d in SILENT])
async def test_routes_of_dialects_without_a_count_have_none(aiohttp_client: Any,
                                                             d: Dialect) -> None:
    client, _ = await start(aiohttp_client, d, d, never)
    route = "/team" + d.default_path
    for c in COUNTING:
        assert c.token_count is not None
        resp = await client.post(route.rstrip("/") + c.token_count.suffix, data=b"{}")
        assert resp.status == 404
