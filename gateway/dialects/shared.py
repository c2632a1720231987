"""The small helpers several dialects share: reading and writing the shapes they have in
common, and naming errors.

Its own module, apart from :mod:`gateway.dialects.base` (which re-exports every name for plugin
dialects): the dialects import these helpers without the plugin machinery ``base`` defines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.canonical import (
    JSON,
    ChatRequest,
    ImagePart,
    Message,
    OtherPart,
    OutputFormat,
    Part,
    TextPart,
    Usage,
)
from gateway.errors import DialectError

# Reads a message's list of content parts: (the list, where it is) -> the parts.
ReadParts = Callable[[list[JSON], str], list[Part]]

__all__ = [
    "error_code_for",
    "error_text",
    "expect_object",
    "kind_of",
    "messages_of",
    "openai_output_format",
    "parse_messages",
    "parse_openai_output_format",
    "plain_message",
    "render_text_messages",
    "request_context",
    "role_and_content",
    "sampling_of",
    "split_known",
    "text_of",
    "text_parts",
    "usage_from_openai_shape",
    "usage_to_openai_shape",
]


# --- shared helpers ------------------------------------------------------------------------------


def expect_object(value: JSON, where: str) -> dict[str, JSON]:
    if not isinstance(value, dict):
        raise DialectError(f"must be an object, not {kind_of(value)}", where or "body")
    return value


def split_known(obj: dict[str, JSON], known: frozenset[str]) -> dict[str, JSON]:
    """The keys no canonical field names, plus known keys whose value is ``null`` (so that a
    same-dialect render gives back ``null`` where the wire had it, and nothing where it had
    nothing)."""
    # (every object of every request and answer comes here: one with no null and at most one
    # unknown key, the common shapes, is answered by set operations rather than a comprehension)
    if None not in obj.values():
        rest = obj.keys() - known
        if not rest:
            return {}
        if len(rest) == 1:
            (key,) = rest
            return {key: obj[key]}
    return {k: v for k, v in obj.items() if k not in known or v is None}


_MESSAGE_KEYS = frozenset({"role", "content", "context", "name"})


def plain_message(raw: JSON) -> Message | None:
    """The common message, ``{role, content}`` both strings, as a dialect's full reading makes
    it (without its lookups), or ``None`` for any other shape."""
    if isinstance(raw, dict) and len(raw) == 2:
        role, content = raw.get("role"), raw.get("content")
        if isinstance(role, str) and isinstance(content, str):
            return Message(role, content)
    return None


def parse_messages(body: dict[str, JSON], *, name_key: str = "name",
                   parse_content: ReadParts | None = None) -> list[Message]:
    """The ``messages`` list every chat dialect has: ``role``, ``content`` (a string, or a list
    read by ``parse_content(list, where) -> list[Part]``; without it, text parts only),
    optional ``context`` and a name under ``name_key``."""
    known = _MESSAGE_KEYS if name_key == "name" else _MESSAGE_KEYS | {name_key}
    read_parts = parse_content or text_parts
    out: list[Message] = []
    for i, raw in enumerate(messages_of(body)):
        plain = plain_message(raw)
        if plain is not None:
            out.append(plain)
            continue
        where = f"messages[{i}]"
        m = expect_object(raw, where)
        role, parsed = role_and_content(m, where, read_parts)
        name = m.get(name_key)
        if name is not None and not isinstance(name, str):
            raise DialectError("must be a string", f"{where}.{name_key}")
        out.append(Message(role, parsed, m.get("context"), name, extras=split_known(m, known)))
    return out


def messages_of(body: dict[str, JSON]) -> list[JSON]:
    """The request's ``messages``: a list of at least one (what each message is, the caller
    reads)."""
    raw = body.get("messages")
    if raw is None:
        raise DialectError("is required", "messages")
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", "messages")
    if not raw:
        raise DialectError("must hold at least one message", "messages")
    return raw


def role_and_content(m: dict[str, JSON], where: str, read_parts: ReadParts,
                     ) -> tuple[str, str | list[Part]]:
    """A message's ``role`` (a string) and its ``content``: a string (``""`` for null), or the
    parts ``read_parts(list, where)`` reads from a list."""
    role = m.get("role")
    if not isinstance(role, str):
        raise DialectError("must be a string", f"{where}.role")
    content = m.get("content")
    if content is None or isinstance(content, str):
        return role, content or ""
    if isinstance(content, list):
        return role, read_parts(content, f"{where}.content")
    raise DialectError("must be a string or a list of parts", f"{where}.content")


def text_parts(content: list[JSON], where: str) -> list[Part]:
    """Content parts for a dialect that only has text: ``{"type": "text", "text": …}`` (or a
    bare string) is text; anything else is an image (OpenAI's ``image_url`` shape) or kept as
    an :class:`OtherPart` of no dialect, which no dialect renders (so it is reported)."""
    out: list[Part] = []
    for j, p in enumerate(content):
        if isinstance(p, str):
            out.append(TextPart(p))
            continue
        p = expect_object(p, f"{where}[{j}]")
        kind = p.get("type")
        text = p.get("text")
        if kind == "text" and isinstance(text, str):
            out.append(TextPart(text))
        elif kind == "image_url" and isinstance(p.get("image_url"), dict) \
                and isinstance(p["image_url"].get("url"), str):
            out.append(ImagePart(url=p["image_url"]["url"]))
        else:
            out.append(OtherPart("", str(kind), p))
    return out


def text_of(content: str | list[Part]) -> str:
    """A message's text: text parts joined; other parts have none."""
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, TextPart))


