"""The upstream attempts of one exchange: order (balancer), failover and retries, health, and
the upstream's error statuses. One attempt ends in exactly one of three typed results:
:class:`Answered` (the client has its answer), :class:`Retry` (this upstream failed before the
client got a byte: another may try), :class:`Final` (an answer that ends the attempts, e.g. the
upstream's 4xx)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from gateway.balancer import Balancer, NoCapacity, UpstreamState
from gateway.canonical import ChatError, ChatRequest
from gateway.carry import Unsupported
from gateway.config import GatewayConfig, HealthConfig, RouteConfig, UpstreamConfig
from gateway.dialects import Dialect, get, upstream_url_of
from gateway.errors import ParseError, UpstreamError
from gateway.exchange.headers import upstream_headers
from gateway.exchange.outcome import NONE, Attempt
from gateway.incoming import ClientRequest
from gateway.pipeline import adapt_request, parse_body
from gateway.upstream import Transport, UpstreamCall, upstream_request

if TYPE_CHECKING:
    from gateway.tracing import RequestTrace

__all__ = ["Answered", "AttemptLog", "ClientGone", "Final", "Retry", "UpstreamAnswer",
           "run_attempts"]


class ClientGone(Exception):
    """The client's connection broke while the gateway wrote to it."""


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__,
# several times the cost of a plain one, and this is built on every request. Written once.
# Its own __init__ (init=False): compiled, the one dataclasses generates runs interpreted
# (tests/test_canonical.py holds it to its field).
@dataclass(slots=True, init=False)
class Answered:
    """The client has its answer (sent through the exchange's sink)."""

    outcome: str
    """The attempt's outcome: ok, or the fault found while answering (malformed, connect, …)."""

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome


@dataclass(frozen=True, slots=True)
class Retry:
    error: ChatError
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Final:
    error: ChatError


# Its own __init__ (init=False): built on every request (tests/test_canonical.py holds it to
# its fields).
@dataclass(slots=True, init=False)
class AttemptLog:
    """What the attempts did so far (read by the exchange even when it is cut short)."""

    attempts: list[Attempt] = field(default_factory=list)
    upstream: str = NONE
    upstream_dialect: str = NONE
    upstream_wait: float = 0.0
    dropped: list[str] = field(default_factory=list)

    def __init__(self, attempts: list[Attempt] | None = None, upstream: str = NONE,
                 upstream_dialect: str = NONE, upstream_wait: float = 0.0,
                 dropped: list[str] | None = None) -> None:
        self.attempts = [] if attempts is None else attempts
        self.upstream = upstream
        self.upstream_dialect = upstream_dialect
        self.upstream_wait = upstream_wait
        self.dropped = [] if dropped is None else dropped


UpstreamAnswer = Callable[[ChatRequest, UpstreamCall, Dialect, bool], Awaitable[Answered]]
"""Answers the client from an upstream response: ``(request, call, dialect, upstream
streams)``; raises :class:`UpstreamError` when the upstream fails before the client got a byte."""


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__,
# several times the cost of a plain one, and this is built on every request. Written once.
# Its own __init__ (init=False), as Answered's.
@dataclass(slots=True, eq=False, init=False)
class AttemptContext:
    """What every attempt of one request shares."""

    route: RouteConfig
    states: dict[str, UpstreamState]
    health: HealthConfig
    transport: Transport
    balancer: Balancer
    request: ClientRequest
    """The client's request: what of it each upstream request carries (:mod:`.headers`)."""
    config: GatewayConfig
    answer: UpstreamAnswer
    log: Any
    request_id: str
    trace: RequestTrace | None
    """The request's spans (tracing on): one client span per attempt that calls an
    upstream."""

    def __init__(self, route: RouteConfig, states: dict[str, UpstreamState],
                 health: HealthConfig, transport: Transport, balancer: Balancer,
                 request: ClientRequest, config: GatewayConfig, answer: UpstreamAnswer, log: Any,
                 request_id: str, trace: RequestTrace | None) -> None:
        self.route = route
        self.states = states
        self.health = health
        self.transport = transport
        self.balancer = balancer
        self.request = request
        self.config = config
        self.answer = answer
        self.log = log
        self.request_id = request_id
        self.trace = trace


