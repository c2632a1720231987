"""``ag-ui``: the AG-UI protocol 1.0 (``@ag-ui/core``), as an agent UI's ``HttpAgent`` speaks it
and as an agent endpoint answers it.

A request is a ``RunAgentInput`` (``threadId``, ``runId``, ``parentRunId``, ``messages``,
``tools``, ``context``, ``state``, ``forwardedProps``); the answer is an SSE stream of events,
one JSON object per ``data:`` line, each naming itself in ``type``: ``RUN_STARTED``, then text
messages (``TEXT_MESSAGE_START`` / ``_CONTENT`` / ``_END``), reasoning (``REASONING_START``,
``REASONING_MESSAGE_*``, ``REASONING_END``, ``REASONING_ENCRYPTED_VALUE``), tool calls
(``TOOL_CALL_START`` / ``_ARGS`` / ``_END``), state (``STATE_SNAPSHOT``, ``STATE_DELTA``), and
last ``RUN_FINISHED`` or ``RUN_ERROR``.

What the protocol has no field for travels where it says application data goes:

- the session state of the other dialects is the run's ``state``: the client's ``state`` is the
  request's session state (the empty object ``HttpAgent`` starts with means none), and the state
  an answer carries is a ``STATE_SNAPSHOT``;
- citations, follow-up questions and thoughts are ``CUSTOM`` events named ``sources`` (a list of
  ``{id, title, url?, snippet?}``), ``followups`` (a list of strings) and ``thoughts`` (the
  backend's list as it sent it);
- the model, sampling, ``toolChoice`` and reasoning effort ride in ``forwardedProps``
  (:data:`_PROPS`); ``context`` entries reach other dialects as a system message;
- usage is ``RUN_FINISHED.usage`` (its ``TokenUsage`` counts as the canonical ones do);
- reasoning another dialect signed (Anthropic's signature, redacted data) is a
  ``REASONING_ENCRYPTED_VALUE`` whose value the gateway seals with its dialect, so that the
  client's next run hands it back to the right provider.

The protocol has no whole answer. A client that asks for none (no ``Accept:
text/event-stream``, which ``HttpAgent`` always sends) gets the same events as one JSON array,
and such an array is read back as a whole answer. An upstream agent is always asked for its
stream (:attr:`AgUiDialect.streams_only`; ``streaming: never`` reads a JSON array instead, or
the stream an agent sends anyway: :attr:`AgUiDialect.whole_may_stream`), and a client that
wants a whole answer gets it assembled.

An upstream's tool calls are held until its run ends: those it answered itself in the run
(``TOOL_CALL_RESULT``) were its own steps, the others are the answer's tool calls, for the
client to run. ``MESSAGES_SNAPSHOT``, steps, activities and subagent events restate or annotate
what the other events carry and are not read.
"""

from __future__ import annotations

from typing import Any, assert_never

import jsonpatch
import jsonpointer
import orjson

from gateway.canonical import (
    JSON,
    ChatError,
    ChatRequest,
    ChatResponse,
    Citation,
    ContextUpdate,
    ImagePart,
    Message,
    OtherPart,
    Part,
    Reasoning,
    ReasoningDelta,
    ReasoningRequest,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolDef,
    Usage,
    citations_of,
    context_with_citations,
    followups_of,
    merge_context,
    random_hex,
)
from gateway.dialects.base import (
    SSE_ACCEPT,
    Capabilities,
    SamplesFromPackage,
    TokenCount,
    error_code_for,
    error_text,
    expect_object,
    kind_of,
    split_known,
)
from gateway.errors import DialectError
from gateway.framing import Framing, Payload, RawData, TextPath

__all__ = ["AgUiDialect"]

NAME = "ag-ui"
PROTOCOL_VERSION = "1.0"

_INPUT_KEYS = frozenset({"threadId", "runId", "parentRunId", "messages", "tools", "context",
                         "state", "forwardedProps"})
_INPUT_READ = _INPUT_KEYS - {"forwardedProps", "threadId", "runId", "parentRunId"}
"""The input's keys whose value a request's fields hold (the others stay in its extras too)."""
_MESSAGE_KEYS = frozenset({"id", "role", "content", "name", "toolCalls", "toolCallId",
                           "error", "encryptedValue"})

_PROPS: dict[str, str] = {
    "temperature": "temperature",
    "top_p": "topP",
    "max_tokens": "maxTokens",
    "stop": "stop",
    "seed": "seed",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    "user": "user",
}
"""Canonical sampling name -> its ``forwardedProps`` key (with ``model``, ``toolChoice``,
``parallelToolCalls`` and ``reasoning``: what a chat API has and ``RunAgentInput`` has not)."""

_ROLES = frozenset({"user", "assistant", "system", "developer", "tool"})

_SEAL = "chat-gateway/1:"
"""The start of an encrypted value the gateway sealed: ``chat-gateway/1:<dialect>:<s|r>:<value>``
(``s`` a signature, ``r`` redacted reasoning), opaque to the client as the protocol wants."""

SOURCES, FOLLOWUPS, THOUGHTS = "sources", "followups", "thoughts"
"""The names of the ``CUSTOM`` events that carry the RAG context."""


def _new_id(prefix: str) -> str:
    return f"{prefix}-{random_hex(12)}"


