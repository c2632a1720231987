"""Strict reader of AG-UI 1.0, written from ``@ag-ui/core``'s types and ``@ag-ui/client``'s
verifier and reducer, not from the gateway's code (see :mod:`strict.observed`).

A stream is checked as ``HttpAgent`` checks it, and harder: plain ``data:`` events (no names),
each a JSON object whose ``type`` the protocol defines, carrying the fields its type requires
and no ``null`` where a field is optional; ``RUN_STARTED`` first, ``RUN_FINISHED`` or
``RUN_ERROR`` last and nothing after; text messages, reasoning messages and spans, and tool
calls opened before their content and closed before ``RUN_FINISHED``; a tool call's arguments
one JSON object at its end.

What a client reads: the assistant text messages (each its own agent when named); reasoning
message content; tool calls no ``TOOL_CALL_RESULT`` answered; the state (``STATE_SNAPSHOT``,
patched by ``STATE_DELTA``); ``CUSTOM`` events ``sources`` / ``followups`` / ``thoughts``;
``RUN_FINISHED.usage`` summed; ``RUN_ERROR``'s message. A whole answer is the same events as
one JSON array. AG-UI has no finish reason, so none is observed.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from strict._rag import THOUGHTS, snippet_of
from strict._wire import dumps, frame_sse, loads, pieces, sse_events
from strict.observed import Observed, ObservedCall, ObservedMessage, agents_text

__all__ = ["SAMPLING", "read_error", "read_request", "read_stream", "read_whole",
           "write_request", "write_stream", "write_whole"]

SAMPLING = ("model", "temperature", "max_tokens")

_REQUIRED: dict[str, tuple[str, ...]] = {
    "RUN_STARTED": ("threadId", "runId"),
    "RUN_FINISHED": ("threadId", "runId"),
    "RUN_ERROR": ("message",),
    "TEXT_MESSAGE_START": ("messageId",),
    "TEXT_MESSAGE_CONTENT": ("messageId", "delta"),
    "TEXT_MESSAGE_END": ("messageId",),
    "TOOL_CALL_START": ("toolCallId", "toolCallName"),
    "TOOL_CALL_ARGS": ("toolCallId", "delta"),
    "TOOL_CALL_END": ("toolCallId",),
    "TOOL_CALL_RESULT": ("messageId", "toolCallId"),
    "REASONING_START": ("messageId",),
    "REASONING_MESSAGE_START": ("messageId",),
    "REASONING_MESSAGE_CONTENT": ("messageId", "delta"),
    "REASONING_MESSAGE_END": ("messageId",),
    "REASONING_END": ("messageId",),
    "REASONING_ENCRYPTED_VALUE": ("entityId", "encryptedValue"),
    "STATE_SNAPSHOT": (),
    "STATE_DELTA": (),
    "MESSAGES_SNAPSHOT": (),
    "CUSTOM": ("name",),
    "STEP_STARTED": ("stepName",),
    "STEP_FINISHED": ("stepName",),
    "RAW": (),
    "TEXT_MESSAGE_CHUNK": (),
    "TOOL_CALL_CHUNK": (),
    "REASONING_MESSAGE_CHUNK": (),
    "ACTIVITY_SNAPSHOT": (),
    "ACTIVITY_DELTA": (),
    "SUBAGENT_STARTED": (),
    "SUBAGENT_FINISHED": (),
    "SUBAGENT_ERROR": (),
}
_OPTIONAL_STRINGS = ("protocolVersion", "parentRunId", "role", "name", "parentMessageId", "code",
                     "subagentRunId")


def _patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 ``add`` / ``replace`` / ``remove`` (what the writers and the tests use)."""
    assert isinstance(ops, list), f"STATE_DELTA.delta must be a list: {ops!r}"
    doc = copy.deepcopy(doc)
    for op in ops:
        path = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        if not path:
            doc = op.get("value")
            continue
        node = doc
        for t in path[:-1]:
            node = node[int(t)] if isinstance(node, list) else node[t]
        last = path[-1]
        if op["op"] == "remove":
            del node[int(last) if isinstance(node, list) else last]
        elif isinstance(node, list):
            if op["op"] == "replace":
                node[int(last)] = op["value"]
            else:
                node.insert(len(node) if last == "-" else int(last), op["value"])
        else:
            assert op["op"] in ("add", "replace"), op
            node[last] = op["value"]
    return doc


