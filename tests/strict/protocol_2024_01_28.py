"""Strict reader (and writer) of the chat protocol's version 2024-01-28
(specs/protocol-2024-01-28.md): OpenAI-like ``choices`` with ``context`` and ``session_state`` per
choice, JSON-lines streams.

The stream rules checked: JSON lines, every one ``\\n``-terminated; the first chunk's choice has
the ``context`` (the spec: "the first chunk contains a choice with the context property") and
the assistant role; ``id``, ``created`` and ``model``, where a chunk has them, the same on every
chunk; at most one ``finish_reason``, on the last chunk; an error chunk ``{"error": "text"}`` is
the last line. A stream with no finish is legal (the spec's own example has none).
"""

from __future__ import annotations

import random
from typing import Any

from strict._rag import merge, read_context, write_context
from strict._wire import frame_lines, json_lines, pieces, text_messages
from strict.observed import Observed, ObservedMessage

__all__ = ["FINISH", "SAMPLING", "read_error", "read_request", "read_stream", "read_whole",
           "write_request", "write_stream", "write_whole"]

# "Comes from the OpenAI response"
FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls",
          "content_filter": "content_filter", "function_call": "tool_calls"}
SAMPLING = ("temperature",)


def _temperature(context: Any, obs: Observed) -> None:
    if isinstance(context, dict) and isinstance(context.get("overrides"), dict):
        t = context["overrides"].get("temperature")
        if t is not None:
            assert isinstance(t, int | float), f"overrides.temperature: {t!r}"
            obs.extra["temperature"] = t


def read_request(body: Any) -> Observed:
    assert isinstance(body, dict), body
    messages = body.get("messages")
    assert isinstance(messages, list) and messages, "messages must be a non-empty list"
    obs = Observed()
    for i, m in enumerate(messages):
        assert isinstance(m, dict) and isinstance(m.get("role"), str), f"messages[{i}]"
        assert isinstance(m.get("content"), str), f"messages[{i}].content must be a string"
        obs.messages.append(ObservedMessage(m["role"], m["content"]))
    assert isinstance(body.get("stream"), bool), "stream must be a boolean"
    obs.stream = body["stream"]
    context = body.get("context")
    assert context is None or isinstance(context, dict), "context must be an object"
    _temperature(context, obs)
    obs.session_state = body.get("session_state")
    return obs


def write_request(obs: Observed) -> Any:
    body: dict[str, Any] = {
        "messages": text_messages(obs),
        "stream": bool(obs.stream),
    }
    if "temperature" in obs.extra:
        body["context"] = {"overrides": {"temperature": obs.extra["temperature"], "top": 3}}
    if obs.session_state is not None:
        body["session_state"] = obs.session_state
    return body


def _usage(u: Any) -> tuple[int | None, int | None]:
    assert isinstance(u, dict), u
    prompt, completion = u.get("prompt_tokens"), u.get("completion_tokens")
    assert isinstance(prompt, int) and isinstance(completion, int), u
    assert u.get("total_tokens", prompt + completion) == prompt + completion, u
    return prompt, completion


def read_whole(body: Any) -> Observed:
    assert isinstance(body, dict), body
    choices = body.get("choices")
    assert isinstance(choices, list) and len(choices) == 1, "one choice"
    choice = choices[0]
    message = choice.get("message")
    assert isinstance(message, dict) and message.get("role", "assistant") == "assistant", message
    assert isinstance(message.get("content"), str), "message.content must be a string"
    obs = Observed(text=message["content"], finish=choice.get("finish_reason"))
    assert obs.finish in FINISH, f"finish_reason {obs.finish!r}"
    read_context(choice.get("context"), obs)
    obs.session_state = choice.get("session_state")
    if body.get("usage") is not None:
        obs.usage = _usage(body["usage"])
    if "model" in body:
        assert isinstance(body["model"], str), "model"
        obs.model = body["model"]
    return obs


