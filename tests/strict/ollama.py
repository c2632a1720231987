"""Strict reader (and writer) of Ollama's native chat API, from its API reference (docs/api.md,
docs/api/streaming.mdx, docs/api/errors.mdx), its server's types (api/types.go) and what the
``ollama`` Python client does: it reads the body line by line, raises on any line with an
``error``, and validates each line as its ``ChatResponse`` (``message`` required).

The stream rules checked: newline-delimited JSON objects; every line names the same ``model``
and has a ``created_at``, a ``message`` of role ``assistant`` with a string ``content`` and
``done``; a tool call comes whole in one line (``function.arguments`` an object); exactly one
line has ``done: true``, last, with ``done_reason``; or an ``{"error": …}`` line last.

Ollama's requests carry no ``tool_choice`` (the model always decides: read as ``None``), and its
Python client sends tool calls without ids and tool results by ``tool_name`` alone: a call
without an id is read as ``call_<message index>_<n>`` and a result without ``tool_call_id`` as
answering the first unanswered call of its name (else the first unanswered call), as
docs/translation.md documents. ``done_reason`` is ``stop`` after tool calls too: such an answer's
finish is read as ``None`` (the wire does not say more).
"""

from __future__ import annotations

import base64
import random
from typing import Any

from strict._wire import frame_lines, json_lines, pieces
from strict.observed import Observed, ObservedCall, ObservedMessage

__all__ = ["COVERS", "FINISH", "SAMPLING", "read_error", "read_request", "read_stream",
           "read_whole", "write_request", "write_stream", "write_whole"]

FINISH = {"stop": "stop", "length": "length"}
COVERS = {"stop": {"stop", "tool_calls", "content_filter"}}
"""Ollama has two reasons: ``stop`` is also what it says after tool calls (and for what other
APIs call a content filter)."""
SAMPLING = ("model", "temperature", "max_tokens")
_ROLES = {"system", "user", "assistant", "tool"}
_CANONICAL_OPTIONS = {"temperature", "top_p", "seed", "presence_penalty", "frequency_penalty",
                      "num_predict", "stop"}
_REQUEST_KEYS = {"model", "messages", "tools", "format", "options", "stream", "think"}
_MAGIC = (("iVBORw0KGgo", "image/png"), ("/9j/", "image/jpeg"), ("R0lGOD", "image/gif"),
          ("UklGR", "image/webp"))
_CREATED = "2024-07-22T20:33:28.123648Z"


def _data_url(data: str) -> str:
    kind = next((t for head, t in _MAGIC if data.startswith(head)), "application/octet-stream")
    return f"data:{kind};base64,{data}"


# --- requests ------------------------------------------------------------------------------------


def _call(c: Any, where: str, default_id: str | None) -> ObservedCall:
    assert isinstance(c, dict), f"{where}: {c!r}"
    fn = c.get("function")
    assert isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"], where
    assert isinstance(fn.get("arguments"), dict), f"{where}.function.arguments must be an object"
    cid = c.get("id")
    if cid is None:
        assert default_id is not None, f"{where}: a tool call without an id"
        cid = default_id
    assert isinstance(cid, str) and cid, f"{where}.id"
    return ObservedCall(cid, fn["name"], fn["arguments"])


