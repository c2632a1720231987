"""Load and soak: N concurrent streaming clients through one translating route for T minutes.

    python bench/soak.py                                          # 500 streams, 30 s + 10 min
    python bench/soak.py --streams 50 --minutes 0.5 --warmup 5    # a smoke run, ~1 minute

Starts, on 127.0.0.1 and free ports, the mock upstream (bench/mock.py) with a delay before each
stream frame, and the gateway (one worker, ``logging.level: warning``) on the config bench/run.py
generates, pinned as run.py pins: the gateway on core 0, this driver and the mock on core 1
(nothing is pinned with fewer than two usable cores, or with --no-pin). Then ``--streams``
clients, each in a closed loop, open a stream on the ``--pair`` route, read it to the end and
open the next, for ``--warmup`` seconds and then ``--minutes`` minutes; then the load stops and
the streams in flight finish.

Every stream is checked: its body is reassembled as a client of that dialect would
(``wire.stream_text``) and the text, as UTF-8 bytes, must equal the mock's (``wire.answer_text``)
byte for byte. A mismatch, a malformed stream, a non-200 status, a transport error or a timeout
(``--request-timeout``) is an error, counted by kind with a few examples.

Per stream: TTFT = request start to the first body chunk that holds answer text (a JSON string
starting with its first word, ``"tok ``: the empty ``processing`` event a chatui client gets
first does not count); TTFB = request start to the first body byte; duration = start to the
last byte.
Percentiles (nearest rank) are over the streams started after the warm-up.

Every ``--sample-every`` seconds, and at the edges (idle before the load, end of warm-up, end of
the load, after the drain, after the client connections closed): the gateway's RSS (VmRSS of the
gateway and any descendants, summed), its open file descriptors (``/proc/PID/fd``), the CPU% of
the gateway, this driver and the mock over the interval, and of any other process on their cores
("others": the cores' busy time less ours, from /proc/stat), the counts so far and the TTFT
p50/p99 of the streams completed in the interval; one progress line each. A throughput dip with
"others" up is a neighbour on the machine, not the gateway.

The RSS check: the RSS at the end of the load and after the drain must both be at most (1 +
``--rss-tolerance``) x the RSS at the end of the warm-up (the baseline: by then every connection,
buffer and pool has reached its working size). Falling below it is not a failure. The slope of a
least-squares line through the post-warm-up samples (MiB/min), over the whole load and over its
second half, is reported as well: a leak keeps the second one above 0.

Every structure the gateway keeps across requests is bounded and reaches its size within the
warm-up: connection pools, metric series, and the status page's recent traffic
(gateway/traffic.py: one minute, exact counts and at most 100 sampled latencies a second per
route). An earlier version kept 1000 latencies a second for five minutes; this script is what
showed it (the RSS climbed ~12 MiB for five minutes, then stayed flat).

At the end, ``GET /metrics``: the sum of ``gateway_requests_total`` (by status) against the
streams this driver sent, and ``gateway_inflight_requests``, which must be back to 0. Exit code
0 only if (a) no error and at least one stream completed, and (b) the RSS check passed;
1 otherwise; 2 if the run was interrupted (Ctrl-C or SIGTERM once: stop the load, drain and
report; twice: tear down at once). Everything is written to ``--out`` (JSON).

Choices and their reasons:

* The pair, by default (``wire.soak_pair``): a client dialect whose stream events repeat the
  whole text so far (its bench module says ``KEEPS_STATE``; chatui today) in front of the last
  registered other dialect (openai today: a chat UI in front of an OpenAI-compatible model).
  The gateway then keeps per-stream state that grows with the answer: the translating path
  most likely to leak.
* ``--frame-delay-ms`` (50 by default, 20 tokens/s, a large model's pace): a stream of 20
  chunks is 23 frames on the openai side, so it lasts ~1.15 s and 500 clients keep ~430
  streams/s going. The point is 500 streams *open at once*, each mostly waiting on its
  upstream, as in front of real models, with a gateway that keeps up, so that TTFT measures the
  gateway and not a queue. A paced stream costs the gateway ~1.4 ms of CPU (one read, decode,
  encode and write per frame), so on one core: 50 ms -> ~60% busy, TTFT p50 = 2 frames + ~7 ms
  (the first frame is the role chunk, without text); 25 ms -> ~95%, 10 ms -> saturated (~1150
  streams/s, and TTFT is queueing: ~140 ms p50 instead of 20). The gateway's CPU% and the
  stream duration against frames x delay (both printed) show whether it kept up; lower the
  delay for more load, 0 for a closed loop at saturation.
* The clients start spread over min(5 s, warm-up / 2), not all in the same millisecond: 500
  simultaneous connects overflow the listen backlog and the retried SYNs (1 s later) would
  only measure the kernel.
* Reading is as cheap as it gets (``iter_any``, bytes joined and parsed once at the end), and
  the driver's CPU% is printed: if driver + mock reach ~100% of their core, the driver, not the
  gateway, was the limit, and the TTFT figures include its queueing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import signal
import sys
import tempfile
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

try:
    import aiohttp
    import driver
    import procs
    import run
    import wire
    from aiohttp import ClientSession, ClientTimeout, TCPConnector
    from yarl import URL
except ImportError as e:  # pragma: no cover - a fresh clone without the venv
    sys.exit(f"bench/soak.py needs the project's dependencies ({e}): run `make bench` once "
             "(it sets up .venv), then `.venv/bin/python bench/soak.py`")

DEFAULT_PAIR = ":".join(wire.soak_pair())
EXAMPLES_PER_KIND = 5
clock = time.perf_counter


# --- arguments -----------------------------------------------------------------------------------


def parse_pair(text: str) -> tuple[str, str]:
    pairs = run.parse_pairs(text)
    if len(pairs) != 1:
        raise argparse.ArgumentTypeError(f"{text!r}: one CLIENT:UPSTREAM pair, please")
    return pairs[0]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Load and soak: concurrent streams through a translating route; checks "
                    "every stream's text and the gateway's RSS.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--streams", type=int, default=500, help="concurrent streaming clients")
    p.add_argument("--minutes", type=float, default=10.0, help="measured load after the warm-up")
    p.add_argument("--warmup", type=float, default=30.0,
                   help="seconds of load before the measured part; the RSS baseline is taken "
                        "at its end")
    p.add_argument("--sample-every", type=float, default=5.0,
                   help="seconds between RSS / fd / CPU samples (and progress lines)")
    p.add_argument("--pair", type=parse_pair, default=DEFAULT_PAIR, metavar="CLIENT:UPSTREAM",
                   help=f"client and upstream dialects ({', '.join(wire.DIALECTS)})")
    p.add_argument("--chunks", type=int, default=20, help="text chunks per answer")
    p.add_argument("--frame-delay-ms", type=float, default=50.0,
                   help="mock delay before each stream frame (see the module docstring)")
    p.add_argument("--rss-tolerance", type=float, default=0.10,
                   help="largest allowed growth of the RSS over the post-warm-up baseline")
    p.add_argument("--request-timeout", type=float, default=60.0,
                   help="bound on one whole stream, in seconds")
    p.add_argument("--settle", type=float, default=2.0,
                   help="seconds between closing the client connections and the last sample "
                        "(the gateway's idle upstream connections live 30 s)")
    p.add_argument("--gateway-cmd", default=None,
                   help="command that starts the gateway (before 'serve --config ...')")
    p.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON results file [bench/results/soak-<time>.json]")
    a = p.parse_args(argv)
    if a.streams < 1 or a.minutes <= 0 or a.warmup <= 0 or a.sample_every <= 0:
        p.error("--streams >= 1, --minutes > 0, --warmup > 0 and --sample-every > 0, please")
    if a.chunks < 1 or a.frame_delay_ms < 0 or a.rss_tolerance < 0:
        p.error("--chunks >= 1, --frame-delay-ms >= 0 and --rss-tolerance >= 0, please")
    return a


# --- the clients ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    """What the clients did. The arrays hold seconds, for the streams started after warm-up."""

    soak_start: float = float("inf")
    started: int = 0
    in_flight: int = 0
    completed: int = 0
    completed_after_warmup: int = 0
    body_bytes: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    ttft: array[float] = field(default_factory=lambda: array("d"))
    ttfb: array[float] = field(default_factory=lambda: array("d"))
    duration: array[float] = field(default_factory=lambda: array("d"))

    def error(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        examples = self.examples.setdefault(kind, [])
        if len(examples) < EXAMPLES_PER_KIND:
            examples.append(detail)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


@dataclass(frozen=True, slots=True)
class Stream:
    """One request, as every client sends it, and the answer it must get."""

    url: URL
    dialect: str
    body: bytes
    headers: dict[str, str]
    expected: bytes
    token: bytes
    """The first word of the answer: the first chunk that holds it is the first token."""


def make_stream(url: str, dialect: str, chunks: int) -> Stream:
    body, headers = wire.request(dialect, True)
    expected = wire.answer_text(chunks).encode()
    # The answer's first word as it starts a JSON string ('"tok '): not "completion_tokens".
    token = b'"' + wire.WORD.encode()
    return Stream(URL(url, encoded=True), dialect, body, headers, expected, token)


def first_difference(got: bytes, want: bytes) -> str:
    n = min(len(got), len(want))
    i = next((k for k in range(n) if got[k] != want[k]), n)
    lo = max(0, i - 20)
    return (f"text differs at byte {i} (got {len(got)} bytes, expected {len(want)}): "
            f"got {got[lo:i + 20]!r}, expected {want[lo:i + 20]!r}")


async def one_stream(session: ClientSession, s: Stream, tally: Tally) -> None:
    """One stream, start to end; its outcome goes to ``tally``. Never raises (but cancels)."""
    start = clock()
    first_byte: float | None = None
    first_token: float | None = None
    tally.started += 1
    tally.in_flight += 1
    try:
        async with session.post(s.url, data=s.body, headers=s.headers) as resp:
            parts: list[bytes] = []
            async for data in resp.content.iter_any():
                if first_token is None:
                    now = clock()
                    if first_byte is None:
                        first_byte = now
                    if s.token in data:
                        first_token = now
                parts.append(data)
            raw = b"".join(parts)
            status = resp.status
        end = clock()
        tally.body_bytes += len(raw)
        if status != 200:
            tally.error("status", f"HTTP {status}: {raw[:200]!r}")
            return
        text = wire.stream_text(s.dialect, raw).encode()
        if text != s.expected:
            tally.error("mismatch", first_difference(text, s.expected))
            return
    except wire.WireError as e:
        tally.error("malformed", str(e)[:300])
        return
    except TimeoutError as e:
        tally.error("timeout", f"{type(e).__name__} after {clock() - start:.1f}s "
                               f"(first byte {'seen' if first_byte else 'not seen'})")
        return
    except (aiohttp.ClientError, OSError) as e:
        tally.error(f"transport:{type(e).__name__}", str(e)[:300])
        return
    except Exception as e:  # a driver bug must not stop the soak, but it is an error
        tally.error(f"other:{type(e).__name__}", str(e)[:300])
        return
    finally:
        tally.in_flight -= 1
    tally.completed += 1
    if start >= tally.soak_start:
        tally.completed_after_warmup += 1
        tally.ttfb.append((first_byte or end) - start)
        tally.ttft.append((first_token or first_byte or end) - start)
        tally.duration.append(end - start)


async def client(session: ClientSession, s: Stream, tally: Tally, stop: asyncio.Event,
                 delay: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay)
    while not stop.is_set():
        await one_stream(session, s, tally)


# --- samples -------------------------------------------------------------------------------------


def open_fds(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{pid}/fd"))
    return total


class Sampler:
    """RSS, fds and CPU of the gateway, the driver and the mock, with the clients' counts.
    ``cores``: those whose busy time, less that of our three processes, is "others" (any other
    process on them), and whose steal time (CPU the hypervisor gave to another guest) is
    summed."""

    def __init__(self, gw: procs.Proc, mock: procs.Proc, tally: Tally, begin: float,
                 cores: list[int]) -> None:
        self.gw, self.mock, self.tally, self.begin, self.cores = gw, mock, tally, begin, cores
        self.samples: list[dict[str, Any]] = []
        self._last = self.counters()
        self._ttft_seen = 0

    def counters(self) -> tuple[float, float, float, float, float, float, int]:
        """(clock, CPU s of the gateway, of the driver, of the mock, busy s and steal s of
        ``cores``, streams completed)."""
        gw, drv, mock = (procs.cpu_seconds(self.gw.pids()), procs.cpu_seconds([os.getpid()]),
                         procs.cpu_seconds([self.mock.pid]))
        cores = [procs.core_times(c) for c in self.cores]
        return (clock(), gw, drv, mock, sum(b for b, _ in cores), sum(s for _, s in cores),
                self.tally.completed)

    def take(self, phase: str) -> dict[str, Any]:
        """A sample; its rates (CPU%, streams/s) are over the time since the last sample at
        least a second before (``None`` if there is none: CPU times tick every 10 ms)."""
        pids = self.gw.pids()
        now, gw_cpu, drv_cpu, mock_cpu, busy, steal, done = cur = self.counters()
        t, gw0, drv0, mock0, busy0, steal0, done0 = self._last
        dt = now - t
        if dt >= 1.0:
            self._last = cur

        def rate(x1: float, x0: float, scale: float = 100) -> float | None:
            return round(scale * (x1 - x0) / dt, 1) if dt >= 1.0 else None

        tl = self.tally
        recent = tl.ttft[self._ttft_seen:]  # TTFTs of the streams completed since last time
        self._ttft_seen = len(tl.ttft)
        sample = {
            "t": round(now - self.begin, 3), "phase": phase,
            "rss_mib": round(sum(procs.rss_mib(p) for p in pids), 2),
            "fds": open_fds(pids), "pids": len(pids),
            "gateway_cpu_pct": rate(gw_cpu, gw0),
            "driver_cpu_pct": rate(drv_cpu, drv0),
            "mock_cpu_pct": rate(mock_cpu, mock0),
            "others_pct": at_least_0(rate(busy - gw_cpu - drv_cpu - mock_cpu,
                                          busy0 - gw0 - drv0 - mock0)),
            "steal_pct": rate(steal, steal0),
            "driver_rss_mib": round(procs.rss_mib(os.getpid()), 2),
            "completed": tl.completed, "streams_per_s": rate(done, done0, 1),
            "errors": tl.error_count, "in_flight": tl.in_flight,
            **{f"ttft_{k}": v for k, v in percentiles(recent).items()},
        }
        self.samples.append(sample)
        print(progress_line(sample), flush=True)
        return sample

    async def every(self, interval: float, phase: dict[str, str]) -> None:
        """A sample every ``interval`` s from ``begin``, tagged with ``phase["now"]``."""
        n = 1
        while True:
            await asyncio.sleep(max(0.0, self.begin + n * interval - clock()))
            self.take(phase["now"])
            n += 1


def at_least_0(v: float | None) -> float | None:
    """Differences of tick-rounded CPU times can come out a little below 0."""
    return None if v is None else max(0.0, v)


def progress_line(s: dict[str, Any]) -> str:
    def f(v: float | None, spec: str) -> str:
        return format(v, spec) if v is not None else format("-", spec[0] + "s")

    return (f"[{s['t']:7.1f}s {s['phase']:<14}] done {s['completed']:>8} "
            f"({f(s['streams_per_s'], '6.0f')}/s) err {s['errors']:<4} "
            f"open {s['in_flight']:>4} ttft p99 {f(s['ttft_p99_ms'], '6.1f')} ms | "
            f"gateway rss {s['rss_mib']:7.1f} MiB "
            f"fds {s['fds']:>5} cpu {f(s['gateway_cpu_pct'], '5.1f')}% | "
            f"driver {f(s['driver_cpu_pct'], '5.1f')}% mock {f(s['mock_cpu_pct'], '5.1f')}% "
            f"others {f(s['others_pct'], '5.1f')}%")


def slope_mib_per_min(samples: list[dict[str, Any]]) -> float | None:
    """Least-squares slope of RSS over time."""
    if len(samples) < 3:
        return None
    ts = [float(s["t"]) for s in samples]
    rs = [float(s["rss_mib"]) for s in samples]
    mt, mr = sum(ts) / len(ts), sum(rs) / len(rs)
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return None
    return round(60 * sum((t - mt) * (r - mr) for t, r in zip(ts, rs, strict=True)) / var, 3)


# --- /metrics ------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_values(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            with contextlib.suppress(ValueError):
                out.append((dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


def metrics_summary(text: str) -> dict[str, Any]:
    by_status: Counter[str] = Counter()
    for labels, v in metric_values(text, "gateway_requests_total"):
        by_status[labels.get("status", "?")] += int(v)
    ttft = procs.histogram(text, "gateway_time_to_first_token_seconds")

    def total(name: str) -> float:
        return sum(v for _, v in metric_values(text, name))

    def ms(q: float) -> float | None:
        v = procs.histogram_quantile(ttft, q)
        return round(1e3 * v, 2) if v is not None else None

    return {
        "requests_total": sum(by_status.values()),
        "requests_by_status": dict(by_status),
        "inflight": total("gateway_inflight_requests"),
        "upstream_errors_total": total("gateway_upstream_errors_total"),
        "client_disconnects_total": total("gateway_client_disconnects_total"),
        "ttft_count": ttft["count"],
        "ttft_p50_ms": ms(0.5),
        "ttft_p99_ms": ms(0.99),
    }


async def fetch_metrics(port: int) -> dict[str, Any] | None:
    try:
        async with ClientSession(timeout=ClientTimeout(total=10)) as s, \
                s.get(f"http://127.0.0.1:{port}/metrics") as r:
            return metrics_summary(await r.text()) if r.status == 200 else None
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None


# --- the run -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Control:
    """The load's stop switch, and what a signal does: stop the load once, tear down twice."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    interrupted: bool = False
    loading: bool = False

    def on_signal(self, main: asyncio.Task[Any]) -> None:
        if self.loading and not self.stop.is_set():
            self.interrupted = True
            print("\ninterrupted: stopping the load, draining, reporting "
                  "(again to abort)", file=sys.stderr, flush=True)
            self.stop.set()
        else:
            main.cancel()

    async def sleep(self, seconds: float) -> None:
        """``seconds``, or until the load is stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), max(0.0, seconds))


async def watch(gw: procs.Proc, control: Control, tally: Tally) -> None:
    """Stop the load if the gateway dies."""
    while not control.stop.is_set():
        if not gw.alive():
            tally.error("gateway-died", f"exit {gw.popen.returncode}: {gw.log_tail(5)}")
            control.stop.set()
            return
        await asyncio.sleep(0.5)


async def load(a: argparse.Namespace, s: Stream, gw: procs.Proc, port: int, mock: procs.Proc,
               cores: list[int], control: Control) -> tuple[Tally, Sampler, dict[str, Any]]:
    """Warm-up, measured load, drain, close: the samples at each edge, named in ``marks``."""
    tally = Tally()
    n = a.streams
    connector = TCPConnector(limit=n, limit_per_host=n, ttl_dns_cache=None)
    session = ClientSession(connector=connector, timeout=ClientTimeout(total=a.request_timeout),
                            auto_decompress=False, skip_auto_headers=("User-Agent",))
    begin = clock()
    sampler = Sampler(gw, mock, tally, begin, cores)
    marks: dict[str, Any] = {"idle": sampler.take("idle")}
    phase = {"now": "warmup"}
    ramp = min(5.0, a.warmup / 2)
    control.loading = True
    clients = [asyncio.create_task(client(session, s, tally, control.stop, ramp * i / n))
               for i in range(n)]
    background = [asyncio.create_task(sampler.every(a.sample_every, phase)),
                  asyncio.create_task(watch(gw, control, tally))]
    try:
        await control.sleep(a.warmup)
        tally.soak_start = clock()
        marks["soak_start_t"] = round(tally.soak_start - begin, 3)
        phase["now"] = "soak"
        marks["baseline"] = sampler.take("warmup-end")
        marks["counters_soak_start"] = sampler.counters()
        await control.sleep(a.minutes * 60)
        marks["counters_soak_end"] = sampler.counters()
        marks["soak_end_t"] = round(clock() - begin, 3)
        marks["loaded_end"] = sampler.take("load-end")
        control.stop.set()
        phase["now"] = "drain"
        drained = True
        try:
            async with asyncio.timeout(a.request_timeout + 10):
                await asyncio.gather(*clients)
        except TimeoutError:
            drained = False
        marks["drained_ok"] = drained
        marks["drained"] = sampler.take("drained")
        marks["metrics"] = await fetch_metrics(port)
    finally:
        control.loading = False
        control.stop.set()
        for t in (*clients, *background):
            t.cancel()
        await asyncio.gather(*clients, *background, return_exceptions=True)
        await session.close()
    await asyncio.sleep(a.settle)
    marks["closed"] = sampler.take("clients-closed")
    return tally, sampler, marks


def percentiles(values: array[float]) -> dict[str, float | None]:
    xs = sorted(values)
    return {f"p{int(q * 100)}_ms": round(driver.pct(xs, q) * 1e3, 2) if xs else None
            for q in (0.5, 0.99)}


def summarize(a: argparse.Namespace, tally: Tally, sampler: Sampler,
              marks: dict[str, Any], interrupted: bool) -> dict[str, Any]:
    soak_s = marks.get("soak_end_t", sampler.samples[-1]["t"]) - marks.get("soak_start_t", 0.0)
    samples = sampler.samples
    loaded = [x for x in samples if x["phase"] in ("soak", "warmup-end", "load-end")]
    base = marks.get("baseline")
    ends = [marks[k] for k in ("loaded_end", "drained") if k in marks]
    limit = base["rss_mib"] * (1 + a.rss_tolerance) if base else None
    rss_ok = bool(base and ends and all(e["rss_mib"] <= limit for e in ends))
    metrics = marks.get("metrics") or {}
    correct = tally.error_count == 0 and tally.completed > 0
    cpu: list[float] = []  # % of one core over the measured load: gateway, driver, mock,
    if "counters_soak_end" in marks:  # others (busy time not ours) and steal on the cores
        (t0, *c0, _), (t1, *c1, _) = marks["counters_soak_start"], marks["counters_soak_end"]
        d = [y - x for x, y in zip(c0, c1, strict=True)]
        d[3] = max(0.0, d[3] - d[0] - d[1] - d[2])  # ticks are rounded: keep it at 0 or more
        cpu = [round(100 * x / (t1 - t0), 1) for x in d]
    return {
        "streams": a.streams,
        "soak_seconds": round(soak_s, 1),
        "started": tally.started,
        "completed": tally.completed,
        "completed_after_warmup": tally.completed_after_warmup,
        "streams_per_s": round(tally.completed_after_warmup / soak_s, 1) if soak_s > 0 else None,
        "body_mib": round(tally.body_bytes / 2**20, 1),
        "errors": tally.error_count,
        "errors_by_kind": dict(tally.errors),
        "error_examples": tally.examples,
        "ttft": percentiles(tally.ttft),
        "ttfb": percentiles(tally.ttfb),
        "stream_duration": percentiles(tally.duration),
        "stream_duration_floor_ms": round(
            a.frame_delay_ms * len(wire.stream_frames(a.pair[1], a.chunks)), 1),
        "gateway_cpu_pct": cpu[0] if cpu else None,
        "driver_cpu_pct": cpu[1] if cpu else None,
        "mock_cpu_pct": cpu[2] if cpu else None,
        "others_pct": cpu[3] if cpu else None,
        "steal_pct": cpu[4] if cpu else None,
        "cores": sampler.cores,
        "rss_idle_mib": marks["idle"]["rss_mib"],
        "rss_baseline_mib": base["rss_mib"] if base else None,
        "rss_end_loaded_mib": marks["loaded_end"]["rss_mib"] if "loaded_end" in marks else None,
        "rss_end_drained_mib": marks["drained"]["rss_mib"] if "drained" in marks else None,
        "rss_closed_mib": marks["closed"]["rss_mib"],
        "rss_max_mib": max(x["rss_mib"] for x in samples),
        "rss_ratio_end": round(max(e["rss_mib"] for e in ends) / base["rss_mib"], 4)
        if base and ends else None,
        "rss_slope_mib_per_min": slope_mib_per_min(loaded),
        "rss_slope_2nd_half_mib_per_min": slope_mib_per_min(loaded[len(loaded) // 2:]),
        "fds_idle": marks["idle"]["fds"],
        "fds_baseline": base["fds"] if base else None,
        "fds_max": max(x["fds"] for x in samples),
        "fds_drained": marks["drained"]["fds"] if "drained" in marks else None,
        "fds_closed": marks["closed"]["fds"],
        "drained_in_time": marks.get("drained_ok"),
        "gateway_metrics": metrics,
        "check_correct": correct,
        "check_rss": rss_ok,
        "interrupted": interrupted,
    }


def report(a: argparse.Namespace, r: dict[str, Any]) -> list[str]:
    def ms(d: dict[str, Any]) -> str:
        if d["p50_ms"] is None:
            return "n/a"
        return f"p50 {d['p50_ms']:.1f} ms, p99 {d['p99_ms']:.1f} ms"

    m = r["gateway_metrics"]
    lines = [
        f"pair {a.pair[0]}:{a.pair[1]}, {a.streams} streams, {a.chunks} chunks, "
        f"{a.frame_delay_ms:g} ms per frame; warm-up {a.warmup:g} s, load {r['soak_seconds']} s"
        + (" (INTERRUPTED)" if r["interrupted"] else ""),
        f"streams completed  {r['completed']} ({r['completed_after_warmup']} after warm-up, "
        f"{r['streams_per_s']}/s); started {r['started']}; body {r['body_mib']} MiB",
        f"errors             {r['errors']}"
        + (f"  {r['errors_by_kind']}" if r["errors"] else ""),
    ]
    for kind, examples in r["error_examples"].items():
        lines += [f"    {kind}: {e}" for e in examples[:2]]
    lines += [
        f"TTFT (first text)  {ms(r['ttft'])}",
        f"TTFB (first byte)  {ms(r['ttfb'])}",
        f"stream duration    {ms(r['stream_duration'])} (frames x delay = "
        f"{r['stream_duration_floor_ms']} ms)",
        f"CPU (% of a core)  gateway {r['gateway_cpu_pct']}%, driver {r['driver_cpu_pct']}%, "
        f"mock {r['mock_cpu_pct']}%; on cores {r['cores']}: others {r['others_pct']}%, "
        f"steal {r['steal_pct']}% (over the load after warm-up)",
        f"RSS                idle {r['rss_idle_mib']:.1f} MiB, after warm-up "
        f"{r['rss_baseline_mib']} MiB, end of load {r['rss_end_loaded_mib']} MiB, "
        f"after drain {r['rss_end_drained_mib']} MiB, max {r['rss_max_mib']:.1f} MiB; "
        f"end / warm-up {r['rss_ratio_end']}; slope {r['rss_slope_mib_per_min']} MiB/min "
        f"(2nd half {r['rss_slope_2nd_half_mib_per_min']}); "
        f"clients closed {r['rss_closed_mib']:.1f} MiB",
        f"open fds           idle {r['fds_idle']}, after warm-up {r['fds_baseline']}, max "
        f"{r['fds_max']}, after drain {r['fds_drained']}, clients closed {r['fds_closed']}",
    ]
    if m:
        lines.append(
            f"gateway /metrics   requests_total {m['requests_total']} {m['requests_by_status']}"
            f" (driver sent {r['started']}); inflight {m['inflight']:g}; upstream errors "
            f"{m['upstream_errors_total']:g}; client disconnects "
            f"{m['client_disconnects_total']:g}; its TTFT p50 {m['ttft_p50_ms']} ms, "
            f"p99 {m['ttft_p99_ms']} ms (all streams; interpolated in its buckets, coarse)")
        if m["inflight"] != 0:
            lines.append("WARNING: gateway_inflight_requests is not 0 after the drain")
    else:
        lines.append("gateway /metrics   (could not be fetched)")
    if not r["drained_in_time"]:
        lines.append("WARNING: streams still open after --request-timeout + 10 s of drain")
    lines += [
        f"(a) every stream complete and byte-exact: "
        f"{'PASS' if r['check_correct'] else 'FAIL'} ({r['completed']} streams, "
        f"{r['errors']} errors)",
        f"(b) RSS at the end <= {1 + a.rss_tolerance:.2f} x after warm-up: "
        f"{'PASS' if r['check_rss'] else 'FAIL'} (ratio {r['rss_ratio_end']})",
    ]
    return lines


async def amain(a: argparse.Namespace) -> int:
    split = procs.split_cores(a.no_pin)
    cpus, pin, server_cpus, gen_cpus = split.usable, split.pinned, split.server, split.generator
    client_d, upstream_d = a.pair
    mock_port = procs.free_port()
    # run.py's config: the "paced" routes go to its paced mock port, here the only one.
    ports = run.Ports(mock=mock_port, paced=mock_port, pt=0, pt_paced=0, gw=procs.free_port())
    path = wire.stream_path(client_d, run.route_path(True, client_d, upstream_d))
    stream = make_stream(f"http://127.0.0.1:{ports.gw}{path}", client_d, a.chunks)
    control = Control()
    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, control.on_signal, main)
    started = time.time()
    print(f"soak: {a.streams} streams of {client_d} -> gateway -> {upstream_d} at {path}, "
          f"{a.frame_delay_ms:g} ms per frame; warm-up {a.warmup:g} s, then {a.minutes:g} min; "
          f"pinning: "
          + (f"gateway on {sorted(server_cpus or [])}, driver and mock on {sorted(gen_cpus)}"
             if gen_cpus else "off"), flush=True)
    running: list[procs.Proc] = []
    log_tail = ""
    with tempfile.TemporaryDirectory(prefix="gateway-soak-") as tmpname:
        tmp = Path(tmpname)
        try:
            mock = procs.Proc("mock", [sys.executable, str(HERE / "mock.py"), "--chunks",
                                       str(a.chunks), "--listen",
                                       f"{mock_port}:{a.frame_delay_ms}"],
                              gen_cpus, tmp / "mock.log")
            running.append(mock)
            await procs.wait_ready(mock, f"http://127.0.0.1:{mock_port}/", 15)
            gw = await run.start_gateway(a, tmp, ports, server_cpus, 1)
            running.append(gw)
            await asyncio.sleep(1.0)
            cores = cpus[:2] if pin else cpus
            tally, sampler, marks = await load(a, stream, gw, ports.gw, mock, cores, control)
            log_tail = gw.log_tail(50)
        finally:
            for p in reversed(running):
                p.stop()

    r = summarize(a, tally, sampler, marks, control.interrupted)
    lines = report(a, r)
    print()
    print("\n".join(lines))
    out = a.out or HERE / "results" / time.strftime("soak-%Y%m%d-%H%M%S.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "elapsed_s": round(time.time() - started, 1),
        "git": run.git_rev(),
        "machine": {"cpus": os.cpu_count(), "usable_cpus": cpus, "pinned": pin,
                    "python": platform.python_version(), "platform": platform.platform()},
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "url": str(stream.url),
        "summary": r,
        "report": lines,
        "samples": sampler.samples,
        "gateway_log_tail": log_tail.splitlines(),
    }, indent=1, default=str))
    print(f"\nJSON: {out}")
    if control.interrupted:
        return 2
    return 0 if r["check_correct"] and r["check_rss"] else 1


def main() -> None:
    a = parse_args()
    try:
        code = asyncio.run(amain(a))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("aborted", file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
