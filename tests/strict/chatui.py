"""Strict reader (and writer) of the Chat UI format (specs/chat-ui-api-formats.md): message objects
``{messageId, conversationId?, status, role, content, contentType, agentName?, sources, error,
createdAt}``; a multi-agent answer is an array of them; the minimal answer
``[{"Items": [{"Text": …}]}]``; the Chat UI app's own ``{"messages": [{id, role, content,
timestamp, agentName?}]}``.

The stream rules checked: one ``data:`` line per event, each a whole message object (required
fields present); a message's events share one ``messageId`` and its ``content`` only grows by
extension (cumulative); its ``status`` is ``processing`` until one ``completed`` or ``failed``;
a new ``messageId`` (the next agent) starts only after the previous one completed; nothing after
``failed``; the stream ends on ``completed`` or ``failed``. A single-agent stream has one
``messageId``. ``lenient`` reads accept a content rewritten rather than extended (the spec's own
SSE example does that): the last content is what the UI shows.
"""

from __future__ import annotations

import random
import re
from typing import Any

from strict._wire import frame_sse, loads, pieces, sse_events, text_messages
from strict.observed import Observed, ObservedMessage, agents_text

__all__ = ["SAMPLING", "read_error", "read_request", "read_stream", "read_whole",
           "write_request", "write_stream", "write_whole"]

SAMPLING: tuple[str, ...] = ()
_REQUIRED = ("messageId", "status", "role", "content", "contentType", "sources", "error",
             "createdAt")
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def read_request(body: Any) -> Observed:
    assert isinstance(body, dict), body
    messages = body.get("messages")
    assert isinstance(messages, list) and messages, "messages must be a non-empty list"
    obs = Observed()
    for i, m in enumerate(messages):
        assert isinstance(m, dict) and isinstance(m.get("role"), str), f"messages[{i}]"
        assert isinstance(m.get("content"), str), f"messages[{i}].content must be a string"
        obs.messages.append(ObservedMessage(m["role"], m["content"]))
    conversation = body.get("conversationId")
    assert conversation is None or isinstance(conversation, str), "conversationId"
    obs.session_state = conversation
    if "stream" in body:
        assert isinstance(body["stream"], bool), "stream"
        obs.stream = body["stream"]
    return obs


def write_request(obs: Observed) -> Any:
    body: dict[str, Any] = {"messages": text_messages(obs)}
    if isinstance(obs.session_state, str):
        body["conversationId"] = obs.session_state
    if obs.stream:
        body["stream"] = True
    return body


def _source_name(s: Any) -> str:
    assert isinstance(s, dict), f"a source must be an object: {s!r}"
    for key in ("id", "title", "url", "snippet"):
        assert s.get(key) is None or isinstance(s[key], str), f"source {key}: {s!r}"
    name = s.get("title") or s.get("id")
    assert isinstance(name, str) and name, f"a source with neither title nor id: {s!r}"
    return name


def _message(m: Any, where: str, *, status: str | None = "completed") -> dict[str, Any]:
    assert isinstance(m, dict), f"{where} is not an object"
    for key in _REQUIRED:
        assert key in m, f"{where} has no {key}"
    assert isinstance(m["messageId"], str) and m["messageId"], f"{where}.messageId"
    if status is not None:
        assert m["status"] == status, f"{where}.status is {m['status']!r}"
    assert m["role"] == "assistant", f"{where}.role"
    assert isinstance(m["content"], str), f"{where}.content"
    assert m["contentType"] in ("text", "markdown"), f"{where}.contentType"
    assert isinstance(m["sources"], list), f"{where}.sources"
    assert isinstance(m["createdAt"], str) and _ISO.match(m["createdAt"]), f"{where}.createdAt"
    for key in ("conversationId", "agentName"):
        assert m.get(key) is None or isinstance(m[key], str), f"{where}.{key}"
    return m


def read_whole(body: Any) -> Observed:
    obs = Observed()
    agents: list[tuple[str | None, str]] = []
    if isinstance(body, dict) and "messageId" not in body and "Items" not in body:
        app = body.get("messages")  # the Chat UI app's shape alone
        assert isinstance(app, list) and app, f"not a Chat UI answer: {body!r}"
        for i, m in enumerate(app):
            assert isinstance(m, dict) and set(m) <= {"id", "role", "content", "timestamp",
                                                      "agentName"}, f"messages[{i}]: {m!r}"
            assert isinstance(m.get("id"), str) and isinstance(m.get("content"), str), m
            assert isinstance(m.get("timestamp"), str), m
            if m.get("role") == "assistant":
                agents.append((m.get("agentName"), m["content"]))
    else:
        items = body if isinstance(body, list) else [body]
        assert items, "an empty array"
        for i, raw in enumerate(items):
            if isinstance(raw, dict) and "Items" in raw:
                role = raw.get("Role", raw.get("role"))
                if isinstance(role, dict):
                    role = role.get("Label")
                if role is not None and str(role).lower() != "assistant":
                    continue
                text = "".join(it["Text"] for it in raw["Items"]
                               if str(it.get("$type", "TextContent")).lower() == "textcontent")
                agents.append((raw.get("AuthorName"), text))
                obs.extra["no_session_state"] = True  # the minimal answer has no conversationId
                continue
            if isinstance(raw, dict) and raw.get("role") != "assistant":
                continue  # the history API lists the user's messages too
            m = _message(raw, f"[{i}]")
            assert m["error"] is None, f"[{i}] is an answer with an error"
            agents.append((m.get("agentName"), m["content"]))
            obs.citations += [_source_name(s) for s in m["sources"]]
            if obs.session_state is None:
                obs.session_state = m.get("conversationId")
        if isinstance(body, dict) and "messages" in body:  # the app's view of the same answer
            app = body["messages"]
            assert isinstance(app, list) and len(app) == 1, "messages beside a single answer"
            assert app[0]["id"] == body["messageId"] and app[0]["content"] == body["content"], \
                "the app's message differs from the answer"
    obs.agents = agents
    obs.text = agents_text(agents)
    return obs


