"""``/metrics`` is rendered by gateway/exposition.py, which keeps each series' label text from one
scrape to the next: what it writes must be, byte for byte, what prometheus-client's own
``generate_latest`` writes for the same registry, with the prometheus-client installed."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import prometheus_client.metrics as client_metrics
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.exposition import STEP, Exposition
from gateway.metric_children import count_usage
from gateway.metrics import Metrics

AWKWARD = ['/chat', 'quote"d', "back\\slash", "new\nline", "ünïcødé ✓", "", "a,b=c}{"]
"""Label values the text format escapes, or that would break a naive writer."""

OBSERVED = [0.0, 1e-9, 0.005, 0.0051, 0.3, 7.5, 59.0, 1e6, 12345678.9, math.inf]


def _busy_metrics() -> Metrics:
    m = Metrics()
    for i, route in enumerate(AWKWARD):
        series = m.route_series[(route, "in", f"up{i % 3}", "out")]
        for status in (200, 400, 502):
            series.requests(status).inc(i + 1)
        for v in OBSERVED[i:]:
            series.duration_stream.observe(v)
            series.ttft.observe(v / 10)
            series.overhead.observe(v / 1000)
        series.stream_chunks.inc(10**i * 1.5)  # up to 1.5e6: the exponent form
        m.inflight.labels(route).inc(i - 3)  # negative, zero, positive
        m.dropped_fields.labels(route, "tools").inc()
    m.upstream_duration.labels("up0").observe(math.nan)  # in no bucket, yet in the sum
    m.upstream_healthy.labels("up1").set(-0.0)
    m.upstream_healthy.labels("up2").set(math.nan)
    count_usage(m.tokens, "up0", None)
    m.tokens.labels("up0", "prompt").inc(1e21)
    return m


@pytest.fixture(params=[True, False], ids=["created", "no-created"])
def created(request: pytest.FixtureRequest) -> Iterator[bool]:
    """prometheus-client's ``_created`` series on (its default) and off
    (``PROMETHEUS_DISABLE_CREATED_SERIES``)."""
    was = client_metrics._use_created
    client_metrics._use_created = request.param
    yield request.param
    client_metrics._use_created = was


def test_the_gateways_metrics_render_as_generate_latest_does(created: bool) -> None:
    m = _busy_metrics()
    ours = m.render()
    assert ours == generate_latest(m.registry)
    assert (b"gateway_requests_created{" in ours) is created
    assert b'route="quote\\"d"' in ours and b'route="new\\nline"' in ours


def test_each_scrape_sees_the_counts_since_the_last() -> None:
    """The label text is kept; the numbers are read afresh on every scrape."""
    m = _busy_metrics()
    first = m.render()
    series = m.route_series[("/chat", "in", "up0", "out")]
    series.requests(200).inc()
    series.duration_whole.observe(0.02)
    m.inflight.labels("/chat").dec()
    second = m.render()
    assert second != first
    assert second == generate_latest(m.registry)


def test_a_removed_series_is_gone_from_the_next_scrape_and_its_text_forgotten() -> None:
    m = _busy_metrics()
    for i in range(100):
        m.client_disconnects.labels(f"/r{i}").inc()
    m.render()
    for i in range(100):
        m.client_disconnects.remove(f"/r{i}")
    text = m.render()
    assert b"/r5" not in text
    assert text == generate_latest(m.registry)
    block = m._exposition._blocks[8]
    assert block._metric is m.client_disconnects.metric
    assert len(block._starts) <= 16


def test_a_metric_with_no_series_yet_renders_its_header_only() -> None:
    registry = CollectorRegistry()
    counter = Counter("c", "a counter\nwith \\ in its help", ["x"], registry=registry)
    histogram = Histogram("h", "h", ["x"], buckets=(1.0, 2.0), registry=registry)
    exposition = Exposition([counter, histogram, Gauge("g", "g", ["x"], registry=registry)])
    assert exposition.render() == generate_latest(registry)
    histogram.labels("only").observe(1.5)
    assert exposition.render() == generate_latest(registry)


def test_a_metric_without_labels_is_refused() -> None:
    """Unlabelled metrics render another way; the gateway has none, so they are not handled."""
    with pytest.raises(ValueError, match="no labels"):
        Exposition([Counter("plain", "p", registry=CollectorRegistry())])


async def test_a_scrape_gives_the_loop_a_turn_every_few_series_and_the_same_bytes(
        created: bool) -> None:
    """``/metrics`` is rendered a few series at a time (``render_async``): a stream's frame that
    arrives during a scrape of many routes waits for a few series, not for the whole
    exposition. The bytes are those of a scrape at once."""
    m = _busy_metrics()
    for i in range(4 * STEP):
        series = m.route_series[(f"/route{i}", "in", "up0", "out")]
        series.requests(200).inc(i)
        series.duration_stream.observe(i / 100)
    turns = 0
    rendering = True

    def tick() -> None:  # a callback the loop runs whenever the scrape gives it a turn
        nonlocal turns
        if rendering:
            turns += 1
            asyncio.get_running_loop().call_soon(tick)

    asyncio.get_running_loop().call_soon(tick)
    ours = await m.render_async()
    rendering = False
    assert ours == generate_latest(m.registry) == m.render()
    # every labelled metric with 4 * STEP series or more gave the loop at least three turns
    assert turns >= 3 * 4
