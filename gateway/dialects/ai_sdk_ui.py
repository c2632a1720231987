"""``ai-sdk-ui``: the Vercel AI SDK's UI message stream protocol, version 1 (what ``useChat`` with
its ``DefaultChatTransport`` sends and reads; the ``ai`` package's ``UIMessage`` and
``UIMessageChunk`` types, and its docs' "Stream Protocols" page).

A request is ``{id, messages: UIMessage[], trigger, messageId, ...the transport's body}``. Each
UI message has a ``role`` and ``parts``: ``text``, ``file`` (images become image parts; other
files are kept for this dialect only), ``reasoning``, ``tool-<name>`` and ``dynamic-tool`` (a
call with its input, and with state ``output-available`` / ``output-error`` /
``output-denied`` its result too), ``step-start`` between an assistant message's steps; the
``source-*`` and ``data-*`` parts are what the UI showed, not model input (the SDK's
``convertToModelMessages`` leaves them out too), but for ``data-session-state``. An assistant
message becomes one canonical assistant message per step, each followed by its tool results.

The SDK's requests carry no tools (a Next.js route declares its own) and no stream flag: the
gateway reads ``tools`` (the SDK's tool set: ``{name: {description, inputSchema}}``),
``toolChoice``, ``model``, ``temperature`` and ``maxOutputTokens`` from the transport's ``body``
when a client sends them, and every request is answered with a stream unless its body says
``"stream": false``. The protocol has no whole answer; such a request gets the final
``UIMessage`` as JSON (the message ``readUIMessageStream`` would have built).

The answer is SSE (header ``x-vercel-ai-ui-message-stream: v1``): ``start``, ``start-step``,
``reasoning-start/-delta/-end`` and ``text-start/-delta/-end`` blocks with ids,
``tool-input-start/-delta/-available`` for a call the client runs, ``source-url`` (a source
with a URL) or ``source-document`` (a named one), ``data-followups`` (the suggested questions),
``data-thoughts`` (the RAG backend's search steps) and ``data-session-state`` (the state, id
``session-state``, so a later one replaces it in the UI message), ``finish-step``, ``finish``
with its ``finishReason`` and the usage as message metadata, then ``data: [DONE]``. An error
after the stream began is an ``error`` chunk, then ``[DONE]`` (as the SDK's own responses end).
The client's next request carries the ``data-session-state`` part back in the assistant message
it kept, which is how the legacy protocols' session state round-trips; a body key
``sessionState`` is read too, and is how the state goes to an upstream of this dialect.

Upstream side, a backend answering this stream (``toUIMessageStreamResponse()``) streams whatever
it is asked: asked for a whole answer (``"stream": false``, which only a backend that knows it,
such as another gateway, honours), a ``text/event-stream`` answer is assembled into one. A tool
call whose output follows in the same stream (a tool the backend ran itself) is the backend's
own step and not passed on; a call still waiting for its output when the step finishes is one
the client must run.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    agent_header,
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
    error_text,
    expect_object,
    kind_of,
    split_known,
)
from gateway.dialects.shared import messages_of
from gateway.errors import DialectError
from gateway.framing import Framing, Payload, RawData, TextPath

__all__ = ["AISDKUIDialect"]

NAME = "ai-sdk-ui"
STREAM_HEADER = ("x-vercel-ai-ui-message-stream", "v1")
"""The header the SDK's responses carry and its docs ask a custom backend to send."""
FOLLOWUPS, THOUGHTS, SESSION = "data-followups", "data-thoughts", "data-session-state"
SESSION_ID = "session-state"
META = "chat-gateway"
"""The ``providerMetadata`` key of a source part's snippet (the RAG backend's quoted text)."""
_DONE = b"[DONE]"
_ROLES = frozenset({"system", "user", "assistant"})
_REQUEST_KEYS = frozenset({"messages", "model", "temperature", "maxOutputTokens", "tools",
                           "toolChoice", "sessionState", "reasoningEffort",
                           "reasoningBudgetTokens"})
_MESSAGE_KEYS = frozenset({"role", "parts"})
_FINISH_IN = {"tool-calls": "tool_calls", "content-filter": "content_filter"}
_FINISH_OUT = {"tool_calls": "tool-calls", "content_filter": "content-filter"}
_FINISH_KNOWN = frozenset({"stop", "length", "content-filter", "tool-calls", "error",
                           "interrupted", "other"})
_RESULT_STATES = frozenset({"output-available", "output-error", "output-denied"})
_CALL_STATES = frozenset({"input-available", "approval-requested", "approval-responded",
                          *_RESULT_STATES})
_DENIED = "The user denied this tool call."


def _finish_in(reason: str) -> str:
    return _FINISH_IN.get(reason, reason)


def _finish_out(reason: str | None) -> str:
    if reason is None:
        return "stop"
    out = _FINISH_OUT.get(reason, reason)
    return out if out in _FINISH_KNOWN else "other"


def _new_id(prefix: str) -> str:
    return f"{prefix}-{random_hex(8)}"


def _json_text(value: JSON) -> str:
    """A tool input or output as the JSON text the canonical model holds (a string output is its
    own text: the model reads what the tool said)."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _args_text(value: JSON) -> str:
    """A tool call's input as the JSON text of its arguments."""
    return orjson.dumps(value).decode()


def _json_value(text: str) -> JSON:
    try:
        return orjson.loads(text) if text else {}
    except orjson.JSONDecodeError:
        return text


