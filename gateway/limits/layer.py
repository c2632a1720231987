"""Named keys at run time: which key a request presented, its route allow-list, its admission
against its limits, and the settlement of what it used.

The exchange calls three hooks, and only when ``auth.keys`` is set: :meth:`Limits.grant` as a
request begins (which named key, if any), :meth:`Grant.admit` once its body is read (403, 429,
or admitted with its reservation), and :meth:`Grant.settle` once its outcome is known. A key
without ``limits`` never reaches the store; a config without ``auth.keys`` never reaches this
module.

Tokens: an admitted request reserves its prompt's estimate
(:func:`gateway.token_count.estimate`) plus its own output cap, or ``limits.default_output_tokens``
when it names none. Settled from the usage its answer reported; a part the answer did not report
(a stream the client or the upstream cut before its usage came, a backend that reports none) is
estimated and counted as such: the prompt at its estimate, the output at a quarter of the answer
bytes the gateway sent (framing included, so the estimate errs high, never low). An answer that
failed before any byte of it went out uses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.auth import presented_key
from gateway.canonical import ChatError, ChatRequest, random_hex
from gateway.config import AuthConfig, GatewayConfig, LimitsConfig
from gateway.exchange.access import Refused
from gateway.incoming import ClientRequest
from gateway.limits.headers import HeaderSink, rate_headers
from gateway.limits.redis_store import RedisStore
from gateway.limits.store import KeyUsage, MemoryStore, Store, StoreError
from gateway.limits.windows import Admission, Plan, Settlement, plan_of
from gateway.log import redact_url
from gateway.metrics import Metrics
from gateway.token_count import CHARS_PER_TOKEN, estimate

if TYPE_CHECKING:
    from gateway.exchange.answer import Answerer
    from gateway.exchange.outcome import Outcome
    from gateway.runtime import RouteEntry

__all__ = ["Grant", "Limits", "NamedKey", "open_store"]


@dataclass(frozen=True, slots=True)
class NamedKey:
    name: str
    routes: frozenset[str] | None
    plan: Plan | None
    """``None``: the key has no ``limits`` (never in the store)."""


def open_store(settings: LimitsConfig, wall: Callable[[], float]) -> Store:
    if settings.store == "memory":
        return MemoryStore(wall)
    return RedisStore(settings.store, settings.timeout, settings.pool_size)


class Limits:
    """The named keys' layer of one app: its store (opened with the app, kept across reloads:
    counters are kept by key name) and the store's health."""

    def __init__(self, config: GatewayConfig, metrics: Metrics, log: Any,
                 wall: Callable[[], float]) -> None:
        self.store_url = config.limits.store
        self.store = open_store(config.limits, wall)
        self.metrics = metrics
        self.log = log
        self._auth: AuthConfig | None = None
        self._keys: dict[bytes, NamedKey] = {}
        self._down = False
        self._retry_at = 0.0
        self._pending: set[asyncio.Task[None]] = set()
        self.releasing: dict[str, set[str]] = {}
        """By key name: in-flight slots of requests that ended, until the store confirmed their
        release (their settlement, or an admission that carried them)."""

    # --- which key ----------------------------------------------------------------------------

    def keys_of(self, auth: AuthConfig) -> dict[bytes, NamedKey]:
        """The named keys of ``auth`` by their key's SHA-256 (built once per loaded config)."""
        if auth is not self._auth:
            self._keys = {
                _digest(k.key): NamedKey(k.name, None if k.routes is None else frozenset(k.routes),
                                         None if k.limits is None else plan_of(k.limits))
                for k in auth.keys}
            self._auth = auth
        return self._keys

    def grant(self, request: ClientRequest, config: GatewayConfig) -> Grant | None:
        """The named key ``request`` presented, or ``None`` (no key, or an ``api_keys`` one)."""
        given = presented_key(request)
        if given is None:
            return None
        key = self.keys_of(config.auth).get(_digest(given))
        return None if key is None else Grant(self, key, config.limits)

    # --- the store's health -------------------------------------------------------------------

    def usable(self) -> bool:
        return not self._down or asyncio.get_running_loop().time() >= self._retry_at

    def failed(self, op: str, e: StoreError, settings: LimitsConfig) -> None:
        self.metrics.limits_store_errors.labels(op).inc()
        self._retry_at = asyncio.get_running_loop().time() + settings.retry_interval
        if not self._down:
            self._down = True
            self.log.error("limits_store_unreachable", store=redact_url(self.store_url),
                           op=op, error=str(e), policy=settings.on_store_error)

    def reached(self) -> None:
        if self._down:
            self._down = False
            self.log.warning("limits_store_recovered", store=redact_url(self.store_url))

    async def admitted(self, key: NamedKey, plan: Plan, reserve: int, member: str,
                       released: tuple[str, ...], settings: LimitsConfig) -> Admission:
        """The store's admission. A client that goes away while a shared store answers does
        not leave its admission behind: when it was admitted, its reservation and slot are
        given back as soon as the answer comes."""
        lease = math.ceil(settings.lease * 1000)
        if isinstance(self.store, MemoryStore):  # answers at once: nothing to go away from
            return await self.store.admit(key.name, plan, reserve, member, lease, released)
        call = asyncio.ensure_future(
            self.store.admit(key.name, plan, reserve, member, lease, released))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            def give_back(done: asyncio.Future[Admission]) -> None:
                if done.cancelled() or done.exception() is not None:
                    return
                adm = done.result()
                if adm.refused is None:
                    self.settle_later(key, plan, adm.at_ms, member,
                                      Settlement(reserve, 0, 0, 0), settings)
            call.add_done_callback(give_back)
            raise

    def settle_later(self, key: NamedKey, plan: Plan, at_ms: int, member: str,
                     used: Settlement, settings: LimitsConfig) -> None:
        """The store's settlement, off the request's path (its answer is already out). Until it
        arrives, the key's next admissions free the slot too; a settlement that failed leaves
        it to them (else the slot would be held until its lease ends)."""
        if isinstance(self.store, MemoryStore):  # nothing to wait for
            self.store.settle_now(key.name, plan, at_ms, member, used)
            return
        releasing = None
        if plan.max_concurrent is not None:
            releasing = self.releasing.setdefault(key.name, set())
            if len(releasing) < _MAX_RELEASING:
                releasing.add(member)

        async def run() -> None:
            try:
                await self.store.settle(key.name, plan, at_ms, member, used)
            except StoreError as e:
                self.failed("settle", e, settings)
            else:
                self.reached()
                if releasing is not None:
                    releasing.discard(member)
        task = asyncio.get_running_loop().create_task(run())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def usage(self, config: GatewayConfig) -> dict[str, Any]:
        """``GET /admin/usage``: each named key's windows, in-flight count and totals."""
        keys: list[dict[str, Any]] = []
        reachable = True
        for k in config.auth.keys:
            entry: dict[str, Any] = {
                "name": k.name, "routes": k.routes,
                "limits": None if k.limits is None else k.limits.model_dump(exclude_none=True),
                "windows": {}, "in_flight": None, "totals": None}
            named = self.keys_of(config.auth)[_digest(k.key)]
            if named.plan is not None:
                try:
                    got: KeyUsage | None = await self.store.usage(k.name, named.plan)
                except StoreError as e:
                    self.failed("usage", e, config.limits)
                    got, reachable = None, False
                if got is not None:
                    entry["windows"] = {s.window.name: {
                        "limit": s.window.limit, "used": s.used, "remaining": s.remaining,
                        "reset_seconds": round(s.reset, 3)} for s in got.states}
                    entry["in_flight"] = got.in_flight if named.plan.max_concurrent else None
                    entry["totals"] = got.totals
            keys.append(entry)
        return {"store": "memory" if self.store_url == "memory" else "redis",
                "store_reachable": reachable, "keys": keys}

    async def status_rows(self, config: GatewayConfig) -> list[dict[str, Any]]:
        """The status page's table: one flat row a named key (a window as ``used / limit``)."""
        rows = []
        for k in (await self.usage(config))["keys"]:
            row: dict[str, Any] = {"key": k["name"]}
            for name, w in k["windows"].items():
                row[name] = f'{w["used"]} / {w["limit"]}'
            if k["in_flight"] is not None:
                row["in_flight"] = k["in_flight"]
            row.update(k["totals"] or {})
            rows.append(row)
        return rows

    def reloaded(self, config: GatewayConfig) -> None:
        if config.limits.store != self.store_url:
            self.log.warning("limits_store_needs_restart", store=redact_url(self.store_url))

    async def aclose(self) -> None:
        if self._pending:  # the last settlements, bounded: a store that hangs holds no exit
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):
                    await asyncio.gather(*self._pending, return_exceptions=True)
        await self.store.aclose()


