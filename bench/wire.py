"""The four chat dialects as the benchmark sees them on the wire, with no help from ``gateway``.

The mock upstream renders its answers from here (once, at startup) and the load driver builds its
requests and reassembles answer text from here, so a gateway bug cannot hide behind shared code.

Short names are used for the two protocol dialects: ``0128`` = protocol-2024-01-28, ``0529`` =
protocol-2024-05-29.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

DIALECTS: dict[str, str] = {
    "openai": "openai",
    "0128": "protocol-2024-01-28",
    "0529": "protocol-2024-05-29",
    "chatui": "chatui",
}
"""Short name -> the gateway's dialect name."""

ALIASES = {**{v: k for k, v in DIALECTS.items()}, **{k: k for k in DIALECTS}}

MOCK_PATHS: dict[str, str] = {
    "openai": "/v1/chat/completions",
    "0128": "/p0128/chat",
    "0529": "/p0529/chat",  # streams at /p0529/chat/stream
    "chatui": "/api/chat",
}
"""Where one mock server answers each dialect (one port serves all four)."""

WORD = "tok "
CONTEXT = {"data_points": {"text": ["doc.pdf: snippet"]}}
USER = [{"role": "user", "content": "hi"}]


def short(name: str) -> str:
    try:
        return ALIASES[name]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; known: {', '.join(ALIASES)}") from None


def answer_text(chunks: int) -> str:
    return WORD * chunks


def stream_path(dialect: str, path: str) -> str:
    """The path a client POSTs a streamed request to (0529 streams at ``path + "/stream"``)."""
    return path.rstrip("/") + "/stream" if dialect == "0529" else path


# --- requests (what a client sends) --------------------------------------------------------------


def request(dialect: str, stream: bool) -> tuple[bytes, dict[str, str]]:
    """A client request body and its headers."""
    headers = {"Content-Type": "application/json"}
    body: dict[str, Any]
    if dialect == "openai":
        body = {"model": "m", "messages": USER, "stream": stream}
    elif dialect == "0128":
        body = {"messages": USER, "stream": stream, "context": {}, "session_state": None}
    elif dialect == "0529":
        body = {"messages": USER, "context": {}, "session_state": None}
    elif dialect == "chatui":
        body = {"messages": USER, "stream": stream}
        if stream:
            headers["Accept"] = "text/event-stream"
    else:
        raise ValueError(dialect)
    return orjson.dumps(body), headers


# --- answers (what an upstream sends) ------------------------------------------------------------

CREATED = 1_700_000_000
CHATUI_CREATED = "2024-01-01T00:00:00.000Z"


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _line(obj: Any) -> bytes:
    return orjson.dumps(obj) + b"\n"


def whole_body(dialect: str, chunks: int) -> bytes:
    text = answer_text(chunks)
    obj: dict[str, Any]
    if dialect == "openai":
        obj = {
            "id": "chatcmpl-mock", "object": "chat.completion", "created": CREATED, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": chunks,
                      "total_tokens": chunks + 1},
        }
    elif dialect == "0128":
        obj = {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "context": CONTEXT, "session_state": None, "finish_reason": "stop"}],
            "id": "mock-0128", "created": CREATED, "object": "chat.completion",
        }
    elif dialect == "0529":
        obj = {"message": {"role": "assistant", "content": text}, "context": CONTEXT,
               "session_state": None}
    elif dialect == "chatui":
        obj = {"messageId": "msg-mock", "status": "completed", "role": "assistant",
               "content": text, "contentType": "text", "sources": [], "error": None,
               "createdAt": CHATUI_CREATED}
    else:
        raise ValueError(dialect)
    return orjson.dumps(obj)


def stream_frames(dialect: str, chunks: int) -> list[bytes]:
    """The framed pieces of a streamed answer of ``chunks`` text chunks, one write each."""
    if dialect == "openai":
        head = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": CREATED,
                "model": "m"}

        def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
            return _sse({**head, "choices": [{"index": 0, "delta": delta,
                                              "finish_reason": reason}]})
        return [chunk({"role": "assistant", "content": ""}),
                *(chunk({"content": WORD}) for _ in range(chunks)),
                chunk({}, "stop"), b"data: [DONE]\n\n"]
    if dialect == "0128":
        first = {"choices": [{"index": 0, "delta": {"role": "assistant"}, "context": CONTEXT,
                              "finish_reason": None}]}
        piece = {"choices": [{"index": 0, "delta": {"content": WORD}, "finish_reason": None}]}
        return [_line(first), *(_line(piece) for _ in range(chunks))]
    if dialect == "0529":
        return [_line({"delta": {"role": "assistant"}, "context": CONTEXT}),
                *(_line({"delta": {"content": WORD}}) for _ in range(chunks))]
    if dialect == "chatui":
        out = []
        for i in range(1, chunks + 1):
            out.append(_sse({"messageId": "msg-mock", "status":
                             "completed" if i == chunks else "processing",
                             "role": "assistant", "content": WORD * i, "contentType": "text",
                             "sources": [], "error": None, "createdAt": CHATUI_CREATED}))
        return out
    raise ValueError(dialect)


STREAM_CONTENT_TYPE = {
    "openai": "text/event-stream",
    "0128": "application/json-lines",
    "0529": "application/json-lines",
    "chatui": "text/event-stream",
}


# --- reassembly (what a client reads) ------------------------------------------------------------


class WireError(Exception):
    pass


def _sse_data(body: bytes) -> list[bytes]:
    """The ``data`` of each event of an SSE body (multi-line data joined with ``\\n``)."""
    out: list[bytes] = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[5:].lstrip(b" ") if line.startswith(b"data:") else None
                for line in block.split(b"\n")]
        parts = [d for d in data if d is not None]
        if parts:
            out.append(b"\n".join(parts))
    return out


def _whole_openai(obj: Any) -> str:
    return obj["choices"][0]["message"]["content"]


def _whole_0128(obj: Any) -> str:
    return obj["choices"][0]["message"]["content"]


def _whole_0529(obj: Any) -> str:
    return obj["message"]["content"]


def _whole_chatui(obj: Any) -> str:
    if isinstance(obj, list):
        return "".join(m["content"] for m in obj)
    if obj.get("status") != "completed":
        raise WireError(f"status {obj.get('status')!r}")
    return obj["content"]


_WHOLE: dict[str, Callable[[Any], str]] = {
    "openai": _whole_openai, "0128": _whole_0128, "0529": _whole_0529, "chatui": _whole_chatui,
}


def whole_text(dialect: str, body: bytes) -> str:
    try:
        return _WHOLE[dialect](orjson.loads(body))
    except (KeyError, IndexError, TypeError, orjson.JSONDecodeError) as e:
        raise WireError(f"unexpected whole answer ({type(e).__name__}: {e}): {body[:200]!r}") \
            from None


def stream_text(dialect: str, body: bytes) -> str:
    """The answer text of a whole stream body, reassembled as that dialect's client would."""
    try:
        if dialect == "openai":
            parts: list[str] = []
            for data in _sse_data(body):
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
        if dialect == "chatui":
            last: Any = None
            for data in _sse_data(body):
                last = orjson.loads(data)
            if not isinstance(last, dict) or last.get("status") != "completed":
                raise WireError(f"last event not completed: {str(last)[:200]}")
            return last["content"]
        parts = []
        for line in body.split(b"\n"):
            if not line.strip():
                continue
            obj = orjson.loads(line)
            if obj.get("error") is not None:
                raise WireError(f"error line: {obj['error']}")
            delta = obj["choices"][0].get("delta") if dialect == "0128" else obj.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else None
            if text:
                parts.append(text)
        return "".join(parts)
    except WireError:
        raise
    except (KeyError, IndexError, TypeError, AttributeError, orjson.JSONDecodeError) as e:
        raise WireError(f"unexpected stream ({type(e).__name__}: {e}): {body[:200]!r}") from None