def _int(v: JSON) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# --- usage as message metadata (the SDK's LanguageModelUsage names) ------------------------------


def _usage_out(u: Usage) -> dict[str, JSON]:
    out: dict[str, JSON] = {"inputTokens": u.input_tokens, "outputTokens": u.output_tokens,
                            "totalTokens": u.total_tokens}
    if u.reasoning_tokens is not None:
        out["reasoningTokens"] = u.reasoning_tokens
    if u.cached_input_tokens is not None:
        out["cachedInputTokens"] = u.cached_input_tokens
    return out


def _usage_in(metadata: JSON) -> Usage | None:
    u = metadata.get("usage") if isinstance(metadata, dict) else None
    if not isinstance(u, dict):
        return None
    usage = Usage(input_tokens=_int(u.get("inputTokens")),
                  output_tokens=_int(u.get("outputTokens")),
                  cached_input_tokens=_int(u.get("cachedInputTokens")),
                  reasoning_tokens=_int(u.get("reasoningTokens")))
    return None if usage.total_tokens is None else usage


def _parse_reasoning(obj: dict[str, JSON]) -> ReasoningRequest | None:
    """The transport body's ``reasoningEffort`` (OpenAI's effort names, as the AI SDK's
    ``providerOptions`` spell them) and ``reasoningBudgetTokens`` (a thinking budget): the UI
    protocol has no reasoning settings of its own, so a route handler reads these keys."""
    effort, budget = obj.get("reasoningEffort"), obj.get("reasoningBudgetTokens")
    if effort is not None and not isinstance(effort, str):
        raise DialectError("must be a string", "reasoningEffort")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise DialectError("must be an integer", "reasoningBudgetTokens")
    if effort is None and budget is None:
        return None
    return ReasoningRequest(effort=effort, budget_tokens=budget, enabled=effort != "none")


# --- reasoning's provider metadata ---------------------------------------------------------------


def reasoning_metadata(r: Reasoning) -> dict[str, JSON] | None:
    """A reasoning part's ``providerMetadata``: the signature or redacted data under the name of
    the dialect that issued it, the key and fields the SDK's own Anthropic provider uses
    (``{"anthropic": {"signature"}}``, ``redactedData``), so that the reasoning goes back to it."""
    if r.dialect is None or (r.signature is None and r.redacted is None):
        return None
    mine: dict[str, JSON] = {}
    if r.signature is not None:
        mine["signature"] = r.signature
    if r.redacted is not None:
        mine["redactedData"] = r.redacted
    return {r.dialect: mine}


def reasoning_of(text: str, meta: JSON) -> Reasoning:
    if isinstance(meta, dict):
        for issuer, value in meta.items():
            if isinstance(value, dict):
                sig, redacted = value.get("signature"), value.get("redactedData")
                if isinstance(sig, str) or isinstance(redacted, str):
                    return Reasoning(text, sig if isinstance(sig, str) else None,
                                     redacted if isinstance(redacted, str) else None,
                                     dialect=str(issuer))
    return Reasoning(text)


def _reasoning_part(r: Reasoning, **extra: JSON) -> dict[str, JSON]:
    part: dict[str, JSON] = {"type": "reasoning", "text": r.text, **extra}
    meta = reasoning_metadata(r)
    if meta is not None:
        part["providerMetadata"] = meta
    return part


# --- sources and data parts ----------------------------------------------------------------------


def source_parts(context: JSON) -> list[dict[str, JSON]]:
    """The citations of a context as ``source-url`` (with a URL) or ``source-document`` parts."""
    out: list[dict[str, JSON]] = []
    for c in citations_of(context):
        part: dict[str, JSON]
        if c.url:
            part = {"type": "source-url", "sourceId": c.id, "url": c.url}
            if c.title:
                part["title"] = c.title
        else:
            part = {"type": "source-document", "sourceId": c.id, "mediaType": "text/plain",
                    "title": c.title or c.id}
        if c.snippet is not None:
            part["providerMetadata"] = {META: {"snippet": c.snippet}}
        out.append(part)
    return out


def _citation(part: dict[str, JSON]) -> Citation | None:
    sid, url, title = part.get("sourceId"), part.get("url"), part.get("title")
    name = title if isinstance(title, str) and title else (url if isinstance(url, str) else sid)
    if not isinstance(name, str) or not name:
        return None
    meta = part.get("providerMetadata")
    mine = meta.get(META) if isinstance(meta, dict) else None
    snippet = mine.get("snippet") if isinstance(mine, dict) else None
    return Citation(id=sid if isinstance(sid, str) else name, title=name,
                    url=url if isinstance(url, str) and url else None,
                    snippet=snippet if isinstance(snippet, str) else None)


def data_parts(context: JSON, state: JSON) -> list[dict[str, JSON]]:
    """The context's follow-up questions and thoughts, and the session state, as data parts."""
    out: list[dict[str, JSON]] = []
    followups = followups_of(context)
    if followups:
        out.append({"type": FOLLOWUPS, "id": "followups", "data": followups})
    thoughts = context.get("thoughts") if isinstance(context, dict) else None
    if thoughts:
        out.append({"type": THOUGHTS, "id": "thoughts", "data": thoughts})
    if state is not None:
        out.append({"type": SESSION, "id": SESSION_ID, "data": state})
    return out


def _context_of_data(kind: str, data: JSON) -> JSON:
    if kind == FOLLOWUPS and isinstance(data, list):
        return {"followup_questions": [q for q in data if isinstance(q, str)]}
    if kind == THOUGHTS:
        return {"thoughts": data}
    return None


