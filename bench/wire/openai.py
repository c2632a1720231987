"""OpenAI Chat Completions on the wire: SSE chunks, a finish chunk, ``data: [DONE]``."""

from __future__ import annotations

from typing import Any

from wire import CREATED, USER, WORD, WireError, sse, sse_data

NAME = "openai"
SHORT = "openai"
MOCK_PATH = "/v1/chat/completions"
STREAM_SUFFIX = ""
STREAM_CONTENT_TYPE = "text/event-stream"
UPSTREAM: dict[str, Any] = {"model": "m"}
KEEPS_STATE = False


def request(stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    return {"model": "m", "messages": USER, "stream": stream}, {}


def refusal(body: dict[str, Any], headers: Any) -> str | None:
    return None if isinstance(body.get("messages"), list) else "no messages"


def wants_stream(body: dict[str, Any], headers: Any) -> bool:
    return body.get("stream") is True


def whole_body(chunks: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-mock", "object": "chat.completion", "created": CREATED, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": WORD * chunks},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": chunks, "total_tokens": chunks + 1},
    }


def stream_frames(chunks: int) -> list[bytes]:
    head = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": CREATED,
            "model": "m"}

    def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
        return sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]})
    return [chunk({"role": "assistant", "content": ""}),
            *(chunk({"content": WORD}) for _ in range(chunks)),
            chunk({}, "stop"), b"data: [DONE]\n\n"]


def whole_text(obj: Any) -> str:
    text: str = obj["choices"][0]["message"]["content"]
    return text


def stream_text(body: bytes) -> str:
    import orjson

    parts: list[str] = []
    for data in sse_data(body):
        if data == b"[DONE]":
            return "".join(parts)
        obj = orjson.loads(data)
        if obj.get("error") is not None:
            raise WireError(f"error event: {obj['error']}")
        choices = obj.get("choices")
        if choices:
            text = choices[0].get("delta", {}).get("content")
            if text:
                parts.append(text)
    raise WireError("the stream ended without [DONE]")
