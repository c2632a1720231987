"""The Prometheus text format of the gateway's metrics, byte for byte what prometheus-client's
``generate_latest`` renders, for a tenth of its cost.

``generate_latest`` builds every sample's label text afresh: it sorts the labels, checks and
escapes each name and value, on every line. A scrape of a gateway with 72 routes is 7,400
lines, tens of milliseconds during which the event loop serves no one (docs/performance.md,
"The scrape of /metrics"). A series' label text never changes, so here it is built once, when the
series first shows up, and each scrape only formats the numbers.

It reads the values from prometheus-client's metric objects (``_metrics``, ``_value``,
``_buckets``, ``_sum``, ``_created``: not public API). tests/test_exposition.py checks the
output is the same bytes as ``generate_latest``'s for the installed version, and
tests/test_operations.py has promtool and a real Prometheus read it.

Even so, a scrape of 72 routes' series is several milliseconds of formatting, and every stream's
next frame would wait behind it, on the first byte's tail latency above all.
:meth:`Exposition.render_async` gives the loop back every :data:`STEP` series. One series' lines
(a histogram's buckets, count and sum) are always read in one go, so each is consistent; two
series may be read a few loop turns apart, which a scrape of a live process never excluded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import prometheus_client.metrics as client_metrics
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.utils import floatToGoString

__all__ = ["STEP", "Exposition"]

STEP = 16
"""Series rendered between two turns of the event loop (:meth:`Exposition.render_async`): a
histogram's 16 series are about 270 lines, a few hundred microseconds."""

_fmt: Callable[[float], str] = floatToGoString
_ZERO = _fmt(0.0)


