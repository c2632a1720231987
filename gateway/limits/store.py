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


@dataclass(slots=True)
class _KeyCounts:
    windows: dict[str, dict[int, int]] = field(default_factory=dict)
    in_flight: dict[str, float] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOTALS, 0))


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

    @staticmethod
    def _live(buckets: dict[int, int], w: Window, now_ms: int) -> tuple[int, int]:
        """What the window holds (old buckets dropped), and its current bucket."""
        cur = now_ms // w.width_ms
        for idx in [i for i in buckets if i <= cur - w.buckets]:
            del buckets[idx]
        return sum(buckets.values()), cur

    @staticmethod
    def _state(w: Window, buckets: dict[int, int], used: int, now_ms: int) -> WindowState:
        reset = ((max(buckets) + w.buckets) * w.width_ms - now_ms) / 1000 if buckets else 0.0
        return WindowState(w, used, reset)

    async def admit(self, key: str, plan: Plan, reserve: int, member: str, lease_ms: int,
                    released: Collection[str] = ()) -> Admission:
        now = self._now_ms()
        counts = self._counts(key)
        for m in released:
            counts.in_flight.pop(m, None)
        refused: str | None = None
        wait = 0.0
        found: list[tuple[Window, dict[int, int], int, int]] = []
        for w in plan.windows:
            buckets = counts.windows.setdefault(w.name, {})
            used, cur = self._live(buckets, w, now)
            found.append((w, buckets, used, cur))
            if refused is None and used + 1 > w.limit:
                refused = w.name
                wait = retry_after(list(buckets.items()), used + 1 - w.limit, w, now)
        in_flight = counts.in_flight
        if plan.max_concurrent is not None:
            for m in [m for m, until in in_flight.items() if until <= now]:
                del in_flight[m]
            if refused is None and len(in_flight) >= plan.max_concurrent:
                refused, wait = "max_concurrent", CONCURRENCY_RETRY
        states = []
        for w, buckets, used, cur in found:
            if refused is None:
                amount = reserve if w.tokens else 1
                buckets[cur] = buckets.get(cur, 0) + amount
                used += amount
            states.append(self._state(w, buckets, used, now))
        if refused is None:
            if plan.max_concurrent is not None:
                in_flight[member] = now + lease_ms
            counts.totals["requests"] += 1
        else:
            counts.totals["limited"] += 1
        return Admission(now, refused, wait, tuple(states), len(in_flight))

    async def settle(self, key: str, plan: Plan, at_ms: int, member: str,
                     used: Settlement) -> None:
        now = self._now_ms()
        counts = self._counts(key)
        delta = used.tokens - used.reserved
        for w in plan.windows:
            if not w.tokens or not delta:
                continue
            at = at_ms // w.width_ms
            if at <= now // w.width_ms - w.buckets:
                continue  # the bucket slid out: nothing left to correct
            buckets = counts.windows.setdefault(w.name, {})
            buckets[at] = max(0, buckets.get(at, 0) + delta)
        counts.in_flight.pop(member, None)
        t = counts.totals
        t["tokens"] += used.tokens
        t["prompt_tokens"] += used.prompt
        t["completion_tokens"] += used.completion
        t["estimated_tokens"] += used.estimated

    async def usage(self, key: str, plan: Plan) -> KeyUsage:
        now = self._now_ms()
        counts = self._counts(key)
        states = []
        for w in plan.windows:
            buckets = counts.windows.setdefault(w.name, {})
            used, _ = self._live(buckets, w, now)
            states.append(self._state(w, buckets, used, now))
        live = sum(1 for until in counts.in_flight.values() if until > now)
        return KeyUsage(tuple(states), live, dict(counts.totals))

    async def aclose(self) -> None:
        return None
