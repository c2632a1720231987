"""Dialect A -> canonical -> dialect B, for requests, whole responses and streams.

Pure: no sockets, no clocks but the one the caller reads. The HTTP layer feeds bytes in and writes
what comes out; the ``translate`` CLI does the same from stdin.

Per stream chunk the cost is one ``orjson.loads`` (in the framing reader) and one ``orjson.dumps``
(in the target encoder); an identity route (same dialect both sides) re-emits each payload as it
came, still decoded once so that errors, truncation and usage are seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson

from gateway.canonical import (
    JSON,
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
    ContextUpdate,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    merge_context,
)
from gateway.dialects import Dialect, StreamDecoder, StreamEncoder
from gateway.errors import ParseError
from gateway.framing import RawData, SniffingReader, encoder_for
from gateway.framing.jsonlines import DEFAULT_MAX_LINE

__all__ = [
    "ResponseAssembler",
    "StreamTranslator",
    "events_from_response",
    "parse_body",
    "translate_error",
    "translate_request",
    "translate_response",
]


def parse_body(raw: bytes) -> JSON:
    """A request or whole-response body; :class:`ParseError` when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ParseError(f"the body is not valid JSON ({e.msg})", "body") from e


def translate_request(
    body: JSON, client: Dialect, upstream: Dialect, *, stream: bool | None = None,
    model: str | None = None,
) -> tuple[ChatRequest, JSON]:
    """The canonical request and the upstream's body. ``stream`` overrides the body's own flag
    (the HTTP layer knows it from the path or the Accept header)."""
    req = client.parse_request(body)
    if stream is not None:
        req.stream = stream
    return req, upstream.render_request(req, stream=req.stream, model=model)


def with_session_echo(resp: ChatResponse, req: ChatRequest) -> ChatResponse:
    """An upstream that has no session state gives the client back the one it sent, so that a
    client in front of a stateless backend keeps its memory."""
    if resp.session_state is None and req.session_state is not None:
        resp.session_state = req.session_state
    return resp


def translate_response(
    body: JSON, upstream: Dialect, client: Dialect, req: ChatRequest,
) -> JSON:
    resp = with_session_echo(upstream.parse_response(body), req)
    return client.render_response(resp, req)


def translate_error(err: ChatError, client: Dialect) -> JSON:
    return client.render_error(err)


def events_from_response(resp: ChatResponse) -> list[StreamEvent]:
    """A whole answer as a stream: the role and context, then each agent's text, then the
    finish. Used to serve a stream from an upstream that never streams."""
    events: list[StreamEvent] = [StreamStart(
        role="assistant", context=resp.context, session_state=resp.session_state,
        id=resp.id, created=resp.created, model=resp.model)]
    for m in resp.messages:
        if m.content:
            events.append(TextDelta(m.content, m.agent))
    events.append(StreamFinish(resp.finish_reason or "stop", resp.usage))
    return events


class ResponseAssembler:
    """Canonical stream events to one whole answer. Used to serve a whole answer from an upstream
    that only streams."""

    __slots__ = ("_agents", "_context", "_error", "_finish", "_session", "_start")

    def __init__(self) -> None:
        self._start: StreamStart | None = None
        self._agents: list[tuple[str | None, list[str]]] = []
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
                    self._agents.append((event.agent, []))
                self._agents[-1][1].append(event.text)
            case ContextUpdate():
                self._context = merge_context(self._context, event.context)
                if event.session_state is not None:
                    self._session = event.session_state
            case StreamFinish():
                self._finish = event
            case StreamError():
                self._error = event

    @property
    def error(self) -> StreamError | None:
        return self._error

    def response(self) -> ChatResponse:
        start = self._start or StreamStart()
        messages = [AssistantMessage("".join(parts), agent=agent) for agent, parts in self._agents]
        return ChatResponse(
            messages=messages or [AssistantMessage("")],
            context=self._context,
            session_state=self._session,
            finish_reason=self._finish.reason if self._finish else None,
            usage=self._finish.usage if self._finish else None,
            id=start.id, created=start.created, model=start.model,
        )


