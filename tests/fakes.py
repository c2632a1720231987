"""Small in-process fake upstreams and client-side readers for the server tests.

A :class:`FakeUpstream` speaks one dialect at ``/chat`` (and ``/chat/stream``), rendering its
answer with the gateway's dialect modules (as the demo backends do), and is scripted per request
with a :class:`Script`: status, raw body, delays, gates (``asyncio.Event``) that hold the answer,
an error event or a dropped connection mid-stream. It records what it was sent and whether its
client (the gateway) went away.

The client-side readers (:func:`read_stream`, :func:`read_whole`, :func:`error_of`) parse the
gateway's answers with their own small code, independent of the gateway's decoders.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from gateway.canonical import (
    AssistantMessage,
    ChatResponse,
    Citation,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    context_with_citations,
)
from gateway.dialects import DIALECT_NAMES, get
from gateway.framing import encoder_for

__all__ = [
    "CHATUI",
    "CITATION_NAMES",
    "CLIENT_STATE",
    "FOLLOWUPS",
    "HOLD_MAX",
    "OPENAI",
    "P0128",
    "P0529",
    "TEXT",
    "UP_STATE",
    "USAGE",
    "ClientView",
    "FakeUpstream",
    "Fakes",
    "Script",
    "client_body",
    "closed_port",
    "error_of",
    "eventually",
    "free_port",
    "read_stream",
    "read_whole",
    "stream_request",
    "upstream_config",
]

P0128, P0529, CHATUI, OPENAI = DIALECT_NAMES
HOLD_MAX = 10.0
"""The longest any fake waits on a gate: every test stays bounded even when it fails."""

TEXT = "Héllo wörld 👋 — the answer\nin several pieces, \"quoted\" and done."
CITATIONS = [
    Citation("doc-one.pdf#page=2", "doc-one.pdf#page=2", None, "the first snippet"),
    Citation("https://example.com/two", "https://example.com/two", "https://example.com/two",
             "the second snippet"),
]
CITATION_NAMES = ["doc-one.pdf#page=2", "https://example.com/two"]
FOLLOWUPS = ["What else is covered?"]
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
UP_STATE = "up-state-1"
CLIENT_STATE = "client-state-1"


def answer_context() -> dict[str, Any]:
    ctx = context_with_citations(CITATIONS, {"thoughts": [{"title": "t", "description": "d"}]})
    assert isinstance(ctx, dict)
    return {**ctx, "followup_questions": FOLLOWUPS}


@dataclass
class Script:
    """How a fake answers one request."""

    status: int = 200
    body: bytes | None = None
    """A raw body that replaces the answer (an error body, HTML, …)."""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds before anything is sent."""
    stream: bool | None = None
    """Force a streamed (True) or whole (False) answer; None: as the request asks."""
    text: str = TEXT
    pieces: int = 4
    chunk_delay: float = 0.0
    hold_before: asyncio.Event | None = None
    """Wait for this before sending anything at all."""
    hold_after_first: asyncio.Event | None = None
    """Streams: wait for this after the first frame that carries text."""
    error_after: int | None = None
    """Streams: send the dialect's error event after this many text pieces."""
    die_after: int | None = None
    """Streams: drop the connection after this many text pieces."""
    context: Any = field(default_factory=answer_context)
    session_state: Any = UP_STATE
    usage: dict[str, Any] | None = field(default_factory=lambda: dict(USAGE))
    finish_reason: str = "stop"


@dataclass
class Seen:
    path: str
    headers: Mapping[str, str]
    """Case-insensitive, as HTTP header names are."""
    body: Any
    stream: bool


