"""Strict reader (and writer) of raw OpenAI Chat Completions, from the API reference's facts
(specs/openai-chat-completions.md) and what the official SDKs do: they raise on an event
``data: {"error": …}`` and stop at ``data: [DONE]``.

The stream rules checked: one ``data:`` line per event; every chunk ``chat.completion.chunk``
with the same ``id``, ``created`` and ``model``; the first chunk's delta has the role; at most one
chunk carries a ``finish_reason``, after it only the usage chunk (``choices: []``); ``[DONE]``
last, or an error event last and no ``[DONE]`` (``lenient``: a finished answer may leave
``[DONE]`` out); a tool call's first fragment names it (``id``,
``type``, ``function.name``), later ones only add ``arguments``, which together are JSON.
"""

from __future__ import annotations

import random
from typing import Any

from strict._wire import dumps, frame_sse, loads, pieces, sse_events
from strict.observed import Observed, ObservedCall, ObservedMessage

__all__ = ["FINISH", "SAMPLING", "read_error", "read_request", "read_stream", "read_whole",
           "write_request", "write_stream", "write_whole"]

FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls",
          "content_filter": "content_filter", "function_call": "tool_calls"}
SAMPLING = ("model", "temperature", "max_tokens")
_ROLES = {"system", "developer", "user", "assistant", "tool"}


# --- requests ------------------------------------------------------------------------------------


def _call(c: Any, where: str) -> ObservedCall:
    if isinstance(c, dict) and c.get("type") == "custom":  # ChatCompletionMessageCustomToolCall
        custom = c.get("custom")
        assert isinstance(c.get("id"), str) and c["id"], f"{where}.id: {c!r}"
        assert isinstance(custom, dict) and isinstance(custom.get("name"), str), where
        assert isinstance(custom.get("input"), str), f"{where}.custom.input must be a string"
        return ObservedCall(c["id"], custom["name"], custom["input"], freeform=True)
    assert isinstance(c, dict) and c.get("type") == "function", f"{where}: {c!r}"
    fn = c.get("function")
    assert isinstance(c.get("id"), str) and c["id"], f"{where}.id: {c!r}"
    assert isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"], where
    assert isinstance(fn.get("arguments"), str), f"{where}.function.arguments must be a string"
    return ObservedCall(c["id"], fn["name"], loads(fn["arguments"]))


