"""``openai``: raw Chat Completions (see specs/openai-chat-completions.md).

Requests carry content parts (``text``, ``image_url``; others are kept verbatim for OpenAI
upstreams), ``tools`` / ``tool_choice`` / ``parallel_tool_calls``, assistant ``tool_calls`` and
``tool`` results. Freeform tools are ``{"type": "custom", "custom": {name, format}}`` (the grammar
nested under ``format.grammar``), their calls ``{"type": "custom", "custom": {name, input}}``,
streamed as ``delta.tool_calls[].custom.input`` pieces. Reasoning travels as
``reasoning_content`` on messages and deltas, the field the OpenAI-compatible servers that
stream reasoning use (DeepSeek, vLLM; ``reasoning`` is read too).

Streams are SSE: a role chunk first, content and tool-call chunks (``delta.tool_calls[]`` by
``index``, the arguments string split over chunks), a chunk with ``finish_reason``, an optional
usage chunk with ``choices: []``, then ``data: [DONE]``. An error after the stream began is an
event ``data: {"error": {...}}`` and no ``[DONE]`` follows it. Only choice 0 is read (the gateway
never asks for ``n > 1``).
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
    new_completion_id,
    now,
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
from gateway.dialects.shared import (
    messages_of,
    openai_output_format,
    parse_openai_output_format,
    plain_message,
    role_and_content,
)
from gateway.errors import DialectError
from gateway.framing import Framing, Payload, RawData, TextPath

__all__ = ["OpenAIDialect"]

NAME = "openai"
_SAMPLING = ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "user")
_SHARED: dict[str, type] = {
    "safety_identifier": str, "prompt_cache_key": str, "prompt_cache_retention": str,
    "service_tier": str, "verbosity": str, "metadata": dict}
"""Fields the Responses API has too, same name and meaning (``verbosity`` is its
``text.verbosity``): canonical sampling keys of the same name, with the type they must have."""
_SAMPLING_OUT = (*_SAMPLING, *_SHARED)
"""The sampling keys a request renders under their own name, in the order it writes them."""
_REQUEST_KEYS = frozenset({
    "model", "messages", "stream", "tools", "tool_choice", "parallel_tool_calls", "stop",
    "max_tokens", "max_completion_tokens", "reasoning_effort", *_SAMPLING, *_SHARED})
_EXTRAS_KNOWN = _REQUEST_KEYS - {"stream"}
"""The keys :func:`split_known` leaves out of a request's extras ("stream" stays, so that a
same-dialect render keeps an explicit false)."""
_SETTINGS = frozenset({*_REQUEST_KEYS, "response_format", "stream_options"}
                      - {"model", "messages", "stream"})
"""The keys a request of only ``model``, ``messages`` and ``stream`` does without: when it holds
none, what reads them reads nothing."""
_FORMAT_AT = "json_schema"
"""Where ``response_format`` holds a JSON schema's name, schema and strictness."""
_MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id",
                           "reasoning_content"})
_RESPONSE_KEYS = frozenset({"id", "created", "model", "choices", "usage"})
_CHOICE_KEYS = frozenset({"message", "finish_reason"})
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}
_FINISH_IN = {"function_call": "tool_calls"}
_FINISH_OUT = {"error": "stop"}
_KNOWN_FINISH = frozenset({"stop", "length", "tool_calls", "content_filter"})
_DONE = b"[DONE]"


def _error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def _finish_in(reason: str) -> str:
    return _FINISH_IN.get(reason, reason)


def _finish_out(reason: str | None) -> str:
    if reason is None:
        return "stop"
    reason = _FINISH_OUT.get(reason, reason)
    return reason if reason in _KNOWN_FINISH else "stop"