def write_whole(obs: Observed) -> Any:
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": obs.text}}
    context = write_context(obs)
    if context is not None:
        choice["context"] = context
    if obs.session_state is not None:
        choice["session_state"] = obs.session_state
    choice["finish_reason"] = obs.finish or "stop"
    body: dict[str, Any] = {"choices": [choice], "id": "chatcmpl-written",
                            "created": 1_700_000_000, "model": obs.model or "gpt-35-turbo",
                            "object": "chat.completion"}
    if obs.usage is not None:
        body["usage"] = {"prompt_tokens": obs.usage[0], "completion_tokens": obs.usage[1],
                         "total_tokens": (obs.usage[0] or 0) + (obs.usage[1] or 0)}
    return body


def read_stream(data: bytes, *, lenient: bool = False) -> Observed:
    lines = json_lines(data)
    obs = Observed()
    context: Any = None
    ident: dict[str, Any] = {}
    for i, chunk in enumerate(lines):
        assert isinstance(chunk, dict), f"line {i} is not an object"
        last = i == len(lines) - 1
        if chunk.get("error") is not None:
            assert isinstance(chunk["error"], str), f"the error must be a string: {chunk}"
            assert last, "lines after the error"
            assert obs.finish is None, "an error after the finish"
            obs.error = chunk["error"]
            break
        for key in ("id", "created", "model"):
            if chunk.get(key) is not None:
                assert ident.setdefault(key, chunk[key]) == chunk[key], \
                    f"line {i}: {key} {chunk[key]!r} != {ident[key]!r}"
        choices = chunk.get("choices")
        assert isinstance(choices, list) and len(choices) == 1, f"line {i}: one choice"
        choice = choices[0]
        delta = choice.get("delta")
        assert isinstance(delta, dict), f"line {i} has no delta"
        if i == 0:
            assert "context" in choice, "the first chunk has no context"
            assert delta.get("role") == "assistant", "the first chunk does not give the role"
        assert obs.finish is None, f"line {i} after the finish_reason"
        content = delta.get("content")
        assert content is None or isinstance(content, str), f"line {i}: content"
        obs.text += content or ""
        if choice.get("context") is not None:
            context = merge(context, choice["context"])
        if choice.get("session_state") is not None:
            obs.session_state = choice["session_state"]
        if chunk.get("usage") is not None:
            obs.usage = _usage(chunk["usage"])
        reason = choice.get("finish_reason")
        if reason is not None:
            assert reason in FINISH, f"finish_reason {reason!r}"
            obs.finish = reason
    obs.model = ident.get("model")
    read_context(context, obs)
    return obs


def write_stream(obs: Observed, rng: random.Random) -> bytes:
    tail = {"object": "chat.completion.chunk", "id": "chatcmpl-written", "created": 1_700_000_000,
            "model": obs.model or "gpt-35-turbo"}

    def chunk(delta: dict[str, Any], **choice: Any) -> dict[str, Any]:
        return {"choices": [{"delta": delta, **choice, "index": 0}], **tail}

    first: dict[str, Any] = {"context": write_context(obs, followups=False) or {}}
    if obs.session_state is not None:
        first["session_state"] = obs.session_state
    lines = [chunk({"role": "assistant"}, **first, finish_reason=None)]
    lines += [chunk({"content": p}, finish_reason=None) for p in pieces(obs.text, rng)]
    if obs.error is not None:
        return frame_lines([*lines, {"error": obs.error}])
    if obs.followups:
        lines.append(chunk({}, context={"followup_questions": obs.followups}, finish_reason=None))
    last = chunk({}, finish_reason=obs.finish or "stop")
    if obs.usage is not None:
        last["usage"] = {"prompt_tokens": obs.usage[0], "completion_tokens": obs.usage[1],
                         "total_tokens": (obs.usage[0] or 0) + (obs.usage[1] or 0)}
    return frame_lines([*lines, last])


def read_error(body: Any) -> str:
    assert isinstance(body, dict) and isinstance(body.get("error"), str), body
    return str(body["error"])
