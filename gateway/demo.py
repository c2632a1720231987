"""Built-in demo backends, one per dialect, that answer a short streamed answer with citations and
session state. They speak their dialect through the gateway's own dialect modules, so each one is
a faithful example of its wire format.

Ports: 9001 protocol-2024-01-28 (``/chat``), 9002 protocol-2024-05-29 (``/chat``,
``/chat/stream``), 9003 chatui (``/api/chat``), 9004 openai (``/v1/chat/completions``).
"""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web

from gateway.canonical import AssistantMessage, ChatError, ChatRequest, ChatResponse, TextDelta
from gateway.dialects import get
from gateway.dialects.base import text_of
from gateway.errors import ParseError
from gateway.framing import encoder_for
from gateway.pipeline import events_from_response, parse_body

__all__ = ["DEMO_BACKENDS", "demo_backend_app", "start_demo_backends"]

DEMO_BACKENDS: dict[str, tuple[int, str]] = {
    "protocol-2024-01-28": (9001, "/chat"),
    "protocol-2024-05-29": (9002, "/chat"),
    "chatui": (9003, "/api/chat"),
    "openai": (9004, "/v1/chat/completions"),
}
_TOKEN_DELAY = 0.04


def demo_answer(dialect: str, req: ChatRequest) -> ChatResponse:
    question = next((text_of(m.content) for m in reversed(req.messages) if m.role == "user"), "")
    text = (f"Hello from the {dialect} demo backend! You asked: \"{question}\". "
            "The gateway translated your request and is streaming this answer back "
            "in your own dialect [gateway-guide.pdf#page=1].")
    return ChatResponse(
        messages=[AssistantMessage(text)],
        context={
            "data_points": {
                "text": ["gateway-guide.pdf#page=1: The gateway translates chat dialects."],
                "citations": ["gateway-guide.pdf#page=1"],
            },
            "thoughts": [{"title": "Demo", "description": f"answered by the {dialect} demo"}],
            "followup_questions": ["Which dialects does the gateway speak?"],
        },
        session_state=req.session_state if req.session_state is not None else "demo-session-1",
        finish_reason="stop",
        usage={"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42},
        model=req.model or "demo-model",
    )


def _tokens(text: str) -> list[str]:
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


def demo_backend_app(dialect_name: str) -> web.Application:
    dialect = get(dialect_name)
    _, path = DEMO_BACKENDS[dialect_name]

    async def answer(request: web.Request, stream_by_path: bool | None) -> web.StreamResponse:
        try:
            req = dialect.parse_request(parse_body(await request.read()))
        except ParseError as e:
            return web.json_response(dialect.render_error(ChatError(400, str(e))), status=400)
        stream = stream_by_path if stream_by_path is not None else (
            req.stream or "text/event-stream" in request.headers.get("Accept", ""))
        whole = demo_answer(dialect_name, req)
        if not stream:
            return web.json_response(body=orjson.dumps(dialect.render_response(whole, req)))
        resp = web.StreamResponse(headers={"Content-Type": dialect.stream_content_type,
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        encoder, frame = dialect.encoder(req), encoder_for(dialect.framing)
        events = events_from_response(whole)
        for event in events:
            pieces = [TextDelta(t) for t in _tokens(event.text)] if isinstance(
                event, TextDelta) else [event]
            for piece in pieces:
                for payload in encoder.encode(piece):
                    await resp.write(frame(payload))
                await asyncio.sleep(_TOKEN_DELAY)
        await resp.write_eof()
        return resp

    async def whole(request: web.Request) -> web.StreamResponse:
        return await answer(request, False)

    async def streamed(request: web.Request) -> web.StreamResponse:
        return await answer(request, True)

    async def either(request: web.Request) -> web.StreamResponse:
        return await answer(request, None)

    app = web.Application()
    if dialect.stream_path:
        app.router.add_post(path, whole)
        app.router.add_post(path + dialect.stream_path, streamed)
    else:
        app.router.add_post(path, either)
    return app


async def start_demo_backends(host: str = "127.0.0.1") -> list[web.AppRunner]:
    runners = []
    for name, (port, _) in DEMO_BACKENDS.items():
        runner = web.AppRunner(demo_backend_app(name), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        runners.append(runner)
    return runners