class OpenAIDialect(SamplesFromPackage):
    name = NAME
    summary = "raw OpenAI Chat Completions, SSE ending in [DONE]"
    capabilities = Capabilities(usage_whole=True, usage_stream=True, tools=True,
                                custom_tools=True, images=True, reasoning=True,
                                structured_output=frozenset({"json_schema", "json_object"}))
    framing: Framing = "sse"
    named_events = False
    stream_content_type = "text/event-stream"
    stream_accept = SSE_ACCEPT
    cumulative_stream = False
    text_path: TextPath | None = ("choices", 0, "delta", "content")
    # OpenAI pads every delta chunk with random characters of its own (``obfuscation``, unless
    # the request turns it off with ``stream_options.include_obfuscation``): a slot of the
    # template, which the decoder never reads.
    string_paths: tuple[TextPath, ...] = (("obfuscation",),)
    stream_path: str | None = None
    stream_by_accept = False
    default_path = "/v1/chat/completions"
    route_options = None
    models_path: str | None = "/v1/models"
    models_header: str | None = None
    token_count: TokenCount | None = None

    def render_models(self, names: Sequence[str]) -> JSON:
        # https://platform.openai.com/docs/api-reference/models/list; ``created`` is unknown
        # for a model an upstream serves, and 0 says so.
        return {"object": "list", "data": [
            {"id": n, "object": "model", "created": 0, "owned_by": "chat-gateway"}
            for n in names]}

    # --- requests ------------------------------------------------------------------------------

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = expect_object(body, "")
        model = obj.get("model")
        if model is not None and not isinstance(model, str):
            raise DialectError("must be a string", "model")
        stream = obj.get("stream", False)
        if stream is not None and not isinstance(stream, bool):
            raise DialectError("must be a boolean", "stream")
        if obj.keys().isdisjoint(_SETTINGS):
            # no sampling, caps, tools, format or stream options: what the full reading below
            # makes of their absence
            return ChatRequest(
                messages=_parse_messages(obj), stream=bool(stream), model=model, sampling={},
                extras=split_known(obj, _EXTRAS_KNOWN), extras_dialect=NAME,
                hints={"include_usage": False})
        sampling: dict[str, JSON] = {}
        for key in _SAMPLING:
            value = obj.get(key)
            if value is None:
                continue
            if key != "user" and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise DialectError("must be a number", key)
            sampling[key] = value
        for key, kind in _SHARED.items():
            value = obj.get(key)
            if value is None:
                continue
            if not isinstance(value, kind):
                raise DialectError("must be an object" if kind is dict else "must be a string", key)
            sampling[key] = value
        hints: dict[str, JSON] = {"include_usage": _include_usage(obj)}
        for key in ("max_completion_tokens", "max_tokens"):
            cap = obj.get(key)
            if cap is not None:
                if isinstance(cap, bool) or not isinstance(cap, int):
                    raise DialectError("must be an integer", key)
                sampling["max_tokens"] = cap
                hints["max_key"] = key
                break
        stop = obj.get("stop")
        if isinstance(stop, str):
            sampling["stop"] = [stop]
        elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
            sampling["stop"] = stop
        elif stop is not None:
            raise DialectError("must be a string or a list of strings", "stop")
        effort = obj.get("reasoning_effort")
        if effort is not None and not isinstance(effort, str):
            raise DialectError("must be a string", "reasoning_effort")
        # "stream" stays in extras so that a same-dialect render keeps an explicit false
        extras = split_known(obj, _EXTRAS_KNOWN)
        raw_format = obj.get("response_format")
        output = None if raw_format is None else parse_openai_output_format(
            raw_format, "response_format", schema_at=_FORMAT_AT)
        if output is not None:
            del extras["response_format"]  # a {"type": "text"} stays, as plain text
        return ChatRequest(
            messages=_parse_messages(obj),
            stream=bool(stream),
            model=model,
            sampling=sampling,
            tools=_parse_tools(obj.get("tools")),
            tool_choice=_parse_tool_choice(obj.get("tool_choice"), obj.get("parallel_tool_calls")),
            reasoning=ReasoningRequest(effort=effort) if effort else None,
            output=output,
            extras=extras,
            extras_dialect=NAME,
            hints=hints,
        )

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = dict(req.extras) if same else {}
        out["model"] = req.model or model or "default"
        out["messages"] = [_render_message(m, same) for m in req.messages]
        sampling = req.sampling
        if sampling:
            for key in _SAMPLING_OUT:
                if key in sampling:
                    out[key] = sampling[key]
        if "temperature" not in out and req.context is not None:
            temperature = _override(req.context, "temperature")
            if temperature is not None:
                out["temperature"] = temperature
        if "stop" in sampling:
            out["stop"] = sampling["stop"]
        cap = sampling.get("max_tokens", max_tokens)
        if cap is not None:
            spelled = req.hints.get("max_key") if same else None
            out[spelled if isinstance(spelled, str) else "max_tokens"] = cap
        if req.reasoning is not None and (req.reasoning.effort or req.reasoning.enabled):
            # an effort the client said wins, as with the Responses dialect: Anthropic's
            # thinking turned off beside an output_config.effort still asks for that effort
            out["reasoning_effort"] = req.reasoning.effort or _effort_of(req.reasoning)
        if req.tools:
            out["tools"] = [_render_tool(t) for t in req.tools]
        if req.tool_choice is not None:
            choice = req.tool_choice
            if choice.mode == "tool":
                kind = "custom" if any(t.kind == "custom" and t.name == choice.name
                                       for t in req.tools) else "function"
                out["tool_choice"] = {"type": kind, kind: {"name": choice.name}}
            else:
                out["tool_choice"] = choice.mode
            if choice.parallel is not None and req.tools:
                out["parallel_tool_calls"] = choice.parallel
        if req.output is not None:
            out["response_format"] = openai_output_format(req.output, schema_at=_FORMAT_AT)
        if stream:
            out["stream"] = True
            if not same or not req.stream:
                # Usage is counted, and kept in a whole answer assembled from this stream; an
                # OpenAI client's own streamed request keeps its own choice.
                out["stream_options"] = {"include_usage": True}
        else:
            out.pop("stream_options", None)  # OpenAI rejects it unless streaming
            if (same and "stream" in req.extras) or req.stream:
                out["stream"] = False
        return out

    # --- whole answers -------------------------------------------------------------------------

    def parse_response(self, body: JSON) -> ChatResponse:
        obj = expect_object(body, "")
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices:
            raise DialectError("must be a non-empty list", "choices")
        choice = expect_object(choices[0], "choices[0]")
        message = expect_object(choice.get("message"), "choices[0].message")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise DialectError("must be a string", "choices[0].message.content")
        text = content if isinstance(content, str) else _parts_text(content)
        role = message.get("role")
        reason = choice.get("finish_reason")
        extras = split_known(obj, _RESPONSE_KEYS)
        extras["_choice"] = split_known(choice, _CHOICE_KEYS)
        usage = obj.get("usage")
        if isinstance(usage, dict):
            extras["_usage"] = usage
        if len(message) == 2 and isinstance(role, str) and isinstance(content, str):
            # a role and a text alone, nearly every answer: what the full reading below makes
            # of it (no calls, no reasoning, nothing else kept)
            answer = AssistantMessage(content=text, role=role, tool_calls=[], reasoning=[],
                                      extras={})
        else:
            calls = message.get("tool_calls")
            answer = AssistantMessage(
                content=text,
                role=role if isinstance(role, str) else "assistant",
                tool_calls=[] if calls is None else _parse_tool_calls(
                    calls, "choices[0].message.tool_calls"),
                reasoning=_reasoning_of(message),
                extras=split_known(message, _MESSAGE_KEYS),
            )
        return ChatResponse(
            messages=[answer],
            finish_reason=_FINISH_IN.get(reason, reason) if isinstance(reason, str) else None,
            usage=_usage(usage),
            id=_str(obj.get("id")),
            created=_int(obj.get("created")),
            model=_str(obj.get("model")),
            extras=extras,
            extras_dialect=NAME,
        )

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        same = resp.extras_dialect == NAME
        out: dict[str, Any] = dict(resp.extras) if same else {}
        kept_choice = out.pop("_choice", None)
        raw_usage = out.pop("_usage", None)
        message: dict[str, Any] = {}
        messages = resp.messages
        if len(messages) == 1 and messages[0].agent is None:
            # one message, nearly every answer: what the properties below read of it, without
            # their lists
            first = messages[0]
            calls, text, thoughts = first.tool_calls, first.content, first.reasoning
        else:
            calls, text, thoughts = resp.tool_calls, resp.text, resp.reasoning
        if same and messages:
            message.update(messages[0].extras)
        message["role"] = "assistant"
        message["content"] = text if text or not calls else None
        if thoughts:
            reasoning = "".join(r.text for r in thoughts)
            if reasoning:
                message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = [_render_call(c) for c in calls]
        reason = resp.finish_reason if same and resp.finish_reason else _finish_out(
            resp.finish_reason or ("tool_calls" if calls else None))
        choice = {**kept_choice, "message": message, "finish_reason": reason} if kept_choice \
            else {"index": 0, "logprobs": None, "message": message, "finish_reason": reason}
        # (the keys set in place on the extras' copy: the order a spread of them gives)
        out["id"] = resp.id or new_completion_id()
        out["object"] = out.get("object", "chat.completion")
        out["created"] = resp.created or now()
        out["model"] = resp.model or req.model or "unknown"
        out["choices"] = [choice]
        if raw_usage is not None:
            out["usage"] = raw_usage
        elif resp.usage is not None:
            out["usage"] = _render_usage(resp.usage)
        return out

    # --- errors --------------------------------------------------------------------------------

    def parse_error(self, body: JSON) -> ChatError | None:
        if isinstance(body, dict) and body.get("error") is not None:
            err = body["error"]
            e = ChatError(500, error_text(err))
            if isinstance(err, dict):
                e.code = _str(err.get("code"))
                e.type = _str(err.get("type"))
                e.param = _str(err.get("param"))
            return e
        return None

    def render_error(self, err: ChatError) -> JSON:
        return {"error": {
            "message": err.message,
            "type": err.type or _error_type(err.status),
            "param": err.param,
            "code": err.code,
        }}

    # --- streams -------------------------------------------------------------------------------

    def decoder(self) -> _Decoder:
        return _Decoder()

    def encoder(self, req: ChatRequest) -> _Encoder:
        return _Encoder(req.model, bool(req.hints.get("include_usage")) if
                        req.extras_dialect == NAME else False)


# --- request parts -------------------------------------------------------------------------------


def _parse_messages(obj: dict[str, JSON]) -> list[Message]:
    out: list[Message] = []
    for i, raw in enumerate(messages_of(obj)):
        plain = plain_message(raw)
        if plain is not None and plain.role != "tool":  # (a tool message needs its call's id)
            out.append(plain)
            continue
        where = f"messages[{i}]"
        m = expect_object(raw, where)
        role, parts = role_and_content(m, where, _parse_parts)
        content = m.get("content")
        name = m.get("name")
        if name is not None and not isinstance(name, str):
            raise DialectError("must be a string", f"{where}.name")
        call_id = m.get("tool_call_id")
        if role == "tool" and not isinstance(call_id, str):
            raise DialectError("is required for a tool message", f"{where}.tool_call_id")
        extras = split_known(m, _MESSAGE_KEYS)
        if content is None and "content" in m:
            extras["content"] = None  # a same-dialect render gives back null, not ""
        if isinstance(content, list):
            kept = [_part_extras(p) for p in content]
            if any(kept):
                extras["_parts"] = kept
        out.append(Message(
            role, parts, name=name,
            tool_calls=_parse_tool_calls(m.get("tool_calls"), f"{where}.tool_calls"),
            tool_call_id=call_id if isinstance(call_id, str) else None,
            reasoning=_reasoning_of(m),
            extras=extras,
        ))
    return out


