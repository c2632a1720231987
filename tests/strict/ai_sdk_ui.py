"""Strict reader (and writer) of the Vercel AI SDK's UI message stream protocol v1, from the ``ai``
package's types (``UIMessage``, ``UIMessageChunk``), its docs' "Stream Protocols" page and what
its ``processUIMessageStream`` (the reader under ``useChat`` and ``readUIMessageStream``) refuses,
not from the gateway's code.

A request is ``{id, messages: UIMessage[], trigger, messageId?}`` (the transport's ``body`` keys
beside: ``tools``, ``toolChoice``, ``model``, ``temperature``, ``maxOutputTokens``,
``sessionState``, ``stream``); the session state rides in a ``data-session-state`` part of an
assistant message, or the body's ``sessionState``. A whole answer is the final ``UIMessage``.

The stream rules checked: one ``data:`` line per event, each a chunk object with a ``type``;
``start`` first; a ``text-delta`` / ``reasoning-delta`` only inside a block its ``-start`` opened
with that id (the SDK throws otherwise) and every block ended before ``finish``; a tool's
``tool-input-delta`` only after its ``tool-input-start``, the deltas together the JSON of the
``input`` its ``tool-input-available`` gives; at most one ``finish``, then ``[DONE]`` last; an
``error`` chunk is followed by ``[DONE]`` only. ``lenient`` reads accept what the SDK's own
servers send: after an ``error``, a ``finish-step`` and ``finish``; a finished stream without
``[DONE]``; a stream without ``start``.
"""

from __future__ import annotations

import json
import random
from typing import Any

from strict._wire import dumps, frame_sse, loads, pieces, sse_events
from strict.observed import Observed, ObservedCall, ObservedMessage

__all__ = ["FINISH", "SAMPLING", "read_error", "read_request", "read_stream", "read_whole",
           "write_request", "write_stream", "write_whole"]

FINISH = {"stop": "stop", "length": "length", "tool-calls": "tool_calls",
          "content-filter": "content_filter"}
SAMPLING = ("model", "temperature", "max_tokens")
_REASONS = {"stop", "length", "content-filter", "tool-calls", "error", "interrupted", "other"}
_ROLES = {"system", "user", "assistant"}
_STATES = {"input-streaming", "input-available", "approval-requested", "approval-responded",
           "output-available", "output-error", "output-denied"}
_SESSION = "data-session-state"


def _text_of_output(value: Any) -> str:
    return value if isinstance(value, str) else dumps(value)


# --- requests ------------------------------------------------------------------------------------


def _tool_name(part: dict[str, Any]) -> str | None:
    kind = part["type"]
    if kind == "dynamic-tool":
        assert isinstance(part.get("toolName"), str), part
        return str(part["toolName"])
    return kind[5:] if kind.startswith("tool-") else None


def _assistant(parts: list[Any], where: str, obs: Observed) -> list[ObservedMessage]:
    """An assistant UI message as the model reads it: a message per step (its reasoning, text
    and calls), each followed by its calls' results."""
    out: list[ObservedMessage] = []
    step = ObservedMessage("assistant", "")
    results: list[ObservedMessage] = []

    def flush() -> None:
        nonlocal step, results
        if step.text or step.reasoning or step.tool_calls:
            out.append(step)
            out.extend(results)
        step, results = ObservedMessage("assistant", ""), []

    for j, p in enumerate(parts):
        at = f"{where}.parts[{j}]"
        assert isinstance(p, dict) and isinstance(p.get("type"), str), at
        kind = p["type"]
        if kind in ("text", "reasoning"):
            assert isinstance(p.get("text"), str), f"{at}.text"
            if step.tool_calls or (kind == "reasoning" and step.text):
                flush()
            if kind == "text":
                step.text += p["text"]
            else:
                step.reasoning += p["text"]
        elif kind == "step-start":
            flush()
        elif kind == _SESSION:
            obs.session_state = p.get("data")
        elif (name := _tool_name(p)) is not None:
            assert isinstance(p.get("toolCallId"), str) and p["toolCallId"], at
            state = p.get("state")
            assert state in _STATES, f"{at}.state {state!r}"
            if state == "input-streaming":
                continue
            step.tool_calls.append(ObservedCall(p["toolCallId"], name, p.get("input")))
            if state == "output-available":
                assert "output" in p, f"{at}: no output"
                results.append(ObservedMessage("tool", _text_of_output(p["output"]),
                                               tool_result_for=p["toolCallId"]))
            elif state == "output-error":
                assert isinstance(p.get("errorText"), str), f"{at}.errorText"
                results.append(ObservedMessage("tool", p["errorText"],
                                               tool_result_for=p["toolCallId"],
                                               tool_result_error=True))
    flush()
    return out