async def run_attempts(ctx: AttemptContext, req: ChatRequest, started: float,
                       log: AttemptLog) -> ChatError | None:
    """Try the route's upstreams in the balancer's order until one answers; ``None`` when one
    did (the client has its answer), else the error to answer with."""
    route = ctx.route
    order = ctx.balancer.order(route, ctx.states)
    allowed = route.retries.attempts or len(order)
    deadline = started + route.retries.total_timeout
    last: ChatError | None = None  # built only when no upstream answers (see client._too_large)
    for tried in range(1, allowed + 1):
        state = ctx.states[order[(tried - 1) % len(order)]]
        # (the attempt's own steps, here rather than in a coroutine of their own: every
        # suspension of the answer resumes each coroutine of the chain that awaits it)
        up = state.config
        dialect = get(up.dialect)
        # ``auto`` asks a dialect that only ever streams (``streams_only``, an optional
        # declaration) for its stream even for a whole answer, which is then assembled from it
        up_stream = (req.stream or getattr(dialect, "streams_only", False)) \
            if up.streaming == "auto" else up.streaming == "always"
        body = _render(req, dialect, up_stream, up, route, log)
        if isinstance(body, Final):
            return body.error
        log.upstream, log.upstream_dialect = state.name, dialect.name
        if state.limited:
            result = await _limited_call(ctx, req, state, dialect, body, up_stream, log)
        else:  # most upstreams: nothing to wait for, no context to enter
            result = await _call(ctx, req, state, dialect, body, up_stream, log)
        match result:
            case Answered():
                return None
            case Final():
                return result.error
            case Retry():
                last = result.error
        remaining = deadline - time.perf_counter()
        if tried >= allowed or remaining <= 0:
            break
        if result.retry_after:
            await asyncio.sleep(min(result.retry_after, route.retries.retry_after_max, remaining))
    if last is None:
        last = ChatError(502, "no upstream could be reached", code="BAD_GATEWAY")
    return last


async def _limited_call(ctx: AttemptContext, req: ChatRequest, state: UpstreamState,
                        dialect: Dialect, body: bytes, up_stream: bool,
                        log: AttemptLog) -> Answered | Retry | Final:
    """:func:`_call` in one of the upstream's ``max_inflight`` slots."""
    try:
        slots = await state.acquire()
    except NoCapacity:
        log.attempts.append(Attempt(state.name, "rejected"))
        return Retry(ChatError(503, f"upstream {state.name} is at capacity", code="UNAVAILABLE",
                               retry_after=state.config.queue_timeout))
    try:
        return await _call(ctx, req, state, dialect, body, up_stream, log)
    finally:
        if slots is not None:
            slots.release()


def _render(req: ChatRequest, dialect: Dialect, up_stream: bool, up: UpstreamConfig,
            route: RouteConfig, log: AttemptLog) -> bytes | Final:
    try:
        sent, lost = adapt_request(req, dialect, route.policies, up.custom_tools)
    except Unsupported as e:
        return Final(ChatError(400, str(e), code="UNSUPPORTED", param=e.fields[0]))
    if lost:
        log.dropped.extend(f for f in lost if f not in log.dropped)
    try:
        return orjson.dumps(dialect.render_request(sent, stream=up_stream, model=up.model,
                                                   max_tokens=up.max_tokens))
    except orjson.JSONEncodeError:  # read fine (1024 levels), cannot be written (254)
        return Final(ChatError(400, "invalid request: the body is nested too deeply to pass on",
                               code="BAD_REQUEST"))


