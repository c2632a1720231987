"""The load driver: closed-loop asyncio workers on one aiohttp ``ClientSession``.

``concurrency`` workers each send a request, read the whole answer, check it and send the next,
from the start of the warm-up to the end of the measured window. What completes inside the window
[t0, t1] is counted: throughput is completions / (t1 - t0); latency is request start to last body
byte; TTFB (streams) is request start to the first body byte. An answer's text is reassembled
the way a client of that dialect would (``wire.stream_text``) and compared with the mock's text:
a mismatch, a non-200 status or a transport error counts as an error, not as a request. The text
is reassembled for one answer in :data:`CHECK_EVERY` (the first, then every eighth), whichever
server sent it; every answer's status and length are checked (:func:`_check`).

Why not wrk/hey/oha: they need an install, and none reports per-stream time to first byte or can
check that a translated stream reassembles to the right text. The driver does the same work per
answer for every server of a run, and it runs on its own core (see ``run.py``).

Two HTTP clients (``client=``): ``lean`` (the default: :mod:`h1load`, keep-alive connections on
httptools, a fraction of the CPU per request) and ``aiohttp`` (one ``ClientSession``, the
generator of the earliest runs). With two cores the driver shares its core with the mock, and
aiohttp's client was the ceiling of the whole-answer runs; ``lean`` lifts it, so that the servers
under test, not the generator, set the throughput. TTFB is the first body byte as the client's
parser sees it (``lean``: the read that brought it; ``aiohttp``: the first chunk its stream
reader hands over, a loop iteration later).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import h1load
import wire
from aiohttp import ClientSession, ClientTimeout, TCPConnector
from yarl import URL

GENERATORS = ("lean", "aiohttp")
"""The load generator: the driver's client and the mock's server (``bench/mock.py --server``)."""
T = TypeVar("T")


Hook = Callable[[], Awaitable[None]]


async def _noop() -> None:
    return None


CHECK_EVERY = 8
"""One answer in this many has its text reassembled and compared (:func:`_check`).

Why a sample, the same for every server: the driver shares its core with the mock, so the
check must cost that core as much for the server under test as for the yardstick, or the ratio
compares the checks. Reassembling a 29-event Responses stream parses 7.8 KB of JSON event by
event. The pass-through's answers are the mock's bytes, the same each time, while a translated
answer carries ids and times of its own: a check that skipped answers seen before parsed every
gateway answer of such a pair and almost none of the pass-through's. Checking every answer in
full made the generator's core the ceiling of the streamed runs instead (with no proxy at all,
no more streams than the pass-through's). The mock's text is the same for every request, so a
wrong translation shows in the first answer and in every eighth after it."""

LENGTH_SLACK = 64
"""How far an answer's length may stray from the first right answer's: ids, times and durations
of a translated answer vary by a few bytes; a stream cut short at a clean boundary loses at
least its closing event."""


@dataclass(slots=True)
class Target:
    url: str
    dialect: str
    """The client dialect spoken to ``url`` (short name)."""
    stream: bool
    expected: str
    answers: int = 0
    """Answers with status 200 seen so far (:data:`CHECK_EVERY`)."""
    right_length: int = -1
    """The length of the first answer whose text was found right (-1: none yet)."""


@dataclass(slots=True)
class RunResult:
    duration: float
    t0: float = 0.0
    """The measured window [t0, t1] (``time.perf_counter``)."""
    t1: float = 0.0
    requests: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    ttfbs: list[float] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)
    in_flight: int = 0
    in_flight_at_end: int = 0

    def record(self, start: float, end: float, first: float | None, error: str | None) -> None:
        """One answer, counted if it ended inside the window."""
        if not self.t0 <= end <= self.t1:
            return
        if error is not None:
            self.errors += 1
            if len(self.error_samples) < 5:
                self.error_samples.append(error)
            return
        self.requests += 1
        self.latencies.append(end - start)
        if first is not None:
            self.ttfbs.append(first - start)

    async def edges(self, on_start: Hook, on_end: Hook) -> None:
        """Calls ``on_start`` and ``on_end`` at the window's edges, while the load goes on."""
        clock = time.perf_counter
        await asyncio.sleep(max(0.0, self.t0 - clock()))
        await on_start()
        await asyncio.sleep(max(0.0, self.t1 - clock()))
        self.in_flight_at_end = self.in_flight
        await on_end()

    def summary(self) -> dict[str, Any]:
        lat, ttfb = sorted(self.latencies), sorted(self.ttfbs)
        return {
            "duration_s": round(self.duration, 3),
            "requests": self.requests,
            "errors": self.errors,
            "rps": self.requests / self.duration if self.duration > 0 else 0.0,
            "p50_ms": pct(lat, 0.50) * 1e3 if lat else None,
            "p99_ms": pct(lat, 0.99) * 1e3 if lat else None,
            "ttfb_p50_ms": pct(ttfb, 0.50) * 1e3 if ttfb else None,
            "ttfb_p99_ms": pct(ttfb, 0.99) * 1e3 if ttfb else None,
            "error_samples": self.error_samples,
        }


