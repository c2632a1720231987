"""The operator's endpoints: ``GET /metrics``, ``GET /api/status``, the status page ``GET /``
and its ``GET /static/{name}``, ``GET /admin/usage`` (the named keys' usage) and
``POST /admin/reload``.

Where they are served:

- ``server.admin_port`` set: on a listener of their own, a second aiohttp app in the same
  process that shares the main app's state (metrics, runtime, traffic window), bound with
  ``SO_REUSEPORT`` under ``--workers N`` as the main port is, so that whichever worker the kernel
  picks answers for all of them (metrics and the status page already merge every worker). The
  main port no longer serves them (404). The health probes are served on both.
- no admin port: on the main port, where with ``auth.api_keys`` set they need a key as the chat
  routes do (read at each request, so a reload that adds keys closes them at once); without
  keys they are open as before. Only an ``auth.api_keys`` key opens them: a named key
  (``auth.keys``) is a client's, and with named keys alone they are closed on the main port.

``POST /admin/reload`` keeps its own rule on either listener: loopback clients only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from gateway import handlers, status
from gateway.auth import accepted_key
from gateway.config import GatewayConfig
from gateway.edge import Edge, EdgeListener, edge_for, edge_middleware
from gateway.keys import LOG, RUNTIME
from gateway.limits.usage import usage

__all__ = ["add_admin_routes", "create_admin_app", "start_admin_listener"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", "/metrics", handlers.metrics),
    ("POST", "/admin/reload", handlers.reload),
    ("GET", "/", status.page),
    ("GET", "/api/status", status.snapshot),
    ("GET", "/static/{name}", status.asset),
    ("GET", "/admin/usage", usage),
)


def add_admin_routes(app: web.Application, config: GatewayConfig) -> None:
    """The operator's endpoints on the main app, key-guarded, unless ``server.admin_port``
    gives them their own listener (:func:`create_admin_app`)."""
    if config.server.admin_port is not None:
        return
    for method, path, handler in _ROUTES:
        _add(app, method, path, _key_guarded(handler))


def _add(app: web.Application, method: str, path: str, handler: Handler) -> None:
    if method == "GET":
        app.router.add_get(path, handler)  # and HEAD
    else:
        app.router.add_route(method, path, handler)


def _key_guarded(handler: Handler) -> Handler:
    async def guarded(request: web.Request) -> web.StreamResponse:
        auth = request.app[RUNTIME].current.config.auth
        if auth.accepted_keys and accepted_key(request, auth.api_keys) is None:
            response = handlers.json_error(401, "a valid API key is required", "UNAUTHORIZED")
            response.headers["WWW-Authenticate"] = 'Bearer realm="chat-gateway"'
            return response
        return await handler(request)
    return guarded


def create_admin_app(main: web.Application) -> web.Application:
    """The admin listener's app: the operator's endpoints and the health probes, over the
    state of ``main`` (started first: its state is complete once its startup ran)."""
    admin = web.Application(middlewares=[edge_middleware])

    async def share(app: web.Application) -> AsyncIterator[None]:
        for key in list(main):
            app[key] = main[key]
        yield

    admin.cleanup_ctx.append(share)
    for method, path, handler in _ROUTES:
        _add(admin, method, path, handler)
    admin.router.add_get("/healthz", handlers.healthz)
    admin.router.add_get("/readyz", handlers.readyz)
    admin.router.add_route("*", "/{tail:.*}", _not_here)
    return admin


async def _not_here(request: web.Request) -> web.Response:
    return handlers.json_error(404, f"{request.path} is not served on the admin port",
                               "NOT_FOUND")


async def start_admin_listener(main: web.Application, config: GatewayConfig, host: str, *,
                               reuse_port: bool = False,
                               edge: Edge | None = None) -> EdgeListener | None:
    """Serve :func:`create_admin_app` on ``server.admin_port`` (``admin_host``, else
    ``host``); ``None`` when no admin port is configured. The caller cleans the runner up.
    ``edge``: the main listener's limits, shared (the default: the config's, its own)."""
    port = config.server.admin_port
    if port is None:
        return None
    if edge is None:
        edge = edge_for(config.server)
    listener = EdgeListener(create_admin_app(main), edge, access_log=None)
    admin_host = config.server.admin_host or host
    await listener.start(admin_host, port, reuse_port=reuse_port)
    main[LOG].info("admin_listening", host=admin_host, port=port)
    return listener