def _parse_parts(content: list[JSON], where: str) -> list[Part]:
    out: list[Part] = []
    for j, p in enumerate(content):
        p = expect_object(p, f"{where}[{j}]")
        kind = p.get("type")
        if kind == "text":
            text = p.get("text")
            if not isinstance(text, str):
                raise DialectError("must be a string", f"{where}[{j}].text")
            out.append(TextPart(text))
        elif kind == "image_url":
            image = p.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise DialectError("must be a string", f"{where}[{j}].image_url.url")
            detail = image.get("detail") if isinstance(image, dict) else None
            out.append(ImagePart(url=url, detail=detail if isinstance(detail, str) else None))
        else:
            out.append(OtherPart(NAME, str(kind), p))
    return out


_PART_KEYS = {"text": frozenset({"type", "text"}), "image_url": frozenset({"type", "image_url"})}
"""The keys of a text or image part the canonical parts name."""


def _part_extras(p: JSON) -> dict[str, JSON] | None:
    """The keys of a text or image part no canonical field names (``prompt_cache_breakpoint``),
    kept for an upstream of this dialect."""
    kind = p.get("type") if isinstance(p, dict) else None
    known = _PART_KEYS.get(kind) if isinstance(kind, str) else None
    if known is None or not isinstance(p, dict):
        return None
    return {k: v for k, v in p.items() if k not in known} or None


def _render_parts(content: str | list[Part], kept: JSON = None) -> JSON:
    if isinstance(content, str):
        return content
    rests = kept if isinstance(kept, list) else []
    out: list[JSON] = []
    for j, p in enumerate(content):
        match p:
            case TextPart():
                rest = rests[j] if j < len(rests) and isinstance(rests[j], dict) else None
                out.append({**rest, "type": "text", "text": p.text} if rest
                           else {"type": "text", "text": p.text})
            case ImagePart():
                rest = rests[j] if j < len(rests) and isinstance(rests[j], dict) else None
                image: dict[str, JSON] = {"url": p.as_url()}
                if p.detail:
                    image["detail"] = p.detail
                out.append({**(rest or {}), "type": "image_url", "image_url": image})
            case OtherPart():
                if p.dialect == NAME:
                    out.append(p.raw)
    return out


def _parts_text(content: JSON) -> str:
    if not isinstance(content, list):
        return ""
    return "".join(p["text"] for p in content
                   if isinstance(p, dict) and p.get("type") == "text"
                   and isinstance(p.get("text"), str))