def _check(event: Any, i: int) -> str:
    assert isinstance(event, dict), f"event {i} is not an object: {event!r}"
    kind = event.get("type")
    assert kind in _REQUIRED, f"event {i}: a type the protocol does not define: {kind!r}"
    for key in _REQUIRED[kind]:
        assert isinstance(event.get(key), str), f"event {i} ({kind}): {key} must be a string"
    for key in _OPTIONAL_STRINGS:
        assert key not in event or isinstance(event[key], str), \
            f"event {i} ({kind}): {key} must be a string when present (never null)"
    assert event.get("rawEvent", 0) is not None, f"event {i}: rawEvent is null"
    assert "metadata" not in event or isinstance(event["metadata"], dict), event
    assert "timestamp" not in event or isinstance(event["timestamp"], int), event
    if kind == "TEXT_MESSAGE_START":
        assert event.get("role", "assistant") in ("developer", "system", "assistant", "user"), \
            event
    if kind == "REASONING_MESSAGE_START":
        assert event.get("role") == "reasoning", f"event {i}: role must be 'reasoning': {event}"
    if kind == "REASONING_ENCRYPTED_VALUE":
        assert event.get("subtype") in ("tool-call", "message"), event
    if kind == "STATE_SNAPSHOT":
        assert "snapshot" in event, f"event {i}: STATE_SNAPSHOT without snapshot"
    if kind == "CUSTOM":
        assert "value" in event, f"event {i}: CUSTOM without value"
    return str(kind)