def read_request(body: Any) -> Observed:
    assert isinstance(body, dict), body
    assert isinstance(body.get("model"), str) and body["model"], "model is required"
    messages = body.get("messages")
    assert isinstance(messages, list) and messages, "messages must be a non-empty list"
    obs = Observed(model=body["model"])
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        assert isinstance(m, dict) and m.get("role") in _ROLES, f"{where}: {m!r}"
        msg = ObservedMessage(m["role"], "")
        content = m.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                assert isinstance(part, dict), f"{where}.content[{j}]"
                if part.get("type") == "text":
                    assert isinstance(part.get("text"), str), f"{where}.content[{j}].text"
                    msg.text += part["text"]
                elif part.get("type") == "image_url":
                    url = part.get("image_url", {}).get("url")
                    assert isinstance(url, str) and url, f"{where}.content[{j}].image_url.url"
                    msg.images.append(url)
                else:
                    raise AssertionError(f"{where}.content[{j}]: unknown part {part!r}")
        else:
            assert content is None or isinstance(content, str), f"{where}.content"
            msg.text = content or ""
        calls = m.get("tool_calls")
        if calls is not None:
            assert m["role"] == "assistant" and isinstance(calls, list) and calls, where
            msg.tool_calls = [_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
        if content is None:
            assert msg.tool_calls, f"{where}: content is null without tool calls"
        if m["role"] == "tool":
            assert isinstance(m.get("tool_call_id"), str), f"{where}.tool_call_id"
            msg.tool_result_for = m["tool_call_id"]
        else:
            assert "tool_call_id" not in m, f"{where}: tool_call_id on a {m['role']} message"
        reasoning = m.get("reasoning_content")
        assert reasoning is None or isinstance(reasoning, str), f"{where}.reasoning_content"
        msg.reasoning = reasoning or ""
        obs.messages.append(msg)
    tools = body.get("tools")
    if tools is not None:
        assert isinstance(tools, list)
        for t in tools:
            if isinstance(t, dict) and t.get("type") == "custom":  # ChatCompletionCustomToolParam
                custom = t.get("custom")
                assert isinstance(custom, dict) and isinstance(custom.get("name"), str), t
                fmt = custom.get("format")
                assert fmt is None or fmt.get("type") == "text" or (
                    fmt.get("type") == "grammar" and set(fmt["grammar"]) == {
                        "syntax", "definition"}), t
                obs.tools.append(custom["name"])
                obs.freeform_tools.append(custom["name"])
                continue
            assert isinstance(t, dict) and t.get("type") == "function", t
            assert isinstance(t["function"].get("name"), str), t
            params = t["function"].get("parameters")
            assert params is None or isinstance(params, dict), t
            obs.tools.append(t["function"]["name"])
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        assert choice.get("type") == "function", choice
        obs.tool_choice = f"tool:{choice['function']['name']}"
    else:
        assert choice in (None, "auto", "none", "required"), choice
        obs.tool_choice = choice
    if "parallel_tool_calls" in body:
        assert tools, "parallel_tool_calls is only allowed with tools"
    stream = body.get("stream", False)
    assert isinstance(stream, bool), "stream must be a boolean"
    obs.stream = stream
    if "stream_options" in body:
        assert stream is True, "stream_options is only allowed when streaming"
        obs.extra["include_usage"] = body["stream_options"].get("include_usage") is True
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            assert isinstance(body[key], int | float) and not isinstance(body[key], bool), key
            obs.extra[key] = body[key]
    caps = [k for k in ("max_tokens", "max_completion_tokens") if body.get(k) is not None]
    assert len(caps) <= 1, f"both {caps}"
    if caps:
        assert isinstance(body[caps[0]], int), caps[0]
        obs.extra["max_tokens"] = body[caps[0]]
    if body.get("reasoning_effort") is not None:
        assert body["reasoning_effort"] in ("minimal", "low", "medium", "high"), \
            body["reasoning_effort"]
        obs.extra["reasoning"] = body["reasoning_effort"]
    fmt = body.get("response_format")
    if fmt is not None:  # openai-python ResponseFormatJSONSchema / ResponseFormatJSONObject
        assert isinstance(fmt, dict) and fmt.get("type") in ("text", "json_object",
                                                              "json_schema"), fmt
        if fmt["type"] == "json_schema":
            spec = fmt.get("json_schema")
            assert isinstance(spec, dict) and isinstance(spec.get("name"), str), fmt
            assert set(spec) <= {"name", "description", "schema", "strict"}, spec
            obs.output = ("json_schema", spec.get("schema"))
        elif fmt["type"] == "json_object":
            assert set(fmt) == {"type"}, fmt
            obs.output = ("json_object", None)
    return obs


def write_request(obs: Observed) -> Any:
    messages = []
    for m in obs.messages:
        wire: dict[str, Any] = {"role": "tool" if m.tool_result_for else m.role}
        if m.images:
            wire["content"] = [{"type": "text", "text": m.text}, *(
                {"type": "image_url", "image_url": {"url": u}} for u in m.images)]
        else:
            wire["content"] = None if m.tool_calls and not m.text else m.text
        if m.tool_calls:
            wire["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": dumps(c.arguments)}} for c in m.tool_calls]
        if m.tool_result_for:
            wire["tool_call_id"] = m.tool_result_for
        if m.reasoning:
            wire["reasoning_content"] = m.reasoning
        messages.append(wire)
    body: dict[str, Any] = {"model": obs.model or "gpt-4o-mini", "messages": messages}
    if obs.tools:
        body["tools"] = [{"type": "function", "function": {
            "name": n, "description": f"the {n} tool",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
            for n in obs.tools]
    if obs.tool_choice is not None:
        body["tool_choice"] = {"type": "function", "function": {"name": obs.tool_choice[5:]}} \
            if obs.tool_choice.startswith("tool:") else obs.tool_choice
    for key in ("temperature", "max_tokens"):
        if key in obs.extra:
            body[key] = obs.extra[key]
    if obs.extra.get("reasoning"):
        body["reasoning_effort"] = obs.extra["reasoning"]
    if obs.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


# --- whole answers -------------------------------------------------------------------------------


def _usage(u: Any) -> tuple[int | None, int | None]:
    assert isinstance(u, dict), f"usage must be an object: {u!r}"
    prompt, completion, total = (u.get(k) for k in
                                 ("prompt_tokens", "completion_tokens", "total_tokens"))
    assert all(isinstance(x, int) for x in (prompt, completion, total)), u
    assert total == prompt + completion, f"total_tokens is not the sum: {u}"
    return prompt, completion


def read_whole(body: Any) -> Observed:
    assert isinstance(body, dict), body
    assert body.get("object") == "chat.completion", body.get("object")
    assert isinstance(body.get("id"), str) and body["id"], "id"
    assert isinstance(body.get("created"), int), "created"
    assert isinstance(body.get("model"), str), "model"
    choices = body.get("choices")
    assert isinstance(choices, list) and len(choices) == 1, "one choice"
    choice = choices[0]
    assert choice.get("index") == 0, choice
    message = choice.get("message")
    assert isinstance(message, dict) and message.get("role") == "assistant", message
    obs = Observed(model=body["model"], finish=choice.get("finish_reason"))
    assert obs.finish in FINISH, f"finish_reason {obs.finish!r}"
    content = message.get("content")
    calls = message.get("tool_calls")
    if calls is not None:
        assert isinstance(calls, list) and calls, "tool_calls must be a non-empty list"
        obs.tool_calls = [_call(c, f"tool_calls[{i}]") for i, c in enumerate(calls)]
    assert isinstance(content, str) or (content is None and obs.tool_calls), \
        "content must be a string (null only beside tool calls)"
    obs.text = content or ""
    reasoning = message.get("reasoning_content")
    assert reasoning is None or isinstance(reasoning, str), "reasoning_content"
    obs.reasoning = reasoning or ""
    if body.get("usage") is not None:
        obs.usage = _usage(body["usage"])
    return obs


def write_whole(obs: Observed) -> Any:
    message: dict[str, Any] = {"role": "assistant",
                               "content": obs.text if obs.text or not obs.tool_calls else None}
    if obs.reasoning:
        message["reasoning_content"] = obs.reasoning
    if obs.tool_calls:
        message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.name, "arguments": dumps(c.arguments)}} for c in obs.tool_calls]
    body: dict[str, Any] = {
        "id": "chatcmpl-written", "object": "chat.completion", "created": 1_700_000_000,
        "model": obs.model or "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": obs.finish or "stop"}]}
    if obs.usage is not None:
        body["usage"] = {"prompt_tokens": obs.usage[0], "completion_tokens": obs.usage[1],
                         "total_tokens": (obs.usage[0] or 0) + (obs.usage[1] or 0)}
    return body