def read_request(body: Any) -> Observed:
    assert isinstance(body, dict), body
    assert isinstance(body.get("id"), str), "id (the chat's) is required"
    assert body.get("trigger", "submit-message") in ("submit-message", "regenerate-message"), \
        body.get("trigger")
    messages = body.get("messages")
    assert isinstance(messages, list) and messages, "messages must be a non-empty list"
    obs = Observed()
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        assert isinstance(m, dict) and m.get("role") in _ROLES, f"{where}: {m!r}"
        assert isinstance(m.get("id"), str), f"{where}.id"
        parts = m.get("parts")
        assert isinstance(parts, list), f"{where}.parts"
        if m["role"] == "assistant":
            obs.messages += _assistant(parts, where, obs)
            continue
        msg = ObservedMessage(m["role"], "")
        for j, p in enumerate(parts):
            assert isinstance(p, dict) and isinstance(p.get("type"), str), f"{where}.parts[{j}]"
            if p["type"] == "text":
                assert isinstance(p.get("text"), str), f"{where}.parts[{j}].text"
                msg.text += p["text"]
            elif p["type"] == "file":
                assert isinstance(p.get("url"), str) and isinstance(p.get("mediaType"), str), p
                assert p["mediaType"] == "image" or p["mediaType"].startswith("image/"), p
                msg.images.append(p["url"])
        obs.messages.append(msg)
    if "sessionState" in body:
        obs.session_state = body["sessionState"]
    tools = body.get("tools")
    if tools is not None:
        assert isinstance(tools, dict), "tools: an object of tools by name"
        for name, t in tools.items():
            assert isinstance(t, dict) and isinstance(t.get("inputSchema", {}), dict), t
            obs.tools.append(name)
    choice = body.get("toolChoice")
    if isinstance(choice, dict):
        assert choice.get("type") == "tool" and isinstance(choice.get("toolName"), str), choice
        obs.tool_choice = f"tool:{choice['toolName']}"
    else:
        assert choice in (None, "auto", "none", "required"), choice
        obs.tool_choice = choice
    if body.get("model") is not None:
        assert isinstance(body["model"], str), "model"
        obs.model = body["model"]
    # the SDK sends no flag: every request is answered with a stream unless it says otherwise
    assert isinstance(body.get("stream", True), bool), "stream"
    obs.stream = body.get("stream", True)
    if body.get("temperature") is not None:
        assert isinstance(body["temperature"], int | float), "temperature"
        obs.extra["temperature"] = body["temperature"]
    if body.get("maxOutputTokens") is not None:
        assert isinstance(body["maxOutputTokens"], int), "maxOutputTokens"
        obs.extra["max_tokens"] = body["maxOutputTokens"]
    return obs