class StreamTranslator:
    """Upstream stream bytes in, the client's framed stream bytes out.

    ``feed``/``finish`` never raise for bad upstream bytes: a parse error becomes the client
    dialect's error event and ends the stream (:attr:`failed`). ``abort`` does the same for a
    transport failure. After a failure nothing else is emitted, so a broken stream is never passed
    off as a clean finish.
    """

    __slots__ = ("_decoder", "_encoder", "_frame", "_identity", "_reader", "_req", "_same",
                 "_started", "broken", "chunks", "done", "error", "text_chars", "usage")

    def __init__(
        self, upstream: Dialect, client: Dialect, req: ChatRequest, *,
        max_size: int = DEFAULT_MAX_LINE,
    ) -> None:
        self._reader = SniffingReader(max_size)
        self._decoder: StreamDecoder = upstream.decoder()
        self._encoder: StreamEncoder = client.encoder(req)
        self._frame: Callable[[bytes], bytes] = encoder_for(client.framing)
        # Same dialect both sides: the upstream's own payloads are re-emitted, unless the client
        # needs something of its own put in: the session-state spelling it used, or (decided on
        # the first payload) its session state echoed because the upstream sends none.
        self._same = upstream is client and "session_key" not in req.hints
        self._identity = False
        self._req = req
        self._started = False
        self.chunks = 0
        """Frames sent to the client."""
        self.text_chars = 0
        """Characters of answer text sent so far (> 0 once the first token went out)."""
        self.usage: dict[str, JSON] | None = None
        self.done = False
        self.error: StreamError | None = None
        """Set once the stream failed, by the upstream's own error or by :attr:`broken`."""
        self.broken = False
        """The failure was the gateway's finding (malformed bytes, truncation, transport), not an
        error the upstream declared."""

    @property
    def failed(self) -> bool:
        return self.error is not None

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return b""
        try:
            payloads = self._reader.feed(data)
        except ParseError as e:
            return self._fail(StreamError(f"the upstream sent a malformed stream: {e.message}"))
        return self._payloads(payloads)

    def finish(self) -> bytes:
        """The upstream body ended normally (as far as the transport can tell)."""
        if self.done:
            return b""
        try:
            out = self._payloads(self._reader.finish())
        except ParseError as e:
            return self._fail(StreamError(f"the upstream sent a malformed stream: {e.message}"))
        if self.done:
            return out
        tail = self._decoder.end()
        self.broken = any(isinstance(e, StreamError) for e in tail)
        return out + self._events(tail)

    def abort(self, message: str, status: int = 502) -> bytes:
        """The upstream failed mid-stream (reset, timeout, …)."""
        if self.done:
            return b""
        return self._fail(StreamError(message, status=status))

    def _fail(self, error: StreamError) -> bytes:
        self.broken = True
        return self._events([error])

    def _payloads(self, payloads: list[Any]) -> bytes:
        out: list[bytes] = []
        for payload in payloads:
            try:
                out.append(self._payload(payload))
            except ParseError as e:
                out.append(self._fail(StreamError(
                    f"the upstream sent a malformed chunk: {e.message}")))
                break
            except (orjson.JSONEncodeError, RecursionError):
                # orjson reads 1024 levels of nesting but writes only 254: such a chunk cannot
                # be passed on, and fails the stream like a malformed one.
                self.done = False  # the chunk that failed may have been the finish
                out.append(self._fail(StreamError(
                    "the upstream sent a chunk nested too deeply to pass on")))
                break
            if self.done:
                break
        return b"".join(out)

    def _payload(self, payload: Any) -> bytes:
        events = self._decoder.decode(payload)
        if self._same:
            self._same = False
            self._identity = self._req.session_state is None or any(
                isinstance(e, StreamStart) and e.session_state is not None for e in events)
        if self._identity and not any(isinstance(e, StreamError) for e in events):
            raw = payload.text.encode() if isinstance(payload, RawData) else \
                orjson.dumps(payload)
            self._observe(events)
            self.chunks += 1
            return self._frame(raw)
        return self._events(events) if events else b""

    def _observe(self, events: list[StreamEvent]) -> None:
        for e in events:
            if isinstance(e, TextDelta):
                self.text_chars += len(e.text)
            elif isinstance(e, StreamFinish):
                self.usage = e.usage
                self.done = True
            elif isinstance(e, StreamStart):
                self._started = True

    def _events(self, events: list[StreamEvent]) -> bytes:
        out: list[bytes] = []
        for e in events:
            if isinstance(e, StreamError):
                self.error = e
                self.done = True
            elif isinstance(e, StreamFinish):
                self.usage = e.usage
                self.done = True
                if self._identity:
                    continue  # the upstream already sent its own finish
            elif isinstance(e, StreamStart):
                self._started = True
                if e.session_state is None and self._req.session_state is not None:
                    e = replace(e, session_state=self._req.session_state)
            elif isinstance(e, TextDelta):
                self.text_chars += len(e.text)
            if not self._started:
                self._started = True
                out.extend(self._encoder.encode(
                    StreamStart(session_state=self._req.session_state)))
            out.extend(self._encoder.encode(e))
        self.chunks += len(out)
        frame = self._frame
        return b"".join(frame(p) for p in out)