# --- streams -------------------------------------------------------------------------------------


def read_stream(data: bytes, *, lenient: bool = False) -> Observed:
    events = sse_events(data)
    assert events, "no event"
    obs = Observed()
    seen: tuple[Any, Any, Any] | None = None
    calls: dict[int, list[Any]] = {}
    finished = usage_seen = False
    for i, (_, raw) in enumerate(events):
        last = i == len(events) - 1
        if raw == "[DONE]":
            assert last, "events after [DONE]"
            assert obs.finish is not None, "[DONE] without a finish_reason"
            break
        chunk = loads(raw)
        assert isinstance(chunk, dict), f"event {i} is not an object"
        if chunk.get("error") is not None:
            err = chunk["error"]
            assert isinstance(err, dict) and isinstance(err.get("message"), str), err
            assert "type" in err, f"the error has no type: {err}"
            assert last, "events after the error"
            # a same-dialect route shows the upstream's own finish chunk before a later break
            assert lenient or not finished, "an error after the finish"
            obs.error = err["message"]
            break
        assert chunk.get("object") == "chat.completion.chunk", chunk.get("object")
        ident = (chunk.get("id"), chunk.get("created"), chunk.get("model"))
        assert isinstance(ident[0], str) and isinstance(ident[1], int), ident
        assert isinstance(ident[2], str), f"chunk {i} has no model"
        assert seen is None or ident == seen, f"chunk {i}: {ident} != {seen}"
        seen = ident
        obs.model = ident[2]
        choices = chunk.get("choices")
        if chunk.get("usage") is not None:
            assert not usage_seen, "two usage chunks"
            usage_seen = True
            obs.usage = _usage(chunk["usage"])
            if choices is None or choices == []:
                continue
        assert not usage_seen, "a chunk after the usage chunk"
        assert isinstance(choices, list) and len(choices) == 1, f"chunk {i}: one choice"
        assert not finished, f"chunk {i} after the finish_reason"
        choice = choices[0]
        assert choice.get("index") == 0, choice
        delta = choice.get("delta")
        assert isinstance(delta, dict), f"chunk {i} has no delta"
        if i == 0:
            assert delta.get("role") == "assistant", "the first chunk does not give the role"
        _read_delta(delta, obs, calls, i)
        reason = choice.get("finish_reason")
        if reason is not None:
            assert reason in FINISH, f"finish_reason {reason!r}"
            obs.finish = reason
            finished = True
    else:
        # A server that finished its answer and left out [DONE] is read as finished.
        assert lenient and obs.finish is not None, "the stream ended without [DONE] or an error"
    for index in sorted(calls):
        cid, name, *parts = calls[index]
        args = "".join(parts)
        # a call the error cut short keeps its arguments as the text they got to
        obs.tool_calls.append(ObservedCall(cid, name, args if obs.error is not None
                                           and not _complete(args) else loads(args)))
    return obs


