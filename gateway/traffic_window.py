"""What each request adds to the status page's recent traffic (:mod:`gateway.traffic`): this
worker's window of five-second buckets, a route's counts and reservoirs of timings in each.
Every request adds to it once, so adding is kept to plain arithmetic on preallocated arrays.
"""

from __future__ import annotations

import os
import random
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.traffic import PercentileCache, RouteTraffic, SlotData, WindowData

__all__ = ["HISTORY_SECONDS", "SAMPLES", "STEP_SECONDS", "RecentTraffic", "bucket_of"]

STEP_SECONDS = 5
HISTORY_SECONDS = 300
SAMPLES = 100
"""Samples kept per timing, route and bucket."""
_MAX_US = 2**32 - 1


class _Reservoir:
    __slots__ = ("kept", "seen")

    def __init__(self) -> None:
        self.seen = 0
        self.kept = array("I")

    def add(self, seconds: float) -> None:
        # Runs for every request: plain arithmetic, not round()/min()/max()/randrange() calls
        us = int(seconds * 1e6 + 0.5)
        if us > _MAX_US:
            us = _MAX_US
        elif us < 0:
            us = 0
        self.seen += 1
        if len(self.kept) < SAMPLES:
            self.kept.append(us)
        else:  # keep each of the bucket's requests with the same chance
            i = int(random.random() * self.seen)
            if i < SAMPLES:
                self.kept[i] = us


class _Slot:
    __slots__ = ("errors", "errors_5xx", "inflight", "stream", "ttft", "whole")

    def __init__(self) -> None:
        self.errors = 0
        self.errors_5xx = 0
        self.inflight = 0
        self.whole = _Reservoir()
        self.stream = _Reservoir()
        self.ttft = _Reservoir()

    def export(self) -> SlotData:
        return {"errors": self.errors, "errors_5xx": self.errors_5xx, "inflight": self.inflight,
                "whole_n": self.whole.seen, "whole": self.whole.kept.tolist(),
                "stream_n": self.stream.seen, "stream": self.stream.kept.tolist(),
                "ttft_n": self.ttft.seen, "ttft": self.ttft.kept.tolist()}


def bucket_of(now: float) -> int:
    return int(now) // STEP_SECONDS * STEP_SECONDS


class RecentTraffic:
    """This worker's requests of the last :data:`HISTORY_SECONDS`, per route and bucket."""

    __slots__ = ("_buckets", "_cache", "_wall")

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        """``wall``: Unix seconds, the clock of the buckets (the app's ``clock.wall``); a test
        passes a fake one to put requests in the buckets it means."""
        self._wall = wall
        self._buckets: deque[tuple[int, dict[str, _Slot]]] = deque()
        self._cache: PercentileCache = {}

    def _slot(self, route: str) -> _Slot:
        start = int(self._wall()) // STEP_SECONDS * STEP_SECONDS  # (bucket_of, inline)
        buckets = self._buckets
        if not buckets or buckets[-1][0] != start:
            buckets.append((start, {}))
            while buckets[0][0] <= start - HISTORY_SECONDS:
                buckets.popleft()
        routes = buckets[-1][1]
        slot = routes.get(route)
        if slot is None:
            slot = routes[route] = _Slot()
        return slot

    def add(self, route: str, seconds: float, status: int, *, stream: bool = False,
            ttft: float | None = None) -> None:
        """Count one answered request: its total duration, status, whether the client got a
        stream, and its time to first token. That is kept for streams only: a whole answer's
        first token comes with its last, and its duration is already charted."""
        slot = self._slot(route)
        slot.errors += status >= 400
        slot.errors_5xx += status >= 500
        if stream:
            slot.stream.add(seconds)
            if ttft is not None:
                slot.ttft.add(ttft)
        else:
            slot.whole.add(seconds)

    def note_inflight(self, route: str, inflight: int) -> None:
        """Keep the highest in-flight count seen for ``route`` in the current bucket."""
        if inflight > 0:
            slot = self._slot(route)
            slot.inflight = max(slot.inflight, inflight)

    def merged(self, others: Iterable[WindowData] = (), now: float | None = None,
               ) -> dict[str, RouteTraffic]:
        """This window merged with other workers' (see :func:`gateway.traffic.merge`), as of
        ``now`` (by default this window's clock)."""
        from gateway.traffic import merge  # (the status page's, not the per-request path)

        return merge([self.export(), *others], self._wall() if now is None else now,
                     self._cache)

    def export(self) -> WindowData:
        oldest = bucket_of(self._wall()) - HISTORY_SECONDS
        return {"pid": os.getpid(), "step": STEP_SECONDS, "buckets": [
            {"t": start, "routes": {r: s.export() for r, s in routes.items()}}
            for start, routes in self._buckets if start > oldest]}
