"""Recent traffic per route, for the status page: the last minute in per-second buckets.

Memory is bounded whatever the load: each second keeps, per route, exact request and error
counts and at most :data:`SAMPLES_PER_SECOND` latencies, a uniform random sample of that second's
requests (reservoir sampling) in a compact array. A busy gateway holds about 48 KiB per route.
"""

from __future__ import annotations

import random
import time
from array import array
from collections import deque
from dataclasses import dataclass, field

__all__ = ["SAMPLES_PER_SECOND", "WINDOW_SECONDS", "RecentTraffic"]

WINDOW_SECONDS = 60
SAMPLES_PER_SECOND = 100


@dataclass(slots=True)
class _RouteSecond:
    requests: int = 0
    errors: int = 0
    latencies: array[float] = field(default_factory=lambda: array("d"))

    def add(self, seconds: float, error: bool) -> None:
        self.requests += 1
        self.errors += error
        if len(self.latencies) < SAMPLES_PER_SECOND:
            self.latencies.append(seconds)
        else:  # keep each of this second's requests with the same chance
            i = random.randrange(self.requests)
            if i < SAMPLES_PER_SECOND:
                self.latencies[i] = seconds


class RecentTraffic:
    """Per-second request counts, error counts and sampled latencies over a sliding minute."""

    __slots__ = ("_buckets",)

    def __init__(self) -> None:
        self._buckets: deque[tuple[int, dict[str, _RouteSecond]]] = deque()

    def add(self, route: str, seconds: float, status: int) -> None:
        now = int(time.time())
        if not self._buckets or self._buckets[-1][0] != now:
            self._buckets.append((now, {}))
            while self._buckets and self._buckets[0][0] <= now - WINDOW_SECONDS:
                self._buckets.popleft()
        routes = self._buckets[-1][1]
        second = routes.get(route)
        if second is None:
            second = routes[route] = _RouteSecond()
        second.add(seconds, status >= 400)

    def summary(self, window: int = WINDOW_SECONDS) -> dict[str, dict[str, float | int | None]]:
        now = int(time.time())
        window = min(window, WINDOW_SECONDS)
        totals: dict[str, list[int]] = {}
        samples: dict[str, list[float]] = {}
        for ts, routes in self._buckets:
            if ts <= now - window:
                continue
            for route, second in routes.items():
                t = totals.setdefault(route, [0, 0])
                t[0] += second.requests
                t[1] += second.errors
                samples.setdefault(route, []).extend(second.latencies)
        out: dict[str, dict[str, float | int | None]] = {}
        for route, (requests, errors) in totals.items():
            lat = sorted(samples[route])
            out[route] = {
                "requests": requests,
                "errors": errors,
                "rps": round(requests / window, 3),
                "p50_ms": _pct(lat, 0.5),
                "p95_ms": _pct(lat, 0.95),
                "p99_ms": _pct(lat, 0.99),
            }
        return out


def _pct(sorted_samples: list[float], q: float) -> float | None:
    if not sorted_samples:
        return None
    i = min(len(sorted_samples) - 1, int(q * len(sorted_samples)))
    return round(sorted_samples[i] * 1000, 2)
