"""``openai-responses``: the OpenAI Responses API, ``POST /v1/responses`` (see
specs/openai-responses.md), both sides.

Requests: ``input`` is a string (one user message) or a list of items: messages with
``input_text`` / ``input_image`` / ``input_file`` parts, replayed assistant ``output_text``
messages, ``function_call`` and ``function_call_output``, ``reasoning``. One canonical assistant
message is one assistant turn: its reasoning items, then its output message, then its function
calls, which is also the order they render back in. ``instructions`` is the leading system
message. Function tools are flat (``{"type": "function", "name", …}``), freeform tools
``{"type": "custom", "name", "format"}`` (their calls ``custom_tool_call`` items, their results
``custom_tool_call_output``), and a ``namespace`` tool's members are canonical tools naming it;
built-in tools are kept verbatim for Responses upstreams only.

Stored state: ``previous_response_id`` and ``item_reference`` items are parsed and kept for a
Responses upstream (that stores them itself); where the gateway keeps the answers instead
(:class:`_Stored`, the route's ``responses_state``), the exchange resolves them before this
module parses the request, and the answer says ``store`` and ``previous_response_id`` as kept.
``conversation`` and ``background`` are refused with a 400 naming the field. ``store`` (the API's
default is ``true``) goes on unchanged to a Responses upstream; an answer the gateway does not keep
says ``"store": false``; and a request rendered for a Responses upstream from another dialect sends
``store: false``, what its client's API does by default.

Answers: the ``output`` items are folded into one assistant message (all ``output_text`` and
``refusal`` text, the reasoning items, the function calls); the items as they came are kept and
given back to a Responses client as long as the folded message is unchanged. ``status`` /
``incomplete_details`` map to the canonical finish reason by table. ``url_citation`` and
``file_citation`` annotations are the answer's citations, and citations go back as annotations
spanning the whole text (the other dialects know no positions).

Streams: named SSE events, each with ``sequence_number`` 0, 1, 2, …; see :class:`_Encoder` for the
order both SDKs' accumulators hold a stream to, and :class:`_Decoder` for what it reads.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Final, assert_never

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
    OutputFormat,
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
    now,
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
from gateway.dialects.shared import openai_output_format, parse_openai_output_format
from gateway.dialects.stored import References, StoredAnswer, StoredResponses
from gateway.errors import DialectError
from gateway.framing import Framing, Named, Payload, RawData, Slot, TextPath, TextRun

__all__ = ["OpenAIResponsesDialect"]

NAME = "openai-responses"

_STATEFUL = {
    "conversation": "refers to a stored conversation",
}
_SHARED: dict[str, type] = {
    "safety_identifier": str, "prompt_cache_key": str, "prompt_cache_retention": str,
    "service_tier": str, "metadata": dict}
"""Fields Chat Completions has too, same name and meaning: canonical sampling keys of the same
name, with the type they must have (``text.verbosity`` is its ``verbosity``, read apart)."""
_RENDERED_SAMPLING = ("temperature", "top_p", "user", *_SHARED)
"""The canonical sampling keys a request gives on under their own name."""
_SAMPLING_KEYS = frozenset({"temperature", "top_p", "user", "max_output_tokens", *_SHARED})
"""What :func:`_parse_sampling` reads."""
_REQUEST_KEYS = frozenset({
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
    "reasoning", "max_output_tokens", "temperature", "top_p", "user", *_SHARED})
_RESPONSE_KEYS = frozenset({"id", "created_at", "model", "output", "usage", "status",
                            "incomplete_details"})
_TOOL_KEYS = frozenset({"type", "name", "description", "parameters", "strict"})
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}
# A text delta's JSON, put together around its sequence number, item and text (_Encoder._text)
_TEXT_DELTA: Final = "response.output_text.delta"
_TEXT_DELTA_HEAD: Final = b'{"type":"response.output_text.delta","sequence_number":'
_TEXT_DELTA_TAIL: Final = b',"logprobs":[]}'
_QUOTED_DELTA_TAIL: Final = b'"' + _TEXT_DELTA_TAIL
# status / incomplete_details.reason <-> the canonical finish reason (docs/translation.md)
_FINISH_BY_STATUS = {"completed": "stop", "failed": "error", "cancelled": "error"}
_FINISH_BY_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}
_INCOMPLETE_BY_FINISH = {v: k for k, v in _FINISH_BY_INCOMPLETE.items()}
# ResponseError.code's documented values; a gateway code (UNSUPPORTED, …) is a server_error there
_RESPONSE_ERROR_CODES = frozenset({
    "server_error", "rate_limit_exceeded", "invalid_prompt", "vector_store_timeout",
    "invalid_image", "invalid_image_format", "invalid_base64_image", "invalid_image_url",
    "image_too_large", "image_too_small", "image_parse_error", "image_content_policy_violation",
    "invalid_image_mode", "image_file_too_large", "unsupported_image_media_type",
    "empty_image_file", "failed_to_download_image", "image_file_not_found"})
# a thinking budget as an effort (the same table as the openai dialect's, docs/translation.md)
_EFFORT_BY_BUDGET = ((2048, "low"), (8192, "medium"))
_KEPT = "kept"
"""The hint under which the exchange notes that the gateway keeps this request's state."""
_SEPARATOR = "\n\n"
"""Between a reasoning item's summary parts once they are one canonical reasoning text."""


def _new_id(prefix: str) -> str:
    return prefix + random_hex()


def _response_id(given: str | None) -> str:
    """A Responses id: the upstream's when it is one, else a new one (another API's id, such as
    ``chatcmpl-…``, would look like a response the client could refer to)."""
    return given if given and given.startswith("resp_") else _new_id("resp_")


def _error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def _str(v: JSON) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: JSON) -> int | None:
    if type(v) is int:  # (nearly every value: a JSON integer, which no bool is)
        return v
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _public(extras: dict[str, JSON]) -> dict[str, JSON]:
    """A same-dialect object's kept keys, without the private ones this module adds."""
    return {k: v for k, v in extras.items() if k[:1] != "_"}  # (k[:1]: no method call)


class OpenAIResponsesDialect(SamplesFromPackage):
    name = NAME
    summary = "the OpenAI Responses API: input/output items, typed SSE events"
    capabilities = Capabilities(citations=True, usage_whole=True, usage_stream=True, tools=True,
                                custom_tools=True, tool_namespaces=True,
                                images=True, reasoning=True, reasoning_replay="own",
                                structured_output=frozenset({"json_schema", "json_object"}))
    # (the API finds a replayed reasoning item by its id: another provider's has none)
    framing: Framing = "sse"
    named_events = True
    stream_content_type = "text/event-stream"
    stream_accept = SSE_ACCEPT
    cumulative_stream = False
    # Each event has its own sequence_number: the template of a text frame holds a slot for it
    # (the decoder reads no number; its encoder follows the one a Slot carries).
    text_path: TextPath | None = ("delta",)
    counter_path: TextPath | None = ("sequence_number",)
    stream_path: str | None = None
    stream_by_accept = False
    default_path = "/v1/responses"
    route_options = None
    stored_responses: ClassVar[StoredResponses | None] = None  # set below the class (_Stored)
    models_path: str | None = "/v1/models"  # the same OpenAI SDK lists where it posts
    models_header: str | None = None
    token_count: TokenCount | None = TokenCount(
        # POST /v1/responses/input_tokens (openai-python ``responses.input_tokens.count``,
        # ``InputTokenCountResponse``): no stream, store, sampling or output cap
        "/input_tokens", frozenset({"model", "input", "instructions", "tools", "tool_choice",
                                    "parallel_tool_calls", "reasoning", "text", "truncation"}),
        answer=(("object", "response.input_tokens"),))

    def render_models(self, names: Sequence[str]) -> JSON:
        # https://platform.openai.com/docs/api-reference/models/list (one API for both)
        return {"object": "list", "data": [
            {"id": n, "object": "model", "created": 0, "owned_by": "chat-gateway"}
            for n in names]}

    # --- requests ------------------------------------------------------------------------------

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = expect_object(body, "")
        for key, why in _STATEFUL.items():
            if obj.get(key) is not None:
                raise DialectError(f"{why}, which this gateway does not keep; send the whole "
                                   "conversation in input instead", key)
        if obj.get("background") is True:
            raise DialectError("background responses are stored to be polled, which this "
                               "gateway does not do", "background")
        model = obj.get("model")
        if model is not None and not isinstance(model, str):
            raise DialectError("must be a string", "model")
        stream = obj.get("stream", False)
        if stream is not None and not isinstance(stream, bool):
            raise DialectError("must be a boolean", "stream")
        store = obj.get("store")
        if store is not None and not isinstance(store, bool):
            raise DialectError("must be a boolean", "store")
        previous = obj.get("previous_response_id")
        if previous is not None and not isinstance(previous, str):
            raise DialectError("must be a string", "previous_response_id")
        hints: dict[str, JSON] = {}
        messages: list[Message] = []
        instructions = obj.get("instructions")
        if isinstance(instructions, str):
            messages.append(Message("system", instructions, extras={"_instructions": True}))
        elif instructions is not None:
            raise DialectError("must be a string", "instructions")
        raw_input = obj.get("input")
        if isinstance(raw_input, str):
            hints["input"] = "string"
            messages.append(Message("user", raw_input))
        elif isinstance(raw_input, list):
            messages.extend(_parse_items(raw_input))
        elif raw_input is not None:
            raise DialectError(f"must be a string or a list of items, not {kind_of(raw_input)}",
                               "input")
        if not messages:
            raise DialectError("is required", "input")
        choice, raw_choice = _parse_tool_choice(obj.get("tool_choice"),
                                                obj.get("parallel_tool_calls"))
        if raw_choice is not None:
            hints["tool_choice"] = raw_choice
        elif "tool_choice" not in obj:
            hints["tool_choice"] = None  # parallel_tool_calls alone: no tool_choice to render
        reasoning, reasoning_rest = _parse_reasoning(obj.get("reasoning"))
        if reasoning_rest:
            hints["reasoning"] = reasoning_rest
        extras = split_known(obj, _REQUEST_KEYS)
        output = _parse_text_format(obj.get("text"), extras)
        sampling = _parse_sampling(obj)
        verbosity = _take_verbosity(extras)
        if verbosity is not None:
            sampling["verbosity"] = verbosity
        return ChatRequest(
            messages=messages,
            stream=bool(stream),
            model=model,
            sampling=sampling,
            tools=_parse_tools(obj.get("tools")),
            tool_choice=choice,
            reasoning=reasoning,
            output=output,
            # "stream" and "store" stay in extras: a Responses upstream gets them as they came
            extras=extras,
            extras_dialect=NAME,
            hints=hints,
        )

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = dict(req.extras) if same else {}
        out["model"] = req.model or model or "default"
        messages = req.messages
        if messages and _is_instructions(messages[0], same):
            out["instructions"] = _plain_text(messages[0].content)
            messages = messages[1:]
        only = messages[0] if len(messages) == 1 else None
        if (same and req.hints.get("input") == "string" and only is not None
                and only.role == "user" and isinstance(only.content, str) and not only.extras):
            out["input"] = only.content
        else:
            out["input"] = _render_items(messages, same)
        for key in _RENDERED_SAMPLING:
            if key in req.sampling:
                out[key] = req.sampling[key]
        cap = req.sampling.get("max_tokens", max_tokens)
        if cap is not None:
            out["max_output_tokens"] = cap
        reasoning = _render_reasoning(req.reasoning, req.hints.get("reasoning") if same else None)
        if reasoning is not None:
            out["reasoning"] = reasoning
        if req.tools:
            out["tools"] = _render_tools(req.tools, same)
        choice = req.tool_choice
        if choice is not None:
            if not (same and "tool_choice" in req.hints and req.hints["tool_choice"] is None):
                out["tool_choice"] = _render_tool_choice(
                    choice, req.hints.get("tool_choice") if same else None)
            if choice.parallel is not None and (same or req.tools):
                out["parallel_tool_calls"] = choice.parallel
        if req.output is not None:
            out["text"] = _text_config(req.output, out.get("text"))
        verbosity = req.sampling.get("verbosity")
        if verbosity is not None:
            text = out.get("text")
            out["text"] = {**(text if isinstance(text, dict) else {}), "verbosity": verbosity}
        if not same:
            # The client's API stores nothing unless asked (Chat Completions' store defaults to
            # false); OpenAI's Responses API would keep every answer by default.
            out["store"] = False
        if stream:
            out["stream"] = True
        else:
            out.pop("stream_options", None)  # only valid with stream: true
            if (same and "stream" in req.extras) or req.stream:
                out["stream"] = False
        return out

    # --- whole answers -------------------------------------------------------------------------

    def parse_response(self, body: JSON) -> ChatResponse:
        obj = expect_object(body, "")
        output = obj.get("output")
        if not isinstance(output, list):
            raise DialectError(f"must be a list, not {kind_of(output)}", "output")
        folded = _fold_output(output)
        extras = split_known(obj, _RESPONSE_KEYS)
        extras["_output"] = output
        extras["_digest"] = _digest(folded.message)
        if isinstance(obj.get("usage"), dict):
            extras["_usage"] = obj["usage"]
        context = context_with_citations(folded.citations)
        if context is not None:
            extras["_context"] = context
        return ChatResponse(
            messages=[folded.message],
            context=context,
            finish_reason=_finish_of(obj.get("status"), obj.get("incomplete_details"),
                                     bool(folded.message.tool_calls)),
            usage=_usage_of(obj.get("usage")),
            id=_str(obj.get("id")),
            created=_int(obj.get("created_at")),
            model=_str(obj.get("model")),
            extras=extras,
            extras_dialect=NAME,
        )

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        same = resp.extras_dialect == NAME
        extras = resp.extras if same else {}
        calls = resp.tool_calls
        text = resp.text
        if (same and extras.get("_digest") == _digest_of(text, calls, resp.reasoning)
                and extras.get("_context") == resp.context):
            output = extras["_output"]  # the items as they came say the same
        else:
            output = _render_output(resp, text, calls)
        status, details = _status_of(resp.finish_reason or ("tool_calls" if calls else "stop"))
        out: dict[str, Any] = {
            "id": _response_id(resp.id) if not same else resp.id or _new_id("resp_"),
            "object": "response",
            "created_at": resp.created or now(),
            "status": status,
            "error": None,
            "incomplete_details": details,
        }
        out.update(_public(extras) if same else _echo(req))
        kept = req.hints.get(_KEPT)
        if same and kept:  # the gateway keeps it, whatever the upstream said of its own store
            out["store"] = bool(kept.get("store"))
            out["previous_response_id"] = kept.get("previous_response_id")
        if status == "failed":
            out["error"] = _failure("the upstream reported an error", None)
        out["status"] = status
        out["incomplete_details"] = details
        out["model"] = resp.model or req.model or "unknown"
        out["output"] = output
        raw_usage = extras.get("_usage")
        if raw_usage is not None and _usage_of(raw_usage) == resp.usage:
            out["usage"] = raw_usage
        else:
            out["usage"] = _usage_json(resp.usage) if resp.usage is not None else None
        return out

    # --- errors --------------------------------------------------------------------------------

    def parse_error(self, body: JSON) -> ChatError | None:
        """An error body, or a whole response whose ``status`` is ``failed`` (its ``error``)."""
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
        return _Encoder(req)