class FakeUpstream:
    def __init__(self, dialect: str, script: Script | None = None) -> None:
        self.dialect = get(dialect)
        self.default = script or Script()
        self.queue: list[Script] = []
        """Scripts for the next requests, in order; then :attr:`default`."""
        self.seen: list[Seen] = []
        self.gone = asyncio.Event()
        """Set when the gateway went away while this fake was answering."""
        self.finished = 0
        self.health_status = 200
        self.health_checks = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    # --- addresses -----------------------------------------------------------------------------

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/chat"

    @property
    def name(self) -> str:
        return self.dialect.name

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> FakeUpstream:
        app = web.Application()
        app.router.add_post("/chat", self._chat)
        app.router.add_post("/chat/stream", self._chat)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                                     shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- handlers ------------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        self.health_checks += 1
        return web.json_response({"status": self.health_status}, status=self.health_status)

    def _wants_stream(self, request: web.Request, body: Any) -> bool:
        if request.path.endswith("/stream"):
            return True
        if self.dialect.name == P0529:
            return False
        if isinstance(body, dict) and body.get("stream") is True:
            return True
        return (self.dialect.name == CHATUI
                and "text/event-stream" in request.headers.get("Accept", ""))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        script = self.queue.pop(0) if self.queue else self.default
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw
        stream = self._wants_stream(request, body)
        self.seen.append(Seen(request.path, CIMultiDict(request.headers), body, stream))
        try:
            return await self._answer(request, script, body, stream)
        except asyncio.CancelledError:
            self.gone.set()
            raise
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            self.gone.set()
            raise

    async def _answer(self, request: web.Request, s: Script, body: Any,
                      stream: bool) -> web.StreamResponse:
        if s.hold_before is not None:
            await asyncio.wait_for(s.hold_before.wait(), HOLD_MAX)
        if s.delay:
            await asyncio.sleep(s.delay)
        if s.body is not None or s.status != 200:
            raw = s.body if s.body is not None else orjson.dumps(
                self.dialect.render_error(_error(s.status, "scripted failure")))
            self.finished += 1
            return web.Response(status=s.status, body=raw, headers={
                "Content-Type": s.content_type, **s.headers})
        req = self.dialect.parse_request(body)
        if s.stream is not None:
            stream = s.stream
        if not stream:
            resp = ChatResponse(
                messages=[AssistantMessage(s.text)], context=s.context,
                session_state=s.session_state, finish_reason=s.finish_reason, usage=s.usage,
                id="chatcmpl-up-1", created=1_700_000_000, model="up-model")
            self.finished += 1
            return web.Response(body=orjson.dumps(self.dialect.render_response(resp, req)),
                                content_type="application/json", headers=s.headers)
        out = web.StreamResponse(headers={"Content-Type": self.dialect.stream_content_type,
                                          **s.headers})
        await out.prepare(request)
        encoder, frame = self.dialect.encoder(req), encoder_for(self.dialect.framing)

        async def send(event: StreamEvent) -> None:
            data = b"".join(frame(p) for p in encoder.encode(event))
            if data:
                await out.write(data)

        await send(StreamStart(context=s.context, session_state=s.session_state,
                               id="chatcmpl-up-1", created=1_700_000_000, model="up-model"))
        for i, piece in enumerate(split(s.text, s.pieces)):
            if s.die_after is not None and i == s.die_after:
                assert request.transport is not None
                request.transport.abort()
                self.finished += 1
                return out
            if s.error_after is not None and i == s.error_after:
                await send(StreamError("upstream broke down mid-answer"))
                await out.write_eof()
                self.finished += 1
                return out
            await send(TextDelta(piece))
            if i == 0 and s.hold_after_first is not None:
                await asyncio.wait_for(s.hold_after_first.wait(), HOLD_MAX)
            if s.chunk_delay:
                await asyncio.sleep(s.chunk_delay)
        await send(StreamFinish(s.finish_reason, s.usage))
        await out.write_eof()
        self.finished += 1
        return out


def _error(status: int, message: str) -> Any:
    from gateway.canonical import ChatError

    return ChatError(status, message, code="SCRIPTED")


