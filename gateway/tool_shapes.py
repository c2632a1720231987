"""Tools of a shape the upstream's dialect has no word for, mapped to one it has, and back.

Two shapes, each declared by the dialects that carry them natively
(:class:`gateway.dialects.base.Capabilities`):

- **freeform tools** (``custom_tools``): a tool called with free text, not JSON (OpenAI's custom
  tools; Codex's ``apply_patch``). To an upstream without them such a tool is a function of one
  string argument, ``input``, whose description carries the tool's grammar; the call it makes is
  unwrapped on the way back (whole and streamed) into a freeform call with that text, so the
  client sees the call of its own tool. Its result needs nothing: a tool result names its call.
- **namespaces** (``tool_namespaces``): tools grouped under a name (a Responses ``namespace``
  tool). To an upstream without them each tool of a group is a top-level tool named
  ``<namespace>__<name>`` (:func:`flat_name`), its description headed by the group's; the calls
  get their group and name back on the way back. The calls of earlier turns go up flattened
  alike, so that the model sees one name for one tool in the whole conversation.

Both directions are derived from the client's request and the upstream's dialect alone
(:class:`ToolNames`): nothing is kept between a request and its answer.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace

import orjson

from gateway.canonical import (
    JSON,
    ChatRequest,
    ChatResponse,
    StreamEvent,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolDef,
)
from gateway.dialects import Dialect

__all__ = ["INPUT", "ToolNames", "ToolRestorer", "flat_name", "restore_tools", "shape_tools"]

INPUT = "input"
"""The one argument of the function a freeform tool becomes."""
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A tool name every tool-carrying API takes (OpenAI's and Anthropic's pattern and length)."""
_SEPARATOR = "__"


def flat_name(namespace: str, name: str, taken: frozenset[str] = frozenset()) -> str:
    """The top-level name of ``name`` in ``namespace``: ``<namespace>__<name>`` when that is a
    valid name no top-level tool has (``taken``), else a shortened, valid form ending in a hash
    of both (the same for the same two names: a later turn maps them alike)."""
    plain = f"{namespace}{_SEPARATOR}{name}"
    if _NAME.fullmatch(plain) and plain not in taken:
        return plain
    digest = hashlib.sha256(f"{namespace}\0{name}".encode()).hexdigest()[:10]
    head = re.sub(r"[^A-Za-z0-9_-]", "_", plain)[:64 - len(digest) - 1]
    return f"{head}_{digest}"


@dataclass(frozen=True, slots=True)
class _Original:
    name: str
    namespace: str | None
    custom: bool
    """A freeform tool sent as a function: its calls' arguments are unwrapped."""


class ToolNames:
    """The names a request's tools go up under, for one upstream dialect, and back."""

    __slots__ = ("_back", "_custom", "_ns", "_up")

    def __init__(self, tools: list[ToolDef], calls: list[ToolCall], upstream: Dialect,
                 custom_tools: str = "native") -> None:
        caps = upstream.capabilities
        # freeform tools become functions
        self._custom = not caps.custom_tools or custom_tools == "function"
        self._ns = not caps.tool_namespaces  # namespaces are flattened
        taken = frozenset(t.name for t in tools if t.namespace is None)
        self._up: dict[tuple[str | None, str], str] = {}
        self._back: dict[str, _Original] = {}
        seen = [(t.namespace, t.name, t.kind == "custom") for t in tools] + [
            (c.namespace, c.name, c.kind == "custom") for c in calls]
        for namespace, name, custom in seen:
            if (namespace, name) in self._up:
                continue
            flat = flat_name(namespace, name, taken) if (
                self._ns and namespace is not None) else name
            self._up[(namespace, name)] = flat
            wrapped = custom and self._custom
            if flat != name or wrapped:
                self._back[flat] = _Original(name, namespace if self._ns else None, wrapped)

    @property
    def active(self) -> bool:
        """Something is renamed or unwrapped on the way back."""
        return bool(self._back)

    def up(self, namespace: str | None, name: str) -> str:
        return self._up.get((namespace, name), name)

    def back(self, name: str) -> _Original | None:
        return self._back.get(name)

    def tool(self, t: ToolDef) -> ToolDef:
        if t.kind not in ("function", "custom"):
            return t
        flat = self.up(t.namespace, t.name)
        description = t.description
        namespace: str | None = t.namespace
        if self._ns and t.namespace is not None:
            head = f"[{t.namespace}] {t.namespace_description or ''}".rstrip()
            description = f"{head}\n\n{description}" if description else head
            namespace = None
        group = None if namespace is None else t.namespace_description
        if t.kind == "custom" and self._custom:
            return ToolDef(flat, description, _input_schema(t.format), kind="function",
                           namespace=namespace, namespace_description=group)
        return replace(t, name=flat, description=description, namespace=namespace,
                       namespace_description=group)

    def call(self, c: ToolCall) -> ToolCall:
        flat = self.up(c.namespace, c.name)
        namespace = None if self._ns else c.namespace
        if c.kind == "custom" and self._custom:
            return ToolCall(c.id, flat, orjson.dumps({INPUT: c.arguments}).decode())
        return replace(c, name=flat, namespace=namespace)

    def namespace_of(self, original: _Original, given: str | None) -> str | None:
        """A call's namespace: the one its flattened name stood for, else the one it named."""
        return original.namespace if self._ns else given

    def restored(self, c: ToolCall) -> ToolCall:
        original = self.back(c.name)
        if original is None:
            return c
        namespace = self.namespace_of(original, c.namespace)
        if original.custom:
            return ToolCall(c.id, original.name, unwrap_input(c.arguments), kind="custom",
                            namespace=namespace)
        return replace(c, name=original.name, namespace=namespace)