def read_request(body: Any) -> Observed:
    assert isinstance(body, dict), body
    assert isinstance(body.get("model"), str) and body["model"], "model is required"
    messages = body.get("messages")
    assert isinstance(messages, list) and messages, "messages must be a non-empty list"
    obs = Observed(model=body["model"])
    pending: list[ObservedCall] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        assert isinstance(m, dict) and m.get("role") in _ROLES, f"{where}: {m!r}"
        content = m.get("content", "")
        assert isinstance(content, str), f"{where}.content must be a string"
        msg = ObservedMessage(m["role"], content)
        images = m.get("images")
        if images is not None:
            assert isinstance(images, list) and all(isinstance(x, str) for x in images), where
            for x in images:
                base64.b64decode(x, validate=True)  # bare base64, never a URL
            msg.images = [_data_url(x) for x in images]
        calls = m.get("tool_calls")
        if calls is not None:
            assert m["role"] == "assistant" and isinstance(calls, list) and calls, where
            msg.tool_calls = [_call(c, f"{where}.tool_calls[{j}]", f"call_{i}_{j}")
                              for j, c in enumerate(calls)]
            pending += msg.tool_calls
        if m["role"] == "tool":
            msg.tool_result_for = _answered(m, pending, where)
        else:
            assert "tool_call_id" not in m and "tool_name" not in m, where
        thinking = m.get("thinking")
        assert thinking is None or isinstance(thinking, str), f"{where}.thinking"
        msg.reasoning = thinking or ""
        obs.messages.append(msg)
    tools = body.get("tools")
    if tools is not None:
        assert isinstance(tools, list)
        for t in tools:
            assert isinstance(t, dict) and t.get("type") == "function", t
            assert isinstance(t["function"].get("name"), str), t
            params = t["function"].get("parameters")
            assert params is None or isinstance(params, dict), t
            obs.tools.append(t["function"]["name"])
    assert "tool_choice" not in body, "Ollama has no tool_choice"
    stream = body.get("stream", True)
    assert isinstance(stream, bool), "stream must be a boolean"
    obs.stream = stream
    options = body.get("options")
    unmapped = sorted(k for k in body if k not in _REQUEST_KEYS and body[k] is not None
                      and (k, body[k]) not in (("logprobs", False), ("top_logprobs", 0)))
    if options is not None:
        assert isinstance(options, dict), "options must be an object"
        if options.get("temperature") is not None:
            assert isinstance(options["temperature"], int | float), "options.temperature"
            obs.extra["temperature"] = options["temperature"]
        if options.get("num_predict") is not None:
            assert isinstance(options["num_predict"], int), "options.num_predict"
            if options["num_predict"] >= 0:
                obs.extra["max_tokens"] = options["num_predict"]
            else:
                unmapped.append("options.num_predict")
        unmapped += sorted(f"options.{k}" for k in options if k not in _CANONICAL_OPTIONS)
    if unmapped:
        obs.extra["unmapped"] = unmapped
    think = body.get("think")
    if think is not None:
        assert think in (True, False, "low", "medium", "high", "max"), f"think {think!r}"
        obs.extra["reasoning"] = think
    fmt = body.get("format")
    if fmt == "json":
        obs.output = ("json_object", None)
    elif isinstance(fmt, dict):
        obs.output = ("json_schema", fmt)
    else:
        assert fmt in (None, ""), f"format {fmt!r}"
    return obs


def _answered(m: dict[str, Any], pending: list[ObservedCall], where: str) -> str:
    given, name = m.get("tool_call_id"), m.get("tool_name")
    assert given is None or isinstance(given, str), f"{where}.tool_call_id"
    assert name is None or isinstance(name, str), f"{where}.tool_name"
    if given:
        match = next((c for c in pending if c.id == given), None)
        if match is not None and name is not None:
            assert match.name == name, f"{where}: tool_name {name!r} for a call of {match.name!r}"
    else:
        match = next((c for c in pending if c.name == name), None) if name else None
        match = match or (pending[0] if pending else None)
        assert match is not None, f"{where}: a tool result that answers no call"
    if match is not None:
        pending.remove(match)
        return match.id
    assert isinstance(given, str)
    return given