# --- request parts -------------------------------------------------------------------------------


def _parse_sampling(obj: dict[str, JSON]) -> dict[str, JSON]:
    sampling: dict[str, JSON] = {}
    if obj.keys().isdisjoint(_SAMPLING_KEYS):  # (most requests set none: one look for all)
        return sampling
    for key in ("temperature", "top_p"):
        value = obj.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DialectError("must be a number", key)
        sampling[key] = value
    user = obj.get("user")
    if user is not None:
        if not isinstance(user, str):
            raise DialectError("must be a string", "user")
        sampling["user"] = user
    cap = obj.get("max_output_tokens")
    if cap is not None:
        if isinstance(cap, bool) or not isinstance(cap, int):
            raise DialectError("must be an integer", "max_output_tokens")
        sampling["max_tokens"] = cap
    for key, kind in _SHARED.items():
        value = obj.get(key)
        if value is None:
            continue
        if not isinstance(value, kind):
            raise DialectError("must be an object" if kind is dict else "must be a string", key)
        sampling[key] = value
    return sampling


def _take_verbosity(extras: dict[str, JSON]) -> str | None:
    """``text.verbosity`` (Chat Completions' ``verbosity``), taken out of the ``text`` kept in
    ``extras`` (what is left of it stays there)."""
    text = extras.get("text")
    if not isinstance(text, dict):
        return None
    verbosity = text.get("verbosity")
    if verbosity is None:
        return None
    if not isinstance(verbosity, str):
        raise DialectError("must be a string", "text.verbosity")
    rest = {k: v for k, v in text.items() if k != "verbosity"}
    if rest:
        extras["text"] = rest
    else:
        del extras["text"]
    return verbosity


def _parse_reasoning(raw: JSON) -> tuple[ReasoningRequest | None, dict[str, JSON]]:
    """The canonical request, and the keys it has no field for (kept for a Responses upstream)."""
    if raw is None:
        return None, {}
    obj = expect_object(raw, "reasoning")
    effort, summary = obj.get("effort"), obj.get("summary")
    if effort is not None and not isinstance(effort, str):
        raise DialectError("must be a string", "reasoning.effort")
    if summary is not None and not isinstance(summary, str):
        raise DialectError("must be a string", "reasoning.summary")
    rest = split_known(obj, frozenset({"effort", "summary"}))
    return ReasoningRequest(effort=effort, summary=summary, enabled=effort != "none"), rest


def _render_reasoning(r: ReasoningRequest | None, rest: JSON) -> dict[str, JSON] | None:
    if r is None:
        return None
    out: dict[str, JSON] = dict(rest) if isinstance(rest, dict) else {}
    if r.effort is not None:
        out["effort"] = r.effort
    elif not r.enabled:
        # Turned off in a dialect with no effort of its own: asking for none would be refused by
        # models that always reason, so the model's default it is.
        return out or None
    elif r.budget_tokens is not None:
        out["effort"] = _effort_of(r.budget_tokens)
    if r.summary is not None:
        out["summary"] = r.summary
    return out


def _effort_of(budget: int) -> str:
    for limit, effort in _EFFORT_BY_BUDGET:
        if budget <= limit:
            return effort
    return "high"


def _parse_tools(raw: JSON) -> list[ToolDef]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", "tools")
    out: list[ToolDef] = []
    for i, t in enumerate(raw):
        t = expect_object(t, f"tools[{i}]")
        kind = t.get("type")
        if kind == "namespace":
            out.extend(_parse_namespace(t, f"tools[{i}]"))
        elif kind in ("function", "custom"):
            out.append(_parse_tool(t, f"tools[{i}]"))
        elif isinstance(kind, str):
            name = t.get("name")
            out.append(ToolDef(name if isinstance(name, str) else "", kind=kind, raw=t,
                               dialect=NAME))
        else:
            raise DialectError("must be a string", f"tools[{i}].type")
    return out


def _parse_namespace(t: dict[str, JSON], where: str) -> list[ToolDef]:
    """A ``namespace`` tool: its functions and freeform tools, each naming the group."""
    name, desc, tools = t.get("name"), t.get("description"), t.get("tools")
    if not isinstance(name, str) or not name:
        raise DialectError("must be a non-empty string", f"{where}.name")
    if desc is not None and not isinstance(desc, str):
        raise DialectError("must be a string", f"{where}.description")
    if not isinstance(tools, list):
        raise DialectError(f"must be a list, not {kind_of(tools)}", f"{where}.tools")
    out: list[ToolDef] = []
    for j, member in enumerate(tools):
        member = expect_object(member, f"{where}.tools[{j}]")
        if member.get("type") not in ("function", "custom"):
            raise DialectError('must be "function" or "custom"', f"{where}.tools[{j}].type")
        out.append(replace(_parse_tool(member, f"{where}.tools[{j}]"), namespace=name,
                           namespace_description=desc))
    return out


def _parse_tool(t: dict[str, JSON], where: str) -> ToolDef:
    """A ``function`` or ``custom`` tool (raw keeps the keys no field names, such as
    ``defer_loading``, for a Responses upstream)."""
    name, desc = t.get("name"), t.get("description")
    if not isinstance(name, str) or not name:
        raise DialectError("must be a non-empty string", f"{where}.name")
    if desc is not None and not isinstance(desc, str):
        raise DialectError("must be a string", f"{where}.description")
    if t.get("type") == "custom":
        fmt = t.get("format")
        if fmt is not None and not isinstance(fmt, dict):
            raise DialectError("must be an object", f"{where}.format")
        return ToolDef(name, desc, kind="custom", format=fmt, raw=t, dialect=NAME)
    strict = t.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise DialectError("must be a boolean", f"{where}.strict")
    params = t.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise DialectError("must be a JSON Schema object", f"{where}.parameters")
    return ToolDef(name, desc, params, strict, raw=t, dialect=NAME)


def _render_tools(tools: list[ToolDef], same: bool) -> list[JSON]:
    """The wire tools, a namespace's tools (consecutive, as they were parsed) in one
    ``namespace`` tool."""
    out: list[JSON] = []
    group: dict[str, JSON] | None = None
    for t in tools:
        wire = _render_tool(t, same)
        if t.namespace is None or t.kind not in ("function", "custom"):
            group = None
            out.append(wire)
            continue
        if group is None or group["name"] != t.namespace:
            group = {"type": "namespace", "name": t.namespace,
                     "description": t.namespace_description or "", "tools": []}
            out.append(group)
        members = group["tools"]
        assert isinstance(members, list)
        members.append(wire)
    return out


def _render_tool(t: ToolDef, same: bool) -> JSON:
    if t.kind == "custom":
        return _render_custom_tool(t, same)
    if t.kind != "function":
        return t.raw
    own = same and t.dialect == NAME and isinstance(t.raw, dict)
    wire: dict[str, JSON] = ({k: v for k, v in t.raw.items() if k not in _TOOL_KEYS}
                             if own else {})
    wire["type"] = "function"
    wire["name"] = t.name
    if t.description is not None:
        wire["description"] = t.description
    if own and "parameters" in t.raw:
        wire["parameters"] = t.parameters
    elif not own:
        wire["parameters"] = t.parameters if t.parameters is not None else {
            "type": "object", "properties": {}}
    if t.strict is not None:
        wire["strict"] = t.strict
    elif not own:
        # Unsaid, the Responses API makes a schema strict (every property required), where the
        # other APIs leave it as written: say false to keep the client's meaning.
        wire["strict"] = False
    return wire


