"""What a named key's limits mean to a store: its windows, and what one admission found.

Every window is a **sliding window of buckets**: the window's length is cut into equal buckets
(a minute into 60 one-second buckets, a day into 24 hours, a month of 30 days into days), each
holding what was admitted in it; what a window has used is the sum of its buckets still inside
it. Chosen over the two other usual shapes:

- a *token bucket* refills continuously, so a burst followed by a wait admits more than the
  limit within one minute, and its "remaining" and "reset" are not the counts clients read in
  the providers' headers; a window of buckets admits exactly the limit in any window;
- a *sliding log* (one entry per request) is exact to the millisecond but grows with the rate,
  and a token budget of millions per month cannot be a log; buckets hold a fixed number of
  counters per window whatever the traffic;
- and a reservation settled later is corrected in the very bucket it was added to.

The price: a window moves a bucket at a time, so any span of a window's length that straddles
a bucket edge may see up to one bucket more than the limit (at most ``limit / buckets`` on
average traffic); any span aligned on bucket edges never sees more than the limit.

Admission rule, the same for every store: a window admits while what it used is below its limit
(requests: one more fits; tokens: the window is not yet spent). An admitted request adds to
every window at once (one request, or its reservation of tokens), so a token window can go past
its limit by at most the reservation of the last request it admitted, and never further.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import KeyLimits

__all__ = ["Admission", "Plan", "Settlement", "Window", "WindowState", "plan_of"]

_MINUTE = 60_000
_DAY = 86_400_000
_SHAPES: dict[str, tuple[int, int, bool]] = {
    # limit name: (length in ms, buckets, counts tokens)
    "requests_per_minute": (_MINUTE, 60, False),
    "tokens_per_minute": (_MINUTE, 60, True),
    "tokens_per_day": (_DAY, 24, True),
    "tokens_per_month": (30 * _DAY, 30, True),
}


@dataclass(frozen=True, slots=True)
class Window:
    name: str
    """The limit's name (``requests_per_minute``, …): also its store key's suffix."""
    limit: int
    length_ms: int
    buckets: int
    tokens: bool
    """Counts tokens (else requests)."""

    @property
    def width_ms(self) -> int:
        return self.length_ms // self.buckets


@dataclass(frozen=True, slots=True)
class Plan:
    """One key's limits as windows."""

    windows: tuple[Window, ...]
    max_concurrent: int | None


def plan_of(limits: KeyLimits) -> Plan:
    windows = []
    for name, (length, buckets, tokens) in _SHAPES.items():
        limit = getattr(limits, name)
        if limit is not None:
            windows.append(Window(name, limit, length, buckets, tokens))
    return Plan(tuple(windows), limits.max_concurrent)


@dataclass(frozen=True, slots=True)
class WindowState:
    window: Window
    used: int
    reset: float
    """Seconds until the window has nothing counted (its newest bucket slid out)."""

    @property
    def remaining(self) -> int:
        return max(0, self.window.limit - self.used)


@dataclass(frozen=True, slots=True)
class Admission:
    at_ms: int
    """The store's clock at admission (a settlement finds the buckets it added to by it)."""
    refused: str | None
    """The limit that refused (a window's name, or ``max_concurrent``); ``None``: admitted."""
    retry_after: float
    """Seconds until the refusing limit would admit this request."""
    states: tuple[WindowState, ...]
    in_flight: int


@dataclass(frozen=True, slots=True)
class Settlement:
    """What a request used, replacing what it reserved."""

    reserved: int
    prompt: int
    completion: int
    estimated: int
    """The part of :attr:`tokens` that is an estimate (no usage reported for it)."""

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion
