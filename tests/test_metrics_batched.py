"""The hot path's counts and observations are kept in plain numbers and applied when the registry
is collected (gateway/metrics.py, :class:`~gateway.metrics.Batched`): what a scrape reads must be
exactly what prometheus-client's own children would have counted."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.metrics import (
    LATENCY_BUCKETS,
    BatchedCounter,
    BatchedGauge,
    BatchedHistogram,
    Metrics,
    Pending,
)
from gateway.worker_status import inflight_by_route

VALUES = [0.0, 0.004, 0.005, 0.0051, 0.02, 0.1, 0.75, 5.0, 9.99, 60.0, 121.0, math.inf, 1e-9]
"""Below the first bound, on bounds (a bound holds the values equal to it), between them, past
the last one, and +Inf."""


def _samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, tuple[tuple[str, str],
                                                                             ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() if family.name == name for s in family.samples
            if not s.name.endswith("_created")}


def test_the_prometheus_internals_the_batched_children_lean_on() -> None:
    """gateway/metrics.py adds to these at a scrape; a prometheus-client upgrade that moves them
    fails here."""
    h = Histogram("h", "h", ["x"], buckets=(1.0, 2.0), registry=CollectorRegistry()).labels("a")
    assert list(h._upper_bounds) == [1.0, 2.0, math.inf]
    assert len(h._buckets) == 3 and hasattr(h._buckets[0], "inc") and hasattr(h._sum, "inc")
    h._buckets[1].inc(2)
    h._sum.inc(3.0)
    got = {s.name + s.labels.get("le", ""): s.value for s in h.collect()[0].samples}
    assert got["h_bucket1.0"] == 0 and got["h_bucket2.0"] == 2 and got["h_sum"] == 3.0


def test_a_batched_histogram_reads_as_prometheus_clients_own() -> None:
    batched_registry, own_registry = CollectorRegistry(), CollectorRegistry()
    pending = Pending()
    batched_registry.register(pending)
    batched = BatchedHistogram(Histogram("t", "t", ["r"], buckets=LATENCY_BUCKETS,
                                         registry=batched_registry).labels("a"), pending)
    own = Histogram("t", "t", ["r"], buckets=LATENCY_BUCKETS, registry=own_registry).labels("a")
    for round_ in range(3):  # applied, then counted again from zero, then applied on top
        for v in VALUES[round_:]:
            batched.observe(v)
            own.observe(v)
        assert _samples(batched_registry, "t") == _samples(own_registry, "t")
    assert pending.dirty == []


def test_a_batched_counter_reads_as_prometheus_clients_own_and_refuses_to_go_down() -> None:
    registry = CollectorRegistry()
    pending = Pending()
    registry.register(pending)
    counter = BatchedCounter(Counter("c", "c", ["r"], registry=registry).labels("a"), pending)
    counter.inc()
    counter.inc(2.5)
    assert registry.get_sample_value("c_total", {"r": "a"}) == 3.5
    counter.inc(0)
    counter.inc()
    assert registry.get_sample_value("c_total", {"r": "a"}) == 4.5
    with pytest.raises(ValueError):
        counter.inc(-1)


def test_a_batched_gauge_reads_as_prometheus_clients_own_up_and_down() -> None:
    batched_registry, own_registry = CollectorRegistry(), CollectorRegistry()
    pending = Pending()
    batched_registry.register(pending)
    batched = BatchedGauge(Gauge("g", "g", ["r"], registry=batched_registry).labels("a"), pending)
    own = Gauge("g", "g", ["r"], registry=own_registry).labels("a")
    for moves in ([1, 1, -1], [-1], [3, -0.5], [-2.5]):  # up, back to 0, up again, 0
        for n in moves:
            (batched.inc if n > 0 else batched.dec)(abs(n))
            (own.inc if n > 0 else own.dec)(abs(n))
        assert _samples(batched_registry, "g") == _samples(own_registry, "g")
    assert batched_registry.get_sample_value("g", {"r": "a"}) == 0
    assert pending.dirty == []


def test_the_requests_in_flight_read_between_scrapes() -> None:
    """The status page reads the gauge without a scrape: the moves since the last are in."""
    m = Metrics()
    m.inflight.labels("/chat").inc()
    m.inflight.labels("/chat").inc()
    m.inflight.labels("/other").inc()
    assert inflight_by_route(m) == {"/chat": 2, "/other": 1}
    m.inflight.labels("/chat").dec()
    m.inflight.labels("/other").dec()
    assert inflight_by_route(m) == {"/chat": 1, "/other": 0}


def test_a_scrape_of_the_gateways_metrics_sees_every_request_counted() -> None:
    """Through the gateway's own registry and its text rendering, as ``/metrics`` serves it."""
    m = Metrics()
    series = m.route_series[("/chat", "a", "up", "b")]
    for _ in range(3):
        series.requests(200).inc()
        series.duration_whole.observe(0.03)
    m.attempts.labels("up", "ok").inc()
    text = m.render().decode()
    assert 'gateway_requests_total{client_dialect="a",route="/chat",status="200",' \
           'upstream="up",upstream_dialect="b"} 3.0' in text
    assert 'le="0.035",route="/chat",stream="false",upstream="up",upstream_dialect="b"} 3.0' \
        in text
    assert 'gateway_upstream_attempts_total{outcome="ok",upstream="up"} 1.0' in text
    assert m.pending.dirty == []
    series.requests(200).inc()
    assert m.registry.get_sample_value("gateway_requests_total", {
        "route": "/chat", "client_dialect": "a", "upstream": "up", "upstream_dialect": "b",
        "status": "200"}) == 4.0


def test_a_removed_series_keeps_nothing_pending() -> None:
    m = Metrics()
    m.tokens.labels("gone", "prompt").inc(5)
    m.tokens.remove("gone", "prompt")
    assert m.pending.dirty == [] or all(not c._queued for c in m.pending.dirty)
    assert "gone" not in m.render().decode()
    assert isinstance(generate_latest(m.registry), bytes)
