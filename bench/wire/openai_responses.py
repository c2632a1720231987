"""The OpenAI Responses API on the wire: ``POST /v1/responses``, a stream asked for by the body's
``stream``, SSE events named as their ``type`` and numbered by ``sequence_number`` 0, 1, 2, …,
ending with ``response.completed`` (no ``[DONE]``).

From OpenAI's API reference (*Create a model response*, *Streaming events*) and the SDK's
``ResponseStreamEvent``: a text answer is ``response.created``, ``response.in_progress``,
``response.output_item.added`` (a message), ``response.content_part.added`` (``output_text``),
``response.output_text.delta``…, ``response.output_text.done``, ``response.content_part.done``,
``response.output_item.done``, ``response.completed`` (the whole response); ``error``,
``response.failed`` and ``response.incomplete`` end a stream that did not complete.
"""

from __future__ import annotations

from typing import Any

from wire import CREATED, USER, WORD, WireError, sse_events, sse_named

NAME = "openai-responses"
SHORT = "responses"
MOCK_PATH = "/v1/responses"
STREAM_SUFFIX = ""
STREAM_CONTENT_TYPE = "text/event-stream"
UPSTREAM: dict[str, Any] = {"model": "m"}
KEEPS_STATE = False
RESPONSE_ID = "resp_mock"
ITEM_ID = "msg_mock"
_FAILED = frozenset({"error", "response.failed", "response.incomplete"})


def request(stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {"model": "m", "input": USER}
    if stream:
        body["stream"] = True
    return body, {"Authorization": "Bearer bench-client"}


def refusal(body: dict[str, Any], headers: Any) -> str | None:
    if not isinstance(body.get("model"), str):
        return "model: required"
    if not isinstance(body.get("input"), str | list) or not body["input"]:
        return "input: a string or a list of items is required"
    return None


def wants_stream(body: dict[str, Any], headers: Any) -> bool:
    return body.get("stream") is True


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def _message(status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "id": ITEM_ID, "status": status, "role": "assistant",
            "content": content}


def _response(status: str, output: list[dict[str, Any]], chunks: int | None) -> dict[str, Any]:
    usage = None if chunks is None else {
        "input_tokens": 1, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": chunks, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": chunks + 1}
    return {"id": RESPONSE_ID, "object": "response", "created_at": CREATED, "status": status,
            "error": None, "incomplete_details": None, "instructions": None,
            "max_output_tokens": None, "model": "m", "output": output,
            "parallel_tool_calls": True, "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None}, "store": False,
            "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto",
            "tools": [], "top_p": 1.0, "truncation": "disabled", "usage": usage,
            "user": None, "metadata": {}}


def whole_body(chunks: int) -> dict[str, Any]:
    return _response("completed", [_message("completed", [_part(WORD * chunks)])], chunks)


def stream_frames(chunks: int) -> list[bytes]:
    text = WORD * chunks
    at = {"item_id": ITEM_ID, "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response("in_progress", [], None)},
        {"type": "response.in_progress", "response": _response("in_progress", [], None)},
        {"type": "response.output_item.added", "output_index": 0,
         "item": _message("in_progress", [])},
        {"type": "response.content_part.added", **at, "part": _part("")},
        *({"type": "response.output_text.delta", **at, "delta": WORD, "logprobs": []}
          for _ in range(chunks)),
        {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": _part(text)},
        {"type": "response.output_item.done", "output_index": 0,
         "item": _message("completed", [_part(text)])},
        {"type": "response.completed", "response": whole_body(chunks)},
    ]
    return [sse_named(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)]


def whole_text(obj: Any) -> str:
    if obj.get("object") != "response" or obj.get("status") != "completed":
        raise WireError(f"object {obj.get('object')!r}, status {obj.get('status')!r}")
    return "".join(part["text"] for item in obj["output"] if item["type"] == "message"
                   for part in item["content"] if part["type"] == "output_text")


def stream_text(body: bytes) -> str:
    """The text of the ``response.output_text.delta`` events, as the SDK's accumulator joins
    them; the events must be named as their ``type``, numbered 0, 1, 2, … and end with
    ``response.completed``, whose response must hold the same text."""
    import orjson

    parts: list[str] = []
    last: Any = None
    for n, (name, data) in enumerate(sse_events(body)):
        last = orjson.loads(data)
        kind = last.get("type")
        if kind in _FAILED or name in _FAILED:
            raise WireError(f"{kind} event: {last.get('error') or last.get('response')}"[:300])
        if name != kind:
            raise WireError(f"event {name!r} carries type {kind!r}")
        if last.get("sequence_number") != n:
            raise WireError(f"event {n} ({kind}) has sequence_number "
                            f"{last.get('sequence_number')!r}")
        if kind == "response.output_text.delta":
            parts.append(last["delta"])
    if not isinstance(last, dict) or last.get("type") != "response.completed":
        raise WireError(f"the stream ended with {last and last.get('type')!r}, "
                        "not response.completed")
    text = "".join(parts)
    final = whole_text(last["response"])
    if final != text:
        raise WireError(f"response.completed holds {final[:60]!r}…, the deltas {text[:60]!r}…")
    return text