def pct(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[i]


async def run_load(
    target: Target, *, concurrency: int, warmup: float, duration: float,
    request_timeout: float = 30.0, on_start: Hook = _noop, on_end: Hook = _noop,
    client: str = "lean",
) -> RunResult:
    """Warm up for ``warmup`` s, then measure ``duration`` s. ``on_start``/``on_end`` run at the
    window's edges (while the load goes on) and may snapshot counters of the server under test.
    Returns once every worker finished its last request (bounded by ``request_timeout``)."""
    if client == "lean":
        return await _run_lean(target, concurrency=concurrency, warmup=warmup,
                               duration=duration, request_timeout=request_timeout,
                               on_start=on_start, on_end=on_end)
    if client != "aiohttp":
        raise ValueError(f"client: one of {', '.join(GENERATORS)}, not {client!r}")
    body, headers = wire.request(target.dialect, target.stream)
    url = URL(target.url, encoded=True)
    stream = target.stream
    clock = time.perf_counter
    connector = TCPConnector(limit=concurrency, limit_per_host=concurrency, force_close=False,
                             enable_cleanup_closed=False, ttl_dns_cache=None)
    session = ClientSession(connector=connector, timeout=ClientTimeout(total=request_timeout),
                            auto_decompress=False, skip_auto_headers=("User-Agent",))
    result = _window(duration, warmup)

    async def one() -> None:
        start = clock()
        first: float | None = None
        try:
            async with session.post(url, data=body, headers=headers) as resp:
                if stream:
                    parts = []
                    async for data in resp.content.iter_any():
                        if first is None:
                            first = clock()
                        parts.append(data)
                    raw = b"".join(parts)
                else:
                    raw = await resp.read()
                end = clock()
                error = _check(target, resp.status, raw)
        except Exception as e:  # any failure is counted as an error, and the load goes on
            end, error = clock(), f"{type(e).__name__}: {e}"
        result.record(start, end, first, error)

    async def worker() -> None:
        while clock() < result.t1:
            result.in_flight += 1
            await one()
            result.in_flight -= 1

    try:
        async with asyncio.timeout(warmup + duration + request_timeout + 10):
            await asyncio.gather(result.edges(on_start, on_end),
                                 *(worker() for _ in range(concurrency)))
    finally:
        await session.close()
    return result


def _window(duration: float, warmup: float) -> RunResult:
    """A result whose window starts ``warmup`` s from now."""
    result = RunResult(duration)
    result.t0 = time.perf_counter() + warmup
    result.t1 = result.t0 + duration
    return result


def run(main: Awaitable[T], client: str) -> T:
    """Runs a benchmark's main coroutine: on uvloop with the lean client (when installed: it is
    a dependency of the gateway on Linux), on asyncio's own loop with aiohttp's (as before, so that
    its figures stay comparable with the earlier runs).

    A SIGTERM cancels ``main`` as Ctrl-C does, so that its ``finally`` stops the servers it
    started (each in its own session, out of reach of a signal to this one's group) before this
    process exits, with status 143."""
    if client == "lean":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(_cancelled_by_sigterm(main))
    return asyncio.run(_cancelled_by_sigterm(main))


async def _cancelled_by_sigterm(main: Awaitable[T]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    terminated: list[bool] = []

    def on_sigterm() -> None:
        terminated.append(True)
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        return await main
    except asyncio.CancelledError:
        if terminated:
            print("terminated: the servers this run started are stopped", file=sys.stderr)
            raise SystemExit(128 + signal.SIGTERM) from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _check(target: Target, status: int, raw: bytes) -> str | None:
    """Why this answer is wrong (``None``: it is right): a non-200; for one answer in
    :data:`CHECK_EVERY`, a text that does not reassemble to the mock's; for the others, a length
    more than :data:`LENGTH_SLACK` bytes from the first right answer's."""
    if status != 200:
        return f"HTTP {status}: {raw[:200]!r}"
    n = target.answers
    target.answers = n + 1
    if n % CHECK_EVERY and target.right_length >= 0:
        if abs(len(raw) - target.right_length) > LENGTH_SLACK:
            return f"length {len(raw)}, a right answer has {target.right_length}"
        return None
    try:
        text = wire.stream_text(target.dialect, raw) if target.stream else \
            wire.whole_text(target.dialect, raw)
    except wire.WireError as e:
        return str(e)
    if text != target.expected:
        return f"text mismatch: got {text[:60]!r}… ({len(text)} chars)"
    if target.right_length < 0:
        target.right_length = len(raw)
    return None


async def _run_lean(
    target: Target, *, concurrency: int, warmup: float, duration: float,
    request_timeout: float, on_start: Hook, on_end: Hook,
) -> RunResult:
    """:func:`run_load` on :mod:`h1load`: a connection per worker, reopened after a failure or a
    server's ``Connection: close``; a watchdog aborts a request older than ``request_timeout``."""
    body, headers = wire.request(target.dialect, target.stream)
    url = URL(target.url, encoded=True)
    host, port = url.host or "127.0.0.1", url.port or 80
    data = h1load.request_bytes(host, port, url.raw_path_qs, body, headers)
    clock = time.perf_counter
    conns: list[h1load.H1Connection | None] = [None] * concurrency
    started: list[float | None] = [None] * concurrency
    result = _window(duration, warmup)
    t1 = result.t1

    async def worker(i: int) -> None:
        while clock() < t1:
            result.in_flight += 1
            start = started[i] = clock()
            first: float | None = None
            try:
                conn = conns[i]
                if conn is None or not conn.usable:
                    conn = conns[i] = await h1load.H1Connection.open(host, port)
                answer = await conn.request(data)
                end, first = clock(), answer.first
                error = _check(target, answer.status, answer.body)
            except Exception as e:  # any failure is counted as an error, and the load goes on
                end, error = clock(), f"{type(e).__name__}: {e}"
                if conns[i] is not None:
                    conns[i].close()  # type: ignore[union-attr]
                    conns[i] = None
            started[i] = None
            result.in_flight -= 1
            result.record(start, end, first if target.stream else None, error)

    async def watchdog() -> None:
        while clock() < t1 + request_timeout:
            await asyncio.sleep(0.5)
            now = clock()
            for i, s in enumerate(started):
                conn = conns[i]
                if s is not None and now - s > request_timeout and conn is not None:
                    conn.close()  # its request fails with Closed

    dog = asyncio.create_task(watchdog())
    try:
        async with asyncio.timeout(warmup + duration + request_timeout + 10):
            await asyncio.gather(result.edges(on_start, on_end),
                                 *(worker(i) for i in range(concurrency)))
    finally:
        dog.cancel()
        for conn in conns:
            if conn is not None:
                conn.close()
    return result