def _seal(r: Reasoning | ReasoningDelta) -> str | None:
    """The encrypted value a client keeps for reasoning with a signature or redacted data: the
    upstream agent's own value as it came, another dialect's sealed with that dialect."""
    kind, value = ("s", r.signature) if r.signature else ("r", r.redacted)
    if value is None:
        return None
    if r.dialect == NAME and kind == "r":
        return value
    return f"{_SEAL}{r.dialect or ''}:{kind}:{value}"


def _unseal(value: str) -> Reasoning:
    if value.startswith(_SEAL):
        dialect, _, rest = value[len(_SEAL):].partition(":")
        kind, _, inner = rest.partition(":")
        if kind == "s":
            return Reasoning(signature=inner, dialect=dialect or None)
        if kind == "r":
            return Reasoning(redacted=inner, dialect=dialect or None)
    return Reasoning(redacted=value, dialect=NAME)


# --- content and messages -----------------------------------------------------------------------


def _source_image(p: dict[str, JSON], where: str) -> ImagePart | None:
    src = expect_object(p.get("source"), f"{where}.source")
    kind, value, mime = src.get("type"), src.get("value"), src.get("mimeType")
    if not isinstance(value, str):
        raise DialectError("must be a string", f"{where}.source.value")
    if kind == "url":
        return ImagePart(url=value)
    if kind == "data":
        if not isinstance(mime, str):
            raise DialectError("must be a string", f"{where}.source.mimeType")
        return ImagePart(data=value, media_type=mime)
    return None  # a provider's file handle: kept verbatim by the caller


def _parts(content: JSON, where: str) -> str | list[Part]:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise DialectError("must be a string or a list of parts", where)
    out: list[Part] = []
    for j, raw in enumerate(content):
        p = expect_object(raw, f"{where}[{j}]")
        kind = p.get("type")
        if kind == "text":
            text = p.get("text")
            if not isinstance(text, str):
                raise DialectError("must be a string", f"{where}[{j}].text")
            out.append(TextPart(text))
            continue
        image = _source_image(p, f"{where}[{j}]") if kind == "image" else None
        out.append(image if image is not None else OtherPart(NAME, str(kind), p))
    return out


def _render_parts(content: str | list[Part], same: bool) -> str | list[JSON]:
    if isinstance(content, str):
        return content
    if all(isinstance(p, TextPart) for p in content):
        return "".join(p.text for p in content if isinstance(p, TextPart))
    out: list[JSON] = []
    for p in content:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            inline = p.inline()
            source: dict[str, JSON] = (
                {"type": "data", "value": inline[1], "mimeType": inline[0]} if inline
                else {"type": "url", "value": p.as_url()})
            out.append({"type": "image", "source": source})
        elif same or p.dialect == NAME:
            out.append(p.raw)
    return out


def _str_field(m: dict[str, JSON], key: str, where: str, *, required: bool = False) -> str | None:
    value = m.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise DialectError("must be a string", f"{where}.{key}")
    return value


def _calls(raw: JSON, where: str) -> list[ToolCall]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", where)
    out = []
    for k, c in enumerate(raw):
        c = expect_object(c, f"{where}[{k}]")
        fn = expect_object(c.get("function"), f"{where}[{k}].function")
        cid = _str_field(c, "id", f"{where}[{k}]", required=True)
        name = _str_field(fn, "name", f"{where}[{k}].function", required=True)
        args = _str_field(fn, "arguments", f"{where}[{k}].function") or "{}"
        assert cid is not None and name is not None
        out.append(ToolCall(cid, name, args))
    return out


def _parse_messages(raw: JSON) -> list[Message]:
    if raw is None:
        raise DialectError("is required", "messages")
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", "messages")
    out: list[Message] = []
    pending: list[Reasoning] = []  # a reasoning message goes with the assistant turn after it
    for i, item in enumerate(raw):
        where = f"messages[{i}]"
        m = expect_object(item, where)
        role = m.get("role")
        if not isinstance(role, str):
            raise DialectError("must be a string", f"{where}.role")
        extras = split_known(m, _MESSAGE_KEYS)
        if isinstance(m.get("id"), str):
            extras["id"] = m["id"]
        if role == "activity":
            continue  # the UI's own display state, which HttpAgent never sends either
        if role == "reasoning":
            text = _str_field(m, "content", where) or ""
            sealed = _str_field(m, "encryptedValue", where)
            r = _unseal(sealed) if sealed is not None else Reasoning()
            r.text = text
            if r.dialect in (None, NAME) and isinstance(m.get("id"), str):
                r.id = m["id"]  # its own id (another dialect's ids mean nothing here)
            pending.append(r)
            continue
        name = _str_field(m, "name", where)
        content = _parts(m.get("content"), f"{where}.content")
        msg = Message(role, content, name=name, extras=extras)
        if role == "assistant":
            msg.tool_calls = _calls(m.get("toolCalls"), f"{where}.toolCalls")
            msg.reasoning, pending = pending, []
        elif role == "tool":
            msg.tool_call_id = _str_field(m, "toolCallId", where, required=True)
            error = _str_field(m, "error", where)
            if error is not None:
                msg.is_error = True
                if not msg.text:
                    msg.content = error
        out.append(msg)
    if pending:  # reasoning with no answer after it: an assistant turn of its own
        out.append(Message("assistant", "", reasoning=pending))
    if not out:
        raise DialectError("must hold at least one message", "messages")
    return out


def _context_message(entries: list[JSON]) -> Message:
    """``context`` entries as the system message other dialects get them in."""
    text = "\n\n".join(f"{e.get('description', '')}:\n{e.get('value', '')}"
                       for e in entries if isinstance(e, dict))
    return Message("system", text, extras={"_context": entries})


