"""Dialect A -> canonical -> dialect B, for requests, whole responses and streams.

Pure: no sockets, no clocks. The HTTP layer feeds bytes in and writes what comes out; the
``translate`` CLI does the same from stdin.

Streams have one driver, :class:`StreamDecoding` (framing reader, then the upstream dialect's
decoder, never raising for bad bytes), used both by :class:`StreamTranslator` (to the client's
framed stream, on the fly) and by :class:`StreamAssembler` (to one whole answer). What the client's
dialect cannot carry goes through :class:`gateway.carry.EventGate`.

This is the plain path, the reference for what a stream becomes: each payload parsed, decoded,
encoded and framed. The fast paths (:mod:`gateway.pipeline_fast`) are built on it, beside it, and
give the same bytes; nothing here knows of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal, assert_never

import orjson

from gateway.canonical import (
    JSON,
    AssistantMessage,
    ChatRequest,
    ChatResponse,
    ContextUpdate,
    Reasoning,
    ReasoningDelta,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    merge_context,
)
from gateway.carry import (
    GOVERNED,
    EventGate,
    Policies,
    Unsupported,
    governed_losses,
    policy_for,
    policy_of,
    request_losses,
    response_losses,
    strip_request,
    strip_response,
)
from gateway.dialects import Dialect, StreamDecoder, StreamEncoder
from gateway.errors import ParseError
from gateway.framing import (
    Framing,
    Named,
    Payload,
    RawData,
    SniffingReader,
    TextPath,
    Verbatim,
    closing,
    encoder_for,
    frames_writer,
)
from gateway.framing.jsonlines import DEFAULT_MAX_LINE
from gateway.tool_shapes import ToolRestorer, restore_tools, shape_tools

__all__ = [
    "DialectPair",
    "ResponseAssembler",
    "StreamAssembler",
    "StreamDecoding",
    "StreamTranslator",
    "adapt_request",
    "adapt_response",
    "events_from_response",
    "parse_body",
    "render_body",
    "translate_request",
    "translate_response",
    "with_session_echo",
]


def parse_body(raw: bytes) -> JSON:
    """A request or whole-response body; :class:`ParseError` when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ParseError(f"the body is not valid JSON ({e.msg})", "body") from e


# --- requests ------------------------------------------------------------------------------------


def adapt_request(req: ChatRequest, upstream: Dialect, policy: Policies,
                  custom_tools: str = "native") -> tuple[ChatRequest, list[str]]:
    """``req`` as ``upstream`` can carry it (its tools mapped to what it has:
    :mod:`gateway.tool_shapes`), and the fields it cannot (reported). Raises
    :class:`Unsupported` when a governed field is lost under ``reject``. ``custom_tools``: the
    upstream's setting of that name."""
    req = shape_tools(req, upstream, custom_tools)
    lost = request_losses(req, upstream)
    governed = governed_losses(req, upstream, lost)
    if governed:
        refused = [f for f in governed if policy_of(policy, f) == "reject"]
        if refused:
            raise Unsupported(refused, upstream.name, answer=False)
        req = strip_request(req, governed, upstream)
    return req, lost


def translate_request(
    body: JSON, client: Dialect, upstream: Dialect, *, stream: bool | None = None,
    model: str | None = None, max_tokens: int | None = None, policy: Policies = "reject",
) -> tuple[ChatRequest, JSON, list[str]]:
    """The client's canonical request, the upstream's body, and the fields it lost. ``stream``
    overrides the body's own flag (the HTTP layer knows it from the path or the Accept
    header)."""
    req = client.parse_request(body)
    req.wire = body
    if stream is not None:
        req.stream = stream
    sent, lost = adapt_request(req, upstream, policy)
    return req, upstream.render_request(sent, stream=req.stream, model=model,
                                        max_tokens=max_tokens), lost


# --- whole answers -------------------------------------------------------------------------------


