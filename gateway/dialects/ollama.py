"""``ollama``: Ollama's native chat API, ``POST /api/chat`` (docs/api.md of github.com/ollama/
ollama, and the ``ollama`` Python client's ``_types.py``).

A request holds ``messages`` (``role``, ``content`` as a string, ``images`` as bare base64,
``thinking``, ``tool_calls`` whose ``arguments`` are a JSON object, and for a tool result
``tool_name`` and, on newer servers, ``tool_call_id``), ``tools``, ``format`` (``"json"`` or a
JSON schema: structured output), ``options`` (sampling under Ollama's names: ``num_predict`` is
the output cap), ``think`` (a boolean or a level) and ``keep_alive``. What no canonical field
holds (``options.top_k``, ``keep_alive``…) is kept for an Ollama upstream and, for any other,
named in :attr:`~gateway.canonical.ChatRequest.unmapped` so that the route's policy decides.

Ollama has no ``tool_choice`` (the model always chooses), and its images are inline only. Its
Python client drops the ids of tool calls (its ``Message`` has none) and names a tool result by
``tool_name`` alone: a call without an id gets one here, and a result without ``tool_call_id`` is
matched to the first unanswered call of that name (else the first unanswered call).

Streams are newline-delimited JSON (``application/x-ndjson``), the default when ``stream`` is
absent: each line a ``message`` piece with ``done: false``, tool calls whole in one line, then a
line with ``done: true``, ``done_reason`` and the counts (``prompt_eval_count``, ``eval_count``)
and durations in nanoseconds. An error, whole or mid-stream, is ``{"error": "…"}``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
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
    ToolDef,
    Usage,
    agent_header,
    random_hex,
)
from gateway.dialects.base import (
    JSON_LINES_ACCEPT,
    Capabilities,
    ModelInfo,
    SamplesFromPackage,
    TokenCount,
    error_text,
    expect_object,
    kind_of,
    split_known,
    text_of,
)
from gateway.dialects.shared import messages_of
from gateway.errors import DialectError
from gateway.framing import Framing, Payload, TextPath

__all__ = ["OllamaDialect"]

NAME = "ollama"
_REQUEST_KEYS = frozenset({"model", "messages", "stream", "tools", "format", "options", "think"})
_MESSAGE_KEYS = frozenset({"role", "content", "images", "thinking", "tool_calls", "tool_name",
                           "tool_call_id"})
_RESPONSE_KEYS = frozenset({"model", "message", "done_reason", "prompt_eval_count",
                            "eval_count"})
_OPTIONS: dict[str, str] = {
    # Ollama's option -> the canonical sampling key (docs/modelfile.mdx, "Valid parameters")
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "num_predict": "max_tokens",
}
_SAMPLING_OUT = {canonical: option for option, canonical in _OPTIONS.items()}
_INTEGERS = frozenset({"seed", "num_predict"})
_DEFAULTS: dict[str, JSON] = {"logprobs": False, "top_logprobs": 0}
"""Ollama's own defaults: a client that says them asks for nothing another dialect lacks."""
_THINK_LEVELS = frozenset({"low", "medium", "high", "max"})
_THINK_BY_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high",
                    "xhigh": "high", "max": "max"}
"""A canonical effort as Ollama's ``think`` level (the table is in docs/translation.md)."""
_FINISH_OUT = {"stop": "stop", "length": "length"}
_STATUS_MESSAGES = {404: "not found", 429: "too many requests"}
_IMAGE_MAGIC = (("iVBORw0KGgo", "image/png"), ("/9j/", "image/jpeg"), ("R0lGOD", "image/gif"),
                ("UklGR", "image/webp"))
"""Base64 openings of the image formats Ollama's vision models take: its images carry no media
type, which other dialects need."""
_EPOCH = "1970-01-01T00:00:00Z"


def _iso(seconds: int | None = None) -> str:
    moment = datetime.now(UTC) if seconds is None else datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


