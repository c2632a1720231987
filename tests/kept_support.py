"""Helpers of the stored-responses tests: the client dialect whose API keeps its answers and the
upstream dialects it is tried against (both from the registry, by declaration), and a fake
upstream of any dialect that answers what a script makes of the canonical request (a tool call,
then text), whole or streamed, through the dialect's own renderer and encoder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.canonical import (
    AssistantMessage,
    ChatRequest,
    ChatResponse,
    ToolCall,
    Usage,
)
from gateway.dialects import DIALECTS, Dialect, routes_by_prefix
from gateway.dialects.stored import stored_responses_of
from gateway.framing import encoder_for
from gateway.pipeline import events_from_response

__all__ = ["FAIL", "KEEPING", "LOOKING", "TOOL_UPSTREAMS", "ScriptedUpstream", "agent_script",
           "heard", "tool_then_text"]

KEEPING = next(n for n, d in DIALECTS.items() if stored_responses_of(d) is not None)
"""The dialect whose API keeps its answers."""
TOOL_UPSTREAMS = [n for n, d in DIALECTS.items()
                  if n != KEEPING and d.capabilities.tools and d.capabilities.usage_whole]
"""Upstream dialects of another API that carry tool loops (and usage)."""


def heard(req: ChatRequest) -> str:
    """What the scripted model says: how many messages it was sent, and the last one's text."""
    return f"heard {len(req.messages)}: {req.messages[-1].text}"


def tool_then_text(req: ChatRequest) -> ChatResponse:
    """With tools and no tool result yet: a call of the first tool; else :func:`heard`."""
    usage = Usage(input_tokens=11, output_tokens=7)
    if req.tools and not any(m.role == "tool" for m in req.messages):
        call = ToolCall("call_kept_1", req.tools[0].name, '{"city":"Paris"}')
        return ChatResponse([AssistantMessage("", tool_calls=[call])], finish_reason="tool_calls",
                            usage=usage, model="up-model")
    return ChatResponse([AssistantMessage(heard(req))], finish_reason="stop", usage=usage,
                        model="up-model")


FAIL = "FAIL"
"""A last message with this text gets the upstream's error (400, its dialect's sample body)."""
LOOKING = "Let me look that up."
WEATHER_JSON = '{"city":"Paris","temperature":21}'


def agent_script(req: ChatRequest) -> ChatResponse:
    """What an agent SDK's loops meet: JSON when the request asks for structured output (or
    forces one tool: the JSON as its arguments), a text and a call of the first tool while no
    tool result came back, then :func:`heard`."""
    usage = Usage(input_tokens=11, output_tokens=7)
    choice = req.tool_choice
    if req.output is not None:
        return ChatResponse([AssistantMessage(WEATHER_JSON)], finish_reason="stop", usage=usage)
    if choice is not None and choice.mode == "tool" and choice.name:
        call = ToolCall("call_json_1", choice.name, WEATHER_JSON)
        return ChatResponse([AssistantMessage("", tool_calls=[call])],
                            finish_reason="tool_calls", usage=usage)
    if req.tools and not any(m.role == "tool" for m in req.messages):
        call = ToolCall("call_kept_1", req.tools[0].name, '{"city":"Paris"}')
        return ChatResponse([AssistantMessage(LOOKING, tool_calls=[call])],
                            finish_reason="tool_calls", usage=usage)
    return ChatResponse([AssistantMessage(heard(req))], finish_reason="stop", usage=usage)


@dataclass
class ScriptedUpstream:
    """A fake upstream of ``dialect`` at its default path."""

    dialect: Dialect
    script: Callable[[ChatRequest], ChatResponse] = tool_then_text
    seen: list[ChatRequest] = field(default_factory=list)
    bodies: list[Any] = field(default_factory=list)
    cut_after_text: bool = False
    """Streams: drop the connection right after the frame that carries the answer's text (the
    client has seen the answer begin; its finish never comes)."""
    server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url(self.dialect.default_path))

    async def start(self) -> ScriptedUpstream:
        app = web.Application()
        path = self.dialect.default_path
        app.router.add_post(path, self._handle)
        if self.dialect.stream_path:
            app.router.add_post(path.rstrip("/") + self.dialect.stream_path, self._handle)
        if routes_by_prefix(self.dialect):  # the model and the method follow the path
            app.router.add_post(path.rstrip("/") + "/{rest:.+}", self._handle)
        else:
            app.router.add_route("*", path + "/{rest:.+}", self._kept)  # its stored answers
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    async def _kept(self, request: web.Request) -> web.Response:
        self.bodies.append({"method": request.method, "path": request.path_qs,
                            "authorization": request.headers.get("Authorization")})
        return web.json_response({"id": request.match_info["rest"], "object": "response",
                                  "kept_by": "upstream"}, status=200)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.bodies.append(body)
        req = self.dialect.parse_request(body)
        self.seen.append(req)
        if req.messages and FAIL in req.messages[-1].text:
            return web.json_response(self.dialect.samples.error, status=400)
        target = self.dialect.read_target(  # type: ignore[attr-defined]
            request.match_info["rest"], "POST", dict(request.query)) \
            if routes_by_prefix(self.dialect) else None
        stream = bool(target and target.stream) or req.stream or bool(
            self.dialect.stream_path and request.path.endswith(
            self.dialect.stream_path)) or (self.dialect.stream_by_accept and "text/event-stream"
                                           in request.headers.get("Accept", ""))
        answer = self.script(req)
        if not stream:
            return web.json_response(self.dialect.render_response(answer, req),
                                     dumps=lambda v: orjson.dumps(v).decode())
        out = web.StreamResponse(headers={"Content-Type": self.dialect.stream_content_type})
        await out.prepare(request)
        encoder, frame = self.dialect.encoder(req), encoder_for(self.dialect.framing)
        for event in events_from_response(answer):
            for payload in encoder.encode(event):
                data = frame(payload)
                await out.write(data)
                if self.cut_after_text and b"heard" in data:
                    assert request.transport is not None
                    request.transport.abort()
                    return out
        await out.write_eof()
        return out