_CHUNKS = {
    # chunk type: (kind, id key, start, content, end, content key)
    "TEXT_MESSAGE_CHUNK": ("messageId", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                           "TEXT_MESSAGE_END"),
    "TOOL_CALL_CHUNK": ("toolCallId", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"),
    "REASONING_MESSAGE_CHUNK": ("messageId", "REASONING_MESSAGE_START",
                                "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END"),
}


def _expand(events: list[Any]) -> list[Any]:
    """The ``*_CHUNK`` shorthands as the events they stand for, as ``@ag-ui/client``'s
    ``transformChunks`` expands them: a chunk with a new id (or after another kind's chunks)
    closes the stream open and opens its own, a chunk without an id continues the open one, and
    any other event closes it first."""
    out: list[Any] = []
    open_: tuple[str, str] | None = None  # (chunk type, id)

    def close() -> None:
        nonlocal open_
        if open_ is not None:
            kind, ident = open_
            key, _, _, end = _CHUNKS[kind]
            out.append({"type": end, key: ident})
            open_ = None

    for i, e in enumerate(events):
        kind = e.get("type") if isinstance(e, dict) else None
        if kind not in _CHUNKS:
            close()
            out.append(e)
            continue
        key, start, content, _ = _CHUNKS[kind]
        ident = e.get(key)
        if open_ is None or open_[0] != kind or (ident is not None and ident != open_[1]):
            close()
            assert isinstance(ident, str), f"event {i}: the first {kind} needs its {key}"
            opened: dict[str, Any] = {"type": start, key: ident}
            if kind == "TEXT_MESSAGE_CHUNK":
                opened["role"] = e.get("role", "assistant")
                if "name" in e:
                    opened["name"] = e["name"]
            elif kind == "TOOL_CALL_CHUNK":
                assert isinstance(e.get("toolCallName"), str), \
                    f"event {i}: the first TOOL_CALL_CHUNK needs its toolCallName"
                opened["toolCallName"] = e["toolCallName"]
                if "parentMessageId" in e:
                    opened["parentMessageId"] = e["parentMessageId"]
            else:
                opened["role"] = "reasoning"
            out.append(opened)
            open_ = (kind, ident)
        if "delta" in e:
            out.append({"type": content, key: open_[1], "delta": e["delta"]})
    close()
    return out


def _read_events(events: list[Any], *, lenient: bool) -> Observed:
    events = _expand(events)
    obs = Observed()
    ended: str | None = None
    open_text: dict[str, str | None] = {}  # message id -> name
    open_reasoning: set[str] = set()
    open_spans: set[str] = set()
    open_calls: set[str] = set()
    roles: dict[str, str] = {}
    texts: dict[str, list[Any]] = {}  # message id -> [name, text]
    calls: dict[str, list[str]] = {}  # id -> [name, args]
    answered: set[str] = set()
    state: Any = None
    usage: tuple[int | None, int | None] | None = None
    for i, event in enumerate(events):
        kind = _check(event, i)
        assert ended is None, f"event {i} ({kind}) after {ended}"
        if i == 0:
            assert kind in ("RUN_STARTED", "RUN_ERROR"), f"the first event is {kind}"
        if kind == "RUN_STARTED":
            assert i == 0, "a second RUN_STARTED within the run"
        elif kind == "TEXT_MESSAGE_START":
            mid = event["messageId"]
            assert mid not in open_text, f"text message {mid} opened twice"
            open_text[mid] = event.get("name")
            roles[mid] = event.get("role", "assistant")
            if roles[mid] == "assistant":
                entry = texts.setdefault(mid, [event.get("name"), ""])
                assert entry[0] == event.get("name"), f"message {mid} changed its name"
        elif kind == "TEXT_MESSAGE_CONTENT":
            mid = event["messageId"]
            assert mid in open_text, f"content for text message {mid}, which is not open"
            if roles[mid] == "assistant":
                texts[mid][1] += event["delta"]
        elif kind == "TEXT_MESSAGE_END":
            assert event["messageId"] in open_text, f"end of {event['messageId']}, not open"
            del open_text[event["messageId"]]
        elif kind == "REASONING_START":
            assert event["messageId"] not in open_spans, "a reasoning span opened twice"
            open_spans.add(event["messageId"])
        elif kind == "REASONING_END":
            assert event["messageId"] in open_spans, "a reasoning span closed, not open"
            open_spans.discard(event["messageId"])
        elif kind == "REASONING_MESSAGE_START":
            assert event["messageId"] not in open_reasoning, "a reasoning message opened twice"
            open_reasoning.add(event["messageId"])
        elif kind == "REASONING_MESSAGE_CONTENT":
            assert event["messageId"] in open_reasoning, "reasoning content, message not open"
            obs.reasoning += event["delta"]
        elif kind == "REASONING_MESSAGE_END":
            assert event["messageId"] in open_reasoning, "reasoning message closed, not open"
            open_reasoning.discard(event["messageId"])
        elif kind == "TOOL_CALL_START":
            cid = event["toolCallId"]
            assert cid not in open_calls and cid not in calls, f"tool call {cid} started twice"
            open_calls.add(cid)
            calls[cid] = [event["toolCallName"], ""]
        elif kind == "TOOL_CALL_ARGS":
            assert event["toolCallId"] in open_calls, "arguments for a call that is not open"
            calls[event["toolCallId"]][1] += event["delta"]
        elif kind == "TOOL_CALL_END":
            cid = event["toolCallId"]
            assert cid in open_calls, f"end of tool call {cid}, which is not open"
            open_calls.discard(cid)
            args = calls[cid][1]
            try:
                parsed = json.loads(args) if args.strip() else {}
            except ValueError as e:
                raise AssertionError(f"tool call {cid}: arguments not JSON: {args!r}") from e
            assert isinstance(parsed, dict), f"tool call {cid}: arguments not an object"
        elif kind == "TOOL_CALL_RESULT":
            answered.add(event["toolCallId"])
        elif kind == "STATE_SNAPSHOT":
            state = copy.deepcopy(event["snapshot"])
        elif kind == "STATE_DELTA":
            assert state is not None or lenient, "a STATE_DELTA before any STATE_SNAPSHOT"
            state = _patch(state, event.get("delta"))
        elif kind == "CUSTOM":
            value = event["value"]
            if event["name"] == "sources":
                assert isinstance(value, list), f"sources must be a list: {value!r}"
                for s in value:
                    assert isinstance(s, dict) and isinstance(s.get("id"), str), s
                    obs.citations.append(s.get("title") or s["id"])
            elif event["name"] == "followups":
                assert isinstance(value, list) and all(isinstance(q, str) for q in value), value
                obs.followups = list(value)
            elif event["name"] == "thoughts":
                obs.thoughts = bool(value)
        elif kind == "RUN_FINISHED":
            assert not open_text, f"RUN_FINISHED with text messages open: {list(open_text)}"
            assert not open_calls, f"RUN_FINISHED with tool calls open: {open_calls}"
            assert not open_reasoning and not open_spans, "RUN_FINISHED with reasoning open"
            entries = event.get("usage")
            if entries is not None:
                assert isinstance(entries, list) and entries, f"usage: {entries!r}"
                total_in = total_out = 0
                for e in entries:
                    assert isinstance(e, dict), e
                    total_in += e.get("inputTokens") or 0
                    total_out += e.get("outputTokens") or 0
                    if obs.model is None and isinstance(e.get("model"), str):
                        obs.model = e["model"]
                usage = (total_in, total_out)
            outcome = event.get("outcome")
            if outcome is not None:
                assert isinstance(outcome, dict) and outcome.get("type") in (
                    "success", "interrupt", "cancelled"), outcome
                pending = outcome.get("pendingToolCallIds")
                if pending:
                    want = [c for c in calls if c not in answered]
                    assert pending == want, f"pendingToolCallIds {pending} != {want}"
            ended = kind
        elif kind == "RUN_ERROR":
            assert isinstance(event["message"], str)
            obs.error = event["message"]
            ended = kind
    assert events, "no events"
    assert ended is not None, "the run ended without RUN_FINISHED or RUN_ERROR"
    obs.agents = [(name, text) for name, text in texts.values()]
    if any(name is not None for name, _ in obs.agents):
        obs.text = agents_text(obs.agents)
    else:
        obs.text = "".join(text for _, text in obs.agents)
    # a call still open when the run failed never had its arguments: the client has none
    obs.tool_calls = [ObservedCall(cid, name, json.loads(args) if args.strip() else {})
                      for cid, (name, args) in calls.items()
                      if cid not in answered and cid not in open_calls]
    obs.session_state = state
    if ended == "RUN_FINISHED":
        obs.usage = usage
    return obs


def read_stream(data: bytes, *, lenient: bool = False) -> Observed:
    """``lenient``: an agent's own body (a ``STATE_DELTA`` may patch the state the request
    sent, which this reader does not know). A stream names its model only at its end (in
    ``RUN_FINISHED.usage``), too late for a client that shows it from the start: not observed."""
    events = [loads(raw) for name, raw in sse_events(data)]
    obs = _read_events(events, lenient=lenient)
    obs.model = None
    return obs


def read_whole(body: Any) -> Observed:
    assert isinstance(body, list), f"a whole answer is the run's events as a list: {body!r}"
    return _read_events(body, lenient=False)


def read_error(body: Any) -> str:
    assert isinstance(body, dict) and body.get("type") == "RUN_ERROR", \
        f"an error body is a RUN_ERROR event: {body!r}"
    assert isinstance(body.get("message"), str), body
    assert "code" not in body or isinstance(body["code"], str), body
    return str(body["message"])


# --- requests ------------------------------------------------------------------------------------


def _content(content: Any, where: str) -> tuple[str, list[str]]:
    if isinstance(content, str):
        return content, []
    assert isinstance(content, list), f"{where}: content must be a string or parts: {content!r}"
    text, images = "", []
    for p in content:
        assert isinstance(p, dict), p
        if p.get("type") == "text":
            assert isinstance(p.get("text"), str), p
            text += p["text"]
        elif p.get("type") == "image":
            src = p.get("source")
            assert isinstance(src, dict) and isinstance(src.get("value"), str), p
            if src.get("type") == "data":
                assert isinstance(src.get("mimeType"), str), "a data source needs its mimeType"
                images.append(f"data:{src['mimeType']};base64,{src['value']}")
            else:
                assert src.get("type") == "url", src
                images.append(src["value"])
    return text, images


def read_request(body: Any) -> Observed:
    assert isinstance(body, dict), body
    for key in ("threadId", "runId"):
        assert isinstance(body.get(key), str), f"{key} is required"
    messages = body.get("messages")
    assert isinstance(messages, list), "messages must be a list"
    props = body.get("forwardedProps") or {}
    assert isinstance(props, dict), props
    state = body.get("state")
    obs = Observed(model=props.get("model"), session_state=None if state == {} else state)
    ids: set[str] = set()
    reasoning = ""
    for i, m in enumerate(messages):
        assert isinstance(m, dict) and isinstance(m.get("id"), str), \
            f"messages[{i}] needs an id: {m!r}"
        assert m["id"] not in ids, f"messages[{i}]: id {m['id']} repeats"
        ids.add(m["id"])
        role = m.get("role")
        assert role in ("developer", "system", "assistant", "user", "tool", "reasoning"), m
        if role == "reasoning":
            assert isinstance(m.get("content"), str), m
            reasoning += m["content"]
            continue
        if role == "tool":
            assert isinstance(m.get("toolCallId"), str), m
            text, _ = _content(m.get("content"), f"messages[{i}]")
            obs.messages.append(ObservedMessage("tool", text, tool_result_for=m["toolCallId"],
                                                tool_result_error="error" in m))
            continue
        if role == "assistant":
            content = m.get("content", "")
            assert isinstance(content, str), f"an assistant's content is text: {content!r}"
            calls = []
            for c in m.get("toolCalls") or []:
                assert c.get("type") == "function", c
                calls.append(ObservedCall(c["id"], c["function"]["name"],
                                          json.loads(c["function"]["arguments"] or "{}")))
            obs.messages.append(ObservedMessage("assistant", content, tool_calls=calls,
                                                reasoning=reasoning))
            reasoning = ""
            continue
        text, images = _content(m.get("content"), f"messages[{i}]")
        assert role == "user" or not images, "only a user message carries parts"
        obs.messages.append(ObservedMessage(role, text, images=images))
    if reasoning:
        obs.messages.append(ObservedMessage("assistant", "", reasoning=reasoning))
    context = body.get("context") or []
    assert isinstance(context, list), context
    if context:
        for c in context:
            assert isinstance(c, dict) and isinstance(c.get("description"), str) \
                and isinstance(c.get("value"), str), c
        lead = 0
        while lead < len(obs.messages) and obs.messages[lead].role in ("system", "developer"):
            lead += 1
        obs.messages.insert(lead, ObservedMessage("system", "\n\n".join(
            f"{c['description']}:\n{c['value']}" for c in context)))
    for t in body.get("tools") or []:
        assert isinstance(t, dict) and isinstance(t.get("name"), str), t
        assert isinstance(t.get("description"), str), f"a tool's description is required: {t}"
        obs.tools.append(t["name"])
    choice = props.get("toolChoice")
    if isinstance(choice, dict):
        obs.tool_choice = f"tool:{choice['name']}"
    elif choice is not None:
        assert choice in ("auto", "none", "required"), choice
        obs.tool_choice = choice
    for key, wire in (("temperature", "temperature"), ("max_tokens", "maxTokens")):
        if wire in props:
            obs.extra[key] = props[wire]
    effort = props.get("reasoning", {}).get("effort") if isinstance(props.get("reasoning"),
                                                                   dict) else None
    if effort is not None:
        obs.extra["reasoning"] = effort
    return obs


def write_request(obs: Observed) -> Any:
    messages: list[dict[str, Any]] = []
    for i, m in enumerate(obs.messages):
        if m.reasoning:
            messages.append({"id": f"r{i}", "role": "reasoning", "content": m.reasoning})
        wire: dict[str, Any] = {"id": f"m{i}", "role": "tool" if m.tool_result_for else m.role}
        if m.tool_result_for:
            wire["toolCallId"] = m.tool_result_for
            wire["content"] = m.text
            if m.tool_result_error:
                wire["error"] = "the tool failed"
        elif m.role == "assistant":
            if m.text or not m.tool_calls:
                wire["content"] = m.text
            if m.tool_calls:
                wire["toolCalls"] = [{"id": c.id, "type": "function", "function": {
                    "name": c.name, "arguments": dumps(c.arguments)}} for c in m.tool_calls]
        elif m.images:
            wire["content"] = [{"type": "text", "text": m.text}]
            for url in m.images:
                if url.startswith("data:"):
                    mime, _, data = url[5:].partition(";base64,")
                    source = {"type": "data", "value": data, "mimeType": mime}
                else:
                    source = {"type": "url", "value": url}
                wire["content"].append({"type": "image", "source": source})
        else:
            wire["content"] = m.text
        messages.append(wire)
    props: dict[str, Any] = {}
    if obs.model is not None:
        props["model"] = obs.model
    if obs.tool_choice is not None:
        props["toolChoice"] = {"name": obs.tool_choice[5:]} \
            if obs.tool_choice.startswith("tool:") else obs.tool_choice
    if "temperature" in obs.extra:
        props["temperature"] = obs.extra["temperature"]
    if "max_tokens" in obs.extra:
        props["maxTokens"] = obs.extra["max_tokens"]
    if obs.extra.get("reasoning"):
        props["reasoning"] = {"effort": obs.extra["reasoning"]}
    return {"threadId": "thread-strict", "runId": "run-strict", "protocolVersion": "1.0",
            "state": obs.session_state if obs.session_state is not None else {},
            "messages": messages,
            "tools": [{"name": n, "description": f"the {n} tool", "parameters": {
                "type": "object", "properties": {"q": {"type": "string"}}}} for n in obs.tools],
            "context": [], "forwardedProps": props}


# --- answers -------------------------------------------------------------------------------------


def _events(obs: Observed, rng: random.Random) -> list[dict[str, Any]]:
    run = {"threadId": "thread-strict", "runId": "run-strict"}
    out: list[dict[str, Any]] = [{"type": "RUN_STARTED", **run}]
    if obs.session_state is not None:
        out.append({"type": "STATE_SNAPSHOT", "snapshot": obs.session_state})
    if obs.citations:
        sources = []
        for name in obs.citations:
            src = {"id": name, "title": name}
            if name.startswith("https://"):
                src["url"] = name
            if snippet_of(obs, name) is not None:
                src["snippet"] = snippet_of(obs, name)
            sources.append(src)
        out.append({"type": "CUSTOM", "name": "sources", "value": sources})
    if obs.thoughts:
        out.append({"type": "CUSTOM", "name": "thoughts", "value": THOUGHTS})
    if obs.reasoning:
        out += [{"type": "REASONING_START", "messageId": "r-span"},
                {"type": "REASONING_MESSAGE_START", "messageId": "r-1", "role": "reasoning"}]
        out += [{"type": "REASONING_MESSAGE_CONTENT", "messageId": "r-1", "delta": p}
                for p in pieces(obs.reasoning, rng)]
        out += [{"type": "REASONING_MESSAGE_END", "messageId": "r-1"},
                {"type": "REASONING_END", "messageId": "r-span"}]
    agents = obs.agents or ([(None, obs.text)] if obs.text else [])
    last = "msg-0"
    for k, (name, text) in enumerate(agents):
        last = f"msg-{k}"
        start: dict[str, Any] = {"type": "TEXT_MESSAGE_START", "messageId": last,
                                 "role": "assistant"}
        if name is not None:
            start["name"] = name
        out.append(start)
        out += [{"type": "TEXT_MESSAGE_CONTENT", "messageId": last, "delta": p}
                for p in pieces(text, rng)]
        out.append({"type": "TEXT_MESSAGE_END", "messageId": last})
    if obs.error is not None:
        return [*out, {"type": "RUN_ERROR", "message": obs.error, "code": "UPSTREAM"}]
    for c in obs.tool_calls:
        out.append({"type": "TOOL_CALL_START", "toolCallId": c.id, "toolCallName": c.name,
                    "parentMessageId": last})
        out += [{"type": "TOOL_CALL_ARGS", "toolCallId": c.id, "delta": p}
                for p in pieces(dumps(c.arguments), rng)]
        out.append({"type": "TOOL_CALL_END", "toolCallId": c.id})
    if obs.followups:
        out.append({"type": "CUSTOM", "name": "followups", "value": list(obs.followups)})
    finished: dict[str, Any] = {"type": "RUN_FINISHED", **run}
    if obs.tool_calls:
        finished["outcome"] = {"type": "success",
                               "pendingToolCallIds": [c.id for c in obs.tool_calls]}
    if obs.usage is not None:
        entry: dict[str, Any] = {"inputTokens": obs.usage[0], "outputTokens": obs.usage[1],
                                 "totalTokens": (obs.usage[0] or 0) + (obs.usage[1] or 0)}
        if obs.model is not None:
            entry["model"] = obs.model
        finished["usage"] = [entry]
    return [*out, finished]


def write_stream(obs: Observed, rng: random.Random) -> bytes:
    return frame_sse(_events(obs, rng))


def write_whole(obs: Observed) -> Any:
    return _events(obs, random.Random(0))
