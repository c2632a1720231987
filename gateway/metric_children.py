"""The children of the gateway's metrics that a request writes to, and how it writes to them:
looked up once per label set (:class:`Family`, :class:`RouteSeries`) and added to in plain
numbers until a scrape (:class:`Batched`). A request writes to a dozen of them, so each write
is kept to a dict lookup and an addition.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

from gateway.canonical import Usage

if TYPE_CHECKING:
    from gateway.metrics import Metrics

__all__ = ["Batched", "BatchedCounter", "BatchedGauge", "BatchedHistogram", "Children", "Counts",
           "Family", "Moves", "Observes", "Pending", "RouteSeries", "RouteSeriesIndex", "as_is",
           "count_usage"]


class Counts(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class Observes(Protocol):
    def observe(self, amount: float) -> None: ...


class Moves(Protocol):
    def inc(self, amount: float = 1) -> None: ...

    def dec(self, amount: float = 1) -> None: ...


_C = TypeVar("_C")


class Children(dict[tuple[str, ...], _C]):
    """A family's children by their label values, each made on its first write (as the registry
    makes a series on its first ``labels()``). Looked up by subscript, ``children[values]``: a
    dict's own lookup, no Python call, for a child already made."""

    __slots__ = ("_metric", "_wrap")

    def __init__(self, metric: Any, wrap: Callable[[Any], _C]) -> None:
        super().__init__()
        self._metric = metric
        self._wrap = wrap

    def __missing__(self, values: tuple[str, ...]) -> _C:
        child = self[values] = self._wrap(self._metric.labels(*values))
        return child


class Family(Generic[_C]):
    """A labelled metric whose children are looked up once per label set.

    prometheus-client's ``labels()`` validates the values and takes a lock on every call; a
    request touches eight or so children, so the hot path keeps them in a dict instead
    (:attr:`children`, or :meth:`labels`).
    The label sets are the metric's own (routes, upstreams, statuses): the dict is no larger than
    the series the registry already holds. ``wrap`` makes what the hot path writes to of each
    child (the child itself, or a :class:`Batched` one).
    """

    __slots__ = ("children", "metric")

    def __init__(self, metric: Any, wrap: Callable[[Any], _C]) -> None:
        self.metric = metric
        self.children: Children[_C] = Children(metric, wrap)

    def labels(self, *values: str) -> _C:
        return self.children[values]

    def remove(self, *values: str) -> None:
        child = self.children.pop(values, None)
        if isinstance(child, Batched):
            child.flush()
        self.metric.remove(*values)


class Batched:
    """What a request counts, kept in plain numbers until the registry is collected (a scrape of
    ``/metrics``), then added to the prometheus-client child at once.

    A child's ``inc`` or ``observe`` takes its lock, and ``observe`` walks the buckets in
    Python, for every write of every request. Here a request adds to a number (a
    histogram finds its bucket by bisection), and :class:`Pending` applies the sums before the
    registry reads its children. Only in one process: with ``--workers N`` another worker
    renders ``/metrics`` from the multiprocess files, so each write goes there at once.
    """

    __slots__ = ("_pending", "_queued")

    def __init__(self, pending: Pending) -> None:
        self._pending = pending
        self._queued = False

    def _queue(self) -> None:
        self._queued = True
        self._pending.dirty.append(self)

    def flush(self) -> None:
        raise NotImplementedError


class _BatchedSum(Batched):
    """A child whose writes are amounts to add (a counter's, a gauge's): summed here, and the
    sum added to the prometheus-client child at the scrape."""

    __slots__ = ("_child", "_n")

    def __init__(self, child: Counter | Gauge, pending: Pending) -> None:
        super().__init__(pending)
        self._child = child
        self._n = 0.0

    def flush(self) -> None:
        self._queued = False
        n, self._n = self._n, 0.0
        if n:
            self._child.inc(n)


class BatchedCounter(_BatchedSum):
    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        if not self._queued:  # (inline in each writer: a request makes a dozen such calls)
            self._queue()
        self._n += amount


class BatchedGauge(_BatchedSum):
    """A gauge that requests move up and down (the requests in flight). A prometheus-client
    gauge's ``inc`` and ``dec`` each take its lock, twice for every request."""

    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        if not self._queued:
            self._queue()
        self._n += amount

    def dec(self, amount: float = 1) -> None:
        if not self._queued:
            self._queue()
        self._n -= amount