# --- requests ------------------------------------------------------------------------------------


def _tool_name(part: dict[str, JSON], kind: str, where: str) -> str:
    if kind == "dynamic-tool":
        name = part.get("toolName")
        if not isinstance(name, str) or not name:
            raise DialectError("must be a non-empty string", f"{where}.toolName")
        return name
    return kind[len("tool-"):]


def _user_parts(parts: list[JSON], where: str) -> str | list[Part]:
    out: list[Part] = []
    texts: list[str] = []  # the text parts' texts (all the content, when they are all parts)
    for j, raw in enumerate(parts):
        p = raw if type(raw) is dict else expect_object(raw, f"{where}[{j}]")
        kind = p.get("type")
        if not isinstance(kind, str):
            raise DialectError("must be a string", f"{where}[{j}].type")
        if kind == "text":
            text = p.get("text")
            if not isinstance(text, str):
                raise DialectError("must be a string", f"{where}[{j}].text")
            out.append(TextPart(text))
            texts.append(text)
        elif kind == "file":
            url, media = p.get("url"), p.get("mediaType")
            if not isinstance(url, str) or not isinstance(media, str):
                raise DialectError("needs a string url and mediaType", f"{where}[{j}]")
            if media == "image" or media.startswith("image/"):
                out.append(ImagePart(url=url, media_type=media))
            else:
                out.append(OtherPart(NAME, "file", p))
        # step-start, source-* and data-* parts are the UI's, not model input
    if len(texts) == len(out):
        return "".join(texts)
    return out


class _Steps:
    """An assistant UI message's parts, read into one canonical assistant message per step, each
    followed by the results of its tool calls."""

    __slots__ = ("_calls", "_done", "_reasoning", "_results", "_text")

    def __init__(self) -> None:
        self._done: list[Message] = []
        self._text: list[str] = []
        self._reasoning: list[Reasoning] = []
        self._calls: list[ToolCall] = []
        self._results: list[Message] = []

    def flush(self) -> None:
        if self._text or self._reasoning or self._calls:
            self._done.append(Message("assistant", "".join(self._text), tool_calls=self._calls,
                                      reasoning=self._reasoning))
            self._done.extend(self._results)
        self._text, self._reasoning, self._calls, self._results = [], [], [], []

    def text(self, text: str) -> None:
        if self._calls:
            self.flush()
        self._text.append(text)

    def reasoning(self, r: Reasoning) -> None:
        if self._calls or self._text:
            self.flush()
        self._reasoning.append(r)

    def tool(self, part: dict[str, JSON], name: str, where: str) -> None:
        state, cid = part.get("state"), part.get("toolCallId")
        if not isinstance(cid, str) or not cid:
            raise DialectError("must be a non-empty string", f"{where}.toolCallId")
        if not isinstance(state, str):
            raise DialectError("must be a string", f"{where}.state")
        if state not in _CALL_STATES:
            return  # input still streaming: no call was made yet
        self._calls.append(ToolCall(cid, name, _args_text(part.get("input", {}))))
        if state == "output-available":
            self._results.append(Message("tool", _json_text(part.get("output")),
                                         tool_call_id=cid))
        elif state == "output-error":
            err = part.get("errorText")
            self._results.append(Message("tool", err if isinstance(err, str) else "error",
                                         tool_call_id=cid, is_error=True))
        elif state == "output-denied":
            self._results.append(Message("tool", _DENIED, tool_call_id=cid, is_error=True))

    def messages(self) -> list[Message]:
        self.flush()
        return self._done


def _assistant_messages(parts: list[JSON], where: str) -> tuple[list[Message], JSON, bool]:
    """The canonical messages of an assistant UI message, and the session state its
    ``data-session-state`` part held (with whether it had one)."""
    steps = _Steps()
    state: JSON = None
    found = False
    for j, raw in enumerate(parts):
        at = f"{where}[{j}]"
        p = expect_object(raw, at)
        kind = p.get("type")
        if not isinstance(kind, str):
            raise DialectError("must be a string", f"{at}.type")
        if kind == "text" or kind == "reasoning":
            text = p.get("text")
            if not isinstance(text, str):
                raise DialectError("must be a string", f"{at}.text")
            if kind == "text":
                steps.text(text)
            else:
                steps.reasoning(reasoning_of(text, p.get("providerMetadata")))
        elif kind == "step-start":
            steps.flush()
        elif kind == "dynamic-tool" or kind.startswith("tool-"):
            steps.tool(p, _tool_name(p, kind, at), at)
        elif kind == SESSION:
            state, found = p.get("data"), True
    return steps.messages(), state, found


def _parse_messages(raw: list[JSON]) -> tuple[list[Message], JSON, bool]:
    out: list[Message] = []
    state: JSON = None
    found = False
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        obj = expect_object(m, where)
        role, parts = obj.get("role"), obj.get("parts")
        if not isinstance(role, str) or role not in _ROLES:
            raise DialectError("must be system, user or assistant", f"{where}.role")
        if not isinstance(parts, list):
            raise DialectError(f"must be a list, not {kind_of(parts)}", f"{where}.parts")
        extras = split_known(obj, _MESSAGE_KEYS)
        extras["_parts"] = parts  # a same-dialect render gives the UI message back as it came
        if role == "assistant":
            msgs, s, has = _assistant_messages(parts, f"{where}.parts")
            if has:
                state, found = s, True
            if not msgs:
                msgs = [Message("assistant", "")]
            for n, msg in enumerate(msgs):
                msg.extras = extras if n == 0 else {"_step": True}
            out.extend(msgs)
        else:
            out.append(Message(role, _user_parts(parts, f"{where}.parts"), extras=extras))
    return out, state, found


