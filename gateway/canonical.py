"""The neutral chat model every dialect parses into and renders from.

A dialect module never talks to another dialect: it maps its wire JSON to these types and back.

Requests are a list of :class:`Message` (system, user, assistant, tool), each holding text or
content parts (:data:`Part`: text, image, or a part kept verbatim), the assistant's tool calls and
reasoning, and a tool result's call id; plus the tools the model may call (:class:`ToolDef`,
:class:`ToolChoice`). Whole answers are :class:`ChatResponse`, streams a sequence of
:data:`StreamEvent`.

RAG metadata (citations, thoughts, follow-up questions) lives in ``context``, a dict shaped like
the protocol's *recommended response context* (``data_points``, ``thoughts``,
``followup_questions``), because two dialects carry it verbatim and keeping it raw makes their
round trips exact; :func:`citations_of` and :func:`context_with_citations` give the typed view the
other dialects need.

What a wire object carries that no field here names is kept in ``extras`` together with the name
of the dialect it came from (``extras_dialect``); a renderer merges ``extras`` back only when it
renders the same dialect, which is what makes parse-then-render an identity. What one dialect can
carry and another cannot is declared by each dialect (:class:`gateway.dialects.base.Capabilities`)
and checked by the pipeline, never dropped without a word.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

__all__ = [
    "FINISH_REASONS",
    "JSON",
    "AssistantMessage",
    "ChatError",
    "ChatRequest",
    "ChatResponse",
    "Citation",
    "ContextUpdate",
    "IdSource",
    "ImagePart",
    "Message",
    "OtherPart",
    "OutputFormat",
    "Part",
    "Reasoning",
    "ReasoningDelta",
    "ReasoningRequest",
    "StreamError",
    "StreamEvent",
    "StreamFinish",
    "StreamStart",
    "TextDelta",
    "TextPart",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolChoice",
    "ToolDef",
    "Usage",
    "agent_header",
    "citations_of",
    "context_with_citations",
    "followups_of",
    "merge_context",
    "new_completion_id",
    "now",
    "parts_text",
    "use_id_source",
]

JSON: TypeAlias = Any
"""Any value orjson can load or dump."""


# --- content parts -------------------------------------------------------------------------------


@dataclass(slots=True, init=False)
class TextPart:
    """A piece of text in a message's content."""

    text: str

    def __init__(self, text: str) -> None:
        self.text = text


@dataclass(slots=True)
class ImagePart:
    """An image in a message's content: by URL, or inline base64 data with its media type.

    ``url`` may itself be a ``data:`` URL (OpenAI's inline form); a dialect that wants the data
    and media type apart (Anthropic's ``base64`` source) splits it with :meth:`inline`.
    """

    url: str | None = None
    """``https://…`` or ``data:<media type>;base64,<data>``; ``None`` when ``data`` is set."""
    data: str | None = None
    """Base64 bytes, when the wire carried them apart from a URL."""
    media_type: str | None = None
    """``image/png``, ``image/jpeg``, … (with ``data``)."""
    detail: str | None = None
    """OpenAI's ``low`` / ``high`` / ``auto`` hint; dialects without it ignore it."""

    def inline(self) -> tuple[str, str] | None:
        """``(media_type, base64 data)`` when the image is inline (either form), else ``None``."""
        if self.data is not None:
            return self.media_type or "application/octet-stream", self.data
        if self.url and self.url.startswith("data:") and ";base64," in self.url:
            head, _, data = self.url[5:].partition(";base64,")
            return head or "application/octet-stream", data
        return None

    def as_url(self) -> str:
        """The image as one URL (a ``data:`` URL when inline)."""
        if self.url is not None:
            return self.url
        return f"data:{self.media_type or 'application/octet-stream'};base64,{self.data or ''}"


@dataclass(slots=True)
class OtherPart:
    """A content part the model has no type for (audio, a file, a document, a server tool's
    block…), kept verbatim. Rendered back only to the dialect it came from; anywhere else it is
    an unsupported field (``content_parts``) and the route's policy decides."""

    dialect: str
    """The dialect whose wire shape ``raw`` is."""
    kind: str
    """Its type name on the wire (``input_audio``, ``document``, …), for error messages."""
    raw: JSON


