"""What a dialect module provides (:class:`Dialect`, :class:`Capabilities`, :class:`Samples`),
and the small helpers several of them share.

A dialect never imports another dialect: what two dialects have in common lives here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from gateway.canonical import (
    JSON,
    ChatError,
    ChatRequest,
    ChatResponse,
    StreamEvent,
)
from gateway.dialects.shared import (
    error_code_for,
    error_text,
    expect_object,
    kind_of,
    parse_messages,
    render_text_messages,
    request_context,
    sampling_of,
    split_known,
    text_of,
    text_parts,
    usage_from_openai_shape,
    usage_to_openai_shape,
)
from gateway.framing import Framing, Payload

__all__ = [
    "FIELDS",
    "JSON_LINES_ACCEPT",
    "SSE_ACCEPT",
    "Capabilities",
    "Dialect",
    "ModelInfo",
    "Samples",
    "SessionKind",
    "StreamDecoder",
    "StreamEncoder",
    "Target",
    "TokenCount",
    "answer_context",
    "error_code_for",
    "error_text",
    "expect_object",
    "kind_of",
    "load_samples",
    "parse_messages",
    "render_text_messages",
    "request_context",
    "sampling_of",
    "split_known",
    "text_of",
    "text_parts",
    "usage_from_openai_shape",
    "usage_to_openai_shape",
]

SessionKind = Literal["none", "string", "json"]

SSE_ACCEPT = "text/event-stream"
"""The ``Accept`` of a streamed request to an SSE upstream: some backends choose the stream by
this header alone (a Chat UI backend does, as the Chat UI app asks for its stream)."""
JSON_LINES_ACCEPT = "application/json-lines, application/jsonl;q=0.9, */*;q=0.1"
"""The ``Accept`` of a streamed request to a JSON-lines upstream: the two content types such
backends send (the specs differ), then anything (the gateway sniffs the framing it reads)."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a dialect can carry, both ways (as a client's dialect and as an upstream's).

    The pipeline compares the two sides' declarations: what the source carries and the target
    cannot is never dropped without a word. Tools, content parts and reasoning follow the route's
    ``on_unsupported`` policy (reject, or drop and count); RAG context and usage are translated as
    far as the target can hold them, and what it cannot is counted
    (``gateway_dropped_fields_total``) and logged. The field names below are the ``field`` label
    values of that metric.
    """

    session_state: SessionKind = "none"
    """``json``: any JSON value; ``string``: strings only; ``none``: no session state."""
    citations: bool = False
    """Sources of the answer (``data_points`` / ``sources``)."""
    followups: bool = False
    """Suggested follow-up questions."""
    thoughts: bool = False
    """The RAG backend's ``thoughts`` (its search steps), in the response context."""
    usage_whole: bool = False
    """Token usage in a whole answer."""
    usage_stream: bool = False
    """Token usage in a stream."""
    multi_agent: bool = False
    """Several agents' messages, each named (else joined into one text with name headers)."""
    tools: bool = False
    """Tool definitions and ``tool_choice`` in requests, assistant tool calls (whole and
    streamed, with argument deltas), and tool results."""
    custom_tools: bool = False
    """With ``tools``: freeform tools (:attr:`gateway.canonical.ToolDef.kind` ``custom``) and
    their calls, whole and streamed, in their own shape; without, they go as functions of one
    string argument (:mod:`gateway.tool_shapes`), so nothing is lost."""
    tool_namespaces: bool = False
    """With ``tools``: tools grouped under a namespace, and calls naming it; without, they go
    as top-level tools under names that say both (:mod:`gateway.tool_shapes`)."""
    images: bool = False
    """Image content parts in requests."""
    reasoning: bool = False
    """Reasoning text (and its signature) in answers and in replayed assistant turns."""
    reasoning_replay: Literal["any", "own"] = "any"
    """Which reasoning a replayed assistant turn may carry back to this dialect (with
    ``reasoning``): ``any``, the text of any dialect's reasoning (a signature or redacted data
    only ever goes back to the dialect that issued it); ``own``, only reasoning this dialect
    issued itself (Anthropic verifies its signatures, so another dialect's reasoning cannot be
    sent to it). What cannot go back is lost under the field ``reasoning``."""
    structured_output: frozenset[str] = frozenset()
    """The kinds of :class:`~gateway.canonical.OutputFormat` a request may ask for
    (``json_schema``, ``json_object``), answered as JSON text; empty: none."""
    tool_choices: frozenset[str] = frozenset({"auto", "none", "required", "tool", "parallel"})
    """Which :attr:`~gateway.canonical.ToolChoice.mode` a request may ask for (with
    ``tools``), and ``parallel`` when it may forbid parallel calls: a dialect whose model always
    chooses for itself (Ollama's) declares ``auto`` alone; any other choice is lost under the
    field ``tool_choice``."""
    inline_images_only: bool = False
    """With ``images``: only images sent inline (base64 data) can be carried, not by URL (the
    gateway never fetches a URL for an upstream); an image by URL is lost under the field
    ``images``."""
    # (not hashed: a mapping cannot be, and the declarations stay hashable as they were)
    answer_context: Mapping[str, JSON] | None = field(default=None, hash=False)
    """The context every whole answer to this dialect's clients carries, when the upstream sent
    none (with ``citations``, ``followups`` or ``thoughts``): an empty but well-formed value of
    each key their frontends read unconditionally (a RAG frontend reads ``context.data_points``
    of any answer, and crashes on an answer without it). A context the upstream sent is passed
    on as it is. ``None``: the dialect's clients need none."""