_second: tuple[int, bytes] = (-1, b"")
"""The second :func:`_stamp` last wrote and its text up to the fraction's point."""


def _stamp(now_ns: int | None = None) -> bytes:
    """What ``_iso()`` gives now (or at ``now_ns``, Unix nanoseconds), as bytes, each second's
    date and time formatted once: a stream stamps every line it writes."""
    global _second
    second, micros = divmod((time.time_ns() if now_ns is None else now_ns) // 1000, 1_000_000)
    if second != _second[0]:
        whole = datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")
        _second = (second, whole.removesuffix("+00:00").encode() + b".")
    return b"%s%06dZ" % (_second[1], micros)


def _unix(created_at: JSON) -> int | None:
    """``created_at`` (RFC 3339, nanoseconds and an offset as Go writes it) as Unix seconds."""
    if not isinstance(created_at, str) or len(created_at) < 19:
        return None
    head, rest = created_at[:19], created_at[19:]
    if rest.startswith("."):  # Python's parser takes at most microseconds
        digits = len(rest) - len(rest[1:].lstrip("0123456789"))
        rest = rest[digits:]
    try:
        return int(datetime.fromisoformat(head + (rest or "Z")).timestamp())
    except ValueError:
        return None


def _media_type(data: str) -> str:
    return next((t for head, t in _IMAGE_MAGIC if data.startswith(head)),
                "application/octet-stream")


def _dumps(value: JSON) -> bytes:
    """Compact JSON of a value that holds a call's arguments: orjson's, unless they hold an
    integer beyond 64 bits (valid JSON, which orjson refuses): then the standard library's."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _loads(text: str) -> JSON:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)  # integers beyond 64 bits; raises for text that is no JSON


def _new_call_id() -> str:
    return "call_" + random_hex(12)


def _int(v: JSON) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: JSON) -> str | None:
    return v if isinstance(v, str) else None


class OllamaDialect(SamplesFromPackage):
    name = NAME
    summary = "Ollama's native chat API (/api/chat), NDJSON streams"
    capabilities = Capabilities(usage_whole=True, usage_stream=True, tools=True, images=True,
                                reasoning=True,
                                structured_output=frozenset({"json_schema", "json_object"}),
                                tool_choices=frozenset({"auto"}), inline_images_only=True)
    framing: Framing = "jsonlines"
    named_events = False
    stream_content_type = "application/x-ndjson"
    stream_accept = JSON_LINES_ACCEPT
    cumulative_stream = False
    # A line of text alone; each line carries its own created_at (a slot of the template: the
    # decoder reads only the first line's).
    text_path: TextPath | None = ("message", "content")
    string_paths: tuple[TextPath, ...] = (("created_at",),)
    stream_path: str | None = None
    stream_by_accept = False
    default_path = "/api/chat"
    route_options = None
    models_path: str | None = "/api/tags"
    models_header: str | None = None
    model_info: ModelInfo | None = ModelInfo("/api/show", ("model", "name"))
    token_count: TokenCount | None = None

    def render_models(self, names: Sequence[str]) -> JSON:
        # GET /api/tags: what a model's files are (size, digest, date) is the upstream's and
        # unknown here; zero, empty and the epoch say so.
        return {"models": [{"name": n, "model": n, "modified_at": _EPOCH, "size": 0,
                            "digest": "", "details": {}} for n in names]}

    def render_model_info(self, name: str) -> JSON:
        """``POST /api/show`` for a model a route serves: its details are the upstream's and
        unknown here (the Python client requires ``model_info``, an object); of its
        capabilities only ``completion`` is sure (tools and images depend on the model and
        on the route's upstream dialect)."""
        return {"modelfile": "", "parameters": "", "template": "", "details": {},
                "model_info": {}, "capabilities": ["completion"], "modified_at": _EPOCH}

    # --- requests ------------------------------------------------------------------------------

    def parse_request(self, body: JSON) -> ChatRequest:
        obj = expect_object(body, "")
        model = obj.get("model")
        if model is not None and not isinstance(model, str):
            raise DialectError("must be a string", "model")
        stream = obj.get("stream")
        if stream is not None and not isinstance(stream, bool):
            raise DialectError("must be a boolean", "stream")
        extras = split_known(obj, _REQUEST_KEYS)
        unmapped = [k for k, v in extras.items()
                    if v is not None and not (k in _DEFAULTS and _DEFAULTS[k] == v)]
        sampling, other_options = _parse_options(obj.get("options"))
        if other_options:
            extras["_options"] = other_options
            unmapped += [f"options.{k}" for k in other_options]
        return ChatRequest(
            messages=_parse_messages(obj),
            stream=stream is not False,  # Ollama streams unless told not to
            model=model,
            sampling=sampling,
            tools=_parse_tools(obj.get("tools")),
            reasoning=_parse_think(obj.get("think")),
            output=_parse_format(obj.get("format")),
            extras=extras,
            extras_dialect=NAME,
            hints={"received_ns": time.monotonic_ns(), "stream_given": "stream" in obj},
            unmapped=unmapped,
        )

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        same = req.extras_dialect == NAME
        out: dict[str, Any] = {k: v for k, v in req.extras.items() if k != "_options"} \
            if same else {}
        out["model"] = req.model or model or "default"
        out["messages"] = _render_messages(req.messages, same)
        if stream is not True or not same or req.hints.get("stream_given") is not False:
            out["stream"] = stream  # (absent means a stream: a client's own absence is kept)
        options: dict[str, JSON] = dict(req.extras.get("_options") or {}) if same else {}
        for key, value in req.sampling.items():
            option = _SAMPLING_OUT.get(key)
            if option is not None:
                options[option] = value
        if "stop" in req.sampling:
            options["stop"] = req.sampling["stop"]
        if "num_predict" not in options and max_tokens is not None:
            options["num_predict"] = max_tokens
        if options:
            out["options"] = options
        if req.tools:
            out["tools"] = [_render_tool(t) for t in req.tools if t.kind == "function"]
        if req.output is not None:
            out["format"] = _render_format(req.output)
        think = _render_think(req.reasoning)
        if think is not None:
            out["think"] = think
        return out

    # --- whole answers -------------------------------------------------------------------------

    def parse_response(self, body: JSON) -> ChatResponse:
        obj = expect_object(body, "")
        message = expect_object(obj.get("message"), "message")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise DialectError("must be a string", "message.content")
        calls = _parse_calls(message.get("tool_calls"), "message.tool_calls", None)
        thinking = message.get("thinking")
        reason = obj.get("done_reason")
        return ChatResponse(
            messages=[AssistantMessage(
                content=content or "",
                tool_calls=calls,
                reasoning=[Reasoning(thinking)] if isinstance(thinking, str) and thinking
                else [],
                extras=split_known(message, _MESSAGE_KEYS),
            )],
            finish_reason=_finish_in(reason, bool(calls)),
            usage=_usage_of(obj),
            created=_unix(obj.get("created_at")),
            model=_str(obj.get("model")),
            extras=split_known(obj, _RESPONSE_KEYS),
            extras_dialect=NAME,
        )

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        same = resp.extras_dialect == NAME
        out: dict[str, Any] = dict(resp.extras) if same else {}
        out["model"] = resp.model or req.model or "unknown"
        out.setdefault("created_at", _iso(resp.created))
        message: dict[str, Any] = dict(resp.messages[0].extras) if same and resp.messages \
            else {}
        message["role"] = "assistant"
        message["content"] = resp.text
        thinking = "".join(r.text for r in resp.reasoning)
        if thinking:
            message["thinking"] = thinking
        calls = resp.tool_calls
        if calls:
            message["tool_calls"] = [_render_call(c, i) for i, c in enumerate(calls)]
        out["message"] = message
        out["done"] = True
        if not same or resp.finish_reason is not None:  # (an older server writes none)
            out["done_reason"] = _finish_out(resp.finish_reason, same)
        if not same:
            received = req.hints.get("received_ns")
            if isinstance(received, int):
                out["total_duration"] = max(time.monotonic_ns() - received, 1)
        if resp.usage is not None:
            out["prompt_eval_count"] = resp.usage.input_tokens or 0
            out["eval_count"] = resp.usage.output_tokens or 0
        return out

    # --- errors --------------------------------------------------------------------------------

    def parse_error(self, body: JSON) -> ChatError | None:
        if isinstance(body, dict) and body.get("error") is not None:
            return ChatError(500, error_text(body["error"]))
        return None

    def render_error(self, err: ChatError) -> JSON:
        return {"error": err.message or _STATUS_MESSAGES.get(err.status, "error")}

    # --- streams -------------------------------------------------------------------------------

    def decoder(self) -> _Decoder:
        return _Decoder()

    def encoder(self, req: ChatRequest) -> _Encoder:
        received = req.hints.get("received_ns") if req.extras_dialect == NAME else None
        return _Encoder(req.model, received if isinstance(received, int) else None)


# --- request parts -------------------------------------------------------------------------------


def _parse_options(raw: JSON) -> tuple[dict[str, JSON], dict[str, JSON]]:
    """``options`` as canonical sampling, and the options no canonical key names."""
    if raw is None:
        return {}, {}
    options = expect_object(raw, "options")
    sampling: dict[str, JSON] = {}
    other: dict[str, JSON] = {}
    for key, value in options.items():
        if value is None:
            continue
        canonical = _OPTIONS.get(key)
        if key == "stop":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
                raise DialectError("must be a list of strings", "options.stop")
            sampling["stop"] = value
        elif canonical is None:
            other[key] = value
        elif key in _INTEGERS:
            if _int(value) is None:
                raise DialectError("must be an integer", f"options.{key}")
            if key == "num_predict" and value < 0:
                other[key] = value  # -1 (no limit) and -2 (fill the context): no canonical cap
            else:
                sampling[canonical] = value
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise DialectError("must be a number", f"options.{key}")
        else:
            sampling[canonical] = value
    return sampling, other


def _parse_think(raw: JSON) -> ReasoningRequest | None:
    if raw is None:
        return None
    if isinstance(raw, bool):
        return ReasoningRequest(enabled=raw)
    if isinstance(raw, str) and raw in _THINK_LEVELS:
        return ReasoningRequest(effort=raw)
    raise DialectError('must be a boolean or "low", "medium", "high" or "max"', "think")


def _render_think(r: ReasoningRequest | None) -> bool | str | None:
    if r is None:
        return None
    if r.effort is not None:
        if r.effort == "none":
            return False
        return _THINK_BY_EFFORT.get(r.effort, True)
    return r.enabled


def _parse_format(raw: JSON) -> OutputFormat | None:
    if raw is None or raw == "":
        return None
    if raw == "json":
        return OutputFormat("json_object")
    if isinstance(raw, dict):
        return OutputFormat("json_schema", schema=raw)
    raise DialectError(f'must be "json" or a JSON schema, not {kind_of(raw)}', "format")


def _render_format(o: OutputFormat) -> JSON:
    if o.kind == "json_object":
        return "json"
    return o.schema if o.schema is not None else {"type": "object"}


def _parse_messages(obj: dict[str, JSON]) -> list[Message]:
    out: list[Message] = []
    pending: list[ToolCall] = []
    """The calls of the assistant turns so far that no tool result has answered yet."""
    for i, raw in enumerate(messages_of(obj)):
        where = f"messages[{i}]"
        m = expect_object(raw, where)
        role = m.get("role")
        if not isinstance(role, str):
            raise DialectError("must be a string", f"{where}.role")
        role = role.lower()  # as Ollama's server reads it
        text = m.get("content")
        if text is not None and not isinstance(text, str):
            raise DialectError("must be a string", f"{where}.content")
        images = _parse_images(m.get("images"), f"{where}.images")
        content: str | list[Part] = [TextPart(text or ""), *images] if images else (text or "")
        thinking = m.get("thinking")
        if thinking is not None and not isinstance(thinking, str):
            raise DialectError("must be a string", f"{where}.thinking")
        calls = _parse_calls(m.get("tool_calls"), f"{where}.tool_calls", i)
        pending += calls
        extras = split_known(m, _MESSAGE_KEYS)
        if calls:
            extras["_calls"] = m["tool_calls"]  # as the client wrote them (ids or none)
        call_id: str | None = None
        if role == "tool":
            call_id = _answered(m, pending, where)
            for key in ("tool_name", "tool_call_id"):
                extras[f"_{key}"] = m.get(key)
        out.append(Message(role, content, tool_calls=calls, tool_call_id=call_id,
                           reasoning=[Reasoning(thinking)] if thinking else [], extras=extras))
    return out


def _answered(m: dict[str, JSON], pending: list[ToolCall], where: str) -> str:
    """The id of the call a tool result answers: its ``tool_call_id``, else the first unanswered
    call named ``tool_name``, else the first unanswered call; a result that answers none gets an
    id of its own."""
    given, name = m.get("tool_call_id"), m.get("tool_name")
    if given is not None and not isinstance(given, str):
        raise DialectError("must be a string", f"{where}.tool_call_id")
    if name is not None and not isinstance(name, str):
        raise DialectError("must be a string", f"{where}.tool_name")
    if given:
        match = next((c for c in pending if c.id == given), None)
    else:
        match = next((c for c in pending if c.name == name), None) if name else None
        match = match or (pending[0] if pending else None)
    if match is not None:
        pending.remove(match)
        return match.id
    return given or _new_call_id()


def _parse_images(raw: JSON, where: str) -> list[Part]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", where)
    out: list[Part] = []
    for j, data in enumerate(raw):
        if not isinstance(data, str):
            raise DialectError("must be a base64 string", f"{where}[{j}]")
        out.append(ImagePart(data=data, media_type=_media_type(data)))
    return out


def _parse_calls(raw: JSON, where: str, turn: int | None) -> list[ToolCall]:
    """Tool calls; one without an id gets one (``call_<turn>_<n>`` in a request, so that the
    same history is given the same ids each turn; a fresh one in an answer)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", where)
    out: list[ToolCall] = []
    for j, c in enumerate(raw):
        c = expect_object(c, f"{where}[{j}]")
        fn = expect_object(c.get("function"), f"{where}[{j}].function")
        name, args, cid = fn.get("name"), fn.get("arguments"), c.get("id")
        if not isinstance(name, str) or not name:
            raise DialectError("must be a non-empty string", f"{where}[{j}].function.name")
        if cid is not None and not isinstance(cid, str):
            raise DialectError("must be a string", f"{where}[{j}].id")
        if args is None:
            text = "{}"
        elif isinstance(args, dict):
            text = _dumps(args).decode()
        elif isinstance(args, str):  # written as JSON text by some OpenAI-minded clients
            text = args or "{}"
        else:
            raise DialectError("must be an object", f"{where}[{j}].function.arguments")
        if not cid:
            cid = f"call_{turn}_{j}" if turn is not None else _new_call_id()
        out.append(ToolCall(cid, name, text))
    return out


def _arguments(c: ToolCall) -> dict[str, JSON]:
    try:
        args = _loads(c.arguments or "{}")
    except ValueError:
        args = None
    if not isinstance(args, dict):
        raise DialectError("must be a JSON object (Ollama takes no other arguments)",
                           f"tool call {c.name}.arguments")
    return args


def _render_call(c: ToolCall, index: int | None) -> JSON:
    """A call as Ollama writes it in an answer (``index`` among the answer's calls), or in a
    request (``index`` ``None``: clients write none)."""
    fn: dict[str, JSON] = {"name": c.name, "arguments": _arguments(c)}
    if index is not None:
        fn = {"index": index, **fn}
    return {"id": c.id, "function": fn}


def _render_messages(messages: list[Message], same: bool) -> list[dict[str, Any]]:
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for m in messages:
        wire: dict[str, Any] = {k: v for k, v in m.extras.items() if not k.startswith("_")} \
            if same else {}
        wire["role"] = "system" if m.role == "developer" else m.role
        wire["content"] = text_of(m.content)
        images = [p.inline() for p in m.content if isinstance(p, ImagePart)] \
            if isinstance(m.content, list) else []
        if images:
            wire["images"] = [inline[1] for inline in images if inline is not None]
        thinking = "".join(r.text for r in m.reasoning)
        if thinking:
            wire["thinking"] = thinking
        if m.tool_calls:
            written = m.extras.get("_calls") if same else None
            wire["tool_calls"] = written if written is not None else [
                _render_call(c, None) for c in m.tool_calls]
            names.update((c.id, c.name) for c in m.tool_calls)
        if m.tool_call_id is not None:
            wire["role"] = "tool"
            if same and "_tool_call_id" in m.extras:  # what the client wrote, and no more
                for key in ("tool_name", "tool_call_id"):
                    if m.extras[f"_{key}"] is not None:
                        wire[key] = m.extras[f"_{key}"]
            else:
                name = names.get(m.tool_call_id)
                if name:
                    wire["tool_name"] = name
                wire["tool_call_id"] = m.tool_call_id
        out.append(wire)
    return out


def _parse_tools(raw: JSON) -> list[ToolDef]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise DialectError(f"must be a list, not {kind_of(raw)}", "tools")
    out: list[ToolDef] = []
    for i, t in enumerate(raw):
        t = expect_object(t, f"tools[{i}]")
        if t.get("type", "function") != "function":
            out.append(ToolDef(name="", kind=str(t.get("type")), raw=t, dialect=NAME))
            continue
        fn = expect_object(t.get("function"), f"tools[{i}].function")
        name, desc = fn.get("name"), fn.get("description")
        if not isinstance(name, str) or not name:
            raise DialectError("must be a non-empty string", f"tools[{i}].function.name")
        out.append(ToolDef(name, desc if isinstance(desc, str) else None, fn.get("parameters")))
    return out


def _render_tool(t: ToolDef) -> JSON:
    fn: dict[str, JSON] = {"name": t.name}
    if t.description is not None:
        fn["description"] = t.description
    fn["parameters"] = t.parameters if t.parameters is not None else {
        "type": "object", "properties": {}}
    return {"type": "function", "function": fn}


# --- answers -------------------------------------------------------------------------------------


def _finish_in(reason: JSON, called: bool) -> str | None:
    """``done_reason``: ``stop`` (also after tool calls), ``length``, or ``load``/``unload``
    (kept as they came)."""
    if not isinstance(reason, str) or not reason:
        return "tool_calls" if called else None
    if reason == "stop" and called:
        return "tool_calls"
    return reason


def _finish_out(reason: str | None, same: bool) -> str:
    if reason is None:
        return "stop"
    if same and reason not in ("tool_calls", "content_filter", "error"):
        return reason
    return _FINISH_OUT.get(reason, "stop")


def _usage_of(obj: dict[str, Any]) -> Usage | None:
    prompt, output = _int(obj.get("prompt_eval_count")), _int(obj.get("eval_count"))
    if prompt is None and output is None:
        return None
    return Usage(input_tokens=prompt, output_tokens=output)


# --- streams -------------------------------------------------------------------------------------


class _Decoder:
    __slots__ = ("_calls", "_done", "_failed", "_open", "_started")

    def __init__(self) -> None:
        self._started = False
        self._done = False
        self._failed = False
        self._open = False
        """Begun and neither done nor failed: a line of text alone is read by the shortcut."""
        self._calls = 0

    def decode(self, payload: Any) -> list[StreamEvent]:
        # Nearly every line: a piece of text alone (no thinking, no calls, no error, not done),
        # which gives what the general path below gives for it.
        # (dict.get, not a test of the keys: a view's subset test costs more than the reads)
        if self._open and type(payload) is dict and type(message := payload.get("message")) \
                is dict and message.get("thinking") is None \
                and message.get("tool_calls") is None and payload.get("error") is None \
                and payload.get("done") is not True:
            text = message.get("content")
            if type(text) is str:
                return [TextDelta(text)] if text else []
            if text is None:
                return []
        if self._done or self._failed:
            return []
        if not isinstance(payload, dict):
            raise DialectError("a line must be an object", "stream")
        if payload.get("error") is not None:
            self._failed = True
            self._open = False
            return [StreamError(error_text(payload["error"]))]
        events: list[StreamEvent] = []
        if not self._started:
            self._started = self._open = True
            events.append(StreamStart(created=_unix(payload.get("created_at")),
                                      model=_str(payload.get("model"))))
        message = payload.get("message")
        if isinstance(message, dict):
            thinking = message.get("thinking")
            if isinstance(thinking, str) and thinking:
                events.append(ReasoningDelta(thinking))
            text = message.get("content")
            if isinstance(text, str) and text:
                events.append(TextDelta(text))
            for call in _parse_calls(message.get("tool_calls"), "stream.message.tool_calls",
                                     None):
                index = self._calls
                self._calls += 1
                events += [ToolCallStart(index, call.id, call.name),
                           ToolCallDelta(index, call.arguments), ToolCallEnd(index)]
        elif message is not None:
            raise DialectError("must be an object", "stream.message")
        if payload.get("done") is True:
            self._done = True
            self._open = False
            events.append(StreamFinish(_finish_in(payload.get("done_reason"), self._calls > 0)
                                       or "stop", _usage_of(payload)))
        return events

    def end(self) -> list[StreamEvent]:
        if self._done or self._failed:
            return []
        self._done = True
        self._open = False
        return [StreamError("the upstream stream ended before it finished")]


_PLAIN_TEXT_MIDDLE = b'","message":{"role":"assistant","content":"'
"""What :meth:`_Encoder._line` writes of a text's line between its time and its text."""
_PLAIN_TEXT_TAIL = b'"},"done":false}'
"""How :meth:`_Encoder._line` ends a text's line, after its text."""
_TEXT_OPEN = _PLAIN_TEXT_MIDDLE[:-1]
"""The same as :data:`_PLAIN_TEXT_MIDDLE`, before its text's opening quote."""
_TEXT_CLOSE = _PLAIN_TEXT_TAIL[1:]
"""The same as :data:`_PLAIN_TEXT_TAIL`, after its text's closing quote."""


class _Encoder:
    __slots__ = ("_agent", "_calls", "_closed", "_first_text", "_model", "_pending", "_prefix",
                 "_spoke", "_started")

    def __init__(self, model: str | None, received: int | None) -> None:
        self._model = model or "unknown"
        self._started = received if received is not None else time.monotonic_ns()
        self._first_text: int | None = None
        self._closed = False
        self._agent: str | None = None
        self._spoke = False
        self._calls = 0
        self._pending: dict[int, tuple[str, str, list[str]]] = {}
        """Calls begun and not ended: index -> (id, name, argument pieces). Ollama sends a call
        whole, so its arguments are held until it ends."""
        self._prefix = b""
        """The head of every line but the last, up to its time: the model, once known."""

    def _line(self, message: dict[str, Any]) -> bytes:
        if not self._prefix:
            self._prefix = orjson.dumps({"model": self._model})[:-1] + b',"created_at":"'
        return (self._prefix + _stamp() + b'","message":'
                + _dumps({"role": "assistant", **message}) + b',"done":false}')

    def plain_texts(self, texts: list[bytes]) -> list[Payload] | None:
        """:meth:`gateway.dialects.base.StreamEncoder` ``plain_texts``: once the stream has
        begun, while no agent speaks. Each line is stamped when written, as :meth:`_line`
        stamps it."""
        if self._closed or not self._prefix or self._agent is not None:
            return None
        self._spoke = True
        if self._first_text is None:
            self._first_text = time.monotonic_ns()
        head = self._prefix
        return [b"".join((head, _stamp(), _PLAIN_TEXT_MIDDLE, t, _PLAIN_TEXT_TAIL))
                for t in texts]

    def encode(self, event: StreamEvent) -> list[Payload]:
        if type(event) is TextDelta and event.agent is None and self._agent is None \
                and self._prefix and not self._closed:
            # Nearly every event: the line _line writes for it, its text put in the template
            # (a text orjson refuses is left to _line, which says so as it does for any other).
            try:
                quoted = orjson.dumps(event.text)
            except orjson.JSONEncodeError:
                pass
            else:
                self._spoke = True
                if self._first_text is None:
                    self._first_text = time.monotonic_ns()
                return [b"".join((self._prefix, _stamp(), _TEXT_OPEN, quoted, _TEXT_CLOSE))]
        if self._closed:
            return []
        match event:
            case StreamStart():
                if self._prefix:
                    return []
                if event.model:
                    self._model = event.model  # the model that answered, as in a whole answer
                # An empty first piece, as Ollama's server sends one before a thinking model's
                # first words: the client sees the answer begin before any text.
                return [self._line({"content": ""})]
            case TextDelta():
                text = event.text
                if event.agent != self._agent:
                    text = agent_header(event.agent, first=not self._spoke) + text
                    self._agent = event.agent
                self._spoke = True
                if self._first_text is None:
                    self._first_text = time.monotonic_ns()
                return [self._line({"content": text})]
            case ReasoningDelta():
                return [self._line({"content": "", "thinking": event.text})] if event.text \
                    else []
            case ToolCallStart():
                self._pending[event.index] = (event.id, event.name, [])
                return []
            case ToolCallDelta():
                if event.index in self._pending:
                    self._pending[event.index][2].append(event.arguments)
                return []
            case ToolCallEnd():
                return self._call(event.index)
            case ContextUpdate():
                return []
            case StreamFinish():
                out = [p for i in sorted(self._pending) for p in self._call(i)]
                if self._closed:
                    return out
                self._closed = True
                out.append(self._last(event))
                return out
            case StreamError():
                self._closed = True
                return [orjson.dumps({"error": event.message})]
            case _:
                assert_never(event)

    def _call(self, index: int) -> list[Payload]:
        entry = self._pending.pop(index, None)
        if entry is None:
            return []
        cid, name, pieces = entry
        try:
            call = _render_call(ToolCall(cid, name, "".join(pieces) or "{}"), self._calls)
        except DialectError as e:
            self._closed = True
            return [orjson.dumps({"error": f"the upstream's tool call {name}: {e}"})]
        self._calls += 1
        return [self._line({"content": "", "tool_calls": [call]})]

    def _last(self, event: StreamFinish) -> bytes:
        reason = event.reason or ("tool_calls" if self._calls else None)
        last: dict[str, Any] = {"model": self._model, "created_at": _iso(),
                                "message": {"role": "assistant", "content": ""}, "done": True,
                                "done_reason": _finish_out(reason, False)}
        ended = time.monotonic_ns()
        last["total_duration"] = max(ended - self._started, 1)
        if self._first_text is not None:
            last["prompt_eval_duration"] = max(self._first_text - self._started, 1)
            last["eval_duration"] = max(ended - self._first_text, 1)
        if event.usage is not None:
            last["prompt_eval_count"] = event.usage.input_tokens or 0
            last["eval_count"] = event.usage.output_tokens or 0
        return orjson.dumps(last)

