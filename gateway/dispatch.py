"""The chat routes' short way in (``server.http_layer: fast``).

aiohttp sends every request through its router (a dozen resources before the chat routes'
catch-all), the app's middleware and the ``current_app`` bookkeeping before a handler runs. For
a POST to a path the router has already sent to a chat route, :func:`chat_dispatch` calls the
exchange at once: the router's answer for a path cannot change while the app runs (its routes
are fixed at start; a reload changes which chat routes exist, and that is read per request).
Every other request (other methods, the gateway's own endpoints, the history API, a path not
yet seen, a request that sends ``Expect``, which the router's expect handler answers) takes
aiohttp's way, unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

from aiohttp import web

from gateway.exchange import serve
from gateway.keys import ENV, RUNTIME
from gateway.lane import LaneHandler, LaneRequest, LaneRouter

__all__ = ["CHAT_PATHS", "ChatPaths", "chat_dispatch", "chat_lane"]

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


class ChatPaths:
    """Request paths aiohttp's router sent to a configured chat route, each as the client sent
    it (a path aiohttp decoded is not kept: :mod:`gateway.lane` reads paths raw). Bounded: a
    client picks paths (``/chat/``, ``/chat//``, …), so past :attr:`LIMIT` new ones are not
    remembered (they keep aiohttp's way)."""

    __slots__ = ("paths",)
    LIMIT = 4096

    def __init__(self) -> None:
        self.paths: set[str] = set()

    def add(self, path: str) -> None:
        if len(self.paths) < self.LIMIT:
            self.paths.add(path)


CHAT_PATHS = web.AppKey("chat_paths", ChatPaths)


def chat_dispatch(app: web.Application) -> Handler:
    """The request handler of ``app``'s server: chat POSTs straight to the exchange, the rest
    to aiohttp's own (``app._handle``: the router and the middleware). Built once the app has
    started (its :data:`~gateway.keys.ENV` exists)."""
    handle = cast(Handler, app._handle)
    paths = app[CHAT_PATHS].paths
    holder = app[RUNTIME]
    env = app[ENV]

    async def dispatch(request: web.BaseRequest) -> web.StreamResponse:
        # ``Expect: 100-continue`` is answered by the router's expect handler: aiohttp's way.
        if request.method == "POST" and request.path in paths and \
                "Expect" not in request.headers:
            runtime = holder.current
            entry = runtime.route_for(request.path)
            if entry is not None:  # else a reload removed the route: aiohttp's 404 way
                # the app's request factory makes web.Request objects
                return await serve(cast(web.Request, request), env, runtime, entry)
        return await handle(request)

    return dispatch


def chat_lane(app: web.Application) -> LaneRouter:
    """What the chat routes' short lane (:mod:`gateway.lane`) takes: a POST to a path of
    :class:`ChatPaths` whose route still exists, with a body up to ``server.max_body_bytes``
    (a larger one gets its 413 by aiohttp's way)."""
    paths = app[CHAT_PATHS].paths
    holder = app[RUNTIME]
    env = app[ENV]

    def route(path: str) -> tuple[LaneHandler, int] | None:
        if path not in paths:
            return None
        runtime = holder.current
        entry = runtime.route_for(path)
        if entry is None:
            return None

        def handler(request: LaneRequest) -> Coroutine[Any, Any, web.StreamResponse]:
            return serve(request, env, runtime, entry)

        return handler, runtime.config.server.max_body_bytes

    return route
