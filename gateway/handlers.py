"""HTTP handlers: thin. They find the route and hand the exchange to :mod:`gateway.exchange`."""

from __future__ import annotations

import asyncio
import ipaddress

import orjson
from aiohttp import web

from gateway.exchange import serve, unrouted
from gateway.exchange.kept import stored_route_for
from gateway.history.keys import HISTORY
from gateway.keys import ENV, METRICS, RELOADER, RUNTIME
from gateway.metrics import CONTENT_TYPE_LATEST
from gateway.models_list import model_info_for, model_list_for, route_model_list
from gateway.token_count import Counter, counter_for

__all__ = ["chat", "healthz", "json_error", "metrics", "readyz", "reload"]


def json_error(status: int, message: str, code: str) -> web.Response:
    """An error outside any route (unknown path, gateway endpoints): one JSON shape that both
    OpenAI-style and protocol-style clients can show."""
    return web.Response(status=status, content_type="application/json", body=orjson.dumps(
        {"error": {"message": message, "code": code}}))


async def chat(request: web.Request) -> web.StreamResponse:
    app = request.app
    runtime = app[RUNTIME].current
    entry = runtime.route_for(request.path)
    found = None if entry is not None else runtime.target_for(
        request.path, request.method, request.query)
    if found is not None:  # a dialect that reads its model and method in the path
        entry, target = found
        if target.kind == "models":
            return route_model_list(runtime, entry).answer(request, runtime.config,
                                                           request.app[ENV])
        if target.kind == "count":
            return await Counter(entry.config.path, entry).answer(request, runtime,
                                                                  request.app[ENV])
    if entry is None:
        listing = model_list_for(runtime, request.path)
        if listing is not None:  # GET …/models beside routes whose clients list models
            return listing.answer(request, runtime.config, request.app[ENV])
        info = model_info_for(runtime, request.path)
        if info is not None:  # POST …/api/show beside routes whose clients ask about a model
            return await info.answer(request, runtime.config, request.app[ENV])
        counter = counter_for(runtime, request.path)
        if counter is not None:  # POST …/count_tokens beside routes whose clients count
            return await counter.answer(request, runtime, request.app[ENV])
        stored = stored_route_for(runtime, request.path)
        if stored is not None:  # GET/DELETE …/{id} beside routes that keep their answers
            return await stored.answer(request, runtime, request.app[ENV])
        return unrouted(request, json_error(404, f"no route for {request.path}", "NOT_FOUND"),
                        request.app[ENV], runtime.config.server.trusted_proxies)
    if request.method == "OPTIONS" and runtime.config.server.cors.allow_origins:
        return web.Response(status=204)  # the CORS headers are added as it is prepared
    response = await serve(request, app[ENV], runtime, entry)
    if not response.prepared and runtime.config.server.batch_writes:
        # An answer complete before any of it went out (a whole answer, or a stream whose
        # upstream answered at once: gateway.exchange.sink), handed to aiohttp (which writes
        # it) on the loop's next turn, with the others made during this one: written one by one
        # as each is made, each wakes its client anew when it went to sleep since the last, and
        # on a host where the clients run too that wake-up is a good part of what a small answer
        # costs to send. A stream whose first frames came before its end went out with them.
        await asyncio.sleep(0)
    return response


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME].current
    down = runtime.down_routes()
    unhealthy = sorted(n for n, s in runtime.states.items() if not s.healthy)
    body: dict[str, object] = {"status": "ok" if not down else "unavailable",
                               "routes_down": down, "upstreams_down": unhealthy}
    if HISTORY in request.app:
        # Reported, never failing the probe: history is not on a chat request's path, and a
        # shared store being down must not take every replica's chat routes out of service.
        body["history"] = request.app[HISTORY].status()
    kept = request.app[ENV].responses if ENV in request.app else None
    if kept is not None:  # reported like the history's, never failing the probe
        body["responses_store"] = kept.status()
    return web.json_response(body, status=503 if down else 200)


async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=await request.app[METRICS].render_async(),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


async def reload(request: web.Request) -> web.Response:
    """``POST /admin/reload``: answered only to loopback clients."""
    peer = request.remote or ""
    try:
        local = ipaddress.ip_address(peer).is_loopback
    except ValueError:
        local = False
    if not local or not request.app[RUNTIME].current.config.server.admin:
        return json_error(403, "the admin endpoint answers only on loopback", "FORBIDDEN")
    problems = await request.app[RELOADER]()
    if problems:
        return web.json_response({"status": "refused", "problems": [
            {"where": w, "problem": m} for w, m in problems]}, status=400)
    return web.json_response({"status": "reloaded"})