def _render_messages(req: ChatRequest, same: bool) -> tuple[list[JSON], list[JSON]]:
    """``messages`` and ``context`` of a ``RunAgentInput``."""
    messages: list[JSON] = []
    context: list[JSON] = []
    for i, m in enumerate(req.messages):
        if same and "_context" in m.extras:
            context.extend(m.extras["_context"])
            continue
        mid = m.extras.get("id") if same and isinstance(m.extras.get("id"), str) else f"m{i}"
        for k, r in enumerate(m.reasoning):
            rid = r.id if same and r.id is not None else f"{mid}-r{k}"
            rm: dict[str, JSON] = {"id": rid, "role": "reasoning", "content": r.text}
            sealed = _seal(r)
            if sealed is not None:
                rm["encryptedValue"] = sealed
            messages.append(rm)
        wire: dict[str, JSON] = {k: v for k, v in m.extras.items() if not k.startswith("_")} \
            if same else {}
        wire["id"] = mid
        # a role the protocol has no message for (another dialect's own) is the user's
        role = m.role if m.role in _ROLES else "user"
        wire["role"] = role
        if role == "tool":
            wire["content"] = _render_parts(m.content, same)
            wire["toolCallId"] = m.tool_call_id or ""
            if m.is_error:
                wire["error"] = m.text or "the tool failed"
        elif role == "assistant":
            if m.text or not m.tool_calls:
                wire["content"] = m.text
            if m.tool_calls:
                wire["toolCalls"] = [{"id": c.id, "type": "function", "function": {
                    "name": c.name, "arguments": c.arguments}} for c in m.tool_calls]
        elif role == "user":
            wire["content"] = _render_parts(m.content, same)
        else:
            wire["content"] = m.text
        if m.name is not None and role not in ("tool",):
            wire["name"] = m.name
        messages.append(wire)
    return messages, context


# --- forwardedProps ------------------------------------------------------------------------------


def _read_props(props: JSON, req: ChatRequest) -> None:
    if not isinstance(props, dict) or not props:
        return  # (HttpAgent's default is {}: nothing to read)
    model = props.get("model")
    if isinstance(model, str):
        req.model = model
    for canonical, key in _PROPS.items():
        if props.get(key) is not None:
            req.sampling[canonical] = props[key]
    choice = props.get("toolChoice")
    parallel = props.get("parallelToolCalls")
    if isinstance(choice, str) and choice in ("auto", "none", "required"):
        req.tool_choice = ToolChoice(choice)  # type: ignore[arg-type]
    elif isinstance(choice, dict) and isinstance(choice.get("name"), str):
        req.tool_choice = ToolChoice("tool", choice["name"])
    if req.tool_choice is not None and isinstance(parallel, bool):
        req.tool_choice.parallel = parallel
    reasoning = props.get("reasoning")
    if isinstance(reasoning, dict):
        effort, budget = reasoning.get("effort"), reasoning.get("budgetTokens")
        req.reasoning = ReasoningRequest(
            effort=effort if isinstance(effort, str) else None,
            budget_tokens=budget if isinstance(budget, int) else None,
            enabled=reasoning.get("enabled") is not False)


def _render_props(req: ChatRequest, model: str | None, max_tokens: int | None,
                  same: bool) -> dict[str, JSON]:
    base = req.extras.get("forwardedProps") if same else None
    props: dict[str, JSON] = dict(base) if isinstance(base, dict) else {}
    chosen = req.model or model
    if chosen is not None:
        props["model"] = chosen
    for canonical, key in _PROPS.items():
        if canonical in req.sampling:
            props[key] = req.sampling[canonical]
    if "max_tokens" not in req.sampling and max_tokens is not None:
        props["maxTokens"] = max_tokens
    choice = req.tool_choice
    if choice is not None:
        props["toolChoice"] = {"name": choice.name} if choice.mode == "tool" else choice.mode
        if choice.parallel is not None:
            props["parallelToolCalls"] = choice.parallel
    r = req.reasoning
    if r is not None:
        wanted: dict[str, JSON] = {"enabled": r.enabled}
        if r.effort is not None:
            wanted["effort"] = r.effort
        if r.budget_tokens is not None:
            wanted["budgetTokens"] = r.budget_tokens
        props["reasoning"] = wanted
    return props


# --- the RAG context as CUSTOM events -----------------------------------------------------------


def _sources(context: JSON) -> list[JSON]:
    out: list[JSON] = []
    for c in citations_of(context):
        src: dict[str, JSON] = {"id": c.id, "title": c.title or c.id}
        if c.url:
            src["url"] = c.url
        if c.snippet is not None:
            src["snippet"] = c.snippet
        out.append(src)
    return out


def _context_events(context: JSON) -> list[dict[str, JSON]]:
    """The ``CUSTOM`` events that carry a recommended-shape context."""
    out: list[dict[str, JSON]] = []
    sources = _sources(context)
    if sources:
        out.append({"type": "CUSTOM", "name": SOURCES, "value": sources})
    followups = followups_of(context)
    if followups:
        out.append({"type": "CUSTOM", "name": FOLLOWUPS, "value": followups})
    thoughts = context.get(THOUGHTS) if isinstance(context, dict) else None
    if thoughts:
        out.append({"type": "CUSTOM", "name": THOUGHTS, "value": thoughts})
    return out


