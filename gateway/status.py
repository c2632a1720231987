"""The status page at ``GET /`` and its data at ``GET /api/status``.

The page is one HTML file with inline script (no build step, no CDN) that polls ``/api/status``.
Recent traffic is kept in per-second buckets for the last five minutes, per worker process.
"""

from __future__ import annotations

import time
from collections import deque
from importlib import resources

from aiohttp import web

from gateway.keys import RUNTIME
from gateway.log import redact_url

__all__ = ["RECENT", "RecentTraffic", "page", "snapshot"]

_WINDOW = 300


class RecentTraffic:
    """Per-second request counts, error counts and latencies over a sliding window."""

    __slots__ = ("_buckets",)

    def __init__(self) -> None:
        self._buckets: deque[tuple[int, dict[str, list[float]], dict[str, int]]] = deque()

    def add(self, route: str, seconds: float, status: int) -> None:
        now = int(time.time())
        if not self._buckets or self._buckets[-1][0] != now:
            self._buckets.append((now, {}, {}))
            while self._buckets and self._buckets[0][0] <= now - _WINDOW:
                self._buckets.popleft()
        _, latencies, errors = self._buckets[-1]
        samples = latencies.setdefault(route, [])
        if len(samples) < 1000:
            samples.append(seconds)
        else:
            samples[len(samples) % 1000] = seconds
        if status >= 400:
            errors[route] = errors.get(route, 0) + 1

    def summary(self, window: int = 60) -> dict[str, dict[str, float | int | None]]:
        now = int(time.time())
        lat: dict[str, list[float]] = {}
        err: dict[str, int] = {}
        for ts, latencies, errors in self._buckets:
            if ts > now - window:
                for route, samples in latencies.items():
                    lat.setdefault(route, []).extend(samples)
                for route, n in errors.items():
                    err[route] = err.get(route, 0) + n
        out: dict[str, dict[str, float | int | None]] = {}
        for route, samples in lat.items():
            samples.sort()
            out[route] = {
                "requests": len(samples),
                "errors": err.get(route, 0),
                "rps": round(len(samples) / window, 3),
                "p50_ms": _pct(samples, 0.5),
                "p95_ms": _pct(samples, 0.95),
                "p99_ms": _pct(samples, 0.99),
            }
        return out


def _pct(sorted_samples: list[float], q: float) -> float | None:
    if not sorted_samples:
        return None
    i = min(len(sorted_samples) - 1, int(q * len(sorted_samples)))
    return round(sorted_samples[i] * 1000, 2)


RECENT = RecentTraffic()


async def snapshot(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME].current
    traffic = RECENT.summary()
    routes = [{
        "path": r.path,
        "dialect": r.dialect,
        "strategy": r.strategy,
        "upstreams": [u.name for u in r.upstreams],
        "traffic": traffic.get(r.path),
    } for r in runtime.config.routes]
    upstreams = [{
        "name": name,
        "dialect": s.config.dialect,
        "url": redact_url(s.config.url),
        "healthy": s.healthy,
        "consecutive_failures": s.failures,
    } for name, s in runtime.states.items()]
    return web.json_response({"window_seconds": 60, "routes": routes, "upstreams": upstreams})


async def page(request: web.Request) -> web.Response:
    html = resources.files("gateway").joinpath("static/status.html").read_text("utf-8")
    return web.Response(text=html, content_type="text/html")