def _ui_messages(obs: Observed) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, m in enumerate(obs.messages):
        last = out[-1] if out else None
        if m.tool_result_for is not None:
            assert last is not None and last["role"] == "assistant", "a result without its call"
            part = next(p for p in reversed(last["parts"]) if p.get("toolCallId")
                        == m.tool_result_for and p["state"] == "input-available")
            if m.tool_result_error:
                part.update(state="output-error", errorText=m.text)
            else:
                part.update(state="output-available", output=m.text)
            continue
        if m.role == "assistant":
            parts: list[dict[str, Any]] = [{"type": "step-start"}]
            if m.reasoning:
                parts.append({"type": "reasoning", "text": m.reasoning, "state": "done"})
            if m.text:
                parts.append({"type": "text", "text": m.text, "state": "done"})
            parts += [{"type": f"tool-{c.name}", "toolCallId": c.id, "state": "input-available",
                       "input": c.arguments} for c in m.tool_calls]
            if last is not None and last["role"] == "assistant":
                last["parts"] += parts
            else:
                out.append({"id": f"a{i}", "role": "assistant", "parts": parts})
            continue
        parts = [{"type": "text", "text": m.text}]
        parts += [{"type": "file", "mediaType": "image/png", "url": u} for u in m.images]
        out.append({"id": f"u{i}", "role": "system" if m.role == "system" else "user",
                    "parts": parts})
    return out


def write_request(obs: Observed) -> Any:
    """As ``useChat`` sends it, with the transport's ``body`` naming tools and settings; the
    session state in the ``data-session-state`` part of the last assistant message (where the
    UI kept it from the previous answer), else in the body."""
    messages = _ui_messages(obs)
    body: dict[str, Any] = {"id": "chat-written", "messages": messages,
                            "trigger": "submit-message"}
    if obs.session_state is not None:
        assistant = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
        if assistant is not None:
            assistant["parts"].append({"type": _SESSION, "id": "session-state",
                                       "data": obs.session_state})
        else:
            body["sessionState"] = obs.session_state
    if obs.tools:
        body["tools"] = {n: {"description": f"the {n} tool", "inputSchema": {
            "type": "object", "properties": {"q": {"type": "string"}}}} for n in obs.tools}
    if obs.tool_choice is not None:
        body["toolChoice"] = {"type": "tool", "toolName": obs.tool_choice[5:]} \
            if obs.tool_choice.startswith("tool:") else obs.tool_choice
    if obs.model:
        body["model"] = obs.model
    if "temperature" in obs.extra:
        body["temperature"] = obs.extra["temperature"]
    if "max_tokens" in obs.extra:
        body["maxOutputTokens"] = obs.extra["max_tokens"]
    if obs.stream is False:
        body["stream"] = False
    return body


# --- whole answers -------------------------------------------------------------------------------


def _usage(meta: Any) -> tuple[int | None, int | None] | None:
    u = meta.get("usage") if isinstance(meta, dict) else None
    if u is None:
        return None
    assert isinstance(u, dict), f"usage must be an object: {u!r}"
    i, o, t = u.get("inputTokens"), u.get("outputTokens"), u.get("totalTokens")
    assert all(x is None or isinstance(x, int) for x in (i, o, t)), u
    if t is not None and i is not None and o is not None:
        assert t == i + o, f"totalTokens is not the sum: {u}"
    return i, o


def _source_name(p: dict[str, Any]) -> str:
    assert isinstance(p.get("sourceId"), str), p
    if p["type"] == "source-url":
        assert isinstance(p.get("url"), str), p
    else:
        assert isinstance(p.get("mediaType"), str) and isinstance(p.get("title"), str), p
    return str(p.get("title") or p.get("url") or p["sourceId"])


def _data(p: dict[str, Any], obs: Observed) -> None:
    assert "data" in p, f"a data part without data: {p}"
    if p["type"] == "data-followups":
        assert isinstance(p["data"], list) and all(isinstance(q, str) for q in p["data"]), p
        obs.followups = list(p["data"])
    elif p["type"] == "data-thoughts":
        obs.thoughts = bool(p["data"])
    elif p["type"] == _SESSION:
        obs.session_state = p["data"]


