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

__all__ = ["TICK", "Deadline", "Deadlines", "ResponseTimer", "deadlines"]

TICK = 0.02
"""Seconds per bucket: how late a deadline may fire."""


class Deadline:
    """One deadline; :meth:`Deadlines.cancel` it once what it bounds is done. An entry that is
    not pending may be armed again (:meth:`Deadlines.arm`): a holder that sets bound after bound
    (a connection, a request after request) makes one entry, not one a bound."""

    __slots__ = ("bucket", "fire")

    def __init__(self, fire: Callable[[], None]) -> None:
        self.bucket = 0
        """The bucket it waits in; 0 while it is not pending (buckets count from 1)."""
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
        entry = Deadline(fire)
        self.arm(entry, when)
        return entry

    def after(self, delay: float, fire: Callable[[], None]) -> Deadline:
        return self.at(self._loop.time() + delay, fire)

    def arm(self, entry: Deadline, when: float) -> None:
        """Have ``entry`` fire once ``loop.time()`` passed ``when`` (within a tick), unless
        cancelled first; an entry still pending is moved."""
        if entry.bucket:
            self.cancel(entry)
        bucket = math.ceil(when / TICK)
        if bucket <= self._done:
            bucket = self._done + 1
        entry.bucket = bucket
        slot = self._wheel.get(bucket)
        if slot is None:
            self._wheel[bucket] = {entry}
        else:
            slot.add(entry)
        self._count += 1
        if self._handle is None:
            self._arm()

    def cancel(self, entry: Deadline) -> None:
        """(Harmless on an entry that is not pending: fired, cancelled, or never armed.)"""
        bucket = entry.bucket
        if bucket:
            entry.bucket = 0
            self._count -= 1
            slot = self._wheel.get(bucket)
            if slot is not None:  # (None: its bucket is firing, and it is not to fire)
                slot.remove(entry)
                if not slot:  # no empty set waits for its tick
                    del self._wheel[bucket]

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
                if entry.bucket != b:
                    continue  # cancelled, or moved, by a deadline fired before it
                self._count -= 1
                entry.bucket = 0  # (before its call, which may arm it again)
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


class ResponseTimer:
    """The one bound a response not read by :class:`~gateway.upstream.http1.Http1Connection`
    keeps (its ``fail_after`` / ``stop_timer``): an entry on the loop's wheel, armed again
    from scratch each time."""

    __slots__ = ("_armed",)

    def __init__(self) -> None:
        self._armed: tuple[Deadlines, Deadline] | None = None

    def arm(self, delay: float, fire: Callable[[], None]) -> None:
        self.stop()
        wheel = deadlines()
        self._armed = (wheel, wheel.after(delay, fire))

    def stop(self) -> None:
        if self._armed is not None:
            (wheel, entry), self._armed = self._armed, None
            wheel.cancel(entry)
