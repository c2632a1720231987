"""``gemini``: Google's Gemini API, ``POST {prefix}/models/{model}:generateContent`` and
``…:streamGenerateContent?alt=sse`` (https://ai.google.dev/api/generate-content; field names as
the ``google-genai`` SDK's ``types`` spell them on the wire), both as a client's dialect and as an
upstream's.

The model and the method are in the request target, not the body: a route of this dialect
declares a prefix (``/v1beta``, ``/v1``) and serves ``{prefix}/models/{model}:{method}`` under
it (:meth:`GeminiDialect.read_target`); an upstream of this dialect is configured by its base URL
(``https://generativelanguage.googleapis.com/v1beta``) and asked at
``{url}/models/{model}:{method}`` (:meth:`GeminiDialect.upstream_url`). ``countTokens`` and
``GET {prefix}/models`` are served beside.

Requests: ``contents`` (roles ``user`` and ``model``, each with ``parts``), ``systemInstruction``,
``tools`` (``functionDeclarations`` with ``parameters`` or ``parametersJsonSchema``; other tools
kept verbatim for this dialect), ``toolConfig.functionCallingConfig``, ``generationConfig``
(sampling, ``stopSequences``, ``maxOutputTokens``, ``responseMimeType`` with ``responseSchema`` or
``responseJsonSchema`` as structured output, ``thinkingConfig`` as reasoning). A part is text,
``inlineData`` (an image; other media kept verbatim), ``functionCall`` / ``functionResponse``
(ids kept; a call without one gets one, which its response finds by name), a ``thought`` text, or
anything else kept verbatim. ``cachedContent``, ``fileData`` parts and ``candidateCount`` above one
only this dialect can carry: they travel as verbatim content parts, so that the route's
``on_unsupported`` policy decides for an upstream of another dialect; several
``allowedFunctionNames`` and a ``responseMimeType`` other than JSON or plain text are named
``unmapped`` (``options``) for the same reason. Every request field, and where it goes, is in
``fields/gemini.yaml``.

``thoughtSignature`` is opaque and goes back only to the dialect that issued it: a signature of
this dialect's upstream is kept as it came; reasoning that another dialect signed (an Anthropic
``thinking`` signature, Responses' encrypted reasoning) reaches a Gemini client wrapped in a
signature of the gateway's (base64 of ``cgw1:<dialect>\\0<value>``), which the client sends back
and the gateway unwraps for that dialect.

Answers: ``candidates[0]`` (only one candidate is read), ``finishReason`` (safety reasons map to
``content_filter``; a ``promptFeedback.blockReason`` with no candidate is a blocked prompt),
``usageMetadata`` (``candidatesTokenCount`` excludes thoughts, which the canonical output count
includes). Streams are SSE, each event a whole ``GenerateContentResponse`` holding the new parts;
the last carries ``finishReason`` and the usage. Errors are Google's
``{"error": {"code", "message", "status"}}``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

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
    Target,
    TokenCount,
    error_text,
    expect_object,
    kind_of,
    split_known,
)
from gateway.errors import DialectError
from gateway.framing import Framing, Payload, RawData, Slot, TextPath

__all__ = ["GeminiDialect"]

NAME = "gemini"

_REQUEST_KEYS = frozenset({"contents", "systemInstruction", "tools", "toolConfig",
                           "generationConfig", "cachedContent", "model"})
_CONFIG_KEYS = frozenset({"temperature", "topP", "topK", "maxOutputTokens", "stopSequences",
                          "seed", "presencePenalty", "frequencyPenalty", "responseMimeType",
                          "responseSchema", "responseJsonSchema", "thinkingConfig",
                          "candidateCount"})
_SAMPLING = (("temperature", "temperature"), ("topP", "top_p"), ("topK", "top_k"),
             ("maxOutputTokens", "max_tokens"), ("seed", "seed"),
             ("presencePenalty", "presence_penalty"), ("frequencyPenalty", "frequency_penalty"))
_INTEGERS = frozenset({"topK", "maxOutputTokens", "seed"})
_RESPONSE_KEYS = frozenset({"candidates", "usageMetadata", "modelVersion", "responseId"})

_PLAIN_MIMES = (None, "text/plain", "application/json")
"""Response types with a canonical place (a plain answer, structured output); another one
(``text/x.enum``) is the gemini upstream's only."""

_METHODS = {"generateContent": False, "streamGenerateContent": True}
_COUNT = "countTokens"

_FINISH_IN = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "LANGUAGE": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
    "OTHER": "error",
}
_FINISH_OUT = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP",
               "content_filter": "SAFETY", "error": "OTHER"}

_STATUS_OF = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
              404: "NOT_FOUND", 405: "INVALID_ARGUMENT", 408: "DEADLINE_EXCEEDED",
              409: "ABORTED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
              499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE",
              503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
"""Google's canonical error codes (google.rpc.Code) by the HTTP status they map to."""

_CHOICE_IN = {"AUTO": "auto", "ANY": "required", "NONE": "none", "VALIDATED": "auto"}

_BUDGET_BY_EFFORT = {"none": 0, "minimal": 512, "low": 1024, "medium": 8192, "high": 24576,
                     "xhigh": 32768, "max": 32768}
"""``thinkingBudget`` for an effort (Gemini 2.5's budgets run up to 24576 on Flash and 32768 on
Pro; ``-1`` lets the model decide)."""
_EFFORT_BY_BUDGET = {b: e for e, b in reversed(_BUDGET_BY_EFFORT.items()) if b > 0}
"""The effort a budget of the table above stands for (the lower one where two share it)."""
_LEVELS = frozenset({"minimal", "low", "medium", "high"})
"""``thinkingLevel`` values (Gemini 3), read as the canonical effort of the same name."""