def _render_custom_tool(t: ToolDef, same: bool) -> JSON:
    own = same and t.dialect == NAME and isinstance(t.raw, dict)
    wire: dict[str, JSON] = ({k: v for k, v in t.raw.items()
                              if k not in ("type", "name", "description", "format")}
                             if own else {})
    wire["type"] = "custom"
    wire["name"] = t.name
    if t.description is not None:
        wire["description"] = t.description
    if t.format is not None:
        wire["format"] = t.format
    return wire


def _parse_tool_choice(raw: JSON, parallel: JSON) -> tuple[ToolChoice | None, JSON]:
    """The canonical choice, and the wire value when the canonical one cannot say it all
    (``allowed_tools``, a built-in tool), for a Responses upstream."""
    par = parallel if isinstance(parallel, bool) else None
    if parallel is not None and par is None:
        raise DialectError("must be a boolean", "parallel_tool_calls")
    if raw is None:
        return (ToolChoice("auto", parallel=par) if par is not None else None), None
    if raw in ("auto", "none", "required"):
        return ToolChoice(raw, parallel=par), None
    if isinstance(raw, dict):
        kind = raw.get("type")
        if kind == "function" and isinstance(raw.get("name"), str):
            return ToolChoice("tool", raw["name"], par), None
        if kind == "custom" and isinstance(raw.get("name"), str):
            return ToolChoice("tool", raw["name"], par), raw
        if kind == "allowed_tools" and raw.get("mode") in ("auto", "required"):
            return ToolChoice(raw["mode"], parallel=par), raw
        if isinstance(kind, str):
            return ToolChoice("auto", parallel=par), raw  # a built-in tool's own choice
    raise DialectError('must be "auto", "none", "required" or {"type": "function", "name": …}',
                       "tool_choice")


def _render_tool_choice(choice: ToolChoice, raw: JSON) -> JSON:
    if raw is not None:
        return raw
    if choice.mode == "tool":
        return {"type": "function", "name": choice.name}
    return choice.mode


# Input items. A canonical assistant message is one turn: reasoning items, an output message,
# function calls, in that order; an item that would break the order begins the next turn.
_TURN_RANK = {"reasoning": 0, "message": 1, "function_call": 2, "custom_tool_call": 2}
_CALL_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _parse_items(items: list[JSON]) -> list[Message]:
    out: list[Message] = []
    turn: Message | None = None  # the assistant turn the next assistant items may join
    rank = -1
    for i, item in enumerate(items):
        where = f"input[{i}]"
        item = expect_object(item, where)
        kind = item.get("type", "message")
        if not isinstance(kind, str):  # before it is looked up (a list is no dict key)
            raise DialectError("must be a string", f"{where}.type")
        if kind == "message" and item.get("role") != "assistant":
            out.append(_parse_message(item, where))
            turn = None
            continue
        if kind in _TURN_RANK:
            if turn is None or _TURN_RANK[kind] < rank or (kind == "message" and rank == 1):
                turn = Message("assistant", "")
                out.append(turn)
            rank = _TURN_RANK[kind]
            if kind == "message":
                parsed = _parse_message(item, where)
                turn.content = parsed.content
                turn.extras = {**parsed.extras, **turn.extras, "_message": True}
            elif kind in ("function_call", "custom_tool_call"):
                turn.tool_calls.append(_parse_call(item, where))
                turn.extras.setdefault("_calls", []).append(
                    split_known(item, _CALL_KEYS))
            else:
                reasoning, rest = _parse_reasoning_item(item, where)
                turn.reasoning.append(reasoning)
                turn.extras.setdefault("_reasoning", []).append(rest)
            continue
        turn = None
        if kind in _CALL_OUTPUTS:
            out.append(_parse_call_output(item, where))
        elif kind == "item_reference" and not isinstance(item.get("id"), str):
            raise DialectError("must be a string", f"{where}.id")
        else:
            # (an item_reference too: resolved by the gateway before parsing where it keeps the
            # items, else passed on to a Responses upstream, which keeps them)
            # Another tool's call or output (web search, computer use, …): kept verbatim, for a
            # Responses upstream only.
            out.append(Message("assistant", [OtherPart(NAME, kind, item)],
                               extras={"_item": True}))
    return out


def _parse_message(item: dict[str, JSON], where: str) -> Message:
    role = item.get("role")
    if not isinstance(role, str):
        raise DialectError("must be a string", f"{where}.role")
    content = item.get("content")
    parsed: str | list[Part]
    extras = split_known(item, frozenset({"role", "content"}))
    if isinstance(content, str):
        parsed = content
    elif isinstance(content, list):
        parsed, part_extras = _parse_parts(content, f"{where}.content", role)
        if any(part_extras):
            extras["_parts"] = part_extras
    else:
        raise DialectError("must be a string or a list of parts", f"{where}.content")
    return Message(role, parsed, extras=extras)


_TEXT_KINDS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}


def _text_kind(role: str) -> str:
    """The type a text part of a message of ``role`` has unless it says otherwise."""
    return "output_text" if role == "assistant" else "input_text"


def _parse_parts(content: list[JSON], where: str,
                 role: str) -> tuple[list[Part], list[JSON]]:
    """The parts, and per part the keys no canonical field names (``annotations``, …)."""
    parts: list[Part] = []
    rest: list[JSON] = []
    for j, p in enumerate(content):
        p = expect_object(p, f"{where}[{j}]")
        kind = p.get("type")
        key = _TEXT_KINDS.get(kind) if isinstance(kind, str) else None
        if key is not None:
            text = p.get(key)
            if not isinstance(text, str):
                raise DialectError("must be a string", f"{where}[{j}].{key}")
            parts.append(TextPart(text))
            extra = split_known(p, frozenset({"type", key}))
            if kind != _text_kind(role):
                extra["type"] = kind  # rendered back as itself
            rest.append(extra or None)
        elif kind == "input_image" and isinstance(p.get("image_url"), str):
            detail = p.get("detail")
            parts.append(ImagePart(url=p["image_url"],
                                   detail=detail if isinstance(detail, str) else None))
            extra = split_known(p, frozenset({"type", "image_url", "detail"}))
            rest.append(extra or None)
        else:
            # input_file, an image by file_id, audio, …: only a Responses upstream can read them
            parts.append(OtherPart(NAME, str(kind), p))
            rest.append(None)
    return parts, rest


_CALL_KEYS = frozenset({"call_id", "name", "arguments", "input", "namespace"})
"""The keys of a ``function_call`` / ``custom_tool_call`` item a canonical call holds."""


def _parse_call(item: dict[str, JSON], where: str) -> ToolCall:
    """A ``function_call`` item, or a ``custom_tool_call`` (its ``input`` the call's text)."""
    cid, name, namespace = item.get("call_id"), item.get("name"), item.get("namespace")
    if not isinstance(cid, str):
        raise DialectError("must be a string", f"{where}.call_id")
    if not isinstance(name, str):
        raise DialectError("must be a string", f"{where}.name")
    if namespace is not None and not isinstance(namespace, str):
        raise DialectError("must be a string", f"{where}.namespace")
    if item.get("type") == "custom_tool_call":
        text = item.get("input")
        if text is not None and not isinstance(text, str):
            raise DialectError("must be a string", f"{where}.input")
        return ToolCall(cid, name, text or "", kind="custom", namespace=namespace)
    args = item.get("arguments")
    if args is not None and not isinstance(args, str):
        raise DialectError("must be a string of JSON", f"{where}.arguments")
    return ToolCall(cid, name, args if args is not None else "{}", namespace=namespace)


def _parse_call_output(item: dict[str, JSON], where: str) -> Message:
    cid = item.get("call_id")
    if not isinstance(cid, str):
        raise DialectError("must be a string", f"{where}.call_id")
    output = item.get("output")
    extras = split_known(item, frozenset({"call_id", "output"}))
    content: str | list[Part]
    if isinstance(output, str):
        content = output
    elif isinstance(output, list):
        content, part_extras = _parse_parts(output, f"{where}.output", "tool")
        if any(part_extras):
            extras["_parts"] = part_extras
    else:
        raise DialectError("must be a string or a list of parts", f"{where}.output")
    return Message("tool", content, tool_call_id=cid, extras=extras)


def _parse_reasoning_item(item: dict[str, JSON], where: str) -> tuple[Reasoning, JSON]:
    rid = item.get("id")
    if rid is not None and not isinstance(rid, str):
        raise DialectError("must be a string", f"{where}.id")
    encrypted = item.get("encrypted_content")
    if encrypted is not None and not isinstance(encrypted, str):
        raise DialectError("must be a string", f"{where}.encrypted_content")
    text = _reasoning_text(item, where)
    rest = split_known(item, frozenset({"id", "encrypted_content"}))
    carried = _unsealed(encrypted)
    if carried is not None:
        dialect, signature, redacted = carried
        return Reasoning(text, signature, redacted, id=rid, dialect=dialect), rest
    return Reasoning(text, id=rid, redacted=encrypted, dialect=NAME), rest


_SEAL = "chat-gateway.1."
"""Heads the ``encrypted_content`` of a reasoning item that holds another provider's signature
or redacted reasoning (:func:`_sealed`)."""


def _sealed(dialect: str | None, signature: str | None, redacted: str | None) -> str | None:
    """Another provider's signature or redacted reasoning, as an ``encrypted_content`` a client
    gives back as it came (Codex asks for it, ``include: ["reasoning.encrypted_content"]``, and
    replays it): on the client's next turn the reasoning goes back to the provider that signed
    it, which refuses a turn of thinking and tool calls without it. Opaque to the client, as the
    API's own is; never sent to an OpenAI upstream (the reasoning is another dialect's)."""
    if dialect is None or dialect == NAME or (signature is None and redacted is None):
        return None
    blob = orjson.dumps({"dialect": dialect, "signature": signature, "redacted": redacted})
    return _SEAL + base64.urlsafe_b64encode(blob).decode()


def _unsealed(encrypted: str | None) -> tuple[str, str | None, str | None] | None:
    """(dialect, signature, redacted) of a :func:`_sealed` value; ``None`` for any other."""
    if encrypted is None or not encrypted.startswith(_SEAL):
        return None
    try:
        value = orjson.loads(base64.urlsafe_b64decode(encrypted[len(_SEAL):]))
    except (ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("dialect"), str):
        return None
    return value["dialect"], _str(value.get("signature")), _str(value.get("redacted"))


def _reasoning_text(item: dict[str, JSON], where: str) -> str:
    """A reasoning item's text: its summary parts, else its raw ``reasoning_text`` content."""
    for key, kind in (("summary", "summary_text"), ("content", "reasoning_text")):
        parts = item.get(key)
        if parts is None:
            continue
        if not isinstance(parts, list):
            raise DialectError(f"must be a list, not {kind_of(parts)}", f"{where}.{key}")
        texts = [p["text"] for p in parts if isinstance(p, dict) and p.get("type") == kind
                 and isinstance(p.get("text"), str)]
        if texts:
            return _SEPARATOR.join(texts)
    return ""


def _is_instructions(m: Message, same: bool) -> bool:
    if same:
        return bool(m.extras.get("_instructions"))
    return m.role == "system" and (isinstance(m.content, str) or all(
        isinstance(p, TextPart) for p in m.content))


def _plain_text(content: str | list[Part]) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, TextPart))