Part: TypeAlias = TextPart | ImagePart | OtherPart


def parts_text(content: str | list[Part]) -> str:
    """The text of a message's content: the text parts joined (other parts have no text)."""
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, TextPart))


# --- tools and reasoning -------------------------------------------------------------------------


@dataclass(slots=True)
class ToolDef:
    """A tool the model may call: a function, a freeform (``custom``) tool, or a provider's
    built-in tool."""

    name: str
    description: str | None = None
    parameters: JSON = None
    """The arguments' JSON Schema (an object schema), ``None`` when the tool takes none."""
    strict: bool | None = None
    """OpenAI's strict schema adherence; ``None`` when the client did not say."""
    kind: str = "function"
    """``function``: a tool the client runs, called with JSON arguments; ``custom``: a tool the
    client runs, called with free text (OpenAI's custom tools, Codex's ``apply_patch``), its
    grammar in :attr:`format`; anything else is a provider's built-in tool (web search, code
    execution, …) kept verbatim in :attr:`raw`, which only :attr:`dialect` can send on."""
    raw: JSON = None
    dialect: str | None = None
    format: JSON = None
    """A ``custom`` tool's input format: ``None`` (free text), ``{"type": "text"}``, or
    ``{"type": "grammar", "syntax": "lark" | "regex", "definition": …}`` (the Responses
    shape)."""
    namespace: str | None = None
    """The group the tool belongs to (a Responses ``namespace`` tool's name); its calls name
    it too. ``None``: a top-level tool."""
    namespace_description: str | None = None
    """The group's description, repeated on each of its tools."""


@dataclass(slots=True)
class ToolChoice:
    """Whether and which tool the model must call."""

    mode: Literal["auto", "none", "required", "tool"]
    """``auto``: the model decides; ``none``: no tool; ``required``: some tool (Anthropic
    ``any``); ``tool``: the one named by :attr:`name`."""
    name: str | None = None
    parallel: bool | None = None
    """``False`` forbids several calls in one turn (OpenAI ``parallel_tool_calls: false``,
    Anthropic ``disable_parallel_tool_use: true``); ``None`` when the client did not say."""


@dataclass(slots=True)
class ToolCall:
    """A call the assistant made: its id, the function's name, and the arguments as JSON text
    (``"{}"`` when none), exactly as the model wrote them; for a ``custom`` tool, its input
    text as it is."""

    id: str
    name: str
    arguments: str
    kind: Literal["function", "custom"] = "function"
    """``custom``: a call of a freeform tool, :attr:`arguments` being its free text."""
    namespace: str | None = None
    """The tool's group (:attr:`ToolDef.namespace`), ``None`` for a top-level tool."""


@dataclass(slots=True)
class Reasoning:
    """Reasoning the model did before it answered (Anthropic ``thinking``, a Responses
    ``reasoning`` item's summary)."""

    text: str = ""
    signature: str | None = None
    """Anthropic's opaque signature, valid only with Anthropic (see :attr:`dialect`)."""
    redacted: str | None = None
    """Opaque reasoning the client may not read: Anthropic ``redacted_thinking.data``, a
    Responses item's ``encrypted_content``."""
    id: str | None = None
    """A Responses reasoning item's id."""
    dialect: str | None = None
    """The dialect that produced the signature or redacted data: only that dialect may be sent
    them back (a signature is verified by the provider that issued it)."""


@dataclass(slots=True)
class ReasoningRequest:
    """How much the client asked the model to reason (Anthropic ``thinking`` and
    ``output_config.effort``, Chat Completions ``reasoning_effort``, Responses ``reasoning``).
    Each side keeps the form it has; dialects map one to the other by table."""

    effort: str | None = None
    """OpenAI's ``ReasoningEffort`` (``none`` / ``minimal`` / ``low`` / ``medium`` / ``high`` /
    ``xhigh`` / ``max``), or Anthropic's ``output_config.effort`` (``low`` … ``max``, a subset),
    as the client said it; a dialect without a value sends the nearest."""
    budget_tokens: int | None = None
    """Anthropic's thinking budget."""
    summary: str | None = None
    """Responses ``summary``: ``auto`` / ``concise`` / ``detailed``."""
    enabled: bool = True
    """``False`` when the client turned reasoning off explicitly."""