async def _call(ctx: AttemptContext, req: ChatRequest, state: UpstreamState, dialect: Dialect,
                body: bytes, up_stream: bool, log: AttemptLog) -> Answered | Retry | Final:
    state.begin()
    trace = ctx.trace
    # (two ``try`` blocks: the second handles what goes wrong once the call exists, so that its
    # handlers never meet a call that may still be unset)
    try:
        try:
            headers = upstream_headers(ctx.request, ctx.config, state.config, dialect, up_stream,
                                       ctx.request_id)
            if trace is not None:  # its span is the upstream's parent: in the headers it gets
                trace.attempt(state, dialect, req, headers)
            up = state.config
            url = upstream_url_of(dialect, up.url, req.model or up.model, stream=up_stream)
            # (start_call's steps, here rather than in a coroutine of their own: each coroutine
            # of the chain that awaits the response head is resumed when it arrives)
            sent = time.perf_counter()
            # (a whole answer's request may wait a turn, to leave with the others of this
            # one: server.batch_writes; a stream's first byte waits for nothing)
            response = await ctx.transport.send(upstream_request(
                up, body, headers, stream=up_stream, url=url,
                batched=not req.stream and ctx.config.server.batch_writes))
            call = UpstreamCall(response, up, sent, time.perf_counter() - sent)
        except UpstreamError as e:
            return _upstream_failed(ctx, state, e, log)
        except (asyncio.CancelledError, ClientGone):
            state.trial = False  # the client went away before the upstream answered
            raise
        try:
            if call.response.status >= 400:
                return await _upstream_status(ctx, call, state, dialect, log)
            answered = await ctx.answer(req, call, dialect, up_stream)
        except UpstreamError as e:
            return _upstream_failed(ctx, state, e, log)
        except (asyncio.CancelledError, ClientGone):
            # The client went away: no fault of the upstream's, but an attempt it was (counted,
            # and in the access line), whatever it had answered so far.
            state.trial = False
            log.attempts.append(Attempt(state.name, "cancelled",
                                        time.perf_counter() - call.started, call.status))
            raise
        finally:
            log.upstream_wait += call.waited
            call.close()
    finally:
        if trace is not None:
            trace.attempt_ended()
    seconds = time.perf_counter() - call.started
    log.attempts.append(Attempt(state.name, answered.outcome, seconds,
                                call.response.status))
    if answered.outcome == "ok":
        state.succeeded()
    else:
        state.failed(ctx.health)
    return answered


def _upstream_failed(ctx: AttemptContext, state: UpstreamState, e: UpstreamError,
                     log: AttemptLog) -> Retry:
    state.failed(ctx.health)
    log.attempts.append(Attempt(state.name, e.kind))
    message = state.config.scrubber(e.message)
    ctx.log.warning("upstream_error", request_id=ctx.request_id,
                    upstream=state.name, kind=e.kind, error=message)
    status = 504 if e.kind == "timeout" else 502
    code = "GATEWAY_TIMEOUT" if status == 504 else "BAD_GATEWAY"
    return Retry(ChatError(status, f"upstream {state.name}: {message}", code=code))


async def _upstream_status(ctx: AttemptContext, call: UpstreamCall, state: UpstreamState,
                           dialect: Dialect, log: AttemptLog) -> Retry | Final:
    status = call.status
    raw = await call.read_error()
    err = ChatError(status, f"the upstream answered HTTP {status}")
    try:
        parsed = dialect.parse_error(parse_body(raw)) if raw else None
    except ParseError:
        parsed = None  # an HTML error page: its text is not for the client
    if parsed is not None:  # the upstream's words: they may quote what it was sent
        scrub = state.config.scrubber
        err = ChatError(status, scrub(parsed.message), scrub.optional(parsed.code),
                        scrub.optional(parsed.type), scrub.optional(parsed.param))
    log.attempts.append(Attempt(state.name, "status", time.perf_counter() - call.started,
                                status))
    if status == 429 or status >= 500:
        retry_after = call.retry_after()
        err.retry_after = retry_after if status in (429, 503) else None
        if status >= 500:
            state.failed(ctx.health)
        else:
            state.trial = False
        ctx.log.warning("upstream_status", request_id=ctx.request_id,
                        upstream=state.name, status=status)
        return Retry(err, retry_after)
    # Another 4xx is the client's problem: answer it now, never retry.
    state.succeeded()
    return Final(err)