def _render_message(m: Message, same: bool) -> dict[str, Any]:
    kept = m.extras
    content = m.content
    if (content.__class__ is str and not kept and not m.tool_calls and m.name is None
            and m.tool_call_id is None and not m.reasoning):
        # a role and a text alone, nearly every message: what the full writing below gives
        return {"role": m.role, "content": content}
    wire: dict[str, Any]
    if not same or not kept:
        wire = {}
    elif "_parts" in kept:
        wire = {k: v for k, v in kept.items() if k != "_parts"}
    else:
        wire = dict(kept)
    wire["role"] = m.role
    if m.tool_calls and content == "" and "content" not in wire:
        wire["content"] = None
    elif not (same and content == "" and wire.get("content", "") is None):
        wire["content"] = content if isinstance(content, str) else _render_parts(
            content, kept.get("_parts") if same else None)
    if m.name is not None:
        wire["name"] = m.name
    if m.tool_calls:
        wire["tool_calls"] = [_render_call(c) for c in m.tool_calls]
    if m.tool_call_id is not None:
        wire["tool_call_id"] = m.tool_call_id
    if m.reasoning:
        reasoning = "".join(r.text for r in m.reasoning)
        if reasoning:
            wire["reasoning_content"] = reasoning
    return wire


def _parse_tools(raw: JSON) -> list[ToolDef]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", "tools")
    out: list[ToolDef] = []
    for i, t in enumerate(raw):
        t = expect_object(t, f"tools[{i}]")
        if t.get("type") == "custom":
            out.append(_parse_custom_tool(t, f"tools[{i}]"))
            continue
        if t.get("type", "function") != "function":
            out.append(ToolDef(name="", kind=str(t.get("type")), raw=t, dialect=NAME))
            continue
        fn = expect_object(t.get("function"), f"tools[{i}].function")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise DialectError("must be a non-empty string", f"tools[{i}].function.name")
        desc = fn.get("description")
        strict = fn.get("strict")
        out.append(ToolDef(name, desc if isinstance(desc, str) else None, fn.get("parameters"),
                           strict if isinstance(strict, bool) else None))
    return out


def _parse_custom_tool(t: dict[str, JSON], where: str) -> ToolDef:
    """A freeform tool, its format in the canonical (Responses) shape."""
    custom = expect_object(t.get("custom"), f"{where}.custom")
    name, desc, fmt = custom.get("name"), custom.get("description"), custom.get("format")
    if not isinstance(name, str) or not name:
        raise DialectError("must be a non-empty string", f"{where}.custom.name")
    if desc is not None and not isinstance(desc, str):
        raise DialectError("must be a string", f"{where}.custom.description")
    if fmt is not None:
        fmt = expect_object(fmt, f"{where}.custom.format")
        grammar = fmt.get("grammar")
        if fmt.get("type") == "grammar" and isinstance(grammar, dict):
            fmt = {"type": "grammar", **grammar}
    return ToolDef(name, desc, kind="custom", format=fmt, raw=t, dialect=NAME)


def _render_custom_tool(t: ToolDef) -> JSON:
    custom: dict[str, JSON] = {"name": t.name}
    if t.description is not None:
        custom["description"] = t.description
    fmt = t.format
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        # Chat Completions nests the grammar (CustomFormatGrammar), Responses does not
        fmt = {"type": "grammar", "grammar": {k: v for k, v in fmt.items() if k != "type"}}
    if fmt is not None:
        custom["format"] = fmt
    return {"type": "custom", "custom": custom}


def _render_tool(t: ToolDef) -> JSON:
    if t.kind == "custom":
        return _render_custom_tool(t)
    if t.kind != "function":
        return t.raw
    fn: dict[str, JSON] = {"name": t.name}
    if t.description is not None:
        fn["description"] = t.description
    fn["parameters"] = t.parameters if t.parameters is not None else {
        "type": "object", "properties": {}}
    if t.strict is not None:
        fn["strict"] = t.strict
    return {"type": "function", "function": fn}


