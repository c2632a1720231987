"""``anthropic``: the Anthropic Messages API, ``POST /v1/messages`` (see
specs/anthropic-messages.md), both as a client's dialect and as an upstream's.

Requests carry a top-level ``system`` (the canonical leading system messages), ``messages`` whose
content is a string or content blocks, ``tools`` / ``tool_choice``, ``thinking`` and sampling.
A user message's ``tool_result`` blocks become canonical ``tool`` messages (one per result, then
a user message for what follows them); rendering does the reverse, so that consecutive results and
the user text after them travel as ONE user message, as the API requires. Assistant ``tool_use``
blocks are tool calls whose arguments are the JSON text of ``input``; ``thinking`` and
``redacted_thinking`` blocks are reasoning, signed by Anthropic and therefore sent back only to
Anthropic (a block without a signature, or from another provider, is never sent: the API rejects
a signature it did not issue).

Streams are SSE with named events: ``message_start``, per content block
``content_block_start`` / ``content_block_delta`` / ``content_block_stop`` (indexes 0, 1, 2…, one
block at a time), ``message_delta`` (stop reason, cumulative usage), ``message_stop``; ``ping``
anywhere; ``error`` ends a broken stream. Usage differs from OpenAI's: ``input_tokens`` excludes
cache reads and writes, which the canonical input count includes.

Same-dialect round trips are exact: what no canonical field names (block order, ``cache_control``
and ``citations`` on blocks, server-tool blocks in answers, ``thinking.display``…) is kept in
``extras`` under keys that start with ``_``, read back only by this module.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, assert_never

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
    sampling_of,
    split_known,
)
from gateway.dialects.shared import messages_of
from gateway.errors import DialectError
from gateway.framing import Framing, Named, Payload, RawData, TextPath

__all__ = ["AnthropicDialect"]

NAME = "anthropic"
DEFAULT_MAX_TOKENS = 4096
"""The output cap sent upstream when neither the client nor the upstream's config set one (the
API requires ``max_tokens``)."""

_REQUEST_KEYS = frozenset({
    "model", "max_tokens", "messages", "system", "stream", "tools", "tool_choice", "thinking",
    "stop_sequences", "temperature", "top_p", "top_k", "metadata"})
_RESPONSE_KEYS = frozenset({"id", "type", "role", "model", "content", "stop_reason", "usage"})
_EXTRAS_KNOWN = _REQUEST_KEYS - {"stream"}
"""What a request's extras leave out ("stream" stays, so that a same-dialect render keeps an
explicit false)."""

_SYSTEM_SEPARATOR = "\n\n"
"""Between the text blocks of a ``system`` list once they are one canonical text (see
:func:`_parse_system`)."""

_TEXT_DELTA_HEAD = b'{"type":"content_block_delta","index":'
_TEXT_DELTA_MID = b',"delta":{"type":"text_delta","text":'
# The other frames every text answer writes, put together around what varies in them (the
# bytes _Encoder._emit would write for the same dicts)
_BLOCK_STOP_HEAD = b'{"type":"content_block_stop","index":'
_TEXT_START_HEAD = b'{"type":"content_block_start","index":'
_TEXT_START_TAIL = b',"content_block":{"type":"text","text":""}}'
_MESSAGE_DELTA_HEAD = b'{"type":"message_delta","delta":{"stop_reason":'
_MESSAGE_DELTA_MID = b',"stop_sequence":null},"usage":'
_MESSAGE_STOP = b'{"type":"message_stop"}'
_STOP_IN = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Anthropic ``stop_reason`` -> canonical. ``pause_turn`` (a server-tool turn to be resumed) has
no canonical equal and is kept as it came."""
_STOP_OUT = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
    "error": "end_turn",
}
_STOP_REASONS = frozenset({"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn",
                           "refusal", "model_context_window_exceeded"})

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""HTTP status -> ``error.type`` (Anthropic's table; 503, the gateway's own "too busy", is
``overloaded_error`` like Anthropic's 529)."""
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

_BUDGET_BY_EFFORT = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384,
                     "xhigh": 32768, "max": 32768}
"""A reasoning effort (OpenAI, Responses) as a thinking budget; the inverse of the OpenAI
dialect's budget -> effort table (docs/translation.md). ``max`` gets the ``xhigh`` budget: a
larger one plus the default cap passes some models' output limit."""
_EFFORT_MAP = {"none": "low", "minimal": "low", "low": "low", "medium": "medium",
               "high": "high", "xhigh": "xhigh", "max": "max"}
"""A canonical effort (OpenAI's ``ReasoningEffort``) as ``output_config.effort``
(``OutputConfigParam``: low, medium, high, xhigh, max). The two OpenAI has below Anthropic's
lowest go to the nearest, ``low`` (``none`` also turns ``thinking`` off). An effort in neither
list is sent as it came, for the API to judge, rather than replaced by a default."""
_MIN_BUDGET = 1024
"""The API's smallest ``thinking.budget_tokens``."""


def _stop_in(reason: str) -> str:
    return _STOP_IN.get(reason, reason)


def _stop_out(reason: str | None) -> str:
    if reason is None:
        return "end_turn"
    if reason in _STOP_OUT:
        return _STOP_OUT[reason]
    return reason if reason in _STOP_REASONS else "end_turn"


def _error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def _new_id() -> str:
    return "msg_" + random_hex(12)


def _str(v: JSON) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: JSON) -> int | None:
    if type(v) is int:  # (nearly every value: a JSON integer, which no bool is)
        return v
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _public(extras: dict[str, JSON]) -> dict[str, JSON]:
    """The wire keys of an extras dict (this module's own notes start with ``_``)."""
    return {k: v for k, v in extras.items() if not k.startswith("_")}


def _input_of(arguments: str) -> dict[str, JSON]:
    """A tool call's arguments as the JSON object ``tool_use.input`` must be. Empty arguments
    are ``{}``; arguments that are not a JSON object (a call cut off mid-way by another
    provider's output cap) are also sent as ``{}``, because the API takes nothing else and
    refusing would make the conversation impossible to continue (docs/translation.md)."""
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _sendable(r: Reasoning) -> bool:
    """Whether reasoning may go to Anthropic: only what Anthropic signed (or redacted)."""
    return r.dialect == NAME and bool(r.signature or r.redacted)


# --- usage ---------------------------------------------------------------------------------------


def _usage_in(v: JSON) -> Usage | None:
    """Anthropic usage as canonical: the input count includes cache reads and writes."""
    if not isinstance(v, dict):
        return None
    fresh = _int(v.get("input_tokens"))
    read = _int(v.get("cache_read_input_tokens"))
    write = _int(v.get("cache_creation_input_tokens"))
    total: int | None = None  # the counts present, summed (None when none is)
    for count in (fresh, read, write):
        if count is not None:
            total = count if total is None else total + count
    details = v.get("output_tokens_details")
    return Usage(
        input_tokens=total,
        output_tokens=_int(v.get("output_tokens")),
        cached_input_tokens=read,
        cache_write_tokens=write,
        reasoning_tokens=_int(details.get("thinking_tokens")) if isinstance(details, dict)
        else None,
    )


def _delta_usage(u: Usage | None) -> dict[str, JSON]:
    """``message_delta.usage``: cumulative, and only the counts known (a reader overwrites the
    ``message_start`` values with those present)."""
    if u is None:
        return {"output_tokens": 0}
    out = _usage_out(u)
    if u.input_tokens is None:
        del out["input_tokens"]
    return out


