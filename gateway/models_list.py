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
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

import orjson
from aiohttp import web

from gateway.auth import accepted_key
from gateway.canonical import ChatError
from gateway.config import GatewayConfig
from gateway.dialects import Dialect, get
from gateway.exchange import Env, error_response
from gateway.exchange.client import request_id_of
from gateway.exchange.outcome import Outcome, record
from gateway.forwarding import client_address
from gateway.runtime import Runtime, normalize_path

__all__ = ["ModelList", "listing_path", "model_list_for", "model_lists"]

_ALLOW = "GET, HEAD"


def listing_path(route_path: str, dialect: Dialect) -> str | None:
    """Where clients of ``dialect`` posting to ``route_path`` list models, or ``None``."""
    models = dialect.models_path
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
        keys = config.auth.accepted_keys
        if request.method not in ("GET", "HEAD"):
            response = error_response(dialect, ChatError(
                405, f"{request.method} is not allowed here; use GET",
                code="METHOD_NOT_ALLOWED"), request_id, {"Allow": _ALLOW})
        elif keys and accepted_key(request, keys) is None:
            response = error_response(dialect, ChatError(
                401, "a valid API key is required", code="UNAUTHORIZED",
                type="authentication_error"), request_id)
        else:
            response = web.Response(
                body=orjson.dumps(dialect.render_models(names)),
                content_type="application/json", headers={"X-Request-ID": request_id})
        record(Outcome(
            request_id=request_id, route=self.path, client_dialect=dialect.name,
            status=response.status, duration=time.perf_counter() - started, path=request.path,
            method=request.method,
            client=client_address(request, config.server.trusted_proxies),
            user_agent=request.headers.get("User-Agent"),
            request_bytes=request.content.total_bytes,
            response_bytes=response.content_length or 0), env.metrics, env.log, None)
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


_BY_RUNTIME: weakref.WeakKeyDictionary[Runtime, dict[str, ModelList]] = (
    weakref.WeakKeyDictionary())
"""Each runtime's lists, made on first use: a reload's new runtime gets its own."""


def model_list_for(runtime: Runtime, path: str) -> ModelList | None:
    """The list served at ``path`` (a path no route serves), if any."""
    lists = _BY_RUNTIME.get(runtime)
    if lists is None:
        lists = _BY_RUNTIME[runtime] = model_lists(runtime.config)
    return lists.get(normalize_path(path))
