"""The real ``openai`` and ``anthropic`` Python SDKs on a named key with limits, end to end on
127.0.0.1: each reads its own provider's rate-limit headers from an answer of the gateway, and
a refusal over the key's limit is the SDK's own ``RateLimitError``, with the gateway's message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from aiohttp.test_utils import TestServer
from fakes import Fakes, upstream_config

from gateway.app import create_app
from gateway.config import parse_config

KEY = "sdk-team-key-41f0"
TIMEOUT = 10.0


@pytest.fixture
async def gateway(fakes: Fakes) -> AsyncIterator[TestServer]:
    fake = await fakes.start("openai")
    cfg = {"upstreams": {"u": upstream_config(fake)},
           "routes": [{"path": "/v1/chat/completions", "dialect": "openai", "upstream": "u"},
                      {"path": "/v1/messages", "dialect": "anthropic", "upstream": "u"}],
           "auth": {"keys": [{"name": "sdk-team", "key": KEY,
                              "limits": {"requests_per_minute": 1, "tokens_per_minute": 50000}}]}}
    server = TestServer(create_app(parse_config(cfg, env={})), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def test_the_openai_sdk_reads_its_headers_and_its_rate_limit_error(
        gateway: TestServer) -> None:
    client = openai.AsyncOpenAI(api_key=KEY, base_url=str(gateway.make_url("/v1")),
                                max_retries=0, timeout=TIMEOUT)
    async with client:
        raw = await client.chat.completions.with_raw_response.create(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}])
        assert raw.parse().choices[0].message.content
        assert raw.headers["x-ratelimit-limit-requests"] == "1"
        assert raw.headers["x-ratelimit-remaining-requests"] == "0"
        assert raw.headers["x-ratelimit-limit-tokens"] == "50000"
        assert int(raw.headers["x-ratelimit-remaining-tokens"]) < 50000
        with pytest.raises(openai.RateLimitError) as e:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "again"}])
    assert e.value.status_code == 429
    assert "requests_per_minute" in e.value.message
    assert e.value.code == "rate_limit_exceeded"
    assert 1 <= int(e.value.response.headers["retry-after"]) <= 60


async def test_the_anthropic_sdk_reads_its_headers_and_its_rate_limit_error(
        gateway: TestServer) -> None:
    client = anthropic.AsyncAnthropic(api_key=KEY, base_url=str(gateway.make_url("")),
                                      max_retries=0, timeout=TIMEOUT)
    async with client:
        raw = await client.messages.with_raw_response.create(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}])
        message: Any = await raw.parse()
        assert message.content
        assert raw.headers["anthropic-ratelimit-requests-limit"] == "1"
        assert raw.headers["anthropic-ratelimit-requests-remaining"] == "0"
        assert raw.headers["anthropic-ratelimit-requests-reset"].endswith("Z")
        assert raw.headers["anthropic-ratelimit-tokens-limit"] == "50000"
        with pytest.raises(anthropic.RateLimitError) as e:
            await client.messages.create(
                model="m", max_tokens=100, messages=[{"role": "user", "content": "again"}])
    assert e.value.status_code == 429
    assert "requests_per_minute" in e.value.message
    assert e.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
