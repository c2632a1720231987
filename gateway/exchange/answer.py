"""The three ways an exchange answers its client from an upstream response:

- **whole**: a whole answer, from a whole upstream answer or assembled from its stream;
- **stream**: the upstream's stream translated on the fly, chunk by chunk;
- **bridged**: a stream for the client, synthesized from an upstream that answered whole.

Retries happen only before the first byte went to the client; after it, a failure becomes the
client dialect's error event and the stream ends. What the answer did (chunks, first content,
time spent writing) is kept in :class:`Progress`, which outlives a client that goes away.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import aiohttp
import orjson
from aiohttp import web

from gateway.canonical import ChatError, ChatRequest, ChatResponse, Usage
from gateway.carry import Policies, Unsupported
from gateway.dialects import Dialect
from gateway.errors import ParseError, UpstreamError
from gateway.exchange.attempts import Answered, ClientGone
from gateway.exchange.sink import ResponseSink
from gateway.framing import closing, encoder_for
from gateway.pipeline import (
    StreamTranslator,
    adapt_response,
    events_from_response,
    optional,
    parse_body,
    render_body,
    with_session_echo,
)
from gateway.pipeline_fast import Accelerate, stream_assembler, stream_translator
from gateway.runtime import RouteEntry
from gateway.tool_shapes import restore_tools
from gateway.upstream import UpstreamCall

__all__ = ["DROPPED_HEADER", "Answerer", "ClientGone", "Progress", "error_response"]

_JSON = "application/json"
DROPPED_HEADER = "X-Gateway-Dropped"
"""Names the fields the route's ``on_unsupported: drop`` left out of the request the upstream
got (``hosted_tools, tool_choice``), so that the client sees what its answer was made
without."""
_TOO_DEEP = "the upstream answer is nested too deeply to pass on"


# Its own __init__ (init=False): compiled, the one dataclasses generates runs interpreted
# (tests/test_canonical.py holds it to the fields).
@dataclass(slots=True, init=False)
class Progress:
    """What the answer did so far."""

    status: int = 0
    """The status sent (once the answer went out)."""
    chunks: int = 0
    first_content: float | None = None
    client_wait: float = 0.0
    error: str | None = None
    usage: Usage | None = None
    dropped: list[str] = field(default_factory=list)
    sent_bytes: int = 0
    """Body bytes of the answer: a whole body, or every stream frame written."""
    model: str | None = None
    """The model the answer names."""
    finish_reason: str | None = None

    def __init__(self, status: int = 0, chunks: int = 0, first_content: float | None = None,
                 client_wait: float = 0.0, error: str | None = None, usage: Usage | None = None,
                 dropped: list[str] | None = None, sent_bytes: int = 0,
                 model: str | None = None, finish_reason: str | None = None) -> None:
        self.status = status
        self.chunks = chunks
        self.first_content = first_content
        self.client_wait = client_wait
        self.error = error
        self.usage = usage
        self.dropped = [] if dropped is None else dropped
        self.sent_bytes = sent_bytes
        self.model = model
        self.finish_reason = finish_reason

    def drop(self, fields: list[str]) -> None:
        self.dropped.extend(f for f in fields if f not in self.dropped)

    def answered(self, model: str | None, finish_reason: str | None, sent: int = 0) -> None:
        """What the answer said of itself (for the access log and the trace)."""
        self.model = model
        self.finish_reason = finish_reason
        self.sent_bytes += sent


def error_response(dialect: Dialect, err: ChatError, request_id: str | None = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=err.status, body=orjson.dumps(dialect.render_error(err)),
                        headers=_error_headers(err, request_id, headers))


def _error_headers(err: ChatError, request_id: str | None,
                   headers: dict[str, str] | None) -> dict[str, str]:
    h = {"Content-Type": _JSON}
    if request_id:
        h["X-Request-ID"] = request_id
    if err.retry_after is not None:
        h["Retry-After"] = str(max(1, round(err.retry_after)))
    h.update(headers or {})
    return h


class Answerer:
    """Answers one client (through ``sink``, on ``entry``) from whichever upstream call the
    attempts hand it (:meth:`answer`, an :data:`~gateway.exchange.attempts.UpstreamAnswer`)."""

    __slots__ = ("accelerate", "client", "entry", "policy", "progress", "request_dropped",
                 "request_id", "sink")

    def __init__(self, sink: ResponseSink, entry: RouteEntry, request_id: str,
                 accelerate: Accelerate = True) -> None:
        self.sink = sink
        self.accelerate = accelerate
        """The stream's fast paths (``server.stream_accelerators``,
        :mod:`gateway.pipeline_fast`)."""
        self.entry = entry
        self.client = entry.client
        self.policy: Policies = entry.config.policies
        self.request_id = request_id
        self.progress = Progress()
        self.request_dropped: list[str] = []
        """What the request sent upstream was without (the drop policy), named in the answer's
        ``X-Gateway-Dropped`` header; the exchange shares its attempts' list here."""

    def _headers(self, headers: dict[str, str]) -> dict[str, str]:
        """An answer's headers, with :data:`DROPPED_HEADER` when the request lost fields."""
        headers["X-Request-ID"] = self.request_id
        if self.request_dropped:
            headers[DROPPED_HEADER] = ", ".join(self.request_dropped)
        return headers

    async def fail(self, err: ChatError, headers: dict[str, str] | None = None) -> None:
        """Answer with ``err``, in the client's dialect."""
        self.progress.status = err.status
        self.progress.error = err.message
        body = orjson.dumps(self.client.render_error(err))
        self.progress.sent_bytes = len(body)
        await self._send(err.status, _error_headers(err, self.request_id, headers), body)

    async def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        try:
            await self.sink.whole(status, headers, body)
        except (ConnectionError, aiohttp.ClientConnectionResetError) as e:
            raise ClientGone from e

    async def answer(self, req: ChatRequest, call: UpstreamCall, dialect: Dialect,
                     up_stream: bool) -> Answered:
        if up_stream and call.response.content_type == "text/html":
            # An error page served with 200 (a proxy's, a login wall's) is never a stream; read
            # as one it would give no events, and the protocol dialects end by ending.
            return await self._malformed("the upstream answered with an HTML page, not a stream")
        if req.stream and up_stream:
            return await self._stream(req, call, dialect)
        got = await self._whole_of(req, call, dialect, up_stream)
        if isinstance(got, Answered):
            return got
        whole, raw = got
        whole = restore_tools(whole, req, dialect, call.config.custom_tools)
        if req.stream:
            return await self._bridged(req, whole)
        return await self._whole(req, whole, raw)

    # --- whole ---------------------------------------------------------------------------------

    async def _whole(self, req: ChatRequest, resp: ChatResponse, raw: bytes | None) -> Answered:
        """``raw``: the upstream's own body, when it is in the client's dialect and needs
        nothing of the client's put in (it is sent as it came: nothing re-serialised)."""
        try:
            resp, lost = adapt_response(resp, self.client, self.policy)
            body = raw if raw is not None else render_body(self.client, resp, req)
        except Unsupported as e:
            await self.fail(ChatError(502, str(e), code="UNSUPPORTED"))
            return Answered("ok")
        except orjson.JSONEncodeError:
            return await self._malformed(_TOO_DEEP)
        if lost:
            self.progress.drop(lost)
        self.progress.usage = resp.usage
        self.progress.answered(resp.model, resp.finish_reason, len(body))
        self.progress.status = 200
        self.progress.first_content = time.perf_counter()
        await self._send(200, self._headers({"Content-Type": _JSON}), body)
        return Answered("ok")

    async def _whole_of(self, req: ChatRequest, call: UpstreamCall, dialect: Dialect,
                        up_stream: bool) -> tuple[ChatResponse, bytes | None] | Answered:
        """The upstream's whole answer (and its raw body, when it may be passed on as it came),
        or the error answer that replaces it."""
        if up_stream or (optional(dialect, "whole_may_stream")
                         and call.response.content_type == "text/event-stream"):
            assembled = await self._assembled(req, call, dialect)
            return assembled if isinstance(assembled, Answered) else (assembled, None)
        raw = await call.read_whole()
        try:
            body = parse_body(raw)
            declared = dialect.parse_error(body)
            if declared is not None:
                scrub = call.config.scrubber
                return await self._malformed(scrub(declared.message),
                                             scrub.optional(declared.code),
                                             scrub.optional(declared.type))
            resp = dialect.parse_response(body)
        except ParseError as e:
            return await self._malformed(call.config.scrubber(
                f"the upstream answer could not be read: {e}"))
        # Same dialect both sides (a round trip is exact) and nothing of the client's to put in:
        # its state echoed to it, the upstream's state written in the spelling the client used,
        # a shape its route's options ask for, or the context its dialect's answers always carry.
        # (an answer the gateway keeps says so itself: rendered, never passed on as it came)
        same = (dialect is self.client and not self.entry.config.model_extra
                and self.entry.responses_state != "gateway"
                and (req.session_state is None if resp.session_state is None
                     else "session_key" not in req.hints)
                and (resp.context is not None or dialect.capabilities.answer_context is None))
        return with_session_echo(resp, req), raw if same else None

    async def _assembled(self, req: ChatRequest, call: UpstreamCall,
                         dialect: Dialect) -> ChatResponse | Answered:
        assembler = stream_assembler(dialect, call.config.max_line_bytes, call.config.scrubber,
                                     accelerate=self.accelerate, source=call.config)
        got_data = False
        async for chunk in call.chunks(assembler.events_read, whole=True):
            got_data = got_data or not chunk.isspace()
            assembler.feed(chunk)
            if assembler.error is not None:
                break
        if not got_data:
            return await self._malformed("the upstream sent an empty stream")
        resp = assembler.finish()
        err = assembler.error
        if err is None:
            return with_session_echo(resp, req)
        if assembler.broken or err.status < 400:
            return await self._malformed(err.message, err.code)
        await self.fail(ChatError(err.status, err.message, err.code))
        return Answered("malformed")

    async def _malformed(self, message: str, code: str | None = None,
                         kind: str | None = None) -> Answered:
        await self.fail(ChatError(502, message, code=code or "BAD_GATEWAY", type=kind))
        return Answered("malformed")

    # --- streams -------------------------------------------------------------------------------

    async def _start_stream(self) -> ResponseSink:
        sink = self.sink
        headers = {
            "Content-Type": self.entry.stream_content_type,
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
        # a dialect whose clients look for a header of their protocol's (optional)
        extra = optional(self.client, "stream_headers")
        if extra:
            headers.update(extra)
        try:
            await sink.start(self._headers(headers))
        except (ConnectionError, aiohttp.ClientConnectionResetError) as e:
            raise ClientGone from e
        self.progress.status = 200
        return sink

    async def _finish(self, resp: ResponseSink, last: bytes = b"") -> None:
        """The stream's end (its ``last`` frames and last chunk), where a client gone shows as
        on a write."""
        t0 = time.perf_counter()
        self.progress.sent_bytes += len(last)
        try:
            await resp.finish(last)
        except (ConnectionError, aiohttp.ClientConnectionResetError) as e:
            raise ClientGone from e
        finally:
            self.progress.client_wait += time.perf_counter() - t0

    async def _write(self, resp: ResponseSink, data: bytes) -> None:
        t0 = time.perf_counter()
        self.progress.sent_bytes += len(data)
        try:
            await resp.write(data)
        except (ConnectionError, aiohttp.ClientConnectionResetError) as e:
            raise ClientGone from e
        finally:
            self.progress.client_wait += time.perf_counter() - t0

    async def _stream(self, req: ChatRequest, call: UpstreamCall,
                      dialect: Dialect) -> Answered:
        framing = self.entry.framing
        if framing is None:
            tr = stream_translator(dialect, self.client, req,
                                   max_size=call.config.max_line_bytes, policy=self.policy,
                                   scrub=call.config.scrubber, accelerate=self.accelerate,
                                   custom_tools=call.config.custom_tools, source=call.config)
        else:  # a framing the request chose: the plain path (the fast ones write the dialect's)
            tr = StreamTranslator(dialect, self.client, req, max_size=call.config.max_line_bytes,
                                  policy=self.policy, scrub=call.config.scrubber,
                                  custom_tools=call.config.custom_tools, framing=framing)
        resp: ResponseSink | None = None
        fault = "ok"
        got_data = False
        held = b""
        """The last read's frames, when the body's end came with them: written with the
        stream's end, in one write (one system call less per stream that arrives at once)."""
        ended = call.response.ended
        try:
            async for chunk in call.chunks(tr.events_read):
                got_data = got_data or not chunk.isspace()
                out = tr.feed(chunk)
                if not out:
                    continue
                if resp is None:
                    if tr.broken:  # nothing sent yet: a plain HTTP error says it best
                        return await self._malformed(_stream_error(tr))
                    resp = await self._start_stream()
                if tr.done or ended():
                    held = out
                    break
                await self._write(resp, out)
                self._progressed(tr)
            out = _then(held, tr.finish())
        except UpstreamError as e:
            if resp is None:
                raise  # no byte went out: another upstream may answer
            fault = e.kind
            out = tr.abort(f"the upstream failed mid-stream: {e.message}",
                           504 if e.kind == "timeout" else 502)
        if resp is None and not got_data:  # no event at all is no answer, though some dialects
            return await self._malformed("the upstream sent an empty stream")  # end by ending
        return await self._end_stream(resp, out, tr, fault)

    async def _end_stream(self, resp: ResponseSink | None, out: bytes,
                          tr: StreamTranslator, fault: str) -> Answered:
        if resp is None:
            if tr.broken:
                return await self._malformed(_stream_error(tr))
            resp = await self._start_stream()
        if tr.dropped:
            self.progress.drop(tr.dropped)
        self.progress.usage = tr.usage
        self.progress.answered(tr.model, tr.finish_reason)
        if tr.error is not None:
            self.progress.error = tr.error.message
        out = _then(out, tr.closing())
        await self._finish(resp, out)
        if out:
            self._progressed(tr)
        return Answered(fault if fault != "ok" else "malformed" if tr.broken else "ok")

    def _progressed(self, tr: StreamTranslator) -> None:
        """After a write of the stream's frames (a plain call, not a coroutine wrapping the
        write: this runs once a frame of every stream)."""
        self.progress.chunks = tr.chunks
        if self.progress.first_content is None and tr.content_started:
            self.progress.first_content = time.perf_counter()

    async def _bridged(self, req: ChatRequest, whole: ChatResponse) -> Answered:
        """A stream for a client of an upstream that never streams, from its whole answer."""
        try:
            whole, lost = adapt_response(whole, self.client, self.policy)
            encoder = self.client.encoder(req)
            frame = encoder_for(self.entry.framing or self.client.framing)
            # all encoded before the 200 goes out, so that a failure can still be an HTTP error
            frames = [[frame(p) for p in encoder.encode(e)] for e in events_from_response(whole)]
        except Unsupported as e:
            await self.fail(ChatError(502, str(e), code="UNSUPPORTED"))
            return Answered("ok")
        except orjson.JSONEncodeError:
            return await self._malformed(_TOO_DEEP)
        self.progress.drop(lost)
        self.progress.usage = whole.usage
        self.progress.answered(whole.model, whole.finish_reason)
        resp = await self._start_stream()
        for group in frames:
            for data in group:
                await self._write(resp, data)
                self.progress.chunks += 1
            if self.progress.first_content is None and self.progress.chunks > 1:
                self.progress.first_content = time.perf_counter()
        await self._finish(resp, closing(frame))
        return Answered("ok")


def _stream_error(tr: StreamTranslator) -> str:
    return tr.error.message if tr.error else "the upstream stream is malformed"


def _then(first: bytes, last: bytes) -> bytes:
    """``first + last``, without copying ``first`` when ``last`` is empty, as it mostly is (what a
    stream's end adds after a read that brought the whole answer): compiled, ``+`` on bytes
    always copies both, and a translated answer is kilobytes."""
    return first + last if last else first