def _complete(text: str) -> bool:
    try:
        loads(text)
    except AssertionError:
        return False
    return True


def _read_delta(delta: dict[str, Any], obs: Observed, calls: dict[int, list[Any]],
                i: int) -> None:
    content = delta.get("content")
    assert content is None or isinstance(content, str), f"chunk {i}: content"
    obs.text += content or ""
    reasoning = delta.get("reasoning_content")
    assert reasoning is None or isinstance(reasoning, str), f"chunk {i}: reasoning_content"
    obs.reasoning += reasoning or ""
    for call in delta.get("tool_calls") or []:
        index = call.get("index")
        assert isinstance(index, int), f"chunk {i}: a tool call without index"
        fn = call.get("function") or {}
        if index not in calls:
            assert index == len(calls), f"chunk {i}: tool call {index} skips ahead"
            assert isinstance(call.get("id"), str) and call.get("type") == "function", call
            assert isinstance(fn.get("name"), str) and fn["name"], call
            calls[index] = [call["id"], fn["name"]]
        else:
            assert "id" not in call and "name" not in fn, f"chunk {i}: call {index} renamed"
        args = fn.get("arguments")
        assert args is None or isinstance(args, str), f"chunk {i}: arguments"
        calls[index].append(args or "")


def write_stream(obs: Observed, rng: random.Random) -> bytes:
    head = {"id": "chatcmpl-written", "object": "chat.completion.chunk",
            "created": 1_700_000_000, "model": obs.model or "gpt-4o-mini"}

    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": reason}]}

    events: list[Any] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning_content": p}) for p in pieces(obs.reasoning, rng)]
    events += [chunk({"content": p}) for p in pieces(obs.text, rng)]
    if obs.error is not None:
        return frame_sse([*events, {"error": {"message": obs.error, "type": "server_error",
                                              "param": None, "code": None}}])
    for n, c in enumerate(obs.tool_calls):
        events.append(chunk({"tool_calls": [{"index": n, "id": c.id, "type": "function",
                                             "function": {"name": c.name, "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": n, "function": {"arguments": p}}]})
                   for p in pieces(dumps(c.arguments), rng)]
    events.append(chunk({}, obs.finish or "stop"))
    if obs.usage is not None:
        events.append({**head, "choices": [], "usage": {
            "prompt_tokens": obs.usage[0], "completion_tokens": obs.usage[1],
            "total_tokens": (obs.usage[0] or 0) + (obs.usage[1] or 0)}})
    return frame_sse([*events, "[DONE]"])


# --- errors --------------------------------------------------------------------------------------


def read_error(body: Any) -> str:
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    err = body["error"]
    assert isinstance(err.get("message"), str) and isinstance(err.get("type"), str), err
    assert set(err) <= {"message", "type", "param", "code"}, err
    return str(err["message"])