@dataclass(slots=True)
class OutputFormat:
    """The form the client asked the answer's text to take (Chat Completions
    ``response_format``, Responses ``text.format``, Anthropic ``output_config.format``): JSON
    text, whole or streamed, never a tool call."""

    kind: Literal["json_schema", "json_object"]
    """``json_schema``: JSON matching :attr:`schema`; ``json_object``: any JSON object (OpenAI's
    JSON mode)."""
    schema: JSON = None
    """The JSON Schema (with ``json_schema``)."""
    name: str | None = None
    """The schema's name (OpenAI requires one; Anthropic has none)."""
    strict: bool | None = None
    """OpenAI's strict schema adherence; ``None`` when the client did not say."""
    description: str | None = None
    """OpenAI's description of the format."""


# --- requests ------------------------------------------------------------------------------------


# The classes built on every request (or stream event) write their own __init__ (init=False):
# compiled, the one dataclasses generates runs interpreted, several times the cost.
# tests/test_canonical.py holds each to its fields (names, order, defaults).


@dataclass(slots=True, init=False)
class Message:
    """One message of the conversation a client sends."""

    role: str
    """``system``, ``developer``, ``user``, ``assistant``, ``tool``, or whatever the client said
    (kept verbatim)."""
    content: str | list[Part]
    """Plain text when the wire had a string, else the content parts in order."""
    context: JSON = None
    """Per-message context (protocol dialects), ``None`` when absent."""
    name: str | None = None
    """OpenAI's participant name, or chatui's ``agentName``."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """The calls an assistant message made."""
    tool_call_id: str | None = None
    """For a ``tool`` message: the call whose result it is."""
    is_error: bool = False
    """For a ``tool`` message: the result reports that the call failed."""
    reasoning: list[Reasoning] = field(default_factory=list)
    """For an assistant message: the reasoning that preceded it (to be sent back with it)."""
    extras: dict[str, JSON] = field(default_factory=dict)
    """Keys of the wire message no field above names."""

    def __init__(self, role: str, content: str | list[Part], context: JSON = None,
                 name: str | None = None, tool_calls: list[ToolCall] | None = None,
                 tool_call_id: str | None = None, is_error: bool = False,
                 reasoning: list[Reasoning] | None = None,
                 extras: dict[str, JSON] | None = None) -> None:
        self.role = role
        self.content = content
        self.context = context
        self.name = name
        self.tool_calls = [] if tool_calls is None else tool_calls
        self.tool_call_id = tool_call_id
        self.is_error = is_error
        self.reasoning = [] if reasoning is None else reasoning
        self.extras = {} if extras is None else extras

    @property
    def text(self) -> str:
        return parts_text(self.content)


@dataclass(slots=True, init=False)
class ChatRequest:
    """A chat request, whichever dialect it came in."""

    messages: list[Message]
    stream: bool = False
    """Whether the client asked for a streamed answer (body flag, path or Accept header)."""
    context: JSON = None
    """Request context, e.g. ``{"overrides": {"temperature": 0.3, "top": 3}}``."""
    session_state: JSON = None
    """The app's memory, opaque to the gateway; ``None`` when absent or null."""
    session_minted: bool = False
    """:attr:`session_state` is the gateway's own (the route's ``mint_session_state``), not the
    client's: an upstream that cannot carry it loses nothing the client sent."""
    model: str | None = None
    sampling: dict[str, JSON] = field(default_factory=dict)
    """Sampling and limits under canonical names: ``temperature``, ``top_p``, ``max_tokens``
    (the output cap, whatever the dialect calls it), ``stop`` (a list of strings), ``seed``,
    ``presence_penalty``, ``frequency_penalty``, ``user``; each dialect writes those it has."""
    tools: list[ToolDef] = field(default_factory=list)
    tool_choice: ToolChoice | None = None
    reasoning: ReasoningRequest | None = None
    output: OutputFormat | None = None
    """The structured output the client asked for; ``None``: plain text."""
    extras: dict[str, JSON] = field(default_factory=dict)
    extras_dialect: str | None = None
    hints: dict[str, JSON] = field(default_factory=dict)
    """How the client spelled things (e.g. ``sessionState`` vs ``session_state``), so the answer
    to that same client is spelled alike. Only the client's own dialect reads them."""
    options: dict[str, JSON] = field(default_factory=dict)
    """The route's options for the client's dialect (declared by that dialect; e.g. the answer
    shape a frontend reads), filled in by the server, read by the client's dialect only."""
    unmapped: list[str] = field(default_factory=list)
    """The client's request fields that change the answer and that no field above holds
    (Ollama's ``options.top_k``, ``keep_alive``…), each named as on the wire: kept in
    :attr:`extras` for an upstream of the client's own dialect; an upstream of another dialect
    cannot be sent them, so the route's ``on_unsupported`` policy decides (field ``options``)."""
    wire: JSON = None
    """The client's body as it came, when the request was read from one: the fields it holds
    that an upstream of another dialect does not get are found in it, by the client dialect's
    field table (:mod:`gateway.dialects.fields`), and reported."""
    field_uses: list[Any] | None = None
    """The documented fields :attr:`wire` holds, once looked up (by
    :func:`gateway.dialects.fields.losses`)."""

    def __init__(self, messages: list[Message], stream: bool = False, context: JSON = None,
                 session_state: JSON = None, session_minted: bool = False,
                 model: str | None = None, sampling: dict[str, JSON] | None = None,
                 tools: list[ToolDef] | None = None, tool_choice: ToolChoice | None = None,
                 reasoning: ReasoningRequest | None = None, output: OutputFormat | None = None,
                 extras: dict[str, JSON] | None = None, extras_dialect: str | None = None,
                 hints: dict[str, JSON] | None = None, options: dict[str, JSON] | None = None,
                 unmapped: list[str] | None = None, wire: JSON = None,
                 field_uses: list[Any] | None = None) -> None:
        self.messages = messages
        self.stream = stream
        self.context = context
        self.session_state = session_state
        self.session_minted = session_minted
        self.model = model
        self.sampling = {} if sampling is None else sampling
        self.tools = [] if tools is None else tools
        self.tool_choice = tool_choice
        self.reasoning = reasoning
        self.output = output
        self.extras = {} if extras is None else extras
        self.extras_dialect = extras_dialect
        self.hints = {} if hints is None else hints
        self.options = {} if options is None else options
        self.unmapped = [] if unmapped is None else unmapped
        self.wire = wire
        self.field_uses = field_uses