_FILES_API = "generativelanguage.googleapis.com/"
"""Where the Files API's uploads live (``fileData.fileUri``): readable by Gemini only."""
_WRAP = b"cgw1:"
"""The head of a signature the gateway wraps around another dialect's opaque reasoning."""
SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The value Google documents for a function call replayed without the signature its model
gave (a conversation that came from another provider): the call is accepted unchecked."""


def _new_id() -> str:
    return "call_" + random_hex(12)


def _call_id(response_id: str | None, index: int) -> str:
    """The id of a call the upstream gave none (Gemini's are optional): the same however its
    answer is read, and unique across answers where the answer has an id."""
    return f"call_{response_id}_{index}" if response_id else _new_id()


def _str(v: JSON) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: JSON) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _camel_key(key: str) -> str:
    if "_" not in key or key.startswith("_"):
        return key
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _obj(value: JSON, where: str) -> dict[str, JSON]:
    """An object of the API's own shapes, its keys in lowerCamelCase: Google's JSON parsers
    take the proto's snake_case names too, and the Python SDK sends some (a function
    declaration's ``parameters_json_schema``). Only these keys change, never the values under
    them (arguments, schemas, responses are the client's)."""
    obj = expect_object(value, where)
    if "_" not in "".join(obj):  # (the keys at once: every object of every stream event)
        return obj
    return {_camel_key(k): v for k, v in obj.items()}


def _sub(obj: dict[str, JSON], key: str) -> JSON:
    """``obj[key]``, itself camel-cased when it is an object (``None`` when absent)."""
    value = obj.get(key)
    return _obj(value, key) if isinstance(value, dict) else value


# --- signatures ----------------------------------------------------------------------------------


def _wrap(dialect: str, kind: str, value: str) -> str:
    """Another dialect's opaque reasoning as a signature a Gemini client keeps and sends back."""
    return base64.b64encode(_WRAP + f"{dialect}\0{kind}\0".encode() + value.encode()).decode()


def _unwrap(signature: str) -> tuple[str, str, str] | None:
    """``(dialect, kind, value)`` of a wrapped signature, or ``None`` for a Gemini one."""
    # (the Python SDK keeps a signature as bytes and sends it back URL-safe, unpadded or not)
    plain = signature.replace("-", "+").replace("_", "/")
    try:
        raw = base64.b64decode(plain + "=" * (-len(plain) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw.startswith(_WRAP):
        return None
    try:
        dialect, kind, value = raw[len(_WRAP):].decode().split("\0", 2)
    except (UnicodeDecodeError, ValueError):
        return None
    return dialect, kind, value


def _reasoning_of(text: str, signature: str | None) -> Reasoning:
    if signature is not None:
        wrapped = _unwrap(signature)
        if wrapped is not None:
            dialect, kind, value = wrapped
            if kind == "redacted":
                return Reasoning(text, redacted=value, dialect=dialect)
            return Reasoning(text, signature=value, dialect=dialect)
    # (unsigned thought text is this dialect's too: a Gemini upstream takes it back as it came)
    return Reasoning(text, signature=signature, dialect=NAME if signature or text else None)


def _signature_of(r: Reasoning) -> str | None:
    """The ``thoughtSignature`` a Gemini client is given (and sends back) for ``r``."""
    if r.dialect == NAME or r.dialect is None:
        return r.signature
    if r.redacted is not None:
        return _wrap(r.dialect, "redacted", r.redacted)
    if r.signature is not None:
        return _wrap(r.dialect, "signature", r.signature)
    return None


# --- schemas -------------------------------------------------------------------------------------


def _json_schema(schema: JSON) -> JSON:
    """An OpenAPI-style ``Schema`` (``type: OBJECT``, ``nullable``) as JSON Schema (a JSON
    Schema is left as it is)."""
    if isinstance(schema, list):
        return [_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, JSON] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {k: _json_schema(v) for k, v in value.items()}
        elif key in ("items", "anyOf", "oneOf", "allOf", "not", "additionalProperties"):
            out[key] = _json_schema(value)
        elif key == "nullable":
            continue
        else:
            out[key] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


# --- request parts -------------------------------------------------------------------------------


class _Calls:
    """The ids of the function calls a conversation made, for responses that name only the
    function (Gemini's ids are optional): a response takes the oldest open call of its name."""

    def __init__(self) -> None:
        self.open: list[tuple[str, str]] = []

    def made(self, name: str, call_id: str) -> None:
        self.open.append((name, call_id))

    def answered(self, name: str, call_id: str | None) -> str:
        for i, (n, c) in enumerate(self.open):
            if (call_id is not None and c == call_id) or (call_id is None and n == name):
                del self.open[i]
                return c
        return call_id or _new_id()


def _parse_parts(raw: JSON, where: str) -> list[dict[str, JSON]]:
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", where)
    # (a part's place is named only when it is not an object of the API's names)
    return [p if type(p) is dict and "_" not in "".join(p) else _obj(p, f"{where}[{i}]")
            for i, p in enumerate(raw)]


def _args_text(args: JSON, where: str) -> str:
    if args is None:
        return "{}"
    if not isinstance(args, dict):
        raise DialectError(f"must be an object, not {kind_of(args)}", where)
    try:
        return orjson.dumps(args).decode()
    except orjson.JSONEncodeError:  # an integer past 64 bits, or nested past 254 levels
        raise DialectError("cannot be passed on as JSON text", where) from None


def _parse_content(obj: dict[str, JSON], where: str, calls: _Calls) -> list[Message]:
    role = obj.get("role", "user")
    if role is not None and not isinstance(role, str):
        raise DialectError("must be a string", f"{where}.role")
    parts = _parse_parts(obj.get("parts", []), f"{where}.parts")
    if role == "model":
        return [_parse_model_turn(parts, where, calls)]
    out: list[Message] = []
    pending: list[Part] = []
    for i, p in enumerate(parts):
        if "functionResponse" in p:
            if pending:
                out.append(Message("user", pending))
                pending = []
            out.append(_parse_function_response(p, f"{where}.parts[{i}]", calls))
        else:
            pending.append(_parse_user_part(p))
    if pending or not out:
        out.append(Message("user", pending))
    return out


def _parse_user_part(p: dict[str, JSON]) -> Part:
    text = p.get("text")
    if isinstance(text, str) and len(p) == 1:  # (its one key is "text")
        return TextPart(text)
    inline = _sub(p, "inlineData")
    if isinstance(inline, dict) and set(p) == {"inlineData"}:
        mime, data = inline.get("mimeType"), inline.get("data")
        if isinstance(mime, str) and mime.startswith("image/") and isinstance(data, str) \
                and set(inline) <= {"mimeType", "data"}:
            return ImagePart(data=data, media_type=mime)
    file = _sub(p, "fileData")
    if isinstance(file, dict) and set(p) == {"fileData"}:
        mime, uri = file.get("mimeType"), file.get("fileUri")
        # An image at a URL any provider can fetch; a file of Google's Files API is readable
        # by Gemini only (kept verbatim, for the route's policy elsewhere).
        if isinstance(mime, str) and mime.startswith("image/") and isinstance(uri, str) \
                and uri.startswith(("http://", "https://")) and _FILES_API not in uri \
                and set(file) <= {"mimeType", "fileUri"}:
            return ImagePart(url=uri)
    if isinstance(text, str) and set(p) <= {"text", "thought", "thoughtSignature"} \
            and not p.get("thought"):
        return TextPart(text)  # (a signature on a user text part means nothing upstream)
    kind = next((k for k in p if k not in ("thought", "thoughtSignature")), "part")
    return OtherPart(NAME, kind, p)


def _parse_function_response(p: dict[str, JSON], at: str, calls: _Calls) -> Message:
    fr = _obj(p["functionResponse"], f"{at}.functionResponse")
    name = fr.get("name")
    if not isinstance(name, str):
        raise DialectError("must be a string", f"{at}.functionResponse.name")
    call_id = fr.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise DialectError("must be a string", f"{at}.functionResponse.id")
    response = fr.get("response")
    if response is not None and not isinstance(response, dict):
        raise DialectError(f"must be an object, not {kind_of(response)}",
                           f"{at}.functionResponse.response")
    response = response or {}
    # Google's convention: {"output": …} or {"error": …}; the text a model of another dialect
    # reads is the output when it is a string, else the whole response as JSON.
    output = response.get("output")
    is_error = "error" in response and "output" not in response
    if isinstance(output, str) and len(response) == 1:
        text = output
    elif is_error and isinstance(response.get("error"), str) and len(response) == 1:
        text = response["error"]
    else:
        text = orjson.dumps(response).decode()
    m = Message("tool", text, name=name, tool_call_id=calls.answered(name, call_id),
                is_error=is_error)
    m.extras["_response"] = p
    return m


def _parse_model_turn(parts: list[dict[str, JSON]], where: str, calls: _Calls,
                      response_id: str | None = None) -> Message:
    content: list[Part] = []
    tool_calls: list[ToolCall] = []
    reasoning: list[Reasoning] = []
    for i, p in enumerate(parts):
        signature = _str(p.get("thoughtSignature"))
        if p.get("thought") is True:
            reasoning.append(_reasoning_of(_str(p.get("text")) or "", signature))
            continue
        if signature is not None:  # a signature on the part it belongs with
            reasoning.append(_reasoning_of("", signature))
        if "functionCall" in p:
            at = f"{where}.parts[{i}]"
            fc = _obj(p["functionCall"], f"{at}.functionCall")
            name = fc.get("name")
            if not isinstance(name, str):
                raise DialectError("must be a string", f"{at}.functionCall.name")
            call_id = _str(fc.get("id")) or _call_id(response_id, len(tool_calls))
            calls.made(name, call_id)
            tool_calls.append(ToolCall(call_id, name,
                                       _args_text(fc.get("args"), f"{at}.functionCall.args")))
        elif isinstance(p.get("text"), str):
            content.append(TextPart(p["text"]))
        else:
            rest = {k: v for k, v in p.items() if k != "thoughtSignature"}
            content.append(OtherPart(NAME, next(iter(rest), "part"), p))
    m = Message("assistant", _plain(content), tool_calls=tool_calls, reasoning=reasoning)
    m.extras["_parts"] = parts
    return m


def _plain(content: list[Part]) -> str | list[Part]:
    if all(isinstance(p, TextPart) for p in content):
        return "".join(p.text for p in content if isinstance(p, TextPart))
    return content


def _parse_system(raw: JSON) -> list[Message]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [Message("system", raw)]
    obj = _obj(raw, "systemInstruction")
    parts = _parse_parts(obj.get("parts", []), "systemInstruction.parts")
    texts = [p.get("text") for p in parts]
    if not all(isinstance(t, str) for t in texts):
        raise DialectError("only text parts are allowed", "systemInstruction.parts")
    m = Message("system", "\n".join(t for t in texts if isinstance(t, str)))
    if len(parts) != 1 or set(obj) - {"parts"}:
        m.extras["_system"] = raw
    return [m]


def _parse_tools(raw: JSON) -> list[ToolDef]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", "tools")
    out: list[ToolDef] = []
    for i, t in enumerate(raw):
        tool = _obj(t, f"tools[{i}]")
        for key, value in tool.items():
            if key != "functionDeclarations":
                out.append(ToolDef(key, kind=key, raw={key: value}, dialect=NAME))
                continue
            if not isinstance(value, list):
                raise DialectError("must be a list", f"tools[{i}].functionDeclarations")
            for j, d in enumerate(value):
                out.append(_parse_declaration(d, f"tools[{i}].functionDeclarations[{j}]"))
    return out


def _parse_declaration(raw: JSON, at: str) -> ToolDef:
    d = _obj(raw, at)
    name = d.get("name")
    if not isinstance(name, str):
        raise DialectError("must be a string", f"{at}.name")
    if d.get("parametersJsonSchema") is not None:
        params = _json_schema(d["parametersJsonSchema"])
    elif d.get("parameters") is not None:
        params = _json_schema(d["parameters"])
    else:
        params = None
    return ToolDef(name, _str(d.get("description")), params, raw=d, dialect=NAME)


def _parse_tool_choice(raw: JSON) -> ToolChoice | None:
    if raw is None:
        return None
    config = _obj(raw, "toolConfig").get("functionCallingConfig")
    if config is None:
        return None
    config = _obj(config, "toolConfig.functionCallingConfig")
    mode = config.get("mode", "AUTO")
    if not isinstance(mode, str) or mode not in _CHOICE_IN:
        raise DialectError("must be AUTO, ANY, NONE or VALIDATED",
                           "toolConfig.functionCallingConfig.mode")
    allowed = config.get("allowedFunctionNames")
    if _one_allowed(mode, allowed):
        assert isinstance(allowed, list)
        return ToolChoice("tool", allowed[0])
    return ToolChoice(_CHOICE_IN[mode])  # type: ignore[arg-type]


def _one_allowed(mode: JSON, allowed: JSON) -> bool:
    """Whether ``allowedFunctionNames`` names the one tool an ``ANY`` call must be (a named
    tool choice); several names, or names under another mode, have no canonical place."""
    return mode == "ANY" and isinstance(allowed, list) and len(allowed) == 1 \
        and isinstance(allowed[0], str)


def _unmapped(obj: dict[str, JSON], config: dict[str, JSON]) -> list[str]:
    """What the request asks that no canonical place holds, though its field is otherwise read
    (the route's ``on_unsupported`` decides for an upstream of another dialect, as ``options``):
    a set of allowed functions, a response type other than JSON or plain text."""
    out: list[str] = []
    if not config and obj.get("toolConfig") is None:  # (nothing to read: most requests)
        return out
    tool_config = _sub(obj, "toolConfig")
    calling = _sub(tool_config, "functionCallingConfig") if isinstance(tool_config, dict) \
        else None
    if isinstance(calling, dict):
        allowed = calling.get("allowedFunctionNames")
        if allowed and not _one_allowed(calling.get("mode", "AUTO"), allowed):
            out.append("toolConfig.functionCallingConfig.allowedFunctionNames")
    if config.get("responseMimeType") not in _PLAIN_MIMES:
        out.append("generationConfig.responseMimeType")
    return out


def _parse_thinking(raw: JSON) -> ReasoningRequest | None:
    if raw is None:
        return None
    obj = _obj(raw, "generationConfig.thinkingConfig")
    budget = _int(obj.get("thinkingBudget"))
    level = obj.get("thinkingLevel")
    if budget == 0:
        return ReasoningRequest(effort="none", enabled=False)
    if isinstance(level, str) and level.lower() in _LEVELS:
        effort: str | None = level.lower()
    else:
        effort = _EFFORT_BY_BUDGET.get(budget) if budget is not None else None
    summary = "auto" if obj.get("includeThoughts") is True else None
    return ReasoningRequest(effort=effort, budget_tokens=budget if budget and budget > 0 else None,
                            summary=summary)


def _parse_output(config: dict[str, JSON]) -> OutputFormat | None:
    if not config:
        return None
    mime = config.get("responseMimeType")
    # (Gemini CLI's router writes OpenAPI's upper-case types even in responseJsonSchema, which
    # Google accepts: read as JSON Schema's lower-case ones, what another provider checks)
    schema = _json_schema(config.get("responseJsonSchema"))
    if schema is None and config.get("responseSchema") is not None:
        schema = _json_schema(config["responseSchema"])
    if mime != "application/json":
        if schema is not None and mime in _PLAIN_MIMES:
            raise DialectError("a response schema needs responseMimeType application/json",
                               "generationConfig.responseMimeType")
        return None
    if schema is None:
        return OutputFormat("json_object")
    return OutputFormat("json_schema", schema)


def _parse_config(raw: JSON, sampling: dict[str, JSON]) -> dict[str, JSON]:
    if raw is None:
        return {}
    config = _obj(raw, "generationConfig")
    for key, name in _SAMPLING:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or (key in _INTEGERS and not isinstance(value, int)):
            raise DialectError("must be a number", f"generationConfig.{key}")
        sampling[name] = value
    stop = config.get("stopSequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise DialectError("must be a list of strings", "generationConfig.stopSequences")
        sampling["stop"] = stop
    return config


# --- rendering requests --------------------------------------------------------------------------


def _render_part(p: Part) -> dict[str, JSON] | None:
    match p:
        case TextPart():
            return {"text": p.text}
        case ImagePart():
            inline = p.inline()
            if inline is not None:
                return {"inlineData": {"mimeType": inline[0], "data": inline[1]}}
            return {"fileData": {"mimeType": _mime_of(p.url or ""), "fileUri": p.url}}
        case OtherPart():
            return p.raw if p.dialect == NAME and isinstance(p.raw, dict) else None
    return None


def _mime_of(url: str) -> str:
    ext = url.rsplit("?", 1)[0].rsplit(".", 1)[-1].lower()
    return {"png": "image/png", "gif": "image/gif", "webp": "image/webp"}.get(ext, "image/jpeg")


def _render_user(m: Message) -> list[dict[str, JSON]]:
    if isinstance(m.content, str):
        return [{"text": m.content}]
    return [w for w in (_render_part(p) for p in m.content) if w is not None]


def _render_response_part(m: Message) -> dict[str, JSON]:
    raw = m.extras.get("_response")
    if isinstance(raw, dict):
        fr = raw.get("functionResponse")
        if isinstance(fr, dict) and (fr.get("id") in (None, m.tool_call_id)):
            return raw
    # The text as it came, under Google's convention for a function's output or error (parsed
    # as JSON it would come back to the client written another way).
    response: JSON = {"error" if m.is_error else "output": m.text}
    out: dict[str, JSON] = {"name": m.name or "function", "response": response}
    if m.tool_call_id:
        out["id"] = m.tool_call_id
    return {"functionResponse": out}


def _render_model(m: Message, same: bool, names: dict[str, str]) -> list[dict[str, JSON]]:
    raw = m.extras.get("_parts") if same else None
    if isinstance(raw, list):
        return raw
    parts: list[dict[str, JSON]] = []
    loose: list[str] = []  # signatures that belong with a part, not a thought
    for r in m.reasoning:
        signature = _signature_of(r)
        if r.text:
            part: dict[str, JSON] = {"text": r.text, "thought": True}
            if signature is not None:
                part["thoughtSignature"] = signature
            parts.append(part)
        elif signature is not None and (r.dialect == NAME or r.redacted or r.signature):
            loose.append(signature)
    if isinstance(m.content, str):
        if m.content:
            parts.append({"text": m.content})
    else:
        parts.extend(w for w in (_render_part(p) for p in m.content) if w is not None)
    for i, c in enumerate(m.tool_calls):
        names[c.id] = c.name
        try:
            args = orjson.loads(c.arguments or "{}")
        except orjson.JSONDecodeError:
            args = {"arguments": c.arguments}
        call: dict[str, JSON] = {"name": c.name,
                                 "args": args if isinstance(args, dict) else {"value": args}}
        if c.id:
            call["id"] = c.id
        part = {"functionCall": call}
        if i == 0:
            # Gemini 3 checks the signature of the first call of a step; a call its model did
            # not make (another provider's) is replayed with the documented bypass.
            part["thoughtSignature"] = loose.pop(0) if loose else SKIP_SIGNATURE
        parts.append(part)
    if loose:
        target = next((p for p in reversed(parts) if "thoughtSignature" not in p), None)
        if target is not None:
            target["thoughtSignature"] = loose[0]
        else:
            parts.append({"text": "", "thoughtSignature": loose[0]})
    return parts


def _render_contents(messages: list[Message], same: bool) -> tuple[JSON, list[dict[str, JSON]]]:
    system: list[Message] = []
    contents: list[dict[str, JSON]] = []
    names: dict[str, str] = {}
    for m in messages:
        if m.role in ("system", "developer"):
            system.append(m)
            continue
        if m.role == "assistant":
            role, parts = "model", _render_model(m, same, names)
        elif m.tool_call_id is not None or m.role == "tool":
            if m.name is None and m.tool_call_id in names:
                m = Message(m.role, m.content, name=names[m.tool_call_id],
                            tool_call_id=m.tool_call_id, is_error=m.is_error, extras=m.extras)
            role, parts = "user", [_render_response_part(m)]
        else:
            role = "user"
            parts = _render_user(m)
        if contents and contents[-1]["role"] == role and (
                role == "user" or not same):
            prev = contents[-1]["parts"]
            assert isinstance(prev, list)
            prev.extend(parts)
            continue
        contents.append({"role": role, "parts": parts})
    instruction: JSON = None
    if system:
        raw = system[0].extras.get("_system") if same and len(system) == 1 else None
        instruction = raw if raw is not None else {
            "parts": [{"text": "\n\n".join(m.text for m in system)}]}
    return instruction, contents


def _render_tools(req: ChatRequest, same: bool) -> list[dict[str, JSON]]:
    declarations: list[JSON] = []
    others: list[dict[str, JSON]] = []
    for t in req.tools:
        if t.kind != "function":
            if t.dialect == NAME and isinstance(t.raw, dict):
                others.append(t.raw)
            continue
        if t.dialect == NAME and isinstance(t.raw, dict):
            declarations.append(t.raw)
            continue
        d: dict[str, JSON] = {"name": t.name}
        if t.description is not None:
            d["description"] = t.description
        if t.parameters is not None:
            d["parametersJsonSchema"] = t.parameters
        declarations.append(d)
    out: list[dict[str, JSON]] = []
    if declarations:
        out.append({"functionDeclarations": declarations})
    return out + others


def _render_tool_choice(c: ToolChoice) -> dict[str, JSON]:
    if c.mode == "tool":
        config: dict[str, JSON] = {"mode": "ANY", "allowedFunctionNames": [c.name or ""]}
    else:
        config = {"mode": {"auto": "AUTO", "required": "ANY", "none": "NONE"}[c.mode]}
    return {"functionCallingConfig": config}


def _render_thinking(r: ReasoningRequest, model: str | None) -> dict[str, JSON]:
    """Gemini 3 takes a ``thinkingLevel`` (low, high; minimal and medium on Flash), Gemini 2.5 a
    ``thinkingBudget`` (``thinkingLevel`` is refused there): an effort goes as the one the model
    takes (a budget by :data:`_BUDGET_BY_EFFORT`), a budget alone as it is."""
    if not r.enabled or r.effort == "none":
        return {"thinkingBudget": 0}
    out: dict[str, JSON] = {"includeThoughts": True}
    # One of the two goes: the effort when the client gave one (its budget is then read back
    # as that effort), else the client's budget.
    if r.effort is not None and r.effort in _LEVELS and _takes_levels(model):
        out["thinkingLevel"] = r.effort.upper()
    elif r.effort is not None and r.effort in _BUDGET_BY_EFFORT:
        out["thinkingBudget"] = _BUDGET_BY_EFFORT[r.effort]
    elif r.budget_tokens is not None:
        out["thinkingBudget"] = r.budget_tokens
    return out


def _takes_levels(model: str | None) -> bool:
    return model is not None and "gemini-3" in model


# --- answers -------------------------------------------------------------------------------------


def _usage_in(v: JSON) -> Usage | None:
    # (read from every stream event, which carries the counts so far: ``type(x) is int`` is
    # _int's test, a JSON integer and not a boolean, without a call per count)
    if not isinstance(v, dict):
        return None
    get = v.get
    prompt, candidates, thoughts = (get("promptTokenCount"), get("candidatesTokenCount"),
                                    get("thoughtsTokenCount"))
    prompt = prompt if type(prompt) is int else None
    candidates = candidates if type(candidates) is int else None
    thoughts = thoughts if type(thoughts) is int else None
    if prompt is None and candidates is None and thoughts is None:
        return None
    tool_prompt, cached = get("toolUsePromptTokenCount"), get("cachedContentTokenCount")
    inp = None if prompt is None else prompt + (tool_prompt if type(tool_prompt) is int else 0)
    out = None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
    return Usage(input_tokens=inp, output_tokens=out,
                 cached_input_tokens=cached if type(cached) is int else None,
                 reasoning_tokens=thoughts)


def _usage_out(u: Usage | None) -> dict[str, JSON] | None:
    if u is None:
        return None
    out: dict[str, JSON] = {}
    thoughts = u.reasoning_tokens or 0
    if u.input_tokens is not None:
        out["promptTokenCount"] = u.input_tokens
    if u.output_tokens is not None:
        out["candidatesTokenCount"] = max(u.output_tokens - thoughts, 0)
    if u.total_tokens is not None:
        out["totalTokenCount"] = u.total_tokens
    if u.cached_input_tokens:
        out["cachedContentTokenCount"] = u.cached_input_tokens
    if u.reasoning_tokens:
        out["thoughtsTokenCount"] = u.reasoning_tokens
    return out


def _finish_in(reason: str) -> str:
    return _FINISH_IN.get(reason, reason)


def _finish_out(reason: str | None) -> str:
    if reason is None:
        return "STOP"
    return _FINISH_OUT.get(reason, reason if reason.isupper() else "STOP")


def _candidate(obj: dict[str, JSON]) -> dict[str, JSON] | None:
    candidates = obj.get("candidates")
    if candidates is None:
        return None
    if not isinstance(candidates, list):
        raise DialectError(f"must be a list, not {kind_of(candidates)}", "candidates")
    if not candidates:
        return None
    return _obj(candidates[0], "candidates[0]")


def _blocked(obj: dict[str, JSON]) -> str | None:
    """The reason a prompt was blocked (``promptFeedback.blockReason``), if it was."""
    feedback = obj.get("promptFeedback")
    if isinstance(feedback, dict) and isinstance(feedback.get("blockReason"), str):
        return str(feedback["blockReason"])
    return None


def _answer_parts(text: str, reasoning: list[Reasoning],
                  calls: list[ToolCall]) -> list[dict[str, JSON]]:
    m = Message("assistant", text, tool_calls=calls, reasoning=reasoning)
    parts = _render_model(m, False, {})
    for p in parts:  # an answer's calls: the bypass value is for replays only
        if p.get("thoughtSignature") == SKIP_SIGNATURE:
            del p["thoughtSignature"]
    return parts


def _error_of(err: JSON) -> ChatError:
    e = ChatError(500, error_text(err))
    if isinstance(err, dict):
        code = _int(err.get("code"))
        if code is not None and 400 <= code <= 599:
            e.status = code
        e.code = _str(err.get("status"))
    return e


def _render_error(err: ChatError) -> dict[str, JSON]:
    status = err.code if err.code in _STATUS_OF.values() else _STATUS_OF.get(
        err.status, "INTERNAL" if err.status >= 500 else "FAILED_PRECONDITION")
    return {"error": {"code": err.status, "message": err.message, "status": status}}


# --- the dialect ---------------------------------------------------------------------------------


class GeminiDialect(SamplesFromPackage):
    name = NAME
    summary = "Google Gemini API (/v1beta/models/{model}:generateContent), SSE"
    capabilities = Capabilities(usage_whole=True, usage_stream=True, tools=True, images=True,
                                reasoning=True, reasoning_replay="own",
                                structured_output=frozenset({"json_schema", "json_object"}))
    framing: Framing = "sse"
    named_events = False
    stream_content_type = "text/event-stream"
    stream_accept = SSE_ACCEPT
    cumulative_stream = False
    # A text chunk's text, and its running counts: Google's API writes usageMetadata on every
    # chunk, candidatesTokenCount and totalTokenCount growing with the text, so a template holds
    # a slot for each count (the decoder keeps the last chunk's, read at the finish). The
    # stream's id and model, the same on each of its chunks, differ from stream to stream: slots
    # of the template kept for the upstream's next stream (the decoder reads them from a
    # stream's first chunk alone, which it always decodes in full).
    text_path: TextPath | None = ("candidates", 0, "content", "parts", 0, "text")
    number_paths: tuple[TextPath, ...] = tuple(
        ("usageMetadata", key) for key in (
            "promptTokenCount", "candidatesTokenCount", "totalTokenCount", "thoughtsTokenCount",
            "cachedContentTokenCount", "toolUsePromptTokenCount"))
    stream_string_paths: tuple[TextPath, ...] = (("modelVersion",), ("responseId",))
    stream_path: str | None = None
    stream_by_accept = False
    default_path = "/v1beta"
    route_options = None
    models_path: str | None = "/v1beta/models"
    """Beside a route at ``…/v1beta``; a route at any prefix also lists at ``{prefix}/models``
    (:meth:`read_target`)."""
    models_header: str | None = "x-goog-api-client"  # every Google SDK request has it
    # ``POST …/models/{model}:countTokens``: ``{"contents"}`` in (a client may wrap its request
    # as ``generateContentRequest``, which the parser unwraps), ``{"totalTokens"}`` out
    token_count: TokenCount | None = TokenCount(
        ":countTokens", frozenset({"contents"}), key="totalTokens")
    routes_by_prefix = True
    """A route's path is a prefix: the model and the method follow it (:meth:`read_target`)."""

    # --- the request target --------------------------------------------------------------------

    def read_target(self, rest: str, method: str, query: Mapping[str, str]) -> Target | None:
        """What ``{prefix}/{rest}`` asks: ``models/{model}:{method}`` (POST), ``models`` (GET,
        the list); ``None``: nothing this dialect serves."""
        if rest == "models":
            return Target("models") if method in ("GET", "HEAD") else None
        if not rest.startswith("models/"):
            return None
        model, colon, verb = rest[len("models/"):].rpartition(":")
        if not colon or not model or "/" in model:
            return None
        if verb == _COUNT:
            return Target("count", model=model)
        if verb not in _METHODS:
            return None
        stream = _METHODS[verb]
        # Without alt=sse a stream is a JSON array of the same objects (Google's default).
        framing: Framing | None = "jsonarray" if stream and query.get("alt") != "sse" else None
        return Target("chat", model=model, stream=stream, framing=framing)

    def client_target(self, prefix: str, model: str | None, *, stream: bool,
                      count: bool = False) -> str:
        """Where a client of this dialect posts to a route at ``prefix`` (to count: its
        ``countTokens``)."""
        verb = _COUNT if count else "streamGenerateContent?alt=sse" if stream else \
            "generateContent"
        return f"{prefix.rstrip('/')}/models/{model or 'default'}:{verb}"

    def upstream_url(self, url: str, model: str | None, *, stream: bool,
                     count: bool = False) -> str:
        """Where an upstream of this dialect configured at ``url`` (its base, ``…/v1beta``) is
        asked; a query in ``url`` is kept."""
        base, _, query = url.partition("?")
        verb = _COUNT if count else "streamGenerateContent" if stream else "generateContent"
        target = f"{base.rstrip('/')}/models/{model or 'default'}:{verb}"
        extra = "alt=sse" if stream and not count else ""
        query = "&".join(q for q in (query, extra) if q)
        return target + ("?" + query if query else "")

    def render_models(self, names: Sequence[str]) -> JSON:
        # https://ai.google.dev/api/models#method:-models.list: one page, no nextPageToken.
        return {"models": [{"name": f"models/{n}", "displayName": n,
                            "supportedGenerationMethods": ["generateContent",
                                                           "streamGenerateContent",
                                                           "countTokens"]}
                           for n in names]}

    # --- requests ------------------------------------------------------------------------------

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = _obj(body, "")
        wrapped = _sub(obj, "generateContentRequest")
        if isinstance(wrapped, dict) and "contents" not in obj:  # a countTokens request
            obj = wrapped
        raw = obj.get("contents")
        if not isinstance(raw, list):
            raise DialectError(f"must be a list, not {kind_of(raw)}", "contents")
        calls = _Calls()
        messages = _parse_system(obj.get("systemInstruction"))
        for i, c in enumerate(raw):
            messages.extend(_parse_content(_obj(c, f"contents[{i}]"),
                                           f"contents[{i}]", calls))
        sampling: dict[str, JSON] = {}
        config = _parse_config(obj.get("generationConfig"), sampling)
        extras = split_known(obj, _REQUEST_KEYS)
        extras["_contents"] = raw  # (a same-dialect render gives them back as they came)
        extras["_config"] = {k: v for k, v in config.items() if k not in _CONFIG_KEYS}
        if config:
            extras["_config_raw"] = config
        if obj.get("toolConfig") is not None:
            extras["_tool_config"] = obj["toolConfig"]
        # What only a Gemini upstream can do, as content only it can carry (the route's
        # on_unsupported policy decides for another).
        only_here: list[Part] = []
        if obj.get("cachedContent") is not None:
            only_here.append(OtherPart(NAME, "cachedContent",
                                       {"cachedContent": obj["cachedContent"]}))
        count = config.get("candidateCount")
        if count is not None and count != 1:
            only_here.append(OtherPart(NAME, "candidateCount", {"candidateCount": count}))
        if only_here:
            first = next((m for m in messages if m.role == "user" and m.tool_call_id is None),
                         None)
            if first is None:
                first = Message("user", [])
                messages.append(first)
            first.content = [*only_here, *(
                [TextPart(first.content)] if isinstance(first.content, str) else first.content)]
        model = obj.get("model")
        return ChatRequest(
            messages=messages,
            model=model.removeprefix("models/") if isinstance(model, str) else None,
            sampling=sampling,
            tools=_parse_tools(obj.get("tools")),
            tool_choice=_parse_tool_choice(obj.get("toolConfig")),
            reasoning=_parse_thinking(config.get("thinkingConfig")),
            output=_parse_output(config),
            unmapped=_unmapped(obj, config),
            extras=extras,
            extras_dialect=NAME,
        )

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = {k: v for k, v in req.extras.items()
                               if not k.startswith("_")} if same else {}
        messages = list(req.messages)
        top: dict[str, JSON] = {}
        for m in messages:  # what only this dialect carries goes back to its place
            if isinstance(m.content, list) and any(
                    isinstance(p, OtherPart) and p.kind in ("cachedContent", "candidateCount")
                    for p in m.content):
                keep: list[Part] = []
                for p in m.content:
                    if isinstance(p, OtherPart) and p.dialect == NAME \
                            and p.kind in ("cachedContent", "candidateCount"):
                        top.update(p.raw)
                    else:
                        keep.append(p)
                idx = messages.index(m)
                messages[idx] = Message(m.role, keep, m.context, m.name, m.tool_calls,
                                        m.tool_call_id, m.is_error, m.reasoning, m.extras)
        instruction, contents = _render_contents(messages, same)
        raw_contents = req.extras.get("_contents") if same else None
        out["contents"] = raw_contents if isinstance(raw_contents, list) else [
            c for c in contents if c["parts"]]
        if instruction is not None:
            out["systemInstruction"] = instruction
        tools = _render_tools(req, same)
        if tools:
            out["tools"] = tools
        raw_config = req.extras.get("_tool_config") if same else None
        if raw_config is not None:  # (retrievalConfig and the like, with a choice or without)
            out["toolConfig"] = raw_config
        elif req.tool_choice is not None and tools:
            out["toolConfig"] = _render_tool_choice(req.tool_choice)
        if "cachedContent" in top:
            out["cachedContent"] = top["cachedContent"]
        config = self._config(req, same, top, req.model or model)
        if config:
            out["generationConfig"] = config
        return out

    @staticmethod
    def _config(req: ChatRequest, same: bool, top: dict[str, JSON],
                model: str | None) -> dict[str, JSON]:
        raw = req.extras.get("_config_raw") if same else None
        if isinstance(raw, dict):
            return raw
        config: dict[str, JSON] = {}
        extra = req.extras.get("_config") if same else None
        if isinstance(extra, dict):
            config.update(extra)
        for key, name in _SAMPLING:
            if name in req.sampling:
                config[key] = req.sampling[name]
        if "stop" in req.sampling:
            stop = req.sampling["stop"]
            config["stopSequences"] = [stop] if isinstance(stop, str) else stop
        if "candidateCount" in top:
            config["candidateCount"] = top["candidateCount"]
        if req.output is not None:
            config["responseMimeType"] = "application/json"
            if req.output.kind == "json_schema" and req.output.schema is not None:
                config["responseJsonSchema"] = req.output.schema
        if req.reasoning is not None:
            config["thinkingConfig"] = _render_thinking(req.reasoning, model)
        return config

    # --- whole answers -------------------------------------------------------------------------

    def parse_response(self, body: JSON) -> ChatResponse:
        obj = _obj(body, "")
        candidate = _candidate(obj)
        blocked = _blocked(obj)
        reason: str | None
        if candidate is None:
            if blocked is None:
                raise DialectError("an answer holds a candidate, or the feedback of a blocked "
                                   "prompt", "candidates")
            reason = "content_filter"
            message = AssistantMessage("")
        else:
            content = _sub(candidate, "content")
            parts = _parse_parts(content.get("parts", []), "candidates[0].content.parts") \
                if isinstance(content, dict) else []
            turn = _parse_model_turn(parts, "candidates[0].content", _Calls(),
                                     _str(obj.get("responseId")))
            message = AssistantMessage(turn.text, tool_calls=turn.tool_calls,
                                       reasoning=turn.reasoning)
            message.extras["_parts"] = parts
            finish = _str(candidate.get("finishReason"))
            reason = _finish_in(finish) if finish else None
            if reason == "stop" and turn.tool_calls:
                reason = "tool_calls"
        extras = split_known(obj, _RESPONSE_KEYS)
        if candidate is not None:
            extras["_candidate"] = {k: v for k, v in candidate.items() if k != "content"}
        if isinstance(obj.get("usageMetadata"), dict):
            extras["_usage"] = obj["usageMetadata"]
        return ChatResponse(
            messages=[message],
            finish_reason=reason,
            usage=_usage_in(_sub(obj, "usageMetadata")),
            id=_str(obj.get("responseId")),
            model=_str(obj.get("modelVersion")),
            extras=extras,
            extras_dialect=NAME,
        )

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        same = resp.extras_dialect == NAME
        out: dict[str, Any] = {k: v for k, v in resp.extras.items()
                               if not k.startswith("_")} if same else {}
        raw_parts = resp.messages[0].extras.get("_parts") \
            if same and len(resp.messages) == 1 else None
        parts = raw_parts if isinstance(raw_parts, list) else _answer_parts(
            resp.text, resp.reasoning, resp.tool_calls)
        raw_candidate = resp.extras.get("_candidate") if same else None
        candidate: dict[str, Any] = dict(raw_candidate) if isinstance(raw_candidate, dict) \
            else {"finishReason": _finish_out(resp.finish_reason), "index": 0}
        blocked = same and "promptFeedback" in out and raw_candidate is None
        if not blocked:
            out["candidates"] = [{"content": {"parts": parts, "role": "model"}, **candidate}]
        raw_usage = resp.extras.get("_usage") if same else None
        usage = raw_usage if isinstance(raw_usage, dict) else _usage_out(resp.usage)
        if usage is not None:
            out["usageMetadata"] = usage
        model = resp.model or req.model
        if model is not None:
            out["modelVersion"] = model
        out["responseId"] = resp.id or random_hex(12)
        return out

    # --- errors --------------------------------------------------------------------------------

    def parse_error(self, body: JSON) -> ChatError | None:
        if isinstance(body, list) and len(body) == 1:  # a JSON-array stream's error
            body = body[0]
        if not isinstance(body, dict) or body.get("error") is None:
            return None
        return _error_of(body["error"])

    def render_error(self, err: ChatError) -> JSON:
        return _render_error(err)

    # --- streams -------------------------------------------------------------------------------

    def decoder(self) -> _Decoder:
        return _Decoder()

    def encoder(self, req: ChatRequest) -> _Encoder:
        return _Encoder(req.model)


class _Decoder:
    """Each event is a whole ``GenerateContentResponse`` with the parts that are new; a part's
    function call comes whole. The event that carries ``finishReason`` (or a blocked prompt)
    finishes the stream."""

    __slots__ = ("_calls", "_counts", "_finished", "_id", "_pending", "_started", "_usage")

    def __init__(self) -> None:
        self._id: str | None = None
        self._started = False
        self._finished = False
        self._calls = 0
        self._usage: Usage | None = None
        self._counts: dict[str, JSON] | None = None
        """The last ``usageMetadata`` that counts anything, not yet read into :attr:`_usage`:
        every event carries the counts so far, and only the finish gives them on."""
        self._pending: Slot | None = None
        """The last text event read by its template (:meth:`again_frame`) since an event that
        counted anything was decoded: its counts, read only if the finish needs them, are the
        last ones."""

    def again_frame(self, frame: Slot) -> None:
        """:class:`gateway.dialects.base.Dialect` ``number_paths``: a text event read by its
        template, whose counts (in the slots of the numbers) are the last so far; parsed only
        when the finish comes."""
        self._pending = frame

    def _usage_so_far(self) -> Usage | None:
        pending = self._pending
        if pending is not None:  # (its counts read as _decode reads them)
            self._pending = None
            usage = _usage_in(_sub(_obj(pending.parsed(), ""), "usageMetadata"))
            if usage is not None:
                self._counts = None
                self._usage = usage
        counts = self._counts
        if counts is not None:
            self._counts = None
            self._usage = _usage_in(counts)
        return self._usage

    def decode(self, payload: Any) -> list[StreamEvent]:
        events = self._shortcut(payload) if self._started else None
        return events if events is not None else self._decode(payload)

    def _shortcut(self, payload: Any) -> list[StreamEvent] | None:
        """The events of nearly every event after the first (``None`` for any other): a candidate
        of text parts alone, the counts so far, perhaps the finish reason, under the API's own
        keys; read as :meth:`_decode` reads it, without its walk."""
        # At each level the known keys are counted (cheaper than a set test of every key): the
        # object's length is their number only when it has no other key, so no error, no blocked
        # prompt, no snake_case key that the general path would camel-case onto a key read here.
        # Any other shape, or a part that is not text alone, goes that path
        # (tests/dialects/test_gemini_shortcut.py holds the two to the same reading).
        if type(payload) is dict \
                and type(candidates := payload.get("candidates")) is list and candidates \
                and type(candidate := candidates[0]) is dict \
                and type(content := candidate.get("content")) is dict \
                and type(parts := content.get("parts")) is list \
                and len(content) == 1 + ("role" in content) \
                and len(candidate) == 1 + ("index" in candidate) \
                + (finish := "finishReason" in candidate) \
                and len(payload) == 1 + ("usageMetadata" in payload) \
                + ("modelVersion" in payload) + ("responseId" in payload):
            plain: list[StreamEvent] = []
            for p in parts:
                if type(p) is not dict or len(p) != 1 or type(text := p.get("text")) is not str:
                    break
                if text:
                    plain.append(TextDelta(text))
            else:
                counts = payload.get("usageMetadata")
                if type(counts) is dict:
                    get = counts.get
                    # Google's counts: these three keys alone, read without a walk; any other
                    # keys are read as the general path reads them (camel-cased).
                    if len(counts) == 3 and type(get("candidatesTokenCount")) is int \
                            and type(get("promptTokenCount")) is int \
                            and "totalTokenCount" in counts:
                        self._counts = counts
                        self._pending = None
                    else:
                        counts = _obj(counts, "usageMetadata")
                        get = counts.get
                        # (what makes _usage_in's value not None, read when the finish needs it)
                        if type(get("candidatesTokenCount")) is int \
                                or type(get("promptTokenCount")) is int \
                                or type(get("thoughtsTokenCount")) is int:
                            self._counts = counts
                            self._pending = None
                if finish:
                    self._finish(candidate, plain)
                return plain
        return None

    def _decode(self, payload: Any) -> list[StreamEvent]:
        """Any event, read in full (:meth:`decode` reads the common one without this walk)."""
        if isinstance(payload, RawData):
            raise DialectError(f"a stream event is not JSON: {payload.text[:60]!r}")
        obj = _obj(payload, "")
        events: list[StreamEvent] = []
        if obj.get("error") is not None:
            err = _error_of(obj["error"])
            self._finished = True
            return [StreamError(err.message, err.code, err.status)]
        if not self._started:
            self._started = True
            self._id = _str(obj.get("responseId"))
            events.append(StreamStart(id=_str(obj.get("responseId")),
                                      model=_str(obj.get("modelVersion"))))
        usage = _usage_in(_sub(obj, "usageMetadata"))
        if usage is not None:
            self._counts = self._pending = None
            self._usage = usage
        candidate = _candidate(obj)
        if candidate is None:
            if _blocked(obj) is not None:
                self._finished = True
                events.append(StreamFinish("content_filter", self._usage_so_far()))
            return events
        content = _sub(candidate, "content")
        parts = _parse_parts(content.get("parts", []), "candidates[0].content.parts") \
            if isinstance(content, dict) else []
        for i, p in enumerate(parts):
            if len(p) == 1 and type(text := p.get("text")) is str:  # (most parts: text alone)
                if text:
                    events.append(TextDelta(text))
                continue
            signature = _str(p.get("thoughtSignature"))
            if p.get("thought") is True:
                r = _reasoning_of(_str(p.get("text")) or "", signature)
                events.append(ReasoningDelta(r.text, r.signature, r.redacted, r.dialect))
                continue
            if signature is not None:
                r = _reasoning_of("", signature)
                events.append(ReasoningDelta("", r.signature, r.redacted, r.dialect))
            if "functionCall" in p:
                at = f"candidates[0].content.parts[{i}].functionCall"
                fc = expect_object(p["functionCall"], at)
                name = fc.get("name")
                if not isinstance(name, str):
                    raise DialectError("must be a string", f"{at}.name")
                index = self._calls
                self._calls += 1
                events.append(ToolCallStart(index, _str(fc.get("id")) or _call_id(self._id, index),
                                            name))
                events.append(ToolCallDelta(index, _args_text(fc.get("args"), f"{at}.args")))
                events.append(ToolCallEnd(index))
            elif isinstance(p.get("text"), str):
                if p["text"]:
                    events.append(TextDelta(p["text"]))
            else:
                raise DialectError("a streamed part this gateway cannot pass on",
                                   f"candidates[0].content.parts[{i}]")
        self._finish(candidate, events)
        return events

    def _finish(self, candidate: dict[str, JSON], events: list[StreamEvent]) -> None:
        finish = _str(candidate.get("finishReason"))
        if finish is not None:
            reason = _finish_in(finish)
            if reason == "stop" and self._calls:
                reason = "tool_calls"
            self._finished = True
            events.append(StreamFinish(reason, self._usage_so_far()))

    def end(self) -> list[StreamEvent]:
        if self._finished:
            return []
        if not self._started:
            return [StreamError("the upstream stream ended before it began")]
        return [StreamError("the upstream stream ended before its finish reason")]


_TEXT_HEAD = b'{"candidates":[{"content":{"parts":[{"text":"'
"""How :meth:`_Encoder._chunk` starts a text chunk's JSON, before its text."""
_TEXT_OPEN = _TEXT_HEAD[:-1]
"""The same, before its text's opening quote."""


class _Encoder:
    """One SSE event per canonical event that carries something: text, a thought, a whole
    function call (its argument fragments are held until it ends), the finish with the usage."""

    __slots__ = ("_agent", "_args", "_calls", "_id", "_model", "_signature", "_spoke", "_tail")

    def __init__(self, model: str | None) -> None:
        self._agent: str | None = None
        self._spoke = False
        """Any text sent yet (the next agent's header starts a paragraph)."""
        self._id = random_hex(12)
        self._model = model
        """Written on every event as it was on the first (left out when unknown then)."""
        self._calls: dict[int, tuple[str, str]] = {}
        self._args: dict[int, list[str]] = {}
        self._signature: str | None = None
        """A signature that belongs with the next part written."""
        self._tail: bytes | None = None
        """What follows the closing quote of a text chunk's text (:meth:`plain_texts`), once
        written: it holds the model and the id, which only the start changes."""

    def _chunk(self, parts: list[dict[str, JSON]], extra: dict[str, JSON] | None = None,
               usage: dict[str, JSON] | None = None) -> bytes:
        candidate: dict[str, JSON] = {"content": {"parts": parts, "role": "model"}}
        if extra:
            candidate.update(extra)
        candidate["index"] = 0
        out: dict[str, JSON] = {"candidates": [candidate]}
        if usage is not None:
            out["usageMetadata"] = usage
        if self._model is not None:
            out["modelVersion"] = self._model
        out["responseId"] = self._id
        return orjson.dumps(out)

    def plain_texts(self, texts: list[bytes]) -> list[Payload] | None:
        """:meth:`gateway.dialects.base.StreamEncoder` ``plain_texts``: unless an agent's header
        or a signature is due with the next text (a text chunk is the same at any other time,
        the stream's first included)."""
        if self._agent is not None or self._signature is not None:
            return None
        self._spoke = True
        tail = self._tail or self._text_tail()
        return [b"".join((_TEXT_HEAD, t, b'"', tail)) for t in texts]

    def _text_tail(self) -> bytes:
        # (cut from a chunk _chunk writes, so that the two never differ)
        tail = self._tail = self._chunk([{"text": ""}])[len(_TEXT_HEAD) + 1:]
        return tail

    def _with_signature(self, part: dict[str, JSON]) -> dict[str, JSON]:
        if self._signature is not None:
            part["thoughtSignature"] = self._signature
            self._signature = None
        return part

    def encode(self, event: StreamEvent) -> list[Payload]:
        if type(event) is TextDelta and event.agent is None and self._agent is None \
                and self._signature is None:
            # Nearly every event: the chunk _chunk writes for it, its text put in the template.
            self._spoke = True
            return [b"".join((_TEXT_OPEN, orjson.dumps(event.text), self._tail
                              or self._text_tail()))]
        match event:
            case StreamStart():
                if event.id:
                    self._id = event.id
                if event.model:
                    self._model = event.model
                self._tail = None
                # The answer's first event, before any text (an empty text part, which the SDKs
                # read as no text): a client sees the stream begin as soon as the upstream's does.
                return [self._chunk([{"text": ""}])]
            case TextDelta():
                text = event.text
                if event.agent != self._agent:
                    text = agent_header(event.agent, first=not self._spoke) + text
                    self._agent = event.agent
                self._spoke = True
                return [self._chunk([self._with_signature({"text": text})])]
            case ReasoningDelta():
                signature = _signature_of(Reasoning(event.text, event.signature, event.redacted,
                                                    dialect=event.dialect))
                if not event.text:
                    if signature is not None:
                        self._signature = signature
                    return []
                part: dict[str, JSON] = {"text": event.text, "thought": True}
                if signature is not None:
                    part["thoughtSignature"] = signature
                return [self._chunk([part])]
            case ToolCallStart():
                self._calls[event.index] = (event.id, event.name)
                self._args[event.index] = []
                return []
            case ToolCallDelta():
                self._args.setdefault(event.index, []).append(event.arguments)
                return []
            case ToolCallEnd():
                call_id, name = self._calls.pop(event.index, ("", "function"))
                text = "".join(self._args.pop(event.index, [])) or "{}"
                try:
                    args = orjson.loads(text)
                except orjson.JSONDecodeError:
                    args = {"arguments": text}
                call: dict[str, JSON] = {"name": name,
                                         "args": args if isinstance(args, dict) else
                                         {"value": args}}
                if call_id:
                    call["id"] = call_id
                return [self._chunk([self._with_signature({"functionCall": call})])]
            case ContextUpdate():
                return []
            case StreamFinish():
                parts = [self._with_signature({"text": ""})]
                return [self._chunk(parts, {"finishReason": _finish_out(event.reason)},
                                    _usage_out(event.usage))]
            case StreamError():
                return [orjson.dumps(_render_error(ChatError(
                    event.status, event.message, code=event.code)))]
        return []