def _parse_tools(raw: JSON) -> list[ToolDef]:
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise DialectError(f"must be an object of tools by name, not {kind_of(raw)}", "tools")
    out: list[ToolDef] = []
    for name, spec in raw.items():
        t = expect_object(spec, f"tools.{name}")
        desc, schema = t.get("description"), t.get("inputSchema")
        if desc is not None and not isinstance(desc, str):
            raise DialectError("must be a string", f"tools.{name}.description")
        if schema is not None and not isinstance(schema, dict):
            raise DialectError("must be a JSON Schema object", f"tools.{name}.inputSchema")
        out.append(ToolDef(name, desc, schema))
    return out


def _parse_tool_choice(raw: JSON) -> ToolChoice | None:
    if raw is None:
        return None
    if raw in ("auto", "none", "required"):
        return ToolChoice(raw)
    if isinstance(raw, dict) and raw.get("type") == "tool" and isinstance(raw.get("toolName"),
                                                                         str):
        return ToolChoice("tool", raw["toolName"])
    raise DialectError('must be "auto", "none", "required" or {"type": "tool", "toolName"}',
                       "toolChoice")


def _file_part(p: ImagePart) -> dict[str, JSON]:
    inline = p.inline()
    media = inline[0] if inline else (p.media_type or "image")
    return {"type": "file", "mediaType": media, "url": p.as_url()}


def _render_content(content: str | list[Part]) -> list[JSON]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out: list[JSON] = []
    for p in content:
        match p:
            case TextPart():
                out.append({"type": "text", "text": p.text})
            case ImagePart():
                out.append(_file_part(p))
            case OtherPart():
                if p.dialect == NAME:
                    out.append(p.raw)
    return out


def _tool_part(c: ToolCall) -> dict[str, JSON]:
    return {"type": f"tool-{c.name}", "toolCallId": c.id, "state": "input-available",
            "input": _json_value(c.arguments)}


def _render_messages(messages: list[Message], same: bool) -> list[JSON]:
    out: list[dict[str, Any]] = []
    open_assistant: dict[str, Any] | None = None  # the UI message a tool result belongs to
    for i, m in enumerate(messages):
        if same and "_parts" in m.extras:
            wire = {k: v for k, v in m.extras.items() if k != "_parts"}
            out.append({**wire, "role": m.role, "parts": m.extras["_parts"]})
            open_assistant = None
            continue
        if same and m.extras.get("_step"):
            continue  # a later step of a UI message rendered as it came
        if m.role == "tool":
            _attach_result(out, open_assistant, m, i)
            if open_assistant is None:
                open_assistant = out[-1]
            continue
        if m.role == "assistant":
            parts: list[JSON] = [{"type": "step-start"}]
            parts += [_reasoning_part(r) for r in m.reasoning if r.text or r.redacted]
            parts += [p for p in _render_content(m.content)]
            parts += [_tool_part(c) for c in m.tool_calls]
            if open_assistant is not None:
                open_assistant["parts"].extend(parts)
            else:
                open_assistant = {"id": f"msg-{i}", "role": "assistant", "parts": parts}
                out.append(open_assistant)
            continue
        open_assistant = None
        role = m.role if m.role in _ROLES else ("system" if m.role == "developer" else "user")
        out.append({"id": f"msg-{i}", "role": role, "parts": _render_content(m.content)})
    return out


def _attach_result(out: list[dict[str, Any]], assistant: dict[str, Any] | None, m: Message,
                   i: int) -> None:
    """A tool result into the tool part of its call (the UI keeps a call and its result as one
    part); a result without a call a part of its own."""
    part: dict[str, Any] | None = None
    if assistant is not None:  # the latest call of that id still waiting for its result
        part = next((p for p in reversed(assistant["parts"]) if isinstance(p, dict)
                     and p.get("toolCallId") == m.tool_call_id
                     and p.get("state") == "input-available"), None)
    if part is None:
        part = {"type": "dynamic-tool", "toolName": "unknown", "toolCallId": m.tool_call_id,
                "input": {}}
        if assistant is None:
            out.append({"id": f"msg-{i}", "role": "assistant", "parts": [part]})
        else:
            assistant["parts"].append(part)
    if m.is_error:
        part["state"] = "output-error"
        part["errorText"] = m.text
    else:
        part["state"] = "output-available"
        part["output"] = m.text


# --- whole answers -------------------------------------------------------------------------------


def _message_parts(resp: ChatResponse) -> list[JSON]:
    parts: list[JSON] = [{"type": "step-start"}]
    for r in resp.reasoning:
        if r.text or r.redacted:
            parts.append(_reasoning_part(r, state="done"))
    text = resp.text
    if text:
        parts.append({"type": "text", "text": text, "state": "done"})
    parts += [_tool_part(c) for c in resp.tool_calls]
    parts += source_parts(resp.context)
    parts += data_parts(resp.context, resp.session_state)
    return parts


def _metadata(resp: ChatResponse) -> dict[str, JSON]:
    meta: dict[str, JSON] = {}
    if resp.model:
        meta["model"] = resp.model
    if resp.usage is not None:
        meta["usage"] = _usage_out(resp.usage)
    meta["finishReason"] = _finish_out(resp.finish_reason or (
        "tool_calls" if resp.tool_calls else None))
    return meta