def _usage_out(u: Usage | None) -> dict[str, JSON]:
    if u is None:
        return {"input_tokens": 0, "output_tokens": 0}
    read, write = u.cached_input_tokens, u.cache_write_tokens
    out: dict[str, JSON] = {
        "input_tokens": max(0, (u.input_tokens or 0) - (read or 0) - (write or 0)),
        "output_tokens": u.output_tokens or 0,
    }
    if write is not None:
        out["cache_creation_input_tokens"] = write
    if read is not None:
        out["cache_read_input_tokens"] = read
    if u.reasoning_tokens is not None:
        out["output_tokens_details"] = {"thinking_tokens": u.reasoning_tokens}
    return out


# --- content blocks ------------------------------------------------------------------------------
#
# A message's blocks parse into parts, tool calls and reasoning. When rendering them back in the
# canonical order (reasoning, parts, calls, with no extra keys) would not give the same blocks,
# the message keeps a layout under ``_blocks``: one entry per block, ``[kind, extra keys]``
# (kind ``p`` part, ``c`` call, ``r`` reasoning; answers also ``t`` text of n characters and
# ``o`` a block kept whole), which a same-dialect render follows.


@dataclass(slots=True)
class _Blocks:
    parts: list[Part]
    calls: list[ToolCall]
    reasoning: list[Reasoning]
    layout: list[list[JSON]]


_TEXT_KEYS = frozenset({"type", "text"})
_MESSAGE_KEYS = frozenset({"role", "content"})
_IMAGE_KEYS = frozenset({"type", "source"})
_TOOL_USE_KEYS = frozenset({"type", "id", "name", "input"})
_THINKING_KEYS = frozenset({"type", "thinking", "signature"})
_REDACTED_KEYS = frozenset({"type", "data"})
_RESULT_KEYS = frozenset({"type", "tool_use_id", "content", "is_error"})


def _extra(block: dict[str, JSON], known: frozenset[str]) -> dict[str, JSON]:
    return {k: v for k, v in block.items() if k not in known}


def _parse_image(block: dict[str, JSON]) -> ImagePart | None:
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    kind = source.get("type")
    if kind == "base64" and set(source) == {"type", "media_type", "data"} \
            and isinstance(source["media_type"], str) and isinstance(source["data"], str):
        return ImagePart(data=source["data"], media_type=source["media_type"])
    if kind == "url" and set(source) == {"type", "url"} and isinstance(source["url"], str):
        return ImagePart(url=source["url"])
    return None  # a file source, or keys we do not know: kept whole


def _parse_blocks(content: list[JSON], where: str, *, assistant: bool) -> _Blocks:
    """Blocks other than ``tool_result`` (the caller takes those out)."""
    out = _Blocks([], [], [], [])
    for j, raw in enumerate(content):
        _parse_block(raw, f"{where}[{j}]", assistant, out)
    return out


def _arguments(args: dict[str, Any], where: str) -> str:
    """A tool call's input as the JSON text of its arguments. What orjson cannot write (an
    integer past 64 bits, which no body it parsed holds, or nesting past 254 levels) is an
    error of the answer, named, never an exception of the gateway."""
    try:
        return orjson.dumps(args).decode()
    except orjson.JSONEncodeError:
        raise DialectError("cannot be passed on as JSON text", where) from None


def _parse_block(raw: JSON, at: str, assistant: bool, out: _Blocks) -> None:
    if isinstance(raw, str):  # tolerated: a bare string is text
        out.parts.append(TextPart(raw))
        out.layout.append(["p", {}])
        return
    block = expect_object(raw, at)
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise DialectError("must be a string", f"{at}.text")
        out.parts.append(TextPart(text))
        out.layout.append(["p", _extra(block, _TEXT_KEYS)])
    elif kind == "image" and (image := _parse_image(block)) is not None:
        out.parts.append(image)
        out.layout.append(["p", _extra(block, _IMAGE_KEYS)])
    elif kind == "tool_use" and assistant:
        cid, name, args = block.get("id"), block.get("name"), block.get("input", {})
        if not isinstance(cid, str):
            raise DialectError("must be a string", f"{at}.id")
        if not isinstance(name, str):
            raise DialectError("must be a string", f"{at}.name")
        if not isinstance(args, dict):
            raise DialectError(f"must be an object, not {kind_of(args)}", f"{at}.input")
        out.calls.append(ToolCall(cid, name, _arguments(args, f"{at}.input")))
        out.layout.append(["c", _extra(block, _TOOL_USE_KEYS)])
    elif kind == "thinking" and assistant:
        text, sig = block.get("thinking"), block.get("signature")
        if not isinstance(text, str):
            raise DialectError("must be a string", f"{at}.thinking")
        if sig is not None and not isinstance(sig, str):
            raise DialectError("must be a string", f"{at}.signature")
        out.reasoning.append(Reasoning(text, signature=sig, dialect=NAME if sig else None))
        out.layout.append(["r", _extra(block, _THINKING_KEYS)])
    elif kind == "redacted_thinking" and assistant:
        data = block.get("data")
        if not isinstance(data, str):
            raise DialectError("must be a string", f"{at}.data")
        out.reasoning.append(Reasoning(redacted=data, dialect=NAME))
        out.layout.append(["r", _extra(block, _REDACTED_KEYS)])
    else:
        # documents, search results, server-tool blocks…: only Anthropic reads them
        out.parts.append(OtherPart(NAME, str(kind), block))
        out.layout.append(["p", {}])


def _render_part(p: Part, same: bool) -> JSON | None:
    match p:
        case TextPart():
            if not p.text and not same:
                return None  # the API rejects empty text blocks
            return {"type": "text", "text": p.text}
        case ImagePart():
            inline = p.inline()
            if inline is not None:
                media_type, data = inline
                return {"type": "image",
                        "source": {"type": "base64", "media_type": media_type, "data": data}}
            return {"type": "image", "source": {"type": "url", "url": p.as_url()}}
        case OtherPart():
            return p.raw if p.dialect == NAME else None
        case _:
            assert_never(p)


def _render_reasoning(r: Reasoning) -> JSON:
    """A thinking block, or ``None`` when there is nothing to show."""
    mine = r.dialect == NAME
    if r.redacted is not None and mine and not r.text:
        return {"type": "redacted_thinking", "data": r.redacted}
    if not r.text and not (mine and r.signature is not None):
        return None  # e.g. another provider's encrypted reasoning: nothing Anthropic can read
    # Only a signature Anthropic issued is passed on: another provider's reasoning gets an empty
    # one, which Anthropic will never accept back (see :func:`_sendable`).
    return {"type": "thinking", "thinking": r.text,
            "signature": (r.signature or "") if mine else ""}


def _render_call(c: ToolCall) -> JSON:
    return {"type": "tool_use", "id": c.id, "name": c.name, "input": _input_of(c.arguments)}


