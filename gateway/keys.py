"""Typed keys of the app's shared state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.balancer import Balancer
from gateway.clock import Clock
from gateway.exchange import Env
from gateway.metrics import Metrics
from gateway.runtime import Runtime
from gateway.traffic import RecentTraffic
from gateway.upstream import Transport
from gateway.worker_status import WorkerFacts

if TYPE_CHECKING:
    from gateway.limits import Limits
    from gateway.tracing import Tracing

__all__ = ["BALANCER", "CLOCK", "ENV", "LIMITS", "LOG", "METRICS", "RECENT", "RELOADER", "RUNTIME",
           "TRACING", "TRANSPORT", "WORKER", "RuntimeHolder"]


class RuntimeHolder:
    """The runtime in force; a reload replaces :attr:`current` in one assignment."""

    __slots__ = ("current",)

    def __init__(self, runtime: Runtime) -> None:
        self.current = runtime


RUNTIME = web.AppKey("runtime", RuntimeHolder)
TRANSPORT: web.AppKey[Transport] = web.AppKey("transport")
"""How the app reaches its upstreams (aiohttp's client, or a test's in-memory transport)."""
ENV: web.AppKey[Env] = web.AppKey("env")
RECENT = web.AppKey("recent", RecentTraffic)
WORKER = web.AppKey("worker", WorkerFacts)
METRICS = web.AppKey("metrics", Metrics)
BALANCER = web.AppKey("balancer", Balancer)
LOG: web.AppKey[Any] = web.AppKey("log")
CLOCK = web.AppKey("clock", Clock)
"""The app's clock (``create_app(clock=...)``), for what reads it outside the states it was
handed to: the status page's "now"."""
Reloader = Callable[[], Awaitable[list[tuple[str, str]]]]
RELOADER: web.AppKey[Reloader] = web.AppKey("reloader")
TRACING: web.AppKey[Tracing | None] = web.AppKey("tracing")
"""OpenTelemetry when tracing is on (:mod:`gateway.tracing`), else ``None``."""
LIMITS: web.AppKey[Limits] = web.AppKey("limits")
"""The named keys' limits and usage (:mod:`gateway.limits`), opened with the app."""