def write_whole(obs: Observed) -> Any:
    agents = obs.agents or [(None, obs.text)]
    out = []
    for i, (agent, text) in enumerate(agents):
        m: dict[str, Any] = {"messageId": f"msg-written-{i}", "status": "completed",
                             "role": "assistant", "content": text, "contentType": "markdown"}
        if isinstance(obs.session_state, str):
            m["conversationId"] = obs.session_state
        if agent is not None:
            m["agentName"] = agent
        m["sources"] = _sources(obs) if i == 0 else []
        m["error"] = None
        m["createdAt"] = "2024-05-01T10:00:00.000Z"
        out.append(m)
    return out if len(out) > 1 or agents[0][0] is not None else out[0]


def _sources(obs: Observed) -> list[dict[str, Any]]:
    snippets = obs.extra.get("snippets", {})
    out = []
    for n, name in enumerate(obs.citations):
        src: dict[str, Any] = {"id": f"src-{n}", "title": name}
        if name.startswith("https://"):
            src["url"] = name
        snippet = snippets.get(name, f"what {name} says")
        if snippet is not None:
            src["snippet"] = snippet
        out.append(src)
    return out


def read_stream(data: bytes, *, lenient: bool = False) -> Observed:
    events = [loads(raw) for _, raw in sse_events(data)]
    assert events, "no event"
    obs = Observed()
    agents: list[tuple[str | None, str]] = []
    current: str | None = None
    closed = True
    sources: list[Any] = []
    for i, ev in enumerate(events):
        m = _message(ev, f"event {i}", status=None)
        assert m["status"] in ("processing", "completed", "failed"), m["status"]
        if m["messageId"] != current:
            assert closed, f"event {i}: a new messageId before {current} completed"
            current, closed = m["messageId"], False
            agents.append((m.get("agentName"), ""))
            sources = []
        else:
            # the agent may be named once the text begins (the start went out before it was known)
            before = agents[-1][1]
            assert m.get("agentName") == agents[-1][0] or not before, \
                f"event {i}: the agent changed after the text began"
            agents[-1] = (m.get("agentName"), before)
            if not lenient:
                assert m["content"].startswith(before), \
                    f"event {i}: content {m['content']!r} does not extend {before!r}"
        agents[-1] = (agents[-1][0], m["content"])
        if m["sources"]:
            sources = m["sources"]
        if m.get("conversationId") is not None:
            assert obs.session_state in (None, m["conversationId"]), "conversationId changed"
            obs.session_state = m["conversationId"]
        if m["status"] == "failed":
            assert i == len(events) - 1, "events after failed"
            err = m["error"]
            assert isinstance(err, dict) and isinstance(err.get("message"), str), err
            obs.error = err["message"]
        else:
            assert m["error"] is None, f"event {i}: an error on a {m['status']} event"
        if m["status"] != "processing":
            closed = True
            obs.citations += [_source_name(s) for s in sources]
    assert closed, "the stream ended before its message completed"
    if not lenient and all(a is None for a, _ in agents):
        assert len(agents) == 1, "a single-agent stream changed its messageId"
    obs.agents = agents
    obs.text = agents_text(agents)
    return obs


def write_stream(obs: Observed, rng: random.Random) -> bytes:
    agents = obs.agents or [(None, obs.text)]
    events: list[Any] = []
    for i, (agent, text) in enumerate(agents):
        base: dict[str, Any] = {"messageId": f"msg-written-{i}"}
        if isinstance(obs.session_state, str):
            base["conversationId"] = obs.session_state
        so_far = ""
        cuts = pieces(text, rng) or [""]
        last_agent = i == len(agents) - 1
        for n, piece in enumerate(cuts):
            so_far += piece
            final = n == len(cuts) - 1 and (obs.error is None or not last_agent)
            ev = {**base, "status": "completed" if final else "processing",
                  "role": "assistant", "content": so_far, "contentType": "text"}
            if agent is not None:
                ev["agentName"] = agent
            ev["sources"] = _sources(obs) if final and i == 0 else []
            ev["error"] = None
            ev["createdAt"] = "2024-05-01T10:00:00.000Z"
            events.append(ev)
        if obs.error is not None and last_agent:
            events.append({**events[-1], "status": "failed",
                           "error": {"message": obs.error, "code": "UPSTREAM"}})
    return frame_sse(events)


def read_error(body: Any) -> str:
    items = body if isinstance(body, list) else [body]
    assert items and all(isinstance(m, dict) for m in items), body
    m = items[0]
    assert m.get("status") == "failed", f"an error answer's status is {m.get('status')!r}"
    err = m.get("error")
    assert isinstance(err, dict) and isinstance(err.get("message"), str), err
    return str(err["message"])
