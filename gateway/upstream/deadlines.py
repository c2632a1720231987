"""Deadlines on the hot path without a loop timer each: a timing wheel per event loop.

A loop timer (``loop.call_at`` and its cancel, or an ``asyncio.timeout`` block) costs 5-12 µs on
the machines the benchmark ran on, and every upstream call needs two or three bounds (the
response head, the whole body, a stream's silences): more than the rest of the upstream hop.
Here a deadline is an entry in the bucket of its :data:`TICK` (a set add, and a set discard to
cancel it), and one loop timer per event loop, armed only while any deadline is pending, fires
the buckets that are due. A deadline therefore fires up to one tick late: timeouts are
configured in seconds, so 20 ms of slack is within what they promise.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Callable

__all__ = ["TICK", "Deadline", "Deadlines", "deadlines"]

TICK = 0.02
"""Seconds per bucket: how late a deadline may fire."""


class Deadline:
    """One pending deadline; :meth:`Deadlines.cancel` it once what it bounds is done."""

    __slots__ = ("bucket", "fire")

    def __init__(self, bucket: int, fire: Callable[[], None]) -> None:
        self.bucket = bucket
        self.fire = fire


class Deadlines:
    """The wheel of one event loop."""

    __slots__ = ("__weakref__", "_count", "_done", "_handle", "_loop", "_wheel")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._wheel: dict[int, set[Deadline]] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._count = 0
        self._done = math.floor(loop.time() / TICK)
        """The last bucket fired."""

    def at(self, when: float, fire: Callable[[], None]) -> Deadline:
        """Call ``fire()`` once ``loop.time()`` passed ``when`` (within a tick), unless
        cancelled first."""
        bucket = max(math.ceil(when / TICK), self._done + 1)
        entry = Deadline(bucket, fire)
        slot = self._wheel.get(bucket)
        if slot is None:
            slot = self._wheel[bucket] = set()
        slot.add(entry)
        self._count += 1
        if self._handle is None:
            self._arm()
        return entry

    def after(self, delay: float, fire: Callable[[], None]) -> Deadline:
        return self.at(self._loop.time() + delay, fire)

    def cancel(self, entry: Deadline) -> None:
        slot = self._wheel.get(entry.bucket)
        if slot is not None and entry in slot:
            slot.remove(entry)
            self._count -= 1
            if not slot:  # no empty set waits for its tick
                del self._wheel[entry.bucket]

    def pending(self) -> int:
        return self._count

    def _arm(self) -> None:
        self._handle = self._loop.call_at((self._done + 1) * TICK, self._tick)

    def _tick(self) -> None:
        self._handle = None
        now = math.floor(self._loop.time() / TICK)
        wheel = self._wheel
        first, self._done = self._done + 1, max(self._done, now)
        for b in range(first, now + 1):
            for entry in wheel.pop(b, ()):
                self._count -= 1
                entry.fire()
        if self._count and self._handle is None:  # (a deadline set by a callback above armed it)
            self._arm()


_PER_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Deadlines] = \
    weakref.WeakKeyDictionary()


def deadlines(loop: asyncio.AbstractEventLoop | None = None) -> Deadlines:
    """The wheel of ``loop``, by default the running loop's."""
    if loop is None:
        loop = asyncio.get_running_loop()
    found = _PER_LOOP.get(loop)
    if found is None:
        found = _PER_LOOP[loop] = Deadlines(loop)
    return found