def _render_items(messages: list[Message], same: bool) -> list[JSON]:
    out: list[JSON] = []
    custom = {c.id for m in messages for c in m.tool_calls if c.kind == "custom"}
    for m in messages:
        extras = m.extras if same else {}
        if extras.get("_item"):
            out.extend(p.raw for p in m.content if isinstance(p, OtherPart))
        elif m.role == "tool":
            wire: dict[str, JSON] = _public(extras) if same else {
                "type": _CALL_OUTPUTS[m.tool_call_id in custom]}
            wire["call_id"] = m.tool_call_id or ""
            wire["output"] = m.content if isinstance(m.content, str) else _render_parts(
                m.content, "tool", extras.get("_parts"))
            out.append(wire)
        elif m.role == "assistant":
            out.extend(_render_turn(m, extras, same))
        else:
            out.append(_render_message(m, extras, same))
    return out


def _render_message(m: Message, extras: dict[str, JSON], same: bool) -> dict[str, JSON]:
    wire: dict[str, JSON] = {k: v for k, v in _public(extras).items()
                             if k not in ("role", "content")} if same else {"type": "message"}
    wire["role"] = m.role
    wire["content"] = m.content if isinstance(m.content, str) else _render_parts(
        m.content, m.role, extras.get("_parts"))
    return wire


def _render_turn(m: Message, extras: dict[str, JSON], same: bool) -> list[JSON]:
    out: list[JSON] = []
    kept_reasoning = extras.get("_reasoning")
    for i, r in enumerate(m.reasoning):
        if r.dialect != NAME:
            continue  # only OpenAI's own reasoning items can be sent back to it
        rest = kept_reasoning[i] if isinstance(kept_reasoning, list) and i < len(
            kept_reasoning) else None
        item = _render_reasoning_item(r, rest)
        if item is not None:
            out.append(item)
    if extras.get("_message") if same else (m.content or not m.tool_calls):
        out.append(_render_message(m, extras, same))
    kept_calls = extras.get("_calls")
    for i, c in enumerate(m.tool_calls):
        rest = kept_calls[i] if isinstance(kept_calls, list) and i < len(kept_calls) else None
        wire = dict(rest) if isinstance(rest, dict) else {}
        out.append(_call_wire(c, wire))
    return out


def _call_wire(c: ToolCall, wire: dict[str, JSON]) -> dict[str, JSON]:
    """A call as a ``function_call`` or ``custom_tool_call`` item, over ``wire`` (the keys it
    came with, or the item's own, or none)."""
    custom = c.kind == "custom"
    wire = {"type": "custom_tool_call" if custom else "function_call",
            **{k: v for k, v in wire.items() if k not in ("type", "input", "arguments")}}
    wire["call_id"] = c.id
    if c.namespace is not None:
        wire["namespace"] = c.namespace
    wire["name"] = c.name
    wire["input" if custom else "arguments"] = c.arguments
    return wire


def _render_reasoning_item(r: Reasoning, rest: JSON) -> dict[str, JSON] | None:
    if not isinstance(rest, dict):
        if r.id is None:
            return None  # the API finds a reasoning item by its id: one without cannot go back
        rest = {"type": "reasoning", "summary": []}
    wire: dict[str, JSON] = dict(rest)
    if r.id is not None:
        wire["id"] = r.id
    if _reasoning_text(wire, "reasoning") != r.text:
        wire["summary"] = [{"type": "summary_text", "text": r.text}] if r.text else []
        wire.pop("content", None)
    if r.redacted is not None:
        wire["encrypted_content"] = r.redacted
    return wire


def _render_parts(parts: list[Part], role: str, kept: JSON) -> list[JSON]:
    out: list[JSON] = []
    rests = kept if isinstance(kept, list) else []
    for j, p in enumerate(parts):
        rest = rests[j] if j < len(rests) and isinstance(rests[j], dict) else None
        match p:
            case TextPart():
                kind = rest.get("type") if rest else None
                if kind is None:
                    kind = _text_kind(role)
                wire: dict[str, JSON] = {**rest} if rest else {}
                wire["type"] = kind
                wire["refusal" if kind == "refusal" else "text"] = p.text
                if kind == "output_text" and "annotations" not in wire:
                    wire["annotations"] = []
                out.append(wire)
            case ImagePart():
                image: dict[str, JSON] = {**rest} if rest else {}
                image["type"] = "input_image"
                image["image_url"] = p.as_url()
                if p.detail is not None:
                    image["detail"] = p.detail
                out.append(image)
            case OtherPart():
                if p.dialect == NAME:
                    out.append(p.raw)
            case _:
                assert_never(p)
    return out


# --- whole answers -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Folded:
    message: AssistantMessage
    citations: list[Citation] = field(default_factory=list)


def _fold_output(output: list[JSON]) -> _Folded:
    text: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[Reasoning] = []
    citations: list[Citation] = []
    first_id: str | None = None
    for i, item in enumerate(output):
        # (where an item is, named only for its errors: an answer's items are read once each)
        if type(item) is not dict:
            item = expect_object(item, f"output[{i}]")
        kind = item.get("type")
        if kind == "message":
            first_id = first_id or _str(item.get("id"))
            content = item.get("content")
            if not isinstance(content, list):
                raise DialectError(f"must be a list, not {kind_of(content)}",
                                   f"output[{i}].content")
            for j, part in enumerate(content):
                if type(part) is not dict:
                    part = expect_object(part, f"output[{i}].content[{j}]")
                kind = part.get("type")
                key = _TEXT_KINDS.get(kind) if isinstance(kind, str) else None
                if key is None:
                    continue
                value = part.get(key)
                if not isinstance(value, str):
                    raise DialectError("must be a string", f"output[{i}].content[{j}].{key}")
                text.append(value)
                annotations = part.get("annotations")
                if annotations:
                    citations.extend(_citations(annotations))
        elif kind in ("function_call", "custom_tool_call"):
            calls.append(_parse_call(item, f"output[{i}]"))
        elif kind == "reasoning":
            reasoning.append(_parse_reasoning_item(item, f"output[{i}]")[0])
    return _Folded(AssistantMessage("".join(text), id=first_id, tool_calls=calls,
                                    reasoning=reasoning), citations)


def _citations(annotations: JSON) -> list[Citation]:
    if not isinstance(annotations, list):
        return []
    out = [_citation(a) for a in annotations if isinstance(a, dict)]
    return [c for c in out if c is not None]


def _citation(a: dict[str, JSON]) -> Citation | None:
    kind = a.get("type")
    if kind == "url_citation":
        url = _str(a.get("url"))
        if url:
            return Citation(id=url, title=_str(a.get("title")), url=url)
    elif kind in ("file_citation", "container_file_citation"):
        name = _str(a.get("filename")) or _str(a.get("file_id"))
        if name:
            return Citation(id=name, title=name)
    return None  # file_path names a file the model wrote, not a source


def _annotations(context: JSON, text: str) -> list[JSON]:
    """The citations of a canonical context as annotations over the whole text."""
    out: list[JSON] = []
    for c in citations_of(context):
        if c.url:
            out.append({"type": "url_citation", "start_index": 0, "end_index": len(text),
                        "title": c.title or c.url, "url": c.url})
        else:
            # No OpenAI file id exists for another dialect's source: its name stands in.
            name = c.title or c.id
            out.append({"type": "file_citation", "file_id": name, "filename": name,
                        "index": len(text)})
    return out


def _digest(m: AssistantMessage) -> JSON:
    return _digest_of(m.content, m.tool_calls, m.reasoning)


def _digest_of(text: str, calls: list[ToolCall], reasoning: list[Reasoning]) -> JSON:
    """What the folded message says, to tell whether the items it came from still say it."""
    return [text, [[c.id, c.name, c.arguments, c.kind, c.namespace] for c in calls],
            [[r.text, r.id, r.redacted, r.dialect] for r in reasoning]]


def _render_output(resp: ChatResponse, text: str, calls: list[ToolCall]) -> list[JSON]:
    out: list[JSON] = []
    reasoning = resp.reasoning
    for r in reasoning:
        out.append(_reasoning_output(r))
    status = "incomplete" if resp.finish_reason in _INCOMPLETE_BY_FINISH else "completed"
    first = resp.messages[0] if resp.messages else None
    # sources hang on a text part: an answer of only tool calls still gets one when it cites
    if text or not calls or citations_of(resp.context):
        out.append({"type": "message", "id": (first.id if first else None) or _new_id("msg_"),
                    "status": status, "role": "assistant",
                    "content": [_output_text(text, _annotations(resp.context, text))]})
    for c in calls:
        out.append(_call_item(c, _new_id("ctc_" if c.kind == "custom" else "fc_"), "completed",
                              c.arguments))
    return out


def _output_text(text: str, annotations: list[JSON]) -> dict[str, JSON]:
    return {"type": "output_text", "text": text, "annotations": annotations}


def _call_item(c: ToolCall, item_id: str, status: str, arguments: str) -> dict[str, JSON]:
    """An output item of a call; ``arguments``: what of them is said (a freeform call's
    text)."""
    return {**_call_wire(replace(c, arguments=arguments), {"id": item_id}), "status": status}


def _reasoning_output(r: Reasoning) -> dict[str, JSON]:
    item: dict[str, JSON] = {"type": "reasoning", "id": r.id or _new_id("rs_"),
                             "summary": [{"type": "summary_text", "text": r.text}]
                             if r.text else []}
    if r.redacted is not None and r.dialect == NAME:
        item["encrypted_content"] = r.redacted
    else:
        sealed = _sealed(r.dialect, r.signature, r.redacted)
        if sealed is not None:
            item["encrypted_content"] = sealed
    return item


def _finish_of(status: JSON, details: JSON, has_calls: bool) -> str | None:
    if status == "incomplete":
        reason = details.get("reason") if isinstance(details, dict) else None
        if not isinstance(reason, str):
            return "length"
        return _FINISH_BY_INCOMPLETE.get(reason, reason)
    finish = _FINISH_BY_STATUS.get(status) if isinstance(status, str) else None
    if finish == "stop" and has_calls:
        return "tool_calls"
    return finish


def _status_of(reason: str) -> tuple[str, JSON]:
    """``status`` and ``incomplete_details`` for a canonical finish reason."""
    incomplete = _INCOMPLETE_BY_FINISH.get(reason)
    if incomplete is not None:
        return "incomplete", {"reason": incomplete}
    if reason == "error":
        return "failed", None
    return "completed", None


def _failure(message: str, code: str | None) -> dict[str, JSON]:
    return {"code": code if code in _RESPONSE_ERROR_CODES else "server_error",
            "message": message}


def _usage_of(v: JSON) -> Usage | None:
    if not isinstance(v, dict):
        return None
    inp = v.get("input_tokens_details")
    out = v.get("output_tokens_details")
    inp = inp if isinstance(inp, dict) else {}
    out = out if isinstance(out, dict) else {}
    return Usage(
        input_tokens=_int(v.get("input_tokens")),
        output_tokens=_int(v.get("output_tokens")),
        cached_input_tokens=_int(inp.get("cached_tokens")),
        cache_write_tokens=_int(inp.get("cache_write_tokens")),
        reasoning_tokens=_int(out.get("reasoning_tokens")),
    )


