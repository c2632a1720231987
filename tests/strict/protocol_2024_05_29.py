"""Strict reader (and writer) of the chat protocol's version 2024-05-29 (the Microsoft spec, its
first publication and the reference RAG backend's docs): ``message``/``delta`` with ``context`` and
the session state spelled ``sessionState`` or ``session_state``; the stream is chosen by the path.

The stream rules checked: JSON lines, every one ``\\n``-terminated (the protocol's JavaScript SDK
drops a last line without one); every line a ``delta``; the first line gives the assistant role
and a ``context`` with ``data_points`` (the reference frontend reads it from the first line; a
real server may leave it out, so ``lenient`` reads skip this); an error line
``{"error": "text"}`` is the last; a line never spells the session state both ways.
"""

from __future__ import annotations

import random
from typing import Any

from strict._rag import merge, read_context, write_context
from strict._wire import frame_lines, json_lines, pieces, text_messages
from strict.observed import Observed, ObservedMessage

__all__ = ["SAMPLING", "read_error", "read_request", "read_stream", "read_whole",
           "write_request", "write_stream", "write_whole"]

SAMPLING = ("temperature",)
_KEYS = ("sessionState", "session_state")


def _state(obj: dict[str, Any]) -> Any:
    present = [k for k in _KEYS if k in obj]
    if len(present) == 2:
        assert obj[_KEYS[0]] == obj[_KEYS[1]], f"two different session states: {obj}"
    return obj[present[0]] if present else None


def read_request(body: Any) -> Observed:
    assert isinstance(body, dict), body
    messages = body.get("messages")
    assert isinstance(messages, list) and messages, "messages must be a non-empty list"
    obs = Observed()
    for i, m in enumerate(messages):
        assert isinstance(m, dict) and isinstance(m.get("role"), str), f"messages[{i}]"
        assert isinstance(m.get("content"), str), f"messages[{i}].content must be a string"
        obs.messages.append(ObservedMessage(m["role"], m["content"]))
    context = body.get("context")
    assert context is None or isinstance(context, dict), "context must be an object"
    if isinstance(context, dict) and isinstance(context.get("overrides"), dict) \
            and context["overrides"].get("temperature") is not None:
        obs.extra["temperature"] = context["overrides"]["temperature"]
    obs.session_state = _state(body)
    return obs


def write_request(obs: Observed) -> Any:
    """As the protocol's JavaScript SDK sends it: camelCase ``sessionState``."""
    body: dict[str, Any] = {"messages": text_messages(obs)}
    if "temperature" in obs.extra:
        body["context"] = {"overrides": {"temperature": obs.extra["temperature"]}}
    if obs.session_state is not None:
        body["sessionState"] = obs.session_state
    return body


def read_whole(body: Any) -> Observed:
    assert isinstance(body, dict), body
    message = body.get("message")
    assert isinstance(message, dict) and message.get("role", "assistant") == "assistant", message
    assert isinstance(message.get("content"), str), "message.content must be a string"
    obs = Observed(text=message["content"])
    read_context(body.get("context"), obs)
    obs.session_state = _state(body)
    return obs


def write_whole(obs: Observed) -> Any:
    """As the reference backend answers: snake_case ``session_state``."""
    body: dict[str, Any] = {"message": {"role": "assistant", "content": obs.text}}
    context = write_context(obs)
    if context is not None:
        body["context"] = context
    body["session_state"] = obs.session_state
    return body


def read_stream(data: bytes, *, lenient: bool = False) -> Observed:
    lines = json_lines(data)
    obs = Observed()
    context: Any = None
    for i, line in enumerate(lines):
        assert isinstance(line, dict), f"line {i} is not an object"
        if line.get("error") is not None:
            assert isinstance(line["error"], str), f"the error must be a string: {line}"
            assert i == len(lines) - 1, "lines after the error"
            obs.error = line["error"]
            break
        delta = line.get("delta")
        assert isinstance(delta, dict), f"line {i} has no delta"
        if i == 0 and not lenient:
            assert delta.get("role") == "assistant", "the first line does not give the role"
            first = line.get("context")
            assert isinstance(first, dict) and isinstance(first.get("data_points"), dict), \
                "the first line has no context.data_points"
        content = delta.get("content")
        assert content is None or isinstance(content, str), f"line {i}: content"
        obs.text += content or ""
        if line.get("context") is not None:
            context = merge(context, line["context"])
        state = _state(line)
        if state is not None:
            obs.session_state = state
    read_context(context, obs)
    return obs


def write_stream(obs: Observed, rng: random.Random) -> bytes:
    """As the reference backend streams: context first, follow-ups last in a nested context."""
    context = write_context(obs, followups=False) or {"data_points": {"text": []}}
    lines: list[Any] = [{"delta": {"role": "assistant"}, "context": context,
                         "session_state": obs.session_state}]
    lines += [{"delta": {"content": p, "role": None}} for p in pieces(obs.text, rng)]
    if obs.error is not None:
        return frame_lines([*lines, {"error": obs.error}])
    if obs.followups:
        lines.append({"delta": {"role": "assistant"},
                      "context": {"context": context, "followup_questions": obs.followups}})
    return frame_lines(lines)


def read_error(body: Any) -> str:
    assert isinstance(body, dict) and isinstance(body.get("error"), str), body
    return str(body["error"])