def write_request(obs: Observed) -> Any:
    messages = []
    for m in obs.messages:
        wire: dict[str, Any] = {"role": "tool" if m.tool_result_for else (
            "system" if m.role == "developer" else m.role), "content": m.text}
        inline = [u.split(";base64,", 1)[1] for u in m.images if u.startswith("data:")]
        if inline:  # Ollama takes images inline only
            wire["images"] = inline
        if m.tool_calls:
            wire["tool_calls"] = [{"id": c.id, "function": {"name": c.name,
                                                            "arguments": c.arguments}}
                                  for c in m.tool_calls]
        if m.tool_result_for:
            wire["tool_call_id"] = m.tool_result_for
        if m.reasoning:
            wire["thinking"] = m.reasoning
        messages.append(wire)
    body: dict[str, Any] = {"model": obs.model or "llama3.2", "messages": messages,
                            "stream": bool(obs.stream)}
    if obs.tools:
        body["tools"] = [{"type": "function", "function": {
            "name": n, "description": f"the {n} tool",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
            for n in obs.tools]
    options: dict[str, Any] = {}
    if "temperature" in obs.extra:
        options["temperature"] = obs.extra["temperature"]
    if "max_tokens" in obs.extra:
        options["num_predict"] = obs.extra["max_tokens"]
    if options:
        body["options"] = options
    if obs.extra.get("reasoning"):
        body["think"] = obs.extra["reasoning"]
    return body


# --- whole answers -------------------------------------------------------------------------------


def _usage(obj: dict[str, Any]) -> tuple[int | None, int | None] | None:
    prompt, output = obj.get("prompt_eval_count"), obj.get("eval_count")
    if prompt is None and output is None:
        return None
    assert prompt is None or isinstance(prompt, int), f"prompt_eval_count {prompt!r}"
    assert output is None or isinstance(output, int), f"eval_count {output!r}"
    for key in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
        value = obj.get(key)
        assert value is None or (isinstance(value, int) and value > 0), f"{key} {value!r}"
    return prompt, output


def _message(message: Any, where: str) -> tuple[str, str, list[ObservedCall]]:
    assert isinstance(message, dict) and message.get("role") == "assistant", \
        f"{where}: {message!r}"
    content = message.get("content")
    assert isinstance(content, str), f"{where}.content must be a string"
    thinking = message.get("thinking")
    assert thinking is None or isinstance(thinking, str), f"{where}.thinking"
    calls = message.get("tool_calls")
    read: list[ObservedCall] = []
    if calls is not None:
        assert isinstance(calls, list), f"{where}.tool_calls"
        read = [_call(c, f"{where}.tool_calls[{j}]", None) for j, c in enumerate(calls)]
    return content, thinking or "", read


def read_whole(body: Any) -> Observed:
    assert isinstance(body, dict), body
    assert isinstance(body.get("model"), str) and body["model"], "model"
    assert isinstance(body.get("created_at"), str), "created_at"
    assert body.get("done") is True, "a whole answer is done"
    reason = body.get("done_reason")  # omitempty in the server's types: older ones leave it out
    assert reason is None or isinstance(reason, str), f"done_reason {reason!r}"
    text, thinking, calls = _message(body.get("message"), "message")
    obs = Observed(text=text, reasoning=thinking, tool_calls=calls, model=body["model"],
                   usage=_usage(body))
    obs.finish = None if calls and reason in ("stop", None) else reason
    return obs


def write_whole(obs: Observed) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": obs.text}
    if obs.reasoning:
        message["thinking"] = obs.reasoning
    if obs.tool_calls:
        message["tool_calls"] = [{"id": c.id, "function": {"index": i, "name": c.name,
                                                           "arguments": c.arguments}}
                                 for i, c in enumerate(obs.tool_calls)]
    body: dict[str, Any] = {"model": obs.model or "llama3.2", "created_at": _CREATED,
                            "message": message, "done": True,
                            "done_reason": "stop" if obs.finish in (None, "tool_calls")
                            else obs.finish}
    if obs.usage is not None:
        body.update({"total_duration": 4883583458, "prompt_eval_count": obs.usage[0],
                     "eval_count": obs.usage[1]})
    return body


# --- streams -------------------------------------------------------------------------------------


def read_stream(data: bytes, *, lenient: bool = False) -> Observed:
    lines = json_lines(data)
    obs = Observed()
    model: str | None = None
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        assert isinstance(line, dict), f"line {i} is not an object"
        if line.get("error") is not None:
            assert isinstance(line["error"], str), f"line {i}: error {line['error']!r}"
            assert last, "lines after the error"
            obs.error = line["error"]
            break
        assert isinstance(line.get("model"), str) and line["model"], f"line {i}: model"
        assert model is None or line["model"] == model, f"line {i}: {line['model']} != {model}"
        model = obs.model = line["model"]
        assert isinstance(line.get("created_at"), str), f"line {i}: created_at"
        text, thinking, calls = _message(line.get("message"), f"line {i}.message")
        obs.text += text
        obs.reasoning += thinking
        obs.tool_calls += calls
        done = line.get("done")
        assert isinstance(done, bool), f"line {i}: done"
        if done:
            assert last, "lines after done"
            reason = line.get("done_reason")
            assert isinstance(reason, str) or (lenient and reason is None), \
                f"line {i}: done_reason {reason!r}"
            obs.usage = _usage(line)
            obs.finish = None if obs.tool_calls and reason in ("stop", None) else reason
        else:
            assert "done_reason" not in line, f"line {i}: done_reason before done"
            assert not last, "the stream ended without a done line or an error"
    return obs


def write_stream(obs: Observed, rng: random.Random) -> bytes:
    head = {"model": obs.model or "llama3.2", "created_at": _CREATED}

    def line(message: dict[str, Any], **more: Any) -> dict[str, Any]:
        return {**head, "message": {"role": "assistant", **message}, "done": False, **more}

    lines: list[Any] = [line({"content": "", "thinking": p}) for p in pieces(obs.reasoning, rng)]
    lines += [line({"content": p}) for p in pieces(obs.text, rng)]
    if obs.error is not None:
        return frame_lines([*lines, {"error": obs.error}])
    lines += [line({"content": "", "tool_calls": [{"id": c.id, "function": {
        "index": n, "name": c.name, "arguments": c.arguments}}]})
        for n, c in enumerate(obs.tool_calls)]
    last: dict[str, Any] = {**head, "message": {"role": "assistant", "content": ""},
                            "done": True,
                            "done_reason": "stop" if obs.finish in (None, "tool_calls")
                            else obs.finish}
    if obs.usage is not None:
        last.update({"total_duration": 182242375, "prompt_eval_count": obs.usage[0],
                     "eval_count": obs.usage[1]})
    return frame_lines([*lines, last])


# --- errors --------------------------------------------------------------------------------------


def read_error(body: Any) -> str:
    assert isinstance(body, dict) and isinstance(body.get("error"), str), body
    assert set(body) == {"error"}, body
    return str(body["error"])