class BatchedHistogram(Batched):
    __slots__ = ("_bounds", "_child", "_counts", "_sum")

    def __init__(self, child: Histogram, pending: Pending) -> None:
        super().__init__(pending)
        self._child = child
        self._bounds: list[float] = list(child._upper_bounds)  # (ends with +Inf)
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0

    def observe(self, amount: float) -> None:
        if amount != amount:  # NaN: in no bucket, as prometheus-client has it
            self._child.observe(amount)
            return
        if not self._queued:
            self._queue()
        # the first bound >= amount: the one bucket prometheus-client's observe increments
        self._counts[bisect_left(self._bounds, amount)] += 1
        self._sum += amount

    def flush(self) -> None:
        self._queued = False
        child, counts = self._child, self._counts
        for i, n in enumerate(counts):
            if n:
                child._buckets[i].inc(n)
                counts[i] = 0
        total, self._sum = self._sum, 0.0
        child._sum.inc(total)


class Pending:
    """The batched children with something to apply, applied when the registry is collected:
    registered first, so that the metrics after it read their children with the sums in."""

    __slots__ = ("dirty",)

    def __init__(self) -> None:
        self.dirty: list[Batched] = []

    def flush(self) -> None:
        dirty, self.dirty = self.dirty, []
        for child in dirty:
            child.flush()

    def collect(self) -> Iterator[Metric]:
        self.flush()
        return iter(())

    def describe(self) -> list[Metric]:
        return []


def as_is(child: _C) -> _C:
    return child


class _ByStatus(dict[int, Counts]):
    __slots__ = ("_labels", "_requests")

    def __init__(self, requests: Family[Counts], labels: tuple[str, str, str, str]) -> None:
        super().__init__()
        self._requests = requests
        self._labels = labels

    def __missing__(self, status: int) -> Counts:
        child = self[status] = self._requests.labels(*self._labels, str(status))
        return child


class RouteSeries:
    """The children one (route, client dialect, upstream, upstream dialect) writes on every
    request, looked up once instead of label by label per request."""

    __slots__ = ("by_status", "duration_stream", "duration_whole", "labels", "overhead",
                 "stream_chunks", "ttft")

    def __init__(self, m: Metrics, labels: tuple[str, str, str, str]) -> None:
        route, upstream = labels[0], labels[2]
        self.labels = labels
        self.by_status: dict[int, Counts] = _ByStatus(m.requests, labels)
        """The requests counter of each final status, made on its first request."""
        self.duration_stream = m.request_duration.labels(*labels, "true")
        self.duration_whole = m.request_duration.labels(*labels, "false")
        self.overhead = m.overhead.labels(route)
        self.ttft = m.ttft.labels(route, upstream)
        self.stream_chunks = m.stream_chunks.labels(route, upstream)

    def requests(self, status: int) -> Counts:
        return self.by_status[status]


class RouteSeriesIndex(dict[tuple[str, str, str, str], RouteSeries]):
    """The :class:`RouteSeries` of each (route, client dialect, upstream, upstream dialect),
    made on its first request: ``index[(route, client_dialect, upstream,
    upstream_dialect)]``, a dict's own lookup."""

    __slots__ = ("_metrics",)

    def __init__(self, metrics: Metrics) -> None:
        super().__init__()
        self._metrics = metrics

    def __missing__(self, key: tuple[str, str, str, str]) -> RouteSeries:
        found = self[key] = RouteSeries(self._metrics, key)
        return found


def count_usage(tokens: Family[Counts], upstream: str, usage: Usage | None) -> None:
    """The tokens an upstream reported for one answer, by kind."""
    if usage is None:
        return
    # (one test a kind, rather than a loop over pairs built anew for every answer)
    children = tokens.children
    if usage.input_tokens:
        children[(upstream, "prompt")].inc(usage.input_tokens)
    if usage.output_tokens:
        children[(upstream, "completion")].inc(usage.output_tokens)
    if usage.cached_input_tokens:
        children[(upstream, "cached")].inc(usage.cached_input_tokens)
    if usage.reasoning_tokens:
        children[(upstream, "reasoning")].inc(usage.reasoning_tokens)