# --- whole answers -------------------------------------------------------------------------------


@dataclass(slots=True)
class Citation:
    """A source the answer is based on (chatui's ``sources`` entry)."""

    id: str
    title: str | None = None
    url: str | None = None
    snippet: str | None = None


@dataclass(slots=True, init=False)
class Usage:
    """Token counts under OpenAI's meaning: ``input_tokens`` includes cached input,
    ``output_tokens`` includes reasoning. A dialect with other meanings converts (Anthropic's
    ``input_tokens`` excludes cache reads and writes)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    """Input served from the provider's prompt cache (part of ``input_tokens``)."""
    cache_write_tokens: int | None = None
    """Input written to the prompt cache (Anthropic ``cache_creation_input_tokens``; part of
    ``input_tokens``)."""
    reasoning_tokens: int | None = None
    """Output spent on reasoning (part of ``output_tokens``)."""

    def __init__(self, input_tokens: int | None = None, output_tokens: int | None = None,
                 cached_input_tokens: int | None = None, cache_write_tokens: int | None = None,
                 reasoning_tokens: int | None = None) -> None:
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cached_input_tokens = cached_input_tokens
        self.cache_write_tokens = cache_write_tokens
        self.reasoning_tokens = reasoning_tokens

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)


FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter", "error")
"""The canonical stop reasons. A dialect maps its own names to these by a table; a reason it
does not know is kept as it came (and rendered by another dialect as ``stop``)."""