def _parse_tool_choice(raw: JSON, parallel: JSON) -> ToolChoice | None:
    par = parallel if isinstance(parallel, bool) else None
    if raw is None:
        return ToolChoice("auto", parallel=par) if par is not None else None
    if raw in ("auto", "none", "required"):
        return ToolChoice(raw, parallel=par)
    if isinstance(raw, dict):
        fn = raw.get("custom" if raw.get("type") == "custom" else "function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if isinstance(name, str):
            return ToolChoice("tool", name, par)
    raise DialectError('must be "auto", "none", "required" or a named function', "tool_choice")


def _parse_tool_calls(raw: JSON, where: str) -> list[ToolCall]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", where)
    out: list[ToolCall] = []
    for i, c in enumerate(raw):
        c = expect_object(c, f"{where}[{i}]")
        if c.get("type") == "custom":
            out.append(_parse_custom_call(c, f"{where}[{i}]"))
            continue
        fn = expect_object(c.get("function"), f"{where}[{i}].function")
        cid, name, args = c.get("id"), fn.get("name"), fn.get("arguments")
        if not isinstance(cid, str):
            raise DialectError("must be a string", f"{where}[{i}].id")
        if not isinstance(name, str):
            raise DialectError("must be a string", f"{where}[{i}].function.name")
        if args is not None and not isinstance(args, str):
            raise DialectError("must be a string of JSON", f"{where}[{i}].function.arguments")
        out.append(ToolCall(cid, name, args or "{}"))
    return out


def _parse_custom_call(c: dict[str, JSON], where: str) -> ToolCall:
    custom = expect_object(c.get("custom"), f"{where}.custom")
    cid, name, text = c.get("id"), custom.get("name"), custom.get("input")
    if not isinstance(cid, str):
        raise DialectError("must be a string", f"{where}.id")
    if not isinstance(name, str):
        raise DialectError("must be a string", f"{where}.custom.name")
    if text is not None and not isinstance(text, str):
        raise DialectError("must be a string", f"{where}.custom.input")
    return ToolCall(cid, name, text or "", kind="custom")


def _render_call(c: ToolCall) -> JSON:
    if c.kind == "custom":
        return {"id": c.id, "type": "custom", "custom": {"name": c.name, "input": c.arguments}}
    return {"id": c.id, "type": "function",
            "function": {"name": c.name, "arguments": c.arguments}}


def _reasoning_of(message: dict[str, JSON]) -> list[Reasoning]:
    text = message.get("reasoning_content", message.get("reasoning"))
    return [Reasoning(text)] if isinstance(text, str) and text else []


_EFFORT_BY_BUDGET = ((2048, "low"), (8192, "medium"))


def _effort_of(r: ReasoningRequest) -> str:
    """A thinking budget as OpenAI's effort (the table is in docs/translation.md)."""
    if r.budget_tokens is None:
        return "medium"
    for limit, effort in _EFFORT_BY_BUDGET:
        if r.budget_tokens <= limit:
            return effort
    return "high"


def _include_usage(obj: dict[str, JSON]) -> bool:
    opts = obj.get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True


def _override(context: JSON, key: str) -> JSON:
    if isinstance(context, dict):
        overrides = context.get("overrides")
        if isinstance(overrides, dict):
            return overrides.get(key)
    return None


def _str(v: JSON) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: JSON) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _usage(v: JSON) -> Usage | None:
    if not isinstance(v, dict):
        return None
    prompt = v.get("prompt_tokens_details")
    completion = v.get("completion_tokens_details")
    into, out = v.get("prompt_tokens"), v.get("completion_tokens")
    return Usage(
        # (_int, in place for the two counts every usage has: a plain int is one test)
        input_tokens=into if into.__class__ is int else _int(into),
        output_tokens=out if out.__class__ is int else _int(out),
        cached_input_tokens=_int(prompt.get("cached_tokens")) if isinstance(prompt, dict)
        else None,
        reasoning_tokens=_int(completion.get("reasoning_tokens"))
        if isinstance(completion, dict) else None,
    )


def _render_usage(u: Usage) -> dict[str, JSON]:
    out: dict[str, JSON] = {"prompt_tokens": u.input_tokens or 0,
                            "completion_tokens": u.output_tokens or 0,
                            "total_tokens": u.total_tokens or 0}
    if u.cached_input_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": u.cached_input_tokens}
    if u.reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": u.reasoning_tokens}
    return out


# --- streams -------------------------------------------------------------------------------------