def _context_of_custom(name: JSON, value: JSON) -> JSON:
    if name == SOURCES and isinstance(value, list):
        cites = []
        for s in value:
            if not isinstance(s, dict):
                continue
            sid, title, url, snippet = (s.get(k) for k in ("id", "title", "url", "snippet"))
            ident = sid if isinstance(sid, str) else title if isinstance(title, str) else None
            if ident is None:
                continue
            cites.append(Citation(ident, title if isinstance(title, str) else None,
                                  url if isinstance(url, str) else None,
                                  snippet if isinstance(snippet, str) else None))
        return context_with_citations(cites)
    if name == FOLLOWUPS and isinstance(value, list):
        return {"followup_questions": [q for q in value if isinstance(q, str)]}
    if name == THOUGHTS:
        return {"thoughts": value}
    return None


# --- usage ---------------------------------------------------------------------------------------


def _usage_entry(u: Usage, model: str | None) -> dict[str, JSON]:
    entry: dict[str, JSON] = {}
    if model is not None:
        entry["model"] = model
    for key, value in (("inputTokens", u.input_tokens), ("outputTokens", u.output_tokens),
                       ("totalTokens", u.total_tokens), ("reasoningTokens", u.reasoning_tokens),
                       ("cachedInputTokens", u.cached_input_tokens),
                       ("cacheWriteInputTokens", u.cache_write_tokens)):
        if value is not None:
            entry[key] = value
    return entry


def _usage_of(raw: JSON) -> tuple[Usage | None, str | None]:
    """``RUN_FINISHED.usage`` summed over its entries (one per provider and model), and the
    first entry's model."""
    if not isinstance(raw, list) or not raw:
        return None, None
    total = Usage()
    model = None
    for e in raw:
        if not isinstance(e, dict):
            continue
        if model is None and isinstance(e.get("model"), str):
            model = e["model"]
        for attr, key in (("input_tokens", "inputTokens"), ("output_tokens", "outputTokens"),
                          ("reasoning_tokens", "reasoningTokens"),
                          ("cached_input_tokens", "cachedInputTokens"),
                          ("cache_write_tokens", "cacheWriteInputTokens")):
            n = e.get(key)
            if isinstance(n, int) and not isinstance(n, bool):
                setattr(total, attr, (getattr(total, attr) or 0) + n)
    return total, model


# --- JSON Patch (RFC 6902), for STATE_DELTA ----------------------------------------------------


def apply_patch(doc: JSON, patch: JSON) -> JSON:
    """``doc`` changed by a JSON Patch (a copy: the previous snapshot is left as it was)."""
    if not isinstance(patch, list):
        raise DialectError("must be a list of operations", "STATE_DELTA.delta")
    try:
        patched: JSON = jsonpatch.apply_patch(doc, patch)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError,
            AttributeError, KeyError, IndexError, ValueError) as e:
        # a malformed operation or a path the snapshot does not have: the agent's stream is wrong
        raise DialectError(f"cannot apply: {e}", "STATE_DELTA.delta") from None
    return patched


# --- the dialect ---------------------------------------------------------------------------------


