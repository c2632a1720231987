"""The deadline wheel (:mod:`gateway.upstream.deadlines`): a deadline fires once, no earlier than
asked and at most a tick (plus the loop's own lateness) after; a cancelled one never fires; the
one loop timer goes away once nothing is pending."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.upstream.deadlines import TICK, Deadline, Deadlines, deadlines


async def _until(ready: Callable[[], bool], limit: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while loop.time() < end:
        if ready():
            return
        await asyncio.sleep(TICK / 4)


async def test_a_deadline_fires_once_not_early() -> None:
    loop = asyncio.get_running_loop()
    wheel = deadlines()
    assert wheel is deadlines()  # one per loop
    fired: list[float] = []
    start = loop.time()
    wheel.after(0.05, lambda: fired.append(loop.time()))
    await _until(lambda: fired)
    assert len(fired) == 1 and fired[0] >= start + 0.05
    await asyncio.sleep(3 * TICK)
    assert len(fired) == 1
    assert wheel.pending() == 0 and wheel._handle is None


async def test_a_cancelled_deadline_never_fires() -> None:
    wheel = Deadlines(asyncio.get_running_loop())
    fired: list[str] = []
    keep = wheel.after(0.04, lambda: fired.append("kept"))
    drop = wheel.after(0.02, lambda: fired.append("dropped"))
    wheel.cancel(drop)
    wheel.cancel(drop)  # twice is harmless
    assert wheel.pending() == 1
    await _until(lambda: fired)
    await asyncio.sleep(3 * TICK)
    assert fired == ["kept"] and keep is not None
    assert wheel.pending() == 0


async def test_a_deadline_set_by_a_firing_one_fires_later() -> None:
    loop = asyncio.get_running_loop()
    wheel = Deadlines(loop)
    fired: list[str] = []

    def first() -> None:
        fired.append("first")
        wheel.after(0.03, lambda: fired.append("second"))

    wheel.after(0.0, first)
    await _until(lambda: len(fired) == 2)
    assert fired == ["first", "second"]
    assert wheel.pending() == 0


async def test_cancelled_deadlines_leave_nothing_behind() -> None:
    wheel = Deadlines(asyncio.get_running_loop())
    entries = [wheel.after(30 + i * TICK, lambda: None) for i in range(1000)]
    for e in entries:
        wheel.cancel(e)
    assert wheel.pending() == 0 and not wheel._wheel


async def test_one_entry_armed_again_and_again_fires_once_for_its_last_bound() -> None:
    loop = asyncio.get_running_loop()
    wheel = Deadlines(loop)
    fired: list[float] = []
    entry = Deadline(lambda: fired.append(loop.time()))
    start = loop.time()
    wheel.arm(entry, start + 30)
    wheel.arm(entry, start + 0.06)  # moved, not added
    assert wheel.pending() == 1
    wheel.cancel(entry)
    wheel.arm(entry, start + 0.04)
    await _until(lambda: fired)
    await asyncio.sleep(4 * TICK)
    assert len(fired) == 1 and fired[0] >= start + 0.04
    assert wheel.pending() == 0 and not wheel._wheel
    wheel.cancel(entry)  # after it fired: harmless
    wheel.arm(entry, loop.time())  # and it may be armed again
    await _until(lambda: len(fired) == 2)
    assert wheel.pending() == 0


async def test_a_deadline_cancelled_by_one_firing_in_its_tick_never_fires() -> None:
    loop = asyncio.get_running_loop()
    wheel = Deadlines(loop)
    fired: list[str] = []
    when = loop.time() + 0.03
    entries: list[Deadline] = []

    def first() -> None:
        fired.append("first")
        for e in entries:
            wheel.cancel(e)

    entries.append(Deadline(lambda: fired.append("second")))
    entries.append(Deadline(lambda: fired.append("third")))
    wheel.arm(entries[0], when)
    wheel.arm(entries[1], when)
    wheel.at(when, first)
    await _until(lambda: bool(fired))
    await asyncio.sleep(3 * TICK)
    # a set's order is not fixed: only what fired before "first" could have
    assert fired[-1] == "first" and fired.count("first") == 1
    assert wheel.pending() == 0 and not wheel._wheel
