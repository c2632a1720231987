"""The status page's recent-traffic window: exact counts, bounded memory, a minute long."""

from __future__ import annotations

import pytest

from gateway import traffic
from gateway.traffic import SAMPLES_PER_SECOND, WINDOW_SECONDS, RecentTraffic


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(traffic.time, "time", c)
    return c


def test_counts_are_exact_and_latencies_bounded_under_load(clock: Clock) -> None:
    t = RecentTraffic()
    for i in range(5000):  # one busy second: 5,000 requests, every tenth an error
        t.add("/chat", (i % 1000) / 1000, 500 if i % 10 == 0 else 200)
    second = t._buckets[-1][1]["/chat"]
    assert len(second.latencies) == SAMPLES_PER_SECOND
    s = t.summary()["/chat"]
    assert s["requests"] == 5000 and s["errors"] == 500
    # A uniform sample of latencies spread evenly over 0-999 ms has its median near 500 ms.
    assert s["p50_ms"] is not None and 300 < s["p50_ms"] < 700


def test_the_window_forgets_what_is_older_than_a_minute(clock: Clock) -> None:
    t = RecentTraffic()
    t.add("/old", 0.01, 200)
    clock.now += WINDOW_SECONDS + 1
    t.add("/new", 0.02, 404)
    s = t.summary()
    assert set(s) == {"/new"}
    assert s["/new"] == {"requests": 1, "errors": 1, "rps": round(1 / WINDOW_SECONDS, 3),
                         "p50_ms": 20.0, "p95_ms": 20.0, "p99_ms": 20.0}
    assert len(t._buckets) == 1
