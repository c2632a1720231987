"""A Chat UI backend on the wire: SSE events whose ``content`` is the whole text so far, the
last one ``status: completed``; streams asked for by the body or ``Accept``."""

from __future__ import annotations

from typing import Any

from wire import USER, WORD, WireError, sse, sse_data

NAME = "chatui"
SHORT = "chatui"
MOCK_PATH = "/api/chat"
STREAM_SUFFIX = ""
STREAM_CONTENT_TYPE = "text/event-stream"
UPSTREAM: dict[str, Any] = {}
KEEPS_STATE = True
"""Its stream repeats the whole text so far in every event: the gateway keeps per-stream state
that grows with the answer."""
CREATED_AT = "2024-01-01T00:00:00.000Z"


def request(stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    return {"messages": USER, "stream": stream}, ({"Accept": "text/event-stream"}
                                                   if stream else {})


def refusal(body: dict[str, Any], headers: Any) -> str | None:
    return None if isinstance(body.get("messages"), list) else "no messages"


def wants_stream(body: dict[str, Any], headers: Any) -> bool:
    return body.get("stream") is True or "text/event-stream" in headers.get("Accept", "")


def _event(content: str, status: str) -> dict[str, Any]:
    return {"messageId": "msg-mock", "status": status, "role": "assistant", "content": content,
            "contentType": "text", "sources": [], "error": None, "createdAt": CREATED_AT}


def whole_body(chunks: int) -> dict[str, Any]:
    return _event(WORD * chunks, "completed")


def stream_frames(chunks: int) -> list[bytes]:
    return [sse(_event(WORD * i, "completed" if i == chunks else "processing"))
            for i in range(1, chunks + 1)]


def whole_text(obj: Any) -> str:
    if isinstance(obj, list):
        return "".join(m["content"] for m in obj)
    if obj.get("status") != "completed":
        raise WireError(f"status {obj.get('status')!r}")
    text: str = obj["content"]
    return text


def stream_text(body: bytes) -> str:
    import orjson

    last: Any = None
    for data in sse_data(body):
        last = orjson.loads(data)
    if not isinstance(last, dict) or last.get("status") != "completed":
        raise WireError(f"last event not completed: {str(last)[:200]}")
    text: str = last["content"]
    return text
