"""Which upstream a request tries, in which order, and whether an upstream is healthy.

Passive outlier ejection: ``failure_threshold`` consecutive failures take an upstream out for
``ejection_seconds``; then it gets one trial request, and its outcome decides. Active checks (an
upstream's ``health_url``) mark it up or down the same way. An upstream that is out is skipped
while another of the route is available, and tried last otherwise (a request is never refused for
health alone).

State lives per upstream *name* and survives config reloads.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable

from gateway.config import HealthConfig, RouteConfig, UpstreamConfig

__all__ = ["Balancer", "NoCapacity", "UpstreamState"]


class NoCapacity(Exception):
    """Every slot of the upstream's ``max_inflight`` stayed busy for ``queue_timeout``."""


class UpstreamState:
    __slots__ = ("_monotonic", "_slots", "_slots_size", "config", "ejected_until", "failures",
                 "name", "on_change", "trial")

    def __init__(self, name: str, config: UpstreamConfig,
                 on_change: Callable[[str, bool], None],
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """``monotonic``: the clock of this upstream's health (the app's ``clock.monotonic``);
        a test passes a fake one to decide when an ejection is over."""
        self.name = name
        self._monotonic = monotonic
        self.config = config
        self.failures = 0
        self.ejected_until = 0.0
        self.trial = False
        self.on_change = on_change
        self._slots: asyncio.Semaphore | None = None
        self._slots_size: int | None = None
        self.reconfigure(config)

    def reconfigure(self, config: UpstreamConfig) -> None:
        self.config = config
        if config.max_inflight != self._slots_size:
            self._slots_size = config.max_inflight
            self._slots = asyncio.Semaphore(config.max_inflight) if config.max_inflight else None

    @property
    def healthy(self) -> bool:
        return self.ejected_until == 0.0

    def available(self, now: float) -> bool:
        """May take a request now: healthy, or ejected long enough for its one trial."""
        if self.healthy:
            return True
        return now >= self.ejected_until and not self.trial

    def begin(self, now: float | None = None) -> None:
        """A request goes to this upstream (``now``: by default read here from ``monotonic``,
        the one clock of an upstream's health)."""
        if now is None:
            now = self._monotonic()
        if not self.healthy and now >= self.ejected_until:
            self.trial = True

    def succeeded(self) -> None:
        self.failures = 0
        self.trial = False
        if not self.healthy:
            self.ejected_until = 0.0
            self.on_change(self.name, True)

    def failed(self, health: HealthConfig, now: float | None = None) -> None:
        if now is None:
            now = self._monotonic()
        self.failures += 1
        was_trial, self.trial = self.trial, False
        if was_trial or (self.healthy and self.failures >= health.failure_threshold):
            first = self.healthy
            self.ejected_until = now + health.ejection_seconds
            if first:
                self.on_change(self.name, False)

    @property
    def limited(self) -> bool:
        """Whether requests take a ``max_inflight`` slot (:meth:`acquire`)."""
        return self._slots is not None

    async def acquire(self) -> asyncio.Semaphore | None:
        """Takes one of the ``max_inflight`` slots, waiting up to ``queue_timeout`` for one
        (else :class:`NoCapacity`), and returns what to give it back to once the request is
        done: the semaphore it came from, as a reload may replace the upstream's meanwhile
        (``None``: not :attr:`limited`, nothing taken)."""
        slots = self._slots
        if slots is None:
            return None
        try:
            async with asyncio.timeout(self.config.queue_timeout):
                await slots.acquire()
        except TimeoutError:
            raise NoCapacity(self.name) from None
        return slots


class Balancer:
    """Orders a route's upstreams for one request according to its ``strategy``."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        """``monotonic``: the same health clock as the upstreams' states (whether an ejected one
        is due its trial)."""
        self._monotonic = monotonic
        self._counters: dict[str, itertools.count[int]] = {}

    def order(self, route: RouteConfig, states: dict[str, UpstreamState]) -> list[str]:
        entries = route.upstreams
        if len(entries) == 1:  # nothing to order, and every request of most routes comes here
            return [entries[0].name]
        names = [e.name for e in entries]
        if route.strategy == "round-robin":
            n = next(self._counters.setdefault(route.path, itertools.count()))
            k = n % len(names)
            names = names[k:] + names[:k]
        elif route.strategy == "weighted":
            names = _weighted_order(names, [e.weight for e in entries])
        now = self._monotonic()
        up = [n for n in names if states[n].available(now)]
        down = [n for n in names if n not in up]
        return up + down


def _weighted_order(names: list[str], weights: list[float]) -> list[str]:
    """A weighted random permutation: the first pick follows the weights, then the rest."""
    names, weights = list(names), list(weights)
    out: list[str] = []
    while names:
        i = random.choices(range(len(names)), weights)[0]
        out.append(names.pop(i))
        weights.pop(i)
    return out