def _usage_json(u: Usage) -> dict[str, JSON]:
    return {
        "input_tokens": u.input_tokens or 0,
        "input_tokens_details": {"cached_tokens": u.cached_input_tokens or 0,
                                 "cache_write_tokens": u.cache_write_tokens or 0},
        "output_tokens": u.output_tokens or 0,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens or 0},
        "total_tokens": u.total_tokens or 0,
    }


def _parse_text_format(text: JSON, extras: dict[str, JSON]) -> OutputFormat | None:
    """The output format ``text.format`` asks for; ``extras["text"]`` keeps the rest of
    ``text`` (``verbosity``), or ``{"format": {"type": "text"}}`` as it came."""
    if text is None:
        return None
    obj = expect_object(text, "text")
    fmt = obj.get("format")
    output = None if fmt is None else parse_openai_output_format(fmt, "text.format")
    if output is not None:
        rest = {k: v for k, v in obj.items() if k != "format"}
        if rest:
            extras["text"] = rest
        else:
            del extras["text"]
    return output


def _text_config(output: OutputFormat, kept: JSON) -> dict[str, JSON]:
    text = dict(kept) if isinstance(kept, dict) else {}
    text["format"] = openai_output_format(output)
    return text


def _echo(req: ChatRequest) -> dict[str, Any]:
    """The request parameters a response repeats (``tools``, ``tool_choice`` and
    ``parallel_tool_calls`` are required by the SDKs' types), for an answer this gateway
    writes."""
    same = req.extras_dialect == NAME
    extras = req.extras if same else {}
    first = req.messages[0] if req.messages else None
    instructions = _plain_text(first.content) if first is not None and _is_instructions(
        first, same) else None
    choice = req.tool_choice
    reasoning = req.reasoning
    metadata = req.sampling.get("metadata")
    text = extras.get("text")
    if req.sampling.get("verbosity") is not None:
        text = {**(text if isinstance(text, dict) else {}), "verbosity": req.sampling["verbosity"]}
    kept = req.hints.get(_KEPT)
    return {
        "instructions": instructions,
        "max_output_tokens": req.sampling.get("max_tokens"),
        "parallel_tool_calls": choice.parallel if choice is not None and choice.parallel
        is not None else True,
        "previous_response_id": kept.get("previous_response_id") if kept else None,
        "reasoning": {"effort": reasoning.effort if reasoning else None,
                      "summary": reasoning.summary if reasoning else None},
        "store": bool(kept.get("store")) if kept else False,  # kept by the gateway, or not
        "temperature": req.sampling.get("temperature"),
        "text": _text_config(req.output, text) if req.output is not None
        else {"format": {"type": "text"}, **text} if isinstance(text, dict)
        else {"format": {"type": "text"}},
        "tool_choice": _render_tool_choice(choice, req.hints.get("tool_choice") if same
                                           else None) if choice is not None else "auto",
        "tools": _render_tools(req.tools, same),
        "top_p": req.sampling.get("top_p"),
        "truncation": extras.get("truncation") or "disabled",
        "metadata": metadata if isinstance(metadata, dict) else {},
    }


# --- streams -------------------------------------------------------------------------------------