class _Decoder:
    __slots__ = ("_calls", "_done", "_failed", "_reason", "_started", "_usage")

    def __init__(self) -> None:
        self._started = False
        self._done = False
        self._failed = False
        self._reason: str | None = None
        self._usage: Usage | None = None
        self._calls: dict[int, int] = {}
        """The wire's tool call index -> the canonical one, for calls not yet ended."""

    def decode(self, payload: Any) -> list[StreamEvent]:
        if self._done or self._failed:
            return []
        if not isinstance(payload, dict):  # (a RawData is a tuple)
            if isinstance(payload, RawData):
                if payload.text.strip() == "[DONE]":
                    self._done = True
                    finish = StreamFinish(self._reason or "stop", self._usage)
                    return [*self._end_calls(), finish] if self._calls else [finish]
                raise DialectError("an event's data is not JSON", "stream")
            raise DialectError("a chunk must be an object", "stream")
        if payload.get("error") is not None:
            self._failed = True
            err = payload["error"]
            code = err.get("code") if isinstance(err, dict) else None
            return [StreamError(error_text(err), code if isinstance(code, str) else None)]
        events: list[StreamEvent] = []
        if not self._started:
            self._started = True
            events.append(StreamStart(id=_str(payload.get("id")),
                                      created=_int(payload.get("created")),
                                      model=_str(payload.get("model"))))
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        choices = payload.get("choices")
        if isinstance(choices, list) and choices:
            choice = choices[0]
            if isinstance(choice, dict):
                delta = choice.get("delta")
                if isinstance(delta, dict) and delta:  # (the finish chunk's is empty)
                    text = delta.get("content")
                    if text is not None and (len(delta) == 1
                                             or (len(delta) == 2 and "role" in delta)):
                        # a piece of text alone (nearly every chunk), or beside the role (the
                        # first chunk): what _delta makes of it
                        if isinstance(text, str) and text:
                            events.append(TextDelta(text))
                    else:
                        self._delta(delta, events)
                reason = choice.get("finish_reason")
                if isinstance(reason, str):
                    self._reason = _finish_in(reason)
                    if self._calls:
                        events.extend(self._end_calls())
        return events

    def _delta(self, delta: dict[str, Any], events: list[StreamEvent]) -> None:
        thought = delta.get("reasoning_content", delta.get("reasoning"))
        if isinstance(thought, str) and thought:
            events.append(ReasoningDelta(thought))
        text = delta.get("content")
        if isinstance(text, str) and text:
            events.append(TextDelta(text))
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for pos, call in enumerate(calls):
                if isinstance(call, dict):
                    self._call(call, pos, events)

    def _call(self, call: dict[str, Any], pos: int, events: list[StreamEvent]) -> None:
        wire = call.get("index")
        wire = wire if isinstance(wire, int) else pos
        # a freeform call's pieces are under "custom" (name, input), as OpenAI streams them
        custom = isinstance(call.get("custom"), dict) or call.get("type") == "custom"
        fn = call.get("custom" if custom else "function")
        fn = fn if isinstance(fn, dict) else {}
        index = self._calls.get(wire)
        if index == -1:
            raise DialectError("a tool call's arguments continue after it ended", "stream")
        if index is None:
            name, cid = fn.get("name"), call.get("id")
            if not isinstance(name, str):
                raise DialectError("a tool call's first chunk names no function", "stream")
            index = len(self._calls)  # ended calls stay in the map, so this counts every call
            self._calls[wire] = index
            events.append(ToolCallStart(index, cid if isinstance(cid, str) else
                                        f"call_{index}", name,
                                        "custom" if custom else "function"))
        args = fn.get("input" if custom else "arguments")
        if isinstance(args, str) and args:
            events.append(ToolCallDelta(index, args))

    def _end_calls(self) -> list[StreamEvent]:
        ended: list[StreamEvent] = [ToolCallEnd(i) for i in sorted(self._calls.values())
                                    if i >= 0]
        # ended calls keep their wire index (a late fragment is then an error, not a new call)
        self._calls = {w: -1 for w in self._calls}
        return ended

    def end(self) -> list[StreamEvent]:
        if self._done or self._failed:
            return []
        self._done = True
        if self._reason is not None:
            # Tolerated: a server that finished its answer but left out [DONE].
            return [*self._end_calls(), StreamFinish(self._reason, self._usage)]
        return [StreamError("the upstream stream ended before it finished")]


_TEXT_HEAD = b',"choices":[{"index":0,"delta":{"content":'
_TEXT_TAIL = b'},"logprobs":null,"finish_reason":null}]}'
"""How :meth:`_Encoder._chunk` writes a text chunk around its text (a JSON string), after the
prefix."""
_PLAIN_TEXT_TAIL = b'"' + _TEXT_TAIL
"""The same after a text's string body (``plain_texts``)."""
_START_TAIL = b',"choices":' + orjson.dumps(
    [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
      "finish_reason": None}]) + b"}"
"""The stream's first chunk after the prefix (:meth:`_Encoder._chunk` of the role), written once."""
_FINISH_TAILS = {reason: b',"choices":' + orjson.dumps(
    [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}]) + b"}"
    for reason in _KNOWN_FINISH}
"""The finish chunk after the prefix, by finish reason (:func:`_finish_out` gives only these)."""