@dataclass(slots=True, init=False)
class AssistantMessage:
    """One assistant message of a whole answer (several when a multi-agent backend answers)."""

    content: str
    role: str = "assistant"
    agent: str | None = None
    """The agent's name (chatui ``agentName``), for multi-agent answers."""
    content_type: str | None = None
    """``text`` or ``markdown`` (chatui ``contentType``)."""
    id: str | None = None
    """chatui ``messageId``, a Responses message item's id."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: list[Reasoning] = field(default_factory=list)
    """Reasoning that preceded this message's text."""
    extras: dict[str, JSON] = field(default_factory=dict)

    def __init__(self, content: str, role: str = "assistant", agent: str | None = None,
                 content_type: str | None = None, id: str | None = None,
                 tool_calls: list[ToolCall] | None = None,
                 reasoning: list[Reasoning] | None = None,
                 extras: dict[str, JSON] | None = None) -> None:
        self.content = content
        self.role = role
        self.agent = agent
        self.content_type = content_type
        self.id = id
        self.tool_calls = [] if tool_calls is None else tool_calls
        self.reasoning = [] if reasoning is None else reasoning
        self.extras = {} if extras is None else extras


@dataclass(slots=True, init=False)
class ChatResponse:
    """A whole (non-streamed) answer."""

    messages: list[AssistantMessage]
    context: JSON = None
    """Response context in the recommended shape: ``data_points`` (``text`` entries
    ``"name: snippet"``, ``citations``, ``images``), ``thoughts``, ``followup_questions``."""
    session_state: JSON = None
    finish_reason: str | None = None
    """One of :data:`FINISH_REASONS`, or a dialect's own reason it had no mapping for."""
    usage: Usage | None = None
    id: str | None = None
    created: int | None = None
    """Unix seconds."""
    model: str | None = None
    extras: dict[str, JSON] = field(default_factory=dict)
    extras_dialect: str | None = None

    def __init__(self, messages: list[AssistantMessage], context: JSON = None,
                 session_state: JSON = None, finish_reason: str | None = None,
                 usage: Usage | None = None, id: str | None = None, created: int | None = None,
                 model: str | None = None, extras: dict[str, JSON] | None = None,
                 extras_dialect: str | None = None) -> None:
        self.messages = messages
        self.context = context
        self.session_state = session_state
        self.finish_reason = finish_reason
        self.usage = usage
        self.id = id
        self.created = created
        self.model = model
        self.extras = {} if extras is None else extras
        self.extras_dialect = extras_dialect

    @property
    def text(self) -> str:
        """The answer as one text: every agent's message, each headed by its agent's name."""
        if len(self.messages) == 1 and self.messages[0].agent is None:
            return self.messages[0].content
        parts: list[str] = []
        for m in self.messages:
            parts.append(agent_header(m.agent, first=not parts) + m.content)
        return "".join(parts)

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [c for m in self.messages for c in m.tool_calls]

    @property
    def reasoning(self) -> list[Reasoning]:
        return [r for m in self.messages for r in m.reasoning]


@dataclass(slots=True)
class ChatError:
    """An error answer: an HTTP status and a message meant for the end user."""

    status: int
    message: str
    code: str | None = None
    """A short machine code (OpenAI ``code``, chatui ``error.code``)."""
    type: str | None = None
    """OpenAI's / Anthropic's ``type`` (``invalid_request_error``, ``server_error``, …)."""
    param: str | None = None
    retry_after: float | None = None
    """Seconds, for 429 and 503 answers."""


# --- stream events -------------------------------------------------------------------------------
#
# A stream is: StreamStart, then any of TextDelta / ReasoningDelta / ToolCall* / ContextUpdate,
# then exactly one of StreamFinish or StreamError, which nothing follows. Decoders guarantee
# this order (a decoder that meets text before any start emits the start first).