class _Decoder:
    """Responses events (named or not: the ``type`` in the data decides) to canonical events.

    Tolerant: unknown event types, lifecycle repeats and ``[DONE]`` are ignored; an item whose
    text or arguments arrive only whole (in its ``.done`` event, in ``output_item.done``, or only
    in the terminal response's ``output``) gives what the deltas had not. Strict where data would
    be lost: arguments for a call never announced, an event with no type, a body that ends
    without a terminal event.
    """

    __slots__ = ("_calls", "_citations", "_done", "_finished_items", "_last_reasoning", "_ncalls",
                 "_sent", "_started", "_texted")

    def __init__(self) -> None:
        self._started = False
        self._done = False
        self._calls: dict[int, int] = {}
        """output_index -> canonical call index, for calls not yet ended."""
        self._ncalls = 0
        self._sent: dict[tuple[int, str, int], int] = {}
        """(output_index, kind, part index) -> characters passed on, for ``.done`` remainders."""
        self._finished_items: set[int] = set()
        self._citations: list[Citation] = []
        self._last_reasoning: tuple[int, str, int] | None = None
        """Where the reasoning text just passed on came from (None after any other event)."""
        self._texted: tuple[int, str, int] | None = None
        """Where the text of the last text delta went (its count, for :meth:`again`)."""

    def again(self, chars: int) -> None:
        """Text deltas like the last one decoded, but for their text (and number), were read
        from its template: their ``chars`` counted as decoding them would have."""
        if self._texted is not None:
            self._sent[self._texted] += chars

    def decode(self, payload: Any) -> list[StreamEvent]:
        if self._done:
            return []
        name: str | None = None
        if isinstance(payload, Named):
            name, payload = payload.event, payload.data
        if type(payload) is not dict:
            if isinstance(payload, RawData):
                if payload.text.strip() == "[DONE]":
                    return []  # some servers add it; the terminal event has already decided
                raise DialectError("an event's data is not JSON", "stream")
            if not isinstance(payload, dict):
                raise DialectError("an event must be an object", "stream")
        kind = payload.get("type")
        if not isinstance(kind, str):
            if name is None and payload.get("error") is not None:
                kind = "error"
            elif name is not None:
                kind = name
            else:
                raise DialectError("an event names no type", "stream")
        read = _READERS.get(kind)
        if self._started:
            if read is None:
                return []  # lifecycle, content_part, summary_part, built-in tools' progress, …
            events: list[StreamEvent] = []
        else:
            self._started = True
            response = payload.get("response")
            r = response if isinstance(response, dict) else {}
            events = [StreamStart(id=_str(r.get("id")), created=_int(r.get("created_at")),
                                  model=_str(r.get("model")))]
            if read is None:
                return events
        read(self, payload, events)
        return events

    # - the events read, one method each (_READERS) -

    def _output_text_delta(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        part, delta = _index(p, "content_index"), _delta(p)
        self._text((_index(p, "output_index"), "text", part), delta, events)

    def _output_text_done(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        self._rest(p, "text", _index(p, "content_index"), p.get("text"), events)

    def _refusal_done(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        self._rest(p, "text", _index(p, "content_index"), p.get("refusal"), events)

    def _arguments_delta(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        self._arguments(_index(p, "output_index"), _delta(p), events, rest=False)

    def _arguments_done(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        self._arguments(_index(p, "output_index"), p.get("arguments"), events, rest=True)

    def _input_done(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        self._arguments(_index(p, "output_index"), p.get("input"), events, rest=True)

    def _summary_delta(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        part, delta = _index(p, "summary_index"), _delta(p)
        self._text((_index(p, "output_index"), "summary", part), delta, events)

    def _summary_done(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        self._rest(p, "summary", _index(p, "summary_index"), p.get("text"), events)

    def _reasoning_delta(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        part, delta = _index(p, "content_index"), _delta(p)
        self._text((_index(p, "output_index"), "reasoning", part), delta, events)

    def _reasoning_done(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        self._rest(p, "reasoning", _index(p, "content_index"), p.get("text"), events)

    def _item_added(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        self._added(_index(p, "output_index"), p.get("item"), events)

    def _item_done(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        item = p.get("item")
        if not isinstance(item, dict):
            raise DialectError("an output_item.done event carries no item", "stream")
        self._finish_item(_index(p, "output_index"), item, events)

    def _annotation_added(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        annotation = p.get("annotation")
        cite = _citation(annotation) if isinstance(annotation, dict) else None
        if cite is not None:
            self._citations.append(cite)
            self._emit(events, ContextUpdate(context_with_citations(self._citations)))

    def _response_failed(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        response = p.get("response")
        err = response.get("error") if isinstance(response, dict) else None
        self._fail(err if err is not None else "the upstream response failed", events)

    def _error_event(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        nested = p.get("error")
        self._fail(nested if isinstance(nested, dict) else p, events)

    def _emit(self, events: list[StreamEvent], event: StreamEvent) -> None:
        if not isinstance(event, ReasoningDelta):
            self._last_reasoning = None
        events.append(event)

    def _text(self, key: tuple[int, str, int], delta: str, events: list[StreamEvent]) -> None:
        """``delta`` of the text at ``key`` (output index, kind, part index)."""
        self._sent[key] = self._sent.get(key, 0) + len(delta)
        if not delta:
            return
        if key[1] == "text":
            self._texted = key
            self._emit(events, TextDelta(delta))
            return
        if self._last_reasoning is not None and self._last_reasoning != key:
            delta = _SEPARATOR + delta  # the next summary part (or item) of one reasoning text
        events.append(ReasoningDelta(delta, dialect=NAME))
        self._last_reasoning = key

    def _rest(self, p: dict[str, Any], kind: str, part: int, whole: JSON,
              events: list[StreamEvent]) -> None:
        if isinstance(whole, str):
            self._rest_at((_index(p, "output_index"), kind, part), whole, events)

    def _rest_at(self, key: tuple[int, str, int], whole: str,
                 events: list[StreamEvent]) -> None:
        """What of ``whole``, the text at ``key``, its deltas had not given."""
        sent = self._sent.get(key, 0)
        if len(whole) > sent:
            self._text(key, whole[sent:], events)

    def _added(self, index: int, item: JSON, events: list[StreamEvent]) -> None:
        if not isinstance(item, dict):
            raise DialectError("an output_item.added event carries no item", "stream")
        if index in self._calls or index in self._finished_items:
            raise DialectError(f"output_index {index} was added twice", "stream")
        kind = item.get("type")
        if kind not in ("function_call", "custom_tool_call"):
            return
        name, cid, namespace = item.get("name"), item.get("call_id"), item.get("namespace")
        if not isinstance(name, str):
            raise DialectError("a function call names no function", "stream")
        call = self._ncalls
        self._ncalls += 1
        self._calls[index] = call
        custom = kind == "custom_tool_call"
        self._emit(events, ToolCallStart(
            call, cid if isinstance(cid, str) else f"call_{call}", name,
            "custom" if custom else "function",
            namespace if isinstance(namespace, str) else None))
        args = item.get("input" if custom else "arguments")
        if isinstance(args, str) and args:
            self._arguments(index, args, events, rest=False)

    def _arguments(self, index: int, args: JSON, events: list[StreamEvent], *,
                   rest: bool) -> None:
        call = self._calls.get(index)
        if call is None:
            if rest and index in self._finished_items:
                return
            raise DialectError("arguments arrived for a function call that was never announced",
                               "stream")
        if not isinstance(args, str):
            if rest:
                return
            raise DialectError("a function call's arguments must be a string", "stream")
        key = (index, "arguments", 0)
        sent = self._sent.get(key, 0)
        if rest:
            args = args[sent:]
        self._sent[key] = sent + len(args)
        if args:
            self._emit(events, ToolCallDelta(call, args))

    def _finish_item(self, index: int, item: dict[str, Any], events: list[StreamEvent]) -> None:
        """An item is complete: what its deltas had not said yet, then its end."""
        if index in self._finished_items:
            return
        kind = item.get("type")
        if kind in ("function_call", "custom_tool_call"):
            if index not in self._calls:
                self._added(index, item, events)
            self._arguments(index, item.get("arguments" if kind == "function_call" else "input"),
                            events, rest=True)
            self._emit(events, ToolCallEnd(self._calls.pop(index)))
        elif kind == "message":
            self._finish_message(index, item, events)
        elif kind == "reasoning":
            for key, part_kind, sent_kind in (("summary", "summary_text", "summary"),
                                              ("content", "reasoning_text", "reasoning")):
                parts = item.get(key)
                for j, part in enumerate(parts if isinstance(parts, list) else []):
                    if isinstance(part, dict) and part.get("type") == part_kind \
                            and isinstance(text := part.get("text"), str):
                        self._rest_at((index, sent_kind, j), text, events)
            encrypted = item.get("encrypted_content")
            if isinstance(encrypted, str):
                events.append(ReasoningDelta(redacted=encrypted, dialect=NAME))
                self._last_reasoning = None
        self._finished_items.add(index)

    def _finish_message(self, index: int, item: dict[str, Any],
                        events: list[StreamEvent]) -> None:
        content = item.get("content")
        for j, part in enumerate(content if isinstance(content, list) else []):
            kind = part.get("type") if isinstance(part, dict) else None
            key = _TEXT_KINDS.get(kind) if isinstance(kind, str) else None
            if key is None:
                continue
            text = part.get(key)
            if isinstance(text, str):
                self._rest_at((index, "text", j), text, events)
            for a in part.get("annotations") or []:
                cite = _citation(a) if isinstance(a, dict) else None
                if cite is not None and cite not in self._citations:
                    self._citations.append(cite)
                    self._emit(events, ContextUpdate(context_with_citations(self._citations)))

    def _terminal(self, p: dict[str, Any], events: list[StreamEvent]) -> None:
        response = p.get("response")
        if not isinstance(response, dict):
            raise DialectError("a terminal event carries no response", "stream")
        output = response.get("output")
        for i, item in enumerate(output if isinstance(output, list) else []):
            if isinstance(item, dict) and (i not in self._finished_items):
                self._finish_item(i, item, events)  # items the stream never finished
        if self._calls:
            for index in sorted(self._calls):
                self._emit(events, ToolCallEnd(self._calls[index]))
            self._calls.clear()
        self._done = True
        reason = _finish_of(response.get("status"), response.get("incomplete_details"),
                            self._ncalls > 0)
        if reason is None:
            reason = "length" if p.get("type") == "response.incomplete" else "stop"
        events.append(StreamFinish(reason, _usage_of(response.get("usage"))))

    def _fail(self, err: JSON, events: list[StreamEvent]) -> None:
        self._done = True
        code = err.get("code") if isinstance(err, dict) else None
        events.append(StreamError(error_text(err), code if isinstance(code, str) else None))

    def end(self) -> list[StreamEvent]:
        if self._done:
            return []
        self._done = True
        return [StreamError("the upstream stream ended before its terminal event")]


_Read = Callable[[_Decoder, dict[str, Any], list[StreamEvent]], None]
_READERS: dict[str, _Read] = {
    "response.output_text.delta": _Decoder._output_text_delta,
    "response.refusal.delta": _Decoder._output_text_delta,
    "response.output_text.done": _Decoder._output_text_done,
    "response.refusal.done": _Decoder._refusal_done,
    "response.function_call_arguments.delta": _Decoder._arguments_delta,
    "response.function_call_arguments.done": _Decoder._arguments_done,
    "response.custom_tool_call_input.delta": _Decoder._arguments_delta,
    "response.custom_tool_call_input.done": _Decoder._input_done,
    "response.reasoning_summary_text.delta": _Decoder._summary_delta,
    "response.reasoning_summary_text.done": _Decoder._summary_done,
    "response.reasoning_text.delta": _Decoder._reasoning_delta,
    "response.reasoning_text.done": _Decoder._reasoning_done,
    "response.output_item.added": _Decoder._item_added,
    "response.output_item.done": _Decoder._item_done,
    "response.output_text.annotation.added": _Decoder._annotation_added,
    "response.completed": _Decoder._terminal,
    "response.incomplete": _Decoder._terminal,
    "response.failed": _Decoder._response_failed,
    "error": _Decoder._error_event,
}
"""The event types :class:`_Decoder` reads, each to the method that reads it: one lookup a
frame, and none but this for the types it passes over (lifecycle, content_part, summary_part,
built-in tools' progress, …)."""


def _index(p: dict[str, Any], key: str) -> int:
    v = p.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise DialectError(f"{key} must be a non-negative integer", "stream")
    return v


def _delta(p: dict[str, Any]) -> str:
    delta = p.get("delta")
    if not isinstance(delta, str):
        raise DialectError("a delta event's delta must be a string", "stream")
    return delta


_DELTA_EVENT = ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta")
"""A call's delta event, by whether it is a freeform call's."""


_FOLLOWED_DELTAS = frozenset({"response.output_text.delta",
                              "response.reasoning_summary_text.delta", *_DELTA_EVENT})
"""The delta events whose text an encoder that follows a stream keeps (:meth:`_Encoder.follow`)."""


def _is_custom(item: _Item) -> bool:
    return item.call is not None and item.call.kind == "custom"


_PART_CLOSERS = frozenset({"response.output_text.done", "response.content_part.done",
                           "response.reasoning_summary_text.done",
                           "response.reasoning_summary_part.done"})


class _Item:
    """An output item the encoder opened: where it is, and what it said so far. (A plain
    class: compiled, a dataclass's generated ``__init__`` runs interpreted, and one is built for
    each item of each answer.)"""

    __slots__ = ("call", "chunks", "delta_at", "final", "final_json", "id", "id_json", "index",
                 "kind", "part_at", "part_open", "redacted", "seen")

    def __init__(self, index: int, id: str, kind: str, call: ToolCall | None = None) -> None:
        self.index = index
        self.id = id
        self.kind = kind
        self.call = call
        self.chunks: list[str] = []
        self.redacted: str | None = None
        self.part_open = False
        self.seen: set[str] = set()
        """Closing events the upstream already sent for it (identity route: :meth:`follow`)."""
        self.final: dict[str, JSON] | None = None
        """The item as ``output_item.done`` showed it (what the final ``output`` lists)."""
        self.final_json = b""
        """Or that item's JSON, for a message this encoder finished (written once, for both)."""
        self.part_at = b""
        """Where the events of its text part say they are: ``"item_id":…,"output_index":…,
        "content_index":0`` (made once it is first written: :meth:`text_part_at`)."""
        self.delta_at = b""
        """What a text delta of this item writes between its sequence number and its text."""
        self.id_json = b""
        """Its id's JSON (written once: :meth:`json_id`)."""

    def json_id(self) -> bytes:
        if not self.id_json:
            self.id_json = orjson.dumps(self.id)
        return self.id_json

    def text_part_at(self) -> bytes:
        if not self.part_at:
            self.part_at = (b'"item_id":' + self.json_id() + b',"output_index":'
                            + str(self.index).encode() + b',"content_index":0')
        return self.part_at

    def text_delta_at(self) -> bytes:
        if not self.delta_at:
            self.delta_at = b"," + self.text_part_at() + b',"delta":'
        return self.delta_at

    def message_json(self, status: str, part: bytes) -> bytes:
        """The message as orjson writes :meth:`_Encoder._wire`'s object for it: ``part`` is the
        JSON of its text part, or empty for none."""
        return b"".join((b'{"type":"message","id":', self.json_id(), b',"status":',
                         _STATUS_JSON.get(status) or orjson.dumps(status),
                         b',"role":"assistant","content":[', part, b"]}"))

    def added_or_done(self, item: bytes) -> bytes:
        """``{"output_index", "item"}`` of ``output_item.added``/``.done``, ``item`` its JSON."""
        return b"".join((b'{"output_index":', str(self.index).encode(), b',"item":', item, b"}"))

    @property
    def text(self) -> str:
        if len(self.chunks) > 1:
            self.chunks[:] = ["".join(self.chunks)]
        return self.chunks[0] if self.chunks else ""


_STATUS_JSON: Final = {s: orjson.dumps(s) for s in ("in_progress", "completed", "incomplete")}
"""An item's status as JSON, for the statuses an encoder writes."""


def _json(value: JSON) -> bytes:
    """``orjson.dumps(value)``, without the call for the ``null`` most of a shell's fields are."""
    return b"null" if value is None else orjson.dumps(value)


_EMPTY_TEXT_PART = orjson.dumps(_output_text("", []))

_EVENT_HEADS: dict[str, bytes] = {}
"""An event's JSON up to its sequence number, by its type (a few types, written again and
again: :meth:`_Encoder._event_of`)."""


class _Encoder:
    """Canonical events to Responses events, in the order both SDKs' accumulators hold a stream
    to (openai-python ``ResponseStreamState``, openai-node ``ResponseStream``):

    - ``response.created`` first, then ``response.in_progress``, both with the same id as the
      terminal event; every event numbered by ``sequence_number`` 0, 1, 2, …;
    - each item announced by ``output_item.added`` at the next ``output_index`` (no gaps, never
      twice) before any event names it; a message's ``content_part.added`` before its text
      deltas; every item finished (``output_item.done``, same type and id) before the end;
    - exactly one terminal event: ``response.completed``, ``response.incomplete`` (length,
      content filter), or, after a mid-stream error, ``error`` then ``response.failed``.

    A message or a reasoning item is finished as soon as anything else begins (as OpenAI's own
    streams do). Function calls are finished when the canonical stream ends them; a second call
    that begins first is announced at once and both stay open, because the accumulators look
    items up by ``output_index`` and accept deltas for any open item: arguments are passed on as
    they arrive, whatever the upstream interleaves, and nothing is buffered.

    Mid-stream errors: the ``error`` event carries the flat ``code``/``message``/``param`` of the
    published schema and a nested ``error`` object, the two forms the SDKs read: the Python SDK
    raises ``APIError`` for a top-level ``error`` object, the Node SDK throws on any event named
    ``error``. ``response.failed`` follows for readers that wait for a terminal event (neither SDK
    throws on it alone; Node would even finish cleanly), and nothing after it.
    """

    __slots__ = (
        "_agent",
        "_calls",
        "_citations",
        "_closed",
        "_created",
        "_echo",
        "_echo_json",
        "_followed_text",
        "_id",
        "_items",
        "_model",
        "_model_json",
        "_open",
        "_reasoning",
        "_req",
        "_seq",
        "_shell",
        "_spoke",
        "_started",
    )

    def __init__(self, req: ChatRequest) -> None:
        # The request's echo and a response id of our own are made when a response is first
        # written: an identity route's encoder takes the upstream's and seldom writes one.
        self._req = req
        self._echo: dict[str, Any] | None = None
        self._echo_json = b""
        self._id = ""
        self._created = now()
        self._model = req.model or "unknown"
        self._shell = b""
        """A response's JSON up to its status (written once: :meth:`_response`)."""
        self._model_json = b""
        """And from its model to its output."""
        self._seq = 0
        self._started = False
        self._closed = False
        self._items: list[_Item] = []
        self._followed_text: _Item | None = None
        """Identity route: the message whose text delta was followed last (see :meth:`follow`)."""
        self._open: _Item | None = None  # the message being written
        self._reasoning: _Item | None = None  # the reasoning item being written
        self._calls: dict[int, _Item] = {}  # canonical call index -> its open item
        self._citations: JSON = None
        self._agent: str | None = None
        self._spoke = False

    # - framing -

    def _event(self, kind: str, body: dict[str, Any]) -> Payload:
        return self._event_of(kind, orjson.dumps(body))

    def _event_of(self, kind: str, body: bytes) -> Payload:
        """The event ``kind`` numbered next, its fields those of the JSON object ``body`` (not
        empty): the bytes ``orjson.dumps({"type": kind, "sequence_number": n, **fields})``
        writes, without building that dict (the response shells are large)."""
        seq = self._seq
        self._seq = seq + 1
        head = _EVENT_HEADS.get(kind)
        if head is None:
            head = _EVENT_HEADS[kind] = b'{"type":"' + kind.encode() + b'","sequence_number":'
        return Named(kind, b"".join((head, str(seq).encode(), b",", body[1:])))

    def _response(self, status: str, *, error: JSON = None, details: JSON = None,
                  output: bytes = b"[]", usage: JSON = None, lifecycle: bool = False) -> bytes:
        """``{"response": …}`` of a lifecycle or terminal event: the bytes orjson writes for
        ``{"id", "object", "created_at", "status", "error", "incomplete_details", **echo,
        "model", "output", "usage"}`` (``output`` given as JSON), the echo written once a
        stream. The ``lifecycle`` events echo neither tools nor instructions (see :meth:`_start`).
        """
        echo = self._echo
        if echo is None:
            echo = self._echo = _echo(self._req)
        if lifecycle and (echo["instructions"] is not None or echo["tools"]):
            members = orjson.dumps({**echo, "instructions": None, "tools": []})
        else:
            members = self._echo_json
            if not members:
                members = self._echo_json = orjson.dumps(echo)
        shell = self._shell
        if not shell:
            if not self._id:
                self._id = _new_id("resp_")
            shell = self._shell = b"".join((
                b'{"response":{"id":', orjson.dumps(self._id),
                b',"object":"response","created_at":', orjson.dumps(self._created),
                b',"status":"'))
            self._model_json = b',"model":' + orjson.dumps(self._model) + b',"output":'
        return b"".join((
            shell, status.encode(), b'","error":', _json(error),
            b',"incomplete_details":', _json(details), b",", members[1:-1],
            self._model_json, output, b',"usage":', _json(usage), b"}}"))

    # - events -

    def encode(self, event: StreamEvent) -> list[Payload]:
        item = self._open
        if type(event) is TextDelta and item is not None and self._reasoning is None \
                and event.agent == self._agent and event.text and not self._closed:
            # Nearly every event: a delta of the message open, as _text writes it.
            text = event.text
            self._spoke = True
            item.chunks.append(text)
            seq = self._seq
            self._seq = seq + 1
            return [Named(_TEXT_DELTA, b"".join((
                _TEXT_DELTA_HEAD, str(seq).encode(), item.text_delta_at(), orjson.dumps(text),
                _TEXT_DELTA_TAIL)))]
        if self._closed:
            return []
        out = self._start(event if isinstance(event, StreamStart) else None)
        match event:
            case StreamStart():
                self._cite(event.context)
            case TextDelta():
                self._text(event, out)
            case ReasoningDelta():
                self._think(event, out)
            case ToolCallStart():
                self._end_message(out)
                self._end_reasoning(out)
                # (a freeform call is an item of kind function_call here too: its call says)
                item = self._add("function_call", "ctc_" if event.kind == "custom" else "fc_",
                                 out, call=ToolCall(event.id, event.name, "", event.kind,
                                                    event.namespace))
                self._calls[event.index] = item
            case ToolCallDelta():
                call = self._calls.get(event.index)
                if call is not None and event.arguments:
                    call.chunks.append(event.arguments)
                    out.append(self._event(_DELTA_EVENT[_is_custom(call)], {
                        "item_id": call.id, "output_index": call.index,
                        "delta": event.arguments}))
            case ToolCallEnd():
                ended = self._calls.pop(event.index, None)
                if ended is not None:
                    self._end_call(ended, "completed", out)
            case ContextUpdate():
                self._cite(event.context)
            case StreamFinish():
                self._finish(event, out)
            case StreamError():
                self._error(event, out)
            case _:
                assert_never(event)
        return out

    def _start(self, start: StreamStart | None) -> list[Payload]:
        if self._started:
            return []
        self._started = True
        if start is not None:
            self._id = _response_id(start.id)
            if start.created:
                self._created = start.created
            if start.model and self._model == "unknown":
                self._model = start.model
        # The two lifecycle events carry the request's echo without ``tools`` and
        # ``instructions``: a Codex request repeats kilobytes of both, and three copies of them
        # made an answer of two sentences some 60 KB. ``response.completed`` (or incomplete /
        # failed) still echoes them whole. Safe for the readers: the SDKs' ``Response`` type
        # requires ``tools`` (an empty list is one) and allows ``instructions`` to be null, and
        # their accumulators take the tools from the request, the finished response from the
        # terminal event.
        shell = self._response("in_progress", lifecycle=True)
        return [self._event_of("response.created", shell),
                self._event_of("response.in_progress", shell)]

    def _cite(self, context: JSON) -> None:
        if citations_of(context):
            self._citations = context

    def _add(self, kind: str, prefix: str, out: list[Payload], *,
             call: ToolCall | None = None) -> _Item:
        item = _Item(len(self._items), _new_id(prefix), kind, call=call)
        self._items.append(item)
        out.append(self._event("response.output_item.added", {
            "output_index": item.index, "item": self._wire(item, "in_progress")}))
        return item

    def _text(self, event: TextDelta, out: list[Payload]) -> None:
        self._end_reasoning(out)
        text = event.text
        if event.agent != self._agent:
            text = agent_header(event.agent, first=not self._spoke) + text
            self._agent = event.agent
        self._spoke = True
        if not text:
            return
        item = self._message(out)
        item.chunks.append(text)
        # Nearly every event of a stream: its JSON put together from parts (the bytes
        # self._event would write for the same fields, without building the dict each time).
        seq = self._seq
        self._seq = seq + 1
        out.append(Named(_TEXT_DELTA, b"".join((
            _TEXT_DELTA_HEAD, str(seq).encode(), item.text_delta_at(), orjson.dumps(text),
            _TEXT_DELTA_TAIL))))

    def plain_texts(self, texts: list[bytes]) -> list[Payload] | None:
        """:meth:`gateway.dialects.base.StreamEncoder` ``plain_texts``: while a message is open and
        nothing else is (its deltas numbered on)."""
        item = self._open
        if item is None or self._closed or self._reasoning is not None \
                or self._agent is not None:
            return None
        self._spoke = True
        at = item.text_delta_at() + b'"'
        seq = self._seq
        self._seq = seq + len(texts)
        # (each text is valid UTF-8 alone: the run's decodes as theirs would, at once)
        item.chunks.append(b"".join(texts).decode())
        out: list[Payload] = []
        for t in texts:
            out.append(Named(_TEXT_DELTA, b"".join((
                _TEXT_DELTA_HEAD, str(seq).encode(), at, t, _QUOTED_DELTA_TAIL))))
            seq += 1
        return out

    def _message(self, out: list[Payload]) -> _Item:
        item = self._open
        if item is None:
            # Every text answer's two opening events (as the last ones of _end_message): their
            # JSON put together from parts, the bytes orjson writes for the objects _wire and
            # _output_text make (tests/dialects/test_openai_responses.py holds them to those)
            item = self._open = _Item(len(self._items), _new_id("msg_"), "message")
            self._items.append(item)
            item.part_open = True
            out.append(self._event_of("response.output_item.added",
                                      item.added_or_done(item.message_json("in_progress", b""))))
            out.append(self._event_of("response.content_part.added", b"".join((
                b"{", item.text_part_at(), b',"part":', _EMPTY_TEXT_PART, b"}"))))
        return item

    def _think(self, event: ReasoningDelta, out: list[Payload]) -> None:
        # Another provider's signature or redacted data goes to an OpenAI client sealed (its
        # own redacted data as it came): the client's next turn gives it back.
        redacted = event.redacted if event.dialect == NAME else _sealed(
            event.dialect, event.signature, event.redacted)
        if not event.text and redacted is None:
            return
        self._end_message(out)
        item = self._reasoning
        if item is not None and item.redacted is not None and (event.text or redacted):
            self._end_reasoning(out)  # redacted data closes the block it belongs to
            item = None
        if event.text:
            if item is None:
                item = self._reasoning = self._add("reasoning", "rs_", out)
            if not item.part_open:
                item.part_open = True
                out.append(self._event("response.reasoning_summary_part.added", {
                    "item_id": item.id, "output_index": item.index, "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""}}))
            item.chunks.append(event.text)
            out.append(self._event("response.reasoning_summary_text.delta", {
                "item_id": item.id, "output_index": item.index, "summary_index": 0,
                "delta": event.text}))
        if redacted is not None:
            if item is None:
                item = self._reasoning = self._add("reasoning", "rs_", out)
            item.redacted = redacted

    def _end_message(self, out: list[Payload], status: str = "completed") -> None:
        item = self._open
        if item is None:
            return
        self._open = None
        text = item.text
        annotations = self._take_annotations(text)
        for k, a in enumerate(annotations):
            out.append(self._event("response.output_text.annotation.added", {
                "item_id": item.id, "output_index": item.index, "content_index": 0,
                "annotation_index": k, "annotation": a}))
        part = b""
        if item.part_open:
            # the text part's JSON, written once for the three events that show it
            text_json = orjson.dumps(text)
            part = b"".join((b'{"type":"output_text","text":', text_json, b',"annotations":',
                             orjson.dumps(annotations) if annotations else b"[]", b"}"))
            at = item.text_part_at()
            if "response.output_text.done" not in item.seen:
                out.append(self._event_of("response.output_text.done", b"".join((
                    b"{", at, b',"text":', text_json, b',"logprobs":[]}'))))
            if "response.content_part.done" not in item.seen:
                out.append(self._event_of("response.content_part.done", b"".join((
                    b"{", at, b',"part":', part, b"}"))))
        item.final_json = item.message_json(status, part)  # (the response's output lists it too)
        item.chunks = []
        out.append(self._event_of("response.output_item.done", item.added_or_done(item.final_json)))

    def _take_annotations(self, text: str) -> list[JSON]:
        if self._citations is None:
            return []
        annotations = _annotations(self._citations, text)
        self._citations = None
        return annotations

    def _end_reasoning(self, out: list[Payload], status: str = "completed") -> None:
        item = self._reasoning
        if item is None:
            return
        self._reasoning = None
        if item.part_open:
            text = item.text
            base = {"item_id": item.id, "output_index": item.index, "summary_index": 0}
            if "response.reasoning_summary_text.done" not in item.seen:
                out.append(self._event("response.reasoning_summary_text.done",
                                       {**base, "text": text}))
            if "response.reasoning_summary_part.done" not in item.seen:
                out.append(self._event("response.reasoning_summary_part.done", {
                    **base, "part": {"type": "summary_text", "text": text}}))
        self._done_item(item, status, out)

    def _end_call(self, item: _Item, status: str, out: list[Payload]) -> None:
        if _is_custom(item):
            out.append(self._event("response.custom_tool_call_input.done", {
                "item_id": item.id, "output_index": item.index, "input": item.text}))
            self._done_item(item, status, out)
            return
        if not item.chunks:
            # No arguments came (an Anthropic tool_use with an empty input): the JSON of none.
            item.chunks.append("{}")
            out.append(self._event("response.function_call_arguments.delta", {
                "item_id": item.id, "output_index": item.index, "delta": "{}"}))
        out.append(self._event("response.function_call_arguments.done", {
            "item_id": item.id, "output_index": item.index, "arguments": item.text}))
        self._done_item(item, status, out)

    def _done_item(self, item: _Item, status: str, out: list[Payload],
                   annotations: list[JSON] | None = None) -> None:
        wire = item.final = self._wire(item, status, annotations)
        item.chunks = []
        out.append(self._event("response.output_item.done",
                               {"output_index": item.index, "item": wire}))

    def _wire(self, item: _Item, status: str,
              annotations: list[JSON] | None = None) -> dict[str, JSON]:
        """An item as ``output_item.added`` (``in_progress``, empty) or ``.done`` shows it."""
        empty = status == "in_progress"
        match item.kind:
            case "message":
                content = [] if empty or not item.part_open else [
                    _output_text(item.text, annotations or [])]
                return {"type": "message", "id": item.id, "status": status,
                        "role": "assistant", "content": content}
            case "function_call":
                assert item.call is not None
                return _call_item(item.call, item.id, status, "" if empty else item.text)
            case _:
                wire: dict[str, JSON] = {"type": "reasoning", "id": item.id, "summary": [] if (
                    empty or not item.part_open) else [{"type": "summary_text",
                                                        "text": item.text}]}
                if item.redacted is not None and not empty:
                    wire["encrypted_content"] = item.redacted
                return wire

    def _close_all(self, status: str, out: list[Payload]) -> None:
        if self._citations is not None:
            self._message(out)  # the answer's sources need a text part to hang on
        self._end_message(out, status)
        self._end_reasoning(out, status)
        for index in sorted(self._calls):
            self._end_call(self._calls[index], status, out)
        self._calls.clear()

    def _final_output(self) -> bytes:
        """The response's ``output``, as JSON: each item as ``output_item.done`` showed it."""
        return b"".join((b"[", b",".join([
            i.final_json or orjson.dumps(i.final if i.final is not None
                                         else self._wire(i, "incomplete"))
            for i in self._items]), b"]"))

    def _finish(self, event: StreamFinish, out: list[Payload]) -> None:
        reason = event.reason or ("tool_calls" if any(
            i.kind == "function_call" for i in self._items) else "stop")
        status, details = _status_of(reason)
        if status == "failed":
            self._error(StreamError("the upstream reported an error"), out)
            return
        self._close_all("completed" if status == "completed" else "incomplete", out)
        self._closed = True
        kind = "response.completed" if status == "completed" else "response.incomplete"
        out.append(self._event_of(kind, self._response(
            status, details=details, output=self._final_output(),
            usage=_usage_json(event.usage) if event.usage is not None else None)))

    def follow(self, payload: Any) -> None:
        """The upstream's own event went to the client (identity route): take its numbering,
        ids and items as this encoder's own, so that an error written next continues it. A
        :class:`Slot` is a text delta read by its template, never parsed: the event followed
        last, but for its text and number."""
        if type(payload) is Slot:
            if payload.counter is not None:
                self._seq = max(self._seq, payload.counter + 1)
            if self._followed_text is not None:
                self._followed_text.chunks.append(payload.text)
            return
        if type(payload) is TextRun:  # text deltas like the Slot before them, read at once
            if payload.counter is not None:
                self._seq = max(self._seq, payload.counter + 1)
            if self._followed_text is not None:
                self._followed_text.chunks.append(payload.text())
            return
        self._followed_text = None
        if not isinstance(payload, Named) or not isinstance(payload.data, dict):
            return
        p: dict[str, Any] = payload.data
        seq = p.get("sequence_number")
        if isinstance(seq, int) and seq >= self._seq:
            self._seq = seq + 1
        kind = p.get("type")
        if kind == "response.created" and isinstance(response := p.get("response"), dict):
            self._started = True
            self._shell = b""  # (its id, time and model are the upstream's from now on)
            if isinstance(response.get("id"), str):
                self._id = response["id"]
            if isinstance(response.get("created_at"), int):
                self._created = response["created_at"]
            if isinstance(response.get("model"), str):
                self._model = response["model"]
            return
        index = p.get("output_index")
        if not isinstance(index, int):
            return
        item = p.get("item")
        if kind == "response.output_item.added" and isinstance(item, dict):
            self._follow_added(index, item)
            return
        for followed in self._items:
            if followed.index == index:
                break
        else:
            return
        delta = p.get("delta")
        if kind in _FOLLOWED_DELTAS and isinstance(delta, str):
            followed.chunks.append(delta)
            if kind == "response.output_text.delta":
                self._followed_text = followed
        elif kind in ("response.content_part.added", "response.reasoning_summary_part.added"):
            followed.part_open = True
        elif kind in _PART_CLOSERS:
            followed.seen.add(kind)
        elif kind == "response.output_item.done" and isinstance(item, dict):
            followed.final = item
            followed.chunks = []
            if followed is self._open:
                self._open = None
            if followed is self._reasoning:
                self._reasoning = None

    def _follow_added(self, index: int, item: dict[str, Any]) -> None:
        given = item.get("id")
        item_id = given if isinstance(given, str) else _new_id("item_")
        kind = item.get("type")
        if kind in ("function_call", "custom_tool_call"):
            namespace = item.get("namespace")
            call = ToolCall(str(item.get("call_id") or item_id), str(item.get("name") or ""), "",
                            "custom" if kind == "custom_tool_call" else "function",
                            namespace if isinstance(namespace, str) else None)
            self._items.append(_Item(index, item_id, "function_call", call=call))
        elif kind in ("message", "reasoning"):
            followed = _Item(index, item_id, kind)
            self._items.append(followed)
            if kind == "message":
                self._open = followed
            else:
                self._reasoning = followed

    def _error(self, event: StreamError, out: list[Payload]) -> None:
        # The message and reasoning shown so far are finished as incomplete first (the message
        # with its sources), so that the client keeps them: nothing but response.failed may
        # follow the error event. A call cut short stays open: its arguments are not JSON.
        if self._started:
            if self._citations is not None:
                self._message(out)  # the answer's sources need a text part to hang on
            self._end_message(out, "incomplete")
            self._end_reasoning(out, "incomplete")
        self._closed = True
        code = event.code or "server_error"
        out.append(self._event("error", {
            "code": code, "message": event.message, "param": None,
            "error": {"type": _error_type(event.status), "code": code,
                      "message": event.message, "param": None}}))
        out.append(self._event_of("response.failed", self._response(
            "failed", error=_failure(event.message, event.code), output=self._final_output())))


# --- stored responses ----------------------------------------------------------------------------


_KEEPS_STATUS = frozenset({"completed", "incomplete"})
_TERMINAL = frozenset({"response.completed", "response.incomplete"})
_ID_PREFIX = {"message": "msg_", "function_call": "fc_", "reasoning": "rs_"}


class _Stored:
    """The Responses API's stored state, as wire JSON (:class:`StoredResponses`): see
    docs/translation.md#stored-responses. The official shapes: ``GET /v1/responses/{id}`` answers
    the response object, ``DELETE`` ``{"id", "object": "response", "deleted": true}``,
    ``GET …/input_items`` a cursor list (``data``, ``first_id``, ``last_id``, ``has_more``)."""

    def references(self, body: JSON) -> References:
        obj = expect_object(body, "")
        previous = obj.get("previous_response_id")
        if previous is not None and not isinstance(previous, str):
            raise DialectError("must be a string", "previous_response_id")
        store = obj.get("store")
        if store is not None and not isinstance(store, bool):
            raise DialectError("must be a boolean", "store")
        items: dict[str, None] = {}
        raw = obj.get("input")
        for i, item in enumerate(raw if isinstance(raw, list) else []):
            if isinstance(item, dict) and item.get("type") == "item_reference":
                ref = item.get("id")
                if not isinstance(ref, str):
                    raise DialectError("must be a string", f"input[{i}].id")
                items[ref] = None
        if not previous and not items:  # nearly every request: nothing to build
            return _UNREFERRING[store is not False]
        return References(previous or None, tuple(items), store is not False)

    def expand(self, body: JSON, earlier: Sequence[JSON],
               items: Mapping[str, JSON]) -> tuple[JSON, list[JSON]]:
        obj = dict(expect_object(body, ""))
        obj.pop("previous_response_id", None)
        raw = obj.get("input")
        own: list[JSON]
        if isinstance(raw, str):
            own = [{"type": "message", "role": "user", "content": raw}]
        elif isinstance(raw, list):
            own = [items[item["id"]] if isinstance(item, dict)
                   and item.get("type") == "item_reference" else item for item in raw]
        else:
            own = []
        if earlier or not isinstance(raw, str):  # a lone string stays one (its echo says so)
            obj["input"] = [*earlier, *own]
        return obj, [_kept_item(item) for item in own]

    def mark(self, req: ChatRequest, previous: str | None, store: bool) -> None:
        req.hints[_KEPT] = {"store": store, "previous_response_id": previous}

    def finished(self, payload: JSON) -> StoredAnswer | None:
        data = payload.data if isinstance(payload, Named) else payload
        if not isinstance(data, dict):
            return None
        if data.get("object") == "response":
            response = data
        elif data.get("type") in _TERMINAL and isinstance(data.get("response"), dict):
            response = data["response"]
        else:
            return None
        rid, output = response.get("id"), response.get("output")
        if response.get("status") not in _KEEPS_STATUS or not isinstance(rid, str) \
                or not isinstance(output, list):
            return None
        return StoredAnswer(rid, response, [_with_id(item) for item in output])

    def not_found(self, what: str, ident: str) -> ChatError:
        if what == "response":
            return ChatError(400, f"Previous response with id '{ident}' not found.",
                             code="previous_response_not_found", type="invalid_request_error",
                             param="previous_response_id")
        if what == "item":
            return ChatError(404, f"Item with id '{ident}' not found.",
                             type="invalid_request_error", param="input")
        return ChatError(404, f"Response with id '{ident}' not found.",
                         type="invalid_request_error")

    def deleted(self, ident: str) -> JSON:
        return {"id": ident, "object": "response", "deleted": True}

    def item_list(self, items: Sequence[JSON], has_more: bool) -> JSON:
        first = items[0].get("id") if items and isinstance(items[0], dict) else None
        last = items[-1].get("id") if items and isinstance(items[-1], dict) else None
        return {"object": "list", "data": list(items), "first_id": first, "last_id": last,
                "has_more": has_more}


_UNREFERRING = {True: References(), False: References(store=False)}
"""What a request that refers to nothing says, by whether it asks for its answer to be kept."""


def _with_id(item: JSON) -> JSON:
    if not isinstance(item, dict) or isinstance(item.get("id"), str):
        return item
    kind = item.get("type", "message")
    return {"id": _new_id(_ID_PREFIX.get(str(kind), "item_")), **item}


def _kept_item(item: JSON) -> JSON:
    """An input item as ``input_items`` lists it: typed, with an id and a status (the SDKs'
    item types require both), a message's text as parts."""
    if not isinstance(item, dict):
        return item
    item = {**item, "status": item.get("status") or "completed"}
    if item.get("type", "message") == "message":
        role = item.get("role")
        content = item.get("content")
        if isinstance(content, str):
            kind = _text_kind(str(role))
            part: dict[str, JSON] = {"type": kind, "text": content}
            if kind == "output_text":
                part["annotations"] = []
            content = [part]
        item = {**item, "type": "message", "content": content}
    return _with_id(item)


OpenAIResponsesDialect.stored_responses = _Stored()
