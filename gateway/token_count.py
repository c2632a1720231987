"""Token counting beside the routes whose dialect's clients count before they send (the
Anthropic SDK's and Claude Code's ``POST /v1/messages/count_tokens``, the OpenAI Responses API's
``POST /v1/responses/input_tokens``): where, how counted, in whose shape.

Where: a dialect declares its :class:`~gateway.dialects.TokenCount`; a route of that dialect
counts at its own path with the declared suffix appended (``/team/v1/messages`` counts at
``/team/v1/messages/count_tokens``). A path some route serves is that route's, never a count.

How: the route's first upstream in the balancer's order decides.

- Its dialect has a count endpoint of its own: the request is translated to that dialect as a
  chat request would be, cut to the keys that endpoint takes, and posted to the upstream's
  ``url`` with that dialect's suffix appended before any query string
  (``https://api.anthropic.com/v1/messages`` is asked at ``…/v1/messages/count_tokens``), with
  the headers a chat request to it carries. Its count is answered in the client's shape, marked
  ``X-Gateway-Token-Count: upstream``. Its errors reach the client in the client's dialect, as a
  chat request's would; a count is not retried nor failed over (it is a hint to the client).
- Else, or when that upstream answers 404, 405 or 501 (a backend that speaks the dialect's chat
  but has no count endpoint): an estimate, marked ``X-Gateway-Token-Count: estimate``.
  :func:`estimate` says how; no tokenizer is loaded, and models differ anyway.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import orjson
from aiohttp import web

from gateway.canonical import ChatError, ChatRequest
from gateway.carry import Unsupported
from gateway.config import UpstreamConfig
from gateway.dialects import Dialect, TokenCount, get, routes_by_prefix, upstream_url_of
from gateway.errors import ParseError, UpstreamError
from gateway.exchange import Env, error_response
from gateway.exchange.access import Refused, record_beside, request_id_of
from gateway.exchange.client import Keep, read_chat_request
from gateway.exchange.headers import upstream_headers
from gateway.exchange.outcome import NONE
from gateway.pipeline import adapt_request, parse_body
from gateway.runtime import RouteEntry, Runtime, normalize_path
from gateway.upstream import start_call

__all__ = ["CHARS_PER_TOKEN", "HEADER", "Counter", "count_url", "count_url_for", "counter_for",
           "counters", "estimate"]

HEADER = "X-Gateway-Token-Count"
"""Says where the count came from: ``upstream`` or ``estimate``."""
CHARS_PER_TOKEN = 4
"""The estimate's rule of thumb: English text and JSON average about four characters a token
in the tokenizers of the large providers."""
_NO_ENDPOINT = frozenset({404, 405, 501})


def estimate(req: ChatRequest) -> int:
    """About how many tokens ``req``'s input holds: its characters divided by
    :data:`CHARS_PER_TOKEN`, rounded up. Counted: every message's text (system prompts and tool
    results included), tool calls' names and arguments, reasoning text, and each tool's name,
    description and parameters as JSON. Not counted: images and other non-text parts (their
    cost depends on the model), and each API's per-message framing."""
    chars = 0
    for m in req.messages:
        chars += len(m.text)
        for call in m.tool_calls:
            chars += len(call.name) + len(call.arguments)
        for r in m.reasoning:
            chars += len(r.text)
    for t in req.tools:
        chars += len(orjson.dumps({"name": t.name, "description": t.description,
                                   "parameters": t.parameters}))
    return math.ceil(chars / CHARS_PER_TOKEN)


def count_url(url: str, suffix: str) -> str:
    """The count endpoint beside a chat URL: ``suffix`` appended to its path, the query kept
    (an Azure URL's ``?api-version=…``)."""
    base, sep, query = url.partition("?")
    return base.rstrip("/") + suffix + sep + query


def count_url_for(dialect: Dialect, url: str, model: str | None) -> str:
    """Where an upstream of ``dialect`` configured at ``url`` counts ``model``'s tokens: where
    the dialect says (a model named in the path), else :func:`count_url` with its suffix."""
    built = upstream_url_of(dialect, url, model, stream=False, count=True)
    if built is not None:
        return built
    assert dialect.token_count is not None
    return count_url(url, dialect.token_count.suffix)


