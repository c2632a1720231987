"""Recent traffic per route: per-second buckets over the last five minutes, for the status page."""

from __future__ import annotations

import time
from collections import deque

__all__ = ["RecentTraffic"]

_WINDOW = 300


class RecentTraffic:
    """Per-second request counts, error counts and latencies over a sliding window."""

    __slots__ = ("_buckets",)

    def __init__(self) -> None:
        self._buckets: deque[tuple[int, dict[str, list[float]], dict[str, int]]] = deque()

    def add(self, route: str, seconds: float, status: int) -> None:
        now = int(time.time())
        if not self._buckets or self._buckets[-1][0] != now:
            self._buckets.append((now, {}, {}))
            while self._buckets and self._buckets[0][0] <= now - _WINDOW:
                self._buckets.popleft()
        _, latencies, errors = self._buckets[-1]
        samples = latencies.setdefault(route, [])
        if len(samples) < 1000:
            samples.append(seconds)
        else:
            samples[len(samples) % 1000] = seconds
        if status >= 400:
            errors[route] = errors.get(route, 0) + 1

    def summary(self, window: int = 60) -> dict[str, dict[str, float | int | None]]:
        now = int(time.time())
        lat: dict[str, list[float]] = {}
        err: dict[str, int] = {}
        for ts, latencies, errors in self._buckets:
            if ts > now - window:
                for route, samples in latencies.items():
                    lat.setdefault(route, []).extend(samples)
                for route, n in errors.items():
                    err[route] = err.get(route, 0) + n
        out: dict[str, dict[str, float | int | None]] = {}
        for route, samples in lat.items():
            samples.sort()
            out[route] = {
                "requests": len(samples),
                "errors": err.get(route, 0),
                "rps": round(len(samples) / window, 3),
                "p50_ms": _pct(samples, 0.5),
                "p95_ms": _pct(samples, 0.95),
                "p99_ms": _pct(samples, 0.99),
            }
        return out


def _pct(sorted_samples: list[float], q: float) -> float | None:
    if not sorted_samples:
        return None
    i = min(len(sorted_samples) - 1, int(q * len(sorted_samples)))
    return round(sorted_samples[i] * 1000, 2)