def split(text: str, n: int) -> list[str]:
    n = max(1, min(n, len(text)))
    size = -(-len(text) // n)
    return [text[i:i + size] for i in range(0, len(text), size)]


class Fakes:
    """Starts fakes and closes them all at the end of a test."""

    def __init__(self) -> None:
        self._all: list[FakeUpstream] = []

    async def start(self, dialect: str, script: Script | None = None) -> FakeUpstream:
        fake = await FakeUpstream(dialect, script).start()
        self._all.append(fake)
        return fake

    async def close(self) -> None:
        for fake in self._all:
            with contextlib.suppress(Exception):
                await fake.close()


async def eventually(check: Callable[[], Awaitable[bool] | bool], within: float = 5.0) -> None:
    """Poll ``check`` (sync or async) until it holds; fail after ``within`` seconds."""
    async with asyncio.timeout(within):
        while True:
            result = check()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await asyncio.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def closed_port() -> int:
    """A port on which nothing listens (connections are refused)."""
    return free_port()


def upstream_config(fake: FakeUpstream | str, url: str | None = None,
                    **extra: Any) -> dict[str, Any]:
    if isinstance(fake, str):
        assert url is not None
        return {"dialect": fake, "url": url, "connect_timeout": 1, "timeout": 3, **extra}
    return {"dialect": fake.name, "url": url or fake.url, "connect_timeout": 1, "timeout": 3,
            "health_url": None, **extra}


# --- the client side -----------------------------------------------------------------------------


def client_body(client: str, *, stream: bool, state: Any = CLIENT_STATE,
                text: str = "What is covered?") -> dict[str, Any]:
    """A request as a real client of ``client`` sends it."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": text}]}
    if client == P0128:
        body["stream"] = stream
        if state is not None:
            body["session_state"] = state
    elif client == P0529:
        if state is not None:
            body["sessionState"] = state
    elif client == CHATUI:
        if isinstance(state, str):
            body["conversationId"] = state
    else:
        body["model"] = "client-model"
        body["stream"] = stream
        if stream:
            body["stream_options"] = {"include_usage": True}
    return body


def stream_request(client: str, path: str, *, stream: bool, state: Any = CLIENT_STATE,
                   text: str = "What is covered?",
                   ) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The path, body and headers a client of ``client`` uses."""
    headers: dict[str, str] = {}
    if client == P0529 and stream:
        path = path.rstrip("/") + "/stream"
    if client == CHATUI and stream:
        headers["Accept"] = "text/event-stream"
    return path, client_body(client, stream=stream, state=state, text=text), headers


@dataclass
class ClientView:
    """What a client of one dialect read from an answer."""

    text: str = ""
    context: Any = None
    citations: list[str] = field(default_factory=list)
    followups: list[str] = field(default_factory=list)
    session_state: Any = None
    usage: Any = None
    finish_reason: str | None = None
    finished: bool = False
    """The stream ended the dialect's clean way."""
    error: str | None = None
    payloads: list[Any] = field(default_factory=list)


def _frames(dialect: str, data: bytes) -> list[Any]:
    """The payloads of a stream: JSON lines, or SSE events' data (``[DONE]`` kept as text)."""
    out: list[Any] = []
    if get(dialect).framing == "jsonlines":
        for line in data.split(b"\n"):
            if line.strip():
                out.append(orjson.loads(line))
        return out
    for event in data.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [ln[5:].removeprefix(b" ") for ln in event.split(b"\n")
                 if ln.startswith(b"data:")]
        if not lines:
            continue
        raw = b"\n".join(lines)
        out.append("[DONE]" if raw == b"[DONE]" else orjson.loads(raw))
    return out


def _protocol_context(view: ClientView, ctx: Any) -> None:
    if not isinstance(ctx, dict):
        return
    view.context = ctx if view.context is None else {**view.context, **ctx}
    points = ctx.get("data_points")
    if isinstance(points, dict) and isinstance(points.get("citations"), list):
        view.citations = list(points["citations"])
    if isinstance(ctx.get("followup_questions"), list):
        view.followups = list(ctx["followup_questions"])


def read_stream(dialect: str, data: bytes) -> ClientView:
    view = ClientView(payloads=_frames(dialect, data))
    chatui_ids: dict[str, str] = {}
    for p in view.payloads:
        assert view.error is None, f"something followed the error event: {p!r}"
        if dialect in (P0128, P0529):
            assert isinstance(p, dict)
            if "error" in p:
                view.error = p["error"]
                continue
            if dialect == P0128:
                choice = p["choices"][0] if p.get("choices") else {}
                delta = choice.get("delta") or {}
                _protocol_context(view, choice.get("context"))
                if "session_state" in choice:
                    view.session_state = choice["session_state"]
                if choice.get("finish_reason"):
                    view.finish_reason = choice["finish_reason"]
                    view.finished = True
                if p.get("usage") is not None:
                    view.usage = p["usage"]
            else:
                delta = p.get("delta") or {}
                _protocol_context(view, p.get("context"))
                for key in ("sessionState", "session_state"):
                    if key in p:
                        view.session_state = p[key]
            view.text += delta.get("content") or ""
        elif dialect == CHATUI:
            assert isinstance(p, dict)
            if p.get("status") == "failed":
                err = p.get("error") or {}
                view.error = err.get("message", "")
                continue
            chatui_ids[p["messageId"]] = p["content"]
            if p.get("sources"):
                view.citations = [s.get("url") or s["title"] for s in p["sources"]]
            if "conversationId" in p:
                view.session_state = p["conversationId"]
            view.finished = p.get("status") == "completed"
            if view.finished:
                view.finish_reason = "stop"
        else:
            if p == "[DONE]":
                view.finished = True
                continue
            assert not view.finished, "a chunk followed [DONE]"
            assert isinstance(p, dict)
            if "error" in p:
                view.error = p["error"]["message"]
                continue
            if p.get("usage") is not None:
                view.usage = p["usage"]
            for choice in p.get("choices") or []:
                view.text += (choice.get("delta") or {}).get("content") or ""
                if choice.get("finish_reason"):
                    view.finish_reason = choice["finish_reason"]
    if dialect == CHATUI:
        view.text = "".join(chatui_ids.values())
    if dialect == P0529 and view.error is None:
        view.finished = True  # a 2024-05-29 stream ends by ending
    return view


def read_whole(dialect: str, body: Any) -> ClientView:
    view = ClientView(payloads=[body])
    if dialect == P0128:
        choice = body["choices"][0]
        view.text = choice["message"]["content"]
        _protocol_context(view, choice.get("context"))
        view.session_state = choice.get("session_state")
        view.finish_reason = choice.get("finish_reason")
        view.usage = body.get("usage")
    elif dialect == P0529:
        view.text = body["message"]["content"]
        _protocol_context(view, body.get("context"))
        view.session_state = body.get("sessionState", body.get("session_state"))
    elif dialect == CHATUI:
        items = body if isinstance(body, list) else [body]
        view.text = "".join(m["content"] for m in items)
        view.citations = [s.get("url") or s["title"] for m in items for s in m.get("sources", [])]
        view.session_state = items[0].get("conversationId")
        view.finish_reason = "stop" if items[-1].get("status") == "completed" else None
    else:
        choice = body["choices"][0]
        view.text = choice["message"]["content"]
        view.finish_reason = choice.get("finish_reason")
        view.usage = body.get("usage")
    view.finished = True
    return view


def error_of(dialect: str, body: Any) -> str:
    """The message of an error answer, checking that it has the client dialect's shape."""
    assert isinstance(body, dict), body
    if dialect in (P0128, P0529):
        assert set(body) == {"error"} and isinstance(body["error"], str), body
        return str(body["error"])
    if dialect == CHATUI:
        assert body["status"] == "failed" and body["role"] == "assistant", body
        assert isinstance(body["error"]["code"], str), body
        return str(body["error"]["message"])
    err = body["error"]
    assert set(err) >= {"message", "type", "param", "code"}, body
    return str(err["message"])
