"""Structured output with the real SDKs as clients, end to end on 127.0.0.1: openai-python's
``chat.completions.parse`` / ``.stream`` and ``responses.parse`` in front of an Anthropic
upstream, and anthropic-sdk's ``messages.parse`` in front of a Chat Completions upstream. The
upstream must receive the format in its own field (``output_config.format``,
``response_format``); its answer, JSON in a text block or message, must come back as something
the SDK parses into the client's pydantic model."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pydantic import BaseModel, ConfigDict

from gateway.app import create_app
from gateway.canonical import AssistantMessage, ChatResponse
from gateway.config import parse_config
from gateway.dialects import get
from gateway.framing import encoder_for
from gateway.pipeline import events_from_response

ANTHROPIC = get("anthropic")
OPENAI = get("openai")
TIMEOUT = 10.0


class CalendarEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    date: str
    participants: list[str]


EVENT = CalendarEvent(name="Science fair", date="Friday", participants=["Alice", "Bob"])
EVENT_JSON = EVENT.model_dump_json()


@dataclass
class Upstream:
    """Answers the JSON of :data:`EVENT` as its dialect's model text: its documented ``text``
    sample with the text swapped, or (streamed) the dialect's events for that text."""

    dialect: Any
    seen: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(body)
        if not body.get("stream"):
            answer = copy.deepcopy(self.dialect.samples.responses["text"])
            if "content" in answer:
                answer["content"][0]["text"] = EVENT_JSON
            else:
                answer["choices"][0]["message"]["content"] = EVENT_JSON
            return web.json_response(answer)
        req = self.dialect.parse_request(body)
        encoder, frame = self.dialect.encoder(req), encoder_for(self.dialect.framing)
        resp = ChatResponse([AssistantMessage(EVENT_JSON)], finish_reason="stop", id="m-1",
                            created=1, model="m")
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for e in events_from_response(resp):
            for p in encoder.encode(e):
                await out.write(frame(p))
        await out.write_eof()
        return out


@dataclass
class Rig:
    gateway: TestClient[Any, Any]
    claude: Upstream
    chat: Upstream

    def openai(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=str(self.gateway.make_url("/v1")), api_key="sk-test",
                                  max_retries=0, timeout=TIMEOUT)

    def anthropic(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(base_url=str(self.gateway.make_url("/claude")),
                                        api_key="sk-ant-test", max_retries=0, timeout=TIMEOUT)


@pytest.fixture
async def rig(aiohttp_client: Any) -> AsyncIterator[Rig]:
    claude, chat = Upstream(ANTHROPIC), Upstream(OPENAI)
    servers = []
    for fake, path in ((claude, "/v1/messages"), (chat, "/v1/chat/completions")):
        app = web.Application()
        app.router.add_post(path, fake.handle)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
    cfg = {
        "upstreams": {
            "claude": {"dialect": "anthropic", "url": str(servers[0].make_url("/v1/messages")),
                       "model": "claude-sonnet-4-6", "timeout": TIMEOUT},
            "chat": {"dialect": "openai", "url": str(servers[1].make_url("/v1/chat/completions")),
                     "timeout": TIMEOUT},
        },
        "routes": [
            {"path": "/v1/chat/completions", "dialect": "openai", "upstream": "claude"},
            {"path": "/v1/responses", "dialect": "openai-responses", "upstream": "claude"},
            {"path": "/claude/v1/messages", "dialect": "anthropic", "upstream": "chat"},
        ],
    }
    gateway = await aiohttp_client(create_app(parse_config(cfg, env={})))
    try:
        yield Rig(gateway, claude, chat)
    finally:
        for server in servers:
            await server.close()


def sent_schema(body: dict[str, Any]) -> Any:
    fmt = body["output_config"]["format"]
    assert fmt["type"] == "json_schema" and "tools" not in body and "tool_choice" not in body
    return fmt["schema"]


async def test_chat_completions_parse_in_front_of_anthropic(rig: Rig) -> None:
    async with rig.openai() as client:
        done = await client.chat.completions.parse(
            model="gpt-4o", response_format=CalendarEvent,
            messages=[{"role": "system", "content": "Extract the event information."},
                      {"role": "user", "content": "Alice and Bob go to a science fair on Friday."}])
    assert done.choices[0].message.parsed == EVENT
    assert done.choices[0].finish_reason == "stop"
    (body,) = rig.claude.seen
    assert sent_schema(body)["required"] == ["name", "date", "participants"]


async def test_chat_completions_stream_in_front_of_anthropic(rig: Rig) -> None:
    async with rig.openai() as client, client.chat.completions.stream(
            model="gpt-4o", response_format=CalendarEvent,
            messages=[{"role": "user", "content": "Alice and Bob go to a science fair."}],
    ) as stream:
        done = await stream.get_final_completion()
    assert done.choices[0].message.parsed == EVENT
    (body,) = rig.claude.seen
    assert body["stream"] is True and sent_schema(body)["additionalProperties"] is False


async def test_responses_parse_in_front_of_anthropic(rig: Rig) -> None:
    async with rig.openai() as client:
        done = await client.responses.parse(
            model="gpt-4o", input="Alice and Bob go to a science fair on Friday.",
            text_format=CalendarEvent)
    assert done.output_parsed == EVENT
    (body,) = rig.claude.seen
    assert set(sent_schema(body)["properties"]) == {"name", "date", "participants"}


async def test_json_mode_in_front_of_anthropic_is_refused_naming_the_field(rig: Rig) -> None:
    async with rig.openai() as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="gpt-4o", response_format={"type": "json_object"},
                messages=[{"role": "user", "content": "JSON please"}])
    assert "structured_output" in str(caught.value) and rig.claude.seen == []


async def test_anthropic_messages_parse_in_front_of_chat_completions(rig: Rig) -> None:
    async with rig.anthropic() as client:
        done = await client.messages.parse(
            model="claude-sonnet-4-6", max_tokens=1024, output_format=CalendarEvent,
            messages=[{"role": "user", "content": "Alice and Bob go to a science fair."}])
    assert done.parsed_output == EVENT
    (body,) = rig.chat.seen
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "response"
    assert set(fmt["json_schema"]["schema"]["properties"]) == {"name", "date", "participants"}
