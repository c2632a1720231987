"""The status page at ``GET /`` and its data at ``GET /api/status``.

The page is one HTML file with inline script (no build step, no CDN) that polls ``/api/status``.
Recent traffic is kept in per-second buckets for the last five minutes, per app (so per
worker process).
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from gateway.keys import RECENT, RUNTIME
from gateway.log import redact_url

__all__ = ["page", "snapshot"]

async def snapshot(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME].current
    traffic = request.app[RECENT].summary()
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
