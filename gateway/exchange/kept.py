"""Stored responses kept by the gateway, for the clients of an API that keeps its answers (the
client's dialect declares :class:`~gateway.dialects.stored.StoredResponses`) on a route whose
``responses_state`` is ``gateway`` (docs/translation.md#stored-responses).

Before translation: what the request refers to (``previous_response_id``, ``item_reference``) is
read from the store and put into the request in the client's own dialect, so that any upstream
gets the whole conversation. After: the finished answer the client got (a whole body, or the
response a stream's terminal event carries) is kept with its input and output items, before that
answer (or that terminal event) goes out, so that the client's next request finds it. A stream
that ends in an error or is cut is not kept.

Everything is kept per owner: the SHA-256 of the API key the client presented (never the key),
or ``''`` for a client that presents none. Another owner's response is a 404 (a 400 for a
``previous_response_id``), exactly like one that does not exist.

The store is reached through :class:`KeptStore` (implemented on the history's database by
:mod:`gateway.history.responses`): the exchange never imports a database driver.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import orjson
from aiohttp import web

from gateway.auth import presented_key
from gateway.canonical import JSON, ChatError, ChatRequest
from gateway.dialects.stored import StoredAnswer, StoredResponses, stored_responses_of
from gateway.errors import GatewayError, UpstreamError
from gateway.exchange.access import Refused, check_access, record_beside, request_id_of
from gateway.exchange.answer import error_response
from gateway.exchange.headers import upstream_headers
from gateway.exchange.sink import ResponseSink
from gateway.framing import reader_for
from gateway.incoming import ClientRequest
from gateway.runtime import RouteEntry, Runtime, normalize_path
from gateway.upstream import UpstreamRequest

if TYPE_CHECKING:
    from gateway.exchange import Env

__all__ = [
    "INPUT_ITEMS_LIMIT",
    "Keeping",
    "KeptStore",
    "StoredRoute",
    "owner_of",
    "resolve",
    "stored_route_for",
]

INPUT_ITEMS_LIMIT = (20, 100)
"""``GET …/input_items``: the default and the largest ``limit`` (the API's)."""


@dataclass(frozen=True, slots=True)
class NewResponse:
    """A finished answer to keep."""

    id: str
    previous_id: str | None
    body: str
    """The response object's JSON."""
    inputs: Sequence[tuple[str, str]]
    """The request's own input items: ``(id, JSON)``."""
    outputs: Sequence[tuple[str, str]]
    """The answer's output items: ``(id, JSON)``."""


class KeptStore(Protocol):
    """Where the gateway keeps stored responses (bodies as JSON text). Every method raises a
    :class:`~gateway.errors.GatewayError` (the store's ``StoreUnavailable``) when it fails."""

    @property
    def ready(self) -> bool: ...

    def status(self) -> dict[str, Any]:
        """For /readyz and /api/status: the store's URL without password, and its health."""
        ...

    async def conversation(self, owner: str, response_id: str) -> list[str] | None: ...

    async def items(self, owner: str, ids: Sequence[str]) -> dict[str, str]: ...

    async def save(self, owner: str, new: NewResponse) -> None: ...

    async def get(self, owner: str, response_id: str) -> str | None: ...

    async def input_items(self, owner: str, response_id: str, *, limit: int, descending: bool,
                          after: str | None) -> tuple[list[str], bool] | None: ...

    async def delete(self, owner: str, response_id: str) -> bool: ...


def owner_of(request: ClientRequest) -> str:
    """The identity stored responses are kept under: the SHA-256 of the key the client
    presented, ``''`` for none."""
    key = presented_key(request)
    return hashlib.sha256(key.encode()).hexdigest() if key else ""


_FORWARD_LIMIT = 64 * 1024 * 1024
"""Most bytes of a stored answer read from an upstream that keeps them."""


def _unavailable() -> ChatError:
    return ChatError(503, "the responses store is unavailable; try again later",
                     code="STORE_UNAVAILABLE", retry_after=5)


@dataclass(slots=True)
class Keeping:
    """One request whose answer the gateway keeps once it is finished."""

    store: KeptStore
    stored: StoredResponses
    owner: str
    previous: str | None
    inputs: list[JSON]
    log: Any
    request_id: str
    kept: bool = False

    def sink(self, inner: ResponseSink, entry: RouteEntry) -> KeepingSink:
        return KeepingSink(inner, self, entry)

    async def keep(self, answer: StoredAnswer) -> None:
        if self.kept:
            return
        self.kept = True

        def pairs(items: list[JSON]) -> list[tuple[str, str]]:
            return [(str(i.get("id", "")) if isinstance(i, dict) else "",
                     orjson.dumps(i).decode()) for i in items]
        try:
            await self.store.save(self.owner, NewResponse(
                answer.id, self.previous, orjson.dumps(answer.body).decode(),
                pairs(self.inputs), pairs(answer.output)))
        except GatewayError as e:  # the answer still goes out; a later reference will 404
            self.log.warning("response_not_kept", request_id=self.request_id, error=str(e))


class KeepingSink:
    """A sink that keeps the finished answer before it goes out (:class:`ResponseSink`)."""

    __slots__ = ("_inner", "_keeping", "_reader")

    def __init__(self, inner: ResponseSink, keeping: Keeping, entry: RouteEntry) -> None:
        self._inner = inner
        self._keeping = keeping
        self._reader = reader_for(entry.client.framing, named=entry.client.named_events)

    async def whole(self, status: int, headers: dict[str, str], body: bytes) -> None:
        if status == 200:
            try:
                answer = self._keeping.stored.finished(orjson.loads(body))
            except orjson.JSONDecodeError:
                answer = None
            if answer is not None:
                await self._keeping.keep(answer)
        await self._inner.whole(status, headers, body)

    async def start(self, headers: dict[str, str]) -> None:
        await self._inner.start(headers)

    async def _watch(self, data: bytes, last: bool = False) -> None:
        if self._keeping.kept:
            return
        payloads = self._reader.feed(data) if data else []
        if last:
            payloads += self._reader.finish()
        for p in payloads:
            answer = self._keeping.stored.finished(p)
            if answer is not None:
                await self._keeping.keep(answer)
                return

    async def write(self, data: bytes) -> None:
        await self._watch(data)
        await self._inner.write(data)

    async def finish(self, last: bytes = b"") -> None:
        await self._watch(last, last=True)
        await self._inner.finish(last)

    def cut(self) -> web.StreamResponse:
        return self._inner.cut()

    def response(self) -> web.StreamResponse:
        return self._inner.response()


@dataclass(frozen=True, slots=True)
class Resolved:
    body: JSON
    keeping: Keeping | None = None
    mark: tuple[StoredResponses, str | None, bool] | None = None
    """Note on the parsed request that the gateway keeps its state."""

    def marked(self, req: ChatRequest) -> None:
        if self.mark is not None:
            stored, previous, store = self.mark
            stored.mark(req, previous, store)


async def resolve(request: ClientRequest, entry: RouteEntry, runtime: Runtime, body: JSON,
                  store: KeptStore | None, log: Any, request_id: str) -> Resolved:
    """The request body with what it refers to put in (routes that keep state at the
    gateway), and what keeps its answer; raises :class:`Refused` (in the client's dialect's
    words) for a reference to nothing or a store that cannot be reached. ``DialectError`` for a
    malformed reference."""
    stored = stored_responses_of(entry.client)
    mode = entry.responses_state
    if stored is None or mode is None:
        return Resolved(body)
    refs = stored.references(body)
    if mode == "upstream":
        if refs and any(runtime.config.upstreams[u.name].dialect != entry.client.name
                        for u in entry.config.upstreams):
            field = "previous_response_id" if refs.previous else "input"
            raise Refused(ChatError(
                400, f"{field}: refers to a stored response or item, which this route leaves "
                "to its upstream, and an upstream of another API keeps none; send the whole "
                "conversation in input (or configure responses_store for the gateway to keep "
                "them)", param=field,
                type="invalid_request_error"))
        return Resolved(body)
    mark = (stored, refs.previous, refs.store)
    if not refs and not refs.store:
        return Resolved(body, None, mark)  # nothing to read, nothing to keep
    if store is None or not store.ready:
        raise Refused(_unavailable())
    owner = owner_of(request)
    earlier: list[JSON] = []
    items: dict[str, JSON] = {}
    try:
        if refs.previous is not None:
            found = await store.conversation(owner, refs.previous)
            if found is None:
                raise Refused(stored.not_found("response", refs.previous))
            earlier = [orjson.loads(b) for b in found]
        if refs.items:
            texts = await store.items(owner, refs.items)
            missing = next((i for i in refs.items if i not in texts), None)
            if missing is not None:
                raise Refused(stored.not_found("item", missing))
            items = {k: orjson.loads(v) for k, v in texts.items()}
    except GatewayError:
        raise Refused(_unavailable()) from None
    body, inputs = stored.expand(body, earlier, items)
    keeping = Keeping(store, stored, owner, refs.previous, inputs, log, request_id) \
        if refs.store else None
    return Resolved(body, keeping, mark)


# --- GET / DELETE of a stored response ---------------------------------------------------------
# Kept by the gateway: answered from the store. Kept by the upstream (a route whose upstreams all
# speak the client's API): the same request goes to the route's first upstream, and its answer
# comes back as it is (the upstream's own ids, shapes and errors).


@dataclass(frozen=True, slots=True)
class StoredRoute:
    """``{route}/{id}`` and ``{route}/{id}/input_items`` beside a route that keeps state."""

    entry: RouteEntry
    response_id: str
    items: bool
    """``…/input_items``."""

    async def answer(self, request: web.Request, runtime: Runtime, env: Env) -> web.Response:
        started = time.perf_counter()
        rid = request_id_of(request)
        stored = stored_responses_of(self.entry.client)
        assert stored is not None  # only such routes get here (stored_route_for)
        try:
            response = await self._answer(request, runtime, env, stored, rid)
        except Refused as r:
            response = error_response(self.entry.client, r.error, rid, r.headers)
        response.headers["X-Request-ID"] = rid
        record_beside(request, response, route=self.entry.config.path,
                      dialect=self.entry.client.name, request_id=rid, started=started,
                      trusted_proxies=runtime.config.server.trusted_proxies,
                      metrics=env.metrics, log=env.log, on_outcome=env.on_outcome)
        return response

    async def _answer(self, request: web.Request, runtime: Runtime, env: Env,
                      stored: StoredResponses, rid: str) -> web.Response:
        check_access(request, runtime.config.auth.accepted_keys,
                     ("GET",) if self.items else ("GET", "DELETE"))
        if self.entry.responses_state == "upstream":
            return await self._forward(request, runtime, env, rid)
        store = env.responses
        if store is None or not store.ready:
            raise Refused(_unavailable())
        owner = owner_of(request)
        gone = Refused(stored.not_found("stored", self.response_id[:200]))
        try:
            if self.items:
                limit, descending, after = _page(request)
                page = await store.input_items(owner, self.response_id, limit=limit,
                                               descending=descending, after=after)
                if page is None:
                    raise gone
                texts, more = page
                return _json(stored.item_list([orjson.loads(t) for t in texts], more))
            if request.method == "DELETE":
                if not await store.delete(owner, self.response_id):
                    raise gone
                return _json(stored.deleted(self.response_id))
            body = await store.get(owner, self.response_id)
        except GatewayError:
            raise Refused(_unavailable()) from None
        if body is None:
            raise gone
        return web.Response(body=body.encode(), content_type="application/json")


    async def _forward(self, request: web.Request, runtime: Runtime, env: Env,
                       rid: str) -> web.Response:
        """The upstream keeps them: the same request to its first upstream (of the client's
        API), answered as it answers."""
        state = runtime.states[env.balancer.order(self.entry.config, runtime.states)[0]]
        up = state.config
        base, sep, query = up.url.partition("?")
        tail = "/" + quote(self.response_id, safe="") + ("/input_items" if self.items else "")
        url = base.rstrip("/") + tail + "?" + "&".join(
            q for q in (request.query_string, query if sep else "") if q)
        headers = upstream_headers(request, runtime.config, up, self.entry.client, False, rid)
        try:
            response = await env.transport.send(UpstreamRequest(
                url.rstrip("?"), b"", headers, up.connect_timeout,
                up.first_byte_timeout or up.timeout, request.method))
        except UpstreamError as e:
            env.log.warning("upstream_error", request_id=rid, upstream=state.name, kind=e.kind,
                            error=up.scrubber(e.message))
            raise Refused(ChatError(502, f"upstream {state.name} could not be reached",
                                    code="BAD_GATEWAY")) from None
        status, body = response.status, bytearray()
        try:
            while piece := await response.read():
                body += piece
                if len(body) > _FORWARD_LIMIT:
                    raise UpstreamError("malformed", "the answer is too large")
        except UpstreamError:
            raise Refused(ChatError(502, f"upstream {state.name} did not give its whole answer",
                                    code="BAD_GATEWAY")) from None
        finally:
            response.close()
        return web.Response(status=status, body=bytes(body), content_type="application/json")


def _page(request: web.Request) -> tuple[int, bool, str | None]:
    q = request.query
    default, most = INPUT_ITEMS_LIMIT
    raw = q.get("limit")
    try:
        limit = default if raw is None else int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        raise Refused(ChatError(400, f"limit: must be a whole number from 1 to {most}",
                                param="limit", type="invalid_request_error"))
    order = q.get("order", "desc")
    if order not in ("asc", "desc"):
        raise Refused(ChatError(400, "order: must be asc or desc", param="order",
                                type="invalid_request_error"))
    return limit, order == "desc", q.get("after") or None


def _json(body: JSON) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def stored_route_for(runtime: Runtime, path: str) -> StoredRoute | None:
    """The stored response named by ``path`` (a path no route serves), if it is one beside a
    route that keeps state at the gateway."""
    path = normalize_path(path)
    base, _, last = path.rpartition("/")
    items = last == "input_items"
    if items:
        base, _, last = base.rpartition("/")
    if not last:
        return None
    entry = runtime.route_for(base)
    if entry is None or entry.responses_state is None or entry.stream is True:
        return None
    if entry.responses_state == "upstream" and not all(
            runtime.config.upstreams[u.name].dialect == entry.client.name
            for u in entry.config.upstreams):
        return None  # no upstream of this route keeps them either: 404, no route
    return StoredRoute(entry, last, items)
