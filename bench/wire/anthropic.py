"""The Anthropic Messages API on the wire: ``POST /v1/messages``, a stream asked for by the body's
``stream``, SSE with named events (``message_start``, per block ``content_block_start`` /
``content_block_delta`` / ``content_block_stop``, ``message_delta``, ``message_stop``; ``ping``
anywhere, ``error`` on a broken stream).

From Anthropic's API reference (*Messages*, *Streaming messages*, *Errors*) and the SDK's
``RawMessageStreamEvent``: the request needs ``model``, ``max_tokens`` and ``messages``, and the
headers ``x-api-key`` and ``anthropic-version``; an answer is ``{"type": "message", "content":
[{"type": "text", "text"}], …}``.
"""

from __future__ import annotations

from typing import Any

from wire import USER, WORD, WireError, sse_events, sse_named

NAME = "anthropic"
SHORT = "anthropic"
MOCK_PATH = "/v1/messages"
STREAM_SUFFIX = ""
STREAM_CONTENT_TYPE = "text/event-stream"
VERSION = "2023-06-01"
"""The ``anthropic-version`` every SDK request carries."""
UPSTREAM: dict[str, Any] = {"model": "m", "max_tokens": 1024,
                            "headers": {"x-api-key": "bench-upstream",
                                        "anthropic-version": VERSION}}
"""As docs/scenarios.md configures an Anthropic upstream: the API's headers are the upstream's."""
KEEPS_STATE = False
MESSAGE_ID = "msg_mock"


def request(stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {"model": "m", "max_tokens": 1024, "messages": USER}
    if stream:
        body["stream"] = True
    return body, {"x-api-key": "bench-client", "anthropic-version": VERSION}


def refusal(body: dict[str, Any], headers: Any) -> str | None:
    if not headers.get("anthropic-version"):
        return "anthropic-version: header is required"
    if not headers.get("x-api-key"):
        return "x-api-key: header is required"
    if not isinstance(body.get("model"), str):
        return "model: Field required"
    cap = body.get("max_tokens")
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        return "max_tokens: Field required (a positive integer)"
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return "messages: Field required"
    return None


def wants_stream(body: dict[str, Any], headers: Any) -> bool:
    return body.get("stream") is True


def _usage(output: int) -> dict[str, int]:
    return {"input_tokens": 1, "output_tokens": output}


def whole_body(chunks: int) -> dict[str, Any]:
    return {"id": MESSAGE_ID, "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": WORD * chunks}], "model": "m",
            "stop_reason": "end_turn", "stop_sequence": None, "usage": _usage(chunks)}


def stream_frames(chunks: int) -> list[bytes]:
    def event(obj: dict[str, Any]) -> bytes:
        return sse_named(obj["type"], obj)
    start: dict[str, Any] = {"id": MESSAGE_ID, "type": "message", "role": "assistant",
                             "content": [], "model": "m", "stop_reason": None,
                             "stop_sequence": None, "usage": _usage(1)}
    return [event({"type": "message_start", "message": start}),
            event({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "text", "text": ""}}),
            event({"type": "ping"}),
            *(event({"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": WORD}}) for _ in range(chunks)),
            event({"type": "content_block_stop", "index": 0}),
            event({"type": "message_delta",
                   "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                   "usage": {"output_tokens": chunks}}),
            event({"type": "message_stop"})]


def whole_text(obj: Any) -> str:
    if obj.get("type") != "message":
        raise WireError(f"type {obj.get('type')!r}, not 'message'")
    return "".join(b["text"] for b in obj["content"] if b["type"] == "text")


def stream_text(body: bytes) -> str:
    """The text of the ``text_delta``s, as the SDK's accumulator joins them; the events must be
    named as their ``type``, start with ``message_start`` and end with ``message_stop``."""
    import orjson

    parts: list[str] = []
    kind = None
    for i, (name, data) in enumerate(sse_events(body)):
        obj = orjson.loads(data)
        kind = obj.get("type")
        if kind == "error" or name == "error":
            raise WireError(f"error event: {obj.get('error')}")
        if name != kind:
            raise WireError(f"event {name!r} carries type {kind!r}")
        if i == 0 and kind != "message_start":
            raise WireError(f"the stream starts with {kind!r}, not message_start")
        if kind == "content_block_delta" and obj["delta"]["type"] == "text_delta":
            parts.append(obj["delta"]["text"])
    if kind != "message_stop":
        raise WireError(f"the stream ended with {kind!r}, not message_stop")
    return "".join(parts)