class AgUiDialect(SamplesFromPackage):
    name = NAME
    summary = "AG-UI 1.0 (@ag-ui/client HttpAgent): RunAgentInput in, SSE run events out"
    capabilities = Capabilities(session_state="json", citations=True, followups=True,
                                thoughts=True, usage_whole=True, usage_stream=True,
                                multi_agent=True, tools=True, images=True, reasoning=True)
    framing: Framing = "sse"
    named_events = False
    stream_content_type = "text/event-stream"
    stream_accept = SSE_ACCEPT
    cumulative_stream = False
    stream_path: str | None = None
    stream_by_accept = True
    default_path = "/ag-ui"
    route_options = None
    models_path: str | None = None
    models_header: str | None = None
    token_count: TokenCount | None = None
    streams_only = True
    """An agent endpoint answers with its event stream: the gateway asks it for one even for a
    whole answer (``streaming: auto``), and assembles the whole answer from it."""
    whole_may_stream = True
    """Asked for no stream (``streaming: never``), an agent streams anyway: the SDKs' encoders
    answer ``text/event-stream`` whatever the ``Accept``, unless it asks for protobuf."""
    text_path: TextPath | None = ("delta",)
    """A ``TEXT_MESSAGE_CONTENT`` event's text. The first of a message decodes with the
    message's id, the others to their text alone: read by their template from the second on."""

    def render_models(self, names: Any) -> JSON:
        return None

    # --- requests ------------------------------------------------------------------------------

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = expect_object(body, "")
        hints: dict[str, JSON] = {}
        for key in ("threadId", "runId"):
            value = obj.get(key)
            if not isinstance(value, str):
                raise DialectError("must be a string" if key in obj else "is required", key)
            hints[key] = value
        parent = obj.get("parentRunId")
        if parent is not None and not isinstance(parent, str):
            raise DialectError("must be a string", "parentRunId")
        messages = _parse_messages(obj.get("messages"))
        context = obj.get("context")
        if context is not None and not isinstance(context, list):
            raise DialectError(f"must be a list, not {kind_of(context)}", "context")
        if context:
            lead = 0
            while lead < len(messages) and messages[lead].role in ("system", "developer"):
                lead += 1
            messages.insert(lead, _context_message(context))
        tools = []
        raw_tools = obj.get("tools")
        if raw_tools is not None and not isinstance(raw_tools, list):
            raise DialectError(f"must be a list, not {kind_of(raw_tools)}", "tools")
        for i, t in enumerate(raw_tools or []):
            t = expect_object(t, f"tools[{i}]")
            name = _str_field(t, "name", f"tools[{i}]", required=True)
            assert name is not None
            tools.append(ToolDef(name, _str_field(t, "description", f"tools[{i}]"),
                                 t.get("parameters"), raw=t, dialect=NAME))
        state = obj.get("state")
        req = ChatRequest(
            messages=messages,
            stream=False,  # HttpAgent's Accept: text/event-stream asks for the stream
            session_state=None if state == {} else state,
            tools=tools,
            extras=split_known(obj, _INPUT_READ),
            extras_dialect=NAME,
            hints=hints,
        )
        if parent is not None:
            hints["parentRunId"] = parent
        _read_props(obj.get("forwardedProps"), req)
        return req

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = {k: v for k, v in req.extras.items()
                               if k not in _INPUT_KEYS} if same else {}
        thread = req.hints.get("threadId") if same else None
        out["threadId"] = thread if isinstance(thread, str) else _new_id("thread")
        run = req.hints.get("runId") if same else None
        out["runId"] = run if isinstance(run, str) else _new_id("run")
        if same and isinstance(req.hints.get("parentRunId"), str):
            out["parentRunId"] = req.hints["parentRunId"]
        out.setdefault("protocolVersion", PROTOCOL_VERSION)
        messages, context = _render_messages(req, same)
        out["state"] = req.session_state if req.session_state is not None else {}
        out["messages"] = messages
        out["tools"] = [
            t.raw if same and t.dialect == NAME and isinstance(t.raw, dict) else
            {"name": t.name, "description": t.description or "",
             **({"parameters": t.parameters} if t.parameters is not None else {})}
            for t in req.tools]
        out["context"] = context
        out["forwardedProps"] = _render_props(req, model, max_tokens, same)
        return out

    # --- whole answers: the run's events as one JSON array ------------------------------------

    def parse_response(self, body: JSON) -> ChatResponse:
        # The pipeline imports the registry, which imports this module: imported when used.
        from gateway.pipeline import ResponseAssembler

        if not isinstance(body, list):
            raise DialectError(f"must be a list of events, not {kind_of(body)}", "body")
        dec, asm = _Decoder(), ResponseAssembler()
        for event in body:
            for e in dec.decode(event):
                asm.add(e)
        for e in dec.end():
            asm.add(e)
        if asm.error is not None:
            raise DialectError(asm.error.message, "body")
        resp = asm.response()
        # the model that answered is named last, in RUN_FINISHED.usage
        finished = [e for e in body if isinstance(e, dict) and e.get("type") == "RUN_FINISHED"]
        if finished and resp.model is None:
            resp.model = _usage_of(finished[-1].get("usage"))[1]
        resp.extras_dialect = NAME
        return resp

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        return orjson.loads(self.render_response_body(resp, req))

    def render_response_body(self, resp: ChatResponse, req: ChatRequest) -> bytes:
        """The run's events as the encoder writes them, joined into the array: bytes already,
        never parsed to be written again."""
        from gateway.pipeline import events_from_response

        enc = self.encoder(req)
        return b"[" + b",".join([p if isinstance(p, bytes) else orjson.dumps(p)
                                 for e in events_from_response(resp)
                                 for p in enc.encode(e)]) + b"]"

    # --- errors --------------------------------------------------------------------------------

    def parse_error(self, body: JSON) -> ChatError | None:
        if not isinstance(body, dict):
            return None
        code = body.get("code")
        if body.get("type") == "RUN_ERROR":
            return ChatError(500, error_text(body), code if isinstance(code, str) else None)
        for key in ("error", "detail"):
            if body.get(key) is not None:
                return ChatError(500, error_text(body[key]))
        if "type" not in body and isinstance(body.get("message"), str):
            return ChatError(500, body["message"], code if isinstance(code, str) else None)
        return None

    def render_error(self, err: ChatError) -> JSON:
        # a failed run's own event: what the stream would have said
        return {"type": "RUN_ERROR", "message": err.message,
                "code": err.code or error_code_for(err.status)}

    def decoder(self) -> _Decoder:
        return _Decoder()

    def encoder(self, req: ChatRequest) -> _Encoder:
        thread, run = req.hints.get("threadId"), req.hints.get("runId")
        return _Encoder(thread if isinstance(thread, str) else _new_id("thread"),
                        run if isinstance(run, str) else _new_id("run"))


# --- an upstream agent's events to canonical events ----------------------------------------------


_UNREAD = frozenset({"TEXT_MESSAGE_END", "TOOL_CALL_END", "REASONING_START", "REASONING_END",
                     "REASONING_MESSAGE_START", "REASONING_MESSAGE_END", "STEP_STARTED",
                     "STEP_FINISHED"})
"""Events that bound what the others carry and give no event (the module's docstring): the
common ones, answered before the kinds that are read are tried one by one."""