class AISDKUIDialect(SamplesFromPackage):
    name = NAME
    summary = ("the Vercel AI SDK's UI message stream (v1): useChat's UIMessage requests, "
               "SSE of typed chunks ending in [DONE]")
    capabilities = Capabilities(session_state="json", citations=True, followups=True,
                                thoughts=True, usage_whole=True, usage_stream=True, tools=True,
                                images=True, reasoning=True)
    framing: Framing = "sse"
    named_events = False
    stream_content_type = "text/event-stream"
    stream_headers: tuple[tuple[str, str], ...] = (STREAM_HEADER,)
    stream_accept = SSE_ACCEPT
    cumulative_stream = False
    whole_may_stream = True
    """Its backends answer with a stream even when asked for a whole answer (the protocol has
    none): such an answer (``text/event-stream``) is assembled into one."""
    text_path: TextPath | None = ("delta",)
    stream_path: str | None = None
    stream_by_accept = False
    default_path = "/api/ui-chat"
    demo_page: str | None = "ai-sdk-chat.html"
    """The demo's chat page built on this protocol's own client (``gateway/static/``): the demo
    serves a route of this dialect to every demo backend, at ``default_path/<backend>``."""
    route_options = None
    models_path: str | None = None
    models_header: str | None = None
    token_count: TokenCount | None = None

    def render_models(self, names: Sequence[str]) -> JSON:
        raise NotImplementedError(f"{self.name} clients list no models")

    # --- requests ------------------------------------------------------------------------------

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = expect_object(body, "")
        messages, state, found = _parse_messages(messages_of(obj))
        stream = obj.get("stream", True)
        if not isinstance(stream, bool):
            raise DialectError("must be a boolean", "stream")
        model = obj.get("model")
        if model is not None and not isinstance(model, str):
            raise DialectError("must be a string", "model")
        sampling: dict[str, JSON] = {}
        for key, canonical in (("temperature", "temperature"), ("maxOutputTokens", "max_tokens")):
            value = obj.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or (
                    canonical == "max_tokens" and not isinstance(value, int)):
                raise DialectError("must be a number", key)
            sampling[canonical] = value
        hints: dict[str, JSON] = {}
        reasoning = _parse_reasoning(obj)
        if "sessionState" in obj:
            state, hints["session_at"] = obj["sessionState"], "body"
        elif found:
            hints["session_at"] = "part"
        last = obj["messages"][-1]
        if isinstance(last, dict) and last.get("role") == "assistant" \
                and isinstance(last.get("id"), str):
            hints["continues"] = last["id"]  # the answer continues this message (tool results)
        return ChatRequest(
            messages=messages,
            stream=stream,
            session_state=state,
            model=model,
            sampling=sampling,
            tools=_parse_tools(obj.get("tools")),
            tool_choice=_parse_tool_choice(obj.get("toolChoice")),
            reasoning=reasoning,
            # "stream" stays in extras so that a same-dialect render keeps an explicit false
            extras=split_known(obj, _REQUEST_KEYS),
            extras_dialect=NAME,
            hints=hints,
        )

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = dict(req.extras) if same else {}
        if stream:
            out.pop("stream", None)  # a stream is what this protocol answers anyway
        elif not same or "stream" not in out:
            out["stream"] = False
        out.setdefault("id", _new_id("chat"))
        out["messages"] = _render_messages(req.messages, same)
        chosen = req.model or model
        if chosen is not None:
            out["model"] = chosen
        if "temperature" in req.sampling:
            out["temperature"] = req.sampling["temperature"]
        cap = req.sampling.get("max_tokens", max_tokens)
        if cap is not None:
            out["maxOutputTokens"] = cap
        if req.tools:
            out["tools"] = {t.name: {k: v for k, v in (
                ("description", t.description), ("inputSchema", t.parameters if t.parameters
                                                 is not None else {"type": "object",
                                                                   "properties": {}}))
                if v is not None} for t in req.tools if t.kind == "function"}
        if req.tool_choice is not None:
            c = req.tool_choice
            out["toolChoice"] = {"type": "tool", "toolName": c.name} if c.mode == "tool" \
                else c.mode
        if req.reasoning is not None:
            r = req.reasoning
            # reasoning asked for with neither an effort nor a budget (Responses' reasoning {},
            # Ollama's think: true) is the default effort of the names these keys take, medium
            effort = r.effort or ("none" if not r.enabled else
                                  "medium" if r.budget_tokens is None else None)
            if effort is not None:
                out["reasoningEffort"] = effort
            if r.budget_tokens is not None:
                out["reasoningBudgetTokens"] = r.budget_tokens
        if req.session_state is not None and not (same and req.hints.get("session_at") ==
                                                  "part"):
            out["sessionState"] = req.session_state
        out.setdefault("trigger", "submit-message")
        return out

    # --- whole answers -------------------------------------------------------------------------

    def parse_response(self, body: JSON) -> ChatResponse:
        obj = expect_object(body, "")
        if obj.get("role") != "assistant":
            raise DialectError("must be assistant", "role")
        parts = obj.get("parts")
        if not isinstance(parts, list):
            raise DialectError(f"must be a list, not {kind_of(parts)}", "parts")
        msgs, state, _ = _assistant_messages(parts, "parts")
        results = {m.tool_call_id for m in msgs if m.tool_call_id is not None}
        text = "".join(m.text for m in msgs if m.role == "assistant")
        reasoning = [r for m in msgs for r in m.reasoning]
        calls = [c for m in msgs for c in m.tool_calls if c.id not in results]
        context: JSON = None
        citations: list[Citation] = []
        for p in parts:
            if not isinstance(p, dict):
                continue
            kind = p.get("type")
            if kind in ("source-url", "source-document"):
                c = _citation(p)
                if c is not None:
                    citations.append(c)
            elif kind in (FOLLOWUPS, THOUGHTS):  # (the only data parts that hold context)
                context = merge_context(context, _context_of_data(kind, p.get("data")))
        context = context_with_citations(citations, context)
        meta = obj.get("metadata")
        reason = meta.get("finishReason") if isinstance(meta, dict) else None
        model = meta.get("model") if isinstance(meta, dict) else None
        mid = obj.get("id")
        extras = split_known(obj, _MESSAGE_KEYS)
        extras["_seen"] = [parts, state, context]
        return ChatResponse(
            messages=[AssistantMessage(text, id=mid if isinstance(mid, str) else None,
                                       tool_calls=calls, reasoning=reasoning)],
            context=context, session_state=state,
            finish_reason=_finish_in(reason) if isinstance(reason, str) else None,
            usage=_usage_in(meta), id=mid if isinstance(mid, str) else None,
            model=model if isinstance(model, str) else None,
            extras=extras, extras_dialect=NAME)

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        same = resp.extras_dialect == NAME
        extras = dict(resp.extras) if same else {}
        seen = extras.pop("_seen", None)
        out: dict[str, Any] = {**extras, "id": resp.id if resp.id is not None else _new_id("msg"),
                               "role": "assistant"}
        if seen is not None and seen[1:] == [resp.session_state, resp.context]:
            out["parts"] = seen[0]
        else:
            out["parts"] = _message_parts(resp)
        if not same or "metadata" not in out:
            out["metadata"] = _metadata(resp)
        return out

    # --- errors --------------------------------------------------------------------------------

    def parse_error(self, body: JSON) -> ChatError | None:
        if not isinstance(body, dict):
            return None
        if body.get("type") == "error" and isinstance(body.get("errorText"), str):
            return ChatError(500, body["errorText"])
        if body.get("error") is not None and "parts" not in body:
            return ChatError(500, error_text(body["error"]))  # a route's own {"error": …}
        return None

    def render_error(self, err: ChatError) -> JSON:
        # the protocol's error chunk: the SDK shows a failed response's body as the error text
        return {"type": "error", "errorText": err.message}

    # --- streams -------------------------------------------------------------------------------

    def decoder(self) -> _Decoder:
        return _Decoder()

    def encoder(self, req: ChatRequest) -> _Encoder:
        same = req.extras_dialect == NAME
        continues = req.hints.get("continues") if same else None
        return _Encoder(continues if isinstance(continues, str) else None, req.model)


