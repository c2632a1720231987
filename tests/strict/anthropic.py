"""Strict reader of the Anthropic Messages API, written from the API reference and the SDKs'
stream accumulators, not from the gateway's code (see :mod:`strict.observed`).

A stream is checked as Anthropic's SDKs need it: every event has an ``event:`` line equal to its
data's ``type``; exactly one ``message_start``, first, with the message shell; content blocks
started at indexes 0, 1, 2… one at a time, each block's deltas of its own type and its
``content_block_stop`` before the next start; a tool's ``partial_json`` fragments always a valid
JSON prefix (the Python SDK re-parses them after each one) ending as an object;
``message_delta`` with ``usage.output_tokens``; ``message_stop`` last, or ``error`` last, and
nothing after either.
"""

from __future__ import annotations

import json
from typing import Any

import jiter

from strict.observed import Observed, ObservedCall, ObservedMessage

__all__ = ["read_error", "read_request", "read_stream", "read_whole"]

_DELTA_FOR = {
    "text_delta": ("text",),
    "citations_delta": ("text",),
    "input_json_delta": ("tool_use", "server_tool_use"),
    "thinking_delta": ("thinking",),
    "signature_delta": ("thinking",),
}
_STOP_REASONS = {"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal",
                 "model_context_window_exceeded"}


def _usage(u: Any, where: str) -> tuple[int, int]:
    assert isinstance(u, dict), f"{where}: usage must be an object: {u!r}"
    for key in ("input_tokens", "output_tokens"):
        assert isinstance(u.get(key), int), f"{where}: usage.{key} must be an integer: {u!r}"
    cached = sum(u.get(k) or 0 for k in ("cache_read_input_tokens",
                                         "cache_creation_input_tokens"))
    return u["input_tokens"] + cached, u["output_tokens"]


def _check_block(block: Any, where: str) -> None:
    assert isinstance(block, dict) and isinstance(block.get("type"), str), \
        f"{where}: a content block must be an object with a type: {block!r}"
    kind = block["type"]
    if kind == "text":
        assert isinstance(block.get("text"), str), f"{where}: text block without text"
    elif kind == "tool_use":
        assert isinstance(block.get("id"), str) and isinstance(block.get("name"), str), \
            f"{where}: tool_use without id or name"
        assert isinstance(block.get("input"), dict), f"{where}: tool_use.input must be an object"
    elif kind == "thinking":
        assert isinstance(block.get("thinking"), str), f"{where}: thinking without text"
        assert isinstance(block.get("signature"), str), f"{where}: thinking without signature"
    elif kind == "redacted_thinking":
        assert isinstance(block.get("data"), str), f"{where}: redacted_thinking without data"


# --- whole answers -------------------------------------------------------------------------------


def read_whole(body: Any) -> Observed:
    assert isinstance(body, dict), f"an answer must be an object: {body!r}"
    assert body.get("type") == "message", f"type must be 'message': {body.get('type')!r}"
    assert body.get("role") == "assistant", f"role must be 'assistant': {body.get('role')!r}"
    assert isinstance(body.get("id"), str) and isinstance(body.get("model"), str), body
    assert body.get("stop_reason") in _STOP_REASONS, \
        f"stop_reason must be set in a whole answer: {body.get('stop_reason')!r}"
    assert "stop_sequence" in body, "stop_sequence is missing"
    content = body.get("content")
    assert isinstance(content, list), f"content must be a list: {content!r}"
    obs = Observed(finish=body["stop_reason"], model=body["model"],
                   usage=_usage(body.get("usage"), "answer"))
    for i, block in enumerate(content):
        _check_block(block, f"content[{i}]")
        match block["type"]:
            case "text":
                obs.text += block["text"]
            case "tool_use":
                obs.tool_calls.append(ObservedCall(block["id"], block["name"], block["input"]))
            case "thinking":
                obs.reasoning += block["thinking"]
            case _:
                obs.extra.setdefault("other_blocks", []).append(block["type"])
    return obs


# --- streams -------------------------------------------------------------------------------------


def _events(data: bytes) -> list[tuple[str | None, str]]:
    """``(event name, data)`` of each SSE event (WHATWG line rules, comments skipped)."""
    text = data.decode("utf-8")
    assert text.endswith("\n\n") or not text.strip(), "the stream does not end with a blank line"
    out: list[tuple[str | None, str]] = []
    name: str | None = None
    lines: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            if lines:
                out.append((name, "\n".join(lines)))
            elif name is not None:
                raise AssertionError(f"event {name!r} has no data line")
            name, lines = None, []
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            lines.append(value)
        elif field:
            raise AssertionError(f"unexpected SSE field {field!r}")
    return out


