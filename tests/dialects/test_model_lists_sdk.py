"""The real OpenAI and Anthropic SDKs list models through the gateway, both at one shared
``/v1/models`` (an OpenAI Chat Completions route, an OpenAI Responses route and an Anthropic
route at their SDKs' conventional paths): each reads its own shape, with the models of the routes
it can post to."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.config import parse_config
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

TIMEOUT = 10.0


async def _nothing(req: UpstreamRequest) -> MemoryResponse:
    raise AssertionError(f"no upstream is asked for a model list ({req.url})")


async def sdk_gateway(aiohttp_client: Any) -> TestClient[Any, Any]:
    cfg = parse_config({
        "auth": {"api_keys": ["sk-gw"]},
        "upstreams": {
            "gpt": {"dialect": "openai", "url": "http://gpt.test/v1/chat/completions",
                    "model": "gpt-4o-mini", "models": ["gpt-4o"]},
            "resp": {"dialect": "openai-responses", "url": "http://gpt.test/v1/responses",
                     "model": "o4-mini"},
            "claude": {"dialect": "anthropic", "url": "http://claude.test/v1/messages",
                       "model": "claude-sonnet-4-5"}},
        "routes": [{"path": "/v1/chat/completions", "dialect": "openai", "upstream": "gpt"},
                   {"path": "/v1/responses", "dialect": "openai-responses",
                    "upstream": ["resp", "gpt"]},
                   {"path": "/v1/messages", "dialect": "anthropic",
                    "upstream": ["claude", "gpt"]}]}, env={})
    client: TestClient[Any, Any] = await aiohttp_client(
        create_app(cfg, transport=MemoryTransport(_nothing)))
    return client


async def test_the_openai_sdk_lists_the_models_of_its_routes(aiohttp_client: Any) -> None:
    client = await sdk_gateway(aiohttp_client)
    base = str(client.make_url("/v1"))
    async with openai.AsyncOpenAI(base_url=base, api_key="sk-gw", timeout=TIMEOUT,
                                  max_retries=0) as sdk:
        models = [m async for m in await sdk.models.list()]
    assert [m.id for m in models] == ["gpt-4o-mini", "gpt-4o", "o4-mini"]
    assert all(m.object == "model" and m.owned_by and isinstance(m.created, int)
               for m in models)
    async with openai.AsyncOpenAI(base_url=base, api_key="wrong", timeout=TIMEOUT,
                                  max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError):
            await bad.models.list()


async def test_the_anthropic_sdk_lists_the_models_of_its_route(aiohttp_client: Any) -> None:
    client = await sdk_gateway(aiohttp_client)
    async with anthropic.AsyncAnthropic(base_url=str(client.make_url("/")), api_key="sk-gw",
                                        timeout=TIMEOUT, max_retries=0) as sdk:
        models = [m async for m in await sdk.models.list()]
        assert [m.id for m in models] == ["claude-sonnet-4-5", "gpt-4o-mini", "gpt-4o"]
        assert all(m.type == "model" and m.display_name == m.id for m in models)
        assert models[0].created_at.year == 1970
        with pytest.raises(anthropic.AuthenticationError):
            await sdk.with_options(api_key="wrong").models.list()
