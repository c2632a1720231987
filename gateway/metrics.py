"""Prometheus metrics. Names and labels are a public contract (see docs/operations.md).

Each app owns its registry (tests run several apps in one process). With ``--workers N`` the
workers write prometheus-client's multiprocess files (``PROMETHEUS_MULTIPROC_DIR``) and ``/metrics``
sums them, so any worker answers for all.
"""

from __future__ import annotations

import os
from typing import Generic, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from gateway.canonical import Usage

__all__ = ["CONTENT_TYPE_LATEST", "LATENCY_BUCKETS", "Family", "Metrics", "RouteSeries"]

# No bound more than twice the one below it, so a quantile read from the buckets is never off by
# more than that factor: a time to first token of 105 ms reads between 100 and 150 ms, where the
# old 100/250 ms pair read it as 175 ms. 5 s stays a bound: deploy/prometheus/alerts.yml uses it.
LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
                   1.5, 2.0, 3.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0)
_OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
_ROUTE = ("route", "client_dialect", "upstream", "upstream_dialect")


_M = TypeVar("_M", Counter, Gauge, Histogram)


class Family(Generic[_M]):
    """A labelled metric whose children are looked up once per label set.

    prometheus-client's ``labels()`` validates the values and takes a lock on every call (about
    1 µs); a request touches eight or so children, so the hot path keeps them in a dict instead.
    The label sets are the metric's own (routes, upstreams, statuses): the dict is no larger than
    the series the registry already holds.
    """

    __slots__ = ("_children", "metric")

    def __init__(self, metric: _M) -> None:
        self.metric: _M = metric
        self._children: dict[tuple[str, ...], _M] = {}

    def labels(self, *values: str) -> _M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child

    def remove(self, *values: str) -> None:
        self._children.pop(values, None)
        self.metric.remove(*values)


class RouteSeries:
    """The children one (route, client dialect, upstream, upstream dialect) writes on every
    request, looked up once instead of label by label per request."""

    __slots__ = ("_by_status", "_requests", "duration_stream", "duration_whole", "labels",
                 "overhead", "stream_chunks", "ttft")

    def __init__(self, m: Metrics, labels: tuple[str, str, str, str]) -> None:
        route, upstream = labels[0], labels[2]
        self.labels = labels
        self._requests = m.requests
        self._by_status: dict[int, Counter] = {}
        self.duration_stream = m.request_duration.labels(*labels, "true")
        self.duration_whole = m.request_duration.labels(*labels, "false")
        self.overhead = m.overhead.labels(route)
        self.ttft = m.ttft.labels(route, upstream)
        self.stream_chunks = m.stream_chunks.labels(route, upstream)

    def requests(self, status: int) -> Counter:
        child = self._by_status.get(status)
        if child is None:
            child = self._by_status[status] = self._requests.labels(*self.labels, str(status))
        return child


def _multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class Metrics:
    def __init__(self) -> None:
        self._series: dict[tuple[str, str, str, str], RouteSeries] = {}
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Family(Counter(
            "gateway_requests_total", "Requests answered, by final HTTP status.",
            [*_ROUTE, "status"], registry=r))
        self.request_duration = Family(Histogram(
            "gateway_request_duration_seconds", "Request received to last byte sent.",
            [*_ROUTE, "stream"], buckets=LATENCY_BUCKETS, registry=r))
        self.upstream_duration = Family(Histogram(
            "gateway_upstream_duration_seconds", "Upstream request sent to its last byte.",
            ["upstream"], buckets=LATENCY_BUCKETS, registry=r))
        self.ttft = Family(Histogram(
            "gateway_time_to_first_token_seconds",
            "Request received to the first answer text sent to the client.",
            ["route", "upstream"], buckets=LATENCY_BUCKETS, registry=r))
        self.overhead = Family(Histogram(
            "gateway_overhead_seconds",
            "Time spent in the gateway itself: total minus waiting on the upstream and on the "
            "client's socket.", ["route"], buckets=_OVERHEAD, registry=r))
        self.stream_chunks = Family(Counter(
            "gateway_stream_chunks_total", "Stream frames sent to clients.",
            ["route", "upstream"], registry=r))
        self.inflight = Family(Gauge(
            "gateway_inflight_requests", "Requests being served.", ["route"],
            multiprocess_mode="livesum", registry=r))
        self.upstream_errors = Family(Counter(
            "gateway_upstream_errors_total",
            "Upstream failures by kind: connect, timeout, status, malformed.",
            ["upstream", "kind"], registry=r))
        self.client_disconnects = Family(Counter(
            "gateway_client_disconnects_total", "Clients that went away before the end.",
            ["route"], registry=r))
        self.tokens = Family(Counter(
            "gateway_tokens_total",
            "Tokens reported by upstreams (prompt, completion; cached and reasoning are parts of "
            "those).",
            ["upstream", "kind"], registry=r))
        self.attempts = Family(Counter(
            "gateway_upstream_attempts_total",
            "Upstream attempts by outcome (ok, connect, timeout, status, malformed, rejected, "
            "cancelled).",
            ["upstream", "outcome"], registry=r))
        self.upstream_healthy = Family(Gauge(
            "gateway_upstream_healthy", "1 while the upstream takes traffic, 0 while ejected.",
            ["upstream"], multiprocess_mode="liveall", registry=r))
        self.dropped_fields = Family(Counter(
            "gateway_dropped_fields_total",
            "Fields a request or an answer carried that the other side's dialect cannot, dropped "
            "(route policy on_unsupported: drop, or RAG context and usage the dialect has no "
            "place for).", ["route", "field"], registry=r))
        self.config_reloads = Family(Counter(
            "gateway_config_reloads_total", "Config reloads by result (ok, invalid).",
            ["result"], registry=r))
        self.connections_closed = Family(Counter(
            "gateway_client_connections_closed_total",
            "Client connections the gateway closed at its edge, by reason: header_timeout, "
            "body_timeout, max_connections (refused at accept).", ["reason"], registry=r))

    def series(self, route: str, client_dialect: str, upstream: str,
               upstream_dialect: str) -> RouteSeries:
        key = (route, client_dialect, upstream, upstream_dialect)
        found = self._series.get(key)
        if found is None:
            found = self._series[key] = RouteSeries(self, key)
        return found

    def render(self) -> bytes:
        if _multiprocess():
            registry = CollectorRegistry()
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)

    def edge_drops(self, reason: str) -> None:
        """Counts a connection :mod:`gateway.edge` closed."""
        self.connections_closed.labels(reason).inc()

    def count_usage(self, upstream: str, usage: Usage | None) -> None:
        if usage is None:
            return
        for kind, n in (("prompt", usage.input_tokens), ("completion", usage.output_tokens),
                        ("cached", usage.cached_input_tokens),
                        ("reasoning", usage.reasoning_tokens)):
            if n:
                self.tokens.labels(upstream, kind).inc(n)