class _Decoder:
    __slots__ = ("_answered", "_calls", "_ended", "_last", "_open_calls", "_roles", "_start",
                 "_started", "_state", "_told")

    def __init__(self) -> None:
        self._started = False
        self._start: StreamStart | None = None  # RUN_STARTED's, held for a first STATE_SNAPSHOT
        self._ended = False
        self._roles: dict[str, tuple[str, str | None]] = {}  # text message id -> (role, name)
        self._told: set[str] = set()
        self._calls: dict[str, list[str]] = {}  # tool call id -> [name, argument pieces...]
        self._open_calls: list[str] = []
        self._answered: set[str] = set()
        self._state: JSON = None
        self._last: str | None = None  # the text message a TEXT_MESSAGE_CHUNK without id continues

    def decode(self, payload: Any) -> list[StreamEvent]:
        if self._ended:
            return []
        if type(payload) is not dict:  # (an event object, nearly always, is tried first)
            if isinstance(payload, RawData):
                raise DialectError("an event's data is not JSON", "stream")
            if isinstance(payload, list):  # the run's events as one JSON array: a whole answer
                return [e for event in payload for e in self.decode(event)]
            if not isinstance(payload, dict):
                raise DialectError("an event must be an object with a type", "stream")
        kind = payload.get("type")
        if not isinstance(kind, str):
            raise DialectError("an event must be an object with a type", "stream")
        out: list[StreamEvent] = []
        if self._start is not None:
            # the run's state, when it comes first, is the start's (as other dialects send it)
            start, self._start = self._start, None
            out.append(start)
            if kind == "STATE_SNAPSHOT" and payload.get("snapshot") is not None:
                self._state = start.session_state = payload["snapshot"]
                return out
        if not self._started:
            self._started = True
            run = payload.get("runId") if kind == "RUN_STARTED" else None
            start = StreamStart(id=run if isinstance(run, str) else None)
            if kind == "RUN_STARTED":
                self._start = start
                return out
            out.append(start)
        if kind in _UNREAD:
            return out
        match kind:
            case "TEXT_MESSAGE_START":
                mid, role, name = payload.get("messageId"), payload.get("role"), \
                    payload.get("name")
                if isinstance(mid, str):
                    self._roles[mid] = (role if isinstance(role, str) else "assistant",
                                        name if isinstance(name, str) else None)
            case "TEXT_MESSAGE_CONTENT" | "TEXT_MESSAGE_CHUNK":
                out += self._text(payload)
            case "REASONING_MESSAGE_CONTENT" | "REASONING_MESSAGE_CHUNK":
                delta = payload.get("delta")
                if isinstance(delta, str) and delta:
                    out.append(ReasoningDelta(delta))
            case "REASONING_ENCRYPTED_VALUE":
                value = payload.get("encryptedValue")
                if payload.get("subtype") == "message" and isinstance(value, str):
                    r = _unseal(value)
                    out.append(ReasoningDelta("", r.signature, r.redacted, r.dialect))
            case "TOOL_CALL_START" | "TOOL_CALL_CHUNK":
                self._tool(payload)
            case "TOOL_CALL_ARGS":
                cid, delta = payload.get("toolCallId"), payload.get("delta")
                if isinstance(cid, str) and cid in self._calls and isinstance(delta, str):
                    self._calls[cid].append(delta)
            case "TOOL_CALL_RESULT":
                cid = payload.get("toolCallId")
                if isinstance(cid, str):
                    self._answered.add(cid)
            case "STATE_SNAPSHOT":
                self._state = payload.get("snapshot")
                if self._state is not None:
                    out.append(ContextUpdate(session_state=self._state))
            case "STATE_DELTA":
                if self._state is None:
                    raise DialectError("a STATE_DELTA before any STATE_SNAPSHOT (the gateway "
                                       "holds no state to patch)", "stream")
                self._state = apply_patch(self._state, payload.get("delta"))
                out.append(ContextUpdate(session_state=self._state))
            case "CUSTOM":
                ctx = _context_of_custom(payload.get("name"), payload.get("value"))
                if ctx is not None:
                    out.append(ContextUpdate(context=ctx))
            case "RUN_FINISHED":
                out += self._finish(payload)
            case "RUN_ERROR":
                self._ended = True
                code = payload.get("code")
                out.append(StreamError(error_text(payload),
                                       code if isinstance(code, str) else None))
            case _:
                pass  # steps, snapshots, activities, subagents, RAW: annotations (module doc)
        return out

    def _text(self, payload: dict[str, JSON]) -> list[StreamEvent]:
        mid, delta = payload.get("messageId"), payload.get("delta")
        if payload["type"] == "TEXT_MESSAGE_CHUNK":
            if isinstance(mid, str):
                if mid not in self._roles:
                    role, name = payload.get("role"), payload.get("name")
                    self._roles[mid] = (role if isinstance(role, str) else "assistant",
                                        name if isinstance(name, str) else None)
                self._last = mid
            else:
                mid = self._last
        role, name = self._roles.get(mid, ("assistant", None)) if isinstance(mid, str) \
            else ("assistant", None)
        if role != "assistant" or not isinstance(delta, str) or not delta:
            return []
        told = mid if isinstance(mid, str) and mid not in self._told else None
        if told is not None:
            self._told.add(told)
        return [TextDelta(delta, name, told)]

    def _tool(self, payload: dict[str, JSON]) -> None:
        cid, name = payload.get("toolCallId"), payload.get("toolCallName")
        if isinstance(cid, str) and cid not in self._calls:
            self._calls[cid] = [name if isinstance(name, str) else ""]
        if payload["type"] == "TOOL_CALL_CHUNK":
            cid = cid if isinstance(cid, str) else (self._open_calls[-1] if self._open_calls
                                                     else None)
            delta = payload.get("delta")
            if cid in self._calls and isinstance(delta, str):
                self._calls[cid].append(delta)
        if isinstance(cid, str) and cid not in self._open_calls:
            self._open_calls.append(cid)

    def _finish(self, payload: dict[str, JSON]) -> list[StreamEvent]:
        self._ended = True
        out: list[StreamEvent] = []
        pending = [cid for cid in self._calls if cid not in self._answered]
        for index, cid in enumerate(pending):
            name, *pieces = self._calls[cid]
            out.append(ToolCallStart(index, cid, name))
            args = "".join(pieces)
            if args:
                out.append(ToolCallDelta(index, args))
            out.append(ToolCallEnd(index))
        usage, _ = _usage_of(payload.get("usage"))
        outcome = payload.get("outcome")
        kind = outcome.get("type") if isinstance(outcome, dict) else None
        if kind in ("interrupt", "cancelled"):
            reason: str = str(kind)
        else:
            reason = "tool_calls" if pending else "stop"
        out.append(StreamFinish(reason, usage))
        return out

    def end(self) -> list[StreamEvent]:
        if self._ended:
            return []
        self._ended = True
        start, self._start = self._start, None
        return [*([start] if start is not None else []),
                StreamError("the upstream stream ended before RUN_FINISHED")]