def with_session_echo(resp: ChatResponse, req: ChatRequest) -> ChatResponse:
    """An upstream that has no session state gives the client back the one it sent, so that a
    client in front of a stateless backend keeps its memory."""
    if resp.session_state is None and req.session_state is not None:
        resp.session_state = req.session_state
    return resp


def adapt_response(resp: ChatResponse, client: Dialect, policy: Policies,
                   ) -> tuple[ChatResponse, list[str]]:
    lost = response_losses(resp, client)
    governed = [f for f in lost if f in GOVERNED]
    if governed:
        refused = [f for f in governed if policy_for(policy, f) == "reject"]
        if refused:
            raise Unsupported(refused, client.name, answer=True)
        resp = strip_response(resp, governed)
    return resp, lost


def translate_response(
    body: JSON, upstream: Dialect, client: Dialect, req: ChatRequest, *,
    policy: Policies = "reject",
) -> tuple[JSON, list[str]]:
    resp = with_session_echo(restore_tools(upstream.parse_response(body), req, upstream), req)
    resp, lost = adapt_response(resp, client, policy)
    return client.render_response(resp, req), lost


def render_body(client: Dialect, resp: ChatResponse, req: ChatRequest) -> bytes:
    """``resp`` as ``client``'s whole answer, serialised: ``orjson.dumps`` of its
    ``render_response``, or the same bytes from a dialect that has them already
    (``render_response_body``)."""
    render = optional(client, "render_response_body")
    if render is not None:
        return render(resp, req)  # type: ignore[no-any-return]
    return orjson.dumps(client.render_response(resp, req))


def events_from_response(resp: ChatResponse) -> list[StreamEvent]:
    """A whole answer as a stream: the start, then per message its reasoning, text and tool
    calls, then the finish. Used to serve a stream from an upstream that never streams."""
    events: list[StreamEvent] = [StreamStart(
        role="assistant", context=resp.context, session_state=resp.session_state,
        id=resp.id, created=resp.created, model=resp.model)]
    calls = 0
    for m in resp.messages:
        for r in m.reasoning:
            events.append(ReasoningDelta(r.text, r.signature, r.redacted, r.dialect))
        if m.content:
            events.append(TextDelta(m.content, m.agent, m.id))
        for c in m.tool_calls:
            events.append(ToolCallStart(calls, c.id, c.name, c.kind, c.namespace))
            if c.arguments:
                events.append(ToolCallDelta(calls, c.arguments))
            events.append(ToolCallEnd(calls))
            calls += 1
    events.append(StreamFinish(resp.finish_reason or ("tool_calls" if calls else "stop"),
                               resp.usage))
    return events


