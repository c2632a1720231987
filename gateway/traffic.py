"""Recent traffic per route, for the status page: the last five minutes in five-second buckets.

Memory has a hard bound whatever the load: a route's bucket keeps exact counts and, for each of
three timings (whole-answer duration, stream duration, streams' time to first token), at most
:data:`SAMPLES` of them, a uniform sample of the bucket's requests (reservoir sampling) stored as
32-bit microseconds. A route holds at most ``BUCKETS * 3 * SAMPLES * 4`` bytes of samples (72 KiB)
and a few objects a bucket, see ``test_memory_is_bounded``.

A window is exported as plain data so that another worker can merge it (see
:mod:`gateway.worker_status`): counts add up, and each sample stands for ``seen / kept`` requests
of its reservoir, so a busy worker or a busy bucket weighs as much as the requests it served.
Percentiles are nearest-rank over those weighted samples.
"""

from __future__ import annotations

import os
import random
import time
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import chain
from math import ceil

from typing_extensions import TypedDict  # pydantic validates these on Python 3.11

__all__ = ["BUCKETS", "HISTORY_SECONDS", "SAMPLES", "STEP_SECONDS", "SUMMARY_SECONDS",
           "RecentTraffic", "RouteTraffic", "SlotData", "WindowData", "merge", "percentiles"]

STEP_SECONDS = 5
HISTORY_SECONDS = 300
BUCKETS = HISTORY_SECONDS // STEP_SECONDS
SUMMARY_SECONDS = 60
"""The tables' figures cover the buckets that began in the last minute."""
SAMPLES = 100
"""Samples kept per timing, route and bucket."""
QUANTILES = (0.5, 0.95, 0.99)
_MAX_US = 2**32 - 1


class SlotData(TypedDict):
    """One route in one bucket, as exported: counts, and for each timing ``<kind>_n`` requests
    seen and ``<kind>`` the microseconds kept of them."""

    errors: int
    errors_5xx: int
    inflight: int
    whole_n: int
    whole: list[int]
    stream_n: int
    stream: list[int]
    ttft_n: int
    ttft: list[int]


class RouteTraffic(TypedDict):
    summary: dict[str, object] | None
    """The last minute: the table's figures; ``None`` when the route served nothing in it."""
    series: dict[str, object]
    """One value a bucket for the charts, oldest first (``None`` where a bucket has no sample)."""


class BucketData(TypedDict):
    t: int
    routes: dict[str, SlotData]


class WindowData(TypedDict):
    pid: int
    step: int
    buckets: list[BucketData]


PercentileCache = dict[tuple[int, str, str, tuple[int, ...]], list[float | None]]
"""Percentiles of finished buckets, keyed by what went into them."""
Group = tuple[int, Sequence[int]]
"""Requests seen by one reservoir, and the microseconds it kept of them."""


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


def _bucket_of(now: float) -> int:
    return int(now) // STEP_SECONDS * STEP_SECONDS


class RecentTraffic:
    """This worker's requests of the last :data:`HISTORY_SECONDS`, per route and bucket."""

    __slots__ = ("_buckets", "_cache")

    def __init__(self) -> None:
        self._buckets: deque[tuple[int, dict[str, _Slot]]] = deque()
        self._cache: PercentileCache = {}

    def _slot(self, route: str) -> _Slot:
        start = _bucket_of(time.time())
        if not self._buckets or self._buckets[-1][0] != start:
            self._buckets.append((start, {}))
            while self._buckets[0][0] <= start - HISTORY_SECONDS:
                self._buckets.popleft()
        routes = self._buckets[-1][1]
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
        """This window merged with other workers' (see :func:`merge`)."""
        return merge([self.export(), *others], now, self._cache)

    def export(self) -> WindowData:
        oldest = _bucket_of(time.time()) - HISTORY_SECONDS
        return {"pid": os.getpid(), "step": STEP_SECONDS, "buckets": [
            {"t": start, "routes": {r: s.export() for r, s in routes.items()}}
            for start, routes in self._buckets if start > oldest]}




def percentiles(groups: Iterable[Group], qs: Sequence[float] = QUANTILES) -> list[float | None]:
    """Nearest-rank percentiles, in milliseconds, of samples from one or more reservoirs.

    Nearest rank (Hyndman and Fan's definition 1, numpy's ``inverted_cdf``): the smallest sample
    with at least ``q`` of the weight at or below it, so always a latency some request had; the
    median of two samples is the lower one. A sample weighs ``seen / kept`` of its reservoir.
    """
    weighted = [(seen / len(kept), sorted(kept)) for seen, kept in groups if kept]
    if not weighted:
        return [None] * len(qs)
    values = sorted(chain.from_iterable(kept for _, kept in weighted))
    total = sum(w * len(kept) for w, kept in weighted)
    same_weight = all(w == weighted[0][0] for w, _ in weighted)

    def weight_up_to(value: int) -> float:
        return sum(w * bisect_right(kept, value) for w, kept in weighted)

    out: list[float | None] = []
    for q in qs:
        target = q * total - 1e-9 * total  # so that 0.95 * 20 does not round up a rank
        if same_weight:
            i = ceil(target / weighted[0][0]) - 1
        else:  # the first value with enough weight at or below it; the search keeps this fast
            lo, hi = 0, len(values) - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if weight_up_to(values[mid]) >= target:
                    hi = mid
                else:
                    lo = mid + 1
            i = lo
        out.append(round(values[min(len(values) - 1, max(0, i))] / 1000, 2))
    return out


_KINDS = ("whole", "stream", "ttft")


class _Merged:
    """One route in one bucket, summed over workers."""

    __slots__ = ("errors", "errors_5xx", "groups", "inflight", "sources")

    def __init__(self) -> None:
        self.errors = self.errors_5xx = self.inflight = 0
        self.groups: dict[str, list[Group]] = {kind: [] for kind in _KINDS}
        self.sources: list[int] = []

    def add(self, pid: int, s: SlotData) -> None:
        self.errors += s["errors"]
        self.errors_5xx += s["errors_5xx"]
        self.inflight += s["inflight"]
        self.sources.append(pid)
        self.groups["whole"].append((s["whole_n"], s["whole"]))
        self.groups["stream"].append((s["stream_n"], s["stream"]))
        self.groups["ttft"].append((s["ttft_n"], s["ttft"]))

    def count(self, kind: str) -> int:
        return sum(seen for seen, _ in self.groups[kind])


def merge(windows: Iterable[WindowData], now: float | None = None,
          cache: PercentileCache | None = None) -> dict[str, RouteTraffic]:
    """Merge the windows of one or more workers into, per route that had traffic, the last
    minute's figures and a series a bucket over :data:`HISTORY_SECONDS`.

    Percentiles are the costly part (a sort per bucket and timing); with ``cache`` those of a
    finished bucket are computed once. A finished bucket changes only while a worker's file has
    not caught up with it, and then its count of requests seen grows, so the key holds each
    worker's pid and count: a page refreshed every 2 s sorts the current bucket only.
    """
    now = time.time() if now is None else now
    current = _bucket_of(now)
    times = list(range(current - (BUCKETS - 1) * STEP_SECONDS, current + 1, STEP_SECONDS))
    index = {t: i for i, t in enumerate(times)}
    cells: dict[str, list[_Merged]] = {}
    for window in windows:
        for bucket in window["buckets"]:
            i = index.get(bucket["t"])
            if i is None:
                continue
            for route, slot in bucket["routes"].items():
                row = cells.get(route)
                if row is None:
                    row = cells[route] = [_Merged() for _ in times]
                row[i].add(window["pid"], slot)
    if cache is not None:
        for key in [k for k in cache if k[0] < times[0]]:
            del cache[key]
    # The current bucket is still filling: its rates are over the seconds it has had so far.
    spans = [float(STEP_SECONDS)] * len(times)
    spans[-1] = max(1.0, now - current)
    first = len(times) - SUMMARY_SECONDS // STEP_SECONDS
    return {route: {"summary": _summary(row[first:], sum(spans[first:])),
                    "series": _series(route, times, spans, row, cache)}
            for route, row in cells.items()}


def _timing(groups: list[Group]) -> dict[str, float | int | None]:
    p50, p95, p99 = percentiles(groups)
    return {"requests": sum(seen for seen, _ in groups), "p50_ms": p50, "p95_ms": p95,
            "p99_ms": p99}


def _summary(row: list[_Merged], span: float) -> dict[str, object] | None:
    whole, stream, ttft = ([g for m in row for g in m.groups[kind]] for kind in _KINDS)
    requests = sum(m.count("whole") + m.count("stream") for m in row)
    if not requests:
        return None
    p50, p95, p99 = percentiles(whole + stream)
    return {
        "requests": requests,
        "errors": sum(m.errors for m in row),
        "rps": round(requests / span, 3),
        "p50_ms": p50, "p95_ms": p95, "p99_ms": p99,
        "errors_5xx": sum(m.errors_5xx for m in row),
        "seconds": round(span, 3),
        "whole": _timing(whole),
        "stream": _timing(stream),
        "ttft": _timing(ttft),
    }


def _series(route: str, times: list[int], spans: list[float], row: list[_Merged],
            cache: PercentileCache | None) -> dict[str, object]:
    def per_second(values: Iterable[int]) -> list[float]:
        return [round(v / s, 3) for v, s in zip(values, spans, strict=True)]

    def cell(t: int, m: _Merged, kind: str) -> list[float | None]:
        groups = m.groups[kind]
        if cache is None or t == times[-1] or not groups:
            return percentiles(groups)
        key = (t, route, kind, (*m.sources, *(seen for seen, _ in groups)))
        got = cache.get(key)
        if got is None:
            got = cache[key] = percentiles(groups)
        return got

    def quantiles(kind: str) -> dict[str, list[float | None]]:
        columns = zip(*(cell(t, m, kind) for t, m in zip(times, row, strict=True)), strict=True)
        return {f"p{round(q * 100)}": list(c) for q, c in zip(QUANTILES, columns, strict=True)}

    return {
        "t": times,
        "whole_per_s": per_second(m.count("whole") for m in row),
        "stream_per_s": per_second(m.count("stream") for m in row),
        "errors_per_s": per_second(m.errors for m in row),
        "errors_5xx_per_s": per_second(m.errors_5xx for m in row),
        "inflight_peak": [m.inflight for m in row],
        "whole_ms": quantiles("whole"),
        "stream_ms": quantiles("stream"),
        "ttft_ms": quantiles("ttft"),
    }
