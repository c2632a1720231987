"""The real ``openai`` SDK against the gateway (``create_app``, served on 127.0.0.1): a Responses
client in front of a Chat Completions upstream and in front of a Responses upstream, and a Chat
Completions client in front of a Responses upstream. The fake upstreams serve the dialects' samples
byte for byte; the SDK's typed accumulators must finish without error and give back exactly the
text, tool names and arguments the upstream sent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import get

RESP = get("openai-responses")
CHAT = get("openai")
WEATHER = {"type": "function", "name": "get_current_weather",
           "description": "Get the current weather in a given location",
           "parameters": {"type": "object",
                          "properties": {"location": {"type": "string"},
                                         "unit": {"type": "string",
                                                  "enum": ["celsius", "fahrenheit"]}},
                          "required": ["location"]}}
CHAT_WEATHER = {"type": "function", "function": {
    k: v for k, v in WEATHER.items() if k != "type"}}
CHUNK = 97
"""The fakes write their bodies in pieces this long, so that events arrive split."""


def chat_calls(data: bytes) -> list[tuple[str, str, Any]]:
    """(id, name, arguments) of the tool calls in a Chat Completions stream sample."""
    calls: dict[int, list[str]] = {}
    for line in data.decode().splitlines():
        if not line.startswith("data: {"):
            continue
        for choice in json.loads(line[6:])["choices"]:
            for c in choice["delta"].get("tool_calls") or []:
                entry = calls.setdefault(c["index"], ["", "", ""])
                entry[0] = c.get("id") or entry[0]
                entry[1] = c.get("function", {}).get("name") or entry[1]
                entry[2] += c.get("function", {}).get("arguments", "")
    return [(i, n, json.loads(a)) for i, n, a in (calls[k] for k in sorted(calls))]


def chat_text(data: bytes) -> str:
    out = ""
    for line in data.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                out += choice["delta"].get("content") or ""
    return out


@dataclass
class Upstream:
    """A fake upstream of one dialect: answers with that dialect's samples (``tools`` when the
    request offers tools, else ``text``) or with :attr:`stream_body`, and records each request."""

    dialect: Any
    seen: list[dict[str, Any]] = field(default_factory=list)
    stream_body: bytes | None = None

    def case(self, body: dict[str, Any]) -> str:
        return "tools" if body.get("tools") else "text"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(body)
        case = self.case(body)
        if not body.get("stream"):
            return web.json_response(self.dialect.samples.responses[case])
        data = self.stream_body if self.stream_body is not None else \
            self.dialect.samples.streams[case]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(0, len(data), CHUNK):
            await resp.write(data[i:i + CHUNK])
        await resp.write_eof()
        return resp


@dataclass
class Rig:
    gateway: TestClient[Any, Any]
    chat: Upstream
    responses: Upstream

    def client(self, prefix: str = "", *, strict: bool = True) -> openai.AsyncOpenAI:
        """``strict``: the SDK validates every answer against its types (what the gateway
        writes); the documented samples an identity route passes on leave some fields out."""
        return openai.AsyncOpenAI(base_url=str(self.gateway.make_url(f"{prefix}/v1")),
                                  api_key="sk-test", max_retries=0, timeout=10,
                                  _strict_response_validation=strict)


@pytest.fixture
async def rig(aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]],
              ) -> AsyncIterator[Rig]:
    chat, responses = Upstream(CHAT), Upstream(RESP)
    servers = []
    for fake, path in ((chat, "/v1/chat/completions"), (responses, "/v1/responses")):
        app = web.Application()
        app.router.add_post(path, fake.handle)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
    chat_url = str(servers[0].make_url("/v1/chat/completions"))
    responses_url = str(servers[1].make_url("/v1/responses"))
    cfg = {
        "upstreams": {
            "chat": {"dialect": "openai", "url": chat_url, "model": "gpt-4o-mini",
                     "timeout": 10},
            "resp": {"dialect": "openai-responses", "url": responses_url, "timeout": 10},
        },
        "routes": [
            {"path": "/v1/responses", "dialect": "openai-responses", "upstream": "chat"},
            {"path": "/same/v1/responses", "dialect": "openai-responses", "upstream": "resp"},
            {"path": "/v1/chat/completions", "dialect": "openai", "upstream": "resp"},
        ],
    }
    gateway = await aiohttp_client(create_app(parse_config(cfg, env={})),
                                   server_kwargs={"handler_cancellation": True})
    try:
        yield Rig(gateway, chat, responses)
    finally:
        for server in servers:
            await server.close()


# --- a Responses client in front of a Chat Completions upstream ----------------------------------


async def test_responses_create_whole(rig: Rig) -> None:
    async with rig.client() as client:
        r = await client.responses.create(model="gpt-4o-mini", input="Hello!",
                                          instructions="You are a helpful assistant.",
                                          max_output_tokens=50, store=True)
    want = CHAT.samples.responses["text"]
    assert r.output_text == want["choices"][0]["message"]["content"]
    assert r.status == "completed"
    assert r.store is False  # accepted, but nothing was kept
    assert r.usage is not None
    assert (r.usage.input_tokens, r.usage.output_tokens) == (9, 2)
    [sent] = rig.chat.seen
    assert sent["messages"] == [{"role": "system", "content": "You are a helpful assistant."},
                                {"role": "user", "content": "Hello!"}]
    assert sent["max_tokens"] == 50
    assert "store" not in sent


async def test_responses_create_streamed(rig: Rig) -> None:
    async with rig.client() as client:
        stream = await client.responses.create(model="gpt-4o-mini", input="Capital of France?",
                                               stream=True)
        events = [e async for e in stream]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == chat_text(CHAT.samples.streams["text"])
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created"
    last = events[-1]
    assert last.type == "response.completed"
    assert last.response.output_text == text
    assert last.response.usage is not None
    assert (last.response.usage.input_tokens, last.response.usage.output_tokens) == (12, 8)


async def test_responses_stream_accumulates_tool_calls(rig: Rig) -> None:
    upstream = CHAT.samples.streams["tools"]
    async with rig.client() as client, client.responses.stream(
            model="gpt-4o", input="Weather in Boston and Madison?", tools=[WEATHER]) as stream:
        deltas = [e.delta async for e in stream
                  if e.type == "response.function_call_arguments.delta"]
        final = await stream.get_final_response()
    calls = [(o.call_id, o.name, json.loads(o.arguments)) for o in final.output
             if o.type == "function_call"]
    assert calls == chat_calls(upstream)
    assert len(deltas) == 13  # every fragment the upstream sent, none held back or merged
    assert final.status == "completed"
    assert rig.chat.seen[0]["tools"] == [CHAT_WEATHER]  # flat tool -> Chat Completions tool


async def test_responses_stream_with_interleaved_calls(rig: Rig) -> None:
    """An upstream that interleaves two calls' fragments: both SDK accumulators look items up
    by output_index, so each fragment goes out at once and both calls come out whole."""
    def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
        return b"data: " + json.dumps({"id": "chatcmpl-I", "object": "chat.completion.chunk",
                                       "created": 1, "model": "m", "choices": [
                                           {"index": 0, "delta": delta,
                                            "finish_reason": reason}]}).encode() + b"\n\n"

    def call(index: int, **fn: str) -> dict[str, Any]:
        head = {"id": f"call_{index}", "type": "function"} if "name" in fn else {}
        return {"tool_calls": [{"index": index, **head, "function": fn}]}

    rig.chat.stream_body = b"".join([
        chunk({"role": "assistant", "content": None}),
        chunk(call(0, name="get_current_weather", arguments="")),
        chunk(call(1, name="get_current_weather", arguments='{"loc')),
        chunk(call(0, arguments='{"location": "Par')),
        chunk(call(1, arguments='ation": "Oslo"}')),
        chunk(call(0, arguments='is"}')),
        chunk({}, "tool_calls"), b"data: [DONE]\n\n"])
    async with rig.client() as client, client.responses.stream(
            model="m", input="Weather in Paris and Oslo?", tools=[WEATHER]) as stream:
        final = await stream.get_final_response()
    assert [(o.call_id, json.loads(o.arguments)) for o in final.output
            if o.type == "function_call"] == [("call_0", {"location": "Paris"}),
                                              ("call_1", {"location": "Oslo"})]


async def test_responses_stream_text_final_response(rig: Rig) -> None:
    async with rig.client() as client, client.responses.stream(
            model="gpt-4o-mini", input="Capital of France?") as stream:
        final = await stream.get_final_response()
    assert final.output_text == chat_text(CHAT.samples.streams["text"])


async def test_responses_mid_stream_error_raises_in_both_sdk_paths(rig: Rig) -> None:
    head = CHAT.samples.streams["text"].split(b"\n\n")
    rig.chat.stream_body = b"\n\n".join(head[:3]) + b"\n\n" + (
        b'data: {"error": {"message": "the model crashed", "type": "server_error", '
        b'"param": null, "code": null}}\n\n')
    async with rig.client() as client:
        stream = await client.responses.create(model="m", input="x", stream=True)
        seen: list[str] = []
        with pytest.raises(openai.APIError, match="the model crashed"):
            async for e in stream:
                seen.append(e.type)
        assert "response.completed" not in seen
        assert seen[0] == "response.created"
        with pytest.raises(openai.APIError, match="the model crashed"):
            async with client.responses.stream(model="m", input="x") as helper:
                await helper.get_final_response()


async def test_previous_response_id_is_a_400_naming_it(rig: Rig) -> None:
    async with rig.client() as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="m", input="more",
                                          previous_response_id="resp_abc")
    assert caught.value.status_code == 400
    assert caught.value.param == "previous_response_id"
    assert "previous_response_id" in caught.value.message
    assert rig.chat.seen == []


# --- a Responses client in front of a Responses upstream (identity) ------------------------------


async def test_identity_whole_and_stream(rig: Rig) -> None:
    async with rig.client("/same", strict=False) as client:
        r = await client.responses.create(model="gpt-5.4", input="Tell me a story.",
                                          store=True, metadata={"k": "v"})
        stream = await client.responses.create(model="gpt-5.4", input="Hello!", stream=True)
        events = [e async for e in stream]
    assert r.id == RESP.samples.responses["text"]["id"]
    assert r.output_text.startswith("In a peaceful grove")
    sent = rig.responses.seen[0]
    assert (sent["store"], sent["metadata"], sent["input"]) == (True, {"k": "v"},
                                                                "Tell me a story.")
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
        "Hi there! How can I assist you today?"
    assert events[-1].type == "response.completed"


async def test_identity_stream_tool_call(rig: Rig) -> None:
    async with rig.client("/same", strict=False) as client, client.responses.stream(
            model="gpt-5.4", input="Weather in Boston?", tools=[WEATHER]) as stream:
        final = await stream.get_final_response()
    [fc] = [o for o in final.output if o.type == "function_call"]
    assert (fc.call_id, fc.name, json.loads(fc.arguments)) == (
        "call_unLAR8MvFNptuiZK6K6HCy5k", "get_current_weather",
        {"location": "Boston, MA", "unit": "celsius"})


# --- a Chat Completions client in front of a Responses upstream ----------------------------------


async def test_chat_completions_tools_whole(rig: Rig) -> None:
    async with rig.client() as client:
        c = await client.chat.completions.create(
            model="gpt-5.4", messages=[{"role": "user", "content": "Weather in Boston?"}],
            tools=[CHAT_WEATHER], tool_choice="auto")
    choice = c.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.type == "function"
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "call_unLAR8MvFNptuiZK6K6HCy5k", "get_current_weather",
        {"location": "Boston, MA", "unit": "celsius"})
    assert c.usage is not None and c.usage.prompt_tokens == 291
    [sent] = rig.responses.seen
    assert sent["tools"] == [WEATHER | {"strict": False}]
    assert sent["store"] is False
    assert sent["input"] == [{"type": "message", "role": "user",
                              "content": "Weather in Boston?"}]


async def test_chat_completions_tools_streamed(rig: Rig) -> None:
    args = '{"location":"Boston, MA","unit":"celsius"}'
    async with rig.client() as client:
        stream = await client.chat.completions.create(
            model="gpt-5.4", messages=[{"role": "user", "content": "Weather in Boston?"}],
            tools=[CHAT_WEATHER], stream=True)
        fragments: list[str] = []
        names: list[str] = []
        reasons: list[str] = []
        async for chunk in stream:
            for choice in chunk.choices:
                for tc in choice.delta.tool_calls or []:
                    assert tc.index == 0
                    if tc.function and tc.function.name:
                        names.append(tc.function.name)
                    if tc.function and tc.function.arguments:
                        fragments.append(tc.function.arguments)
                if choice.finish_reason:
                    reasons.append(choice.finish_reason)
        async with client.chat.completions.stream(
                model="gpt-5.4", messages=[{"role": "user", "content": "Weather in Boston?"}],
                tools=[CHAT_WEATHER]) as helper:
            final = await helper.get_final_completion()
    assert names == ["get_current_weather"]
    assert "".join(fragments) == args
    assert len(fragments) == 11  # as the upstream split them
    assert reasons == ["tool_calls"]
    [call] = final.choices[0].message.tool_calls or []
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_current_weather", json.loads(args))
    assert final.choices[0].finish_reason == "tool_calls"


async def test_lifecycle_events_echo_no_tools_the_terminal_event_echoes_all(rig: Rig) -> None:
    # A Codex request repeats its tools and instructions; only the terminal event echoes them
    # (the SDK's strict types still accept the lifecycle events: tools [] and instructions null).
    async with rig.client() as client, client.responses.stream(
            model="gpt-4o", input="Weather in Boston?", instructions="Be brief.",
            tools=[WEATHER]) as stream:
        events = [e async for e in stream]
        final = await stream.get_final_response()
    lifecycle = [e for e in events if e.type in ("response.created", "response.in_progress")]
    assert [e.type for e in lifecycle] == ["response.created", "response.in_progress"]
    for e in lifecycle:
        assert e.response.tools == [] and e.response.instructions is None
    done = events[-1]
    assert done.type == "response.completed"
    assert [t.name for t in done.response.tools if t.type == "function"] == [WEATHER["name"]]
    assert done.response.instructions == "Be brief."
    assert final.tools == done.response.tools
