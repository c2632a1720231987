"""The Vercel AI SDK's UI message stream (v1) on the wire: ``useChat``'s UI messages in, SSE
chunks out (``start``, a text block of ``text-delta`` chunks, ``finish``, ``data: [DONE]``).
The protocol has no whole answer: a body that says ``"stream": false`` gets the final UI
message."""

from __future__ import annotations

from typing import Any

import orjson

from wire import WORD, WireError, sse, sse_data

NAME = "ai-sdk-ui"
SHORT = "aisdk"
MOCK_PATH = "/api/ui-chat"
STREAM_SUFFIX = ""
STREAM_CONTENT_TYPE = "text/event-stream"
UPSTREAM: dict[str, Any] = {}
KEEPS_STATE = False


def request(stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {"id": "chat-bench", "trigger": "submit-message", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
    if not stream:
        body["stream"] = False
    return body, {}


def refusal(body: dict[str, Any], headers: Any) -> str | None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("parts"), list) for m in messages):
        return "no UI messages"
    return None


def wants_stream(body: dict[str, Any], headers: Any) -> bool:
    return body.get("stream") is not False


def whole_body(chunks: int) -> dict[str, Any]:
    return {"id": "msg-mock", "role": "assistant", "parts": [
        {"type": "step-start"}, {"type": "text", "text": WORD * chunks, "state": "done"}],
        "metadata": {"usage": {"inputTokens": 1, "outputTokens": chunks,
                               "totalTokens": chunks + 1}}}


def stream_frames(chunks: int) -> list[bytes]:
    return [sse({"type": "start", "messageId": "msg-mock"}), sse({"type": "start-step"}),
            sse({"type": "text-start", "id": "t0"}),
            *(sse({"type": "text-delta", "id": "t0", "delta": WORD}) for _ in range(chunks)),
            sse({"type": "text-end", "id": "t0"}), sse({"type": "finish-step"}),
            sse({"type": "finish", "finishReason": "stop"}), b"data: [DONE]\n\n"]


def whole_text(obj: Any) -> str:
    return "".join(p["text"] for p in obj["parts"] if p.get("type") == "text")


def stream_text(body: bytes) -> str:
    parts: list[str] = []
    for data in sse_data(body):
        if data == b"[DONE]":
            return "".join(parts)
        chunk = orjson.loads(data)
        if chunk.get("type") == "error":
            raise WireError(f"error chunk: {chunk.get('errorText')}")
        if chunk.get("type") == "text-delta":
            parts.append(chunk["delta"])
    raise WireError("the stream ended without [DONE]")
