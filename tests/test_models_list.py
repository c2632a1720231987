"""``GET …/models`` beside the routes whose dialect's clients list models: where (derived from
each dialect's declarations), what (the route's upstreams' configured models, in config order,
once each), in whose shape (the asking client's dialect, picked by its header where several
list at one path), with the route's keys, counted and logged. The real SDKs reading them:
tests/dialects/test_model_lists_sdk.py."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import structlog
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import DIALECTS, Dialect
from gateway.log import configure_logging
from gateway.models_list import info_path, listing_path, model_lists
from gateway.route_paths import distinct_paths
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

LISTING = [d for d in DIALECTS.values() if d.models_path is not None]
SILENT = [d for d in DIALECTS.values() if d.models_path is None]


def test_the_registry_has_dialects_that_list_models_and_some_that_do_not() -> None:
    # Without both kinds the parametrized tests below would prove nothing of one side.
    assert len(LISTING) >= 2 and SILENT
    assert any(d.models_header is None for d in LISTING)
    assert any(d.models_header is not None for d in LISTING)


async def _nothing(req: UpstreamRequest) -> MemoryResponse:
    raise AssertionError(f"no upstream is asked for a model list ({req.url})")


async def start(aiohttp_client: Any, cfg: dict[str, Any]) -> TestClient[Any, Any]:
    app = create_app(parse_config(cfg, env={}), transport=MemoryTransport(_nothing))
    client: TestClient[Any, Any] = await aiohttp_client(app)
    return client


def upstreams(dialect: Dialect) -> dict[str, Any]:
    return {
        "a": {"dialect": dialect.name, "url": "http://a.test/chat", "model": "m-one",
              "models": ["m-two", "m-one"]},
        "b": {"dialect": dialect.name, "url": "http://b.test/chat", "model": "m-three"},
        "c": {"dialect": dialect.name, "url": "http://c.test/chat"},  # lists nothing
    }


def header_for(d: Dialect) -> dict[str, str]:
    return {d.models_header: "1"} if d.models_header else {}


@pytest.mark.parametrize("d", list(DIALECTS.values()), ids=list(DIALECTS))
def test_where_a_route_lists_its_models(d: Dialect) -> None:
    if d.models_path is None:
        assert listing_path(d.default_path, d) is None
        return
    assert listing_path(d.default_path, d) == d.models_path
    # A prefix in front of the conventional path is kept: an SDK's base URL carries it.
    assert listing_path("/team-a" + d.default_path, d) == "/team-a" + d.models_path
    assert listing_path("/elsewhere", d) is None  # an SDK would never post there


@pytest.mark.parametrize("d", LISTING, ids=[d.name for d in LISTING])
async def test_the_list_is_the_routes_configured_models_in_the_dialects_shape(
        aiohttp_client: Any, d: Dialect) -> None:
    route = "/team" + d.default_path
    client = await start(aiohttp_client, {
        "upstreams": upstreams(d),
        "routes": [{"path": route, "dialect": d.name, "upstream": ["a", "b", "c"]}]})
    listed = listing_path(route, d)
    assert listed is not None
    resp = await client.get(listed, headers=header_for(d))
    assert resp.status == 200, await resp.text()
    assert resp.content_type == "application/json"
    assert resp.headers["X-Request-ID"]
    assert await resp.json() == d.render_models(["m-one", "m-two", "m-three"])
    head = await client.head(listed + "/", headers=header_for(d))  # trailing slash, HEAD too
    assert head.status == 200


@pytest.mark.parametrize("d", SILENT, ids=[d.name for d in SILENT])
async def test_routes_of_dialects_that_list_nothing_have_no_list(aiohttp_client: Any,
                                                                 d: Dialect) -> None:
    client = await start(aiohttp_client, {
        "upstreams": upstreams(d), "routes": [{"path": "/v1/x", "dialect": d.name,
                                               "upstream": "a"}]})
    for path in ("/v1/models", "/models", "/v1/x/models"):
        assert (await client.get(path)).status == 404


async def test_one_path_shared_by_dialects_answers_each_client_in_its_own_shape(
        aiohttp_client: Any) -> None:
    """Every listing dialect's route at its conventional path (a suggestion: resolved as the
    demo resolves it): where listing paths coincide, the request's header picks the group (one
    SDK's dialects), which lists all its routes' models."""
    ups: dict[str, Any] = {}
    routes = []
    paths = distinct_paths(d.name for d in LISTING)
    for i, d in enumerate(LISTING):
        ups[f"u{i}"] = {"dialect": d.name, "url": f"http://u{i}.test/chat",
                        "model": f"model-of-{d.name}"}
        routes.append({"path": paths[d.name], "dialect": d.name, "upstream": f"u{i}"})
    client = await start(aiohttp_client, {"upstreams": ups, "routes": routes})
    by_path: dict[str, dict[str | None, list[Dialect]]] = {}
    for d in LISTING:
        listed = listing_path(paths[d.name], d) or ""
        by_path.setdefault(listed, {}).setdefault(d.models_header, []).append(d)
    assert any(len(groups) > 1 for groups in by_path.values()), \
        "no two kinds of client list models at one path: nothing to pick between"
    for path, groups in by_path.items():
        for header, group in groups.items():
            expected = group[0].render_models([f"model-of-{d.name}" for d in group])
            resp = await client.get(path, headers={header: "1"} if header else {})
            assert await resp.json() == expected, (path, header)
        if None in groups:  # no header of any dialect: the group that needs none
            group = groups[None]
            resp = await client.get(path)
            assert await resp.json() == group[0].render_models(
                [f"model-of-{d.name}" for d in group])


@pytest.mark.parametrize("d", LISTING, ids=[d.name for d in LISTING])
async def test_keys_and_methods_are_checked_and_refused_in_the_dialects_shape(
        aiohttp_client: Any, d: Dialect) -> None:
    client = await start(aiohttp_client, {
        "auth": {"api_keys": ["k-123"]}, "upstreams": upstreams(d),
        "routes": [{"path": d.default_path, "dialect": d.name, "upstream": "a"}]})
    path = d.models_path
    assert path is not None
    refused = await client.get(path, headers=header_for(d))
    assert refused.status == 401
    err = d.parse_error(orjson.loads(await refused.read()))
    assert err is not None and "API key" in err.message
    ok = await client.get(path, headers={**header_for(d), "Authorization": "Bearer k-123"})
    assert ok.status == 200
    post = await client.post(path, headers={**header_for(d), "Authorization": "Bearer k-123"})
    assert post.status == 405 and post.headers["Allow"] == "GET, HEAD"
    err = d.parse_error(orjson.loads(await post.read()))
    assert err is not None and "POST" in err.message


async def test_a_route_at_the_listing_path_wins(aiohttp_client: Any) -> None:
    d = LISTING[0]
    assert d.models_path is not None
    client = await start(aiohttp_client, {
        "upstreams": upstreams(d),
        "routes": [{"path": d.default_path, "dialect": d.name, "upstream": "a"},
                   {"path": d.models_path, "dialect": d.name, "upstream": "b"}]})
    resp = await client.get(d.models_path, headers=header_for(d))
    assert resp.status == 405  # the route's answer to a GET: it posts, it does not list


def test_lists_follow_the_config_and_skip_repeats() -> None:
    d = LISTING[0]
    config = parse_config({
        "upstreams": upstreams(d),
        "routes": [{"path": d.default_path, "dialect": d.name, "upstream": ["b", "a", "b"]},
                   {"path": "/x" + d.default_path, "dialect": d.name, "upstream": "c"}]},
        env={})
    lists = model_lists(config)
    assert set(lists) == {d.models_path, "/x" + (d.models_path or "")}
    assert lists[d.models_path or ""].groups == {
        d.models_header: ((d.name,), ("m-three", "m-one", "m-two"))}
    assert lists["/x" + (d.models_path or "")].groups == {d.models_header: ((d.name,), ())}


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    yield out
    structlog.reset_defaults()


async def test_lists_are_counted_and_logged(aiohttp_client: Any,
                                            log_stream: io.StringIO) -> None:
    d = LISTING[0]
    client = await start(aiohttp_client, {
        "upstreams": upstreams(d),
        "routes": [{"path": d.default_path, "dialect": d.name, "upstream": "a"}]})
    assert (await client.get(d.models_path or "", headers={
        **header_for(d), "User-Agent": "lister/1.0"})).status == 200
    metrics = await (await client.get("/metrics")).text()
    assert (f'gateway_requests_total{{client_dialect="{d.name}",route="{d.models_path}",'
            'status="200",upstream="none",upstream_dialect="none"} 1.0') in metrics
    access = [e for e in map(orjson.loads, log_stream.getvalue().splitlines())
              if e["event"] == "access"]
    assert len(access) == 1
    assert access[0]["route"] == d.models_path and access[0]["status"] == 200
    assert access[0]["user_agent"] == "lister/1.0" and access[0]["client"] == "127.0.0.1"
    assert access[0]["response_bytes"] == len(orjson.dumps(d.render_models(["m-one", "m-two"])))


# --- one model described, where a dialect declares it (``model_info``) --------------------------

DESCRIBING = [d for d in DIALECTS.values() if getattr(d, "model_info", None) is not None]


def test_some_dialect_describes_one_model() -> None:
    assert DESCRIBING, "no dialect declares model_info: the tests below prove nothing"


@pytest.mark.parametrize("d", DESCRIBING, ids=[d.name for d in DESCRIBING])
async def test_a_model_is_described_beside_the_route(aiohttp_client: Any, d: Dialect) -> None:
    route = "/team" + d.default_path
    client = await start(aiohttp_client, {
        "auth": {"api_keys": ["k1"]}, "upstreams": upstreams(d),
        "routes": [{"path": route, "dialect": d.name, "upstream": ["a", "b"]}]})
    at = info_path(route, d)
    assert at is not None and at.startswith("/team/")
    key = {"Authorization": "Bearer k1"}
    field = d.model_info.keys[0]  # type: ignore[attr-defined]
    ok = await client.post(at, json={field: "m-three"}, headers=key)
    assert ok.status == 200
    assert await ok.json() == d.render_model_info("m-three")  # type: ignore[attr-defined]
    for body, status in (({field: "m-four"}, 404), ({}, 400), (None, 400)):
        resp = await client.post(at, json=body, headers=key) if body is not None else \
            await client.post(at, data=b"{nope", headers=key)
        assert resp.status == status, body
        assert d.parse_error(await resp.json()) is not None
    assert (await client.post(at, json={field: "m-one"})).status == 401
    got = await client.get(at, headers=key)
    assert got.status == 405 and got.headers["Allow"] == "POST"
    assert d.parse_error(await got.json()) is not None
