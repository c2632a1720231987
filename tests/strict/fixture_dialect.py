"""Strict reader (and writer) of the fixture dialect, from its API reference (the docstring of
tests/dialects/fixture_dialect.py), not from its code.

The stream rules checked: every event named, the first ``open``, exactly one ``close`` or
``fail`` and it is last; calls numbered 0, 1, … in order, ``args`` only for the call opened
last; a ``close``'s ``end`` is one of the four; usage only in ``close``.
"""

from __future__ import annotations

import random
from typing import Any

from strict._wire import dumps, frame_sse, loads, pieces, sse_events
from strict.observed import Observed, ObservedCall, ObservedMessage, agents_text

__all__ = ["FINISH", "SAMPLING", "read_error", "read_request", "read_stream", "read_whole",
           "write_request", "write_stream", "write_whole"]

FINISH = {"done": "stop", "cut": "length", "tool": "tool_calls", "blocked": "content_filter"}
SAMPLING = ("model",)
_END = {v: k for k, v in FINISH.items()}
_PICK = {"auto": "auto", "none": "none", "any": "required"}


def _calls(raw: Any) -> list[ObservedCall]:
    assert raw is None or (isinstance(raw, list) and raw), f"calls: {raw!r}"
    out = []
    for c in raw or []:
        assert isinstance(c.get("ref"), str) and isinstance(c.get("fn"), str), c
        assert isinstance(c.get("args"), dict), f"args must be an object: {c}"
        out.append(ObservedCall(c["ref"], c["fn"], c["args"]))
    return out


def _names(refs: Any) -> list[str]:
    assert isinstance(refs, list), f"refs: {refs!r}"
    for r in refs:
        assert isinstance(r, dict) and isinstance(r.get("name"), str) and r["name"], r
        assert set(r) <= {"name", "quote", "link"}, r
    return [r["name"] for r in refs]


def read_request(body: Any) -> Observed:
    assert isinstance(body, dict), body
    turns = body.get("turns")
    assert isinstance(turns, list) and turns, "turns must be a non-empty list"
    obs = Observed(model=body.get("model"), stream=body.get("stream", False))
    assert isinstance(obs.stream, bool), "stream"
    for t in turns:
        assert t.get("from") in ("system", "developer", "user", "assistant", "tool"), t
        assert isinstance(t.get("text"), str), t
        msg = ObservedMessage(t["from"], t["text"], tool_calls=_calls(t.get("calls")),
                              tool_result_for=t.get("answers"),
                              tool_result_error=t.get("failed") is True,
                              reasoning=t.get("thinking") or "")
        assert (msg.tool_result_for is not None) == (t["from"] == "tool"), t
        obs.messages.append(msg)
    memo = body.get("memo")
    assert memo is None or isinstance(memo, str), "memo"
    obs.session_state = memo
    for tool in body.get("tools") or []:
        assert isinstance(tool.get("fn"), str), tool
        obs.tools.append(tool["fn"])
    pick = body.get("pick")
    if pick is not None:
        assert pick in _PICK or (isinstance(pick, str) and pick.startswith("fn:")), pick
        obs.tool_choice = _PICK.get(pick, f"tool:{pick[3:]}")
    if body.get("think") is not None:
        assert body["think"] in ("low", "medium", "high"), body["think"]
        obs.extra["reasoning"] = body["think"]
    return obs


def write_request(obs: Observed) -> Any:
    turns = []
    for m in obs.messages:
        turn: dict[str, Any] = {"from": "tool" if m.tool_result_for else m.role,
                                "text": m.text}
        if m.tool_calls:
            turn["calls"] = [{"ref": c.id, "fn": c.name, "args": c.arguments}
                             for c in m.tool_calls]
        if m.tool_result_for:
            turn["answers"] = m.tool_result_for
        if m.reasoning:
            turn["thinking"] = m.reasoning
        turns.append(turn)
    body: dict[str, Any] = {"model": obs.model or "fx-small", "turns": turns}
    if isinstance(obs.session_state, str):
        body["memo"] = obs.session_state
    if obs.tools:
        body["tools"] = [{"fn": n, "about": f"the {n} tool", "schema": {"type": "object"}}
                         for n in obs.tools]
    if obs.tool_choice is not None:
        inverse = {v: k for k, v in _PICK.items()}
        body["pick"] = inverse.get(obs.tool_choice, "fn:" + obs.tool_choice[5:])
    if obs.extra.get("reasoning"):
        body["think"] = obs.extra["reasoning"]
    if obs.stream:
        body["stream"] = True
    return body


def read_whole(body: Any) -> Observed:
    assert isinstance(body, dict), body
    assert "usage" not in body, "the format has no usage in whole answers"
    replies = body.get("replies")
    assert isinstance(replies, list) and replies, "replies must be a non-empty list"
    agents = []
    for r in replies:
        assert set(r) == {"agent", "text"}, r
        assert r["agent"] is None or isinstance(r["agent"], str), r
        assert isinstance(r["text"], str), r
        agents.append((r["agent"], r["text"]))
    assert body.get("end") in FINISH, f"end {body.get('end')!r}"
    memo = body.get("memo")
    assert memo is None or isinstance(memo, str), "memo"
    thinking = body.get("thinking")
    assert thinking is None or isinstance(thinking, str), "thinking"
    return Observed(text=agents_text(agents), agents=agents, session_state=memo,
                    citations=_names(body.get("refs", [])), tool_calls=_calls(body.get("calls")),
                    reasoning=thinking or "", finish=body["end"])