@dataclass(slots=True, init=False)
class StreamStart:
    """The answer begins: who speaks, and what is known before the text."""

    role: str = "assistant"
    context: JSON = None
    session_state: JSON = None
    id: str | None = None
    created: int | None = None
    model: str | None = None
    usage: Usage | None = None
    """What is counted before the answer (Anthropic's ``message_start`` input usage)."""

    def __init__(self, role: str = "assistant", context: JSON = None, session_state: JSON = None,
                 id: str | None = None, created: int | None = None, model: str | None = None,
                 usage: Usage | None = None) -> None:
        self.role = role
        self.context = context
        self.session_state = session_state
        self.id = id
        self.created = created
        self.model = model
        self.usage = usage


@dataclass(slots=True, init=False)
class TextDelta:
    """A piece of the answer's text; ``agent`` names the speaker in multi-agent streams."""

    text: str
    agent: str | None = None
    message_id: str | None = None
    """The upstream's id of the message this text begins (chatui ``messageId``), on the first
    delta of each message only: a dialect that names its messages reuses it, so that a client
    shown the upstream's own events (a same-dialect route) keeps seeing the same ids."""

    def __init__(self, text: str, agent: str | None = None,
                 message_id: str | None = None) -> None:
        self.text = text
        self.agent = agent
        self.message_id = message_id


@dataclass(slots=True)
class ReasoningDelta:
    """A piece of reasoning. Consecutive deltas form one reasoning block, which ends at any other
    event; a delta with text after one that carried a ``signature`` or ``redacted`` data starts a
    new block (a signature closes the block it signs)."""

    text: str = ""
    signature: str | None = None
    redacted: str | None = None
    dialect: str | None = None
    """The dialect that issued the signature or redacted data."""


@dataclass(slots=True)
class ToolCallStart:
    """The assistant begins a tool call. ``index`` counts tool calls in this answer (0, 1, …),
    whatever position the dialect gives the call among other blocks or items."""

    index: int
    id: str
    name: str
    kind: Literal["function", "custom"] = "function"
    """``custom``: the call's deltas are pieces of free text (:attr:`ToolCall.kind`)."""
    namespace: str | None = None


@dataclass(slots=True)
class ToolCallDelta:
    """A fragment of a tool call's arguments: JSON text, passed on as it arrives; only all the
    fragments of one call together are valid JSON (of a ``custom`` call: a piece of its text)."""

    index: int
    arguments: str


@dataclass(slots=True)
class ToolCallEnd:
    """The call's arguments are complete."""

    index: int


@dataclass(slots=True)
class ContextUpdate:
    """Context or session state that arrives after the text began (merged, later wins)."""

    context: JSON = None
    session_state: JSON = None


@dataclass(slots=True, init=False)
class StreamFinish:
    """The answer ended cleanly."""

    reason: str | None = "stop"
    usage: Usage | None = None

    def __init__(self, reason: str | None = "stop", usage: Usage | None = None) -> None:
        self.reason = reason
        self.usage = usage


@dataclass(slots=True)
class StreamError:
    """The answer broke after it began; never followed by a clean finish."""

    message: str
    code: str | None = None
    status: int = 502


StreamEvent: TypeAlias = (StreamStart | TextDelta | ReasoningDelta | ToolCallStart
                          | ToolCallDelta | ToolCallEnd | ContextUpdate | StreamFinish
                          | StreamError)


# --- helpers shared by dialects ------------------------------------------------------------------


def now() -> int:
    return int(time.time())


class _RandomBytes:
    """The kernel's random bytes (``os.urandom``), drawn 4 KiB at a time: each answer mints a
    few ids (a request id, a message id, a response's items), and one ``getrandom`` system call
    each cost more than all else in making them. A forked child draws its own (the bytes its
    parent held are dropped at the fork), so no two workers hand out the same id."""

    __slots__ = ("_buf", "_pos")

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        pos = self._pos
        if pos + n > len(self._buf):
            self._buf = os.urandom(max(4096, n))
            pos = 0
        self._pos = pos + n
        return self._buf[pos:pos + n]

    def drop(self) -> None:
        self._buf = b""
        self._pos = 0


class IdSource(Protocol):
    """Where the bytes of minted ids come from (:func:`use_id_source`)."""

    def take(self, n: int) -> bytes: ...


_KERNEL = _RandomBytes()
os.register_at_fork(after_in_child=_KERNEL.drop)
_RANDOM: IdSource = _KERNEL