def _escape(value: str) -> str:
    """A label value as the text format quotes it."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _series(name: str, pairs: Iterable[tuple[str, str]]) -> str:
    """``name{a="x",b="y"} `` (labels sorted by name, as generate_latest writes them)."""
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs))
    return f"{name}{{{text}}} " if text else f"{name} "


def _created_enabled() -> bool:
    # prometheus-client's switch (PROMETHEUS_DISABLE_CREATED_SERIES, disable_created_metrics())
    return bool(client_metrics._use_created)


class _Block:
    """One metric: its header, and the line starts of each of its series, built once."""

    __slots__ = ("_created_head", "_head", "_labelnames", "_metric", "_name", "_starts")

    def __init__(self, metric: Any, name: str, kind: str) -> None:
        self._metric = metric
        self._name = name
        doc = metric._documentation.replace("\\", r"\\").replace("\n", r"\n")
        shown = f"{name}_total" if kind == "counter" else name
        self._head = f"# HELP {shown} {doc}\n# TYPE {shown} {kind}\n"
        self._created_head = f"# HELP {name}_created {doc}\n# TYPE {name}_created gauge\n"
        self._labelnames: tuple[str, ...] = tuple(metric._labelnames)
        self._starts: dict[tuple[str, ...], tuple[str, ...]] = {}

    def _rows(self) -> list[tuple[tuple[str, ...], Any]]:
        """Each series' line starts, and its prometheus-client child."""
        with self._metric._lock:
            children = list(self._metric._metrics.items())
        known = self._starts
        if len(known) > 2 * len(children) + 16:  # series removed: forget their text
            known = self._starts = {k: v for k, v in known.items() if k in self._metric._metrics}
        rows = []
        for values, child in children:
            starts = known.get(values)
            if starts is None:
                pairs = tuple(zip(self._labelnames, values, strict=True))
                starts = known[values] = self._build(pairs)
            rows.append((starts, child))
        return rows

    def _build(self, pairs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
        raise NotImplementedError

    def render(self, out: list[str], created: bool) -> Iterator[None]:
        """Appends the metric's lines to ``out``, pausing (a ``None``) every :data:`STEP`
        series."""
        raise NotImplementedError


class _CounterBlock(_Block):
    __slots__ = ()

    def _build(self, pairs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
        return (_series(f"{self._name}_total", pairs), _series(f"{self._name}_created", pairs))

    def render(self, out: list[str], created: bool) -> Iterator[None]:
        out.append(self._head)
        rows = self._rows()
        for k, (starts, child) in enumerate(rows, 1):
            out.append(f"{starts[0]}{_fmt(child._value.get())}\n")
            if not k % STEP:
                yield
        if created and rows:
            out.append(self._created_head)
            for starts, child in rows:
                out.append(f"{starts[1]}{_fmt(child._created)}\n")


class _GaugeBlock(_Block):
    __slots__ = ()

    def _build(self, pairs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
        return (_series(self._name, pairs),)

    def render(self, out: list[str], created: bool) -> Iterator[None]:
        out.append(self._head)
        for k, (starts, child) in enumerate(self._rows(), 1):
            out.append(f"{starts[0]}{_fmt(child._value.get())}\n")
            if not k % STEP:
                yield


class _HistogramBlock(_Block):
    """Starts: one per bucket, then ``_count``, ``_sum``, ``_created``."""

    __slots__ = ("_bounds", "_has_sum")

    def __init__(self, metric: Any, name: str, kind: str) -> None:
        super().__init__(metric, name, kind)
        self._bounds = [_fmt(b) for b in metric._upper_bounds]
        self._has_sum = metric._upper_bounds[0] >= 0  # as prometheus-client decides

    def _build(self, pairs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
        bucket = f"{self._name}_bucket"
        return (*(_series(bucket, (*pairs, ("le", le))) for le in self._bounds),
                *(_series(f"{self._name}{s}", pairs) for s in ("_count", "_sum", "_created")))

    def render(self, out: list[str], created: bool) -> Iterator[None]:
        out.append(self._head)
        n = len(self._bounds)
        rows = self._rows()
        for k, (start, child) in enumerate(rows, 1):
            if not k % STEP:
                yield  # (before a series, never within one)
            acc, text = 0.0, _ZERO
            for i, bucket in enumerate(child._buckets):
                count = bucket.get()
                if count:  # most buckets add nothing: the count's text is the one before
                    acc += count
                    text = _fmt(acc)
                out.append(f"{start[i]}{text}\n")
            out.append(f"{start[n]}{text}\n")
            if self._has_sum:
                out.append(f"{start[n + 1]}{_fmt(child._sum.get())}\n")
        if created and rows:
            out.append(self._created_head)
            for start, child in rows:
                out.append(f"{start[n + 2]}{_fmt(child._created)}\n")


def _block(metric: Counter | Gauge | Histogram) -> _Block:
    name: str = metric._name
    if isinstance(metric, Counter):
        return _CounterBlock(metric, name, "counter")
    if isinstance(metric, Histogram):
        return _HistogramBlock(metric, name, "histogram")
    return _GaugeBlock(metric, name, "gauge")


class Exposition:
    """Renders the given labelled metrics, in the order given (the order they were registered
    in, which is the order ``generate_latest`` follows)."""

    __slots__ = ("_blocks",)

    def __init__(self, metrics: Sequence[Counter | Gauge | Histogram]) -> None:
        for metric in metrics:
            if not metric._labelnames:
                raise ValueError(f"{metric} has no labels: only labelled metrics are rendered")
        self._blocks = [_block(m) for m in metrics]

    def render(self) -> bytes:
        """The whole exposition, at once."""
        out: list[str] = []
        created = _created_enabled()
        for block in self._blocks:
            for _ in block.render(out, created):
                pass
        return "".join(out).encode()

    async def render_async(self) -> bytes:
        """The same bytes as :meth:`render`, with a turn of the event loop every :data:`STEP`
        series (see the module's docstring)."""
        out: list[str] = []
        created = _created_enabled()
        for block in self._blocks:
            for _ in block.render(out, created):
                await asyncio.sleep(0)
        return "".join(out).encode()