def read_whole(body: Any) -> Observed:
    assert isinstance(body, dict) and body.get("role") == "assistant", body
    assert isinstance(body.get("id"), str), "id"
    parts = body.get("parts")
    assert isinstance(parts, list), "parts"
    obs = Observed()
    results: set[str] = set()
    for i, p in enumerate(parts):
        assert isinstance(p, dict) and isinstance(p.get("type"), str), f"parts[{i}]"
        kind = p["type"]
        if kind == "text":
            assert isinstance(p.get("text"), str), f"parts[{i}].text"
            obs.text += p["text"]
        elif kind == "reasoning":
            assert isinstance(p.get("text"), str), f"parts[{i}].text"
            obs.reasoning += p["text"]
        elif kind in ("source-url", "source-document"):
            obs.citations.append(_source_name(p))
        elif kind.startswith("data-"):
            _data(p, obs)
        elif (name := _tool_name(p)) is not None:
            assert p.get("state") in _STATES, p
            if p["state"] in ("output-available", "output-error", "output-denied"):
                results.add(p["toolCallId"])  # the backend ran it: not the client's to run
            elif p["state"] == "input-available":
                obs.tool_calls.append(ObservedCall(p["toolCallId"], name, p.get("input")))
    obs.tool_calls = [c for c in obs.tool_calls if c.id not in results]
    meta = body.get("metadata")
    assert meta is None or isinstance(meta, dict), "metadata"
    obs.usage = _usage(meta)
    if isinstance(meta, dict):
        reason = meta.get("finishReason")
        assert reason is None or reason in _REASONS, reason
        obs.finish = reason
        obs.model = meta.get("model")
    return obs


def _sources(obs: Observed) -> list[dict[str, Any]]:
    from strict._rag import snippet_of

    out = []
    for n in obs.citations:
        if n.startswith("http"):
            part: dict[str, Any] = {"type": "source-url", "sourceId": n, "url": n, "title": n}
        else:
            part = {"type": "source-document", "sourceId": n, "mediaType": "text/plain",
                    "title": n}
        snippet = snippet_of(obs, n)
        if snippet is not None:
            part["providerMetadata"] = {"chat-gateway": {"snippet": snippet}}
        out.append(part)
    return out


def _data_parts(obs: Observed) -> list[dict[str, Any]]:
    from strict._rag import THOUGHTS

    out: list[dict[str, Any]] = []
    if obs.followups:
        out.append({"type": "data-followups", "id": "followups", "data": obs.followups})
    if obs.thoughts:
        out.append({"type": "data-thoughts", "id": "thoughts", "data": THOUGHTS})
    if obs.session_state is not None:
        out.append({"type": _SESSION, "id": "session-state", "data": obs.session_state})
    return out


def _metadata(obs: Observed) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if obs.model:
        meta["model"] = obs.model
    if obs.usage is not None:
        meta["usage"] = {"inputTokens": obs.usage[0], "outputTokens": obs.usage[1],
                         "totalTokens": (obs.usage[0] or 0) + (obs.usage[1] or 0)}
    meta["finishReason"] = {v: k for k, v in FINISH.items()}.get(obs.finish or "stop", "stop")
    return meta


def write_whole(obs: Observed) -> Any:
    parts: list[dict[str, Any]] = [{"type": "step-start"}]
    if obs.reasoning:
        parts.append({"type": "reasoning", "text": obs.reasoning, "state": "done"})
    if obs.text:
        parts.append({"type": "text", "text": obs.text, "state": "done"})
    parts += [{"type": f"tool-{c.name}", "toolCallId": c.id, "state": "input-available",
               "input": c.arguments} for c in obs.tool_calls]
    parts += _sources(obs) + _data_parts(obs)
    return {"id": "msg-written", "role": "assistant", "parts": parts, "metadata": _metadata(obs)}


# --- streams -------------------------------------------------------------------------------------


