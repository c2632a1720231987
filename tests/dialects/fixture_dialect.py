"""``fixture-v1``: a made-up dialect that exists only to prove the seam: it is registered from
tests/conftest.py with one line, and every translation test (matrix, golden, properties, fuzz)
runs it against every other dialect without naming it. Its samples are in ``fixture_samples/``,
its strict reader in tests/strict/fixture_dialect.py.

It declares a mix no shipped dialect has: a string session state (``memo``), citations
(``refs``), several agents, tool calls, reasoning, and usage in streams but not in whole answers;
no follow-ups, thoughts or images.

The format (its own API reference)::

    request   {"model"?, "turns": [{"from": "system"|"user"|"assistant"|"tool", "text",
               "agent"?, "calls"?: [{"ref", "fn", "args": {…}}], "answers"?: <ref>,
               "failed"?: bool, "thinking"?}], "memo"?, "tools"?: [{"fn", "about"?, "schema"?}],
               "pick"?: "auto"|"none"|"any"|"fn:<name>", "think"?: "low"|"medium"|"high",
               "stream"?: bool}
    answer    {"replies": [{"agent": <name>|null, "text"}], "memo"?, "refs"?: [{"name",
               "quote"?, "link"?}], "calls"?: [{"ref", "fn", "args": {…}}], "thinking"?,
               "end": "done"|"cut"|"tool"|"blocked"}
    error     {"fail": {"message", "code"}}
    stream    SSE with named events: open {memo?, refs?}; text {delta, agent?}; think {delta};
              call {n, ref, fn}; args {n, delta}; update {refs?, memo?};
              close {end, usage?: {in, out}}; fail {message, code?}.
              A stream without close or fail was cut short.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, assert_never

import orjson

from gateway.canonical import (
    JSON,
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
    Citation,
    ContextUpdate,
    Message,
    Reasoning,
    ReasoningDelta,
    ReasoningRequest,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolDef,
    Usage,
    citations_of,
    context_with_citations,
)
from gateway.dialects.base import (
    SSE_ACCEPT,
    Capabilities,
    Samples,
    error_code_for,
    error_text,
    expect_object,
    kind_of,
    load_samples,
    split_known,
    text_of,
)
from gateway.dialects.fields import FieldTable, load_table
from gateway.errors import DialectError
from gateway.framing import Framing, Named, Payload

__all__ = ["FixtureDialect"]

NAME = "fixture-v1"
_FINISH_IN = {"done": "stop", "cut": "length", "tool": "tool_calls", "blocked": "content_filter"}
_FINISH_OUT = {v: k for k, v in _FINISH_IN.items()}
_PICK_IN = {"auto": "auto", "none": "none", "any": "required"}
_PICK_OUT = {v: k for k, v in _PICK_IN.items()}
_REQUEST_KEYS = frozenset({"model", "turns", "memo", "tools", "pick", "think", "stream"})
_TURN_KEYS = frozenset({"from", "text", "agent", "calls", "answers", "failed", "thinking"})
_ANSWER_KEYS = frozenset({"replies", "memo", "refs", "calls", "thinking", "end"})


def _str(value: JSON, where: str, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise DialectError(f"must be a string, not {kind_of(value)}", where)
    return value


def _calls(raw: JSON, where: str) -> list[ToolCall]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise DialectError("must be a list", where)
    out = []
    for i, c in enumerate(raw):
        c = expect_object(c, f"{where}[{i}]")
        args = c.get("args", {})
        if not isinstance(args, dict):
            raise DialectError("must be an object", f"{where}[{i}].args")
        try:
            text = orjson.dumps(args).decode()
        except orjson.JSONEncodeError as e:  # an integer past 64 bits, nesting past 254
            raise DialectError(f"cannot be written back as JSON ({e})", f"{where}[{i}].args") \
                from e
        out.append(ToolCall(_str(c.get("ref"), f"{where}[{i}].ref", optional=False) or "",
                            _str(c.get("fn"), f"{where}[{i}].fn", optional=False) or "",
                            text))
    return out


def _render_calls(calls: list[ToolCall]) -> list[dict[str, Any]]:
    out = []
    for c in calls:
        try:
            args = orjson.loads(c.arguments)
        except orjson.JSONDecodeError:
            args = {"_unparsed": c.arguments}  # what a model wrote that is not JSON, kept
        out.append({"ref": c.id, "fn": c.name, "args": args})
    return out


def _refs_context(raw: JSON, where: str) -> JSON:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise DialectError("must be a list", where)
    cites = []
    for i, r in enumerate(raw):
        r = expect_object(r, f"{where}[{i}]")
        name = _str(r.get("name"), f"{where}[{i}].name", optional=False) or ""
        cites.append(Citation(name, name, _str(r.get("link"), f"{where}[{i}].link"),
                              _str(r.get("quote"), f"{where}[{i}].quote")))
    return context_with_citations(cites)


def _refs(context: JSON) -> list[dict[str, Any]]:
    out = []
    for c in citations_of(context):
        ref: dict[str, Any] = {"name": c.title or c.id}
        if c.snippet is not None:
            ref["quote"] = c.snippet
        if c.url is not None:
            ref["link"] = c.url
        out.append(ref)
    return out


def _usage(raw: JSON) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    i, o = raw.get("in"), raw.get("out")
    return Usage(i if isinstance(i, int) else None, o if isinstance(o, int) else None)


class FixtureDialect:
    name = NAME
    summary = "a test-only dialect (turns/replies, named SSE events); proves the registry seam"
    capabilities = Capabilities(session_state="string", citations=True, usage_stream=True,
                                multi_agent=True, tools=True, reasoning=True)
    framing: Framing = "sse"
    named_events = True
    stream_content_type = "text/event-stream"
    stream_accept = SSE_ACCEPT
    cumulative_stream = False
    stream_path: str | None = None
    stream_by_accept = False
    default_path = "/fixture/chat"
    route_options = None
    models_path: str | None = None
    token_count: None = None
    models_header: str | None = None

    def render_models(self, names: Sequence[str]) -> JSON:
        raise NotImplementedError("fixture-v1 clients list no models")

    @cached_property
    def samples(self) -> Samples:
        return load_samples(NAME, Path(__file__).parent / "fixture_samples")

    @cached_property
    def field_table(self) -> FieldTable:
        return load_table((Path(__file__).parent / "fixture_fields.yaml").read_text("utf-8"))

    # --- requests ------------------------------------------------------------------------------

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = expect_object(body, "")
        turns = obj.get("turns")
        if not isinstance(turns, list) or not turns:
            raise DialectError("must be a non-empty list", "turns")
        messages = []
        for i, t in enumerate(turns):
            where = f"turns[{i}]"
            t = expect_object(t, where)
            role = _str(t.get("from"), f"{where}.from", optional=False) or ""
            thinking = _str(t.get("thinking"), f"{where}.thinking")
            messages.append(Message(
                role, _str(t.get("text"), f"{where}.text") or "",
                name=_str(t.get("agent"), f"{where}.agent"),
                tool_calls=_calls(t.get("calls"), f"{where}.calls"),
                tool_call_id=_str(t.get("answers"), f"{where}.answers"),
                is_error=t.get("failed") is True,
                reasoning=[Reasoning(thinking)] if thinking else [],
                extras=split_known(t, _TURN_KEYS)))
        raw_tools = obj.get("tools")
        if raw_tools is not None and not isinstance(raw_tools, list):
            raise DialectError(f"must be a list, not {kind_of(raw_tools)}", "tools")
        tools = []
        for i, d in enumerate(raw_tools or []):
            d = expect_object(d, f"tools[{i}]")
            tools.append(ToolDef(_str(d.get("fn"), f"tools[{i}].fn", optional=False) or "",
                                 _str(d.get("about"), f"tools[{i}].about"), d.get("schema")))
        pick = _str(obj.get("pick"), "pick")
        choice = None
        if pick is not None:
            if pick.startswith("fn:"):
                choice = ToolChoice("tool", pick[3:])
            elif pick in _PICK_IN:
                choice = ToolChoice(_PICK_IN[pick])  # type: ignore[arg-type]
            else:
                raise DialectError('must be "auto", "none", "any" or "fn:<name>"', "pick")
        think = _str(obj.get("think"), "think")
        stream = obj.get("stream", False)
        if not isinstance(stream, bool):
            raise DialectError("must be a boolean", "stream")
        return ChatRequest(
            messages=messages, stream=stream, session_state=_str(obj.get("memo"), "memo"),
            model=_str(obj.get("model"), "model"), tools=tools, tool_choice=choice,
            reasoning=ReasoningRequest(effort=think) if think else None,
            extras=split_known(obj, _REQUEST_KEYS - {"stream"}), extras_dialect=NAME)

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = dict(req.extras) if same else {}
        if req.model or model:
            out["model"] = req.model or model
        turns = []
        for m in req.messages:
            turn: dict[str, Any] = dict(m.extras) if same else {}
            turn["from"] = m.role
            turn["text"] = text_of(m.content)
            if m.name is not None:
                turn["agent"] = m.name
            if m.tool_calls:
                turn["calls"] = _render_calls(m.tool_calls)
            if m.tool_call_id is not None:
                turn["answers"] = m.tool_call_id
                if m.is_error:
                    turn["failed"] = True
            thinking = "".join(r.text for r in m.reasoning)
            if thinking:
                turn["thinking"] = thinking
            turns.append(turn)
        out["turns"] = turns
        if isinstance(req.session_state, str):
            out["memo"] = req.session_state
        if req.tools:
            out["tools"] = [{k: v for k, v in (("fn", t.name), ("about", t.description),
                                               ("schema", t.parameters)) if v is not None}
                            for t in req.tools if t.kind == "function"]
        if req.tool_choice is not None:
            c = req.tool_choice
            out["pick"] = f"fn:{c.name}" if c.mode == "tool" else _PICK_OUT[c.mode]
        if req.reasoning is not None and (req.reasoning.effort or req.reasoning.enabled):
            out["think"] = req.reasoning.effort or "medium"  # a said effort wins, none included
        if stream or (same and "stream" in req.extras):
            out["stream"] = stream
        return out

    # --- whole answers -------------------------------------------------------------------------

    def parse_response(self, body: JSON) -> ChatResponse:
        obj = expect_object(body, "")
        replies = obj.get("replies")
        if not isinstance(replies, list) or not replies:
            raise DialectError("must be a non-empty list", "replies")
        messages = []
        for i, r in enumerate(replies):
            r = expect_object(r, f"replies[{i}]")
            messages.append(AssistantMessage(
                _str(r.get("text"), f"replies[{i}].text", optional=False) or "",
                agent=_str(r.get("agent"), f"replies[{i}].agent")))
        messages[-1].tool_calls = _calls(obj.get("calls"), "calls")
        thinking = _str(obj.get("thinking"), "thinking")
        if thinking:
            messages[0].reasoning = [Reasoning(thinking)]
        end = _str(obj.get("end"), "end")
        return ChatResponse(
            messages=messages, context=_refs_context(obj.get("refs"), "refs"),
            session_state=_str(obj.get("memo"), "memo"),
            finish_reason=_FINISH_IN.get(end, end) if end else None,
            # the refs as sent stay in extras: the canonical context splits a ref that has both a
            # quote and a link in two, and a same-dialect answer must come back as it was
            extras=split_known(obj, _ANSWER_KEYS - {"refs"}), extras_dialect=NAME)

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        same = resp.extras_dialect == NAME
        out: dict[str, Any] = dict(resp.extras) if same else {}
        out["replies"] = [{"agent": m.agent, "text": m.content} for m in resp.messages]
        if isinstance(resp.session_state, str):
            out["memo"] = resp.session_state
        elif resp.session_state is not None and isinstance(req.session_state, str):
            out["memo"] = req.session_state  # a state it cannot hold leaves the client its own
        refs = _refs(resp.context)
        if refs and not (same and "refs" in out):
            out["refs"] = refs
        if resp.tool_calls:
            out["calls"] = _render_calls(resp.tool_calls)
        thinking = "".join(r.text for r in resp.reasoning)
        if thinking:
            out["thinking"] = thinking
        reason = resp.finish_reason or ("tool_calls" if resp.tool_calls else "stop")
        out["end"] = _FINISH_OUT.get(reason, "done")
        return out

    # --- errors --------------------------------------------------------------------------------

    def parse_error(self, body: JSON) -> ChatError | None:
        if isinstance(body, dict) and body.get("fail") is not None:
            fail = body["fail"]
            code = fail.get("code") if isinstance(fail, dict) else None
            return ChatError(500, error_text(fail), code if isinstance(code, str) else None)
        return None

    def render_error(self, err: ChatError) -> JSON:
        return {"fail": {"message": err.message, "code": err.code or error_code_for(err.status)}}

    # --- streams -------------------------------------------------------------------------------

    def decoder(self) -> _Decoder:
        return _Decoder()

    def encoder(self, req: ChatRequest) -> _Encoder:
        return _Encoder(req.session_state if isinstance(req.session_state, str) else None)


class _Decoder:
    __slots__ = ("_calls", "_ended", "_started")

    def __init__(self) -> None:
        self._started = False
        self._ended = False
        self._calls: list[int] = []  # open calls

    def decode(self, payload: Any) -> list[StreamEvent]:
        if self._ended:
            return []
        if isinstance(payload, dict) and isinstance(payload.get("fail"), dict):
            # its error body where a stream was asked for (served as JSON): the stream's error
            self._ended = True
            fail = payload["fail"]
            code = fail.get("code")
            return [StreamError(error_text(fail), code if isinstance(code, str) else None)]
        if not isinstance(payload, Named) or not isinstance(payload.data, dict):
            raise DialectError("an event must be named and carry an object", "stream")
        kind, data = payload.event, payload.data
        out: list[StreamEvent] = []
        if not self._started:
            self._started = True
            if kind == "open":
                return [StreamStart(context=_refs_context(data.get("refs"), "refs"),
                                    session_state=_str(data.get("memo"), "memo"))]
            out.append(StreamStart())
        match kind:
            case "text":
                delta = _str(data.get("delta"), "text.delta", optional=False) or ""
                if delta:
                    out.append(TextDelta(delta, _str(data.get("agent"), "text.agent")))
            case "think":
                out.append(ReasoningDelta(_str(data.get("delta"), "think.delta") or ""))
            case "call":
                n = data.get("n")
                if not isinstance(n, int) or n in self._calls:
                    raise DialectError("must be a new call number", "call.n")
                out.extend(ToolCallEnd(i) for i in self._calls)
                self._calls = [n]
                out.append(ToolCallStart(n, _str(data.get("ref"), "call.ref") or f"ref-{n}",
                                         _str(data.get("fn"), "call.fn", optional=False) or ""))
            case "args":
                if data.get("n") not in self._calls:
                    raise DialectError("continues no open call", "args.n")
                out.append(ToolCallDelta(data["n"], _str(data.get("delta"), "args.delta") or ""))
            case "update":
                out.append(ContextUpdate(_refs_context(data.get("refs"), "update.refs"),
                                         _str(data.get("memo"), "update.memo")))
            case "close":
                self._ended = True
                end = _str(data.get("end"), "close.end") or "done"
                out.extend(ToolCallEnd(i) for i in self._calls)
                out.append(StreamFinish(_FINISH_IN.get(end, end), _usage(data.get("usage"))))
            case "fail":
                self._ended = True
                code = data.get("code")
                out.append(StreamError(error_text(data), code if isinstance(code, str) else None))
            case "open":
                raise DialectError("a second open", "stream")
            case _:
                raise DialectError(f"unknown event {kind!r}", "stream")
        return out

    def end(self) -> list[StreamEvent]:
        if self._ended:
            return []
        self._ended = True
        return [StreamError("the upstream stream ended before it closed")]


def _named(event: str, data: dict[str, Any]) -> Named:
    return Named(event, orjson.dumps(data))


class _Encoder:
    __slots__ = ("_closed", "_memo", "_refs", "_started")

    def __init__(self, memo: str | None) -> None:
        self._memo = memo
        self._refs: list[dict[str, Any]] = []
        self._started = False
        self._closed = False

    def _open(self) -> list[Payload]:
        if self._started:
            return []
        self._started = True
        data: dict[str, Any] = {}
        if self._memo is not None:
            data["memo"] = self._memo
        if self._refs:
            data["refs"] = self._refs
        return [_named("open", data)]

    def encode(self, event: StreamEvent) -> list[Payload]:
        if self._closed:
            return []
        match event:
            case StreamStart():
                if isinstance(event.session_state, str):
                    self._memo = event.session_state
                self._refs = _refs(event.context) or self._refs
                return self._open()
            case TextDelta():
                data: dict[str, Any] = {"delta": event.text}
                if event.agent is not None:
                    data["agent"] = event.agent
                return [*self._open(), _named("text", data)]
            case ReasoningDelta():
                if not event.text:
                    return self._open()
                return [*self._open(), _named("think", {"delta": event.text})]
            case ToolCallStart():
                return [*self._open(), _named("call", {"n": event.index, "ref": event.id,
                                                       "fn": event.name})]
            case ToolCallDelta():
                return [_named("args", {"n": event.index, "delta": event.arguments})]
            case ToolCallEnd():
                return []
            case ContextUpdate():
                update: dict[str, Any] = {}
                refs = _refs(event.context)
                if refs and refs != self._refs:
                    self._refs = update["refs"] = refs
                if isinstance(event.session_state, str) and event.session_state != self._memo:
                    self._memo = update["memo"] = event.session_state
                if not update or not self._started:
                    return []  # folded into the open event, or nothing new
                return [_named("update", update)]
            case StreamFinish():
                self._closed = True
                close: dict[str, Any] = {"end": _FINISH_OUT.get(event.reason or "stop", "done")}
                if event.usage is not None:
                    close["usage"] = {"in": event.usage.input_tokens,
                                      "out": event.usage.output_tokens}
                return [*self._open(), _named("close", close)]
            case StreamError():
                self._closed = True
                return [_named("fail", {"message": event.message,
                                        "code": event.code or error_code_for(event.status)})]
            case _:
                assert_never(event)
