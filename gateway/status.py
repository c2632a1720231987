"""The status page at ``GET /``, its data at ``GET /api/status`` and its files at
``GET /static/{name}``.

The page is rendered on the server (:mod:`gateway.status_page`), so it reads without JavaScript;
with it, ``static/status.js`` draws the charts with the vendored uPlot and refreshes the page in
place every 2 s. With ``--workers N`` every worker publishes its traffic window and facts
(:mod:`gateway.worker_status`) and the worker that answers merges them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import orjson
from aiohttp import web

from gateway import status_page
from gateway.history.keys import HISTORY
from gateway.keys import CLOCK, LIMITS, LOG, METRICS, RECENT, RUNTIME, WORKER
from gateway.log import redact_url
from gateway.traffic import HISTORY_SECONDS, STEP_SECONDS, SUMMARY_SECONDS, WindowData
from gateway.worker_status import (
    LIVE_SECONDS,
    PUBLISH_SECONDS,
    WorkerInfo,
    inflight_by_route,
    read_others,
    requests_in_last_minute,
    shared_dir,
    version,
    write_own,
)

__all__ = ["asset", "page", "publish", "snapshot", "status_data"]

_TYPES = {".js": "text/javascript", ".css": "text/css", ".txt": "text/plain",
          ".html": "text/html"}


async def status_data(app: web.Application) -> dict[str, Any]:
    """What ``/api/status`` answers and the page shows. Keys are extended, never renamed."""
    now = app[CLOCK].wall()  # the traffic window's clock: the buckets are read as they were filled
    facts = app[WORKER]
    directory = shared_dir()
    others = await asyncio.to_thread(read_others, directory, facts.pid, now) if directory else []
    live = [o["worker"] for o in others if o["worker"]["updated"] >= now - LIVE_SECONDS]
    own_inflight = inflight_by_route(app[METRICS])
    runtime = app[RUNTIME].current
    traffic = app[RECENT].merged([o["window"] for o in others], now)

    def inflight(path: str) -> int:
        return own_inflight.get(path, 0) + sum(w["inflight"].get(path, 0) for w in live)

    routes = [{
        "path": r.path,
        "dialect": r.dialect,
        "strategy": r.strategy,
        "upstreams": [u.name for u in r.upstreams],
        "traffic": traffic[r.path]["summary"] if r.path in traffic else None,
        "inflight": inflight(r.path),
        # One value a bucket for the charts; None when the route had no traffic in them.
        "series": traffic[r.path]["series"] if r.path in traffic else None,
    } for r in runtime.config.routes]
    upstreams = [{
        "name": name,
        "dialect": s.config.dialect,
        "url": redact_url(s.config.url),
        "healthy": s.healthy,
        "consecutive_failures": s.failures,
        # Each worker ejects on its own: how many of those that know this upstream send to it.
        "healthy_workers": s.healthy + sum(w["upstreams_healthy"].get(name, False) for w in live),
        "workers": 1 + sum(name in w["upstreams_healthy"] for w in live),
    } for name, s in runtime.states.items()]
    own: WorkerInfo = {
        "pid": facts.pid, "started": facts.started, "updated": now,
        "config_path": facts.config_path, "last_reload": facts.last_reload,
        "inflight": own_inflight, "upstreams_healthy": {}}
    workers = [_worker(own, app[RECENT].export(), now, this=True),
               *(_worker(o["worker"], o["window"], now) for o in others)]
    return {
        "window_seconds": SUMMARY_SECONDS,
        "history_seconds": HISTORY_SECONDS,
        "step_seconds": STEP_SECONDS,
        "gateway": {"version": version(), "config_path": facts.config_path, "now": now},
        "worker": {"pid": facts.pid, "started": facts.started,
                   "uptime_seconds": round(now - facts.started, 1),
                   "last_reload": facts.last_reload},
        "workers": workers,
        "routes": routes,
        "upstreams": upstreams,
        **({"history": app[HISTORY].status()} if HISTORY in app else {}),
        # the named keys' usage, from the limits store (shared by the replicas on Redis)
        **({"keys": await app[LIMITS].status_rows(runtime.config)}
           if runtime.config.auth.keys and LIMITS in app else {}),
    }


def _worker(info: WorkerInfo, window: WindowData, now: float, *,
            this: bool = False) -> dict[str, Any]:
    return {"pid": info["pid"], "this": this, "live": info["updated"] >= now - LIVE_SECONDS,
            "seen_seconds_ago": round(now - info["updated"], 1),
            "uptime_seconds": round(info["updated"] - info["started"], 1),
            "last_reload": info["last_reload"], "inflight": sum(info["inflight"].values()),
            "requests_last_minute": requests_in_last_minute(window, now)}


async def snapshot(request: web.Request) -> web.Response:
    return web.json_response(await status_data(request.app), dumps=_dumps)


async def page(request: web.Request) -> web.Response:
    html = status_page.render(await status_data(request.app))
    return web.Response(text=html, content_type="text/html",
                        headers={"Cache-Control": "no-store"})


async def asset(request: web.Request) -> web.Response:
    """The page's scripts and styles, from the package: the page needs no other host."""
    found = _assets().get(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound()
    body, content_type = found
    return web.Response(body=body, content_type=content_type,
                        headers={"Cache-Control": "max-age=3600"})


@functools.cache
def _assets() -> dict[str, tuple[bytes, str]]:
    """Every file of ``gateway/static`` by name (about 60 KiB), read once."""
    out = {}
    for f in resources.files("gateway").joinpath("static").iterdir():
        content_type = _TYPES.get("." + f.name.rsplit(".", 1)[-1])
        if content_type is not None and f.is_file():
            out[f.name] = (f.read_bytes(), content_type)
    return out


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


async def publish(app: web.Application) -> AsyncIterator[None]:
    """A ``cleanup_ctx``: every second, note the in-flight peaks in the traffic window and, with
    workers, write this worker's file (once more on the way out, so a drain's requests count)."""
    directory = shared_dir()
    facts = app[WORKER]

    def note_inflight() -> dict[str, int]:
        inflight = inflight_by_route(app[METRICS])
        for route, n in inflight.items():
            app[RECENT].note_inflight(route, n)
        return inflight

    def shared(inflight: dict[str, int]) -> bytes:
        info: WorkerInfo = {
            "pid": facts.pid, "started": facts.started, "updated": app[CLOCK].wall(),
            "config_path": facts.config_path, "last_reload": facts.last_reload,
            "inflight": inflight,
            "upstreams_healthy": {n: s.healthy for n, s in app[RUNTIME].current.states.items()}}
        return orjson.dumps({"worker": info, "window": app[RECENT].export()})

    async def loop() -> None:
        failing = False
        while True:
            inflight = note_inflight()
            if directory is not None:
                try:
                    await asyncio.to_thread(write_own, directory, facts.pid, shared(inflight))
                    failing = False
                except OSError as e:
                    if not failing:  # once, not every second
                        app[LOG].warning("status_file_unwritable", path=str(directory),
                                         error=str(e))
                    failing = True
            await asyncio.sleep(PUBLISH_SECONDS)

    task = asyncio.create_task(loop())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    if directory is not None:
        with contextlib.suppress(OSError):
            write_own(directory, facts.pid, shared(note_inflight()))
