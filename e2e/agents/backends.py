"""Scripted fake backends for the coding-agent runs, each answering in its own wire format.

A backend is chosen by the path its clients post to (``/v1/chat/completions``,
``/v1/messages``, ``/v1/responses``); the gateway's dialect for it is the one whose
``default_path`` that is, so nothing here names a dialect. The script is two turns: a request
that offers tools and carries no tool result gets one tool call (the scenario's), and a request
that carries a tool result gets the scenario's final text; a request that offers no tools (an
agent's side request, a backend that has no tools) gets the final text too. Streams and whole
answers are both written, the wire's own way, by hand here: the gateway's code never writes what
it reads.

A freeform tool (Codex's ``apply_patch``) is called natively where the wire offers it as one
(Chat Completions ``custom``), else as the function of one string argument ``input`` the
gateway documents (docs/translation.md).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

__all__ = ["CHAT", "MESSAGES", "RAG", "RESPONSES", "Call", "Offer", "ScriptedBackend", "Seen",
           "free_port"]

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
RAG = "/chat"
"""A RAG backend of the 2024-05-29 protocol: no tools; its stream at ``/chat/stream``, JSON
lines."""
WIRES = (CHAT, MESSAGES, RESPONSES, RAG)

JSON = Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class Offer:
    """A tool a request offers: its name, and whether it takes free text (a custom tool)."""

    name: str
    freeform: bool


@dataclass(frozen=True, slots=True)
class Call:
    """The call a scenario makes: JSON arguments (a dict), or a freeform tool's text."""

    name: str
    value: dict[str, JSON] | str


Chooser = Callable[[dict[str, Offer]], Call]
"""A scenario's first turn: the call to make, given the tools offered (by name)."""


@dataclass(slots=True)
class Seen:
    """What the backend was sent, for the test's assertions."""

    requests: list[JSON] = field(default_factory=list)
    offers: list[dict[str, Offer]] = field(default_factory=list)
    """Per request that offered tools: what it offered."""
    results: list[str] = field(default_factory=list)
    """The text of every tool result a request carried (last turn's first)."""
    calls: list[Call] = field(default_factory=list)
    thinking: list[JSON] = field(default_factory=list)
    """Anthropic wire: the thinking blocks requests gave back in assistant turns."""
    errors: list[str] = field(default_factory=list)
    """Why the scenario could not be played (what the agent offered did not fit)."""


class ScriptedBackend:
    """One backend on a free loopback port, speaking the wire of ``path``."""

    def __init__(self, path: str, choose: Chooser, final: str, *, think: bool = False) -> None:
        assert path in WIRES, path
        self.path = path
        self.choose = choose
        self.final = final
        self.think = think
        """Anthropic wire only: the tool call comes after a signed thinking block
        (:data:`THINKING`), as a model with extended thinking answers."""
        self.seen = Seen()
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(self.path, self._handle)
        if self.path == RAG:
            app.router.add_post(self.path + "/stream", self._handle)
        app.router.add_post(self.path + "/count_tokens", self._count)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _count(self, request: web.Request) -> web.Response:
        return web.json_response({"input_tokens": 100})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.seen.requests.append(body)
        offers = _offers(self.path, body)
        results = _results(self.path, body)
        self.seen.results.extend(results)
        if not offers:
            reply: tuple[str, Call | None] = (self.final, None)
        elif results:
            self.seen.offers.append(offers)
            reply = (self.final, None)
        else:
            self.seen.offers.append(offers)
            try:
                call = self.choose(offers)
            except (AssertionError, StopIteration) as e:
                # a 400 (no retry): the scenario cannot be played with what was offered
                self.seen.errors.append(f"{type(e).__name__}: {e}")
                return web.json_response({"error": {"message": str(e)}}, status=400)
            self.seen.calls.append(call)
            reply = ("", call)
        text, call = reply
        if self.path == MESSAGES:
            self.seen.thinking.extend(_thinking(body))
        model = body.get("model") or "fake-model"
        frames = _messages(text, call, offers, model, self.think) if self.path == MESSAGES \
            else _WRITERS[self.path](text, call, offers, model)
        streamed = request.path.endswith("/stream") if self.path == RAG else body.get("stream")
        if not streamed:
            return web.json_response(frames.whole)
        resp = web.StreamResponse(headers={
            "Content-Type": "application/json-lines" if self.path == RAG
            else "text/event-stream"})
        await resp.prepare(request)
        for frame in frames.stream:
            await resp.write(frame)
            await asyncio.sleep(0)
        await resp.write_eof()
        return resp


# --- what a request offers, and the tool results it carries --------------------------------------