def read_stream(data: bytes, *, lenient: bool = False) -> Observed:
    """``lenient`` (an upstream's body, not the gateway's): a stream that gave its stop reason
    and left out ``message_stop`` is read as finished, as the gateway reads it."""
    obs = Observed()
    started = False
    ended: str | None = None  # message_stop or error
    delta_seen = False
    blocks: list[dict[str, Any]] = []  # per index: type, open, json buffer
    calls: dict[int, ObservedCall] = {}
    for name, raw in _events(data):
        assert ended is None, f"an event follows {ended}: {name} {raw}"
        assert name is not None, f"an event without an event: line (SDKs drop it): {raw}"
        payload = json.loads(raw)
        assert isinstance(payload, dict), f"event data must be an object: {raw}"
        assert payload.get("type") == name, \
            f"event: {name!r} but data.type is {payload.get('type')!r}"
        if name == "ping":
            continue
        if name == "error":
            err = payload.get("error")
            assert isinstance(err, dict) and isinstance(err.get("type"), str) \
                and isinstance(err.get("message"), str), f"malformed error event: {raw}"
            obs.error = err["message"]
            ended = "error"
            continue
        if name == "message_start":
            assert not started, "a second message_start"
            started = True
            msg = payload.get("message")
            assert isinstance(msg, dict), "message_start without a message"
            assert msg.get("type") == "message" and msg.get("role") == "assistant", msg
            assert isinstance(msg.get("id"), str) and isinstance(msg.get("model"), str), msg
            assert msg.get("content") == [], f"message_start content must be []: {msg}"
            assert msg.get("stop_reason") is None, "message_start has a stop_reason"
            _usage(msg.get("usage"), "message_start")
            obs.model = msg["model"]
            continue
        assert started, f"{name} before message_start"
        if name == "content_block_start":
            assert not delta_seen, "a content block started after message_delta"
            index = payload.get("index")
            assert index == len(blocks), f"block {index!r} started, block {len(blocks)} due"
            assert not blocks or not blocks[-1]["open"], \
                f"block {index} started before block {index - 1} stopped"
            block = payload.get("content_block")
            _check_block(block, f"content_block_start {index}")
            blocks.append({"type": block["type"], "open": True, "json": ""})
            if block["type"] == "tool_use":
                assert block["input"] == {}, "a tool_use block starts with input {}"
                calls[index] = ObservedCall(block["id"], block["name"], None)
            elif block["type"] == "text":
                obs.text += block["text"]
            elif block["type"] == "thinking":
                obs.reasoning += block["thinking"]
            continue
        if name == "content_block_delta":
            index = payload.get("index")
            assert isinstance(index, int) and 0 <= index < len(blocks) \
                and blocks[index]["open"], f"a delta for block {index!r}, which is not open"
            delta = payload.get("delta")
            assert isinstance(delta, dict), f"content_block_delta without delta: {raw}"
            kind = delta.get("type")
            allowed = _DELTA_FOR.get(kind)
            assert allowed is not None, f"unknown delta type {kind!r}"
            assert blocks[index]["type"] in allowed, \
                f"a {kind} for a {blocks[index]['type']} block (SDKs drop it)"
            if kind == "text_delta":
                assert isinstance(delta.get("text"), str)
                obs.text += delta["text"]
            elif kind == "thinking_delta":
                assert isinstance(delta.get("thinking"), str)
                obs.reasoning += delta["thinking"]
            elif kind == "signature_delta":
                assert isinstance(delta.get("signature"), str) and delta["signature"]
            elif kind == "input_json_delta":
                part = delta.get("partial_json")
                assert isinstance(part, str), f"partial_json must be a string: {raw}"
                buf = blocks[index]["json"] + part
                if buf.strip():
                    try:  # what the Python SDK does after every fragment
                        jiter.from_json(buf.encode(), partial_mode=True)
                    except ValueError as e:
                        raise AssertionError(f"not a JSON prefix: {buf!r} ({e})") from e
                blocks[index]["json"] = buf
            continue
        if name == "content_block_stop":
            index = payload.get("index")
            assert isinstance(index, int) and 0 <= index < len(blocks) \
                and blocks[index]["open"], f"content_block_stop for block {index!r}, not open"
            blocks[index]["open"] = False
            if index in calls:
                buf = blocks[index]["json"]
                try:
                    args = json.loads(buf) if buf.strip() else {}
                except ValueError as e:
                    raise AssertionError(f"tool input is not JSON at its stop: {buf!r}") from e
                assert isinstance(args, dict), f"tool input must be an object: {buf!r}"
                calls[index].arguments = args
            continue
        if name == "message_delta":
            assert all(not b["open"] for b in blocks), "message_delta with a block still open"
            delta_seen = True
            usage = payload.get("usage")
            assert isinstance(usage, dict) and isinstance(usage.get("output_tokens"), int), \
                f"message_delta.usage.output_tokens is required: {raw}"
            d = payload.get("delta")
            assert isinstance(d, dict), f"message_delta without delta: {raw}"
            if d.get("stop_reason") is not None:
                assert d["stop_reason"] in _STOP_REASONS, d
                obs.finish = d["stop_reason"]
            continue
        if name == "message_stop":
            assert delta_seen, "message_stop without message_delta"
            ended = "message_stop"
            continue
        raise AssertionError(f"an event type the API does not send: {name!r}")
    assert started, "no message_start"
    if ended is None and lenient and obs.finish is not None:
        ended = "message_stop"
    assert ended is not None, "the stream ended without message_stop or error"
    obs.tool_calls = [calls[i] for i in sorted(calls)]
    if ended == "message_stop":
        assert obs.finish is not None, "no stop_reason"
        obs.usage = _stream_usage(data)
    return obs


