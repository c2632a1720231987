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

import time
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import chain
from math import ceil

from typing_extensions import TypedDict  # pydantic validates these on Python 3.11

from gateway.traffic_window import (
    HISTORY_SECONDS,
    SAMPLES,
    STEP_SECONDS,
    RecentTraffic,
    bucket_of,
)

__all__ = ["BUCKETS", "HISTORY_SECONDS", "SAMPLES", "STEP_SECONDS", "SUMMARY_SECONDS",
           "RecentTraffic", "RouteTraffic", "SlotData", "WindowData", "merge", "percentiles"]

BUCKETS = HISTORY_SECONDS // STEP_SECONDS
SUMMARY_SECONDS = 60
"""The tables' figures cover the buckets that began in the last minute."""
QUANTILES = (0.5, 0.95, 0.99)


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
    current = bucket_of(now)
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