def _render_blocks(parts: list[Part], calls: list[ToolCall], reasoning: list[Reasoning],
                   layout: JSON, same: bool) -> list[JSON]:
    """Blocks in the layout's order (same dialect), then whatever is left in the canonical
    order: reasoning, parts, calls."""
    parts, calls, reasoning = list(parts), list(calls), list(reasoning)
    out: list[JSON] = []
    if same and isinstance(layout, list):
        for entry in layout:
            kind, extra = entry[0], entry[1]
            block: JSON = None
            if kind == "p" and parts:
                block = _render_part(parts.pop(0), same)
            elif kind == "c" and calls:
                block = _render_call(calls.pop(0))
            elif kind == "r" and reasoning:
                block = _render_reasoning(reasoning.pop(0))
            if isinstance(block, dict):
                out.append({**block, **extra} if extra else block)
    out.extend(b for b in map(_render_reasoning, reasoning) if b is not None)
    out.extend(b for b in (_render_part(p, same) for p in parts) if b is not None)
    out.extend(_render_call(c) for c in calls)
    return out


# --- requests ------------------------------------------------------------------------------------


def _parse_system(raw: JSON) -> list[Message]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [Message("system", raw)]
    if not isinstance(raw, list):
        raise DialectError("must be a string or a list of text blocks", "system")
    blocks = _parse_blocks(raw, "system", assistant=False)
    texts = [p.text for p in blocks.parts if isinstance(p, TextPart)]
    if len(texts) > 1 and len(texts) == len(blocks.parts):
        # Several text blocks are one system prompt (Claude Code sends its identity line, then
        # its instructions). The API documents no join; other dialects hold a system prompt as
        # one text (Responses' ``instructions``, a protocol's system message), and joining the
        # parts with nothing between them ran two paragraphs into one line. A blank line is
        # what the blocks were written to be read as. The wire list is kept for an Anthropic
        # upstream (``cache_control`` on each block), as long as the text is unchanged.
        joined = _SYSTEM_SEPARATOR.join(texts)
        return [Message("system", [TextPart(joined)], extras={"_system": raw})]
    return [_with_layout(Message("system", blocks.parts), blocks, raw)]


def _with_layout(m: Message, blocks: _Blocks, wire: list[JSON]) -> Message:
    """Keep ``blocks``' layout in ``m`` when the canonical rendering would differ from
    ``wire``."""
    if _render_blocks(blocks.parts, blocks.calls, blocks.reasoning, None, True) != wire:
        m.extras["_blocks"] = blocks.layout
    return m


def _parse_messages(obj: dict[str, JSON]) -> list[Message]:
    out: list[Message] = []
    for i, m in enumerate(messages_of(obj)):
        where = f"messages[{i}]"
        out.extend(_parse_message(expect_object(m, where), where))
    return out


def _parse_message(m: dict[str, JSON], where: str) -> list[Message]:
    """One wire message as canonical messages: several when a user message carries tool
    results (each a ``tool`` message, then a user message for the blocks after them)."""
    role = m.get("role")
    if not isinstance(role, str):
        raise DialectError("must be a string", f"{where}.role")
    wire_extras = split_known(m, _MESSAGE_KEYS)
    content = m.get("content")
    msgs: list[Message]
    if content is None or isinstance(content, str):
        msgs = [Message(role, content or "")]
        if content is None:
            wire_extras["content"] = None
    elif not isinstance(content, list):
        raise DialectError("must be a string or a list of content blocks", f"{where}.content")
    elif role == "user":
        msgs = _parse_user_blocks(content, f"{where}.content")
    else:
        blocks = _parse_blocks(content, f"{where}.content", assistant=role == "assistant")
        msgs = [_with_layout(Message(role, blocks.parts, tool_calls=blocks.calls,
                                     reasoning=blocks.reasoning), blocks, content)]
    first = msgs[0]
    if wire_extras:
        first.extras["_msg"] = wire_extras
    if role == "system":
        first.extras["_in_messages"] = True
    for later in msgs[1:]:
        later.extras["_cont"] = True  # the same wire message as the one before it
    return msgs


def _parse_user_blocks(content: list[JSON], where: str) -> list[Message]:
    out: list[Message] = []
    run: list[tuple[int, JSON]] = []  # the blocks since the last tool result, by position

    def flush() -> None:
        if run:
            blocks = _Blocks([], [], [], [])
            for j, raw in run:
                _parse_block(raw, f"{where}[{j}]", False, blocks)
            out.append(_with_layout(Message("user", blocks.parts), blocks, [b for _, b in run]))
            run.clear()

    for j, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") == "tool_result":
            flush()
            out.append(_parse_result(block, f"{where}[{j}]"))
        else:
            run.append((j, block))
    flush()
    if not out:
        out.append(Message("user", []))
    return out


def _parse_result(block: dict[str, JSON], where: str) -> Message:
    cid = block.get("tool_use_id")
    if not isinstance(cid, str):
        raise DialectError("must be a string", f"{where}.tool_use_id")
    extras: dict[str, JSON] = {}
    raw = block.get("content")
    content: str | list[Part]
    if raw is None:
        content = ""
        if "content" in block:
            extras["_null"] = True
        else:
            extras["_absent"] = True
    elif isinstance(raw, str):
        content = raw
    elif isinstance(raw, list):
        blocks = _parse_blocks(raw, f"{where}.content", assistant=False)
        content = blocks.parts
        if _render_blocks(blocks.parts, [], [], None, True) != raw:
            extras["_blocks"] = blocks.layout
    else:
        raise DialectError("must be a string or a list of content blocks", f"{where}.content")
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise DialectError("must be a boolean", f"{where}.is_error")
    extra = _extra(block, _RESULT_KEYS)
    if is_error is False:
        extra["is_error"] = False  # said explicitly: said again
    if extra:
        extras["_block"] = extra
    return Message("tool", content, tool_call_id=cid, is_error=bool(is_error), extras=extras)


def _parse_tools(raw: JSON) -> list[ToolDef]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", "tools")
    out: list[ToolDef] = []
    for i, t in enumerate(raw):
        t = expect_object(t, f"tools[{i}]")
        kind = t.get("type")
        name = t.get("name")
        if kind not in (None, "custom"):
            # a server tool (web search, code execution, bash…): only Anthropic runs it
            out.append(ToolDef(name if isinstance(name, str) else "", kind=str(kind), raw=t,
                               dialect=NAME))
            continue
        if not isinstance(name, str) or not name:
            raise DialectError("must be a non-empty string", f"tools[{i}].name")
        desc, strict = t.get("description"), t.get("strict")
        schema = t.get("input_schema")
        if schema is not None and not isinstance(schema, dict):
            raise DialectError("must be an object (a JSON Schema)", f"tools[{i}].input_schema")
        out.append(ToolDef(name, desc if isinstance(desc, str) else None, schema,
                           strict if isinstance(strict, bool) else None, raw=t, dialect=NAME))
    return out


def _render_tool(t: ToolDef, same: bool) -> JSON | None:
    if t.kind != "function":
        return t.raw if t.dialect == NAME else None
    if same and t.dialect == NAME and isinstance(t.raw, dict):
        return t.raw
    out: dict[str, JSON] = {"name": t.name}
    if t.description is not None:
        out["description"] = t.description
    out["input_schema"] = t.parameters if isinstance(t.parameters, dict) else {
        "type": "object", "properties": {}}
    if t.strict is not None:
        out["strict"] = t.strict
    return out


_CHOICE_IN: dict[str, Literal["auto", "none", "required", "tool"]] = {
    "auto": "auto", "any": "required", "tool": "tool", "none": "none"}