class _Encoder:
    __slots__ = ("_agent", "_calls", "_closed", "_created", "_custom", "_first", "_id",
                 "_include_usage", "_model", "_prefix", "_spoke", "_text_head")

    def __init__(self, model: str | None, include_usage: bool) -> None:
        # (the id is minted when the first chunk is written, if the upstream named none)
        self._id: str | None = None
        self._created = now()
        self._model = model or "unknown"
        self._include_usage = include_usage
        self._first = True
        self._closed = False
        self._agent: str | None = None
        self._spoke = False  # any text sent yet (the next agent's header starts a paragraph)
        self._calls = 0  # tool calls started: the finish reason defaults to tool_calls
        self._custom: set[int] = set()
        """The indexes of freeform calls (their deltas go under ``custom``)."""
        self._prefix = b""
        self._text_head = b""
        """The prefix and :data:`_TEXT_HEAD`: a text chunk up to its text."""

    def _head(self) -> bytes:
        """The chunks' common start (their id, created and model), made on the first chunk."""
        if not self._prefix:
            if self._id is None:
                self._id = new_completion_id()
            self._prefix = orjson.dumps({
                "id": self._id, "object": "chat.completion.chunk",
                "created": self._created, "model": self._model,
            })[:-1]
            self._text_head = self._prefix + _TEXT_HEAD
        return self._prefix

    def _chunk(self, delta: dict[str, Any], reason: str | None = None) -> bytes:
        return self._head() + b',"choices":' + orjson.dumps(
            [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]) + b"}"

    def plain_texts(self, texts: list[bytes]) -> list[Payload] | None:
        """:meth:`gateway.dialects.base.StreamEncoder` ``plain_texts``: once the stream has
        begun."""
        if self._first or self._closed or self._agent is not None:
            return None
        self._spoke = True
        head = self._text_head + b'"'
        return [b"".join((head, t, _PLAIN_TEXT_TAIL)) for t in texts]

    def _start(self) -> list[Payload]:
        if not self._first:
            return []
        self._first = False
        return [self._head() + _START_TAIL]

    def encode(self, event: StreamEvent) -> list[Payload]:
        if self._closed:
            return []
        if event.__class__ is TextDelta and not self._first and event.agent == self._agent:
            # a piece of text once the stream has begun, nearly every event: the bytes the
            # TextDelta case below writes (_chunk of {"content": text})
            self._spoke = True
            return [b"".join((self._text_head, orjson.dumps(event.text), _TEXT_TAIL))]
        match event:  # (the cases each stream has first, the finish among them)
            case StreamStart():
                if self._first:
                    if event.id:
                        self._id = event.id
                    if event.created:
                        self._created = event.created
                    if event.model:  # the model that answered, as in a whole answer
                        self._model = event.model
                return self._start()
            case TextDelta():
                out = self._start()
                text = event.text
                if event.agent != self._agent:
                    text = agent_header(event.agent, first=not self._spoke) + text
                    self._agent = event.agent
                self._spoke = True
                out.append(self._chunk({"content": text}))
                return out
            case StreamFinish():
                out = self._start()  # (the prefix is made by then)
                self._closed = True
                reason = event.reason or ("tool_calls" if self._calls else None)
                out.append(self._prefix + _FINISH_TAILS[_finish_out(reason)])
                if self._include_usage and event.usage is not None:
                    out.append(self._prefix + b',"choices":[],"usage":'
                               + orjson.dumps(_render_usage(event.usage)) + b"}")
                out.append(_DONE)
                return out
            case ReasoningDelta():
                out = self._start()
                if event.text:
                    out.append(self._chunk({"reasoning_content": event.text}))
                return out
            case ToolCallStart():
                out = self._start()
                self._calls += 1
                if event.kind == "custom":
                    self._custom.add(event.index)
                    out.append(self._chunk({"tool_calls": [{
                        "index": event.index, "id": event.id, "type": "custom",
                        "custom": {"name": event.name, "input": ""}}]}))
                    return out
                out.append(self._chunk({"tool_calls": [{
                    "index": event.index, "id": event.id, "type": "function",
                    "function": {"name": event.name, "arguments": ""}}]}))
                return out
            case ToolCallDelta():
                if event.index in self._custom:
                    return [self._chunk({"tool_calls": [{
                        "index": event.index, "custom": {"input": event.arguments}}]})]
                return [self._chunk({"tool_calls": [{
                    "index": event.index, "function": {"arguments": event.arguments}}]})]
            case ToolCallEnd() | ContextUpdate():
                return []
            case StreamError():
                self._closed = True
                return [orjson.dumps({"error": {
                    "message": event.message, "type": _error_type(event.status),
                    "param": None, "code": event.code}})]
            case _:
                assert_never(event)
