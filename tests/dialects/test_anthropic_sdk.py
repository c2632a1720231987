"""The real ``anthropic`` Python SDK as the client of the gateway, end to end on 127.0.0.1.

The gateway (``create_app``) serves a route ``/v1/messages`` of dialect ``anthropic`` in front of
a fake OpenAI-compatible upstream, and ``/identity/v1/messages`` in front of a fake Anthropic
upstream. Both fakes answer with their dialect's documented samples, byte for byte. The SDK's
own parsers and stream accumulator must finish without error and yield exactly the text, tool
names and arguments the upstream sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import anthropic
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import get

OPENAI = get("openai")
ANTHROPIC = get("anthropic")
TIMEOUT = 10.0  # seconds; every call is bounded


def sample_bytes(dialect: str, name: str) -> bytes:
    return resources.files("gateway.dialects").joinpath("samples", dialect, name).read_bytes()


@dataclass
class FakeUpstream:
    """Answers with its dialect's samples: ``tools`` while the conversation offers tools and
    has not answered a call yet, else ``text``; or with a scripted body."""

    dialect: str
    seen: list[tuple[dict[str, str], Any]] = field(default_factory=list)
    script: list[tuple[int, str, bytes]] = field(default_factory=list)
    """(status, content type, body) for the next requests, in order."""

    def case(self, body: dict[str, Any]) -> str:
        if self.dialect == "openai":
            answered = any(m.get("role") == "tool" for m in body["messages"])
        else:
            answered = any(isinstance(m.get("content"), list) and any(
                b.get("type") == "tool_result" for b in m["content"]) for m in body["messages"])
        return "tools" if body.get("tools") and not answered else "text"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append((dict(request.headers), body))
        if self.script:
            status, content_type, raw = self.script.pop(0)
            if content_type != "text/event-stream":
                return web.Response(status=status, body=raw, content_type=content_type)
        else:
            case = self.case(body)
            if body.get("stream") is not True:
                return web.Response(body=sample_bytes(self.dialect, f"{case}.response.json"),
                                    content_type="application/json")
            raw = sample_bytes(self.dialect, f"{case}.stream")
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for i in range(0, len(raw), 97):  # split anywhere, as networks do
            await out.write(raw[i:i + 97])
        await out.write_eof()
        return out


@dataclass
class Setup:
    gateway: TestServer
    openai: FakeUpstream
    anthropic: FakeUpstream

    def client(self, prefix: str = "", api_key: str = "client-key") -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=api_key, base_url=str(self.gateway.make_url(prefix)), max_retries=0,
            timeout=TIMEOUT, http_client=anthropic.DefaultAsyncHttpxClient(trust_env=False))


async def serve(app: web.Application) -> TestServer:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


async def start(auth: list[str] | None = None) -> tuple[Setup, list[TestServer]]:
    fakes = {name: FakeUpstream(name) for name in ("openai", "anthropic")}
    servers: list[TestServer] = []
    urls = {}
    for name, path in (("openai", "/v1/chat/completions"), ("anthropic", "/v1/messages")):
        app = web.Application()
        app.router.add_post(path, fakes[name].handle)
        server = await serve(app)
        servers.append(server)
        urls[name] = str(server.make_url(path))
    cfg: dict[str, Any] = {
        "upstreams": {
            "oai": {"dialect": "openai", "url": urls["openai"], "timeout": TIMEOUT},
            "claude": {"dialect": "anthropic", "url": urls["anthropic"], "timeout": TIMEOUT,
                       "headers": {"x-api-key": "upstream-key",
                                   "anthropic-version": "2023-06-01"}},
        },
        "routes": [
            {"path": "/v1/messages", "dialect": "anthropic", "upstream": "oai"},
            {"path": "/identity/v1/messages", "dialect": "anthropic", "upstream": "claude"},
        ],
    }
    if auth:
        cfg["auth"] = {"api_keys": auth}
    gateway = await serve(create_app(parse_config(cfg, env={})))
    servers.append(gateway)
    return Setup(gateway, fakes["openai"], fakes["anthropic"]), servers


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    s, servers = await start()
    try:
        yield s
    finally:
        for server in reversed(servers):
            await server.close()


WEATHER_TOOL: Any = {
    "name": "get_current_weather",
    "description": "Get the current weather in a given location",
    "input_schema": {"type": "object", "properties": {
        "location": {"type": "string"}, "unit": {"type": "string",
                                                 "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]},
}


def openai_stream_calls() -> list[tuple[str, str, Any]]:
    """The tool calls of the OpenAI tools stream sample: (id, name, parsed arguments)."""
    calls: dict[int, list[Any]] = {}
    for event in sample_bytes("openai", "tools.stream").split(b"\n\n"):
        if not event.startswith(b"data: {"):
            continue
        for choice in orjson.loads(event[6:])["choices"]:
            for c in choice["delta"].get("tool_calls") or []:
                entry = calls.setdefault(c["index"], [c.get("id"), "", ""])
                entry[1] = c["function"].get("name") or entry[1]
                entry[2] += c["function"].get("arguments") or ""
    return [(i, n, orjson.loads(a)) for i, n, a in (calls[k] for k in sorted(calls))]


# --- in front of an OpenAI-compatible upstream ---------------------------------------------------


async def test_create_text(setup: Setup) -> None:
    async with setup.client() as client:
        message = await client.messages.create(
            model="claude-test", max_tokens=256, system="Be brief.",
            messages=[{"role": "user", "content": "Hello!"}])
    want = OPENAI.samples.responses["text"]
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == want["choices"][0]["message"]["content"]  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.role == "assistant"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (9, 2)
    _, sent = setup.openai.seen[-1]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Hello!"}]
    assert sent["max_tokens"] == 256 and sent["model"] == "claude-test"


async def test_stream_text(setup: Setup) -> None:
    async with setup.client() as client, client.messages.stream(
            model="claude-test", max_tokens=256,
            messages=[{"role": "user", "content": "Capital of France?"}]) as stream:
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(pieces) == "Paris is the capital of France. 🇫🇷"
    assert final.content[0].text == "Paris is the capital of France. 🇫🇷"  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (12, 8)
    _, sent = setup.openai.seen[-1]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


async def test_stream_tool_calls(setup: Setup) -> None:
    async with setup.client() as client, client.messages.stream(
            model="claude-test", max_tokens=256, tools=[WEATHER_TOOL],
            messages=[{"role": "user", "content": "Weather in Boston and Madison?"}],
    ) as stream:
        events = [event.type async for event in stream]
        final = await stream.get_final_message()
    assert final.stop_reason == "tool_use"
    calls = [(b.id, b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert calls == openai_stream_calls()
    assert len(calls) == 2
    assert events.count("content_block_stop") == 2 and "input_json" in events
    _, sent = setup.openai.seen[-1]
    assert sent["tools"][0]["function"]["parameters"] == WEATHER_TOOL["input_schema"]


async def test_tool_use_round_trip(setup: Setup) -> None:
    async with setup.client() as client:
        first = await client.messages.create(
            model="claude-test", max_tokens=256, tools=[WEATHER_TOOL],
            tool_choice={"type": "any"},
            messages=[{"role": "user", "content": "Weather in Boston?"}])
        assert first.stop_reason == "tool_use"
        (call,) = [b for b in first.content if b.type == "tool_use"]
        want = OPENAI.samples.responses["tools"]["choices"][0]["message"]["tool_calls"][0]
        assert (call.id, call.name) == (want["id"], want["function"]["name"])
        assert call.input == orjson.loads(want["function"]["arguments"])
        second = await client.messages.create(
            model="claude-test", max_tokens=256, tools=[WEATHER_TOOL],
            messages=[
                {"role": "user", "content": "Weather in Boston?"},
                {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": "22 °C, sunny"},
                    {"type": "text", "text": "Thanks, and tomorrow?"}]},
            ])
    assert second.content[0].text == "Hello!"  # type: ignore[union-attr]
    _, sent = setup.openai.seen[-1]
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["user", "assistant", "tool", "user"]
    assistant, result, after = sent["messages"][1:]
    assert assistant["tool_calls"][0]["id"] == call.id
    assert orjson.loads(assistant["tool_calls"][0]["function"]["arguments"]) == call.input
    assert result == {"role": "tool", "tool_call_id": call.id, "content": "22 °C, sunny"}
    assert after["content"] == [{"type": "text", "text": "Thanks, and tomorrow?"}]
    first_sent = setup.openai.seen[0][1]
    assert first_sent["tool_choice"] == "required"


async def test_image_reaches_the_openai_upstream(setup: Setup) -> None:
    async with setup.client() as client:
        await client.messages.create(model="claude-test", max_tokens=64, messages=[
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "iVBORw0KGgo="}},
                {"type": "text", "text": "What is this?"}]}])
    _, sent = setup.openai.seen[-1]
    assert sent["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "text", "text": "What is this?"}]


async def test_mid_stream_error_raises_in_the_sdk(setup: Setup) -> None:
    chunk = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
             b'"choices":[{"index":0,"delta":{"role":"assistant","content":"par"},'
             b'"finish_reason":null}]}\n\n')
    setup.openai.script.append((200, "text/event-stream", chunk + (
        b'data: {"error":{"message":"The server had an error","type":"server_error",'
        b'"param":null,"code":null}}\n\n')))
    async with setup.client() as client, client.messages.stream(
            model="claude-test", max_tokens=64,
            messages=[{"role": "user", "content": "hi"}]) as stream:
        seen: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as e:
            async for text in stream.text_stream:
                seen.append(text)
    assert seen == ["par"]
    assert "The server had an error" in str(e.value)


async def test_upstream_rate_limit_is_the_sdks_rate_limit_error(setup: Setup) -> None:
    setup.openai.script.append((429, "application/json", orjson.dumps({"error": {
        "message": "Slow down", "type": "rate_limit_error", "param": None, "code": None}})))
    async with setup.client() as client:
        with pytest.raises(anthropic.RateLimitError) as e:
            await client.messages.create(model="claude-test", max_tokens=8,
                                         messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 429
    assert e.value.body == {"type": "error",
                            "error": {"type": "rate_limit_error", "message": "Slow down"}}


async def test_bad_request_is_the_sdks_bad_request_error(setup: Setup) -> None:
    async with setup.client() as client:
        with pytest.raises(anthropic.BadRequestError) as e:
            await client.messages.create(model="claude-test", max_tokens=8, messages=[])
    assert e.value.status_code == 400
    body: Any = e.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "messages" in body["error"]["message"]
    assert setup.openai.seen == []


async def test_what_openai_cannot_take_is_refused_naming_it(setup: Setup) -> None:
    async with setup.client() as client:
        with pytest.raises(anthropic.BadRequestError) as e:
            await client.messages.create(model="claude-test", max_tokens=8, messages=[
                {"role": "user", "content": [
                    {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}},
                    {"type": "text", "text": "Summarize"}]}])
    body: Any = e.value.body
    assert body["error"]["type"] == "invalid_request_error"
    assert "content_parts" in body["error"]["message"] and "openai" in body["error"]["message"]
    assert setup.openai.seen == []


# --- in front of an Anthropic upstream (identity) ------------------------------------------------


async def test_identity_create_and_stream(setup: Setup) -> None:
    async with setup.client("/identity") as client:
        message = await client.messages.create(
            model="claude-sonnet-4-6", max_tokens=1024,
            messages=[{"role": "user", "content": "Hello, world"}])
        async with client.messages.stream(
                model="claude-opus-4-6", max_tokens=256,
                messages=[{"role": "user", "content": "Hello"}]) as stream:
            text = "".join([t async for t in stream.text_stream])
            final = await stream.get_final_message()
    assert message.content[0].text == "Hi! My name is Claude."  # type: ignore[union-attr]
    assert message.id == "msg_013Zva2CMHLNnXjNJJKqJ2EF" and message.usage.output_tokens == 503
    assert text == "Hello!" and final.stop_reason == "end_turn"
    assert final.id == "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (25, 15)
    headers, sent = setup.anthropic.seen[0]
    assert sent == {"model": "claude-sonnet-4-6", "max_tokens": 1024,
                    "messages": [{"role": "user", "content": "Hello, world"}]}
    assert headers["x-api-key"] == "upstream-key"
    assert headers["anthropic-version"] == "2023-06-01"


async def test_identity_tool_round_trip_and_thinking(setup: Setup) -> None:
    tool = {"name": "get_weather", "description": "Get the current weather in a given location",
            "input_schema": {"type": "object", "properties": {"location": {"type": "string"}},
                             "required": ["location"]}}
    async with setup.client("/identity") as client:
        async with client.messages.stream(
                model="claude-opus-4-6", max_tokens=1024, tools=[tool],  # type: ignore[list-item]
                tool_choice={"type": "any"},
                messages=[{"role": "user", "content": "What is the weather like in SF?"}],
        ) as stream:
            first = await stream.get_final_message()
        (call,) = [b for b in first.content if b.type == "tool_use"]
        assert (call.id, call.name, call.input) == (
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather",
            {"location": "San Francisco, CA", "unit": "fahrenheit"})
        assert first.content[0].text == \
            "Okay, let's check the weather for San Francisco, CA:"  # type: ignore[union-attr]
        second = await client.messages.create(
            model="claude-opus-4-6", max_tokens=1024, tools=[tool],  # type: ignore[list-item]
            messages=[
                {"role": "user", "content": "What is the weather like in SF?"},
                {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                              "content": "15 degrees"}]}])
    assert second.content[0].text == "Hi! My name is Claude."  # type: ignore[union-attr]
    _, sent = setup.anthropic.seen[-1]
    assert sent["messages"][1]["content"][1] == {
        "type": "tool_use", "id": call.id, "name": "get_weather", "input": call.input}
    assert sent["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": call.id, "content": "15 degrees"}]


async def test_identity_thinking_stream(setup: Setup) -> None:
    setup.anthropic.script.append((200, "text/event-stream",
                                   sample_bytes("anthropic", "reasoning.stream")))
    async with setup.client("/identity") as client, client.messages.stream(
            model="claude-test", max_tokens=20000,
            thinking={"type": "enabled", "budget_tokens": 16000},
            messages=[{"role": "user", "content": "GCD of 1071 and 462?"}]) as stream:
        final = await stream.get_final_message()
    thinking, text = final.content
    assert thinking.type == "thinking" and text.type == "text"
    assert thinking.signature == "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds..."
    assert thinking.thinking.endswith("so GCD(1071, 462) = 21.")
    assert text.text == "The greatest common divisor of 1071 and 462 is **21**."
    _, sent = setup.anthropic.seen[-1]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 16000}


# --- the gateway's own API keys ------------------------------------------------------------------


async def test_gateway_api_keys_with_the_sdk() -> None:
    s, servers = await start(auth=["gw-key"])
    try:
        async with s.client(api_key="gw-key") as client:
            ok = await client.messages.create(model="claude-test", max_tokens=8,
                                              messages=[{"role": "user", "content": "hi"}])
        assert ok.content[0].text == "Hello!"  # type: ignore[union-attr]
        async with s.client(api_key="wrong") as client:
            with pytest.raises(anthropic.AuthenticationError) as e:
                await client.messages.create(model="claude-test", max_tokens=8,
                                             messages=[{"role": "user", "content": "hi"}])
        body: Any = e.value.body
        assert body["error"]["type"] == "authentication_error"
    finally:
        for server in reversed(servers):
            await server.close()


# --- token counts ---------------------------------------------------------------------------------


async def test_count_tokens_estimated_in_front_of_an_upstream_without_a_count(
        setup: Setup) -> None:
    # Claude Code's shape: system blocks, a tool, no max_tokens. The OpenAI upstream has no
    # count endpoint: the gateway estimates, says so, and never asks it.
    async with setup.client() as client:
        raw = await client.messages.with_raw_response.count_tokens(
            model="claude-test", tools=[WEATHER_TOOL],
            system=[{"type": "text", "text": "You are Claude Code."},
                    {"type": "text", "text": "Be brief."}],
            messages=[{"role": "user", "content": "Weather in Boston?"}])
    counted = await raw.parse()
    assert isinstance(counted, anthropic.types.MessageTokensCount)
    assert counted.input_tokens > 0
    assert raw.headers["X-Gateway-Token-Count"] == "estimate"
    assert setup.openai.seen == []


async def test_count_tokens_asks_a_responses_upstream_its_count() -> None:
    seen: list[tuple[str, Any]] = []

    async def input_tokens(request: web.Request) -> web.Response:
        seen.append((request.path, await request.json()))
        return web.json_response({"object": "response.input_tokens", "input_tokens": 4242})

    app = web.Application()
    app.router.add_post("/v1/responses/input_tokens", input_tokens)
    upstream = await serve(app)
    cfg = {"upstreams": {"resp": {"dialect": "openai-responses", "timeout": TIMEOUT,
                                  "url": str(upstream.make_url("/v1/responses"))}},
           "routes": [{"path": "/v1/messages", "dialect": "anthropic", "upstream": "resp"}]}
    gateway = await serve(create_app(parse_config(cfg, env={})))
    try:
        async with anthropic.AsyncAnthropic(
                api_key="k", base_url=str(gateway.make_url("")), max_retries=0,
                timeout=TIMEOUT,
                http_client=anthropic.DefaultAsyncHttpxClient(trust_env=False)) as client:
            raw = await client.messages.with_raw_response.count_tokens(
                model="claude-test", system=[{"type": "text", "text": "You are Claude Code."},
                                             {"type": "text", "text": "Be brief."}],
                messages=[{"role": "user", "content": "Hello!"}])
        counted = await raw.parse()
    finally:
        await gateway.close()
        await upstream.close()
    assert counted.input_tokens == 4242
    assert raw.headers["X-Gateway-Token-Count"] == "upstream"
    ((path, sent),) = seen
    assert path == "/v1/responses/input_tokens"
    assert sent["instructions"] == "You are Claude Code.\n\nBe brief."
    assert sent["model"] == "claude-test"
    # what Responses' count endpoint refuses is left out
    assert not {"stream", "store", "max_output_tokens"} & set(sent)
