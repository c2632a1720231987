"""protocol-2024-05-29 on the wire: ``message``/``delta``, JSON lines, streams at the path's
``/stream``."""

from __future__ import annotations

from typing import Any

from wire import CONTEXT, USER, WORD, WireError, json_lines, line

NAME = "protocol-2024-05-29"
SHORT = "0529"
MOCK_PATH = "/p0529/chat"
STREAM_SUFFIX = "/stream"
STREAM_CONTENT_TYPE = "application/json-lines"
UPSTREAM: dict[str, Any] = {}
KEEPS_STATE = False


def request(stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    return {"messages": USER, "context": {}, "session_state": None}, {}


def refusal(body: dict[str, Any], headers: Any) -> str | None:
    return None if isinstance(body.get("messages"), list) else "no messages"


def wants_stream(body: dict[str, Any], headers: Any) -> bool:
    return False  # only the path asks for a stream


def whole_body(chunks: int) -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": WORD * chunks}, "context": CONTEXT,
            "session_state": None}


def stream_frames(chunks: int) -> list[bytes]:
    return [line({"delta": {"role": "assistant"}, "context": CONTEXT}),
            *(line({"delta": {"content": WORD}}) for _ in range(chunks))]


def whole_text(obj: Any) -> str:
    text: str = obj["message"]["content"]
    return text


def stream_text(body: bytes) -> str:
    parts: list[str] = []
    for obj in json_lines(body):
        if obj.get("error") is not None:
            raise WireError(f"error line: {obj['error']}")
        delta = obj.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else None
        if text:
            parts.append(text)
    return "".join(parts)