class _Stream:
    """What ``processUIMessageStream`` keeps while it reads, checked harder."""

    def __init__(self, lenient: bool) -> None:
        self.lenient = lenient
        self.obs = Observed()
        self.open: dict[str, str] = {}  # block id -> text | reasoning
        self.inputs: dict[str, list[Any]] = {}  # call id -> [name, deltas, input or missing]
        self.ran: set[str] = set()
        self.started = self.finished = self.failed = self.done = False

    def chunk(self, i: int, c: dict[str, Any]) -> None:
        kind = c["type"]
        obs = self.obs
        if self.failed:
            assert self.lenient and kind in ("finish-step", "finish"), \
                f"chunk {i} ({kind}) after the error"
            return
        # a same-dialect route shows the upstream's own finish before a later break
        assert not self.finished or (self.lenient and kind == "error"), \
            f"chunk {i} ({kind}) after finish"
        if kind == "start":
            assert not self.started, "two start chunks"
            meta = c.get("messageMetadata")
            if isinstance(meta, dict) and isinstance(meta.get("model"), str):
                obs.model = meta["model"]
        else:
            assert self.started or self.lenient, f"chunk {i} ({kind}) before start"
        self.started = True
        if kind in ("text-start", "reasoning-start"):
            assert isinstance(c.get("id"), str), c
            assert c["id"] not in self.open, f"block {c['id']} started twice"
            self.open[c["id"]] = kind.split("-")[0]
        elif kind in ("text-delta", "reasoning-delta"):
            want = kind.split("-")[0]
            assert self.open.get(c.get("id")) == want, \
                f"chunk {i}: {kind} for no open {want} block {c.get('id')!r}"
            assert isinstance(c.get("delta"), str), c
            if want == "text":
                obs.text += c["delta"]
            else:
                obs.reasoning += c["delta"]
        elif kind in ("text-end", "reasoning-end"):
            assert self.open.pop(c.get("id"), None) == kind.split("-")[0], \
                f"chunk {i}: {kind} for no open block {c.get('id')!r}"
        elif kind == "tool-input-start":
            assert isinstance(c.get("toolCallId"), str) and isinstance(c.get("toolName"), str), c
            assert c["toolCallId"] not in self.inputs, f"call {c['toolCallId']} started twice"
            self.inputs[c["toolCallId"]] = [c["toolName"], [], ...]
        elif kind == "tool-input-delta":
            call = self.inputs.get(c.get("toolCallId"))
            assert call is not None and call[2] is ..., f"chunk {i}: a delta for no open call"
            assert isinstance(c.get("inputTextDelta"), str), c
            call[1].append(c["inputTextDelta"])
        elif kind == "tool-input-available":
            cid = c.get("toolCallId")
            assert isinstance(cid, str) and isinstance(c.get("toolName"), str) and "input" in c, c
            call = self.inputs.setdefault(cid, [c["toolName"], [], ...])
            assert call[2] is ..., f"call {cid} completed twice"
            if call[1]:
                assert loads("".join(call[1])) == c["input"], \
                    f"call {cid}: the deltas are not the input"
            call[2] = c["input"]
            if c.get("providerExecuted") is True:
                self.ran.add(cid)
        elif kind in ("tool-output-available", "tool-output-error", "tool-output-denied"):
            assert c.get("toolCallId") in self.inputs, f"chunk {i}: an output for no call"
            self.ran.add(c["toolCallId"])
        elif kind in ("source-url", "source-document"):
            obs.citations.append(_source_name(c))
        elif kind.startswith("data-"):
            _data(c, obs)
        elif kind == "finish":
            assert not self.open, f"blocks left open at finish: {sorted(self.open)}"
            reason = c.get("finishReason")
            assert reason is None or reason in _REASONS, reason
            obs.finish = reason
            self._meta(c.get("messageMetadata"))
            self.finished = True
        elif kind == "message-metadata":
            self._meta(c.get("messageMetadata"))
        elif kind == "error":
            assert isinstance(c.get("errorText"), str), c
            obs.error = c["errorText"]
            self.failed = True
        else:
            assert kind in ("start", "start-step", "finish-step", "file") or self.lenient, \
                f"chunk {i}: unknown type {kind!r}"

    def _meta(self, meta: Any) -> None:
        usage = _usage(meta)
        if usage is not None:
            self.obs.usage = usage

    def result(self) -> Observed:
        for cid, (name, deltas, value) in self.inputs.items():
            if cid in self.ran:
                continue
            if value is ...:
                # a call the error cut short keeps its input as the text it got to
                assert self.failed, f"call {cid} never completed"
                self.obs.tool_calls.append(ObservedCall(cid, name, "".join(deltas)))
            else:
                self.obs.tool_calls.append(ObservedCall(cid, name, value))
        return self.obs