def _stream_usage(data: bytes) -> tuple[int, int]:
    """Usage as the SDK accumulates it: ``message_start``'s, overwritten by each
    ``message_delta``'s counts (cumulative, not added)."""
    usage: dict[str, Any] = {}
    for name, raw in _events(data):
        payload = json.loads(raw)
        if name == "message_start":
            usage.update(payload["message"]["usage"])
        elif name == "message_delta":
            usage.update({k: v for k, v in payload["usage"].items() if v is not None})
    return _usage(usage, "stream")


# --- requests and errors -------------------------------------------------------------------------


def _image_url(block: dict[str, Any]) -> str:
    source = block.get("source")
    assert isinstance(source, dict), f"image without source: {block!r}"
    if source.get("type") == "base64":
        return f"data:{source['media_type']};base64,{source['data']}"
    assert source.get("type") == "url", f"unknown image source: {source!r}"
    return str(source["url"])


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    assert isinstance(content, list), f"content must be a string or a list: {content!r}"
    return "".join(b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text")


def read_request(body: Any) -> Observed:
    assert isinstance(body, dict), body
    assert isinstance(body.get("model"), str), "model is required"
    assert isinstance(body.get("max_tokens"), int) and body["max_tokens"] >= 0, \
        "max_tokens is required"
    messages = body.get("messages")
    assert isinstance(messages, list) and messages, "messages must be a non-empty list"
    obs = Observed(model=body["model"], stream=body.get("stream", False) is True)
    system = body.get("system")
    if system is not None:
        obs.messages.append(ObservedMessage("system", _text_of(system)))
    for i, m in enumerate(messages):
        assert isinstance(m, dict) and m.get("role") in ("user", "assistant"), \
            f"messages[{i}]: role must be user or assistant: {m!r}"
        content = m.get("content")
        if isinstance(content, str):
            obs.messages.append(ObservedMessage(m["role"], content))
            continue
        assert isinstance(content, list), f"messages[{i}].content: {content!r}"
        here = ObservedMessage(m["role"], "")
        seen_other = False
        for block in content:
            assert isinstance(block, dict), block
            kind = block.get("type")
            if kind == "tool_result":
                assert m["role"] == "user", "tool_result outside a user message"
                assert not seen_other, "tool_result blocks must come first in their message"
                obs.messages.append(ObservedMessage(
                    "tool", _text_of(block.get("content", "")),
                    tool_result_for=block["tool_use_id"],
                    tool_result_error=block.get("is_error") is True))
                continue
            seen_other = True
            if kind == "text":
                assert block["text"], "an empty text block (the API rejects it)"
                here.text += block["text"]
            elif kind == "image":
                here.images.append(_image_url(block))
            elif kind == "tool_use":
                assert m["role"] == "assistant", "tool_use outside an assistant message"
                assert isinstance(block.get("input"), dict), "tool_use.input must be an object"
                here.tool_calls.append(ObservedCall(block["id"], block["name"], block["input"]))
            elif kind == "thinking":
                assert block.get("signature"), "a thinking block sent without its signature"
                here.reasoning += block["thinking"]
        if seen_other:
            obs.messages.append(here)
    for t in body.get("tools") or []:
        assert isinstance(t, dict) and isinstance(t.get("name"), str), t
        if t.get("type") in (None, "custom"):
            assert isinstance(t.get("input_schema"), dict), f"tool without input_schema: {t}"
        obs.tools.append(t["name"])
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        obs.tool_choice = {"auto": "auto", "none": "none", "any": "required"}.get(
            kind, f"tool:{choice.get('name')}")
    obs.extra = {k: body[k] for k in ("max_tokens", "thinking", "temperature", "top_p",
                                      "top_k", "stop_sequences", "metadata") if k in body}
    config = body.get("output_config")
    if config is not None:  # anthropic-sdk OutputConfigParam / JSONOutputFormatParam
        assert isinstance(config, dict) and set(config) <= {"effort", "format"}, config
        fmt = config.get("format")
        if fmt is not None:
            assert isinstance(fmt, dict) and set(fmt) == {"type", "schema"} \
                and fmt["type"] == "json_schema" and isinstance(fmt["schema"], dict), fmt
            obs.output = ("json_schema", fmt["schema"])
    return obs


def read_error(body: Any) -> str:
    assert isinstance(body, dict) and body.get("type") == "error", \
        f"an error body has type 'error': {body!r}"
    err = body.get("error")
    assert isinstance(err, dict) and isinstance(err.get("type"), str) \
        and isinstance(err.get("message"), str), f"malformed error body: {body!r}"
    return str(err["message"])
