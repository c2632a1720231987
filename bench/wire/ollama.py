"""Ollama's native chat API on the wire: NDJSON lines of ``message`` pieces, the last with
``done: true``; a stream unless the body says ``"stream": false``."""

from __future__ import annotations

from typing import Any

from wire import USER, WORD, WireError, json_lines, line

NAME = "ollama"
SHORT = "ollama"
MOCK_PATH = "/ollama/api/chat"
STREAM_SUFFIX = ""
STREAM_CONTENT_TYPE = "application/x-ndjson"
UPSTREAM: dict[str, Any] = {"model": "m"}
KEEPS_STATE = False
CREATED_AT = "2024-01-01T00:00:00.000000Z"


def request(stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    return {"model": "m", "messages": USER, "stream": stream}, {}


def refusal(body: dict[str, Any], headers: Any) -> str | None:
    if not isinstance(body.get("model"), str):
        return "model is required"
    return None if isinstance(body.get("messages"), list) else "no messages"


def wants_stream(body: dict[str, Any], headers: Any) -> bool:
    return body.get("stream") is not False


def _line(content: str, done: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"model": "m", "created_at": CREATED_AT,
                           "message": {"role": "assistant", "content": content}, "done": done}
    return out


def whole_body(chunks: int) -> dict[str, Any]:
    return {**_line(WORD * chunks, True), "done_reason": "stop", "total_duration": 1000,
            "prompt_eval_count": 1, "eval_count": chunks}


def stream_frames(chunks: int) -> list[bytes]:
    return [*(line(_line(WORD, False)) for _ in range(chunks)),
            line({**_line("", True), "done_reason": "stop", "total_duration": 1000,
                  "prompt_eval_count": 1, "eval_count": chunks})]


def whole_text(obj: Any) -> str:
    if obj.get("done") is not True:
        raise WireError(f"not done: {str(obj)[:200]}")
    text: str = obj["message"]["content"]
    return text


def stream_text(body: bytes) -> str:
    parts: list[str] = []
    for obj in json_lines(body):
        if obj.get("error") is not None:
            raise WireError(f"error line: {obj['error']}")
        parts.append(obj["message"]["content"])
        if obj.get("done") is True:
            return "".join(parts)
    raise WireError("the stream ended without done")