_CHOICE_OUT = {"auto": "auto", "required": "any", "tool": "tool", "none": "none"}


def _parse_tool_choice(raw: JSON) -> ToolChoice | None:
    if raw is None:
        return None
    choice = expect_object(raw, "tool_choice")
    mode = _CHOICE_IN.get(str(choice.get("type")))
    if mode is None:
        raise DialectError('type must be "auto", "any", "tool" or "none"', "tool_choice.type")
    name = choice.get("name")
    if mode == "tool" and not isinstance(name, str):
        raise DialectError("must be a string", "tool_choice.name")
    off = choice.get("disable_parallel_tool_use")
    if off is not None and not isinstance(off, bool):
        raise DialectError("must be a boolean", "tool_choice.disable_parallel_tool_use")
    return ToolChoice(mode, name if isinstance(name, str) and mode == "tool" else None,
                      None if off is None else not off)


def _render_tool_choice(c: ToolChoice) -> JSON:
    out: dict[str, JSON] = {"type": _CHOICE_OUT[c.mode]}
    if c.mode == "tool":
        out["name"] = c.name or ""
    if c.parallel is not None and c.mode != "none":
        out["disable_parallel_tool_use"] = not c.parallel
    return out


def _parse_thinking(raw: JSON) -> ReasoningRequest | None:
    if raw is None:
        return None
    t = expect_object(raw, "thinking")
    kind = t.get("type")
    if kind == "enabled":
        budget = t.get("budget_tokens")
        if _int(budget) is None:
            raise DialectError("must be an integer", "thinking.budget_tokens")
        return ReasoningRequest(budget_tokens=budget)
    if kind == "adaptive":
        return ReasoningRequest()
    if kind == "disabled":
        return ReasoningRequest(enabled=False)
    raise DialectError('type must be "enabled", "adaptive" or "disabled"', "thinking.type")


def _parse_output_config(raw: JSON, extras: dict[str, JSON]) -> tuple[OutputFormat | None,
                                                                        str | None]:
    """The JSON schema ``output_config.format`` asks for (structured outputs,
    https://platform.claude.com/docs/en/build-with-claude/structured-outputs) and the
    ``output_config.effort``; ``extras["output_config"]`` keeps the rest."""
    if raw is None:
        return None, None
    config = expect_object(raw, "output_config")
    effort = config.get("effort")
    if effort is not None and not isinstance(effort, str):
        raise DialectError("must be a string", "output_config.effort")
    output = None
    fmt = config.get("format")
    if fmt is not None:
        fmt = expect_object(fmt, "output_config.format")
        if fmt.get("type") != "json_schema":
            raise DialectError("must be json_schema", "output_config.format.type")
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise DialectError(f"must be an object, not {kind_of(schema)}",
                               "output_config.format.schema")
        output = OutputFormat("json_schema", schema=schema)
    rest = {k: v for k, v in config.items()
            if k != "format" and not (k == "effort" and effort is not None)}
    if rest:
        extras["output_config"] = rest
    else:
        del extras["output_config"]
    return output, effort


def _with_effort(reasoning: ReasoningRequest | None, effort: str | None
                 ) -> ReasoningRequest | None:
    """``output_config.effort`` joins the ``thinking`` request: one canonical reasoning request
    (an effort alone asks for no thinking; the same-dialect render knows it by the absent raw
    ``thinking``)."""
    if effort is None:
        return reasoning
    if reasoning is None:
        return ReasoningRequest(effort=effort)
    reasoning.effort = effort
    return reasoning


def _render_output_format(o: OutputFormat) -> dict[str, JSON]:
    # (only json_schema reaches here: the capability declares no other kind)
    return {"type": "json_schema",
            "schema": o.schema if o.schema is not None else {"type": "object"}}


def _number(obj: dict[str, JSON], key: str, sampling: dict[str, JSON], *,
            integer: bool = False) -> None:
    value = obj.get(key)
    if value is None:
        return
    # Two plain checks, not one isinstance over a computed type: mypy narrows that one to int,
    # where a float is allowed.
    number = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not number:
        raise DialectError("must be an integer" if integer else "must be a number", key)
    sampling[key] = value


# --- the dialect ---------------------------------------------------------------------------------