def read_stream(data: bytes, *, lenient: bool = False) -> Observed:
    events = sse_events(data)
    assert events, "no event"
    s = _Stream(lenient)
    for i, (_, raw) in enumerate(events):
        if raw == "[DONE]":
            assert i == len(events) - 1, "events after [DONE]"
            s.done = True
            break
        c = loads(raw)
        assert isinstance(c, dict) and isinstance(c.get("type"), str), f"event {i}: {raw[:80]}"
        s.chunk(i, c)
    if not s.done:
        assert lenient and (s.finished or s.failed), "the stream ended without [DONE]"
    assert s.finished or s.failed or (lenient and s.done), \
        "the stream ended without finish or error"
    return s.result()


def write_stream(obs: Observed, rng: random.Random) -> bytes:
    """As ``toUIMessageStreamResponse()`` writes it (the usage in the finish's metadata)."""
    start: dict[str, Any] = {"type": "start", "messageId": "msg-written"}
    if obs.model:
        start["messageMetadata"] = {"model": obs.model}
    events: list[Any] = [start, {"type": "start-step"}]
    events += _sources(obs) + _data_parts(obs)
    if obs.reasoning:
        events.append({"type": "reasoning-start", "id": "r0"})
        events += [{"type": "reasoning-delta", "id": "r0", "delta": p}
                   for p in pieces(obs.reasoning, rng)]
        events.append({"type": "reasoning-end", "id": "r0"})
    if obs.text:
        events.append({"type": "text-start", "id": "t0"})
        events += [{"type": "text-delta", "id": "t0", "delta": p} for p in pieces(obs.text, rng)]
        if obs.error is not None:
            return frame_sse([*events, {"type": "error", "errorText": obs.error},
                              {"type": "finish-step"}, {"type": "finish",
                                                        "finishReason": "error"}, "[DONE]"])
        events.append({"type": "text-end", "id": "t0"})
    elif obs.error is not None:
        return frame_sse([*events, {"type": "error", "errorText": obs.error}, "[DONE]"])
    for c in obs.tool_calls:
        events.append({"type": "tool-input-start", "toolCallId": c.id, "toolName": c.name})
        events += [{"type": "tool-input-delta", "toolCallId": c.id, "inputTextDelta": p}
                   for p in pieces(json.dumps(c.arguments), rng)]
        events.append({"type": "tool-input-available", "toolCallId": c.id, "toolName": c.name,
                       "input": c.arguments})
    finish: dict[str, Any] = {"type": "finish", "finishReason": _metadata(obs)["finishReason"]}
    if obs.usage is not None:
        finish["messageMetadata"] = {"usage": _metadata(obs)["usage"]}
    return frame_sse([*events, {"type": "finish-step"}, finish, "[DONE]"])


# --- errors --------------------------------------------------------------------------------------


def read_error(body: Any) -> str:
    assert isinstance(body, dict) and body.get("type") == "error", body
    assert isinstance(body.get("errorText"), str), body
    return str(body["errorText"])