class ResponseAssembler:
    """Canonical stream events to one whole answer. Used to serve a whole answer from an upstream
    that only streams, and by readers of a stream."""

    __slots__ = ("_agents", "_calls", "_context", "_error", "_finish", "_reasoning", "_session",
                 "_shapes", "_start")

    def __init__(self) -> None:
        self._start: StreamStart | None = None
        self._agents: list[tuple[str | None, list[str], str | None]] = []
        """Per message: its agent, its text's pieces, its id."""
        self._reasoning: list[Reasoning] = []
        self._calls: dict[int, list[str]] = {}  # index -> [id, name, arguments...]
        self._shapes: dict[int, tuple[Literal["function", "custom"], str | None]] = {}
        """index -> the kind and namespace of a call that is not a plain function's."""
        self._context: JSON = None
        self._session: JSON = None
        self._finish: StreamFinish | None = None
        self._error: StreamError | None = None

    def add(self, event: StreamEvent) -> None:
        match event:
            case StreamStart():
                self._start = event
                self._context = merge_context(self._context, event.context)
                if event.session_state is not None:
                    self._session = event.session_state
            case TextDelta():
                if not self._agents or self._agents[-1][0] != event.agent:
                    self._agents.append((event.agent, [], event.message_id))
                self._agents[-1][1].append(event.text)
            case ReasoningDelta():
                last = self._reasoning[-1] if self._reasoning else None
                if last is None or (event.text and (last.signature or last.redacted)):
                    last = Reasoning(dialect=event.dialect)
                    self._reasoning.append(last)
                last.text += event.text
                last.signature = event.signature or last.signature
                last.redacted = event.redacted or last.redacted
                last.dialect = event.dialect or last.dialect
            case ToolCallStart():
                self._calls[event.index] = [event.id, event.name]
                if event.kind != "function" or event.namespace is not None:
                    self._shapes[event.index] = (event.kind, event.namespace)
            case ToolCallDelta():
                self._calls.setdefault(event.index, ["", ""]).append(event.arguments)
            case ToolCallEnd():
                pass
            case ContextUpdate():
                self._context = merge_context(self._context, event.context)
                if event.session_state is not None:
                    self._session = event.session_state
            case StreamFinish():
                self._finish = event
            case StreamError():
                self._error = event
            case _:
                assert_never(event)

    def add_texts(self, texts: list[str]) -> None:
        """As :meth:`add` of ``TextDelta(t)`` (no agent, no message id) for each of ``texts``."""
        if not texts:
            return
        agents = self._agents
        if not agents or agents[-1][0] is not None:
            agents.append((None, [], None))
        agents[-1][1].extend(texts)

    @property
    def error(self) -> StreamError | None:
        return self._error

    def _call(self, index: int, parts: list[str]) -> ToolCall:
        kind, namespace = self._shapes.get(index, ("function", None))
        if kind == "custom":  # free text: none is none
            return ToolCall(parts[0], parts[1], "".join(parts[2:]), "custom", namespace)
        return ToolCall(parts[0], parts[1], "".join(parts[2:]) or "{}", namespace=namespace)

    def response(self) -> ChatResponse:
        start = self._start or StreamStart()
        messages = [AssistantMessage("".join(parts), agent=agent, id=mid)
                    for agent, parts, mid in self._agents]
        if not messages:
            messages = [AssistantMessage("")]
        calls = [self._call(i, c) for i, c in sorted(self._calls.items())]
        messages[-1].tool_calls = calls
        messages[0].reasoning = self._reasoning
        return ChatResponse(
            messages=messages,
            context=self._context,
            session_state=self._session,
            finish_reason=self._finish.reason if self._finish else None,
            usage=self._finish.usage if self._finish else None,
            id=start.id, created=start.created, model=start.model,
        )


# --- streams -------------------------------------------------------------------------------------


Scrub = Callable[[str], str]
"""Hides secrets in an upstream's text (:class:`gateway.secrets.Scrubber`)."""

_HAS: dict[tuple[type, str], bool] = {}


