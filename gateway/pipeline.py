"""Dialect A -> canonical -> dialect B, for requests, whole responses and streams.

Pure: no sockets, no clocks. The HTTP layer feeds bytes in and writes what comes out; the
``translate`` CLI does the same from stdin.

Streams have one driver, :class:`StreamDecoding` (framing reader, then the upstream dialect's
decoder, never raising for bad bytes), used both by :class:`StreamTranslator` (to the client's
framed stream, on the fly) and by :class:`StreamAssembler` (to one whole answer). What the client's
dialect cannot carry goes through :class:`gateway.carry.EventGate`.

Per stream chunk the cost is one ``orjson.loads`` (in the framing reader) and one ``orjson.dumps``
(in the target encoder); an identity route (same dialect both sides) re-emits each payload as it
came, still decoded once so that errors, truncation and usage are seen, and a read made of whole
frames is forwarded as the very bytes that came (nothing re-serialised).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any, assert_never

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
    Policy,
    Unsupported,
    request_losses,
    response_losses,
    strip_request,
    strip_response,
)
from gateway.dialects import Dialect, StreamDecoder, StreamEncoder
from gateway.errors import ParseError
from gateway.framing import (
    Named,
    Payload,
    RawData,
    Slot,
    SniffingReader,
    TextRun,
    encoder_for,
    named,
    slot_payload,
)
from gateway.framing.jsonlines import DEFAULT_MAX_LINE
from gateway.framing.search import holds

__all__ = [
    "ResponseAssembler",
    "StreamAssembler",
    "StreamDecoding",
    "StreamTranslator",
    "adapt_request",
    "adapt_response",
    "events_from_response",
    "parse_body",
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


def adapt_request(req: ChatRequest, upstream: Dialect, policy: Policy,
                  ) -> tuple[ChatRequest, list[str]]:
    """``req`` as ``upstream`` can carry it, and the fields it cannot (reported). Raises
    :class:`Unsupported` when a governed field is lost under ``reject``."""
    lost = request_losses(req, upstream)
    governed = [f for f in lost if f in GOVERNED]
    if governed:
        if policy == "reject":
            raise Unsupported(governed, upstream.name, answer=False)
        req = strip_request(req, governed, upstream)
    return req, lost


def translate_request(
    body: JSON, client: Dialect, upstream: Dialect, *, stream: bool | None = None,
    model: str | None = None, max_tokens: int | None = None, policy: Policy = "reject",
) -> tuple[ChatRequest, JSON, list[str]]:
    """The client's canonical request, the upstream's body, and the fields it lost. ``stream``
    overrides the body's own flag (the HTTP layer knows it from the path or the Accept
    header)."""
    req = client.parse_request(body)
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


def adapt_response(resp: ChatResponse, client: Dialect, policy: Policy,
                   ) -> tuple[ChatResponse, list[str]]:
    lost = response_losses(resp, client)
    governed = [f for f in lost if f in GOVERNED]
    if governed:
        if policy == "reject":
            raise Unsupported(governed, client.name, answer=True)
        resp = strip_response(resp, governed)
    return resp, lost


def translate_response(
    body: JSON, upstream: Dialect, client: Dialect, req: ChatRequest, *,
    policy: Policy = "reject",
) -> tuple[JSON, list[str]]:
    resp = with_session_echo(upstream.parse_response(body), req)
    resp, lost = adapt_response(resp, client, policy)
    return client.render_response(resp, req), lost


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
            events.append(ToolCallStart(calls, c.id, c.name))
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
                 "_start")

    def __init__(self) -> None:
        self._start: StreamStart | None = None
        self._agents: list[tuple[str | None, list[str], str | None]] = []
        """Per message: its agent, its text's pieces, its id."""
        self._reasoning: list[Reasoning] = []
        self._calls: dict[int, list[str]] = {}  # index -> [id, name, arguments...]
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

    @property
    def error(self) -> StreamError | None:
        return self._error

    def response(self) -> ChatResponse:
        start = self._start or StreamStart()
        messages = [AssistantMessage("".join(parts), agent=agent, id=mid)
                    for agent, parts, mid in self._agents]
        if not messages:
            messages = [AssistantMessage("")]
        calls = [ToolCall(c[0], c[1], "".join(c[2:]) or "{}")
                 for _, c in sorted(self._calls.items())]
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
    (``text_path``, ``again``, ``follow``...), whether a class has one decided once for all its
    instances: a member that is not there costs ``getattr`` an exception, with its message
    formatted, and each stream asked for four of them."""
    key = (type(obj), name)
    has = _HAS.get(key)
    if has is None:
        if hasattr(type(obj), "__getattr__"):  # a class that answers instance by instance
            return getattr(obj, name, None)
        has = _HAS[key] = hasattr(obj, name)
    return getattr(obj, name, None) if has else None


def _text_alone(event: StreamEvent, text: str) -> bool:
    """``event == TextDelta(text)``, without building one and calling the __eq__ @dataclass
    writes (interpreted, even in the compiled build)."""
    return (type(event) is TextDelta and event.text == text and event.agent is None
            and event.message_id is None)


class StreamDecoding:
    """Upstream stream bytes to canonical events: the framing reader, then the upstream dialect's
    decoder. Never raises for bad bytes: a framing or dialect error becomes a
    :class:`StreamError` (:attr:`broken`: the gateway found it, not the upstream), after which
    nothing more is decoded."""

    __slots__ = ("_again", "_decoder", "_reader", "_scrub", "_text_alone", "broken", "ended",
                 "events", "scrubbed")

    def __init__(self, upstream: Dialect, max_size: int = DEFAULT_MAX_LINE,
                 scrub: Scrub | None = None) -> None:
        # A dialect that names where a text-only chunk holds its text (``text_path``, optional:
        # plugin dialects may not) has such chunks read without parsing them, once one was
        # (gateway.framing.template); what they mean, its decoder confirms (:meth:`decode`). A
        # dialect that numbers its frames names where too (``counter_path``).
        self._reader = SniffingReader(max_size, named=upstream.named_events,
                                      text_path=optional(upstream, "text_path"),
                                      counter_path=optional(upstream, "counter_path"))
        self._text_alone = False
        """The last payload decoded was a :class:`Slot` its decoder read as its text alone."""
        self._scrub = scrub
        """Applied to the upstream's own error events (its words: they may quote what it was
        sent, credentials included)."""
        self._decoder: StreamDecoder = upstream.decoder()
        self._again: Callable[[int], None] | None = optional(self._decoder, "again")
        """A decoder that counts what a text frame gave (optional) is told of each text frame
        read by the template, which it is not given to decode."""
        self.broken = False
        self.ended = False
        """A finish or an error was decoded: the stream is over."""
        self.events = 0
        """Payloads (SSE events with data, JSON lines) read from the upstream: its progress.
        Keep-alive comments, blank lines and bytes that do not complete a payload are none."""
        self.scrubbed = False
        """The upstream's error event held something to hide: it must not be passed on as it
        came."""

    @property
    def whole(self) -> bool:
        """The last :meth:`payloads` read was exactly whole frames (its bytes may be passed on
        unchanged to a client of the same framing)."""
        return self._reader.whole

    def payloads(self, data: bytes) -> list[Any] | StreamError:
        """The payloads framed in ``data``, or the error that breaks the stream."""
        try:
            return self._reader.feed(data)
        except ParseError as e:
            return self._broke(f"the upstream sent a malformed stream: {e.message}")

    def allow_runs(self, on: bool = True) -> None:
        """Whether the caller takes :class:`TextRun` s (:meth:`take_run`): runs of text frames
        read at once (:mod:`gateway.framing.template`)."""
        self._reader.allow_runs(on)

    def take_run(self, run: TextRun) -> bool:
        """The frames of ``run`` are text alone, as the :class:`Slot` right before them was
        (the dialect's promise, with ``text_path``): counted as read, and ``True``. ``False``:
        the caller reads them one by one (:meth:`TextRun.slots`), as :meth:`decode` does."""
        if not self._text_alone or self.ended:
            return False
        self.events += run.count
        if self._again is not None:
            self._again(run.chars)
        return True

    def decode(self, payload: Any) -> list[StreamEvent]:
        if type(payload) is TextRun:  # (a caller that does not take runs whole)
            events: list[StreamEvent] = []
            for slot in payload.slots():
                events.extend(self.decode(slot))
            return events
        self.events += 1
        if type(payload) is Slot:
            if self._text_alone:
                if self._again is not None:
                    self._again(len(payload.text))
                return [TextDelta(payload.text)]
            events = self._decoded(slot_payload(payload))
            # The decoder read this frame as its text alone: it reads so every frame of the same
            # template that follows it (the dialect's promise, with ``text_path``), until another
            # payload comes between and may change what it expects. If it did not, the template
            # is not one of text frames: every frame is parsed from now on.
            self._text_alone = len(events) == 1 and _text_alone(events[0], payload.text)
            if not self._text_alone:
                self._reader.drop_template()
            return events
        self._text_alone = False
        return self._decoded(payload)

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
        if type(e) is TextDelta:
            continue
        if isinstance(e, (StreamStart, ContextUpdate)) and e.session_state is not None:
            return True
    return False


class StreamTranslator:
    """Upstream stream bytes in, the client's framed stream bytes out.

    ``feed``/``finish`` never raise for bad upstream bytes: a parse error becomes the client
    dialect's error event and ends the stream (:attr:`failed`). ``abort`` does the same for a
    transport failure. After a failure nothing else is emitted, so a broken stream is never passed
    off as a clean finish.
    """

    __slots__ = ("_cumulative", "_encoder", "_follow", "_frame", "_gate", "_identity", "_in",
                 "_plain", "_replay", "_req", "_same", "_spelled", "_started", "chunks",
                 "content_started", "done", "error", "finish_reason", "model", "text_chars",
                 "usage")

    def __init__(
        self, upstream: Dialect, client: Dialect, req: ChatRequest, *,
        max_size: int = DEFAULT_MAX_LINE, policy: Policy = "reject", scrub: Scrub | None = None,
    ) -> None:
        self._in = StreamDecoding(upstream, max_size, scrub)
        self._encoder: StreamEncoder = client.encoder(req)
        self._follow: Callable[[Any], None] | None = optional(self._encoder, "follow")
        """An encoder that numbers or names what it writes (ids, sequence numbers) reads the
        upstream's own payloads instead of a replay, so that its error event continues them."""
        self._frame: Callable[[Payload], bytes] = encoder_for(client.framing)
        self._plain: Callable[[list[bytes]], list[Payload] | None] | None = optional(
            self._encoder, "plain_texts")
        """An encoder that writes the texts of a run as they are (optional: see
        :class:`gateway.dialects.base.StreamEncoder`)."""
        self._gate = EventGate(client, policy) if EventGate.needed(upstream, client) else None
        # Same dialect both sides: the upstream's own payloads are re-emitted, unless the client
        # needs something of its own put in: (decided on the first payload) its session state
        # echoed because the upstream sends none, or the session state the upstream sends
        # written in the spelling the client used (decided on each payload).
        self._same = upstream is client
        self._spelled = "session_key" in req.hints
        self._identity = False
        if self._same and req.session_state is None:
            # Decided now, as the first payload would decide it: so that the text frames of the
            # very first read are read in runs (below)
            self._same = False
            self._identity = True
            if not client.cumulative_stream:
                # An identity stream reads its text frames only to count them: the frames of a
                # run are read at once (gateway.framing.template), and passed on as they came
                self._in.allow_runs()
        elif not self._same:
            # A translating one: the texts of a run are cut out at once, each still a TextDelta
            self._in.allow_runs()
        self._cumulative = client.cumulative_stream
        self._replay: list[StreamEvent | int] = []
        """Identity mode: what the client was shown, for an error event that keeps it (a run of
        text frames as the number of its characters: see :meth:`_ran`)."""
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
        out: list[bytes] = []
        passed: list[Any] = []
        """Identity mode: payloads passed on whose frames are not built yet."""
        i = 0
        while i < len(payloads):
            payload = payloads[i]
            i += 1
            if type(payload) is TextRun:
                if not self._in.take_run(payload):
                    payloads[i:i] = payload.slots()  # read one by one, as they would have been
                    continue
                if self._identity:
                    self._ran(payload)
                    passed.append(payload)
                    continue
                # its text frames, each the TextDelta decoding it gives (the dialect's promise)
                frame: bytes | None = self._plain_run(payload)
                if frame is None:
                    frame = self._events([TextDelta(t.decode()) for t in payload.texts()])
            else:
                frame = self._payload(payload)
            if frame is None:
                passed.append(payload)
            else:
                out.extend(self._frames_of(passed))
                passed = []
                out.append(frame)
            if self.done:
                break
        if passed and not out and i == len(payloads) and self._in.whole:
            # Every frame of this read passes on as it is: forward its bytes unchanged.
            return data
        out.extend(self._frames_of(passed))
        return b"".join(out)

    def finish(self) -> bytes:
        """The upstream body ended normally (as far as the transport can tell)."""
        if self.done:
            return b""
        payloads = self._in.last_payloads()
        if isinstance(payloads, StreamError):
            return self._events([payloads])
        # A last payload with no terminator goes the way the others went (passed on as it came,
        # on a same-dialect route: its finish is the client's finish).
        out: list[bytes] = []
        passed: list[Any] = []
        for payload in payloads:  # (a last line or event alone: never a run)
            frame = self._payload(payload)
            if frame is None:
                passed.append(payload)
            else:
                out.extend(self._frames_of(passed))
                passed = []
                out.append(frame)
            if self.done:
                break
        out.extend(self._frames_of(passed))
        if not self.done:
            out.append(self._events(self._in.end()))
        return b"".join(out)

    def abort(self, message: str, status: int = 502) -> bytes:
        """The upstream failed mid-stream (reset, timeout, …)."""
        if self.done:
            return b""
        return self._events(self._in.abort(message, status))

    def _payload(self, payload: Any) -> bytes | None:
        """The client's frames for one upstream payload; ``None`` when it passes on as it came
        (identity mode), its frame left to the caller."""
        inp = self._in
        events = inp.decode(payload)
        if self._same:
            self._same = False
            self._identity = self._req.session_state is None or (not self._spelled and any(
                isinstance(e, StreamStart) and e.session_state is not None for e in events))
        if self._identity and self._spelled and _carries_state(events):
            # The upstream's spelling of the state may not be the client's: from here on the
            # client's encoder writes every frame, brought first to what the client was shown.
            self._identity = False
            self._in.allow_runs(False)
            return self._events(events)
        # An upstream error that held a secret is not passed on as it came: re-encoded, it
        # carries only its scrubbed message and code.
        if self._identity and not inp.broken and not inp.scrubbed:
            if self._cumulative and (len(events) != 1 or type(events[0]) is not TextDelta) \
                    and any(isinstance(e, StreamError) for e in events):  # (one text: no)
                # A cumulative reader shows each event in place of the last: the upstream's own
                # error event may carry a new id and no content (as its error body does), which
                # would wipe the text shown. The client's encoder writes it instead, under the
                # message's id with the content shown so far.
                return self._events(events)
            self._pass_through(events)
            if self._follow is not None:
                # A frame read by the template and never parsed goes as the Slot it is: the
                # frame followed last but for its text (and counter), as the dialect promised.
                self._follow(payload if type(payload) is not Slot or payload.value is None
                             else slot_payload(payload))
            return None
        return self._events(events) if events else b""

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

    def _ran(self, run: TextRun) -> None:
        """Identity mode: a run of text frames passed on, counted as :meth:`_pass_through`
        counts each of them."""
        self.text_chars += run.chars
        self.content_started = True
        if self._follow is None:
            # Kept as its length, not as the run: a run holds the read's bytes, and thousands of
            # those kept for the stream's life left the C allocator's heap 5 MiB larger under
            # load (bench/run.py, 128 streams). An encoder of a stream that is not cumulative
            # keeps nothing of the text it wrote (the tests replay runs both ways, every
            # dialect), and runs are only read for those (see __init__).
            self._replay.append(run.chars)
        else:
            self._follow(run)
        self._started = True
        self.chunks += run.count

    def _plain_run(self, run: TextRun) -> bytes | None:
        """A translating route's run of text frames written by an encoder that takes its texts
        as they are (``plain_texts``), counted as :meth:`_events` counts their TextDeltas (which
        every gate lets through): ``None`` when it has not begun, is done, or says no."""
        plain = self._plain
        if plain is None or not self._started or self.done:
            return None
        payloads = plain(run.texts())
        if payloads is None:
            return None
        self.text_chars += run.chars
        self.content_started = True
        self.chunks += len(payloads)
        frame = self._frame
        return b"".join([frame(p) for p in payloads])

    def _frames_of(self, passed: list[Any]) -> list[bytes]:
        """Frames for payloads passed on (re-encoded: the read they came in also held something
        that could not be forwarded as it was)."""
        out: list[bytes] = []
        if any(type(p) is TextRun for p in passed):  # its frames, each as the Slot it is
            passed = [s for p in passed for s in (p.slots() if type(p) is TextRun else (p,))]
        for k, payload in enumerate(passed):
            if isinstance(payload, RawData):
                out.append(self._frame(payload.text.encode()))
                continue
            if type(payload) is Slot:  # the upstream's own JSON, unless a CR would break a line
                raw = payload.raw
                if holds(raw, b"\r"):
                    raw = orjson.dumps(payload.parsed())
                out.append(self._frame(raw if payload.event == "message"
                                       else named(payload.event, raw)))
                continue
            try:
                if isinstance(payload, Named):  # an SSE event with its name: written with it
                    out.append(self._frame(named(payload.event, orjson.dumps(payload.data))))
                else:
                    out.append(self._frame(orjson.dumps(payload)))
            except (orjson.JSONEncodeError, RecursionError):
                # Written back it cannot be; what followed it in this read is not sent either.
                self.done = False
                self.error = None
                self.chunks -= len(passed) - k
                self._in.broken = self._in.ended = True
                out.append(self._events([StreamError(
                    "the upstream sent a chunk nested too deeply to pass on")]))
                break
        return out

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
            self.error = StreamError("the upstream sent a chunk nested too deeply to pass on")
            self.done = True
            if self._replay:
                self._catch_up()
            out.extend(self._encoder.encode(self.error))
        self.chunks += len(out)
        frame = self._frame
        return b"".join(frame(p) for p in out)


class StreamAssembler:
    """An upstream stream to one whole answer: ``feed(bytes)`` then ``finish() ->
    ChatResponse``. Never raises for bad upstream bytes: :attr:`error` tells, and :attr:`broken`
    says whether the gateway found the fault (malformed or truncated) rather than the upstream
    declaring an error."""

    __slots__ = ("_assembler", "_in")

    def __init__(self, upstream: Dialect, max_size: int = DEFAULT_MAX_LINE,
                 scrub: Scrub | None = None) -> None:
        self._in = StreamDecoding(upstream, max_size, scrub)
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
