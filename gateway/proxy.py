"""One client exchange: read and translate the request, try upstreams, stream the answer back.

Dialect-neutral: everything dialect-specific is behind :class:`gateway.dialects.Dialect` and
:mod:`gateway.pipeline`. Retries and failover happen only before the first byte went to the
client; after it, a failure becomes the client dialect's error event and the stream ends.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from gateway.balancer import Balancer, NoCapacity, UpstreamState
from gateway.bridge import StreamAssembler
from gateway.canonical import ChatError, ChatRequest, ChatResponse
from gateway.config import UpstreamConfig
from gateway.dialects import Dialect, get
from gateway.errors import ParseError, UpstreamError
from gateway.framing import encoder_for
from gateway.keys import RECENT
from gateway.metrics import Metrics
from gateway.pipeline import (
    StreamTranslator,
    events_from_response,
    parse_body,
    with_session_echo,
)
from gateway.runtime import RouteEntry, Runtime
from gateway.upstream import UpstreamCall, has_userinfo, open_upstream

__all__ = ["UNROUTED", "Exchange", "error_response", "unrouted"]

_NONE = "none"
UNROUTED = _NONE
"""The ``route`` (and dialect and upstream) label of requests for a path no route serves."""
_JSON = "application/json"


def error_response(dialect: Dialect, err: ChatError, request_id: str | None = None,
                   ) -> web.Response:
    headers = {"X-Request-ID": request_id} if request_id else {}
    if err.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(err.retry_after)))
    return web.Response(status=err.status, body=orjson.dumps(dialect.render_error(err)),
                        content_type=_JSON, headers=headers)


def unrouted(request: web.Request, response: web.Response, metrics: Metrics, log: Any,
             ) -> web.Response:
    """Counts and logs the answer to a path no route serves, as a proxy's access log shows the
    scanners and the typos too. One ``none`` label for all such paths: a path in a label would
    let any client grow the metrics without bound."""
    request_id = _request_id(request)
    response.headers["X-Request-ID"] = request_id
    metrics.requests.labels(UNROUTED, _NONE, _NONE, _NONE, str(response.status)).inc()
    log.info("access", request_id=request_id, route=None, path=request.path,
             method=request.method, status=response.status)
    return response


@dataclass(slots=True)
class _Outcome:
    status: int = 0
    upstream: str = _NONE
    upstream_dialect: str = _NONE
    stream: bool = False
    first_text: float | None = None
    chunks: int = 0
    upstream_wait: float = 0.0
    client_wait: float = 0.0
    error: str | None = None
    disconnected: bool = False
    attempts: list[str] = field(default_factory=list)


class Exchange:
    """Serves one request on one route; :meth:`run` returns the response it sent or built."""

    def __init__(self, request: web.Request, runtime: Runtime, entry: RouteEntry,
                 session: aiohttp.ClientSession, metrics: Metrics, balancer: Balancer,
                 log: Any) -> None:
        self.request = request
        self.runtime = runtime
        self.entry = entry
        self.client = entry.client
        self.session = session
        self.metrics = metrics
        self.balancer = balancer
        self.log = log
        self.started = time.perf_counter()
        self.request_id = _request_id(request)
        self.out = _Outcome()

    # --- the whole exchange ----------------------------------------------------------------

    async def run(self) -> web.StreamResponse:
        route = self.entry.config.path
        inflight = self.metrics.inflight.labels(route)
        inflight.inc()
        response: web.StreamResponse | None = None
        try:
            response = await self._serve()
            return response
        except asyncio.CancelledError:
            self.out.disconnected = True
            raise
        except Exception:
            if self.out.status:  # the answer already began: nothing better can be sent
                raise
            # A gateway bug: still an answer in the client's dialect, counted and logged.
            self.log.exception("internal_error", request_id=self.request_id, path=route)
            response = self._fail(ChatError(500, "internal gateway error",
                                            code="INTERNAL_ERROR"))
            return response
        finally:
            inflight.dec()
            self._record(response)

    async def _serve(self) -> web.StreamResponse:
        if self.request.method != "POST":
            refused = self._fail(ChatError(
                405, f"{self.request.method} is not allowed here; use POST",
                code="METHOD_NOT_ALLOWED"))
            refused.headers["Allow"] = "POST, OPTIONS"
            return refused
        denied = self._check_auth()
        if denied is not None:
            return denied
        try:
            raw = await self._read_body()
        except _TooLarge:
            return self._fail(ChatError(
                413, f"the request body is over {self.runtime.config.server.max_body_bytes} "
                     "bytes", code="PAYLOAD_TOO_LARGE"))
        try:
            req = self.client.parse_request(parse_body(raw))
        except ParseError as e:
            return self._fail(ChatError(400, f"invalid request: {e}", param=e.where or None))
        req.stream = self._wants_stream(req)
        self.out.stream = req.stream
        return await self._attempts(req)

    # --- the client side -------------------------------------------------------------------

    def _check_auth(self) -> web.Response | None:
        keys = self.runtime.config.auth.api_keys
        if not keys:
            return None
        given = self.request.headers.get("api-key")
        auth = self.request.headers.get("Authorization", "")
        if given is None and auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        if given is not None and any(_same(given, k) for k in keys):
            return None
        return self._fail(ChatError(401, "a valid API key is required", code="UNAUTHORIZED",
                                    type="authentication_error"))

    async def _read_body(self) -> bytes:
        limit = self.runtime.config.server.max_body_bytes
        length = self.request.content_length
        if length is not None:
            if length > limit:
                raise _TooLarge
            try:
                return await self.request.read()  # exactly ``length`` bytes, one buffer
            except web.HTTPRequestEntityTooLarge:  # the app's own limit, set at startup
                raise _TooLarge from None
        buf = bytearray()
        async for chunk in self.request.content.iter_chunked(65536):
            buf += chunk
            if len(buf) > limit:
                raise _TooLarge
        return bytes(buf)

    def _wants_stream(self, req: ChatRequest) -> bool:
        if self.entry.stream is not None:
            return self.entry.stream
        if req.stream:
            return True
        return (self.client.stream_by_accept
                and "text/event-stream" in self.request.headers.get("Accept", ""))

    def _fail(self, err: ChatError) -> web.Response:
        self.out.status = err.status
        self.out.error = err.message
        return error_response(self.client, err, self.request_id)

    # --- upstream attempts -----------------------------------------------------------------

    async def _attempts(self, req: ChatRequest) -> web.StreamResponse:
        route = self.entry.config
        states = self.runtime.states
        order = self.balancer.order(route, states)
        attempts = route.retries.attempts or len(order)
        deadline = self.started + route.retries.total_timeout
        last: ChatError = ChatError(502, "no upstream could be reached", code="BAD_GATEWAY")
        tried = 0
        while tried < attempts:
            name = order[tried % len(order)]
            tried += 1
            state = states[name]
            try:
                result = await self._attempt(req, state)
            except _Final as final:
                return final.response
            except NoCapacity:
                self._count_attempt(name, "rejected")
                last = ChatError(503, f"upstream {name} is at capacity", code="UNAVAILABLE",
                                 retry_after=state.config.queue_timeout)
                continue
            if isinstance(result, web.StreamResponse):
                return result
            last, retry_after = result
            remaining = deadline - time.perf_counter()
            if tried >= attempts or remaining <= 0:
                break
            if retry_after:
                wait = min(retry_after, route.retries.retry_after_max, remaining)
                await asyncio.sleep(wait)
        return self._fail(last)

    async def _attempt(self, req: ChatRequest, state: UpstreamState,
                       ) -> web.StreamResponse | tuple[ChatError, float | None]:
        """The response when this attempt answered the client, else the error and the
        ``Retry-After`` to honour before the next attempt."""
        up = state.config
        dialect = get(up.dialect)
        up_stream = req.stream if up.streaming == "auto" else up.streaming == "always"
        try:
            body = orjson.dumps(dialect.render_request(req, stream=up_stream, model=up.model))
        except orjson.JSONEncodeError as e:  # read fine (1024 levels), cannot be written (254)
            raise _Final(self._fail(ChatError(
                400, "invalid request: the body is nested too deeply to pass on",
                code="BAD_REQUEST"))) from e
        self.out.upstream, self.out.upstream_dialect = state.name, dialect.name
        now = time.monotonic()
        async with state.slot():
            state.begin(now)
            try:
                async with open_upstream(self.session, up, body, self._upstream_headers(up),
                                         stream=up_stream) as call:
                    if call.status >= 400:
                        return await self._upstream_status(call, state, dialect)
                    response = await self._answer(req, call, dialect, up_stream)
                    self.out.upstream_wait += call.waited
                    self.metrics.upstream_duration.labels(state.name).observe(
                        time.perf_counter() - call.started)
            except UpstreamError as e:
                return self._upstream_failed(state, e)
            except asyncio.CancelledError:
                state.trial = False
                raise
        if self.out.error is None or self.out.status < 500:
            state.succeeded()
            self._count_attempt(state.name, "ok")
        else:
            state.failed(self.runtime.config.health, time.monotonic())
            self._count_attempt(state.name, "malformed")
        return response

    def _upstream_failed(self, state: UpstreamState, e: UpstreamError,
                         ) -> tuple[ChatError, float | None]:
        state.failed(self.runtime.config.health, time.monotonic())
        self.metrics.upstream_errors.labels(state.name, e.kind).inc()
        self._count_attempt(state.name, e.kind)
        self.log.warning("upstream_error", request_id=self.request_id, upstream=state.name,
                         kind=e.kind, error=e.message)
        status = 504 if e.kind == "timeout" else 502
        code = "GATEWAY_TIMEOUT" if status == 504 else "BAD_GATEWAY"
        return ChatError(status, f"upstream {state.name}: {e.message}", code=code), None

    async def _upstream_status(self, call: UpstreamCall, state: UpstreamState,
                               dialect: Dialect) -> tuple[ChatError, float | None]:
        status = call.status
        raw = await call.read_error()
        message = f"the upstream answered HTTP {status}"
        err = ChatError(status, message)
        try:
            parsed = dialect.parse_error(parse_body(raw)) if raw else None
        except ParseError:
            parsed = None  # an HTML error page: its text is not for the client
        if parsed is not None:
            err = ChatError(status, parsed.message, parsed.code, parsed.type, parsed.param)
        retry_after = call.retry_after()
        if status == 429 or status >= 500:
            err.retry_after = retry_after if status in (429, 503) else None
            self.metrics.upstream_errors.labels(state.name, "status").inc()
            self._count_attempt(state.name, "status")
            if status >= 500:
                state.failed(self.runtime.config.health, time.monotonic())
            else:
                state.trial = False
            self.log.warning("upstream_status", request_id=self.request_id,
                             upstream=state.name, status=status)
            return err, retry_after
        # Another 4xx is the client's problem: answer it now, never retry.
        state.succeeded()
        self._count_attempt(state.name, "status")
        raise _Final(self._fail(err))

    def _upstream_headers(self, up: UpstreamConfig) -> dict[str, str]:
        headers = {"Content-Type": _JSON, "X-Request-ID": self.request_id}
        own = {k.lower() for k in up.headers}
        auth = self.request.headers.get("Authorization")
        # The client's credentials go on only when the gateway does not check keys itself
        # (then they are the gateway's) and the upstream has none of its own: headers, or a
        # user:password@ in its URL (which aiohttp also refuses to combine with the header).
        if (auth and not self.runtime.config.auth.api_keys
                and not own & {"authorization", "api-key"} and not has_userinfo(up)):
            headers["Authorization"] = auth
        headers.update(up.headers)
        return headers

    def _count_attempt(self, upstream: str, outcome: str) -> None:
        self.metrics.attempts.labels(upstream, outcome).inc()
        self.out.attempts.append(f"{upstream}:{outcome}")

    # --- answering -------------------------------------------------------------------------

    async def _answer(self, req: ChatRequest, call: UpstreamCall, dialect: Dialect,
                      up_stream: bool) -> web.StreamResponse:
        if up_stream and call.response.content_type == "text/html":
            # An error page served with 200 (a proxy's, a login wall's) is never a stream; read
            # as one it would give no events, and the protocol dialects end by ending.
            return self._malformed("the upstream answered with an HTML page, not a stream")
        if req.stream and up_stream:
            return await self._pipe_stream(req, call, dialect)
        if req.stream:
            resp = await self._whole_from_upstream(req, call, dialect, up_stream=False)
            if isinstance(resp, ChatError):
                return self._fail(resp)
            return await self._synthesized_stream(req, resp)
        resp = await self._whole_from_upstream(req, call, dialect, up_stream=up_stream)
        if isinstance(resp, ChatError):
            return self._fail(resp)
        try:
            body = orjson.dumps(self.client.render_response(resp, req))
        except orjson.JSONEncodeError:
            return self._malformed(_TOO_DEEP)
        self.metrics.count_usage(self.out.upstream, resp.usage)
        self.out.status = 200
        self.out.first_text = time.perf_counter()
        return web.Response(body=body, content_type=_JSON,
                            headers={"X-Request-ID": self.request_id})

    async def _whole_from_upstream(self, req: ChatRequest, call: UpstreamCall,
                                   dialect: Dialect, *, up_stream: bool,
                                   ) -> ChatResponse | ChatError:
        if up_stream:
            assembler = StreamAssembler(dialect, call.config.max_line_bytes)
            got_data = False
            async with call.whole_deadline():
                async for chunk in call.chunks_of():
                    got_data = got_data or bool(chunk.strip())
                    assembler.feed(chunk)
                    if assembler.error is not None:
                        break
            if not got_data:
                self.metrics.upstream_errors.labels(self.out.upstream, "malformed").inc()
                return ChatError(502, "the upstream sent an empty stream", code="BAD_GATEWAY")
            resp = assembler.finish()
            err = assembler.error
            if err is not None:
                status = 502 if assembler.broken or err.status < 400 else err.status
                return ChatError(status, err.message, err.code)
            return with_session_echo(resp, req)
        raw = await call.read_whole()
        try:
            body = parse_body(raw)
            declared = dialect.parse_error(body)
            if declared is not None:
                return ChatError(502, declared.message, declared.code, declared.type)
            return with_session_echo(dialect.parse_response(body), req)
        except ParseError as e:
            self.metrics.upstream_errors.labels(self.out.upstream, "malformed").inc()
            return ChatError(502, f"the upstream answer could not be read: {e}",
                             code="BAD_GATEWAY")

    async def _start_stream(self) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={
            "Content-Type": self.entry.stream_content_type,
            "Cache-Control": "no-cache",
            "X-Request-ID": self.request_id,
            "X-Accel-Buffering": "no",
        })
        await resp.prepare(self.request)
        self.out.status = 200
        return resp

    async def _write(self, resp: web.StreamResponse, data: bytes) -> None:
        t0 = time.perf_counter()
        try:
            await resp.write(data)
        except (ConnectionError, aiohttp.ClientConnectionResetError) as e:
            self.out.disconnected = True
            raise asyncio.CancelledError from e
        finally:
            self.out.client_wait += time.perf_counter() - t0

    async def _pipe_stream(self, req: ChatRequest, call: UpstreamCall,
                           dialect: Dialect) -> web.StreamResponse:
        tr = StreamTranslator(dialect, self.client, req, max_size=call.config.max_line_bytes)
        resp: web.StreamResponse | None = None
        got_data = False
        try:
            async for chunk in call.chunks_of():
                got_data = got_data or bool(chunk.strip())
                out = tr.feed(chunk)
                if not out:
                    continue
                if resp is None:
                    if tr.broken:  # nothing sent yet: a plain HTTP error says it best
                        return self._stream_broken_early(tr)
                    resp = await self._start_stream()
                await self._write(resp, out)
                if self.out.first_text is None and tr.text_chars:
                    self.out.first_text = time.perf_counter()
                if tr.done:
                    break
            out = tr.finish()
        except UpstreamError as e:
            self.metrics.upstream_errors.labels(self.out.upstream, e.kind).inc()
            if resp is None:
                raise
            out = tr.abort(f"the upstream failed mid-stream: {e.message}",
                           504 if e.kind == "timeout" else 502)
        if resp is None:
            if not got_data:  # no event at all is no answer, though some dialects end by ending
                return self._malformed("the upstream sent an empty stream")
            if tr.broken:
                return self._stream_broken_early(tr)
            resp = await self._start_stream()
        if out:
            await self._write(resp, out)
        self.out.chunks = tr.chunks
        if tr.broken:
            self.metrics.upstream_errors.labels(self.out.upstream, "malformed").inc()
        if tr.error is not None:
            self.out.error = tr.error.message
        self.metrics.count_usage(self.out.upstream, tr.usage)
        await resp.write_eof()
        return resp

    def _malformed(self, message: str) -> web.Response:
        self.metrics.upstream_errors.labels(self.out.upstream, "malformed").inc()
        return self._fail(ChatError(502, message, code="BAD_GATEWAY"))

    def _stream_broken_early(self, tr: StreamTranslator) -> web.Response:
        message = tr.error.message if tr.error else "the upstream stream is malformed"
        return self._fail(ChatError(502, message, code="BAD_GATEWAY"))

    async def _synthesized_stream(self, req: ChatRequest, whole: ChatResponse,
                                  ) -> web.StreamResponse:
        """A stream for a client of an upstream that never streams, from its whole answer."""
        encoder = self.client.encoder(req)
        frame = encoder_for(self.client.framing)
        try:  # all encoded before the 200 goes out, so that a failure can still be a 502
            frames = [[frame(p) for p in encoder.encode(e)] for e in events_from_response(whole)]
        except orjson.JSONEncodeError:
            return self._malformed(_TOO_DEEP)
        resp = await self._start_stream()
        chunks = 0
        for group in frames:
            for data in group:
                await self._write(resp, data)
                chunks += 1
            if self.out.first_text is None and chunks > 1:
                self.out.first_text = time.perf_counter()
        self.out.chunks = chunks
        self.metrics.count_usage(self.out.upstream, whole.usage)
        await resp.write_eof()
        return resp

    # --- accounting ------------------------------------------------------------------------

    def _record(self, response: web.StreamResponse | None) -> None:
        o = self.out
        if response is not None and not o.status:
            o.status = response.status
        if o.disconnected:
            self.metrics.client_disconnects.labels(self.entry.config.path).inc()
            o.status = o.status or 499
        total = time.perf_counter() - self.started
        route = self.entry.config.path
        labels = (route, self.client.name, o.upstream, o.upstream_dialect)
        m = self.metrics
        m.requests.labels(*labels, str(o.status)).inc()
        self.request.app[RECENT].add(route, total, o.status)
        m.request_duration.labels(*labels, "true" if o.stream else "false").observe(total)
        m.overhead.labels(route).observe(max(0.0, total - o.upstream_wait - o.client_wait))
        ttft = None
        if o.first_text is not None:
            ttft = o.first_text - self.started
            m.ttft.labels(route, o.upstream).observe(ttft)
        if o.chunks:
            m.stream_chunks.labels(route, o.upstream).inc(o.chunks)
        self.log.info(
            "access", request_id=self.request_id, route=route, client_dialect=self.client.name,
            upstream=o.upstream, upstream_dialect=o.upstream_dialect, status=o.status,
            stream=o.stream, duration_ms=round(total * 1000, 3),
            ttft_ms=None if ttft is None else round(ttft * 1000, 3), chunks=o.chunks,
            attempts=o.attempts or None, error=o.error, client_disconnected=o.disconnected)


_TOO_DEEP = "the upstream answer is nested too deeply to pass on"


class _TooLarge(Exception):
    pass


class _Final(Exception):
    """An answer that ends the attempts (a 4xx from the upstream)."""

    def __init__(self, response: web.Response) -> None:
        self.response = response


def _request_id(request: web.Request) -> str:
    rid = request.headers.get("X-Request-ID", "")
    if rid and len(rid) <= 128 and rid.isprintable() and rid.isascii():
        return rid
    return os.urandom(16).hex()  # the shape of uuid4().hex at a quarter of its cost


def _same(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode(), b.encode())