_QUALIFIERS = frozenset({"reasoning_replay", "answer_context", "tool_choices",
                         "inline_images_only", "custom_tools", "tool_namespaces"})


@dataclass(frozen=True, slots=True)
class TokenCount:
    """A dialect's token counting endpoint (``POST /v1/messages/count_tokens``): a chat request
    without an answer, answered with the number of input tokens it holds."""

    suffix: str
    """Appended to a chat path: a route of this dialect at ``…/v1/messages`` counts at
    ``…/v1/messages/count_tokens``, and an upstream of this dialect is asked at its ``url`` with
    this appended (before any query string)."""
    request_keys: frozenset[str]
    """The keys of a rendered chat request the endpoint takes (it refuses the others, such as
    Anthropic's ``max_tokens`` or Responses' ``stream``)."""
    answer: tuple[tuple[str, str], ...] = ()
    """Fixed fields of the answer beside the count (``object: response.input_tokens``)."""
    key: str = "input_tokens"
    """The answer's field that holds the count."""

    def request(self, rendered: JSON) -> JSON:
        """A rendered chat request cut to what the endpoint takes."""
        if not isinstance(rendered, dict):
            return rendered
        return {k: v for k, v in rendered.items() if k in self.request_keys}

    def render(self, tokens: int) -> JSON:
        return {**dict(self.answer), self.key: tokens}

    def parse(self, body: JSON) -> int | None:
        """The count an answer of this endpoint holds, or ``None`` when it holds none."""
        count = body.get(self.key) if isinstance(body, dict) else None
        return count if isinstance(count, int) and not isinstance(count, bool) else None


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A dialect's endpoint that describes one model its clients name in a ``POST`` body
    (Ollama's ``POST /api/show``): answered beside a route's path, as :attr:`Dialect.models_path`
    is, by the dialect's ``render_model_info(name)`` for a model the route's upstreams serve, and
    404 in the dialect's error shape for any other."""

    path: str
    """Written beside :attr:`Dialect.default_path` (``/api/show`` beside ``/api/chat``)."""
    keys: tuple[str, ...] = ("model",)
    """The body's fields that may name the model, the first present wins."""


@dataclass(frozen=True, slots=True)
class Target:
    """What a request target asks of a dialect that reads its requests' targets
    (``routes_by_prefix``: the model and the method follow the route's path, as in Gemini's
    ``{prefix}/models/{model}:streamGenerateContent``)."""

    kind: Literal["chat", "count", "models"]
    """``chat``: a chat request; ``count``: its token count; ``models``: the model list."""
    model: str | None = None
    """The model the target names (it wins over one in the body)."""
    stream: bool | None = None
    """Whether the target asks for a stream (``None``: the body or a header decides)."""
    framing: Framing | None = None
    """The stream's framing, when the target chooses another than the dialect's own
    (Gemini's JSON array, asked for without ``alt=sse``)."""


FIELDS: tuple[str, ...] = tuple(f for f in Capabilities.__dataclass_fields__
                                if f not in _QUALIFIERS)
"""Every capability's name (``reasoning_replay`` only qualifies ``reasoning``,
``answer_context`` the RAG context fields, ``tool_choices`` ``tools``, ``inline_images_only``
``images``, and ``custom_tools`` and ``tool_namespaces`` ``tools``: what they do not carry is
mapped, never lost)."""


def answer_context(caps: Capabilities, context: JSON) -> JSON:
    """The context a whole answer to a client of a dialect with ``caps`` carries: ``context``
    when the upstream sent one, else a fresh copy of :attr:`Capabilities.answer_context`
    (a copy: the rendered answer is the caller's to change)."""
    if context is not None or caps.answer_context is None:
        return context
    return _fresh(dict(caps.answer_context))


def _fresh(value: JSON) -> JSON:
    """A copy of a JSON value's dicts and lists (its scalars are immutable): a tenth of
    ``copy.deepcopy``'s cost, which a whole answer would pay on every request."""
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Samples:
    """Example wire bodies of a dialect, from its public API reference or real captures, shipped
    beside the module (``samples/<dialect>/``) for the tests and the demo.

    Files: ``<case>.request.json`` (what a client sends), ``<case>.response.json`` (a whole
    answer), ``<case>.stream`` (a streamed answer's body, bytes as sent), ``error.json`` (an
    error body, with its status in ``error.status``). Every dialect has the case ``text``.
    """

    requests: dict[str, JSON] = field(default_factory=dict)
    responses: dict[str, JSON] = field(default_factory=dict)
    streams: dict[str, bytes] = field(default_factory=dict)
    error: JSON = None
    error_status: int = 500


def load_samples(dialect_name: str, root: Traversable | None = None) -> Samples:
    """The samples shipped in ``gateway/dialects/samples/<dialect_name>/``, or in
    ``<root>/<dialect_name>/`` for a dialect shipped elsewhere (a plugin, a test's fixture)."""
    import orjson

    base = root if root is not None else resources.files("gateway.dialects").joinpath("samples")
    root = base.joinpath(dialect_name)
    requests: dict[str, JSON] = {}
    responses: dict[str, JSON] = {}
    streams: dict[str, bytes] = {}
    error: JSON = None
    status = 500
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        name = entry.name
        if name.endswith(".request.json"):
            requests[name.removesuffix(".request.json")] = orjson.loads(entry.read_bytes())
        elif name.endswith(".response.json"):
            responses[name.removesuffix(".response.json")] = orjson.loads(entry.read_bytes())
        elif name.endswith(".stream"):
            streams[name.removesuffix(".stream")] = entry.read_bytes()
        elif name == "error.json":
            error = orjson.loads(entry.read_bytes())
        elif name == "error.status":
            status = int(entry.read_text().strip())
    return Samples(requests, responses, streams, error, status)


class StreamDecoder(Protocol):
    """Upstream stream payloads (parsed JSON, :class:`~gateway.framing.RawData`, or
    :class:`~gateway.framing.Named` for dialects that read event names) to canonical events."""

    def decode(self, payload: Any) -> list[StreamEvent]:
        """Raises :class:`DialectError` for a payload that is not this dialect's chunk."""
        ...

    def end(self) -> list[StreamEvent]:
        """The body ended: a :class:`StreamFinish`, or a :class:`StreamError` when the dialect
        says the stream was cut short (nothing when it already finished or failed)."""
        ...


class StreamEncoder(Protocol):
    """Canonical events to this dialect's stream payloads: compact JSON bytes, one per frame, or
    :class:`~gateway.framing.Named` for an SSE event that carries its name."""

    def encode(self, event: StreamEvent) -> list[Payload]: ...

    # Optional: ``follow(payload) -> None``. On an identity route the upstream's own payloads go
    # to the client unchanged; an encoder whose events carry ids or sequence numbers reads them
    # here, so that an error event it writes afterwards continues that stream. Without it the
    # encoder is brought up to date by re-encoding the canonical events instead.
    #
    # Optional: ``plain_texts(texts: list[bytes]) -> list[Payload] | None``. The payloads that
    # encoding a ``TextDelta`` of each text in turn would give, each text given as the body of a
    # plain JSON string (no quote, backslash or control character, valid UTF-8, not empty: the
    # texts of a run of upstream text frames, gateway.framing.template), so that the encoder can
    # put them between quotes as they are. ``None`` when its state asks for the general path
    # (nothing written yet, an agent's header due, another block open...): nothing changed then.


class Dialect(Protocol):
    """One wire format. Its declarations are read-only: a module's class attributes."""

    @property
    def name(self) -> str:
        """The public name (config ``dialect:``, CLI ``--from``/``--to``)."""
        ...

    @property
    def summary(self) -> str:
        """One line for help texts and docs tables."""
        ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def framing(self) -> Framing:
        """The stream framing this dialect emits."""
        ...

    @property
    def named_events(self) -> bool:
        """Its SSE events carry ``event:`` names (read and written)."""
        ...

    @property
    def stream_content_type(self) -> str: ...

    @property
    def stream_accept(self) -> str:
        """The ``Accept`` header of a streamed request to an upstream of this dialect
        (:data:`SSE_ACCEPT` or :data:`JSON_LINES_ACCEPT` as its framing says, unless its
        backends want another)."""
        ...

    @property
    def cumulative_stream(self) -> bool:
        """Each stream event carries the whole message so far under one id, and its reader
        shows each event in place of the last: an error event must then keep that id and that
        content (an upstream's own error event is re-written so that it does)."""
        ...

    # Optional: ``text_path: TextPath | None``, where a stream chunk that carries only a piece of
    # text holds it (``("choices", 0, "delta", "content")``). Declaring it promises that a chunk
    # which decodes to exactly ``[TextDelta(t)]``, followed by a chunk that is the same but for
    # another non-empty string at that path, decodes to ``[TextDelta(that string)]`` and leaves
    # the decoder as the first did. Such chunks are then read without parsing them
    # (gateway.framing.template); the first of each run is still decoded, to confirm it.
    # Optional with it: ``counter_path: TextPath | None``, where a dialect that numbers its stream
    # frames holds the number (``("sequence_number",)``): the promise above then holds for a chunk
    # that also carries another number there. A decoder that counts what text chunks gave may
    # define ``again(chars)``: it is called with the characters of each chunk (or run of chunks)
    # read by the template instead of decoding it. An encoder's ``follow(payload)`` (identity
    # routes) then gets such a chunk as the ``Slot`` it is (the payload it followed last, but
    # for its text and number), and a run of them as the ``TextRun`` it is (its ``text()`` and
    # the ``counter`` of its last chunk).
    # Optional with ``text_path`` (not with ``counter_path``): ``number_paths: tuple[TextPath,
    # ...]``, where text chunks may hold numbers that change from chunk to chunk, any of them
    # (Gemini's running usage counts): the promise above then holds for a chunk that also
    # carries other numbers there, but for what the decoder keeps of them. A decoder that keeps
    # them defines ``again_frame(frame)``: it is given each chunk (or the last of a run) read by
    # the template, a ``Slot`` whose ``parsed()`` value holds them.
    # Optional with ``text_path`` (not with ``counter_path``): ``string_paths: tuple[TextPath,
    # ...]``, where text chunks hold strings that change from chunk to chunk (Ollama's
    # ``created_at``, OpenAI's ``obfuscation``), and ``stream_string_paths``, strings after the
    # text the same on every chunk of a stream that change from stream to stream (Gemini's
    # ``responseId``: the template an upstream's stream learned is tried on its next ones): the
    # promise above then holds for a chunk that also carries other strings there.

    # Optional: ``stream_headers: tuple[tuple[str, str], ...]``, headers every stream to this
    # dialect's clients carries beside its Content-Type (the AI SDK's
    # ``x-vercel-ai-ui-message-stream: v1``). Optional: ``whole_may_stream: bool``, its backends
    # may answer a stream when asked for a whole answer (their protocol has none): a
    # ``text/event-stream`` answer to such a request is assembled into one. Optional:
    # ``demo_page: str``, a page of ``gateway/static`` built on this dialect's own client, which
    # the demo serves with a route of this dialect to each of its backends.
    # Optional: ``streams_only: bool``. The dialect has no whole answer (an AG-UI agent only
    # answers with its event stream): an upstream of it whose ``streaming`` is ``auto`` is asked
    # for a stream for whole answers too, and the client gets the whole answer assembled.
    # Optional: ``render_response_body(resp, req) -> bytes``, the very bytes of
    # ``orjson.dumps(render_response(resp, req))``, for a dialect that has its whole answer as
    # bytes already (an AG-UI answer is its stream's events): written without parsing them
    # again (:func:`gateway.pipeline.render_body`).
    # Optional: ``routes_by_prefix: bool``. True: a route's ``path`` is a prefix, and what follows
    # it says the model and the method (Gemini's ``{prefix}/models/{model}:generateContent``).
    # Such a dialect defines ``read_target(rest, method, query) -> Target | None`` (``rest``: the
    # request path after the prefix and its slash; ``None``: nothing it serves, a 404) and
    # ``client_target(prefix, model, *, stream) -> str`` (where its clients post to a route at
    # ``prefix``, for the demo and the tests; ``count=True``: where they count tokens). See
    # :func:`client_path` and :func:`count_path`.
    #
    # Optional: ``upstream_url(url, model, *, stream, count=False) -> str``, where an upstream
    # of this dialect configured at ``url`` is asked for ``model`` (a chat answer, whole or
    # streamed, or a token count). Without it: ``url`` (``stream_url``, or ``url`` with the
    # ``stream_path``, for a stream; the token count's suffix for a count). See
    # :func:`upstream_url_of`.

    @property
    def stream_path(self) -> str | None:
        """A suffix that selects the streamed answer by path (``/stream``), or ``None`` when the
        body (or a header) asks for a stream at the same path."""
        ...

    @property
    def stream_by_accept(self) -> bool:
        """Whether ``Accept: text/event-stream`` alone asks for a stream."""
        ...

    @property
    def default_path(self) -> str:
        """Where this dialect's clients post by convention: a suggestion, which another
        dialect may make too (:func:`gateway.route_paths.distinct_paths` resolves them for one
        gateway, as the demo does)."""
        ...

    @property
    def models_path(self) -> str | None:
        """Where this dialect's clients list models, written beside :attr:`default_path`
        (``/v1/models`` beside ``/v1/chat/completions``): a route whose path ends as
        ``default_path`` does after their common start (``/chat/completions``) answers
        ``GET`` at its path with that ending replaced (``/v1/models``), by
        :meth:`render_models`. ``None``: its clients list no models."""
        ...

    @property
    def models_header(self) -> str | None:
        """A request header this dialect's clients always send and others' do not
        (``anthropic-version``): where routes of several dialects list models at one path, the
        dialect whose header a request carries answers it (else one without such a header)."""
        ...

    def render_models(self, names: Sequence[str]) -> JSON:
        """The model list body for :attr:`models_path` (only called when that is set)."""
        ...

    # Optional: ``model_info: ModelInfo | None``, an endpoint that describes one model
    # (:class:`ModelInfo`), with ``render_model_info(name: str) -> JSON``, its answer.

    @property
    def token_count(self) -> TokenCount | None:
        """Its token counting endpoint, both as a client's dialect (served beside its routes,
        :mod:`gateway.token_count`) and as an upstream's (asked there); ``None``: it has none
        (the gateway then answers an estimate to clients that have one)."""
        ...

    @property
    def route_options(self) -> type[BaseModel] | None:
        """Extra keys a route of this dialect may set (validated by this model), or ``None``;
        their values reach the dialect in :attr:`ChatRequest.options`."""
        ...

    @property
    def samples(self) -> Samples: ...

    def parse_request(self, body: JSON) -> ChatRequest: ...

    def render_request(self, req: ChatRequest, *, stream: bool, model: str | None,
                       max_tokens: int | None = None) -> JSON:
        """``model`` is the upstream's default, used when the request names none; likewise
        ``max_tokens`` (dialects that require an output cap use it when the client set none)."""
        ...

    def parse_response(self, body: JSON) -> ChatResponse: ...

    def render_response(self, resp: ChatResponse, req: ChatRequest) -> JSON:
        """``req`` is the client's request, in this same dialect (for its spelling hints)."""
        ...

    def parse_error(self, body: JSON) -> ChatError | None:
        """The error a whole body carries, if it is an error body (status filled in by caller)."""
        ...

    def render_error(self, err: ChatError) -> JSON: ...

    def decoder(self) -> StreamDecoder: ...

    def encoder(self, req: ChatRequest) -> StreamEncoder: ...


class SamplesFromPackage:
    """Mixin: :attr:`samples` loaded once from ``samples/<name>/``."""

    name: str

    @property
    def samples(self) -> Samples:
        return _packaged_samples(self.name)


@cache
def _packaged_samples(name: str) -> Samples:
    """Loaded once per dialect name, cached by the function rather than the instance: every
    instance of a dialect (a plugin's subclass too) shares the samples its package ships."""
    return load_samples(name)


def routes_by_prefix(dialect: Dialect) -> bool:
    """Whether ``dialect``'s routes are prefixes whose requests name the model and method in
    the path after them."""
    return getattr(dialect, "routes_by_prefix", False) is True


def client_path(dialect: Dialect, path: str, model: str | None, *, stream: bool) -> str:
    """Where a client of ``dialect`` posts to the route at ``path``: the route's path (with its
    ``stream_path`` for a stream, where it has one), or the target the dialect builds on it."""
    build = getattr(dialect, "client_target", None)
    if build is not None:
        target: str = build(path, model, stream=stream)
        return target
    if stream and dialect.stream_path:
        return path.rstrip("/") + dialect.stream_path
    return path


def count_path(dialect: Dialect, path: str, model: str | None) -> str | None:
    """Where a client of ``dialect`` counts tokens for the route at ``path`` (``None``: its
    dialect has no count endpoint)."""
    if dialect.token_count is None:
        return None
    build = getattr(dialect, "client_target", None)
    if build is not None:
        target: str = build(path, model, stream=False, count=True)
        return target
    return path.rstrip("/") + dialect.token_count.suffix


def upstream_url_of(dialect: Dialect, url: str, model: str | None, *, stream: bool,
                    count: bool = False) -> str | None:
    """Where an upstream of ``dialect`` configured at ``url`` is asked for ``model``, when the
    dialect builds its upstream URLs; ``None``: it does not (the caller's default applies)."""
    build = getattr(dialect, "upstream_url", None)
    if build is None:
        return None
    built: str = build(url, model, stream=stream, count=count)
    return built