def _input_schema(fmt: JSON) -> JSON:
    about = ("The tool's whole input, as free text: this string is passed to the tool as it "
             "is (the tool is freeform; only this argument is JSON).")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        about += (f" It must match this {fmt.get('syntax') or 'formal'} grammar:\n"
                  f"{fmt.get('definition') or ''}")
    return {"type": "object", "properties": {INPUT: {"type": "string", "description": about}},
            "required": [INPUT], "additionalProperties": False}


def unwrap_input(arguments: str) -> str:
    """A wrapped freeform call's text: its ``input`` argument, or, when the model wrote no such
    JSON object, what it wrote (the text it meant for the tool)."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(INPUT), str):
        return str(value[INPUT])
    return arguments


def _names(req: ChatRequest, upstream: Dialect, custom_tools: str) -> ToolNames | None:
    caps = upstream.capabilities
    # (every request of every route comes here: the common cases leave at once)
    if not caps.tools or (caps.custom_tools and caps.tool_namespaces
                          and custom_tools == "native"):
        return None
    if not req.tools:
        for m in req.messages:  # (a loop: a generator costs a frame on every request)
            if m.tool_calls:
                break
        else:
            return None
    calls = [c for m in req.messages for c in m.tool_calls]
    custom = (not caps.custom_tools or custom_tools == "function") and (
        any(t.kind == "custom" for t in req.tools) or any(c.kind == "custom" for c in calls))
    grouped = not caps.tool_namespaces and (
        any(t.namespace is not None for t in req.tools)
        or any(c.namespace is not None for c in calls))
    if not (custom or grouped):
        return None
    return ToolNames(req.tools, calls, upstream, custom_tools)


def shape_tools(req: ChatRequest, upstream: Dialect, custom_tools: str = "native",
                ) -> ChatRequest:
    """``req`` with its freeform and grouped tools (and their calls) in the shapes ``upstream``
    carries; ``req`` itself when it has none such. ``custom_tools``: the upstream's setting
    (``function``: freeform tools go as functions even where its dialect has them)."""
    names = _names(req, upstream, custom_tools)
    if names is None:
        return req
    messages = [replace(m, tool_calls=[names.call(c) for c in m.tool_calls])
                if m.tool_calls else m for m in req.messages]
    choice = req.tool_choice
    if choice is not None and choice.name is not None:
        choice = ToolChoice(choice.mode, names.up(None, choice.name), choice.parallel)
    return replace(req, messages=messages, tools=[names.tool(t) for t in req.tools],
                   tool_choice=choice)


def restore_tools(resp: ChatResponse, req: ChatRequest, upstream: Dialect,
                  custom_tools: str = "native") -> ChatResponse:
    """The calls of ``upstream``'s answer to ``req`` under the names and shapes the client
    gave its tools."""
    names = _names(req, upstream, custom_tools)
    if names is None or not names.active or not resp.tool_calls:
        return resp
    for m in resp.messages:
        m.tool_calls = [names.restored(c) for c in m.tool_calls]
    return resp


class ToolRestorer:
    """:func:`restore_tools` for a stream: calls renamed as they start, and a wrapped freeform
    call's JSON arguments unwrapped as they arrive (:class:`_InputReader`)."""

    __slots__ = ("_names", "_readers")

    def __init__(self, names: ToolNames) -> None:
        self._names = names
        self._readers: dict[int, _InputReader] = {}

    @staticmethod
    def of(req: ChatRequest, upstream: Dialect, custom_tools: str = "native",
           ) -> ToolRestorer | None:
        names = _names(req, upstream, custom_tools)
        return ToolRestorer(names) if names is not None and names.active else None

    def restore(self, events: list[StreamEvent]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for e in events:
            match e:
                case ToolCallStart():
                    original = self._names.back(e.name)
                    if original is None:
                        out.append(e)
                        continue
                    if original.custom:
                        self._readers[e.index] = _InputReader()
                    out.append(ToolCallStart(e.index, e.id, original.name,
                                             "custom" if original.custom else e.kind,
                                             self._names.namespace_of(original, e.namespace)))
                case ToolCallDelta() if e.index in self._readers:
                    text = self._readers[e.index].feed(e.arguments)
                    if text:
                        out.append(ToolCallDelta(e.index, text))
                case ToolCallEnd() if e.index in self._readers:
                    text = self._readers.pop(e.index).finish()
                    if text:
                        out.append(ToolCallDelta(e.index, text))
                    out.append(e)
                case _:
                    out.append(e)
        return out


_OPENING = '{"input":"'


class _InputReader:
    """The ``input`` string of a JSON object ``{"input": "…"}`` that arrives in pieces, given
    back decoded as it arrives. Arguments of any other form are given back whole at the end, as
    :func:`unwrap_input` reads them."""

    __slots__ = ("_buf", "_mode", "_pos")

    def __init__(self) -> None:
        self._buf = ""
        self._mode = "seek"  # seek (the opening) | string | after | other
        self._pos = 0

    def feed(self, piece: str) -> str:
        self._buf += piece
        if self._mode == "seek":
            compact = re.sub(r"\s", "", self._buf)
            if compact.startswith(_OPENING):
                found = re.match(r'\s*\{\s*"input"\s*:\s*"', self._buf)
                assert found is not None  # the same text, whitespace and all
                self._mode, self._pos = "string", found.end()
            elif not _OPENING.startswith(compact):
                self._mode = "other"
        if self._mode == "string":
            return self._decode()
        return ""

    def _decode(self) -> str:
        buf, pos = self._buf, self._pos
        out: list[str] = []
        while pos < len(buf):
            ch = buf[pos]
            if ch == '"':
                self._mode = "after"
                pos += 1
                break
            if ch != "\\":
                end = pos
                while end < len(buf) and buf[end] not in '"\\':
                    end += 1
                out.append(buf[pos:end])
                pos = end
                continue
            size = _escape_size(buf, pos)
            if size == 0:
                break  # the escape is not whole yet
            # (the standard library's reader: it takes a lone surrogate half, as JSON does)
            out.append(json.loads(f'"{buf[pos:pos + size]}"'))
            pos += size
        self._pos = pos
        return "".join(out)

    def finish(self) -> str:
        if self._mode in ("seek", "other"):
            return unwrap_input(self._buf) if self._buf.strip() else ""
        return ""


def _escape_size(buf: str, pos: int) -> int:
    """The length of the JSON escape at ``pos`` (a ``\\uD8xx`` with its low half), or 0 when it
    has not all arrived."""
    if pos + 1 >= len(buf):
        return 0
    if buf[pos + 1] != "u":
        return 2
    if pos + 6 > len(buf):
        return 0
    high = buf[pos + 2:pos + 6].lower()
    if high.startswith("d8") or high.startswith("d9") or high.startswith("da") \
            or high.startswith("db"):
        if pos + 12 > len(buf):
            # a lone high half followed by something else than an escape is what it is
            rest = buf[pos + 6:]
            return 6 if rest and not "\\u".startswith(rest[:2]) else 0
        return 12 if buf[pos + 6:pos + 8] == "\\u" else 6
    return 6
