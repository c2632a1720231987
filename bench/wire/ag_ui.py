"""AG-UI 1.0 on the wire: ``POST`` a ``RunAgentInput`` (``threadId``, ``runId``, ``messages``
with ids, ``tools``, ``context``, ``state``, ``forwardedProps``), answered by SSE events each
naming itself in ``type`` (``RUN_STARTED``, ``TEXT_MESSAGE_START`` / ``_CONTENT`` / ``_END``,
``RUN_FINISHED``; ``RUN_ERROR`` when the run fails).

From ``@ag-ui/core`` 1.0's types and ``@ag-ui/client``'s ``HttpAgent``, which always asks with
``Accept: text/event-stream``. The protocol has no whole answer, and an agent streams whatever
the request's ``Accept`` (the SDKs' ``EventEncoder`` answers ``text/event-stream`` unless
protobuf is asked for): so does the mock. A whole answer a client reads is either that stream or
the gateway's JSON array of the run's events (its answer to a client that asks without the
header).
"""

from __future__ import annotations

from typing import Any

from wire import USER, WORD, WireError, sse, sse_data

NAME = "ag-ui"
SHORT = "agui"
MOCK_PATH = "/ag-ui"
STREAM_SUFFIX = ""
STREAM_CONTENT_TYPE = "text/event-stream"
UPSTREAM: dict[str, Any] = {}
KEEPS_STATE = True
RUN = {"threadId": "thread-bench", "runId": "run-bench"}
MESSAGE = "msg-bench"


def request(stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    body = {**RUN, "state": {}, "tools": [], "context": [], "forwardedProps": {},
            "messages": [{"id": f"m{i}", **m} for i, m in enumerate(USER)]}
    return body, ({"Accept": "text/event-stream"} if stream else {})


def refusal(body: dict[str, Any], headers: Any) -> str | None:
    for key in ("threadId", "runId"):
        if not isinstance(body.get(key), str):
            return f"{key}: Required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("id"), str) for m in messages):
        return "messages: a list of messages with ids"
    return None


def wants_stream(body: dict[str, Any], headers: Any) -> bool:
    return True  # as every agent's encoder: SSE unless protobuf is accepted


def _events(chunks: int) -> list[dict[str, Any]]:
    return [{"type": "RUN_STARTED", **RUN},
            {"type": "TEXT_MESSAGE_START", "messageId": MESSAGE, "role": "assistant"},
            *({"type": "TEXT_MESSAGE_CONTENT", "messageId": MESSAGE, "delta": WORD}
              for _ in range(chunks)),
            {"type": "TEXT_MESSAGE_END", "messageId": MESSAGE},
            {"type": "RUN_FINISHED", **RUN}]


def whole_body(chunks: int) -> Any:
    return _events(chunks)


def stream_frames(chunks: int) -> list[bytes]:
    return [sse(e) for e in _events(chunks)]


def _text(events: list[Any]) -> str:
    if not events or events[0].get("type") != "RUN_STARTED":
        raise WireError("the run does not start with RUN_STARTED")
    parts: list[str] = []
    for e in events:
        kind = e.get("type")
        if kind == "RUN_ERROR":
            raise WireError(f"RUN_ERROR: {e.get('message')}")
        if kind == "TEXT_MESSAGE_CONTENT":
            parts.append(e["delta"])
    if events[-1].get("type") != "RUN_FINISHED":
        raise WireError(f"the run ended with {events[-1].get('type')!r}, not RUN_FINISHED")
    return "".join(parts)


def whole_text(obj: Any) -> str:
    if not isinstance(obj, list):
        raise WireError("a whole answer is the run's events as a list")
    return _text(obj)


def whole_body_text(body: bytes) -> str:
    """The text of a whole answer: the gateway's JSON array, or an agent's stream."""
    import orjson

    return whole_text(orjson.loads(body)) if body.lstrip()[:1] == b"[" else stream_text(body)


def stream_text(body: bytes) -> str:
    import orjson

    return _text([orjson.loads(d) for d in sse_data(body)])