class AnthropicDialect(SamplesFromPackage):
    name = NAME
    summary = "Anthropic Messages API (/v1/messages), SSE with named events"
    # Structured outputs (output_config.format) take a JSON schema only: OpenAI's JSON mode
    # (any object) has no native form here, and the route's policy answers it.
    capabilities = Capabilities(usage_whole=True, usage_stream=True, tools=True, images=True,
                                reasoning=True, reasoning_replay="own",
                                structured_output=frozenset({"json_schema"}))
    framing: Framing = "sse"
    named_events = True
    stream_content_type = "text/event-stream"
    stream_accept = SSE_ACCEPT
    cumulative_stream = False
    text_path: TextPath | None = ("delta", "text")
    stream_path: str | None = None
    stream_by_accept = False
    default_path = "/v1/messages"
    route_options = None
    models_path: str | None = "/v1/models"
    models_header: str | None = "anthropic-version"  # every Anthropic SDK request has it
    token_count: TokenCount | None = TokenCount(
        # https://docs.anthropic.com/en/api/messages-count-tokens: the request without
        # max_tokens, sampling, stop_sequences, metadata or stream; the answer {input_tokens}
        "/count_tokens", frozenset({"model", "messages", "system", "tools", "tool_choice",
                                    "thinking", "mcp_servers", "context_management",
                                    "output_config"}))

    def render_models(self, names: Sequence[str]) -> JSON:
        # https://docs.anthropic.com/en/api/models-list: one page holding every model; the
        # release date is unknown, and the epoch says so (as the reference allows).
        return {"data": [{"type": "model", "id": n, "display_name": n,
                          "created_at": "1970-01-01T00:00:00Z", "lifecycle": "active"}
                         for n in names],
                "has_more": False, "first_id": names[0] if names else None,
                "last_id": names[-1] if names else None}

    # --- requests ------------------------------------------------------------------------------

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = expect_object(body, "")
        model = obj.get("model")
        if model is not None and not isinstance(model, str):
            raise DialectError("must be a string", "model")
        stream = obj.get("stream", False)
        if stream is not None and not isinstance(stream, bool):
            raise DialectError("must be a boolean", "stream")
        sampling: dict[str, JSON] = {}
        _number(obj, "max_tokens", sampling, integer=True)
        _number(obj, "temperature", sampling)
        _number(obj, "top_p", sampling)
        _number(obj, "top_k", sampling, integer=True)
        stop = obj.get("stop_sequences")
        if stop is not None:
            if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
                raise DialectError("must be a list of strings", "stop_sequences")
            sampling["stop"] = stop
        extras = split_known(obj, _EXTRAS_KNOWN)
        metadata = obj.get("metadata")
        if metadata is not None:
            metadata = expect_object(metadata, "metadata")
            user = metadata.get("user_id")
            if isinstance(user, str):
                sampling["user"] = user
            rest = {k: v for k, v in metadata.items() if k != "user_id" or not isinstance(v, str)}
            extras["_metadata"] = rest
        thinking = obj.get("thinking")
        if thinking is not None:
            extras["_thinking"] = thinking
        if obj.get("tool_choice") is not None:
            extras["_tool_choice"] = obj["tool_choice"]
        output, effort = _parse_output_config(obj.get("output_config"), extras)
        return ChatRequest(
            messages=_parse_system(obj.get("system")) + _parse_messages(obj),
            stream=bool(stream),
            model=model,
            sampling=sampling,
            tools=_parse_tools(obj.get("tools")),
            tool_choice=_parse_tool_choice(obj.get("tool_choice")),
            reasoning=_with_effort(_parse_thinking(thinking), effort),
            output=output,
            # "stream" stays in extras so that a same-dialect render keeps an explicit false
            extras=extras,
            extras_dialect=NAME,
        )

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = _public(req.extras) if same else {}
        out["model"] = req.model or model or "default"
        cap = req.sampling.get("max_tokens")
        client_cap = isinstance(cap, int)
        if not isinstance(cap, int):
            cap = max_tokens or DEFAULT_MAX_TOKENS
        if req.reasoning is not None:
            thinking, cap = self._thinking(req, same, cap, client_cap, max_tokens)
            if thinking is not None:
                out["thinking"] = thinking
        out["max_tokens"] = cap
        system, messages = _render_messages(req, same)
        if system is not None:
            out["system"] = system
        out["messages"] = messages
        sampling = req.sampling
        if "temperature" not in sampling and req.context is not None:
            sampling = {**sampling, **sampling_of(req.context)}
        for key in ("temperature", "top_p", "top_k"):
            if key in sampling:
                out[key] = sampling[key]
        if "stop" in sampling:
            out["stop_sequences"] = sampling["stop"]
        user = sampling.get("user")
        metadata = req.extras.get("_metadata") if same else None
        if isinstance(user, str) or isinstance(metadata, dict):
            meta = dict(metadata) if isinstance(metadata, dict) else {}
            if isinstance(user, str):
                meta["user_id"] = user
            out["metadata"] = meta
        tools = [w for w in (_render_tool(t, same) for t in req.tools) if w is not None] \
            if req.tools else []
        if tools:
            out["tools"] = tools
        if req.tool_choice is not None and (tools or same):
            raw = req.extras.get("_tool_choice") if same else None
            out["tool_choice"] = raw if raw is not None else _render_tool_choice(req.tool_choice)
        effort = req.reasoning.effort if req.reasoning is not None else None
        if effort is not None:
            config = out.get("output_config")
            out["output_config"] = {**(config if isinstance(config, dict) else {}),
                                    "effort": _EFFORT_MAP.get(effort, effort)}
        if req.output is not None:
            config = out.get("output_config")
            out["output_config"] = {**(config if isinstance(config, dict) else {}),
                                    "format": _render_output_format(req.output)}
        if stream:
            out["stream"] = True
        elif "stream" in out or req.stream:
            out["stream"] = False
        return out

    @staticmethod
    def _thinking(req: ChatRequest, same: bool, cap: int, client_cap: bool,
                  default_cap: int | None) -> tuple[JSON, int]:
        """``thinking`` and the output cap it needs (the budget must stay under it)."""
        r = req.reasoning
        assert r is not None
        if same:
            # as the client sent it; none when it sent only output_config.effort
            return req.extras.get("_thinking"), cap
        if not r.enabled or r.effort == "none":
            return {"type": "disabled"}, cap
        budget = r.budget_tokens or _BUDGET_BY_EFFORT.get(r.effort or "medium", 8192)
        if budget >= cap:
            if client_cap:
                budget = cap - 1  # the client's cap wins; the budget shrinks to fit
            else:
                cap = budget + (default_cap or DEFAULT_MAX_TOKENS)
        if budget < _MIN_BUDGET:
            return None, cap  # the client's cap leaves no room for thinking
        return {"type": "enabled", "budget_tokens": budget}, cap

    # --- whole answers -------------------------------------------------------------------------

    def parse_response(self, body: JSON) -> ChatResponse:
        obj = expect_object(body, "")
        content = obj.get("content")
        if not isinstance(content, list):
            raise DialectError(f"must be a list, not {kind_of(content)}", "content")
        texts: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[Reasoning] = []
        layout: list[list[JSON]] = []
        for j, raw in enumerate(content):
            block = raw if isinstance(raw, dict) else expect_object(raw, f"content[{j}]")
            kind = block.get("type")
            piece = block.get("text")
            if kind == "text" and isinstance(piece, str):
                texts.append(piece)
                # (a block of type and text alone, the common one, has nothing else to keep)
                layout.append(["t", len(piece), {} if len(block) == 2 else
                               _extra(block, _TEXT_KEYS)])
                continue
            if kind in ("tool_use", "thinking", "redacted_thinking"):
                parsed = _Blocks([], calls, reasoning, layout)
                _parse_block(block, f"content[{j}]", True, parsed)
                continue
            # server-tool blocks and the like: an Anthropic client gets them back as they came
            layout.append(["o", block])
        text = "".join(texts)
        message = AssistantMessage(text, tool_calls=calls, reasoning=reasoning)
        if _answer_blocks(text, reasoning, calls, None) != content:
            message.extras["_blocks"] = layout
        reason = obj.get("stop_reason")
        extras = split_known(obj, _RESPONSE_KEYS)
        if isinstance(reason, str):
            extras["_stop"] = reason
        usage = obj.get("usage")
        if isinstance(usage, dict):
            extras["_usage"] = usage
        return ChatResponse(
            messages=[message],
            finish_reason=_stop_in(reason) if isinstance(reason, str) else None,
            usage=_usage_in(usage),
            id=_str(obj.get("id")),
            model=_str(obj.get("model")),
            extras=extras,
            extras_dialect=NAME,
        )

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        same = resp.extras_dialect == NAME
        layout = resp.messages[0].extras.get("_blocks") if same and len(resp.messages) == 1 \
            else None
        calls = resp.tool_calls
        reason = resp.finish_reason or ("tool_calls" if calls else None)
        raw_stop = resp.extras.get("_stop") if same else None
        stop = raw_stop if isinstance(raw_stop, str) and _stop_in(raw_stop) == reason \
            else _stop_out(reason)
        raw_usage = resp.extras.get("_usage") if same else None
        out: dict[str, Any] = _public(resp.extras) if same else {}
        out.update({
            "id": resp.id or _new_id(),
            "type": "message",
            "role": "assistant",
            "model": resp.model or req.model or "unknown",
            "content": _answer_blocks(resp.text, resp.reasoning, calls, layout),
            "stop_reason": stop,
            "stop_sequence": out.get("stop_sequence"),
            "usage": raw_usage if isinstance(raw_usage, dict) else _usage_out(resp.usage),
        })
        return out

    # --- errors --------------------------------------------------------------------------------

    def parse_error(self, body: JSON) -> ChatError | None:
        if not isinstance(body, dict) or body.get("error") is None:
            return None
        err = body["error"]
        e = ChatError(500, error_text(err))
        if isinstance(err, dict):
            e.type = _str(err.get("type"))
        return e

    def render_error(self, err: ChatError) -> JSON:
        kind = err.type if err.type in _ERROR_STATUS else _error_type(err.status)
        return {"type": "error", "error": {"type": kind, "message": err.message}}

    # --- streams -------------------------------------------------------------------------------

    def decoder(self) -> _Decoder:
        return _Decoder()

    def encoder(self, req: ChatRequest) -> _Encoder:
        return _Encoder(req.model)


