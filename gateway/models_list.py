"""``GET`` model lists beside the routes whose dialect's clients list models at start-up
(an OpenAI SDK's ``GET /v1/models``, an Anthropic SDK's): where, which models, in whose shape.

The list is the models the route's upstreams are configured with (``model``, then ``models``),
rendered by the route's dialect (:meth:`~gateway.dialects.Dialect.render_models`). No upstream
is asked: the answer is the same whichever dialects the upstreams speak, costs no upstream call
when every client lists at start-up, and never shows an upstream's own catalogue (models no
route of this gateway was set up for).

Where: a dialect declares its ``models_path`` beside its ``default_path``; a route whose path
ends as the default path does after their common start answers at its own path with that ending
replaced (``/team-a/v1/chat/completions`` lists at ``/team-a/v1/models``). Routes of several
dialects may list at one path (routes for the OpenAI and the Anthropic SDKs under ``/v1``): the
dialects whose ``models_header`` the request carries answer, else those that declare none; the
routes of dialects with the same header (one SDK's two APIs) are listed together.

A dialect may also declare an endpoint that describes one model named in a ``POST`` body
(:class:`~gateway.dialects.base.ModelInfo`: Ollama's ``POST /api/show``), answered beside its
routes the same way (:class:`ModelInfoEndpoint`): for a model of those routes, the dialect's
description; for any other, 404 in the dialect's error shape, as the upstream would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import orjson
from aiohttp import web

from gateway.canonical import JSON, ChatError
from gateway.config import GatewayConfig
from gateway.dialects import Dialect, get
from gateway.dialects.base import ModelInfo
from gateway.exchange import Env, error_response
from gateway.exchange.access import Refused, check_access, record_beside, request_id_of
from gateway.pipeline import optional
from gateway.runtime import RouteEntry, Runtime, normalize_path

__all__ = ["ModelInfoEndpoint", "ModelList", "info_path", "listing_path", "model_info_for",
           "model_infos", "model_list_for", "model_lists", "route_model_list"]



def listing_path(route_path: str, dialect: Dialect) -> str | None:
    """Where clients of ``dialect`` posting to ``route_path`` list models, or ``None``."""
    return _beside(route_path, dialect, dialect.models_path)


def info_path(route_path: str, dialect: Dialect) -> str | None:
    """Where clients of ``dialect`` posting to ``route_path`` ask about one model
    (:class:`~gateway.dialects.base.ModelInfo`), or ``None``."""
    info: ModelInfo | None = optional(dialect, "model_info")
    return None if info is None else _beside(route_path, dialect, info.path)


def _beside(route_path: str, dialect: Dialect, models: str | None) -> str | None:
    """``models`` (written beside the dialect's ``default_path``) beside ``route_path``."""
    if models is None:
        return None
    chat, listed = dialect.default_path.split("/"), models.split("/")
    common = 0
    while (common < min(len(chat), len(listed)) - 1
           and chat[common] == listed[common]):
        common += 1
    chat_end = "/".join(chat[common:])
    listed_end = "/".join(listed[common:])
    if route_path != "/" + chat_end and not route_path.endswith("/" + chat_end):
        return None
    prefix = route_path[: len(route_path) - len(chat_end) - 1]
    return f"{prefix}/{listed_end}"


@dataclass(frozen=True, slots=True)
class ModelList:
    """One listing path: its routes' dialects grouped by the header their clients send (those
    of one group share one client SDK: an OpenAI SDK posts to Chat Completions and Responses
    routes alike), each group with the models of its routes."""

    path: str
    groups: dict[str | None, tuple[tuple[str, ...], tuple[str, ...]]]
    """``models_header`` to (its dialects' names, their routes' models in config order, once
    each); the first dialect renders the list."""

    def group_for(self, request: web.Request) -> tuple[Dialect, tuple[str, ...]]:
        """The dialect that renders the list for this request, and the models listed."""
        chosen = next((g for h, g in self.groups.items() if h is not None and h in request.headers),
                      None)
        if chosen is None:
            chosen = self.groups.get(None) or next(iter(self.groups.values()))
        dialects, names = chosen
        return get(dialects[0]), names

    def answer(self, request: web.Request, config: GatewayConfig, env: Env) -> web.Response:
        """The list in the shape the asking client's dialect reads, or an error in that
        shape: 405 for a method other than GET, 401 without a valid key when keys are set."""
        started = time.perf_counter()
        request_id = request_id_of(request)
        dialect, names = self.group_for(request)
        try:
            check_access(request, config.auth.accepted_keys, ("GET", "HEAD"))
        except Refused as r:
            response = error_response(dialect, r.error, request_id, r.headers)
        else:
            response = web.Response(
                body=orjson.dumps(dialect.render_models(names)),
                content_type="application/json", headers={"X-Request-ID": request_id})
        record_beside(request, response, route=self.path, dialect=dialect.name,
                      request_id=request_id, started=started,
                      trusted_proxies=config.server.trusted_proxies, metrics=env.metrics,
                      log=env.log, on_outcome=env.on_outcome)
        return response


def model_lists(config: GatewayConfig) -> dict[str, ModelList]:
    """Every listing path of ``config``'s routes, with what it lists."""
    found: dict[str, dict[str | None, tuple[list[str], list[str]]]] = {}
    for route in config.routes:
        dialect = get(route.dialect)
        path = listing_path(route.path, dialect)
        if path is None:
            continue
        dialects, names = found.setdefault(path, {}).setdefault(dialect.models_header, ([], []))
        if dialect.name not in dialects:
            dialects.append(dialect.name)
        names.extend(_models_of(config, (u.name for u in route.upstreams)))
    return {path: ModelList(path, {h: (tuple(d), tuple(dict.fromkeys(n)))
                                   for h, (d, n) in groups.items()})
            for path, groups in found.items()}


def _models_of(config: GatewayConfig, upstreams: Iterable[str]) -> list[str]:
    out: list[str] = []
    for name in upstreams:
        up = config.upstreams[name]
        if up.model:
            out.append(up.model)
        out.extend(up.models)
    return out


def _lists_of(runtime: Runtime) -> dict[str, ModelList]:
    """A runtime's lists (made once each runtime: :meth:`Runtime.derived`)."""
    return model_lists(runtime.config)


def model_list_for(runtime: Runtime, path: str) -> ModelList | None:
    """The list served at ``path`` (a path no route serves), if any."""
    return runtime.derived(_lists_of).get(normalize_path(path))


@dataclass(frozen=True, slots=True)
class ModelInfoEndpoint:
    """One path where clients of a dialect ask about one model (``POST {"model": …}``)."""

    path: str
    dialect: str
    """The first dialect whose routes put the endpoint here (it answers)."""
    names: tuple[str, ...]
    """The models of the routes beside it, in config order, once each."""

    async def answer(self, request: web.Request, config: GatewayConfig, env: Env,
                     ) -> web.Response:
        """The dialect's description of the model, or an error in its shape: 405 for a method
        other than POST, 401 without a valid key when keys are set, 400 for a body that names
        no model, 404 for a model no route beside serves."""
        started = time.perf_counter()
        request_id = request_id_of(request)
        dialect = get(self.dialect)
        try:
            check_access(request, config.auth.accepted_keys, ("POST",))
            name, err = self._asked(await request.read(), dialect)
            if err is not None:
                raise Refused(err)
        except Refused as r:
            response = error_response(dialect, r.error, request_id, r.headers)
        else:
            describe: Callable[[str], JSON] = optional(dialect, "render_model_info")
            response = web.Response(
                body=orjson.dumps(describe(name)), content_type="application/json",
                headers={"X-Request-ID": request_id})
        record_beside(request, response, route=self.path, dialect=dialect.name,
                      request_id=request_id, started=started,
                      trusted_proxies=config.server.trusted_proxies, metrics=env.metrics,
                      log=env.log, on_outcome=env.on_outcome)
        return response

    def _asked(self, raw: bytes, dialect: Dialect) -> tuple[str, ChatError | None]:
        """The model the body names (one of :attr:`names`), or the error to answer."""
        info: ModelInfo = optional(dialect, "model_info")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return "", ChatError(400, "the body is not valid JSON", code="BAD_REQUEST")
        name = next((body[k] for k in info.keys if isinstance(body, dict)
                     and isinstance(body.get(k), str) and body[k]), None)
        if name is None:
            return "", ChatError(400, f"{info.keys[0]} is required", code="BAD_REQUEST")
        if name not in self.names:
            return name, ChatError(404, f"model {name!r} not found", code="NOT_FOUND")
        return name, None


def model_infos(config: GatewayConfig) -> dict[str, ModelInfoEndpoint]:
    """Every model-info path of ``config``'s routes, with the models it describes."""
    found: dict[str, tuple[str, list[str]]] = {}
    for route in config.routes:
        dialect = get(route.dialect)
        path = info_path(route.path, dialect)
        if path is None:
            continue
        _, names = found.setdefault(path, (dialect.name, []))
        names.extend(_models_of(config, (u.name for u in route.upstreams)))
    return {path: ModelInfoEndpoint(path, d, tuple(dict.fromkeys(n)))
            for path, (d, n) in found.items()}


def _infos_of(runtime: Runtime) -> dict[str, ModelInfoEndpoint]:
    """A runtime's model-info endpoints (made once each runtime: :meth:`Runtime.derived`)."""
    return model_infos(runtime.config)


def model_info_for(runtime: Runtime, path: str) -> ModelInfoEndpoint | None:
    """The model-info endpoint at ``path`` (a path no route serves), if any."""
    return runtime.derived(_infos_of).get(normalize_path(path))


def route_model_list(runtime: Runtime, entry: RouteEntry) -> ModelList:
    """The list of one route whose dialect serves it under the route's own prefix
    (``GET {prefix}/models``): its upstreams' models, in its dialect's shape."""
    names = tuple(dict.fromkeys(_models_of(runtime.config,
                                           (u.name for u in entry.config.upstreams))))
    return ModelList(entry.config.path, {None: ((entry.client.name,), names)})
