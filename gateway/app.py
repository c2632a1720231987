"""``create_app(config)``: the aiohttp application, built by a factory."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web

from gateway import handlers, status
from gateway.admin import add_admin_routes
from gateway.balancer import Balancer, UpstreamState
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.config import GatewayConfig, load_config
from gateway.cors import cors_headers
from gateway.edge import BodyTimeout, edge_middleware_with
from gateway.errors import ConfigError, UpstreamError
from gateway.exchange import Env
from gateway.exchange.kept import KeptStore
from gateway.exchange.outcome import Outcome
from gateway.exchange.sink import AiohttpSink, SinkFactory
from gateway.keys import (
    BALANCER,
    CLOCK,
    ENV,
    LIMITS,
    LOG,
    METRICS,
    RECENT,
    RELOADER,
    RUNTIME,
    TRACING,
    TRANSPORT,
    WORKER,
    RuntimeHolder,
)
from gateway.log import get_logger
from gateway.metrics import Metrics
from gateway.runtime import Runtime
from gateway.tracing_settings import tracing_settings
from gateway.traffic import RecentTraffic
from gateway.upstream import Transport, UpstreamRequest, make_transport
from gateway.worker_status import WorkerFacts

if TYPE_CHECKING:
    from gateway.tracing import Tracing

__all__ = ["create_app"]


def create_app(config: GatewayConfig, *, config_path: str | Path | None = None,
               metrics: Metrics | None = None,
               transport: Transport | None = None,
               tracing: Tracing | None = None,
               sink: SinkFactory = AiohttpSink,
               clock: Clock = SYSTEM_CLOCK,
               on_outcome: Callable[[Outcome], None] | None = None) -> web.Application:
    """``transport``: how upstreams are reached (default: the client ``server.upstream_client``
    names, opened and closed with the app); a test passes a
    :class:`~gateway.upstream.MemoryTransport`. ``tracing``: where spans go (default: as the
    config's ``tracing`` section and the ``OTEL_*`` variables say, or nowhere); a test passes one
    with the SDK's in-memory exporter. ``sink``: how answers are written (a test passes one that
    watches them, :mod:`gateway.exchange.sink`). ``clock``: the time upstream health and the
    status page's traffic window go by (default: the system's, :mod:`gateway.clock`); a test
    passes a fake one to end an ejection or start a bucket when it says so. ``on_outcome``:
    called with each request's :class:`~gateway.exchange.outcome.Outcome` once it is recorded
    (default: nothing); a test passes one to see what each exchange recorded."""
    # A bound logger, not structlog's lazy proxy: the proxy rebuilds itself on every call (about
    # 3 µs even for a filtered-out event), and every request logs. Logging is configured before
    # an app is created (serve, and the tests that capture logs).
    log = get_logger().bind()
    app = web.Application(middlewares=[edge_middleware_with(_error_answer)],
                          client_max_size=config.server.max_body_bytes)
    m = metrics or Metrics()
    states: dict[str, UpstreamState] = {}

    def on_health(name: str, healthy: bool) -> None:
        m.upstream_healthy.labels(name).set(1 if healthy else 0)
        log.warning("upstream_health", upstream=name, healthy=healthy)

    holder = RuntimeHolder(Runtime(config, states, on_health, clock.monotonic))
    for name in config.upstreams:
        m.upstream_healthy.labels(name).set(1)
    app[RUNTIME] = holder
    app[METRICS] = m
    app[CLOCK] = clock
    app[BALANCER] = Balancer(clock.monotonic)
    app[RECENT] = RecentTraffic(clock.wall)
    app[WORKER] = WorkerFacts.start(config_path)
    app[LOG] = log
    app[TRACING] = tracing if tracing is not None else _configured_tracing(config)

    async def reloader() -> list[tuple[str, str]]:
        if config_path is None:
            return [("", "the gateway was not started from a config file")]
        try:
            new = load_config(config_path)
        except ConfigError as e:
            m.config_reloads.labels("invalid").inc()
            log.error("config_reload_refused", problems=[f"{w}: {p}" for w, p in e.problems])
            return e.problems
        gone = set(holder.current.config.upstreams) - set(new.upstreams)
        holder.current = Runtime(new, states, on_health, clock.monotonic)
        for name in gone:  # no stale series for an upstream that is no more
            with contextlib.suppress(KeyError):
                m.upstream_healthy.remove(name)
        for name in new.upstreams:
            m.upstream_healthy.labels(name).set(1 if states[name].healthy else 0)
        m.config_reloads.labels("ok").inc()
        log.info("config_reloaded", routes=len(new.routes), upstreams=len(new.upstreams))
        if new.history != config.history:  # its routes and store are set up at start
            log.warning("history_config_needs_restart")
        if new.responses_store != config.responses_store:  # opened at start, like history's
            log.warning("responses_store_config_needs_restart")
        if new.server.cors.allow_origins and not config.server.cors.allow_origins:
            log.warning("cors_config_needs_restart")  # no answer is looked at for it (above)
        if LIMITS in app:
            app[LIMITS].reloaded(new)
        return []

    async def noted_reload() -> list[tuple[str, str]]:  # for the status page
        problems = await reloader()
        app[WORKER].note_reload(problems)
        return problems

    app[RELOADER] = noted_reload
    app.cleanup_ctx.append(_tracing)
    if config.responses_store is not None:  # before the transport's: the Env holds it
        from gateway.history.responses import add_responses_store

        add_responses_store(app, config)
    app.cleanup_ctx.append(_limits(config, clock))
    app.cleanup_ctx.append(_transport(transport, config.server.upstream_client, sink,
                                      on_outcome))
    app.cleanup_ctx.append(_health_checks)
    app.cleanup_ctx.append(status.publish)
    if config.server.cors.allow_origins:
        # Only then: a receiver of on_response_prepare costs every answer two coroutines (the
        # signal's and its own), which without origins only find that there is nothing to add.
        # Origins changed or removed by a reload apply at once; turned on, at the next start.
        app.on_response_prepare.append(_cors)
    app.router.add_get("/healthz", handlers.healthz)
    app.router.add_get("/readyz", handlers.readyz)
    add_admin_routes(app, config)  # /metrics, /api/status, /, /static, /admin (or admin_port)
    if config.history is not None:  # before the catch-all; the store opens with the app
        from gateway.history.api import add_history

        add_history(app, config.history)
    app.router.add_route("*", "/{tail:.*}", handlers.chat)
    return app


def _transport(given: Transport | None, client: Literal["fast", "aiohttp"],
               sink: SinkFactory, on_outcome: Callable[[Outcome], None] | None) -> Any:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        transport = given or make_transport(client)
        app[TRANSPORT] = transport
        app[ENV] = Env(transport, app[METRICS], app[BALANCER], app[RECENT], app[LOG],
                       app[TRACING], sink, _responses_store(app), app[LIMITS], on_outcome)
        try:
            yield
        finally:
            await transport.aclose()
    return ctx


def _responses_store(app: web.Application) -> KeptStore | None:
    if app[RUNTIME].current.config.responses_store is None:
        return None  # (SQLAlchemy is imported only by a gateway that keeps responses)
    from gateway.history.responses import RESPONSES

    return app[RESPONSES]


def _limits(config: GatewayConfig, clock: Clock) -> Any:
    """The named keys' store, opened in the app's loop and closed after the transport (its
    last settlements are written first)."""
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        from gateway.limits import Limits

        limits = app[LIMITS] = Limits(config, app[METRICS], app[LOG], clock.wall)
        try:
            yield
        finally:
            await limits.aclose()
    return ctx


def _configured_tracing(config: GatewayConfig) -> Tracing | None:
    settings = tracing_settings(config.tracing, os.environ)
    if settings is None:
        return None
    from gateway.tracing import Tracing  # OpenTelemetry only when it is used

    return Tracing(settings)


async def _tracing(app: web.Application) -> AsyncIterator[None]:
    yield
    tracing = app[TRACING]
    if tracing is not None:  # after the transport closed: the last spans are ended
        await tracing.aclose()


async def _health_checks(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(_check_loop(app))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _check_loop(app: web.Application) -> None:
    """Active checks: GET each ``health_url`` every ``health_interval``; 2xx is up."""
    next_at: dict[str, float] = {}
    while True:
        runtime = app[RUNTIME].current
        # The real clock, not the app's: this paces checks between real asyncio.sleep()s.
        now = time.monotonic()
        due = [(n, s) for n, s in runtime.states.items()
               if s.config.health_url and next_at.get(n, 0.0) <= now]
        for name, state in due:
            next_at[name] = now + state.config.health_interval
        if due:
            await asyncio.gather(*(_check(app[TRANSPORT], s, runtime) for _, s in due))
        await asyncio.sleep(0.5)


async def _check(transport: Transport, state: UpstreamState, runtime: Runtime) -> None:
    url = state.config.health_url
    assert url is not None
    bound = min(state.config.health_interval, 5.0)
    try:
        response = await transport.send(UpstreamRequest(url, b"", {}, bound, bound, "GET"))
    except UpstreamError:
        ok = False
    else:
        ok = response.status < 300
        response.close()
    if ok:
        state.succeeded()
    else:
        # An active check that fails takes the upstream out at once.
        state.failures = max(state.failures, runtime.config.health.failure_threshold - 1)
        state.failed(runtime.config.health)  # at the state's own clock, the app's health clock


def _error_answer(request: web.Request, e: Exception) -> web.StreamResponse:
    """The main app's answer to what a handler raised (the edge's middleware calls it)."""
    if isinstance(e, web.HTTPException):
        if e.status >= 400:
            return handlers.json_error(e.status, e.reason, e.reason.upper().replace(" ", "_"))
        raise e
    if isinstance(e, BodyTimeout):  # a handler that reads a body (history): closed after this
        response = handlers.json_error(408, "the request body did not arrive in time",
                                       "REQUEST_TIMEOUT")
        response.force_close()
        return response
    request.app[LOG].exception("internal_error", path=request.path)
    return handlers.json_error(500, "internal gateway error", "INTERNAL_ERROR")


async def _cors(request: web.Request, response: web.StreamResponse) -> None:
    origin = request.headers.get("Origin")
    if not origin:  # not a browser's cross-origin request: most requests stop here
        return
    h = response.headers
    for name, value in cors_headers(origin, request.method,
                                    request.app[RUNTIME].current.config.server.cors,
                                    h.get("Allow")):
        if name == "Vary":
            h.add(name, value)
        else:
            h[name] = value