# --- request messages ----------------------------------------------------------------------------


def _render_messages(req: ChatRequest, same: bool) -> tuple[JSON, list[dict[str, Any]]]:
    """The top-level ``system`` (``None`` when there is none) and ``messages``.

    System and developer messages go to ``system``, wherever they stand (Anthropic has no
    system turn mid-conversation). A tool result opens a user message of ``tool_result`` blocks;
    the results and the user text right after it join that message.
    """
    system: list[Message] = []
    out: list[dict[str, Any]] = []
    results_open = False  # the last wire message holds tool results and takes more blocks

    def joins(m: Message) -> bool:
        if not (out and isinstance(out[-1].get("content"), list)):
            return False
        return bool(m.extras.get("_cont")) if same else results_open

    for m in req.messages:
        if m.role in ("system", "developer") and not (same and m.extras.get("_in_messages")):
            system.append(m)
            continue
        if m.role == "tool":
            block = _render_result(m, same)
            if joins(m):
                out[-1]["content"].append(block)
            else:
                out.append({**_wire_extras(m, same), "role": "user", "content": [block]})
            results_open = True
            continue
        if m.role == "assistant":
            out.append(_render_assistant(m, same))
        else:
            role = "system" if m.role == "system" else "user"
            wire = _render_plain(m, role, same)
            if role == "user" and joins(m):
                content = wire["content"]
                if isinstance(content, str):
                    content = [{"type": "text", "text": content}] if content or same else []
                out[-1]["content"].extend(content)
            else:
                out.append(wire)
        results_open = False
    return _render_system(system, same), out


def _wire_extras(m: Message, same: bool) -> dict[str, Any]:
    extras = m.extras.get("_msg") if same else None
    return dict(extras) if isinstance(extras, dict) else {}


def _render_plain(m: Message, role: str, same: bool) -> dict[str, Any]:
    wire = _wire_extras(m, same)
    wire["role"] = role
    if isinstance(m.content, str):
        if not (same and m.content == "" and "content" in wire):  # a null content stays null
            wire["content"] = m.content
    else:
        wire["content"] = _render_blocks(m.content, [], [], m.extras.get("_blocks"), same)
    return wire


def _render_assistant(m: Message, same: bool) -> dict[str, Any]:
    reasoning = [r for r in m.reasoning if _sendable(r)]
    if isinstance(m.content, str) and not reasoning and not m.tool_calls:
        return _render_plain(m, "assistant", same)
    parts: list[Part] = ([TextPart(m.content)] if m.content else []) \
        if isinstance(m.content, str) else m.content
    wire = _wire_extras(m, same)
    wire["role"] = "assistant"
    wire["content"] = _render_blocks(parts, m.tool_calls, reasoning, m.extras.get("_blocks"),
                                     same)
    return wire


def _render_result(m: Message, same: bool) -> dict[str, Any]:
    extra = m.extras.get("_block") if same else None
    block: dict[str, Any] = dict(extra) if isinstance(extra, dict) else {}
    block["type"] = "tool_result"
    block["tool_use_id"] = m.tool_call_id or ""
    if isinstance(m.content, list):
        block["content"] = _render_blocks(m.content, [], [], m.extras.get("_blocks"), same)
    elif same and m.content == "" and m.extras.get("_null"):
        block["content"] = None
    elif not (same and m.content == "" and m.extras.get("_absent")):
        block["content"] = m.content
    if m.is_error:
        block["is_error"] = True
    return block


def _system_wire(m: Message) -> list[JSON] | None:
    """The ``system`` blocks a message joined at parsing, if its text is still their text."""
    wire = m.extras.get("_system")
    if not isinstance(wire, list):
        return None
    texts = [b.get("text") if isinstance(b, dict) else b for b in wire]
    strings = [t for t in texts if isinstance(t, str)]
    if len(strings) != len(texts) or m.text != _SYSTEM_SEPARATOR.join(strings):
        return None
    return wire


def _render_system(system: list[Message], same: bool) -> JSON:
    if not system:
        return None
    if len(system) == 1 and isinstance(system[0].content, str):
        return system[0].content
    blocks: list[JSON] = []
    for m in system:
        if isinstance(m.content, str):
            if m.content or same:
                blocks.append({"type": "text", "text": m.content})
        elif same and (wire := _system_wire(m)) is not None:
            blocks.extend(wire)
        else:
            blocks.extend(_render_blocks(m.content, [], [], m.extras.get("_blocks"), same))
    return blocks


# --- answer blocks -------------------------------------------------------------------------------


def _answer_blocks(text: str, reasoning: list[Reasoning], calls: list[ToolCall],
                   layout: JSON) -> list[JSON]:
    """An answer's ``content``: in the layout's order when there is one, else reasoning, the
    text (a text block also when there is nothing else), then the tool calls."""
    out: list[JSON] = []
    reasoning, calls = list(reasoning), list(calls)
    if isinstance(layout, list):
        pos = 0
        for entry in layout:
            kind = entry[0]
            block: JSON = None
            if kind == "t":
                n = entry[1] if isinstance(entry[1], int) else 0
                block = {"type": "text", "text": text[pos:pos + n]}
                pos += n
                extra = entry[2]
            elif kind == "o":
                out.append(entry[1])
                continue
            else:
                extra = entry[1]
                if kind == "c" and calls:
                    block = _render_call(calls.pop(0))
                elif kind == "r" and reasoning:
                    block = _render_reasoning(reasoning.pop(0))
            if isinstance(block, dict):
                out.append({**block, **extra} if extra else block)
        text = text[pos:]
    else:
        out.extend(b for b in map(_render_reasoning, reasoning) if b is not None)
        reasoning = []
        if text or (not calls and not out):
            out.append({"type": "text", "text": text})
        text = ""
    out.extend(b for b in map(_render_reasoning, reasoning) if b is not None)
    if text:
        out.append({"type": "text", "text": text})
    out.extend(_render_call(c) for c in calls)
    return out


# --- streams -------------------------------------------------------------------------------------


_TOOL_BLOCKS = ("tool_use", "server_tool_use")


