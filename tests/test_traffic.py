"""The status page's recent-traffic window: exact counts, bounded memory, five minutes long,
nearest-rank percentiles, and windows of several workers merged with the right weights."""

from __future__ import annotations

import tracemalloc

import orjson
import pytest

from gateway.traffic import (
    BUCKETS,
    HISTORY_SECONDS,
    SAMPLES,
    STEP_SECONDS,
    SUMMARY_SECONDS,
    RecentTraffic,
    merge,
    percentiles,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0  # a multiple of STEP_SECONDS: a bucket begins

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    """The windows' wall clock, handed to each ``RecentTraffic(clock)`` and each ``merge``."""
    return Clock()


def summary(t: RecentTraffic, route: str) -> dict[str, object]:
    s = t.merged()[route]["summary"]
    assert s is not None
    return s


def test_counts_are_exact_and_samples_bounded_under_load(clock: Clock) -> None:
    t = RecentTraffic(clock)
    for i in range(5000):  # one busy bucket: 5,000 requests, every tenth an error
        t.add("/chat", (i % 1000) / 1000, 500 if i % 10 == 0 else 200)
    slot = t.export()["buckets"][-1]["routes"]["/chat"]
    assert slot["whole_n"] == 5000 and len(slot["whole"]) == SAMPLES
    s = summary(t, "/chat")
    assert s["requests"] == 5000 and s["errors"] == 500 and s["errors_5xx"] == 500
    # A uniform sample of latencies spread evenly over 0-999 ms has its median near 500 ms.
    p50 = s["p50_ms"]
    assert isinstance(p50, float) and 300 < p50 < 700


def test_percentiles_are_nearest_rank(clock: Clock) -> None:
    # Nearest rank: the smallest sample with at least q of the samples at or below it. Picking
    # index int(q * n) made the median of two samples their maximum and p99 of 100 the maximum.
    t = RecentTraffic(clock)
    t.add("/two", 0.010, 200)
    t.add("/two", 0.020, 200)
    for ms in range(1, 101):
        t.add("/hundred", ms / 1000, 200)
    two, hundred = summary(t, "/two"), summary(t, "/hundred")
    assert (two["p50_ms"], two["p95_ms"]) == (10.0, 20.0)
    assert (hundred["p50_ms"], hundred["p95_ms"], hundred["p99_ms"]) == (50.0, 95.0, 99.0)
    assert percentiles([(20, list(range(1, 21)))], [0.95]) == [0.02]  # rank 19, not 20
    assert percentiles([]) == [None, None, None]


@pytest.mark.parametrize(("kept", "want"), [
    ([1000], [1.0, 1.0, 1.0]),                      # one sample is every percentile
    ([1000, 2000], [1.0, 2.0, 2.0]),                # the median of two is the lower one
    ([1000, 2000, 3000, 4000], [2.0, 4.0, 4.0]),    # p50 of four is the second, not the third
    ([4000, 3000, 2000, 1000], [2.0, 4.0, 4.0]),    # in any order
])
def test_percentiles_of_known_samples(kept: list[int], want: list[float]) -> None:
    """Nearest rank over microsecond samples, in milliseconds: alone, split over two reservoirs
    of equal weight, and over reservoirs of different weights that stand for as many requests."""
    assert percentiles([(len(kept), kept)]) == want
    half = len(kept) // 2
    if half:
        assert percentiles([(half, kept[:half]), (len(kept) - half, kept[half:])]) == want
    # one reservoir kept half of what it saw: its samples weigh two each
    assert percentiles([(1, [1000]), (2, [2000])], [0.5]) == [2.0]
    assert percentiles([(2, [1000]), (1, [2000])], [0.5]) == [1.0]


def test_streams_whole_answers_and_first_token_apart(clock: Clock) -> None:
    t = RecentTraffic(clock)
    t.add("/chat", 0.050, 200)
    t.add("/chat", 2.0, 200, stream=True, ttft=0.120)
    t.add("/chat", 3.0, 502, stream=True)
    s = summary(t, "/chat")
    assert s["requests"] == 3 and s["errors"] == 1
    assert s["whole"] == {"requests": 1, "p50_ms": 50.0, "p95_ms": 50.0, "p99_ms": 50.0}
    assert s["stream"] == {"requests": 2, "p50_ms": 2000.0, "p95_ms": 3000.0, "p99_ms": 3000.0}
    assert s["ttft"] == {"requests": 1, "p50_ms": 120.0, "p95_ms": 120.0, "p99_ms": 120.0}


def test_old_calls_still_count_as_whole_answers(clock: Clock) -> None:
    t = RecentTraffic(clock)
    t.add("/chat", 0.01, 200)
    assert summary(t, "/chat")["whole"] == {
        "requests": 1, "p50_ms": 10.0, "p95_ms": 10.0, "p99_ms": 10.0}


def test_the_summary_covers_a_minute_and_the_series_five(clock: Clock) -> None:
    t = RecentTraffic(clock)
    t.add("/chat", 0.01, 200)  # four minutes ago: in the charts, not in the tables
    clock.now += 4 * 60
    t.add("/chat", 0.02, 404)
    t.add("/chat", 0.03, 200)
    clock.now += 2.5
    got = merge([t.export()], clock())["/chat"]
    assert got["summary"] is not None
    assert got["summary"]["requests"] == 2 and got["summary"]["errors"] == 1
    # The minute is 11 whole buckets and 2.5 s of the current one.
    assert got["summary"]["seconds"] == SUMMARY_SECONDS - STEP_SECONDS + 2.5
    series = got["series"]
    times = series["t"]
    assert isinstance(times, list) and len(times) == BUCKETS
    assert times[-1] == 1_000_000 + 4 * 60
    assert series["whole_per_s"] == [0.0] * (BUCKETS - 49) + [0.2] + [0.0] * 47 + [0.8]
    assert series["errors_per_s"][-1] == 0.4  # type: ignore[index]
    assert series["whole_ms"]["p50"][-1] == 20.0  # type: ignore[index]
    assert series["whole_ms"]["p50"][-2] is None  # type: ignore[index]


def test_the_window_forgets_what_is_older_than_five_minutes(clock: Clock) -> None:
    t = RecentTraffic(clock)
    t.add("/old", 0.01, 200)
    clock.now += HISTORY_SECONDS
    t.add("/new", 0.02, 200)
    assert set(merge([t.export()], clock())) == {"/new"}
    assert len(t._buckets) == 1
    clock.now += HISTORY_SECONDS  # and a quiet worker exports nothing stale
    assert t.export()["buckets"] == []


def test_workers_merge_with_weights(clock: Clock) -> None:
    busy, quiet = RecentTraffic(clock), RecentTraffic(clock)
    for _ in range(1000):
        busy.add("/chat", 0.010, 200)
    for _ in range(10):
        quiet.add("/chat", 0.100, 200)
    # Through JSON, as the workers' files carry them.
    windows = [orjson.loads(orjson.dumps(w.export())) for w in (busy, quiet)]
    s = merge(windows, clock())["/chat"]["summary"]
    assert s is not None and s["requests"] == 1010
    # 100 busy samples stand for 1,000 requests, the 10 quiet ones for 10: p99 is the busy
    # worker's 10 ms. Plain concatenation of the samples would have said 100 ms.
    assert (s["p50_ms"], s["p99_ms"]) == (10.0, 10.0)
    assert percentiles([(1000, [10_000] * 100), (10, [100_000] * 10)], [0.995]) == [100.0]


def test_in_flight_peak_per_bucket(clock: Clock) -> None:
    t = RecentTraffic(clock)
    t.note_inflight("/chat", 3)
    t.note_inflight("/chat", 7)
    t.note_inflight("/chat", 2)
    t.note_inflight("/idle", 0)  # costs nothing
    assert [b["routes"].keys() for b in t.export()["buckets"]] == [{"/chat"}]
    merged = merge([t.export(), t.export()], clock())
    assert merged["/chat"]["series"]["inflight_peak"][-1] == 14  # type: ignore[index]


def test_memory_is_bounded(clock: Clock) -> None:
    """Five minutes at 150 requests a second on three routes (every reservoir fills), then five
    more: the window holds BUCKETS buckets of SAMPLES samples a timing, and stops growing."""
    t = RecentTraffic(clock)
    routes = ("/a", "/b", "/c")

    def load(seconds: int) -> None:
        for _ in range(seconds):
            for i in range(150):
                route = routes[i % 3]
                t.add(route, i / 1000, 200, stream=i % 2 == 1, ttft=0.1 if i % 2 else None)
            clock.now += 1

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        load(HISTORY_SECONDS)
        full = tracemalloc.get_traced_memory()[0] - base
        load(HISTORY_SECONDS)
        later = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert len(t._buckets) == BUCKETS
    for _, slots in t._buckets:
        for slot in slots.values():
            assert all(len(r.kept) == SAMPLES for r in (slot.whole, slot.stream, slot.ttft))
    samples_bytes = BUCKETS * 3 * SAMPLES * 4
    assert full < len(routes) * 2 * samples_bytes, full  # samples plus at most as much overhead
    assert later < full * 1.1, (full, later)