def _offers(path: str, body: JSON) -> dict[str, Offer]:
    out: dict[str, Offer] = {}
    for t in body.get("tools") or []:
        kind = t.get("type")
        if path == CHAT:
            if kind == "custom":
                out[t["custom"]["name"]] = Offer(t["custom"]["name"], True)
            elif kind == "function":
                out[t["function"]["name"]] = Offer(t["function"]["name"], False)
        elif path == MESSAGES:
            if "name" in t and kind in (None, "custom"):
                out[t["name"]] = Offer(t["name"], False)
        elif kind in ("function", "custom"):
            out[t["name"]] = Offer(t["name"], kind == "custom")
    return out


def _results(path: str, body: JSON) -> list[str]:
    out: list[str] = []
    if path == CHAT:
        out = [_text(m.get("content")) for m in body.get("messages") or []
               if m.get("role") == "tool"]
    elif path == MESSAGES:
        for m in body.get("messages") or []:
            content = m.get("content")
            if isinstance(content, list):
                out += [_text(b.get("content")) for b in content
                        if isinstance(b, dict) and b.get("type") == "tool_result"]
    else:
        items = body.get("input")
        out = [_text(i.get("output")) for i in (items if isinstance(items, list) else [])
               if isinstance(i, dict) and i.get("type") in ("function_call_output",
                                                            "custom_tool_call_output")]
    return out


def _text(content: JSON) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


# --- answers, whole and streamed ------------------------------------------------------------


@dataclass(slots=True)
class Frames:
    whole: JSON
    stream: list[bytes]