class _Decoder:
    """Named SSE events to canonical events. Strict where a mistake would misplace or lose
    content (a second ``message_start``, a block started out of order, a delta for a block that
    is not open or of another type); tolerant of ``ping``, of event types and delta types it
    does not know (ignored, as the API asks), and of a missing ``message_stop`` after the stop
    reason came."""

    __slots__ = ("_blocks", "_calls", "_done", "_failed", "_reason", "_started", "_usage")

    def __init__(self) -> None:
        self._started = False
        self._done = False
        self._failed = False
        self._blocks: list[list[Any]] = []  # by index: [type, open, call index]
        self._calls = 0
        self._reason: str | None = None
        self._usage: dict[str, JSON] = {}

    def decode(self, payload: Any) -> list[StreamEvent]:
        if self._done or self._failed:
            return []
        name: str | None = None
        if isinstance(payload, Named):
            name, payload = payload.event, payload.data
        if not isinstance(payload, dict):  # (a RawData is a tuple)
            if isinstance(payload, RawData):
                raise DialectError("an event's data is not JSON", "stream")
            raise DialectError("an event must be an object", "stream")
        kind = payload.get("type")
        if name == "error" or kind == "error":
            return self._error(payload)
        events: list[StreamEvent]
        if kind == "content_block_delta" and self._started:
            # nearly every event: what the dispatch below comes to for it
            events = []
            self._delta(payload, events)
            return events
        if kind == "message_start":
            if self._started:
                raise DialectError("a second message_start", "stream")
            message = payload.get("message")
            message = message if isinstance(message, dict) else {}
            self._merge_usage(message.get("usage"))
            self._started = True
            return [StreamStart(id=_str(message.get("id")), model=_str(message.get("model")),
                                usage=_usage_in(message.get("usage")))]
        if kind == "ping" or kind not in ("content_block_start", "content_block_delta",
                                          "content_block_stop", "message_delta",
                                          "message_stop"):
            return []  # new event types may be added: ignored
        if self._started:
            events = []
        else:
            self._started = True
            events = [StreamStart()]
        if kind == "content_block_start":
            self._start(payload, events)
        elif kind == "content_block_delta":
            self._delta(payload, events)
        elif kind == "content_block_stop":
            block = self._open(payload.get("index"), "content_block_stop")
            block[1] = False
            if block[0] == "tool_use":
                events.append(ToolCallEnd(block[2]))
        elif kind == "message_delta":
            delta = payload.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            if isinstance(reason, str):
                self._reason = reason
            self._merge_usage(payload.get("usage"))
        else:  # message_stop
            events.extend(self._finish())
        return events

    def _start(self, payload: dict[str, Any], events: list[StreamEvent]) -> None:
        index = payload.get("index")
        if index != len(self._blocks):
            raise DialectError(f"content block {index!r} started where block "
                               f"{len(self._blocks)} was due", "stream")
        block = payload.get("content_block")
        if not isinstance(block, dict):
            raise DialectError("content_block_start without a content_block", "stream")
        kind = str(block.get("type"))
        call = -1
        if kind == "text":
            text = block.get("text")
            if isinstance(text, str) and text:
                events.append(TextDelta(text))
        elif kind == "thinking":
            text, sig = block.get("thinking"), block.get("signature")
            text = text if isinstance(text, str) else ""
            sig = sig if isinstance(sig, str) and sig else None
            if text or sig:
                events.append(ReasoningDelta(text, signature=sig, dialect=NAME))
        elif kind == "redacted_thinking":
            data = block.get("data")
            if isinstance(data, str):
                events.append(ReasoningDelta(redacted=data, dialect=NAME))
        elif kind == "tool_use":
            cid, name = block.get("id"), block.get("name")
            if not isinstance(cid, str) or not isinstance(name, str):
                raise DialectError("a tool_use block without id or name", "stream")
            call = self._calls
            self._calls += 1
            events.append(ToolCallStart(call, cid, name))
            given = block.get("input")
            if isinstance(given, dict) and given:  # the whole input at once (some servers)
                events.append(ToolCallDelta(call, _arguments(given, "stream")))
        self._blocks.append([kind, True, call])

    def _delta(self, payload: dict[str, Any], events: list[StreamEvent]) -> None:
        index, blocks = payload.get("index"), self._blocks
        if index.__class__ is int and 0 <= index < len(blocks) and blocks[index][1]:
            block = blocks[index]  # an open block: what _open gives
        else:
            block = self._open(index, "content_block_delta")
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            raise DialectError("content_block_delta without a delta", "stream")
        kind, target = delta.get("type"), block[0]
        if kind == "text_delta" and target == "text":  # nearly every delta: no check to fail
            text = delta.get("text")
            if isinstance(text, str) and text:
                events.append(TextDelta(text))
        elif kind in ("text_delta", "citations_delta"):
            self._expect(kind, target, ("text",))
            text = delta.get("text")
            if kind == "text_delta" and isinstance(text, str) and text:
                events.append(TextDelta(text))
        elif kind in ("thinking_delta", "signature_delta"):
            self._expect(kind, target, ("thinking",))
            if kind == "thinking_delta":
                text = delta.get("thinking")
                if isinstance(text, str) and text:
                    events.append(ReasoningDelta(text, dialect=NAME))
            else:
                sig = delta.get("signature")
                if isinstance(sig, str) and sig:
                    events.append(ReasoningDelta(signature=sig, dialect=NAME))
        elif kind == "input_json_delta":
            self._expect(kind, target, _TOOL_BLOCKS)
            part = delta.get("partial_json")
            if target == "tool_use" and isinstance(part, str) and part:
                events.append(ToolCallDelta(block[2], part))

    @staticmethod
    def _expect(delta: Any, block: str, allowed: tuple[str, ...]) -> None:
        if block not in allowed:
            raise DialectError(f"a {delta} for a {block} block", "stream")

    def _open(self, index: Any, what: str) -> list[Any]:
        if not isinstance(index, int) or not 0 <= index < len(self._blocks) \
                or not self._blocks[index][1]:
            raise DialectError(f"{what} for content block {index!r}, which is not open",
                               "stream")
        return self._blocks[index]

    def _merge_usage(self, usage: JSON) -> None:
        if isinstance(usage, dict):
            # cumulative counts: later values replace earlier ones, absent ones stay
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def _error(self, payload: dict[str, Any]) -> list[StreamEvent]:
        self._failed = True
        err = payload.get("error")
        kind = err.get("type") if isinstance(err, dict) else None
        status = _ERROR_STATUS.get(kind, 502) if isinstance(kind, str) else 502
        return [StreamError(error_text(err), kind if isinstance(kind, str) else None, status)]

    def _finish(self) -> list[StreamEvent]:
        self._done = True
        out: list[StreamEvent] = []
        for block in self._blocks:
            if block[1] and block[0] == "tool_use":
                block[1] = False
                out.append(ToolCallEnd(block[2]))
        reason = _stop_in(self._reason) if self._reason else (
            "tool_calls" if self._calls else "stop")
        out.append(StreamFinish(reason, _usage_in(self._usage) if self._usage else None))
        return out

    def end(self) -> list[StreamEvent]:
        if self._done or self._failed:
            return []
        if self._reason is not None:
            # Tolerated: the stop reason came, only message_stop is missing.
            return self._finish()
        self._done = True
        return [StreamError("the upstream stream ended before message_stop")]


_SPECIAL = re.compile(r'[\\"{}\[\]]')


class _JsonEnd:
    """Tells when streamed JSON text has closed its outermost object or array: the call's
    arguments are then complete, and its block may close before the call's end is said."""

    __slots__ = ("_depth", "_escape", "_in_string", "complete")

    def __init__(self) -> None:
        self.complete = False
        self._depth = 0
        self._in_string = False
        self._escape = False  # the last fragment ended inside an escape

    def feed(self, text: str) -> None:
        if self.complete:
            return
        skip = 1 if self._escape else 0
        self._escape = False
        for m in _SPECIAL.finditer(text, skip):
            i = m.start()
            if i < skip:
                continue
            ch = text[i]
            if self._in_string:
                if ch == "\\":
                    if i + 1 >= len(text):
                        self._escape = True
                    skip = i + 2
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth <= 0:
                    self.complete = True
                    return