_SDK_RETRY_AFTER_MAX = 120.0
"""The longest ``Retry-After`` the OpenAI and Anthropic SDKs wait on before retrying."""
_MAX_RELEASING = 1000
"""Most slot releases of one key kept for its next admissions (past it, a release whose
settlement failed waits for its lease)."""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class Grant:
    """One request on a named key."""

    __slots__ = ("at_ms", "key", "layer", "member", "plan", "prompt", "req", "reserved",
                 "settings")

    def __init__(self, layer: Limits, key: NamedKey, settings: LimitsConfig) -> None:
        self.layer = layer
        self.key = key
        self.settings = settings
        self.req: ChatRequest | None = None
        self.prompt: int | None = None
        self.reserved = 0
        self.at_ms: int | None = None
        """Set once the store admitted (and counted) the request."""
        self.member = ""
        self.plan: Plan | None = None

    async def admit(self, entry: RouteEntry, req: ChatRequest, answerer: Answerer) -> None:
        """Raises :class:`Refused` (403 off its routes, 429 over a limit, 503 when the store is
        unreachable and ``on_store_error: deny``); else the answer carries the limit headers."""
        key, layer, settings = self.key, self.layer, self.settings
        self.req = req
        path = entry.config.path
        if key.routes is not None and path not in key.routes:
            raise Refused(ChatError(403, f"this key may not use {path}", code="FORBIDDEN"))
        plan = key.plan
        if plan is None:
            return
        self.prompt = estimate(req)
        cap = req.sampling.get("max_tokens")
        output = cap if isinstance(cap, int) and cap > 0 else settings.default_output_tokens
        reserve = self.prompt + output
        member = random_hex()
        adm = None
        if layer.usable():
            releasing = layer.releasing.get(key.name)
            released = tuple(releasing) if releasing else ()
            try:
                adm = await layer.admitted(key, plan, reserve, member, released, settings)
            except StoreError as e:
                layer.failed("admit", e, settings)
            else:
                layer.reached()
                if releasing:
                    releasing.difference_update(released)
        metrics = layer.metrics
        if adm is None:
            if settings.on_store_error == "deny":
                metrics.key_limited.labels(key.name, "store_unavailable").inc()
                raise Refused(ChatError(503, "the key's limits cannot be checked right now",
                                        code="UNAVAILABLE", retry_after=settings.retry_interval))
            return  # admitted without limits while the store is away: nothing reserved
        headers = rate_headers(adm)
        if adm.refused is not None:
            metrics.key_limited.labels(key.name, adm.refused).inc()
            wait = max(adm.retry_after, 1.0)
            # The OpenAI and Anthropic SDKs read the wait in milliseconds first, wait up to two
            # minutes, and retry at once on their own backoff past that unless told not to: a
            # spent day or month is not worth their retries.
            headers["retry-after-ms"] = str(math.ceil(wait * 1000))
            if wait > _SDK_RETRY_AFTER_MAX:
                headers["x-should-retry"] = "false"
            raise Refused(ChatError(429, f"rate limit reached: {adm.refused} of key {key.name}",
                                    code="rate_limit_exceeded", retry_after=wait), headers)
        self.at_ms, self.reserved, self.member, self.plan = adm.at_ms, reserve, member, plan
        answerer.sink = HeaderSink(answerer.sink, headers)

    def settle(self, o: Outcome) -> None:
        """Counts the request (metrics, the access log's ``key``) and settles what it used."""
        key, metrics = self.key, self.layer.metrics
        o.key = key.name
        metrics.key_requests.labels(key.name, o.route, str(o.status)).inc()
        used = self._used(o)
        if used is not None:
            tokens = metrics.key_tokens
            for kind, n in (("prompt", used.prompt), ("completion", used.completion)):
                if n:
                    tokens.labels(key.name, kind).inc(n)
            if used.estimated:
                tokens.labels(key.name, "estimated").inc(used.estimated)
        if self.at_ms is not None and self.plan is not None:
            self.layer.settle_later(key, self.plan, self.at_ms, self.member,
                                    used or Settlement(self.reserved, 0, 0, 0), self.settings)

    def _used(self, o: Outcome) -> Settlement | None:
        """What the request used: nothing when no upstream answered any of it."""
        if self.req is None or not o.attempts:
            return None
        reached = o.status < 400 or (o.disconnected and (o.response_bytes > 0 or any(
            a.outcome == "cancelled" for a in o.attempts)))
        if not reached:
            return None
        u = o.usage
        estimated = 0
        prompt = u.input_tokens if u is not None else None
        if prompt is None:
            prompt = self.prompt if self.prompt is not None else estimate(self.req)
            estimated += prompt
        completion = u.output_tokens if u is not None else None
        if completion is None:
            completion = math.ceil(o.response_bytes / CHARS_PER_TOKEN)
            estimated += completion
        return Settlement(self.reserved, prompt, completion, estimated)