def _sse(data: JSON, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + (data if isinstance(data, bytes) else orjson.dumps(data)) + b"\n\n"


def _halves(text: str) -> list[str]:
    """``text`` in three pieces, cut inside it (a stream's arguments rarely arrive whole)."""
    a, b = len(text) // 3, 2 * len(text) // 3
    return [p for p in (text[:a], text[a:b], text[b:]) if p]


def _arguments(call: Call, offers: dict[str, Offer]) -> tuple[bool, str]:
    """(freeform, what goes on the wire): a freeform tool offered as a function takes its text
    as the one argument ``input``."""
    offer = offers.get(call.name)
    if isinstance(call.value, str):
        if offer is not None and offer.freeform:
            return True, call.value
        return False, orjson.dumps({"input": call.value}).decode()
    return False, orjson.dumps(call.value).decode()


def _chat(text: str, call: Call | None, offers: dict[str, Offer], model: str) -> Frames:
    base = {"id": "chatcmpl-e2e", "created": 1, "model": model}
    usage = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    chunks = [{"role": "assistant", "content": ""}]
    message: dict[str, JSON] = {"role": "assistant", "content": text or None}
    reason = "stop"
    if call is not None:
        freeform, args = _arguments(call, offers)
        reason = "tool_calls"
        if freeform:
            message["tool_calls"] = [{"id": "call_e2e", "type": "custom",
                                      "custom": {"name": call.name, "input": args}}]
            chunks.append({"tool_calls": [{"index": 0, "id": "call_e2e", "type": "custom",
                                           "custom": {"name": call.name, "input": ""}}]})
            chunks += [{"tool_calls": [{"index": 0, "custom": {"input": p}}]}
                       for p in _halves(args)]
        else:
            message["tool_calls"] = [{"id": "call_e2e", "type": "function",
                                      "function": {"name": call.name, "arguments": args}}]
            chunks.append({"tool_calls": [{"index": 0, "id": "call_e2e", "type": "function",
                                           "function": {"name": call.name, "arguments": ""}}]})
            chunks += [{"tool_calls": [{"index": 0, "function": {"arguments": p}}]}
                       for p in _halves(args)]
    else:
        chunks += [{"content": p} for p in _halves(text)]
    stream = [_sse({**base, "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": d, "finish_reason": None}]})
              for d in chunks]
    stream.append(_sse({**base, "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}))
    stream.append(_sse({**base, "object": "chat.completion.chunk", "choices": [],
                        "usage": usage}))
    stream.append(_sse(b"[DONE]"))
    whole = {**base, "object": "chat.completion", "usage": usage,
             "choices": [{"index": 0, "message": message, "finish_reason": reason}]}
    return Frames(whole, stream)


THINKING = {"type": "thinking", "thinking": "The user wants a step run; a tool does it.",
            "signature": "ErUBCkYIBxgCIkDe2e-signature-of-the-fake-backend=="}
"""The signed thinking block a thinking backend sends before its tool call."""


def _thinking(body: JSON) -> list[JSON]:
    return [b for m in body.get("messages") or [] if m.get("role") == "assistant"
            and isinstance(m.get("content"), list) for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "thinking"]


def _messages(text: str, call: Call | None, offers: dict[str, Offer], model: str,
              think: bool = False) -> Frames:
    usage = {"input_tokens": 20, "output_tokens": 5}
    start = {"id": "msg_e2e", "type": "message", "role": "assistant", "model": model,
             "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": 20, "output_tokens": 1}}
    stream = [_sse({"type": "message_start", "message": start}, "message_start")]
    blocks: list[JSON] = []
    if call is not None and think:
        blocks.append(THINKING)
        stream.append(_sse({"type": "content_block_start", "index": 0, "content_block": {
            "type": "thinking", "thinking": "", "signature": ""}}, "content_block_start"))
        stream += [_sse({"type": "content_block_delta", "index": 0, "delta": {
            "type": "thinking_delta", "thinking": p}}, "content_block_delta")
            for p in _halves(THINKING["thinking"])]
        stream.append(_sse({"type": "content_block_delta", "index": 0, "delta": {
            "type": "signature_delta", "signature": THINKING["signature"]}},
            "content_block_delta"))
        stream.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    at = len(blocks)
    if call is not None:
        _, args = _arguments(call, offers)
        block: dict[str, JSON] = {"type": "tool_use", "id": "toolu_e2e", "name": call.name,
                                  "input": orjson.loads(args)}
        stream.append(_sse({"type": "content_block_start", "index": at, "content_block": {
            **block, "input": {}}}, "content_block_start"))
        stream += [_sse({"type": "content_block_delta", "index": at, "delta": {
            "type": "input_json_delta", "partial_json": p}}, "content_block_delta")
            for p in _halves(args)]
        reason = "tool_use"
    else:
        block = {"type": "text", "text": text}
        stream.append(_sse({"type": "content_block_start", "index": 0, "content_block": {
            "type": "text", "text": ""}}, "content_block_start"))
        stream += [_sse({"type": "content_block_delta", "index": 0, "delta": {
            "type": "text_delta", "text": p}}, "content_block_delta") for p in _halves(text)]
        reason = "end_turn"
    blocks.append(block)
    stream.append(_sse({"type": "content_block_stop", "index": at}, "content_block_stop"))
    stream.append(_sse({"type": "message_delta", "delta": {
        "stop_reason": reason, "stop_sequence": None}, "usage": {"output_tokens": 5}},
        "message_delta"))
    stream.append(_sse({"type": "message_stop"}, "message_stop"))
    whole = {**start, "content": blocks, "stop_reason": reason, "usage": usage}
    return Frames(whole, stream)


def _responses(text: str, call: Call | None, offers: dict[str, Offer], model: str) -> Frames:
    usage = {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 25}
    shell = {"id": "resp_e2e", "object": "response", "created_at": 1, "model": model,
             "status": "in_progress", "output": [], "usage": None}
    events: list[JSON] = [{"type": "response.created", "response": shell},
                          {"type": "response.in_progress", "response": shell}]
    if call is not None:
        freeform, args = _arguments(call, offers)
        kind, key = ("custom_tool_call", "input") if freeform else ("function_call", "arguments")
        item = {"type": kind, "id": "fc_e2e", "call_id": "call_e2e", "name": call.name}
        events.append({"type": "response.output_item.added", "output_index": 0,
                       "item": {**item, key: "", "status": "in_progress"}})
        delta = ("response.custom_tool_call_input.delta" if freeform
                 else "response.function_call_arguments.delta")
        events += [{"type": delta, "item_id": "fc_e2e", "output_index": 0, "delta": p}
                   for p in _halves(args)]
        done = {**item, key: args, "status": "completed"}
    else:
        done = {"type": "message", "id": "msg_e2e", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
        events.append({"type": "response.output_item.added", "output_index": 0, "item": {
            **done, "status": "in_progress", "content": []}})
        events.append({"type": "response.content_part.added", "item_id": "msg_e2e",
                       "output_index": 0, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}})
        events += [{"type": "response.output_text.delta", "item_id": "msg_e2e",
                    "output_index": 0, "content_index": 0, "delta": p} for p in _halves(text)]
    events.append({"type": "response.output_item.done", "output_index": 0, "item": done})
    whole = {**shell, "status": "completed", "output": [done], "usage": usage}
    events.append({"type": "response.completed", "response": whole})
    stream = [_sse({**e, "sequence_number": n}, e["type"]) for n, e in enumerate(events)]
    return Frames(whole, stream)


def _rag(text: str, call: Call | None, offers: dict[str, Offer], model: str) -> Frames:
    assert call is None, "a RAG backend has no tools"
    context = {"data_points": {"text": []}, "thoughts": [], "followup_questions": None}
    whole = {"message": {"role": "assistant", "content": text}, "context": context,
             "session_state": None}
    stream = [orjson.dumps({"delta": {"role": "assistant"}, "context": context,
                            "session_state": None}) + b"\n"]
    stream += [orjson.dumps({"delta": {"content": p}}) + b"\n" for p in _halves(text)]
    return Frames(whole, stream)


_WRITERS: dict[str, Callable[[str, Call | None, dict[str, Offer], str], Frames]] = {
    CHAT: _chat, MESSAGES: _messages, RESPONSES: _responses, RAG: _rag}