def random_hex(nbytes: int = 16) -> str:
    """``nbytes`` random bytes as hex (16: the shape of ``uuid4().hex``, at a fraction of its
    cost)."""
    return _RANDOM.take(nbytes).hex()


@contextmanager
def use_id_source(source: IdSource) -> Iterator[None]:
    """Ids minted inside the block draw their bytes from ``source`` (the kernel's again after):
    a test's seeded one, so that two translators of the same stream mint the same ids. The ids
    are minted deep in the dialects' translation, which has no app to be handed a source by;
    the one module-level source is swapped here instead, never by assigning to it."""
    global _RANDOM
    saved, _RANDOM = _RANDOM, source
    try:
        yield
    finally:
        _RANDOM = saved


def new_completion_id() -> str:
    return "chatcmpl-" + random_hex()


def agent_header(agent: str | None, *, first: bool) -> str:
    """How an agent's name is written into a single-message dialect's text (documented in
    docs/translation.md): ``**Name:** `` at the start, and a blank line before each later agent."""
    sep = "" if first else "\n\n"
    return f"{sep}**{agent}:** " if agent else sep


def merge_context(old: JSON, new: JSON) -> JSON:
    """Merge context that arrives several times in one stream: later keys win, and a nested
    ``context.context`` (as the reference backend sends it with follow-up questions) is
    flattened into its parent."""
    new = _flatten_nested(new)
    if not isinstance(old, dict):
        return new
    if not isinstance(new, dict):
        return old
    merged = dict(old)
    merged.update(new)
    return merged


def _flatten_nested(ctx: JSON) -> JSON:
    # A loop, not recursion: an upstream may nest context.context as deep as JSON parses (1024
    # levels), past Python's recursion limit.
    outers: list[dict[str, JSON]] = []
    while isinstance(ctx, dict) and isinstance(ctx.get("context"), dict):
        outers.append({k: v for k, v in ctx.items() if k != "context"})
        ctx = ctx["context"]
    for outer in reversed(outers):
        ctx = {**ctx, **outer}
    return ctx


def citations_of(context: JSON) -> list[Citation]:
    """The sources named by a recommended-shape context: each ``data_points.text`` entry
    ``"name: snippet"`` (split on the first ``": "``), then each ``data_points.citations`` entry
    not already named."""
    ctx = _flatten_nested(context)
    if not isinstance(ctx, dict):
        return []
    points = ctx.get("data_points")
    if not isinstance(points, dict):
        return []
    out: list[Citation] = []
    seen: set[str] = set()
    for entry in _strings(points.get("text")):
        name, sep, snippet = entry.partition(": ")
        name = name.strip()
        out.append(Citation(id=name, title=name, url=_url(name), snippet=snippet if sep else None))
        seen.add(name)
    for entry in _strings(points.get("citations")):
        if entry not in seen:
            seen.add(entry)
            out.append(Citation(id=entry, title=entry, url=_url(entry)))
    return out


def context_with_citations(citations: list[Citation], base: JSON = None) -> JSON:
    """A recommended-shape context naming ``citations``: ``data_points.text`` gets
    ``"name: snippet"`` for each source with a snippet and ``data_points.citations`` the url (or
    the name) of each. ``name`` is the title, else the id. Returns ``base`` when there are none."""
    if not citations:
        return base
    text: list[str] = []
    cites: list[str] = []
    for c in citations:
        name = c.title or c.id
        if c.snippet is not None:
            text.append(f"{name}: {c.snippet}")
        cites.append(c.url or name)
    ctx = dict(base) if isinstance(base, dict) else {}
    points = dict(ctx["data_points"]) if isinstance(ctx.get("data_points"), dict) else {}
    points["text"] = text
    points["citations"] = cites
    ctx["data_points"] = points
    return ctx


def followups_of(context: JSON) -> list[str]:
    ctx = _flatten_nested(context)
    if isinstance(ctx, dict):
        return list(_strings(ctx.get("followup_questions")))
    return []


def _strings(value: JSON) -> list[str]:
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _url(name: str) -> str | None:
    return name if name.startswith(("http://", "https://")) else None