def error_text(value: JSON) -> str:
    """The message of any dialect's error value: a string, or an object with ``message``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        msg = value.get("message")
        if isinstance(msg, str):
            return msg
    return "upstream error"


_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "TIMEOUT",
    413: "PAYLOAD_TOO_LARGE",
    429: "RATE_LIMITED",
    499: "CLIENT_CLOSED_REQUEST",
    502: "BAD_GATEWAY",
    503: "UNAVAILABLE",
    504: "GATEWAY_TIMEOUT",
}


def error_code_for(status: int) -> str:
    return _CODES.get(status, "INTERNAL_ERROR" if status >= 500 else "ERROR")


def kind_of(value: JSON) -> str:
    """How an error message names a JSON value's type."""
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list():
            return "a list"
        case dict():
            return "an object"
    return type(value).__name__


# --- shapes the two protocol dialects share ------------------------------------------------------


def request_context(req: ChatRequest) -> JSON:
    """The protocol request context, with the canonical ``temperature`` as
    ``overrides.temperature``."""
    temperature = req.sampling.get("temperature")
    if temperature is None:
        return req.context
    ctx = dict(req.context) if isinstance(req.context, dict) else {}
    overrides = dict(ctx["overrides"]) if isinstance(ctx.get("overrides"), dict) else {}
    overrides.setdefault("temperature", temperature)
    ctx["overrides"] = overrides
    return ctx


def shell_context(context: JSON, empty: dict[str, Any],
                  empty_json: bytes) -> tuple[JSON, bytes]:
    """The context of an AI Chat Protocol stream's first chunk, and its JSON: where that
    protocol's frontends find the answer's shell. They keep the chunk only when its
    ``context.data_points`` is there (azure-search-openai-demo's Chat.tsx), so a context without
    one gets the empty context's, and no context the empty one (``None``: ``empty_json``)."""
    if context is None:
        return None, empty_json
    if isinstance(context, dict) and not isinstance(context.get("data_points"), dict):
        context = {**context, "data_points": empty["data_points"]}
    return context, orjson.dumps(context)


def sampling_of(context: JSON) -> dict[str, JSON]:
    """A protocol request context's ``overrides.temperature`` as canonical sampling."""
    if isinstance(context, dict):
        overrides = context.get("overrides")
        if isinstance(overrides, dict) and isinstance(overrides.get("temperature"), int | float):
            return {"temperature": overrides["temperature"]}
    return {}


def render_text_messages(req: ChatRequest, same: bool) -> list[dict[str, Any]]:
    """``messages`` for a dialect whose messages are ``{role, content: text, context?}``:
    parts become their text (what else they held the pipeline reported before this)."""
    out = []
    for m in req.messages:
        wire: dict[str, Any] = dict(m.extras) if same else {}
        wire["role"] = m.role
        wire["content"] = text_of(m.content)
        if m.context is not None:
            wire["context"] = m.context
        out.append(wire)
    return out


def usage_from_openai_shape(v: JSON) -> Usage | None:
    """``{"prompt_tokens", "completion_tokens", …}`` (OpenAI's shape, which the protocol's
    first version borrowed) as :class:`Usage`."""
    if not isinstance(v, dict):
        return None

    def num(x: JSON) -> int | None:
        return x if isinstance(x, int) and not isinstance(x, bool) else None

    return Usage(input_tokens=num(v.get("prompt_tokens")),
                 output_tokens=num(v.get("completion_tokens")))


def usage_to_openai_shape(u: Usage) -> dict[str, JSON]:
    return {"prompt_tokens": u.input_tokens or 0, "completion_tokens": u.output_tokens or 0,
            "total_tokens": u.total_tokens or 0}


# --- structured output (OpenAI's shape, flat as in Responses ``text.format``) --------------------

def parse_openai_output_format(fmt: JSON, where: str, *, schema_at: str | None = None,
                               ) -> OutputFormat | None:
    """The output format of an OpenAI ``response_format`` (``schema_at="json_schema"``: the
    schema's fields nest under that key) or Responses ``text.format`` (flat); ``None`` for
    ``{"type": "text"}`` or another type no canonical kind names (kept by the caller)."""
    obj = expect_object(fmt, where)
    kind = obj.get("type")
    if kind == "json_object":
        return OutputFormat("json_object")
    if kind != "json_schema":
        return None
    spec = obj if schema_at is None else expect_object(obj.get(schema_at), f"{where}.{schema_at}")
    at = where if schema_at is None else f"{where}.{schema_at}"
    name, description = spec.get("name"), spec.get("description")
    schema, strict = spec.get("schema"), spec.get("strict")
    if not isinstance(name, str):
        raise DialectError("must be a string", f"{at}.name")
    if description is not None and not isinstance(description, str):
        raise DialectError("must be a string", f"{at}.description")
    if schema is not None and not isinstance(schema, dict):
        raise DialectError(f"must be an object, not {kind_of(schema)}", f"{at}.schema")
    if strict is not None and not isinstance(strict, bool):
        raise DialectError("must be a boolean", f"{at}.strict")
    return OutputFormat("json_schema", schema=schema, name=name, strict=strict,
                        description=description)


def openai_output_format(o: OutputFormat, *, schema_at: str | None = None) -> dict[str, JSON]:
    """``o`` as :func:`parse_openai_output_format` reads it. A format without a name (an
    Anthropic client's) is named ``response``, as OpenAI requires a name; Responses requires a
    schema too (Chat Completions does not)."""
    if o.kind == "json_object":
        return {"type": "json_object"}
    spec: dict[str, JSON] = {"name": o.name or "response"}
    if o.description is not None:
        spec["description"] = o.description
    if o.schema is not None or schema_at is None:
        spec["schema"] = o.schema if o.schema is not None else {"type": "object"}
    if o.strict is not None:
        spec["strict"] = o.strict
    return {"type": "json_schema", **spec} if schema_at is None \
        else {"type": "json_schema", schema_at: spec}
