"""The gateway's clock seam: what reads the time for upstream health and for the status page's
traffic window gets its clock from :func:`gateway.app.create_app` (``clock=``), so a test drives
ejections and buckets through it instead of patching :mod:`time` in some module.

Only the two readings that decide state are seamed: ``monotonic`` (when an ejected upstream gets
its trial) and ``wall`` (which five-second bucket a request falls in, and what the status page
calls now). Durations (``time.perf_counter``) and timers paired with ``asyncio.sleep`` stay on
the real clock: a fake clock there would only make the measurements lie.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SYSTEM_CLOCK", "Clock"]


@dataclass(frozen=True, slots=True)
class Clock:
    """Two plain functions, each stored once by its user (a bound attribute, then one call a
    reading: no wrapper on the per-request path)."""

    monotonic: Callable[[], float] = time.monotonic
    """Seconds for upstream health (ejection and trial); by default :func:`time.monotonic`."""
    wall: Callable[[], float] = time.time
    """Unix seconds for the traffic window and the status page; by default :func:`time.time`."""


SYSTEM_CLOCK = Clock()
"""The real clock, the default everywhere."""
