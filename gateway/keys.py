"""Typed keys of the app's shared state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from gateway.balancer import Balancer
from gateway.metrics import Metrics
from gateway.runtime import Runtime
from gateway.traffic import RecentTraffic

__all__ = ["BALANCER", "LOG", "METRICS", "RECENT", "RELOADER", "RUNTIME", "SESSION",
           "RuntimeHolder"]


class RuntimeHolder:
    """The runtime in force; a reload replaces :attr:`current` in one assignment."""

    __slots__ = ("current",)

    def __init__(self, runtime: Runtime) -> None:
        self.current = runtime


RUNTIME = web.AppKey("runtime", RuntimeHolder)
SESSION = web.AppKey("session", aiohttp.ClientSession)
RECENT = web.AppKey("recent", RecentTraffic)
METRICS = web.AppKey("metrics", Metrics)
BALANCER = web.AppKey("balancer", Balancer)
LOG: web.AppKey[Any] = web.AppKey("log")
Reloader = Callable[[], Awaitable[list[tuple[str, str]]]]
RELOADER: web.AppKey[Reloader] = web.AppKey("reloader")