class _Encoder:
    """Canonical events to named SSE events, one content block at a time.

    Anthropic's block order is stricter than some upstreams: OpenAI may interleave the argument
    fragments of parallel tool calls. A call's block stays open until its call ends or its JSON
    arguments close; whatever arrives meanwhile for another block is held, in order, and sent as
    soon as the open block can close. An upstream that sends calls one after another (the usual
    case) is passed through with no holding at all.
    """

    __slots__ = ("_agent", "_call", "_calls_seen", "_closed", "_held", "_id", "_index",
                 "_model", "_open", "_scan", "_spoke", "_started", "_thinking_signed")

    def __init__(self, model: str | None) -> None:
        self._id = _new_id()
        self._model = model or "unknown"
        self._started = False
        self._closed = False
        self._index = 0  # the next block's index
        self._open: str | None = None  # text | thinking | tool_use
        self._thinking_signed = False  # the open thinking block got its signature
        self._call = -1  # the canonical index of the call whose block is open
        self._scan = _JsonEnd()
        self._held: list[StreamEvent] = []
        self._calls_seen = 0
        self._agent: str | None = None
        self._spoke = False

    def encode(self, event: StreamEvent) -> list[Payload]:
        if self._closed:
            return []
        out: list[Payload] = []
        match event:
            case StreamStart():
                if not self._started:
                    if event.id:
                        self._id = event.id
                    if event.model and self._model == "unknown":
                        self._model = event.model
                    self._begin(out, event.usage)
                return out
            case StreamFinish():
                self._begin(out, None)
                while True:  # what was held goes out now, each held block in its turn
                    self._close(out)
                    if not self._held:
                        break
                    self._flush(out)
                self._closed = True
                reason = event.reason or ("tool_calls" if self._calls_seen else None)
                out.append(Named("message_delta", b"".join((
                    _MESSAGE_DELTA_HEAD, orjson.dumps(_stop_out(reason)), _MESSAGE_DELTA_MID,
                    orjson.dumps(_delta_usage(event.usage)), b"}"))))
                out.append(Named("message_stop", _MESSAGE_STOP))
                return out
            case StreamError():
                self._closed = True
                kind = event.code if event.code in _ERROR_STATUS else _error_type(event.status)
                self._emit(out, "error", {"type": "error",
                                          "error": {"type": kind, "message": event.message}})
                return out
            case ContextUpdate():
                return out
            case _:
                self._begin(out, None)
                self._content(event, out)
                return out

    def plain_texts(self, texts: list[bytes]) -> list[Payload] | None:
        """:meth:`gateway.dialects.base.StreamEncoder` ``plain_texts``: while a text block is
        open and nothing is held."""
        if self._open != "text" or self._closed or self._held or self._agent is not None:
            return None
        self._spoke = True
        head = b"".join((_TEXT_DELTA_HEAD, str(self._index).encode(), _TEXT_DELTA_MID, b'"'))
        return [Named("content_block_delta", head + t + b'"}}') for t in texts]

    def _content(self, event: StreamEvent, out: list[Payload]) -> None:
        """A content event: sent now, or held while an unfinished call's block is open."""
        if self._open == "tool_use":
            mine = isinstance(event, ToolCallDelta | ToolCallEnd) and event.index == self._call
            if not mine and (self._held or not self._scan.complete):
                self._held.append(event)
                return
        self._send(event, out)
        if self._open == "tool_use" and self._held and self._scan.complete:
            self._close(out)
            self._flush(out)

    def _send(self, event: StreamEvent, out: list[Payload]) -> None:
        match event:
            case TextDelta():
                text = event.text
                if event.agent != self._agent:
                    text = agent_header(event.agent, first=not self._spoke) + text
                    self._agent = event.agent
                if not text:
                    return
                self._spoke = True
                if self._open != "text":
                    self._close(out)
                    out.append(Named("content_block_start", b"".join((
                        _TEXT_START_HEAD, str(self._index).encode(), _TEXT_START_TAIL))))
                    self._open = "text"
                    self._thinking_signed = False
                # Nearly every event of a stream: its JSON put together from parts (the bytes
                # self._delta would write, without building two dicts each time).
                out.append(Named("content_block_delta", b"".join((
                    _TEXT_DELTA_HEAD, str(self._index).encode(), _TEXT_DELTA_MID,
                    orjson.dumps(text), b"}}"))))
            case ReasoningDelta():
                self._reasoning(event, out)
            case ToolCallStart():
                self._close(out)
                self._calls_seen += 1
                self._call = event.index
                self._scan = _JsonEnd()
                self._block(out, {"type": "tool_use", "id": event.id, "name": event.name,
                                  "input": {}}, "tool_use")
            case ToolCallDelta():
                if self._open == "tool_use" and event.index == self._call and event.arguments:
                    self._scan.feed(event.arguments)
                    self._delta(out, {"type": "input_json_delta",
                                      "partial_json": event.arguments})
                # A fragment for a call whose block already closed can only follow complete
                # JSON (nothing else closes an unfinished call's block before the finish):
                # whitespace, or text that would have made the arguments invalid anyway.
            case ToolCallEnd():
                if self._open == "tool_use" and event.index == self._call:
                    self._close(out)
                self._flush(out)
            case StreamStart() | StreamFinish() | StreamError() | ContextUpdate():
                pass
            case _:
                assert_never(event)

    def _reasoning(self, event: ReasoningDelta, out: list[Payload]) -> None:
        mine = event.dialect == NAME  # only Anthropic's signatures and redacted data
        if event.redacted is not None and mine:
            self._close(out)
            self._block(out, {"type": "redacted_thinking", "data": event.redacted}, None)
            self._close_index(out)
        if event.text:
            if self._open != "thinking" or self._thinking_signed:
                self._close(out)
                self._block(out, {"type": "thinking", "thinking": "", "signature": ""},
                            "thinking")
            self._delta(out, {"type": "thinking_delta", "thinking": event.text})
        if event.signature and mine:
            if self._open != "thinking" or self._thinking_signed:
                self._close(out)
                self._block(out, {"type": "thinking", "thinking": "", "signature": ""},
                            "thinking")
            self._delta(out, {"type": "signature_delta", "signature": event.signature})
            self._thinking_signed = True

    def _flush(self, out: list[Payload]) -> None:
        held, self._held = self._held, []
        for e in held:
            self._content(e, out)

    def _begin(self, out: list[Payload], usage: Usage | None) -> None:
        if self._started:
            return
        self._started = True
        start_usage = _usage_out(usage)
        self._emit(out, "message_start", {"type": "message_start", "message": {
            "id": self._id, "type": "message", "role": "assistant", "model": self._model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}})

    def _block(self, out: list[Payload], block: dict[str, Any], kind: str | None) -> None:
        self._emit(out, "content_block_start", {"type": "content_block_start",
                                                "index": self._index, "content_block": block})
        self._open = kind
        self._thinking_signed = False

    def _delta(self, out: list[Payload], delta: dict[str, Any]) -> None:
        self._emit(out, "content_block_delta", {"type": "content_block_delta",
                                                "index": self._index, "delta": delta})

    def _close(self, out: list[Payload]) -> None:
        if self._open is not None:
            self._close_index(out)

    def _close_index(self, out: list[Payload]) -> None:
        out.append(Named("content_block_stop", b"".join((
            _BLOCK_STOP_HEAD, str(self._index).encode(), b"}"))))
        self._index += 1
        self._open = None

    @staticmethod
    def _emit(out: list[Payload], name: str, data: dict[str, Any]) -> None:
        out.append(Named(name, orjson.dumps(data)))
