"""Prometheus metrics. Names and labels are a public contract (see docs/operations.md).

Each app owns its registry (tests run several apps in one process). With ``--workers N`` the
workers write prometheus-client's multiprocess files (``PROMETHEUS_MULTIPROC_DIR``) and ``/metrics``
sums them, so any worker answers for all.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from gateway.exposition import Exposition
from gateway.metric_children import (
    Batched,
    BatchedCounter,
    BatchedGauge,
    BatchedHistogram,
    Counts,
    Family,
    Moves,
    Observes,
    Pending,
    RouteSeries,
    RouteSeriesIndex,
    as_is,
)

__all__ = ["CONTENT_TYPE_LATEST", "LATENCY_BUCKETS", "Batched", "BatchedCounter",
           "BatchedHistogram", "Family", "Metrics", "Pending", "RouteSeries"]

# No bound more than twice the one below it, so a quantile read from the buckets is never off by
# more than that factor: a time to first token of 105 ms reads between 100 and 150 ms, where the
# old 100/250 ms pair read it as 175 ms. 5 s stays a bound: deploy/prometheus/alerts.yml uses it.
LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
                   1.5, 2.0, 3.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0)
_OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
_ROUTE = ("route", "client_dialect", "upstream", "upstream_dialect")


def _multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.pending = Pending()
        counts: Callable[[Counter], Counts] = as_is
        observes: Callable[[Histogram], Observes] = as_is
        moves: Callable[[Gauge], Moves] = as_is
        if not _multiprocess():
            r.register(self.pending)
            pending = self.pending
            counts = lambda child: BatchedCounter(child, pending)  # noqa: E731
            observes = lambda child: BatchedHistogram(child, pending)  # noqa: E731
            moves = lambda child: BatchedGauge(child, pending)  # noqa: E731
        self.requests = Family(Counter(
            "gateway_requests_total", "Requests answered, by final HTTP status.",
            [*_ROUTE, "status"], registry=r), counts)
        self.request_duration = Family(Histogram(
            "gateway_request_duration_seconds", "Request received to last byte sent.",
            [*_ROUTE, "stream"], buckets=LATENCY_BUCKETS, registry=r), observes)
        self.upstream_duration = Family(Histogram(
            "gateway_upstream_duration_seconds", "Upstream request sent to its last byte.",
            ["upstream"], buckets=LATENCY_BUCKETS, registry=r), observes)
        self.ttft = Family(Histogram(
            "gateway_time_to_first_token_seconds",
            "Request received to the first answer text sent to the client.",
            ["route", "upstream"], buckets=LATENCY_BUCKETS, registry=r), observes)
        self.overhead = Family(Histogram(
            "gateway_overhead_seconds",
            "Time spent in the gateway itself: total minus waiting on the upstream and on the "
            "client's socket.", ["route"], buckets=_OVERHEAD, registry=r), observes)
        self.stream_chunks = Family(Counter(
            "gateway_stream_chunks_total", "Stream frames sent to clients.",
            ["route", "upstream"], registry=r), counts)
        self.inflight = Family(Gauge(
            "gateway_inflight_requests", "Requests being served.", ["route"],
            multiprocess_mode="livesum", registry=r), moves)
        self.upstream_errors = Family(Counter(
            "gateway_upstream_errors_total",
            "Upstream failures by kind: connect, timeout, status, malformed.",
            ["upstream", "kind"], registry=r), counts)
        self.client_disconnects = Family(Counter(
            "gateway_client_disconnects_total", "Clients that went away before the end.",
            ["route"], registry=r), counts)
        self.tokens = Family(Counter(
            "gateway_tokens_total",
            "Tokens reported by upstreams (prompt, completion; cached and reasoning are parts of "
            "those).",
            ["upstream", "kind"], registry=r), counts)
        self.attempts = Family(Counter(
            "gateway_upstream_attempts_total",
            "Upstream attempts by outcome (ok, connect, timeout, status, malformed, rejected, "
            "cancelled).",
            ["upstream", "outcome"], registry=r), counts)
        self.upstream_healthy = Family(Gauge(
            "gateway_upstream_healthy", "1 while the upstream takes traffic, 0 while ejected.",
            ["upstream"], multiprocess_mode="liveall", registry=r), as_is)
        self.dropped_fields = Family(Counter(
            "gateway_dropped_fields_total",
            "Fields a request or an answer carried that the other side's dialect cannot, dropped "
            "(route policy on_unsupported: drop, or RAG context, usage and documented request "
            "fields the other dialect has no place for, by path; a key no dialect documents is "
            "undocumented).", ["route", "field"], registry=r), counts)
        self.config_reloads = Family(Counter(
            "gateway_config_reloads_total", "Config reloads by result (ok, invalid).",
            ["result"], registry=r), counts)
        self.key_requests = Family(Counter(
            "gateway_key_requests_total",
            "Requests of each named key (auth.keys), by route and final HTTP status.",
            ["key", "route", "status"], registry=r), counts)
        self.key_tokens = Family(Counter(
            "gateway_key_tokens_total",
            "Tokens each named key used (prompt, completion; estimated: the part of those that "
            "no answer reported and the gateway estimated).", ["key", "kind"], registry=r),
            counts)
        self.key_limited = Family(Counter(
            "gateway_key_limited_total",
            "Requests of each named key refused by a limit (requests_per_minute, "
            "tokens_per_minute, tokens_per_day, tokens_per_month, max_concurrent, "
            "store_unavailable).", ["key", "limit"], registry=r), counts)
        self.limits_store_errors = Family(Counter(
            "gateway_limits_store_errors_total",
            "Calls to the limits store that failed (admit, settle, usage); while it fails, "
            "limits.on_store_error decides.", ["op"], registry=r), counts)
        self.connections_closed = Family(Counter(
            "gateway_client_connections_closed_total",
            "Client connections the gateway closed at its edge, by reason: header_timeout, "
            "body_timeout, max_connections (refused at accept).", ["reason"], registry=r), counts)

        # every Family above, in the order they were registered (the order generate_latest follows)
        self._exposition = Exposition(
            [f.metric for f in vars(self).values() if isinstance(f, Family)])
        self.route_series = RouteSeriesIndex(self)
        """The children a request of each route writes, by route, client dialect, upstream and
        upstream dialect (:class:`RouteSeriesIndex`)."""

    def render(self) -> bytes:
        if _multiprocess():
            registry = CollectorRegistry()
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        self.pending.flush()
        return self._exposition.render()

    async def render_async(self) -> bytes:
        """As :meth:`render`, giving the event loop a turn every few series (the scrape of a
        gateway with many routes is milliseconds of formatting: gateway/exposition.py)."""
        if _multiprocess():
            return self.render()
        self.pending.flush()
        return await self._exposition.render_async()

    def edge_drops(self, reason: str) -> None:
        """Counts a connection :mod:`gateway.edge` closed."""
        self.connections_closed.labels(reason).inc()
