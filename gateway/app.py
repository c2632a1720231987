"""``create_app(config)``: the aiohttp application, built by a factory."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gateway import handlers, status
from gateway.balancer import Balancer, UpstreamState
from gateway.config import GatewayConfig, load_config
from gateway.errors import ConfigError
from gateway.keys import (
    BALANCER,
    LOG,
    METRICS,
    RECENT,
    RELOADER,
    RUNTIME,
    SESSION,
    RuntimeHolder,
)
from gateway.log import get_logger
from gateway.metrics import Metrics
from gateway.runtime import Runtime
from gateway.traffic import RecentTraffic

__all__ = ["create_app"]


def create_app(config: GatewayConfig, *, config_path: str | Path | None = None,
               metrics: Metrics | None = None) -> web.Application:
    # A bound logger, not structlog's lazy proxy: the proxy rebuilds itself on every call (about
    # 3 µs even for a filtered-out event), and every request logs. Logging is configured before
    # an app is created (serve, and the tests that capture logs).
    log = get_logger().bind()
    app = web.Application(middlewares=[_errors], client_max_size=config.server.max_body_bytes)
    m = metrics or Metrics()
    states: dict[str, UpstreamState] = {}

    def on_health(name: str, healthy: bool) -> None:
        m.upstream_healthy.labels(name).set(1 if healthy else 0)
        log.warning("upstream_health", upstream=name, healthy=healthy)

    holder = RuntimeHolder(Runtime(config, states, on_health))
    for name in config.upstreams:
        m.upstream_healthy.labels(name).set(1)
    app[RUNTIME] = holder
    app[METRICS] = m
    app[BALANCER] = Balancer()
    app[RECENT] = RecentTraffic()
    app[LOG] = log

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
        holder.current = Runtime(new, states, on_health)
        for name in gone:  # no stale series for an upstream that is no more
            with contextlib.suppress(KeyError):
                m.upstream_healthy.remove(name)
        for name in new.upstreams:
            m.upstream_healthy.labels(name).set(1 if states[name].healthy else 0)
        m.config_reloads.labels("ok").inc()
        log.info("config_reloaded", routes=len(new.routes), upstreams=len(new.upstreams))
        return []

    app[RELOADER] = reloader
    app.cleanup_ctx.append(_client_session)
    app.cleanup_ctx.append(_health_checks)
    app.on_response_prepare.append(_cors)
    app.router.add_get("/healthz", handlers.healthz)
    app.router.add_get("/readyz", handlers.readyz)
    app.router.add_get("/metrics", handlers.metrics)
    app.router.add_post("/admin/reload", handlers.reload)
    app.router.add_get("/", status.page)
    app.router.add_get("/api/status", status.snapshot)
    app.router.add_route("*", "/{tail:.*}", handlers.chat)
    return app


async def _client_session(app: web.Application) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30,
                                     enable_cleanup_closed=True)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=True,
                                     skip_auto_headers=("User-Agent",)) as session:
        app[SESSION] = session
        yield


async def _health_checks(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(_check_loop(app))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _check_loop(app: web.Application) -> None:
    """Active checks: GET each ``health_url`` every ``health_interval``; 2xx is up."""
    next_at: dict[str, float] = {}
    log = app[LOG]
    while True:
        runtime = app[RUNTIME].current
        now = time.monotonic()
        due = [(n, s) for n, s in runtime.states.items()
               if s.config.health_url and next_at.get(n, 0.0) <= now]
        for name, state in due:
            next_at[name] = now + state.config.health_interval
        if due:
            await asyncio.gather(*(_check(app[SESSION], s, runtime, log) for _, s in due))
        await asyncio.sleep(0.5)


async def _check(session: aiohttp.ClientSession, state: UpstreamState, runtime: Runtime,
                 log: Any) -> None:
    url = state.config.health_url
    assert url is not None
    ok = False
    try:
        timeout = aiohttp.ClientTimeout(total=min(state.config.health_interval, 5.0))
        async with session.get(url, timeout=timeout, allow_redirects=False) as resp:
            ok = resp.status < 300
    except (aiohttp.ClientError, TimeoutError, OSError):
        ok = False
    if ok:
        state.succeeded()
    else:
        # An active check that fails takes the upstream out at once.
        state.failures = max(state.failures, runtime.config.health.failure_threshold - 1)
        state.failed(runtime.config.health, time.monotonic())


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException as e:
        if e.status >= 400:
            return handlers.json_error(e.status, e.reason, e.reason.upper().replace(" ", "_"))
        raise
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception:
        request.app[LOG].exception("internal_error", path=request.path)
        return handlers.json_error(500, "internal gateway error", "INTERNAL_ERROR")


async def _cors(request: web.Request, response: web.StreamResponse) -> None:
    cors = request.app[RUNTIME].current.config.server.cors
    origin = request.headers.get("Origin")
    if not cors.allow_origins or not origin:
        return
    if "*" not in cors.allow_origins and origin not in cors.allow_origins:
        return
    h = response.headers
    h["Access-Control-Allow-Origin"] = origin if cors.allow_credentials or \
        "*" not in cors.allow_origins else "*"
    h.add("Vary", "Origin")
    h["Access-Control-Expose-Headers"] = "X-Request-ID, Retry-After"
    if cors.allow_credentials:
        h["Access-Control-Allow-Credentials"] = "true"
    if request.method == "OPTIONS":
        h["Access-Control-Allow-Methods"] = "POST, OPTIONS"
        h["Access-Control-Allow-Headers"] = ", ".join(cors.allow_headers)
        h["Access-Control-Max-Age"] = str(cors.max_age)
