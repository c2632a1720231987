"""What happened to one request, as one immutable record, and the one place that writes it to
the metrics, the access log and the status page's traffic window (as Envoy writes its access log
from one stream info object).

Every request is counted exactly once, with the status the client saw: :func:`record` is called
once per request, from :func:`gateway.exchange.serve`'s ``finally`` and for refusals outside any
route, and it is the only writer of request and attempt metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.canonical import Usage
from gateway.carry import dropped_label
from gateway.forwarding import client_address
from gateway.metric_children import count_usage
from gateway.metrics import Metrics
from gateway.traffic import RecentTraffic

if TYPE_CHECKING:
    from gateway.exchange.answer import Answerer
    from gateway.exchange.attempts import AttemptLog
    from gateway.incoming import ClientRequest
    from gateway.runtime import RouteEntry, Runtime
    from gateway.tracing import RequestTrace

__all__ = ["NONE", "Attempt", "Outcome", "outcome_of", "record"]

NONE = "none"
"""The label of what a request never reached (an upstream, a route)."""
_ERROR_KINDS = frozenset({"connect", "timeout", "status", "malformed"})


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__,
# several times the cost of a plain one, and this is built on every request. Written once.
# Its own __init__ (init=False): compiled, the one dataclasses generates runs interpreted
# (tests/test_canonical.py holds it to the fields).
@dataclass(slots=True, init=False)
class Attempt:
    """One try of one upstream."""

    upstream: str
    outcome: str
    """ok, connect, timeout, status, malformed, rejected (no capacity), or cancelled (the client
    went away while the upstream answered: not the upstream's fault)."""
    seconds: float | None = None
    """Upstream request sent to its last byte read (attempts that got an answer)."""
    status: int | None = None
    """The upstream's HTTP status (attempts that got one)."""

    def __init__(self, upstream: str, outcome: str, seconds: float | None = None,
                 status: int | None = None) -> None:
        self.upstream = upstream
        self.outcome = outcome
        self.seconds = seconds
        self.status = status


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__,
# several times the cost of a plain one, and this is built on every request. Written once.
# Its own __init__, as Attempt's.
@dataclass(slots=True, kw_only=True, eq=False, init=False)
class Outcome:
    """Written once, when it is built, and only read after (by :func:`record`, the tracer and
    the tests' spies). Compared by identity: one record per request, never a value to match."""

    request_id: str
    route: str
    """The route's path, or ``none`` for a path no route serves."""
    client_dialect: str
    status: int
    """What the client saw; 499 when it went away before its answer ended (even after a 200
    went out: the answer it got is not the whole one)."""
    duration: float
    upstream: str = NONE
    """The upstream of the last attempt."""
    upstream_dialect: str = NONE
    stream: bool = False
    ttft: float | None = None
    """Request received to the first answer content sent."""
    upstream_wait: float = 0.0
    client_wait: float = 0.0
    chunks: int = 0
    """Stream frames sent to the client, also when it went away before the end (and counted in
    ``gateway_stream_chunks_total`` then too)."""
    attempts: tuple[Attempt, ...] = ()
    dropped: tuple[str, ...] = ()
    usage: Usage | None = None
    error: str | None = None
    disconnected: bool = False
    path: str | None = None
    """For a path no route serves: the path (without its query) and method, for the log."""
    method: str | None = None
    client: str | None = None
    """The client's address: the peer, or behind trusted proxies the first address of their
    ``X-Forwarded-For`` chain that is not one (:mod:`gateway.forwarding`)."""
    user_agent: str | None = None
    request_bytes: int = 0
    """Request body bytes received."""
    response_bytes: int = 0
    """Response body bytes sent: a whole answer's body, or every stream frame written."""
    model: str | None = None
    """The model the client named."""
    response_model: str | None = None
    """The model the answer says it came from."""
    finish_reason: str | None = None
    """Canonical (``stop``, ``length``, ``tool_calls``, …), when the answer finished."""
    trace: RequestTrace | None = None
    """The request's spans while tracing is on (:mod:`gateway.tracing`), ended by
    :func:`record`."""
    key: str | None = None
    """The name of the named key (``auth.keys``) the request presented: never the key."""

    def __init__(self, *, request_id: str, route: str, client_dialect: str, status: int,
                 duration: float, upstream: str = NONE, upstream_dialect: str = NONE,
                 stream: bool = False, ttft: float | None = None, upstream_wait: float = 0.0,
                 client_wait: float = 0.0, chunks: int = 0, attempts: tuple[Attempt, ...] = (),
                 dropped: tuple[str, ...] = (), usage: Usage | None = None,
                 error: str | None = None, disconnected: bool = False, path: str | None = None,
                 method: str | None = None, client: str | None = None,
                 user_agent: str | None = None, request_bytes: int = 0,
                 response_bytes: int = 0, model: str | None = None,
                 response_model: str | None = None, finish_reason: str | None = None,
                 trace: RequestTrace | None = None, key: str | None = None) -> None:
        self.request_id = request_id
        self.route = route
        self.client_dialect = client_dialect
        self.status = status
        self.duration = duration
        self.upstream = upstream
        self.upstream_dialect = upstream_dialect
        self.stream = stream
        self.ttft = ttft
        self.upstream_wait = upstream_wait
        self.client_wait = client_wait
        self.chunks = chunks
        self.attempts = attempts
        self.dropped = dropped
        self.usage = usage
        self.error = error
        self.disconnected = disconnected
        self.path = path
        self.method = method
        self.client = client
        self.user_agent = user_agent
        self.request_bytes = request_bytes
        self.response_bytes = response_bytes
        self.model = model
        self.response_model = response_model
        self.finish_reason = finish_reason
        self.trace = trace
        self.key = key


def outcome_of(entry: RouteEntry, request_id: str, started: float, answerer: Answerer,
               attempts: AttemptLog, stream: bool, disconnected: bool, request: ClientRequest,
               runtime: Runtime, model: str | None, trace: RequestTrace | None) -> Outcome:
    """The outcome of a request a route served (:func:`gateway.exchange.serve`), once it
    ended."""
    p = answerer.progress
    first = p.first_content
    dropped, answer_dropped = attempts.dropped, p.dropped
    return Outcome(
        request_id=request_id, route=entry.config.path, client_dialect=entry.client.name,
        status=499 if disconnected else p.status or 500,
        duration=time.perf_counter() - started,
        upstream=attempts.upstream, upstream_dialect=attempts.upstream_dialect, stream=stream,
        ttft=None if first is None else first - started,
        upstream_wait=attempts.upstream_wait, client_wait=p.client_wait, chunks=p.chunks,
        attempts=tuple(attempts.attempts),
        # (most requests drop nothing: no list, dict and tuple built to say so)
        dropped=tuple(dict.fromkeys([*dropped, *answer_dropped]))
        if dropped or answer_dropped else (),
        usage=p.usage, error=p.error, disconnected=disconnected,
        client=client_address(request, runtime.config.server.trusted_proxies),
        user_agent=request.headers.get("User-Agent"), request_bytes=request.content.total_bytes,
        response_bytes=p.sent_bytes, model=model, response_model=p.model,
        finish_reason=p.finish_reason, trace=trace)


def record(o: Outcome, metrics: Metrics, log: Any, recent: RecentTraffic | None,
           on_outcome: Callable[[Outcome], None] | None = None) -> None:
    """The request's metrics, its access log line, its status-page sample and its spans; then
    ``on_outcome`` (the app's observer: :attr:`gateway.exchange.Env.on_outcome`) is given it."""
    trace = o.trace
    if trace is not None:
        trace.finish(o)
    m = metrics
    route, upstream, status = o.route, o.upstream, o.status
    # (children by subscript: a dict's own lookup, each made on its first write)
    series = m.route_series[(route, o.client_dialect, upstream, o.upstream_dialect)]
    series.by_status[status].inc()
    for a in o.attempts:
        m.attempts.children[(a.upstream, a.outcome)].inc()
        if a.outcome in _ERROR_KINDS:
            m.upstream_errors.children[(a.upstream, a.outcome)].inc()
        if a.seconds is not None:
            m.upstream_duration.children[(a.upstream,)].observe(a.seconds)
    info = log.is_enabled_for(logging.INFO)
    if o.path is None:  # a route answered (or refused): the latency series are the route's
        duration, stream, ttft = o.duration, o.stream, o.ttft
        (series.duration_stream if stream else series.duration_whole).observe(duration)
        series.overhead.observe(max(0.0, duration - o.upstream_wait - o.client_wait))
        if ttft is not None:
            series.ttft.observe(ttft)
        if o.chunks:
            series.stream_chunks.inc(o.chunks)
        if o.disconnected:
            m.client_disconnects.children[(route,)].inc()
        for f in o.dropped:
            m.dropped_fields.labels(route, dropped_label(f)).inc()
        if o.usage is not None:
            count_usage(m.tokens, upstream, o.usage)
        if recent is not None:
            recent.add(route, duration, status, stream=stream, ttft=ttft)
        if info:  # the access line is built only to be written
            log.info(
                "access", request_id=o.request_id, route=route,
                client_dialect=o.client_dialect, upstream=upstream,
                upstream_dialect=o.upstream_dialect, status=status, stream=stream,
                duration_ms=round(duration * 1000, 3),
                ttft_ms=None if ttft is None else round(ttft * 1000, 3), chunks=o.chunks,
                attempts=[f"{a.upstream}:{a.outcome}" for a in o.attempts] or None,
                error=o.error, client_disconnected=o.disconnected,
                dropped=list(o.dropped) or None, client=o.client, user_agent=o.user_agent,
                request_bytes=o.request_bytes, response_bytes=o.response_bytes,
                trace_id=trace.trace_id if trace else None, key=o.key)
    elif info:
        log.info("access", request_id=o.request_id, route=None if route == NONE else route,
                 path=o.path, method=o.method,
                 status=status, client=o.client, user_agent=o.user_agent,
                 request_bytes=o.request_bytes, response_bytes=o.response_bytes)
    if on_outcome is not None:
        on_outcome(o)
