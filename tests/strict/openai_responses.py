"""Strict reader of the OpenAI Responses API (specs/openai-responses.md), independent of the
gateway's code: what a Responses client reads, checked harder than the SDKs check it.

A stream must hold every rule of the spec's "Pitfalls for a translator": ``event:`` lines that
name the data's ``type``; ``sequence_number`` 0, 1, 2, …; ``response.created`` first; the same
response id in every lifecycle event; each item added at the next ``output_index`` before any
event names it; a message's ``content_part.added`` before its text deltas; item ids, types and
call ids that stay the same from ``added`` to ``done``; every item done before the end; exactly
one terminal event and nothing after it (after an ``error`` event, only ``response.failed``); and
a final ``response.output`` that lists every item as it was done.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from strict.observed import Observed, ObservedCall, ObservedMessage

__all__ = ["read_error", "read_request", "read_stream", "read_whole"]

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")
_LIFECYCLE = ("response.created", "response.in_progress", "response.queued", *_TERMINAL)
_RESPONSE_REQUIRED = ("id", "object", "created_at", "model", "output", "parallel_tool_calls",
                      "tool_choice", "tools")
_ITEM_TYPE_OF = {
    "response.output_text.delta": "message",
    "response.output_text.done": "message",
    "response.output_text.annotation.added": "message",
    "response.content_part.added": "message",
    "response.content_part.done": "message",
    "response.refusal.delta": "message",
    "response.refusal.done": "message",
    "response.function_call_arguments.delta": "function_call",
    "response.function_call_arguments.done": "function_call",
    "response.reasoning_summary_part.added": "reasoning",
    "response.reasoning_summary_part.done": "reasoning",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.reasoning_summary_text.done": "reasoning",
}
_SUMMARY_SEPARATOR = "\n\n"


# --- requests ------------------------------------------------------------------------------------


def read_request(body: Any) -> Observed:
    assert isinstance(body, dict), f"a request is an object, not {body!r}"
    seen = Observed(model=body.get("model"), stream=body.get("stream"))
    for state in ("previous_response_id", "conversation"):
        assert body.get(state) is None, f"the request refers to stored state ({state})"
    instructions = body.get("instructions")
    if instructions is not None:
        assert isinstance(instructions, str), "instructions must be a string"
        seen.messages.append(ObservedMessage("system", instructions))
    items = body.get("input")
    if isinstance(items, str):
        seen.messages.append(ObservedMessage("user", items))
    else:
        assert isinstance(items, list), f"input must be a string or a list, not {items!r}"
        for i, item in enumerate(items):
            _read_item(item, i, seen.messages)
    for t in body.get("tools") or []:
        assert isinstance(t, dict) and "function" not in t, f"tools are flat: {t!r}"
        if t.get("type") == "namespace":  # NamespaceTool: functions and custom tools
            assert isinstance(t.get("name"), str) and isinstance(t.get("tools"), list), t
            for member in t["tools"]:
                assert member.get("type") in ("function", "custom"), member
                _read_tool(member, seen, f"{t['name']}/")
        elif t.get("type") in ("function", "custom"):
            _read_tool(t, seen, "")
        else:
            assert isinstance(t.get("type"), str), t
            seen.hosted_tools.append(t["type"])
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        assert choice.get("type") == "function" and isinstance(choice.get("name"), str), choice
        seen.tool_choice = f"tool:{choice['name']}"
    elif choice is not None:
        assert choice in ("auto", "none", "required"), f"tool_choice {choice!r}"
        seen.tool_choice = choice
    for key in ("temperature", "top_p", "max_output_tokens", "reasoning", "store",
                "parallel_tool_calls"):
        if key in body:
            seen.extra[key] = body[key]
    text = body.get("text")
    if text is not None:  # openai-python ResponseTextConfigParam
        assert isinstance(text, dict) and set(text) <= {"format", "verbosity"}, text
        fmt = text.get("format")
        if fmt is not None:
            assert isinstance(fmt, dict) and fmt.get("type") in ("text", "json_object",
                                                                  "json_schema"), fmt
            if fmt["type"] == "json_schema":  # ResponseFormatTextJSONSchemaConfigParam
                assert isinstance(fmt.get("name"), str) and isinstance(fmt.get("schema"),
                                                                       dict), fmt
                assert set(fmt) <= {"type", "name", "description", "schema", "strict"}, fmt
                seen.output = ("json_schema", fmt["schema"])
            elif fmt["type"] == "json_object":
                assert set(fmt) == {"type"}, fmt
                seen.output = ("json_object", None)
    return seen


def _read_tool(t: Any, seen: Observed, prefix: str) -> None:
    assert isinstance(t.get("name"), str) and t["name"], f"a tool without name: {t!r}"
    seen.tools.append(prefix + t["name"])
    if t["type"] == "custom":  # CustomTool: format text, or a lark / regex grammar
        fmt = t.get("format")
        assert fmt is None or fmt.get("type") == "text" or (
            fmt.get("type") == "grammar" and fmt.get("syntax") in ("lark", "regex")
            and isinstance(fmt.get("definition"), str)), t
        seen.freeform_tools.append(prefix + t["name"])


def _read_item(item: Any, i: int, out: list[ObservedMessage]) -> None:
    assert isinstance(item, dict), f"input[{i}] is not an object"
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        assert role in ("user", "assistant", "system", "developer"), f"input[{i}].role {role!r}"
        msg = ObservedMessage(role, "")
        _read_content(item.get("content"), role, msg, f"input[{i}]")
        out.append(msg)
    elif kind in ("function_call", "custom_tool_call"):
        freeform = kind == "custom_tool_call"
        for key in ("call_id", "name", "input" if freeform else "arguments"):
            assert isinstance(item.get(key), str), f"input[{i}].{key} must be a string"
        namespace = item.get("namespace")
        assert namespace is None or isinstance(namespace, str), f"input[{i}].namespace"
        call = ObservedCall(item["call_id"], item["name"], item["input"] if freeform
                            else json.loads(item["arguments"]), freeform, namespace)
        last = out[-1] if out else None
        if last is None or last.role != "assistant" or last.tool_result_for is not None:
            last = ObservedMessage("assistant", "")
            out.append(last)
        last.tool_calls.append(call)
    elif kind in ("function_call_output", "custom_tool_call_output"):
        assert isinstance(item.get("call_id"), str), f"input[{i}].call_id"
        msg = ObservedMessage("tool", "", tool_result_for=item["call_id"])
        output = item.get("output")
        if isinstance(output, str):
            msg.text = output
        else:
            _read_content(output, "user", msg, f"input[{i}].output")
        out.append(msg)
    elif kind == "reasoning":
        assert isinstance(item.get("id"), str), f"input[{i}]: a reasoning item needs its id"
        assert isinstance(item.get("summary"), list), f"input[{i}]: a reasoning item's summary"
        msg = ObservedMessage("assistant", "")
        msg.reasoning = _SUMMARY_SEPARATOR.join(p["text"] for p in item["summary"])
        out.append(msg)
    else:
        raise AssertionError(f"input[{i}] has an item type a client would not send: {kind!r}")


def _read_content(content: Any, role: str, msg: ObservedMessage, where: str) -> None:
    if isinstance(content, str):
        msg.text = content
        return
    assert isinstance(content, list), f"{where}.content must be a string or a list"
    texts: list[str] = []
    for j, part in enumerate(content):
        assert isinstance(part, dict), f"{where}.content[{j}] is not an object"
        kind = part.get("type")
        if role == "assistant":
            assert kind in ("output_text", "refusal"), \
                f"{where}.content[{j}]: an assistant message holds output_text, not {kind!r}"
            if kind == "output_text":
                assert isinstance(part.get("annotations"), list), \
                    f"{where}.content[{j}]: output_text needs annotations"
                texts.append(part["text"])
        elif kind == "input_text":
            texts.append(part["text"])
        elif kind == "input_image":
            url = part.get("image_url")
            assert isinstance(url, str) and url.startswith(("http://", "https://", "data:")), \
                f"{where}.content[{j}]: image_url {url!r}"
            msg.images.append(url)
        else:
            assert kind == "input_file", f"{where}.content[{j}]: part type {kind!r}"
    msg.text = "".join(texts)


# --- whole answers -------------------------------------------------------------------------------


def read_whole(body: Any) -> Observed:
    assert isinstance(body, dict), f"a response is an object, not {body!r}"
    _check_response(body)
    seen = Observed(model=body["model"])
    _read_output(body["output"], seen)
    _read_terminal(body, seen)
    return seen


def _check_response(r: dict[str, Any]) -> None:
    for key in _RESPONSE_REQUIRED:
        assert key in r, f"the response has no {key!r} (the SDKs' types require it)"
    assert r["object"] == "response", f"object is {r['object']!r}"
    assert isinstance(r["id"], str) and r["id"], "the response id must be a string"
    assert isinstance(r["created_at"], int | float), "created_at must be a number"
    assert isinstance(r["output"], list), "output must be a list"
    assert isinstance(r["tools"], list), "tools must be a list"
    assert isinstance(r["parallel_tool_calls"], bool), "parallel_tool_calls must be a boolean"
    assert r["tool_choice"] in ("auto", "none", "required") or isinstance(r["tool_choice"], dict)
    assert "error" not in r or r["error"] is None or r.get("status") == "failed", \
        "an error in a response that did not fail"


def _read_output(output: list[Any], seen: Observed) -> None:
    ids: set[str] = set()
    for i, item in enumerate(output):
        assert isinstance(item, dict), f"output[{i}] is not an object"
        kind = item.get("type")
        item_id = item.get("id")
        assert isinstance(item_id, str) and item_id, f"output[{i}] has no id"
        assert item_id not in ids, f"output[{i}]: the id {item_id} is used twice"
        ids.add(item_id)
        if kind == "message":
            assert item.get("role") == "assistant", f"output[{i}].role"
            assert item.get("status") in ("completed", "incomplete", "in_progress")
            for j, part in enumerate(item["content"]):
                if part["type"] == "output_text":
                    assert isinstance(part["text"], str), f"output[{i}].content[{j}].text"
                    assert isinstance(part.get("annotations"), list), \
                        f"output[{i}].content[{j}] needs annotations"
                    seen.text += part["text"]
                    for a in part["annotations"]:
                        seen.citations.append(_citation_name(a))
                else:
                    assert part["type"] == "refusal", f"output[{i}].content[{j}].type"
                    seen.text += part["refusal"]
        elif kind == "function_call":
            for key in ("call_id", "name", "arguments"):
                assert isinstance(item.get(key), str), f"output[{i}].{key} must be a string"
            assert item["id"] != item["call_id"] or item["id"].startswith("fc_")
            seen.tool_calls.append(ObservedCall(item["call_id"], item["name"],
                                                json.loads(item["arguments"])))
        elif kind == "reasoning":
            assert isinstance(item.get("summary"), list), f"output[{i}].summary"
            texts = [p["text"] for p in item["summary"] if p.get("type") == "summary_text"]
            if texts:
                if seen.reasoning:
                    seen.reasoning += _SUMMARY_SEPARATOR
                seen.reasoning += _SUMMARY_SEPARATOR.join(texts)
        else:
            raise AssertionError(f"output[{i}] has an unexpected item type {kind!r}")


def _citation_name(a: dict[str, Any]) -> str:
    if a.get("type") == "url_citation":
        for key in ("url", "title", "start_index", "end_index"):
            assert key in a, f"a url_citation without {key}"
        return str(a["url"])
    assert a.get("type") == "file_citation", f"annotation type {a.get('type')!r}"
    for key in ("file_id", "filename", "index"):
        assert key in a, f"a file_citation without {key}"
    return str(a["filename"])


def _read_terminal(r: dict[str, Any], seen: Observed) -> None:
    status = r.get("status")
    if status == "incomplete":
        details = r.get("incomplete_details")
        assert isinstance(details, dict) and details.get("reason") in (
            "max_output_tokens", "content_filter"), f"incomplete_details {details!r}"
        seen.finish = f"incomplete:{details['reason']}"
    else:
        assert status in ("completed", "failed"), f"status {status!r}"
        assert r.get("incomplete_details") is None, "incomplete_details on a finished response"
        seen.finish = status
    usage = r.get("usage")
    if usage is not None:
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            assert isinstance(usage.get(key), int), f"usage.{key} must be an integer"
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"], \
            "usage.total_tokens is not input + output"
        details = usage.get("output_tokens_details")
        if details is not None:
            assert details["reasoning_tokens"] <= usage["output_tokens"]
        seen.usage = (usage["input_tokens"], usage["output_tokens"])


# --- streams -------------------------------------------------------------------------------------


@dataclass
class _Item:
    kind: str
    id: str
    call_id: str | None = None
    parts: list[str] = field(default_factory=list)
    """Per content/summary index: the text so far (message and reasoning items)."""
    parts_done: list[bool] = field(default_factory=list)
    arguments: str = ""
    arguments_done: bool = False
    done: dict[str, Any] | None = None
    annotations: list[Any] = field(default_factory=list)


def _sse_events(data: bytes) -> list[tuple[str | None, str]]:
    text = data.decode("utf-8")
    assert "\r" not in text, "the gateway writes LF line ends"
    assert text.endswith("\n\n") or not text, "the stream must end with a whole event"
    events: list[tuple[str | None, str]] = []
    for block in text.split("\n\n"):
        if not block:
            continue
        name: str | None = None
        data_lines: list[str] = []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            field_name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field_name == "event":
                assert name is None, f"two event: lines in one event: {block!r}"
                name = value
            elif field_name == "data":
                data_lines.append(value)
            else:
                raise AssertionError(f"an SSE line a Responses server does not send: {line!r}")
        if data_lines:
            events.append((name, "\n".join(data_lines)))
    return events


def read_stream(data: bytes) -> Observed:
    seen = Observed()
    items: list[_Item] = []
    response_id: str | None = None
    terminal: dict[str, Any] | None = None
    errored = False
    for n, (name, raw) in enumerate(_sse_events(data)):
        assert raw != "[DONE]", "a Responses stream has no [DONE]"
        ev = json.loads(raw)
        kind = ev.get("type")
        where = f"event {n} ({kind})"
        assert name == kind, f"{where}: the event: line says {name!r}"
        assert ev.get("sequence_number") == n, \
            f"{where}: sequence_number {ev.get('sequence_number')!r}, expected {n}"
        assert terminal is None, f"{where}: an event after the terminal one"
        if n == 0:
            assert kind == "response.created", f"the first event is {kind}, not response.created"
        if errored:
            assert kind == "response.failed", f"{where}: only response.failed may follow error"
        if kind in _LIFECYCLE:
            r = ev.get("response")
            assert isinstance(r, dict), f"{where}: no response"
            _check_response(r)
            if response_id is None:
                response_id = r["id"]
                seen.model = r["model"]
            assert r["id"] == response_id, f"{where}: the response id changed to {r['id']}"
            if kind in _TERMINAL:
                terminal = r
            else:
                assert r.get("status") in ("in_progress", "queued"), f"{where}: status"
                assert r["output"] == [], f"{where}: output before any item"
            continue
        if kind == "error":
            assert not errored, f"{where}: a second error"
            errored = True
            nested = ev.get("error")
            assert isinstance(ev.get("message"), str), f"{where}: no flat message"
            assert "code" in ev and "param" in ev, f"{where}: the flat schema's code/param"
            assert isinstance(nested, dict) and isinstance(nested.get("message"), str), \
                f"{where}: no nested error object (the Python SDK raises only for it)"
            seen.error = ev["message"]
            continue
        assert "error" not in ev, f"{where}: a top-level error key makes the SDKs raise"
        _item_event(kind, ev, items, where, seen)
    assert terminal is not None, "the stream ended without a terminal event"
    if terminal["status"] == "failed":
        assert terminal.get("error") is not None, "response.failed without its error"
        assert isinstance(terminal["error"].get("message"), str)
        if seen.error is None:
            seen.error = terminal["error"]["message"]
    else:
        assert not errored, "an error event before a clean end"
        for i, item in enumerate(items):
            assert item.done is not None, f"output item {i} ({item.kind}) was never done"
        final = terminal["output"]
        assert len(final) == len(items), \
            f"the final output lists {len(final)} items, the stream had {len(items)}"
        for i, (item, listed) in enumerate(zip(items, final, strict=True)):
            assert listed == item.done, f"final output[{i}] differs from its output_item.done"
    _read_output([i.done for i in items if i.done is not None], seen)
    _read_terminal(terminal, seen)
    return seen


def _item_event(kind: str, ev: dict[str, Any], items: list[_Item], where: str,
                seen: Observed) -> None:
    index = ev.get("output_index")
    assert isinstance(index, int), f"{where}: no output_index"
    if kind == "response.output_item.added":
        assert index == len(items), \
            f"{where}: output_index {index}, expected the next one ({len(items)})"
        item = ev["item"]
        assert isinstance(item.get("id"), str) and item["id"], f"{where}: the item has no id"
        assert all(item["id"] != other.id for other in items), f"{where}: the id is reused"
        added = _Item(item["type"], item["id"], item.get("call_id"))
        if added.kind == "function_call":
            assert isinstance(item.get("call_id"), str) and item["call_id"], f"{where}: call_id"
            assert isinstance(item.get("name"), str) and item["name"], f"{where}: name"
            assert item.get("arguments") == "", f"{where}: arguments before any delta"
        elif added.kind == "message":
            assert item.get("content") == [], f"{where}: content before any part"
            assert item.get("role") == "assistant"
        else:
            assert added.kind == "reasoning", f"{where}: item type {added.kind!r}"
            assert item.get("summary") == [], f"{where}: summary before any part"
        items.append(added)
        return
    assert index < len(items), f"{where}: output_index {index} was never added"
    item = items[index]
    assert item.done is None, f"{where}: an event for an item already done"
    if kind == "response.output_item.done":
        done = ev["item"]
        assert done.get("type") == item.kind and done.get("id") == item.id, \
            f"{where}: the item's identity changed"
        assert done.get("call_id") == item.call_id, f"{where}: the call_id changed"
        if item.kind == "message":
            texts = [p["text"] for p in done["content"] if p["type"] == "output_text"]
            assert texts == item.parts, f"{where}: the done message says {texts!r}"
            assert all(item.parts_done), f"{where}: a content part was not done"
            if done["content"] and item.annotations:
                assert done["content"][-1]["annotations"] == item.annotations, \
                    f"{where}: annotations differ from the events"
        elif item.kind == "function_call":
            assert item.arguments_done, f"{where}: arguments were not done"
            assert done["arguments"] == item.arguments, f"{where}: arguments differ"
            assert done.get("status") in ("completed", "incomplete")
        else:
            texts = [p["text"] for p in done["summary"]]
            assert texts == item.parts, f"{where}: the done summary differs"
            assert all(item.parts_done), f"{where}: a summary part was not done"
        item.done = done
        return
    assert ev.get("item_id") == item.id, \
        f"{where}: item_id {ev.get('item_id')!r} is not the added item's {item.id!r}"
    expected = _ITEM_TYPE_OF.get(kind)
    assert expected is not None, f"{where}: an event type this reader does not know"
    assert item.kind == expected, f"{where}: this event does not belong to a {item.kind} item"
    if kind in ("response.content_part.added", "response.reasoning_summary_part.added"):
        key = "content_index" if kind == "response.content_part.added" else "summary_index"
        assert ev[key] == len(item.parts), f"{where}: {key} {ev[key]} is not the next part"
        part = ev["part"]
        assert part["text"] == "", f"{where}: a part must begin empty"
        assert part["type"] == ("output_text" if item.kind == "message" else "summary_text")
        item.parts.append("")
        item.parts_done.append(False)
    elif kind in ("response.output_text.delta", "response.reasoning_summary_text.delta"):
        j = _open_part(item, ev, where)
        assert isinstance(ev["delta"], str), f"{where}: delta"
        item.parts[j] += ev["delta"]
    elif kind in ("response.output_text.done", "response.reasoning_summary_text.done"):
        j = _open_part(item, ev, where)
        assert ev["text"] == item.parts[j], f"{where}: the done text is not the deltas' text"
    elif kind == "response.output_text.annotation.added":
        _open_part(item, ev, where)
        assert ev["annotation_index"] == len(item.annotations), f"{where}: annotation_index"
        item.annotations.append(ev["annotation"])
    elif kind in ("response.content_part.done", "response.reasoning_summary_part.done"):
        j = _open_part(item, ev, where)
        assert ev["part"]["text"] == item.parts[j], f"{where}: the done part's text differs"
        item.parts_done[j] = True
    elif kind == "response.function_call_arguments.delta":
        assert not item.arguments_done, f"{where}: a delta after the arguments were done"
        assert isinstance(ev["delta"], str)
        item.arguments += ev["delta"]
    elif kind == "response.function_call_arguments.done":
        assert ev["arguments"] == item.arguments, f"{where}: arguments differ from the deltas"
        json.loads(item.arguments)  # complete JSON by now
        item.arguments_done = True
    else:
        raise AssertionError(f"{where}: an event type the gateway should not send")


def _open_part(item: _Item, ev: dict[str, Any], where: str) -> int:
    key = "content_index" if item.kind == "message" else "summary_index"
    j = ev.get(key)
    assert isinstance(j, int) and j < len(item.parts), f"{where}: {key} {j} was never added"
    assert not item.parts_done[j], f"{where}: the part is already done"
    return j


# --- errors --------------------------------------------------------------------------------------


def read_error(body: Any) -> str:
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), \
        f"an error body is {{'error': {{…}}}}, not {body!r}"
    err = body["error"]
    for key in ("message", "type", "param", "code"):
        assert key in err, f"the error has no {key!r}"
    assert isinstance(err["message"], str) and isinstance(err["type"], str)
    return str(err["message"])
