"""protocol-2024-01-28 on the wire: the ``choices`` format, JSON lines, the stream asked for by
the body's ``stream``."""

from __future__ import annotations

from typing import Any

from wire import CONTEXT, CREATED, USER, WORD, WireError, json_lines, line

NAME = "protocol-2024-01-28"
SHORT = "0128"
MOCK_PATH = "/p0128/chat"
STREAM_SUFFIX = ""
STREAM_CONTENT_TYPE = "application/json-lines"
UPSTREAM: dict[str, Any] = {}
KEEPS_STATE = False


def request(stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    return {"messages": USER, "stream": stream, "context": {}, "session_state": None}, {}


def refusal(body: dict[str, Any], headers: Any) -> str | None:
    return None if isinstance(body.get("messages"), list) else "no messages"


def wants_stream(body: dict[str, Any], headers: Any) -> bool:
    return body.get("stream") is True


def whole_body(chunks: int) -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": WORD * chunks},
                     "context": CONTEXT, "session_state": None, "finish_reason": "stop"}],
        "id": "mock-0128", "created": CREATED, "object": "chat.completion",
    }


def stream_frames(chunks: int) -> list[bytes]:
    first = {"choices": [{"index": 0, "delta": {"role": "assistant"}, "context": CONTEXT,
                          "finish_reason": None}]}
    piece = {"choices": [{"index": 0, "delta": {"content": WORD}, "finish_reason": None}]}
    return [line(first), *(line(piece) for _ in range(chunks))]


def whole_text(obj: Any) -> str:
    text: str = obj["choices"][0]["message"]["content"]
    return text


def stream_text(body: bytes) -> str:
    parts: list[str] = []
    for obj in json_lines(body):
        if obj.get("error") is not None:
            raise WireError(f"error line: {obj['error']}")
        delta = obj["choices"][0].get("delta")
        text = delta.get("content") if isinstance(delta, dict) else None
        if text:
            parts.append(text)
    return "".join(parts)