def optional(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)`` for the optional members of dialects, decoders and encoders
    (``follow``, ``text_path``...), whether a class has one decided once for all its instances:
    a member that is not there costs ``getattr`` an exception, with its message formatted."""
    key = (type(obj), name)
    has = _HAS.get(key)
    if has is None:
        if hasattr(type(obj), "__getattr__"):  # a class that answers instance by instance
            return getattr(obj, name, None)
        has = _HAS[key] = hasattr(obj, name)
    return getattr(obj, name, None) if has else None


class DialectPair:
    """What a stream from ``upstream`` to ``client`` needs of the two dialects that depends on
    them alone, worked out once per pair (:meth:`of`) rather than once per stream."""

    __slots__ = ("client", "counter_path", "gate", "named", "number_paths", "same",
                 "stream_string_paths", "string_paths", "text_path", "upstream")

    def __init__(self, upstream: Dialect, client: Dialect) -> None:
        self.upstream = upstream
        self.client = client
        self.same = upstream is client
        self.named: bool = upstream.named_events
        self.gate = EventGate.needed(upstream, client)
        """The client's dialect cannot carry all that the upstream's may send."""
        self.text_path: TextPath | None = optional(upstream, "text_path")
        self.counter_path: TextPath | None = optional(upstream, "counter_path")
        self.number_paths: tuple[TextPath, ...] = optional(upstream, "number_paths") or ()
        self.string_paths: tuple[TextPath, ...] = optional(upstream, "string_paths") or ()
        self.stream_string_paths: tuple[TextPath, ...] = \
            optional(upstream, "stream_string_paths") or ()
        """Where the upstream's text frames hold their text, their number, numbers and strings
        that change from frame to frame, and strings that change from stream to stream
        (optional: see :class:`gateway.dialects.base.Dialect`)."""

    @staticmethod
    def of(upstream: Dialect, client: Dialect) -> DialectPair:
        key = (id(upstream), id(client))
        pair = _PAIRS.get(key)
        # (each pair holds its dialects: an id is never another dialect's while it is kept)
        if pair is None or pair.upstream is not upstream or pair.client is not client:
            if len(_PAIRS) >= 256:  # a few dialects in a gateway; built ones (tests) come and go
                _PAIRS.clear()
            pair = _PAIRS[key] = DialectPair(upstream, client)
        return pair


_PAIRS: dict[tuple[int, int], DialectPair] = {}


class StreamDecoding:
    """Upstream stream bytes to canonical events: the framing reader, then the upstream dialect's
    decoder. Never raises for bad bytes: a framing or dialect error becomes a
    :class:`StreamError` (:attr:`broken`: the gateway found it, not the upstream), after which
    nothing more is decoded.

    ``verbatim``: the payloads come with the bytes they were read from (:class:`Verbatim`), for
    a caller that passes them on. ``reader``: another framing reader than the plain one (one
    that reads by templates: :mod:`gateway.pipeline_fast`)."""

    __slots__ = ("_decoder", "_reader", "_scrub", "broken", "ended", "events", "scrubbed")

    def __init__(self, upstream: Dialect, max_size: int = DEFAULT_MAX_LINE,
                 scrub: Scrub | None = None, *, verbatim: bool = False,
                 reader: SniffingReader | None = None) -> None:
        self._reader = reader if reader is not None else SniffingReader(
            max_size, named=upstream.named_events, verbatim=verbatim)
        self._scrub = scrub
        """Applied to the upstream's own error events (its words: they may quote what it was
        sent, credentials included)."""
        self._decoder: StreamDecoder = upstream.decoder()
        self.broken = False
        self.ended = False
        """A finish or an error was decoded: the stream is over."""
        self.events = 0
        """Payloads (SSE events with data, JSON lines) read from the upstream: its progress.
        Keep-alive comments, blank lines and bytes that do not complete a payload are none."""
        self.scrubbed = False
        """The upstream's error event held something to hide: it must not be passed on as it
        came."""

    def payloads(self, data: bytes) -> list[Any] | StreamError:
        """The payloads framed in ``data``, or the error that breaks the stream."""
        try:
            return self._reader.feed(data)
        except ParseError as e:
            return self._broke(f"the upstream sent a malformed stream: {e.message}")

    def decode(self, payload: Any) -> list[StreamEvent]:
        self.events += 1
        return self._decoded(payload.payload if type(payload) is Verbatim else payload)

    def _decoded(self, payload: Any) -> list[StreamEvent]:
        try:
            events = self._decoder.decode(payload)
        except ParseError as e:
            return [self._broke(f"the upstream sent a malformed chunk: {e.message}")]
        except RecursionError:
            # orjson parses 1,024 levels; a decoder that walks (or names, with repr) such a value
            # can reach Python's recursion limit: a malformed chunk, never an exception
            return [self._broke("the upstream sent a chunk nested too deeply to read")]
        if events and isinstance(events[-1], (StreamFinish, StreamError)):
            self.ended = True
            last = events[-1]
            if isinstance(last, StreamError) and self._scrub is not None:
                scrub = self._scrub
                clean = replace(last, message=scrub(last.message),
                                code=None if last.code is None else scrub(last.code))
                # (the payload's other fields too: its repr holds each string it carries)
                if clean != last or scrub(text := repr(payload)) != text:
                    self.scrubbed = True
                    events = [*events[:-1], clean]
        return events

    def feed(self, data: bytes) -> list[StreamEvent]:
        if self.ended:
            return []
        payloads = self.payloads(data)
        if isinstance(payloads, StreamError):
            return [payloads]
        out: list[StreamEvent] = []
        for p in payloads:
            out.extend(self.decode(p))
            if self.ended:
                break
        return out

    def last_payloads(self) -> list[Any] | StreamError:
        """The body ended: what the framing reader still held (a last event or line with no
        terminator), or the error that breaks the stream."""
        try:
            return self._reader.finish()
        except ParseError as e:
            return self._broke(f"the upstream sent a malformed stream: {e.message}")

    def end(self) -> list[StreamEvent]:
        """Every payload was decoded: the decoder's last word (a finish, or the error of a
        stream cut short)."""
        if self.ended:
            return []
        tail = self._decoder.end()
        self.ended = True
        if any(isinstance(e, StreamError) for e in tail):
            self.broken = True
        return tail

    def finish(self) -> list[StreamEvent]:
        """The body ended (as far as the transport can tell)."""
        if self.ended:
            return []
        payloads = self.last_payloads()
        if isinstance(payloads, StreamError):
            return [payloads]
        out: list[StreamEvent] = []
        for p in payloads:
            out.extend(self.decode(p))
            if self.ended:
                return out
        return out + self.end()

    def abort(self, message: str, status: int = 502) -> list[StreamEvent]:
        """The upstream failed mid-stream (reset, timeout, …)."""
        if self.ended:
            return []
        err = self._broke(message)
        err.status = status
        return [err]

    def _broke(self, message: str) -> StreamError:
        self.broken = True
        self.ended = True
        return StreamError(message)


def _carries_state(events: list[StreamEvent]) -> bool:
    for e in events:
        if isinstance(e, (StreamStart, ContextUpdate)) and e.session_state is not None:
            return True
    return False


_TOO_DEEP = "the upstream sent a chunk nested too deeply to pass on"


class StreamTranslator:
    """Upstream stream bytes in, the client's framed stream bytes out: the framing reader, the
    upstream dialect's decoder, the :class:`EventGate`, the client dialect's encoder, the
    client's framing. This is the reference: the fast paths of :mod:`gateway.pipeline_fast`
    give the very same bytes.

    A route of one dialect both sides (an identity route) passes the upstream's payloads on as
    it wrote them, each in a frame of its own, still decoding them to see usage, finish and
    errors; unless the client needs something of its own put in (its session state echoed, or
    spelled its way), from where it does.

    ``feed``/``finish`` never raise for bad upstream bytes: a parse error becomes the client
    dialect's error event and ends the stream (:attr:`failed`). ``abort`` does the same for a
    transport failure. After a failure nothing else is emitted, so a broken stream is never passed
    off as a clean finish.
    """

    __slots__ = ("_cumulative", "_encoder", "_follow", "_frame", "_frames", "_gate", "_identity",
                 "_in", "_replay", "_req", "_same", "_spelled", "_started", "_tools", "chunks",
                 "content_started", "done", "error", "finish_reason", "model", "text_chars",
                 "usage")

    def __init__(
        self, upstream: Dialect, client: Dialect, req: ChatRequest, *,
        max_size: int = DEFAULT_MAX_LINE, policy: Policies = "reject", scrub: Scrub | None = None,
        decoding: StreamDecoding | None = None, custom_tools: str = "native",
        framing: Framing | None = None, pair: DialectPair | None = None,
    ) -> None:
        if pair is None:
            pair = DialectPair.of(upstream, client)
        same = pair.same
        self._in = decoding if decoding is not None else StreamDecoding(
            upstream, max_size, scrub, verbatim=same)
        """``decoding``: given by a fast path; for an identity route it keeps the payloads'
        bytes."""
        self._encoder: StreamEncoder = client.encoder(req)
        self._follow: Callable[[Any], None] | None = optional(self._encoder, "follow")
        """An encoder that numbers or names what it writes (ids, sequence numbers) reads the
        upstream's own payloads instead of a replay, so that its error event continues them."""
        self._frame: Callable[[Payload], bytes] = encoder_for(framing or client.framing)
        """``framing``: the one the client's request chose, when its dialect has two (Gemini's
        JSON array without ``alt=sse``)."""
        self._frames: Callable[[list[Payload]], bytes] = frames_writer(self._frame)
        """Frames a list of payloads at once, as :attr:`_frame` would each in turn."""
        self._gate = EventGate(client, policy) if pair.gate else None
        self._tools = None if same else ToolRestorer.of(req, upstream, custom_tools)
        """The client's own names and shapes of tools the upstream's dialect has none for."""
        # Same dialect both sides: the upstream's own payloads are passed on, unless the client
        # needs something of its own put in: its session state echoed because the upstream
        # sends none (decided on the first payload, when the client sent one), or the session
        # state the upstream sends written in the spelling the client used (on each payload).
        self._same = same and req.session_state is not None
        """The identity of the route is decided on the first payload."""
        self._identity = same and req.session_state is None
        self._spelled = "session_key" in req.hints
        self._cumulative = client.cumulative_stream
        self._replay: list[StreamEvent | int] = []
        """Identity mode: what the client was shown, for an error event that keeps it (a number:
        that many characters of text, for an encoder that keeps nothing of the text it wrote)."""
        self._req = req
        self._started = False
        self.chunks = 0
        """Frames sent to the client."""
        self.text_chars = 0
        """Characters of answer text sent so far."""
        self.content_started = False
        """Any answer content (text, reasoning, a tool call) went out: the first token."""
        self.usage: Any = None
        self.model: str | None = None
        """The model the upstream's stream names at its start."""
        self.finish_reason: str | None = None
        """The canonical finish reason, once the stream finished cleanly."""
        self.done = False
        self.error: StreamError | None = None
        """Set once the stream failed, by the upstream's own error or by :attr:`broken`."""

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def broken(self) -> bool:
        """The failure was the gateway's finding (malformed bytes, truncation, transport), not an
        error the upstream declared."""
        return self._in.broken

    def events_read(self) -> int:
        """Payloads read from the upstream so far (see :attr:`StreamDecoding.events`)."""
        return self._in.events

    @property
    def dropped(self) -> list[str]:
        """Fields the upstream sent that the client's dialect cannot carry (reported)."""
        return self._gate.dropped if self._gate is not None else []

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return b""
        payloads = self._in.payloads(data)
        if isinstance(payloads, StreamError):
            return self._events([payloads])
        return self._translate(payloads)

    def finish(self) -> bytes:
        """The upstream body ended normally (as far as the transport can tell)."""
        if self.done:
            return b""
        payloads = self._in.last_payloads()
        if isinstance(payloads, StreamError):
            return self._events([payloads])
        # A last payload with no terminator goes the way the others went (passed on as it came,
        # on an identity route: its finish is the client's finish).
        out = self._translate(payloads)
        if not self.done:
            out += self._events(self._in.end())
        return out

    def abort(self, message: str, status: int = 502) -> bytes:
        """The upstream failed mid-stream (reset, timeout, …)."""
        if self.done:
            return b""
        return self._events(self._in.abort(message, status))

    def closing(self) -> bytes:
        """What ends the client's stream after its last frame (a JSON array's ``]``), once."""
        return closing(self._frame)

    def _translate(self, payloads: list[Any]) -> bytes:
        out: list[bytes] = []
        if not self._identity and not self._same:  # (for good: the client's encoder writes)
            decode = self._in.decode
            for payload in payloads:
                events = decode(payload)
                out.append(self._events(events) if events else b"")  # as _payload does
                if self.done:
                    break
            return b"".join(out)
        for payload in payloads:
            frame = self._payload(payload)
            out.append(self._as_it_came(payload) if frame is None else frame)
            if self.done:
                break
        return b"".join(out)

    def _payload(self, payload: Any) -> bytes | None:
        """The client's frames for one upstream payload; ``None`` when it is passed on as it
        came, its frame (:meth:`_as_it_came`) left to the caller."""
        inp = self._in
        events = inp.decode(payload)
        if self._same:
            self._same = False
            self._identity = not self._spelled and any(
                isinstance(e, StreamStart) and e.session_state is not None for e in events)
        if self._identity and self._spelled and _carries_state(events):
            # The upstream's spelling of the state may not be the client's: from here on the
            # client's encoder writes every frame, brought first to what the client was shown.
            self._identity = False
            return self._events(events)
        # An upstream error that held a secret is not passed on as it came: re-encoded, it
        # carries only its scrubbed message and code.
        if not self._identity or inp.broken or inp.scrubbed:
            return self._events(events) if events else b""
        if self._cumulative and (len(events) != 1 or type(events[0]) is not TextDelta) \
                and any(isinstance(e, StreamError) for e in events):  # (one text: no)
            # A cumulative reader shows each event in place of the last: the upstream's own
            # error event may carry a new id and no content (as its error body does), which
            # would wipe the text shown. The client's encoder writes it instead, under the
            # message's id with the content shown so far.
            return self._events(events)
        frame: bytes | None = None
        if not self._writes_as_it_came(payload):
            try:
                frame = self._written_again(payload)
            except (orjson.JSONEncodeError, RecursionError):
                # Written back it cannot be: the stream fails as for a malformed chunk.
                inp.broken = inp.ended = True
                return self._events([StreamError(_TOO_DEEP)])
        self._pass_through(events)
        if self._follow is not None:
            self._follow(self._followed(payload))
        return frame

    def _writes_as_it_came(self, payload: Any) -> bool:
        """The payload's own bytes make a frame of the client's framing: JSON text with no line
        end in it (an SSE reader would cut there), or data that is not JSON, which is written
        as it came whatever it holds."""
        if type(payload) is not Verbatim:
            return False
        raw = payload.raw
        return type(payload.payload) is RawData or (b"\n" not in raw and b"\r" not in raw)

    def _as_it_came(self, payload: Any) -> bytes:
        """The frame of a payload passed on as it came (:meth:`_writes_as_it_came`)."""
        raw: bytes = payload.raw
        inner = payload.payload
        return self._frame(Named(inner.event, raw) if type(inner) is Named else raw)

    def _written_again(self, payload: Any) -> bytes:
        """The frame of a payload passed on whose bytes are not a frame: its value written
        compactly (raises for a value nested too deeply to write)."""
        if type(payload) is Verbatim:
            payload = payload.payload
        if isinstance(payload, RawData):
            return self._frame(payload.text.encode())
        if isinstance(payload, Named):
            return self._frame(Named(payload.event, orjson.dumps(payload.data)))
        return self._frame(orjson.dumps(payload))

    def _followed(self, payload: Any) -> Any:
        """What an encoder's ``follow`` is given of a payload passed on: as the decoder read it."""
        return payload.payload if type(payload) is Verbatim else payload

    def _pass_through(self, events: list[StreamEvent]) -> None:
        keep = self._follow is None
        for e in events:
            if type(e) is TextDelta:  # nearly every event: no match statement to walk
                self.text_chars += len(e.text)
                self.content_started = True
                if keep and not self.done:
                    self._replay.append(e)
                continue
            match e:
                case ReasoningDelta() | ToolCallStart():
                    self.content_started = True
                case StreamStart():
                    self.model = e.model
                case StreamFinish():
                    self.usage = e.usage
                    self.finish_reason = e.reason
                    self.done = True
                case StreamError():
                    self.error = e
                    self.done = True
            if keep and not self.done:
                self._replay.append(e)
        self._started = True
        self.chunks += 1

    def _catch_up(self) -> None:
        """Identity mode, before the encoder writes anything: the client saw the upstream's own
        payloads, so the encoder is brought to that state first, so that what it writes (an
        error event) continues what was shown (same id, content kept). Only then: the identity
        stream's own end (a finish the upstream already sent) writes nothing and replays
        nothing."""
        for shown in self._replay:
            # What it writes is thrown away: a payload it could not write (nested too deeply)
            # went to the client as it came, and only the encoder's state matters.
            e = TextDelta(" " * shown) if isinstance(shown, int) else shown
            with contextlib.suppress(orjson.JSONEncodeError, RecursionError):
                self._encoder.encode(e)
        self._replay = []

    def _events(self, events: list[StreamEvent]) -> bytes:
        if self._tools is not None:
            events = self._tools.restore(events)
        if self._gate is not None:
            events = self._gate.filter(events)
        out: list[Payload] = []
        try:
            for e in events:
                match e:  # the text deltas first: nearly every event is one
                    case TextDelta():
                        self.text_chars += len(e.text)
                        self.content_started = True
                    case StreamError():
                        self.error = e
                        self.done = True
                    case StreamFinish():
                        self.usage = e.usage
                        self.finish_reason = e.reason
                        self.done = True
                        if self._identity:
                            continue  # the upstream already sent its own finish
                    case StreamStart():
                        self.model = e.model
                        if e.session_state is None and self._req.session_state is not None:
                            e = replace(e, session_state=self._req.session_state)
                    case ReasoningDelta() | ToolCallStart():
                        self.content_started = True
                    case _:
                        pass
                if not self._started:
                    self._started = True
                    if not isinstance(e, StreamStart):
                        out.extend(self._encoder.encode(
                            StreamStart(session_state=self._req.session_state)))
                if self._replay:
                    self._catch_up()
                out.extend(self._encoder.encode(e))
                if self.done:
                    break
        except (orjson.JSONEncodeError, RecursionError):
            # orjson reads 1024 levels of nesting but writes only 254: such a chunk cannot be
            # passed on, and fails the stream like a malformed one.
            self._in.broken = self._in.ended = True
            self.error = StreamError(_TOO_DEEP)
            self.done = True
            if self._replay:
                self._catch_up()
            out.extend(self._encoder.encode(self.error))
        self.chunks += len(out)
        return self._frames(out)


class StreamAssembler:
    """An upstream stream to one whole answer: ``feed(bytes)`` then ``finish() ->
    ChatResponse``. Never raises for bad upstream bytes: :attr:`error` tells, and :attr:`broken`
    says whether the gateway found the fault (malformed or truncated) rather than the upstream
    declaring an error. ``decoding``: given by a fast path."""

    __slots__ = ("_assembler", "_in")

    def __init__(self, upstream: Dialect, max_size: int = DEFAULT_MAX_LINE,
                 scrub: Scrub | None = None, *, decoding: StreamDecoding | None = None) -> None:
        self._in = decoding if decoding is not None else StreamDecoding(upstream, max_size, scrub)
        self._assembler = ResponseAssembler()

    @property
    def error(self) -> StreamError | None:
        return self._assembler.error

    def events_read(self) -> int:
        """Payloads read from the upstream so far (see :attr:`StreamDecoding.events`)."""
        return self._in.events

    @property
    def broken(self) -> bool:
        return self._in.broken

    def feed(self, data: bytes) -> None:
        for event in self._in.feed(data):
            self._assembler.add(event)

    def finish(self) -> ChatResponse:
        for event in self._in.finish():
            self._assembler.add(event)
        return self._assembler.response()
