"""``GET /admin/usage``: each named key's limits, its current windows (used, remaining, reset),
its requests in flight and its running totals, as JSON, read from the limits store (so every
replica answers alike on a shared one). Served with the operator's other endpoints
(:mod:`gateway.admin`)."""

from __future__ import annotations

import orjson
from aiohttp import web

from gateway.keys import LIMITS, RUNTIME

__all__ = ["usage"]


async def usage(request: web.Request) -> web.Response:
    body = await request.app[LIMITS].usage(request.app[RUNTIME].current.config)
    return web.Response(body=orjson.dumps(body), content_type="application/json")
