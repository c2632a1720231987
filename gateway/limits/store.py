"""Where limits are counted: the :class:`Store` interface, its errors, and the embedded
:class:`MemoryStore` (one process). :mod:`.redis_store` is the shared one.

A store does in one call what one request needs: :meth:`Store.admit` checks and counts every
window and the in-flight set at once (atomically: two requests never both take the last slot),
:meth:`Store.settle` replaces a reservation with what was used and frees the in-flight slot.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol

from gateway.limits.windows import Admission, Plan, Settlement, Window, WindowState

__all__ = ["TOTALS", "TOTALS_TTL_MS", "KeyUsage", "MemoryStore", "Store", "StoreError"]

TOTALS = ("requests", "limited", "tokens", "prompt_tokens", "completion_tokens",
          "estimated_tokens")
"""A key's running totals, as ``/admin/usage`` shows them."""
TOTALS_TTL_MS = 40 * 86_400_000
"""A key's totals are forgotten after this long without a request."""
CONCURRENCY_RETRY = 1.0
"""``Retry-After`` of a refusal by ``max_concurrent``: when a request in flight ends is not
known."""


class StoreError(Exception):
    """The store could not be reached or did not answer in time."""


@dataclass(frozen=True, slots=True)
class KeyUsage:
    states: tuple[WindowState, ...]
    in_flight: int
    totals: dict[str, int]


class Store(Protocol):
    async def admit(self, key: str, plan: Plan, reserve: int, member: str, lease_ms: int,
                    released: Collection[str] = ()) -> Admission:
        """Admit one request of ``key`` reserving ``reserve`` tokens, or say which limit
        refuses; ``member`` names its in-flight slot, held at most ``lease_ms``. ``released``:
        slots of requests that ended whose settlements may not have arrived yet (freed first:
        a settlement runs off the request's path, and the next request of the same client can
        overtake it)."""

    async def settle(self, key: str, plan: Plan, at_ms: int, member: str,
                     used: Settlement) -> None:
        """Replace the reservation of the request admitted at ``at_ms`` by what it used."""

    async def usage(self, key: str, plan: Plan) -> KeyUsage:
        """The key's windows, in-flight count and totals, counting nothing."""

    async def aclose(self) -> None: ...


def retry_after(live: list[tuple[int, int]], excess: int, w: Window, now_ms: int) -> float:
    """Seconds until the oldest buckets that hold ``excess`` slid out of the window."""
    freed = 0
    for idx, v in sorted(live):
        freed += v
        if freed >= excess:
            return max(0.0, ((idx + w.buckets) * w.width_ms - now_ms) / 1000)
    return w.length_ms / 1000


class _Buckets:
    """One window's buckets, oldest first (a bucket is only ever added as the newest), and
    their sum: sliding drops from the front, so an admission costs the same whatever the
    window holds."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0

    def slide(self, w: Window, now_ms: int) -> int:
        """Drops the buckets out of the window; the current bucket."""
        cur = now_ms // w.width_ms
        counts = self.counts
        while counts:
            first = next(iter(counts))
            if first > cur - w.buckets:
                break
            self.total -= counts.pop(first)
        return cur

    def add(self, idx: int, amount: int) -> None:
        self.counts[idx] = self.counts.get(idx, 0) + amount
        self.total += amount

    def correct(self, idx: int, delta: int) -> None:
        old = self.counts.get(idx)
        if old is not None:  # else it slid out: nothing left to correct
            new = max(0, old + delta)
            self.counts[idx] = new
            self.total += new - old

    def state(self, w: Window, now_ms: int) -> WindowState:
        counts = self.counts
        reset = ((next(reversed(counts)) + w.buckets) * w.width_ms - now_ms) / 1000 if counts \
            else 0.0
        return WindowState(w, self.total, reset)


@dataclass(slots=True)
class _KeyCounts:
    windows: dict[str, _Buckets] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    """Slot to the end of its lease, oldest first."""
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOTALS, 0))

    def buckets(self, w: Window) -> _Buckets:
        b = self.windows.get(w.name)
        if b is None:
            b = self.windows[w.name] = _Buckets()
        return b

    def expire(self, now_ms: int) -> None:
        # Slots are added in time order with the same lease (a reload may change it: then a
        # slot may outlive its lease by the difference, never end early).
        in_flight = self.in_flight
        while in_flight:
            first = next(iter(in_flight))
            if in_flight[first] > now_ms:
                break
            del in_flight[first]


class MemoryStore:
    """This process's counters: the same windows and rules as the shared store, with no
    network. Counters are kept by key name, so a reload keeps them."""

    def __init__(self, wall: Callable[[], float]) -> None:
        self._wall = wall
        self._keys: dict[str, _KeyCounts] = {}

    def _now_ms(self) -> int:
        return math.floor(self._wall() * 1000)

    def _counts(self, key: str) -> _KeyCounts:
        counts = self._keys.get(key)
        if counts is None:
            counts = self._keys[key] = _KeyCounts()
        return counts

    async def admit(self, key: str, plan: Plan, reserve: int, member: str, lease_ms: int,
                    released: Collection[str] = ()) -> Admission:
        now = self._now_ms()
        counts = self._counts(key)
        for m in released:
            counts.in_flight.pop(m, None)
        refused: str | None = None
        wait = 0.0
        found: list[tuple[Window, _Buckets, int]] = []
        for w in plan.windows:
            b = counts.buckets(w)
            cur = b.slide(w, now)
            found.append((w, b, cur))
            if refused is None and b.total + 1 > w.limit:
                refused = w.name
                wait = retry_after(list(b.counts.items()), b.total + 1 - w.limit, w, now)
        in_flight = counts.in_flight
        if plan.max_concurrent is not None:
            counts.expire(now)
            if refused is None and len(in_flight) >= plan.max_concurrent:
                refused, wait = "max_concurrent", CONCURRENCY_RETRY
        if refused is None:
            for w, b, cur in found:
                b.add(cur, reserve if w.tokens else 1)
            if plan.max_concurrent is not None:
                in_flight[member] = now + lease_ms
            counts.totals["requests"] += 1
        else:
            counts.totals["limited"] += 1
        states = tuple(b.state(w, now) for w, b, _ in found)
        return Admission(now, refused, wait, states, len(in_flight))

    def settle_now(self, key: str, plan: Plan, at_ms: int, member: str,
                   used: Settlement) -> None:
        """:meth:`settle`, at once (nothing to wait for: the layer calls it inline)."""
        now = self._now_ms()
        counts = self._counts(key)
        delta = used.tokens - used.reserved
        if delta:
            for w in plan.windows:
                if w.tokens:
                    b = counts.buckets(w)
                    b.slide(w, now)
                    b.correct(at_ms // w.width_ms, delta)
        counts.in_flight.pop(member, None)
        t = counts.totals
        t["tokens"] += used.tokens
        t["prompt_tokens"] += used.prompt
        t["completion_tokens"] += used.completion
        t["estimated_tokens"] += used.estimated

    async def settle(self, key: str, plan: Plan, at_ms: int, member: str,
                     used: Settlement) -> None:
        self.settle_now(key, plan, at_ms, member, used)

    async def usage(self, key: str, plan: Plan) -> KeyUsage:
        now = self._now_ms()
        counts = self._counts(key)
        states = []
        for w in plan.windows:
            b = counts.buckets(w)
            b.slide(w, now)
            states.append(b.state(w, now))
        counts.expire(now)
        return KeyUsage(tuple(states), len(counts.in_flight), dict(counts.totals))

    async def aclose(self) -> None:
        return None
