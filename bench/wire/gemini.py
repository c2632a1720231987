"""Google's Gemini API on the wire: the model and the method in the path
(``{base}/models/{model}:generateContent``, ``…:streamGenerateContent?alt=sse``), SSE events each a
whole ``GenerateContentResponse`` with the new parts, the last with ``finishReason`` and
``usageMetadata``.

From the API reference (ai.google.dev/api/generate-content) and the ``google-genai`` SDK: the
request is ``{"contents": [{"role": "user", "parts": [{"text"}]}]}`` with the key in
``x-goog-api-key``; the answer's text is the ``text`` of ``candidates[0].content.parts`` (the
SDK's ``response.text``), thoughts left out.
"""

from __future__ import annotations

from typing import Any

from wire import WORD, WireError, sse, sse_data

NAME = "gemini"
SHORT = "gemini"
MOCK_PATH = "/v1beta"
"""The upstream's base URL path; the gateway adds ``/models/{model}:{method}``."""
STREAM_SUFFIX = ""
STREAM_CONTENT_TYPE = "text/event-stream"
MODEL = "m"
UPSTREAM: dict[str, Any] = {"model": MODEL, "headers": {"x-goog-api-key": "bench-upstream"}}
KEEPS_STATE = False


def path_for(path: str, stream: bool) -> str:
    """Where a client posts under the prefix ``path`` (the benchmark's clients all ask for the
    model ``m``). A stream is asked with ``alt=sse``, as google-genai asks it: without it,
    Gemini streams one JSON array, which is not what this module reads."""
    if stream:
        return f"{path.rstrip('/')}/models/{MODEL}:streamGenerateContent?alt=sse"
    return f"{path.rstrip('/')}/models/{MODEL}:generateContent"


def request(stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    return ({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
            {"x-goog-api-key": "bench-client"})


def refusal(body: dict[str, Any], headers: Any) -> str | None:
    if not headers.get("x-goog-api-key"):
        return "x-goog-api-key: header is required"
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return "contents: must be a non-empty list"
    if "model" in body or "stream" in body:
        return "model and stream belong in the URL"
    return None


def wants_stream(body: dict[str, Any], headers: Any) -> bool:
    return False  # (the path decides: path_for)


def _response(parts: list[dict[str, Any]], finish: bool, output: int) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = "STOP"
    return {"candidates": [candidate],
            "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": output,
                              "totalTokenCount": output + 1},
            "modelVersion": MODEL, "responseId": "mock"}


def whole_body(chunks: int) -> dict[str, Any]:
    return _response([{"text": WORD * chunks}], True, chunks)


def stream_frames(chunks: int) -> list[bytes]:
    frames = [sse(_response([{"text": WORD}], False, n + 1)) for n in range(chunks)]
    return [*frames, sse(_response([{"text": ""}], True, chunks))]


def _text(obj: Any) -> str:
    if "error" in obj:
        raise WireError(f"error: {obj['error']}")
    parts = obj["candidates"][0]["content"]["parts"]
    return "".join(p["text"] for p in parts if "text" in p and not p.get("thought"))


def whole_text(obj: Any) -> str:
    if obj["candidates"][0].get("finishReason") is None:
        raise WireError("a whole answer without finishReason")
    return _text(obj)


def stream_text(body: bytes) -> str:
    """The text of every event's parts, as the SDK's ``chunk.text`` gives them; the last event
    must carry the finishReason."""
    import orjson

    parts: list[str] = []
    finished = False
    for data in sse_data(body):
        obj = orjson.loads(data)
        if finished:
            raise WireError("an event after the finishReason")
        parts.append(_text(obj))
        finished = obj["candidates"][0].get("finishReason") is not None
    if not finished:
        raise WireError("the stream ended without a finishReason")
    return "".join(parts)