@dataclass(frozen=True, slots=True)
class Counter:
    """The count endpoint of one route."""

    path: str
    entry: RouteEntry

    @property
    def declared(self) -> TokenCount:
        count = self.entry.client.token_count
        assert count is not None  # only such routes get a counter (counters())
        return count

    async def answer(self, request: web.Request, runtime: Runtime, env: Env) -> web.Response:
        """The count in the shape the client's dialect reads, or an error in that shape."""
        started = time.perf_counter()
        request_id = request_id_of(request)
        dialect = self.entry.client
        upstream, upstream_dialect = NONE, NONE
        try:
            # (a count refers to stored state as a chat request does: resolved alike)
            req, _ = await read_chat_request(request, self.entry, runtime.config, Keep(
                runtime, env.responses, env.log, request_id))
            state = runtime.states[env.balancer.order(self.entry.config, runtime.states)[0]]
            upstream, upstream_dialect = state.name, state.config.dialect
            response = await self._count(request, req, state.name, state.config, runtime, env,
                                         request_id)
        except Refused as r:
            response = error_response(dialect, r.error, request_id, r.headers)
        except Exception:  # a gateway bug: logged, and an answer the client can read
            env.log.exception("internal_error", request_id=request_id, path=self.path)
            response = error_response(dialect, ChatError(
                500, "internal gateway error", code="INTERNAL_ERROR"), request_id)
        record_beside(request, response, route=self.path, dialect=dialect.name,
                      request_id=request_id, started=started,
                      trusted_proxies=runtime.config.server.trusted_proxies,
                      metrics=env.metrics, log=env.log, upstream=upstream,
                      upstream_dialect=upstream_dialect, on_outcome=env.on_outcome)
        return response

    def _answer(self, tokens: int, source: str, request_id: str) -> web.Response:
        return web.Response(body=orjson.dumps(self.declared.render(tokens)),
                            content_type="application/json",
                            headers={"X-Request-ID": request_id, HEADER: source})

    async def _count(self, request: web.Request, req: ChatRequest, name: str,
                     up: UpstreamConfig, runtime: Runtime, env: Env,
                     request_id: str) -> web.Response:
        target: Dialect = get(up.dialect)
        theirs = target.token_count
        if theirs is None:
            return self._answer(estimate(req), "estimate", request_id)
        try:
            sent, _ = adapt_request(req, target, self.entry.config.policies, up.custom_tools)
        except Unsupported as e:
            raise Refused(ChatError(400, str(e), code="UNSUPPORTED", param=e.fields[0])) from None
        body = orjson.dumps(theirs.request(target.render_request(
            sent, stream=False, model=up.model, max_tokens=up.max_tokens)))
        headers = upstream_headers(request, runtime.config, up, target, False, request_id)
        try:
            call = await start_call(env.transport, up, body, headers, stream=False,
                                    url=count_url_for(target, up.url, req.model or up.model))
        except UpstreamError as e:
            env.log.warning("upstream_error", request_id=request_id, upstream=name,
                            kind=e.kind, error=up.scrubber(e.message))
            raise Refused(ChatError(504, "the upstream did not answer the count in time",
                                    code="GATEWAY_TIMEOUT") if e.kind == "timeout" else
                          ChatError(502, "the upstream could not be reached",
                                    code="BAD_GATEWAY")) from None
        try:
            if call.status in _NO_ENDPOINT:
                return self._answer(estimate(req), "estimate", request_id)
            if call.status >= 400:
                raise Refused(_upstream_error(call.status, await call.read_error(), target, up))
            try:
                tokens = theirs.parse(parse_body(await call.read_whole()))
            except (ParseError, UpstreamError):
                tokens = None
            if tokens is None:
                raise Refused(ChatError(502, "the upstream's count could not be read",
                                        code="BAD_GATEWAY"))
            return self._answer(tokens, "upstream", request_id)
        finally:
            call.close()


def _upstream_error(status: int, raw: bytes, dialect: Dialect,
                    up: UpstreamConfig) -> ChatError:
    try:
        parsed = dialect.parse_error(parse_body(raw)) if raw else None
    except ParseError:
        parsed = None  # an HTML error page: its text is not for the client
    if parsed is None:
        return ChatError(status, f"the upstream answered HTTP {status}")
    scrub = up.scrubber  # the upstream's words may quote its address or credentials
    return ChatError(status, scrub(parsed.message), scrub.optional(parsed.code),
                     scrub.optional(parsed.type), scrub.optional(parsed.param))


def counters(runtime: Runtime) -> dict[str, Counter]:
    """Every count path of ``runtime``'s routes."""
    out: dict[str, Counter] = {}
    for path, entry in runtime.routes.items():
        count = entry.client.token_count
        if count is None or entry.stream is True or routes_by_prefix(entry.client):
            continue  # (a prefix route's dialect names its count in the path: runtime.target_for)
        where = normalize_path(path) + count.suffix
        if where not in runtime.routes:
            out.setdefault(where, Counter(where, entry))
    return out


def counter_for(runtime: Runtime, path: str) -> Counter | None:
    """The count endpoint served at ``path`` (a path no route serves), if any: each runtime's
    counters are made on first use (:meth:`Runtime.derived`)."""
    return runtime.derived(counters).get(normalize_path(path))