# --- canonical events to the client's events -----------------------------------------------------


class _Encoder:
    __slots__ = ("_agent", "_calls", "_closed", "_head", "_head_of", "_message", "_model",
                 "_named", "_open_text", "_pending", "_reasoning", "_run", "_sealed", "_span",
                 "_started", "_state", "_text_seen", "_thread_id", "_told")

    def __init__(self, thread: str, run: str) -> None:
        self._thread_id, self._run = thread, run
        self._started = False
        self._closed = False
        self._message = _new_id("msg")
        """The assistant message the answer builds: its text, and its tool calls' parent."""
        self._named = False  # the message's id is on the wire (a text's or a call's parent)
        self._text_seen = False
        self._open_text = False
        self._agent: str | None = None
        self._span: str | None = None
        self._reasoning: str | None = None
        self._sealed = False
        self._calls: dict[int, str] = {}
        self._pending: list[str] = []
        self._state: JSON = None
        self._model: str | None = None
        self._told: dict[JSON, JSON] = {}  # CUSTOM name -> the value last sent
        self._head = b""
        self._head_of: str | None = None
        """:meth:`_content_head` for the message ``_head_of`` (the one it was last asked for)."""

    def _content_head(self) -> bytes:
        """A ``TEXT_MESSAGE_CONTENT`` event's bytes up to its text, for the open message (the
        event :func:`_dump` writes, its text the only part that varies from one to the next)."""
        if self._head_of != self._message:
            self._head_of = self._message
            self._head = b"".join((_CONTENT_HEAD, orjson.dumps(self._message), _DELTA_KEY))
        return self._head

    def _start(self, state: JSON, context: JSON) -> list[Payload]:
        out: list[Payload] = []
        if not self._started:
            self._started = True
            out.append(_dump({"type": "RUN_STARTED", "threadId": self._thread_id,
                              "runId": self._run, "protocolVersion": PROTOCOL_VERSION}))
        if state is not None or context is not None:  # (every event but a start's has neither)
            out += self._absorb(state, context)
        return out

    def _absorb(self, state: JSON, context: JSON) -> list[Payload]:
        out: list[Payload] = []
        if state is not None and state != self._state:
            self._state = state
            out.append(_dump({"type": "STATE_SNAPSHOT", "snapshot": state}))
        if context is not None:
            for e in _context_events(merge_context(None, context)):
                if self._told.get(e["name"]) != e["value"]:  # a context sent again: news only
                    self._told[e["name"]] = e["value"]
                    out.append(_dump(e))
        return out

    def _close_text(self) -> list[Payload]:
        if not self._open_text:
            return []
        self._open_text = False
        return [_dump({"type": "TEXT_MESSAGE_END", "messageId": self._message})]

    def _close_reasoning(self) -> list[Payload]:
        out: list[Payload] = []
        if self._reasoning is not None:
            out.append(_dump({"type": "REASONING_MESSAGE_END", "messageId": self._reasoning}))
            self._reasoning = None
        if self._span is not None:
            out.append(_dump({"type": "REASONING_END", "messageId": self._span}))
            self._span = None
        return out

    def _open_reasoning(self) -> list[Payload]:
        out: list[Payload] = []
        if self._span is None:
            self._span = _new_id("reasoning")
            out.append(_dump({"type": "REASONING_START", "messageId": self._span}))
        self._reasoning = _new_id("reasoning-msg")
        self._sealed = False
        out.append(_dump({"type": "REASONING_MESSAGE_START", "messageId": self._reasoning,
                          "role": "reasoning"}))
        return out

    def follow(self, payload: Any) -> None:
        """An upstream agent's event passed on to the client as it came (an identity route): the
        runs, messages and calls it opens and closes are the ones an error event must close."""
        if not isinstance(payload, dict):
            return
        kind, mid = payload.get("type"), payload.get("messageId")
        match kind:
            case "RUN_STARTED":
                self._started = True
                for attr, key in (("_thread_id", "threadId"), ("_run", "runId")):
                    if isinstance(payload.get(key), str):
                        setattr(self, attr, payload[key])
            case "TEXT_MESSAGE_START" if isinstance(mid, str):
                self._message, self._open_text = mid, True
                self._text_seen = self._named = True
                name = payload.get("name")
                self._agent = name if isinstance(name, str) else None
            case "TEXT_MESSAGE_END":
                self._open_text = False
            case "REASONING_START" if isinstance(mid, str):
                self._span = mid
            case "REASONING_END":
                self._span = None
            case "REASONING_MESSAGE_START" if isinstance(mid, str):
                self._reasoning, self._sealed = mid, False
            case "REASONING_MESSAGE_END":
                self._reasoning = None
            case "STATE_SNAPSHOT":
                self._state = payload.get("snapshot")
            case "RUN_FINISHED" | "RUN_ERROR":
                self._closed = True
            case _:
                pass

    def plain_texts(self, texts: list[bytes]) -> list[Payload] | None:
        """:meth:`gateway.dialects.base.StreamEncoder` ``plain_texts``: inside the answer's text
        message, opened for no agent, with no reasoning open (where a ``TextDelta`` writes its
        ``TEXT_MESSAGE_CONTENT`` and nothing else)."""
        if self._closed or not self._started or not self._open_text or self._agent is not None \
                or self._span is not None or self._reasoning is not None:
            return None
        head = self._content_head()
        return [b"".join((head, b'"', t, b'"}')) for t in texts]

    def encode(self, event: StreamEvent) -> list[Payload]:
        if self._closed:
            return []
        if type(event) is TextDelta and self._open_text and event.agent == self._agent \
                and self._span is None and self._reasoning is None and self._started:
            # more text of the open message (the common event): its bytes around the text
            if not event.text:
                return []
            return [b"".join((self._content_head(), orjson.dumps(event.text), b"}"))]
        match event:
            case StreamStart():
                if event.model is not None:
                    self._model = event.model
                return self._start(event.session_state, event.context)
            case TextDelta():
                out = self._start(None, None) + self._close_reasoning()
                if self._open_text and event.agent != self._agent:
                    out += self._close_text()
                if not self._open_text:
                    if self._text_seen and event.agent != self._agent:
                        # another agent speaks: a message of its own
                        self._message = event.message_id or _new_id("msg")
                    elif not self._named and event.message_id:
                        self._message = event.message_id  # the upstream's id, kept
                    self._open_text, self._agent = True, event.agent
                    self._text_seen = self._named = True
                    start: dict[str, JSON] = {"type": "TEXT_MESSAGE_START",
                                              "messageId": self._message, "role": "assistant"}
                    if event.agent is not None:
                        start["name"] = event.agent
                    out.append(_dump(start))
                if event.text:
                    out.append(b"".join((self._content_head(), orjson.dumps(event.text), b"}")))
                return out
            case ReasoningDelta():
                out = self._start(None, None) + self._close_text()
                if self._reasoning is None or (event.text and self._sealed):
                    if self._reasoning is not None:
                        out.append(_dump({"type": "REASONING_MESSAGE_END",
                                          "messageId": self._reasoning}))
                        self._reasoning = None
                    out += self._open_reasoning()
                if event.text:
                    out.append(_dump({"type": "REASONING_MESSAGE_CONTENT",
                                      "messageId": self._reasoning, "delta": event.text}))
                sealed = _seal(event)
                if sealed is not None:
                    self._sealed = True
                    out.append(_dump({"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message",
                                      "entityId": self._reasoning, "encryptedValue": sealed}))
                return out
            case ToolCallStart():
                out = self._start(None, None) + self._close_reasoning() + self._close_text()
                self._calls[event.index] = event.id
                self._pending.append(event.id)
                self._named = True
                out.append(_dump({"type": "TOOL_CALL_START", "toolCallId": event.id,
                                  "toolCallName": event.name, "parentMessageId": self._message}))
                return out
            case ToolCallDelta():
                cid = self._calls.get(event.index)
                if cid is None or not event.arguments:
                    return []
                return [_dump({"type": "TOOL_CALL_ARGS", "toolCallId": cid,
                               "delta": event.arguments})]
            case ToolCallEnd():
                cid = self._calls.pop(event.index, None)
                if cid is None:
                    return []
                return [_dump({"type": "TOOL_CALL_END", "toolCallId": cid})]
            case ContextUpdate():
                return self._start(None, None) + self._absorb(event.session_state, event.context)
            case StreamFinish():
                out = self._start(None, None) + self._close_reasoning() + self._close_text()
                out += [_dump({"type": "TOOL_CALL_END", "toolCallId": cid})
                        for cid in self._calls.values()]
                self._closed = True
                finished: dict[str, JSON] = {"type": "RUN_FINISHED", "threadId": self._thread_id,
                                             "runId": self._run}
                if self._pending:
                    finished["outcome"] = {"type": "success",
                                           "pendingToolCallIds": self._pending}
                if event.usage is not None:
                    finished["usage"] = [_usage_entry(event.usage, self._model)]
                out.append(_dump(finished))
                return out
            case StreamError():
                out = self._start(None, None)
                self._closed = True
                out.append(_dump({"type": "RUN_ERROR", "message": event.message,
                                  "code": event.code or error_code_for(event.status)}))
                return out
            case _:
                assert_never(event)


_CONTENT_HEAD = b'{"type":"TEXT_MESSAGE_CONTENT","messageId":'
_DELTA_KEY = b',"delta":'
"""A ``TEXT_MESSAGE_CONTENT`` event as :func:`_dump` writes it, around its message id and its
text (:meth:`_Encoder._content_head`)."""


def _dump(event: dict[str, JSON]) -> bytes:
    return orjson.dumps(event)