# --- streams -------------------------------------------------------------------------------------


_UNREAD = frozenset({"start-step", "text-start", "text-end"})
"""Chunks that carry nothing an event holds (a text block's bounds, a step's start): every
answer has them, and they are answered before the chunk kinds are tried one by one."""


class _Call:
    __slots__ = ("args", "id", "name", "ran")

    def __init__(self, cid: str, name: str) -> None:
        self.id, self.name, self.args, self.ran = cid, name, "", False


class _Decoder:
    """Chunks to canonical events. The start waits for the first chunk of content, so that the
    sources and data parts a backend sends before its text (a RAG backend's) arrive with it.
    Tool calls wait for the end of their step: a call whose output arrives in the same step is
    the backend's own and is not passed on."""

    __slots__ = ("_calls", "_citations", "_ended", "_finished", "_meta", "_pending", "_reason",
                 "_sent", "_started")

    def __init__(self) -> None:
        self._started = False
        self._pending: StreamStart | None = None
        """The start, with what came before the content, until the content begins."""
        self._ended = False
        self._finished = False
        self._reason: str | None = None
        self._meta: dict[str, JSON] = {}
        self._calls: dict[str, _Call] = {}
        self._sent = 0
        self._citations: list[Citation] = []

    def _start(self) -> list[StreamEvent]:
        if self._started:
            return []
        self._started = True
        start, self._pending = self._pending or StreamStart(), None
        return [start]

    def _context(self, context: JSON = None, state: JSON = None,
                 has_state: bool = False) -> list[StreamEvent]:
        if self._started:
            return [ContextUpdate(context, state)]
        start = self._pending = self._pending or StreamStart()
        if context is not None:
            start.context = merge_context(start.context, context)
        if has_state:
            start.session_state = state
        return []

    def _metadata(self, meta: JSON) -> None:
        if isinstance(meta, dict):
            self._meta = {**self._meta, **meta}

    def _flush_calls(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for call in self._calls.values():
            if call.ran:
                continue
            index = self._sent
            self._sent += 1
            out.append(ToolCallStart(index, call.id, call.name))
            if call.args:
                out.append(ToolCallDelta(index, call.args))
            out.append(ToolCallEnd(index))
        self._calls = {}
        return out

    def _finish(self) -> list[StreamEvent]:
        self._ended = True
        reason = self._reason or ("tool_calls" if self._sent else "stop")
        return [*self._start(), *self._flush_calls(),
                StreamFinish(reason, _usage_in(self._meta))]

    def decode(self, payload: Any) -> list[StreamEvent]:
        if self._ended:
            return []
        if isinstance(payload, RawData):
            if payload.text.strip() == "[DONE]":
                return self._finish()
            raise DialectError("an event's data is not JSON", "stream")
        if not isinstance(payload, dict):
            raise DialectError("a chunk must be an object", "stream")
        kind = payload.get("type")
        if not isinstance(kind, str):
            raise DialectError("a chunk has no type", "stream")
        if kind == "error" or kind == "abort":
            self._ended = True
            text = payload.get("errorText") if kind == "error" else payload.get("reason")
            message = text if isinstance(text, str) and text else (
                "the upstream aborted the answer" if kind == "abort" else "upstream error")
            before = self._start() if self._pending is not None else []
            return [*before, StreamError(message)]
        if self._finished or kind in _UNREAD:
            return []  # after finish, only [DONE] or the body's end matter
        match kind:
            case "start":
                mid = payload.get("messageId")
                self._context()
                if self._pending is not None and isinstance(mid, str):
                    self._pending.id = mid
                self._metadata(payload.get("messageMetadata"))
                model = self._meta.get("model")
                if self._pending is not None and isinstance(model, str):
                    self._pending.model = model
                return []
            case "text-delta" | "reasoning-delta":
                delta = payload.get("delta")
                if not isinstance(delta, str):
                    raise DialectError("a delta must be a string", "stream")
                if not delta:
                    return []
                return [*self._start(), TextDelta(delta) if kind == "text-delta"
                        else ReasoningDelta(delta)]
            case "reasoning-start" | "reasoning-end":
                signed = reasoning_of("", payload.get("providerMetadata"))
                if signed.dialect is None:
                    return []
                return [*self._start(), ReasoningDelta(signature=signed.signature,
                                                       redacted=signed.redacted,
                                                       dialect=signed.dialect)]
            case "tool-input-start" | "tool-input-delta" | "tool-input-available":
                self._tool_input(kind, payload)
                return []
            case "tool-output-available" | "tool-output-error" | "tool-output-denied":
                call = self._calls.get(str(payload.get("toolCallId")))
                if call is not None:
                    call.ran = True
                return []
            case "source-url" | "source-document":
                c = _citation(payload)
                if c is None:
                    return []
                self._citations.append(c)
                return self._context(context_with_citations(list(self._citations)))
            case "finish-step":
                calls = self._flush_calls()
                return [*self._start(), *calls] if calls else []
            case "finish":
                self._finished = True
                reason = payload.get("finishReason")
                self._reason = _finish_in(reason) if isinstance(reason, str) else None
                self._metadata(payload.get("messageMetadata"))
                calls = self._flush_calls()
                return [*self._start(), *calls] if calls else []
            case "message-metadata":
                self._metadata(payload.get("messageMetadata"))
                return []
            case _ if kind == SESSION:
                return self._context(state=payload.get("data"), has_state=True)
            case _ if kind in (FOLLOWUPS, THOUGHTS):
                return self._context(_context_of_data(kind, payload.get("data")))
            case _:
                return []  # block starts and ends, steps, files, the app's own data parts

    def _tool_input(self, kind: str, payload: dict[str, JSON]) -> None:
        cid = payload.get("toolCallId")
        if not isinstance(cid, str):
            raise DialectError("a tool chunk has no toolCallId", "stream")
        call = self._calls.get(cid)
        if kind == "tool-input-delta":
            delta = payload.get("inputTextDelta")
            if call is None or not isinstance(delta, str):
                raise DialectError("a tool input delta for no started call", "stream")
            call.args += delta
            return
        name = payload.get("toolName")
        if not isinstance(name, str):
            raise DialectError("a tool chunk has no toolName", "stream")
        if call is None:
            call = self._calls[cid] = _Call(cid, name)
        if payload.get("providerExecuted") is True:
            call.ran = True
        if kind == "tool-input-available" and not call.args:
            # streamed in deltas, the input stays as the model wrote it
            call.args = _args_text(payload.get("input", {}))

    def end(self) -> list[StreamEvent]:
        if self._ended:
            return []
        if self._finished:
            return self._finish()  # tolerated: a finished answer without [DONE]
        self._ended = True
        if not self._started and self._pending is None:
            return [StreamError("the upstream stream ended before it began")]
        return [*self._start(), StreamError("the upstream stream ended before it finished")]


def _chunk(obj: dict[str, JSON]) -> bytes:
    return orjson.dumps(obj)


class _Encoder:
    __slots__ = ("_agent", "_block", "_block_kind", "_block_reasoning", "_calls", "_closed",
                 "_data", "_mid", "_model", "_n", "_sources", "_spoke", "_started", "_state",
                 "_text_head")

    def __init__(self, message_id: str | None, model: str | None) -> None:
        self._mid = message_id
        self._model = model
        self._started = False
        self._closed = False
        self._block: str | None = None
        self._block_kind = ""
        self._block_reasoning: Reasoning | None = None
        """The open reasoning block's signature or redacted data (sent with its end)."""
        self._n = 0
        self._calls: dict[int, list[str]] = {}
        """Open tool calls by index: [id, name, arguments so far]."""
        self._sources: set[bytes] = set()
        self._data: dict[str, bytes] = {}
        """The data parts sent, by type (a part is sent again only when it changed)."""
        self._state: JSON = None
        self._agent: str | None = None
        self._spoke = False
        self._text_head: bytes | None = None
        """While a text block is open: its ``text-delta`` chunk's bytes up to its text (the
        chunk :func:`_chunk` writes, its text the only part that varies)."""

    def _start(self, start: StreamStart | None = None) -> list[Payload]:
        if self._started:
            return []
        self._started = True
        head: dict[str, JSON] = {"type": "start"}
        mid = self._mid or (start.id if start is not None else None)
        if mid:
            head["messageId"] = mid
        model = (start.model if start is not None else None) or None
        if model:
            head["messageMetadata"] = {"model": model}
        return [_chunk(head), b'{"type":"start-step"}']

    def _close(self) -> list[Payload]:
        if self._block is None:
            return []
        end: dict[str, JSON] = {"type": f"{self._block_kind}-end", "id": self._block}
        signed = self._block_reasoning
        meta = reasoning_metadata(signed) if signed is not None else None
        if meta is not None:
            end["providerMetadata"] = meta
        self._block, self._block_reasoning, self._text_head = None, None, None
        return [_chunk(end)]

    def _open(self, kind: str) -> list[Payload]:
        if self._block is not None and self._block_kind == kind and self._block_reasoning is None:
            return []
        out = self._close()
        self._n += 1
        self._block, self._block_kind = f"{kind}-{self._n}", kind
        if kind == "text":
            self._text_head = b'{"type":"text-delta","id":"%s","delta":' % self._block.encode()
        out.append(_chunk({"type": f"{kind}-start", "id": self._block}))
        return out

    def _context(self, context: JSON, state: JSON) -> list[Payload]:
        out: list[Payload] = []
        if context is not None:
            for part in source_parts(context):
                chunk = _chunk(part)  # a source is sent once, whichever context names it again
                if chunk not in self._sources:
                    self._sources.add(chunk)
                    out.append(chunk)
        for part in data_parts(context, state):
            data = _chunk(part)
            if self._data.get(str(part["type"])) != data:
                self._data[str(part["type"])] = data
                out.append(data)
        return out

    def follow(self, payload: Any) -> None:
        """:class:`gateway.dialects.base.StreamEncoder` ``follow``: the client was shown the
        upstream's own chunks (an identity route), its ``start`` among them, so an error this
        encoder writes after them starts nothing again."""
        self._started = True

    def plain_texts(self, texts: list[bytes]) -> list[Payload] | None:
        """:meth:`gateway.dialects.base.StreamEncoder` ``plain_texts``: inside a text block."""
        head = self._text_head
        if self._closed or head is None or self._agent is not None:
            return None
        self._spoke = True
        return [b"".join((head, b'"', t, b'"}')) for t in texts]

    def encode(self, event: StreamEvent) -> list[Payload]:
        if self._closed:
            return []
        head = self._text_head
        if head is not None and type(event) is TextDelta and event.agent == self._agent:
            # more text of the open text block (the common chunk): its bytes around the text
            self._spoke = True
            return [b"".join((head, orjson.dumps(event.text), b"}"))]
        match event:
            case StreamStart():
                out = self._start(event)
                return out + self._context(event.context, event.session_state)
            case TextDelta():
                out = self._start()
                text = event.text
                if event.agent != self._agent:
                    text = agent_header(event.agent, first=not self._spoke) + text
                    self._agent = event.agent
                self._spoke = True
                out += self._open("text")
                assert self._text_head is not None  # (the text block _open leaves open)
                out.append(b"".join((self._text_head, orjson.dumps(text), b"}")))
                return out
            case ReasoningDelta():
                out = self._start()
                signed = event.dialect is not None and bool(event.signature or event.redacted)
                if signed and event.redacted is not None:
                    out += self._close()  # redacted reasoning is a block of its own
                if event.text or (signed and (self._block is None
                                              or self._block_kind != "reasoning")):
                    out += self._open("reasoning")
                if event.text:
                    out.append(_chunk({"type": "reasoning-delta", "id": self._block,
                                       "delta": event.text}))
                if signed:
                    # sent with the block's end, where the SDK's reader keeps it
                    self._block_reasoning = Reasoning(
                        signature=event.signature, redacted=event.redacted, dialect=event.dialect)
                return out
            case ToolCallStart():
                out = self._start() + self._close()
                self._calls[event.index] = [event.id, event.name, ""]
                out.append(_chunk({"type": "tool-input-start", "toolCallId": event.id,
                                   "toolName": event.name}))
                return out
            case ToolCallDelta():
                call = self._calls.get(event.index)
                if call is None:
                    return []
                call[2] += event.arguments
                return [_chunk({"type": "tool-input-delta", "toolCallId": call[0],
                                "inputTextDelta": event.arguments})]
            case ToolCallEnd():
                done = self._calls.pop(event.index, None)
                if done is None:
                    return []
                return [_chunk({"type": "tool-input-available", "toolCallId": done[0],
                                "toolName": done[1], "input": _json_value(done[2])})]
            case ContextUpdate():
                return self._start() + self._context(event.context, event.session_state)
            case StreamFinish():
                out = self._start() + self._close()
                self._closed = True
                out.append(b'{"type":"finish-step"}')
                finish: dict[str, JSON] = {"type": "finish", "finishReason": _finish_out(
                    event.reason)}
                if event.usage is not None:
                    finish["messageMetadata"] = {"usage": _usage_out(event.usage)}
                out.append(_chunk(finish))
                out.append(_DONE)
                return out
            case StreamError():
                out = self._start()
                self._closed = True
                return [*out, _chunk({"type": "error", "errorText": event.message}), _DONE]
            case _:
                assert_never(event)
