"""Agent SDKs as real clients, end to end on 127.0.0.1: the OpenAI Agents SDK (on its Responses
and its Chat Completions model) and LangChain's ``ChatOpenAI`` (Chat Completions and Responses)
and ``ChatAnthropic``, each through at least two routes whose upstream speaks another dialect.

The upstreams are one scripted "model" (:class:`Model`) served in each upstream dialect through
that dialect's own parser, renderer and stream encoder: asked with tools and no tool result yet,
it calls ``get_weather``; given the tool's result, it answers a sentence quoting it; asked for a
JSON schema, it answers the JSON of :data:`FORECAST`; a prompt saying ``overloaded`` gets the
dialect's error with status 429. Whatever the client SDK makes of the answer (its tool-loop
result, parsed object, streamed chunks, usage, exception class) is what the tests assert.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import agents
import anthropic
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, ConfigDict

from gateway.app import create_app
from gateway.canonical import (
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
    ToolCall,
    Usage,
)
from gateway.config import parse_config
from gateway.dialects import Dialect, get
from gateway.framing import encoder_for
from gateway.pipeline import events_from_response

TIMEOUT = 10.0
USAGE = Usage(input_tokens=31, output_tokens=9)
WEATHER_ARGS = '{"city": "Paris"}'
TOOL_RESULT = "18C and sunny"
FINAL = f"In Paris it is {TOOL_RESULT}."


class Forecast(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str
    celsius: int
    sky: str


FORECAST = Forecast(city="Paris", celsius=18, sky="sunny")


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(getattr(p, "text", "") for p in content)


@dataclass
class Model:
    """One upstream: a scripted model answering in ``dialect``; records every request body."""

    dialect: Dialect
    seen: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, req: ChatRequest) -> ChatResponse:
        last = req.messages[-1]
        if req.output is not None:
            message = AssistantMessage(FORECAST.model_dump_json())
        elif last.role == "tool" or any(m.tool_call_id for m in req.messages[-1:]):
            message = AssistantMessage(FINAL if TOOL_RESULT in _text_of(last.content)
                                       else "the tool result never arrived")
        elif req.tools:
            message = AssistantMessage("", tool_calls=[
                ToolCall(id="call_w1", name=req.tools[0].name, arguments=WEATHER_ARGS)])
        else:
            message = AssistantMessage("Hello from the scripted model.")
        finish = "tool_calls" if message.tool_calls else "stop"
        return ChatResponse([message], finish_reason=finish, usage=USAGE, id="up-1",
                            created=1_700_000_000, model="scripted-1")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(body)
        req = self.dialect.parse_request(body)
        if any("overloaded" in _text_of(m.content) for m in req.messages if m.role == "user"):
            error = ChatError(status=429, message="scripted model is overloaded",
                              code="rate_limit_exceeded", type="rate_limit_error")
            return web.json_response(self.dialect.render_error(error), status=429)
        resp = self.answer(req)
        if not req.stream:
            return web.json_response(self.dialect.render_response(resp, req))
        encoder, frame = self.dialect.encoder(req), encoder_for(self.dialect.framing)
        out = web.StreamResponse(headers={"Content-Type": self.dialect.stream_content_type})
        await out.prepare(request)
        for event in events_from_response(resp):
            for payload in encoder.encode(event):
                await out.write(frame(payload))
        await out.write_eof()
        return out


UPSTREAMS = ("anthropic", "openai", "openai-responses")


@dataclass
class Rig:
    gateway: TestClient[Any, Any]
    models: dict[str, Model]

    def base(self, client: str, upstream: str) -> str:
        return str(self.gateway.make_url(f"/{client}-to-{upstream}/v1"))

    def openai(self, client: str, upstream: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base(client, upstream), api_key="sk-test",
                                  max_retries=0, timeout=TIMEOUT)


@pytest.fixture
async def rig(aiohttp_client: Any) -> AsyncIterator[Rig]:
    models = {name: Model(get(name)) for name in UPSTREAMS}
    app = web.Application()
    for name, model in models.items():
        app.router.add_post(f"/{name}", model.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    paths = {"openai": "/chat/completions", "openai-responses": "/responses",
             "anthropic": "/messages"}
    cfg = {
        "upstreams": {name: {"dialect": name, "url": str(server.make_url(f"/{name}")),
                             "model": "scripted-1", "timeout": TIMEOUT} for name in UPSTREAMS},
        "routes": [{"path": f"/{client}-to-{upstream}/v1{paths[client]}", "dialect": client,
                    "upstream": upstream}
                   for client in UPSTREAMS for upstream in UPSTREAMS if client != upstream],
    }
    gateway = await aiohttp_client(create_app(parse_config(cfg, env={})))
    try:
        yield Rig(gateway, models)
    finally:
        await server.close()


# --- the OpenAI Agents SDK ----------------------------------------------------------------------

@agents.function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return TOOL_RESULT if city == "Paris" else "unknown city"


@pytest.fixture(autouse=True)
def _no_agent_tracing() -> None:
    # The SDK exports its traces to api.openai.com by default; a test talks only to 127.0.0.1.
    agents.set_tracing_disabled(True)


def agent_model(rig: Rig, client: str, upstream: str) -> agents.Model:
    sdk = rig.openai(client, upstream)
    if client == "openai-responses":
        return agents.OpenAIResponsesModel(model="gpt-test", openai_client=sdk)
    return agents.OpenAIChatCompletionsModel(model="gpt-test", openai_client=sdk)


AGENT_ROUTES = [("openai-responses", "anthropic"), ("openai-responses", "openai"),
                ("openai", "anthropic"), ("openai", "openai-responses")]


@pytest.mark.parametrize(("client", "upstream"), AGENT_ROUTES)
async def test_agents_sdk_runs_a_tool_loop(rig: Rig, client: str, upstream: str) -> None:
    agent = agents.Agent(name="forecaster", instructions="Use the tool.", tools=[get_weather],
                         model=agent_model(rig, client, upstream))
    result = await agents.Runner.run(agent, "Weather in Paris?")
    assert result.final_output == FINAL
    calls = [i for i in result.new_items if isinstance(i, agents.ToolCallItem)]
    # JSON-equal: an upstream whose calls carry objects (not strings) re-serializes them
    assert [(c.raw_item.name, json.loads(c.raw_item.arguments))  # type: ignore[union-attr]
            for c in calls] == [("get_weather", json.loads(WEATHER_ARGS))]
    assert len(rig.models[upstream].seen) == 2
    usage = result.context_wrapper.usage
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (2, 62, 18)


@pytest.mark.parametrize(("client", "upstream"), AGENT_ROUTES)
async def test_agents_sdk_streams_a_tool_loop(rig: Rig, client: str, upstream: str) -> None:
    agent = agents.Agent(name="forecaster", instructions="Use the tool.", tools=[get_weather],
                         model=agent_model(rig, client, upstream))
    result = agents.Runner.run_streamed(agent, "Weather in Paris?")
    kinds = []
    async for event in result.stream_events():
        if isinstance(event, agents.RunItemStreamEvent):
            kinds.append(event.name)
    assert result.final_output == FINAL
    assert kinds[:2] == ["tool_called", "tool_output"] and kinds[-1] == "message_output_created"
    assert all(body.get("stream") for body in rig.models[upstream].seen)


@pytest.mark.parametrize(("client", "upstream"), AGENT_ROUTES)
async def test_agents_sdk_output_type_is_parsed(rig: Rig, client: str, upstream: str) -> None:
    agent = agents.Agent(name="forecaster", output_type=Forecast,
                         model=agent_model(rig, client, upstream))
    result = await agents.Runner.run(agent, "Forecast for Paris as JSON.")
    assert result.final_output == FORECAST
    (body,) = rig.models[upstream].seen
    req = get(upstream).parse_request(body)
    assert req.output is not None and req.output.kind == "json_schema"
    assert isinstance(req.output.schema, dict)
    assert set(req.output.schema["properties"]) == {"city", "celsius", "sky"}


@pytest.mark.parametrize(("client", "upstream"), AGENT_ROUTES[:1] + AGENT_ROUTES[2:3])
async def test_agents_sdk_sees_the_upstream_rate_limit(rig: Rig, client: str,
                                                       upstream: str) -> None:
    agent = agents.Agent(name="forecaster", model=agent_model(rig, client, upstream))
    with pytest.raises(openai.RateLimitError) as raised:
        await agents.Runner.run(agent, "Are you overloaded?")
    assert "overloaded" in str(raised.value)


# --- LangChain ----------------------------------------------------------------------------------

def chat_model(rig: Rig, client: str, upstream: str) -> ChatOpenAI | ChatAnthropic:
    if client == "anthropic":
        return ChatAnthropic(model="claude-test", base_url=str(
            rig.gateway.make_url(f"/{client}-to-{upstream}")), api_key="sk-ant-test",
            max_retries=0, timeout=TIMEOUT, stop=None)
    return ChatOpenAI(model="gpt-test", base_url=rig.base(client, upstream), api_key="sk-test",
                      max_retries=0, timeout=TIMEOUT,
                      use_responses_api=client == "openai-responses",
                      stream_usage=True)


LANGCHAIN_ROUTES = [("openai", "anthropic"), ("openai", "openai-responses"),
                    ("openai-responses", "anthropic"), ("openai-responses", "openai"),
                    ("anthropic", "openai"), ("anthropic", "openai-responses")]


def weather(city: str) -> str:
    """The current weather in a city."""
    return TOOL_RESULT if city == "Paris" else "unknown city"


@pytest.mark.parametrize(("client", "upstream"), LANGCHAIN_ROUTES)
async def test_langchain_tool_loop(rig: Rig, client: str, upstream: str) -> None:
    model = chat_model(rig, client, upstream).bind_tools([weather])
    history: list[Any] = [HumanMessage("Weather in Paris?")]
    first = await model.ainvoke(history)
    assert isinstance(first, AIMessage)
    (call,) = first.tool_calls
    assert (call["name"], call["args"]) == ("weather", {"city": "Paris"})
    history += [first, ToolMessage(weather(**call["args"]), tool_call_id=call["id"])]
    second = await model.ainvoke(history)
    assert second.text == FINAL
    assert second.usage_metadata is not None
    usage = second.usage_metadata
    assert (usage["input_tokens"], usage["output_tokens"]) == (31, 9)


@pytest.mark.parametrize(("client", "upstream"), LANGCHAIN_ROUTES)
async def test_langchain_streamed_tool_call_and_usage(rig: Rig, client: str,
                                                      upstream: str) -> None:
    model = chat_model(rig, client, upstream).bind_tools([weather])
    merged: AIMessageChunk | None = None
    async for chunk in model.astream([HumanMessage("Weather in Paris?")]):
        assert isinstance(chunk, AIMessageChunk)
        merged = chunk if merged is None else merged + chunk
    assert merged is not None
    (call,) = merged.tool_calls
    assert (call["name"], call["args"]) == ("weather", {"city": "Paris"})
    assert merged.usage_metadata is not None
    assert merged.usage_metadata["output_tokens"] == 9


@pytest.mark.parametrize(("client", "upstream"), LANGCHAIN_ROUTES)
async def test_langchain_with_structured_output(rig: Rig, client: str, upstream: str) -> None:
    model = chat_model(rig, client, upstream).with_structured_output(Forecast,
                                                                     method="json_schema")
    assert await model.ainvoke("Forecast for Paris.") == FORECAST


@pytest.mark.parametrize(("client", "upstream"), LANGCHAIN_ROUTES[::2])
async def test_langchain_raises_the_sdk_rate_limit_error(rig: Rig, client: str,
                                                         upstream: str) -> None:
    expected = anthropic.RateLimitError if client == "anthropic" else openai.RateLimitError
    with pytest.raises(expected):
        await chat_model(rig, client, upstream).ainvoke("Are you overloaded?")