def _refs(obs: Observed) -> list[dict[str, Any]]:
    snippets = obs.extra.get("snippets", {})
    out = []
    for name in obs.citations:
        ref: dict[str, Any] = {"name": name}
        quote = snippets.get(name, f"what {name} says")
        if quote is not None:
            ref["quote"] = quote
        if name.startswith("https://"):
            ref["link"] = name
        out.append(ref)
    return out


def write_whole(obs: Observed) -> Any:
    body: dict[str, Any] = {"replies": [{"agent": a, "text": t}
                                        for a, t in obs.agents or [(None, obs.text)]]}
    if isinstance(obs.session_state, str):
        body["memo"] = obs.session_state
    if obs.citations:
        body["refs"] = _refs(obs)
    if obs.tool_calls:
        body["calls"] = [{"ref": c.id, "fn": c.name, "args": c.arguments}
                         for c in obs.tool_calls]
    if obs.reasoning:
        body["thinking"] = obs.reasoning
    body["end"] = _END.get(obs.finish or "stop", "done")
    return body


def read_stream(data: bytes, *, lenient: bool = False) -> Observed:
    events = sse_events(data, named=True)
    assert events, "no event"
    obs = Observed()
    agents: list[tuple[str | None, str]] = []
    calls: list[list[Any]] = []
    for i, (name, raw) in enumerate(events):
        assert name is not None, f"event {i} has no name"
        ev = loads(raw)
        assert isinstance(ev, dict), f"event {i} is not an object"
        assert (i == 0) == (name == "open"), f"event {i} is {name!r}: open comes first, once"
        last = i == len(events) - 1
        match name:
            case "open" | "update":
                if ev.get("refs") is not None:
                    obs.citations = _names(ev["refs"])
                if ev.get("memo") is not None:
                    assert isinstance(ev["memo"], str), ev
                    obs.session_state = ev["memo"]
            case "text":
                assert isinstance(ev.get("delta"), str), ev
                agent = ev.get("agent")
                if not agents or agents[-1][0] != agent:
                    agents.append((agent, ""))
                agents[-1] = (agent, agents[-1][1] + ev["delta"])
            case "think":
                assert isinstance(ev.get("delta"), str), ev
                obs.reasoning += ev["delta"]
            case "call":
                assert ev.get("n") == len(calls), f"call {ev.get('n')} out of order"
                assert isinstance(ev.get("ref"), str) and isinstance(ev.get("fn"), str), ev
                calls.append([ev["ref"], ev["fn"]])
            case "args":
                assert calls and ev.get("n") == len(calls) - 1, f"args for no open call: {ev}"
                assert isinstance(ev.get("delta"), str), ev
                calls[-1].append(ev["delta"])
            case "close":
                assert last, "events after close"
                assert ev.get("end") in FINISH, ev
                obs.finish = ev["end"]
                if ev.get("usage") is not None:
                    u = ev["usage"]
                    assert isinstance(u.get("in"), int) and isinstance(u.get("out"), int), u
                    obs.usage = (u["in"], u["out"])
            case "fail":
                assert last, "events after fail"
                assert isinstance(ev.get("message"), str), ev
                obs.error = ev["message"]
            case _:
                raise AssertionError(f"unknown event {name!r}")
    assert events[-1][0] in ("close", "fail"), "the stream was cut short (no close, no fail)"
    for ref, fn, *parts in calls:
        args = "".join(parts)
        obs.tool_calls.append(ObservedCall(ref, fn, loads(args) if obs.error is None else args))
    obs.agents = agents
    obs.text = agents_text(agents)
    return obs


def write_stream(obs: Observed, rng: random.Random) -> bytes:
    first: dict[str, Any] = {}
    if isinstance(obs.session_state, str):
        first["memo"] = obs.session_state
    if obs.citations:
        first["refs"] = _refs(obs)
    events: list[Any] = [("open", first)]
    events += [("think", {"delta": p}) for p in pieces(obs.reasoning, rng)]
    for agent, text in obs.agents or [(None, obs.text)]:
        for p in pieces(text, rng):
            events.append(("text", {"delta": p} if agent is None else {"delta": p,
                                                                          "agent": agent}))
    if obs.error is not None:
        return frame_sse([*events, ("fail", {"message": obs.error, "code": "BROKE"})])
    for n, c in enumerate(obs.tool_calls):
        events.append(("call", {"n": n, "ref": c.id, "fn": c.name}))
        events += [("args", {"n": n, "delta": p}) for p in pieces(dumps(c.arguments), rng)]
    close: dict[str, Any] = {"end": _END.get(obs.finish or "stop", "done")}
    if obs.usage is not None:
        close["usage"] = {"in": obs.usage[0], "out": obs.usage[1]}
    return frame_sse([*events, ("close", close)])


def read_error(body: Any) -> str:
    assert isinstance(body, dict) and isinstance(body.get("fail"), dict), body
    fail = body["fail"]
    assert isinstance(fail.get("message"), str) and isinstance(fail.get("code"), str), fail
    return str(fail["message"])
