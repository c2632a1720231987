"""One client exchange on one route: the client side (:mod:`.client`), the upstream attempts
(:mod:`.attempts`), the answer (:mod:`.answer`), and one :class:`~.outcome.Outcome` recorded
once (:mod:`.outcome`).

Dialect-neutral: everything dialect-specific is behind :class:`gateway.dialects.Dialect` and
:mod:`gateway.pipeline`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.balancer import Balancer
from gateway.canonical import ChatError
from gateway.exchange.access import Refused, request_id_of
from gateway.exchange.answer import Answerer, ClientGone, error_response
from gateway.exchange.attempts import AttemptContext, AttemptLog, run_attempts
from gateway.exchange.client import Keep, read_chat_request
from gateway.exchange.kept import KeptStore
from gateway.exchange.outcome import NONE, Outcome, outcome_of, record
from gateway.exchange.sink import AiohttpSink, SinkFactory
from gateway.forwarding import client_address
from gateway.incoming import ClientRequest
from gateway.metrics import Metrics
from gateway.runtime import RouteEntry, Runtime
from gateway.traffic import RecentTraffic
from gateway.upstream import Transport

if TYPE_CHECKING:
    from gateway.limits import Limits
    from gateway.tracing import Tracing

__all__ = ["Env", "SinkFactory", "error_response", "serve", "unrouted"]


@dataclass(frozen=True, slots=True)
class Env:
    """What every exchange of an app shares."""

    transport: Transport
    metrics: Metrics
    balancer: Balancer
    recent: RecentTraffic
    log: Any
    tracing: Tracing | None = None
    """OpenTelemetry, when configured (:mod:`gateway.tracing`); ``None`` costs nothing."""
    sink: SinkFactory = AiohttpSink
    """How each answer is written (:mod:`.sink`); a test passes one that watches or fails."""
    responses: KeptStore | None = None
    """Stored responses kept by the gateway (``responses_store``), when configured."""
    limits: Limits | None = None
    """The named keys' limits and usage (:mod:`gateway.limits`); reached only when the config
    has ``auth.keys``."""
    on_outcome: Callable[[Outcome], None] | None = None
    """Called with each request's :class:`~.outcome.Outcome` once it is recorded (a test's
    spy on what was recorded); ``None`` costs one check."""


async def serve(request: ClientRequest, env: Env, runtime: Runtime,
                entry: RouteEntry) -> web.StreamResponse:
    """Serve one request on one route; returns what the aiohttp handler returns (the answer
    itself, or one already written: :mod:`.sink`)."""
    started = time.perf_counter()
    request_id = request_id_of(request)
    trace = env.tracing.begin(request, entry) if env.tracing is not None else None
    config = runtime.config
    sink = env.sink(request)
    answerer = Answerer(sink, entry, request_id, config.server.stream_accelerators)
    attempts = AttemptLog()
    answerer.request_dropped = attempts.dropped
    inflight = env.metrics.inflight.children[(entry.config.path,)]
    inflight.inc()
    stream, disconnected = False, False
    model: str | None = None
    grant = (env.limits.grant(request, config)
             if env.limits is not None and config.auth.keys else None)
    try:
        try:
            keep = Keep(runtime, env.responses, env.log, request_id) \
                if entry.responses_state is not None else None  # (most routes: nothing built)
            req, keeping = await read_chat_request(request, entry, config, keep)
            stream, model = req.stream, req.model
            if grant is not None:
                await grant.admit(entry, req, answerer)
            if keeping is not None:  # the finished answer is kept before it goes out
                sink = answerer.sink = keeping.sink(sink, entry)
            ctx = AttemptContext(
                entry.config, runtime.states, config.health, env.transport, env.balancer,
                request, config, answerer.answer, env.log, request_id, trace)
            error = await run_attempts(ctx, req, started, attempts)
            if error is not None:
                await answerer.fail(error)
        except Refused as r:
            await answerer.fail(r.error, r.headers)
        except (asyncio.CancelledError, ClientGone):
            raise
        except Exception:
            # A gateway bug: logged and counted; an answer in the client's dialect when none
            # began, else the answer is cut (never passed off as a clean finish).
            env.log.exception("internal_error", request_id=request_id, path=entry.config.path)
            if answerer.progress.status:
                answerer.progress.error = "internal gateway error"
                return sink.cut()
            await answerer.fail(ChatError(500, "internal gateway error", code="INTERNAL_ERROR"))
        return sink.response()
    except asyncio.CancelledError:
        disconnected = True
        raise
    except ClientGone:
        # What aiohttp itself raises in a handler whose client went away: it ends quietly.
        disconnected = True
        raise asyncio.CancelledError from None
    finally:
        inflight.dec()
        outcome = outcome_of(entry, request_id, started, answerer, attempts, stream,
                             disconnected, request, runtime, model, trace)
        if grant is not None:
            grant.settle(outcome)
        record(outcome, env.metrics, env.log, env.recent, env.on_outcome)


def unrouted(request: web.Request, response: web.Response, env: Env,
             trusted_proxies: Sequence[str] = ()) -> web.Response:
    """Counts and logs the answer to a path no route serves, as a proxy's access log shows the
    scanners and the typos too. One ``none`` label for all such paths: a path in a label would
    let any client grow the metrics without bound."""
    request_id = request_id_of(request)
    response.headers["X-Request-ID"] = request_id
    record(Outcome(request_id=request_id, route=NONE, client_dialect=NONE,
                   status=response.status, duration=0.0, path=request.path,
                   method=request.method, client=client_address(request, trusted_proxies),
                   user_agent=request.headers.get("User-Agent"),
                   request_bytes=request.content.total_bytes,
                   response_bytes=response.content_length or 0), env.metrics, env.log, None,
           env.on_outcome)
    return response
