"""The gateway benchmark: one command, one table, one JSON file.

    python bench/run.py            # the full run (~1 hour with the defaults; see --help)
    python bench/run.py --quick    # a smoke run: 2 s runs, 1 repetition, every dialect once
                                   # as client and once as upstream

Starts, on 127.0.0.1 and on free ports: a mock upstream serving every dialect (bench/mock.py;
one port answering at once, one with a per-frame delay for the TTFB measurements), a pass-through
aiohttp proxy to each of those ports (bench/passthrough.py), and the gateway with one route per
(client dialect, upstream dialect) pair. The gateway and the pass-throughs run on the same event
loop (``--loop``, uvloop by default), so that a ratio is not the loop's. The gateway and the
pass-through proxies are pinned to core 0, this driver and the mock to core 1. Then, for each
repetition, every configuration in turn: direct to the mock, through the pass-through, through
the gateway, whole and streamed, at each concurrency. Figures are medians over the
repetitions; ratios compare figures of this one run. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

try:
    import driver
    import procs
    import wire
    from aiohttp import ClientSession, ClientTimeout
    from procs import fmt
except ImportError as e:  # pragma: no cover - a fresh clone without the venv
    sys.exit(f"bench/run.py needs the project's dependencies ({e}): run `make bench` (it sets "
             "up .venv), or `.venv/bin/python bench/run.py` once .venv exists")

ALL = list(wire.DIALECTS)
QUICK_PAIRS = ",".join(f"{c}:{u}" for c, u in wire.default_pairs(quick=True))
"""The first dialect's identity pair, and a ring in which every dialect is client and upstream
once (from the registry, through bench/wire/)."""


@dataclass(frozen=True, slots=True)
class Spec:
    scenario: str
    """load (closed loop, as fast as it goes), paced (per-frame delay: TTFB), workers."""
    concurrency: int
    mode: str
    """whole or stream."""
    kind: str
    """direct, passthrough, lfl (the like-for-like pass-through), gateway, gateway-wN."""
    client: str
    upstream: str

    @property
    def key(self) -> str:
        return "|".join([self.scenario, str(self.concurrency), self.mode, self.kind,
                         self.client, self.upstream])

    @property
    def label(self) -> str:
        if self.kind in ("direct", "passthrough"):
            return f"{self.kind} {self.upstream}"
        if self.kind == "lfl":
            return f"like-for-like pt {self.upstream}"
        suffix = " (identity)" if self.client == self.upstream else ""
        name = "gateway" if self.kind == "gateway" else f"gateway x{self.kind[9:]}"
        return f"{name} {self.client}/{self.upstream}{suffix}"


# --- arguments -----------------------------------------------------------------------------------


def parse_pairs(text: str) -> list[tuple[str, str]]:
    if text == "all":
        return [(c, u) for c in ALL for u in ALL]
    out = []
    for item in text.split(","):
        c, sep, u = item.strip().partition(":")
        if not sep:
            raise argparse.ArgumentTypeError(f"{item!r}: expected CLIENT:UPSTREAM")
        try:
            out.append((wire.short(c), wire.short(u)))
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return out


def parse_cpus(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def parse_ints(text: str) -> list[int]:
    return [] if text == "none" else [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark the gateway against a pass-through proxy and the bare mock.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: --duration 2 --warmup 0.5 --repetitions 1 "
                        f"--pairs {QUICK_PAIRS}")
    p.add_argument("--duration", type=float, default=None, help="measured seconds per run [10]")
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds of load before each measured window [1]")
    p.add_argument("--repetitions", type=int, default=None, help="runs per configuration [3]")
    p.add_argument("--concurrency", type=parse_ints, default=[32, 128],
                   help="comma-separated concurrency levels of the load runs ('none': only "
                        "the paced runs)")
    p.add_argument("--pairs", type=parse_pairs, default=None,
                   help=f"CLIENT:UPSTREAM,... ({', '.join(ALL)}) or 'all' [all]")
    p.add_argument("--modes", default="whole,stream", help="whole, stream or both")
    p.add_argument("--chunks", type=int, default=20, help="text chunks per answer")
    p.add_argument("--paced-delay-ms", type=float, default=10.0,
                   help="mock delay before each stream frame in the TTFB (paced) runs")
    p.add_argument("--ttfb-concurrency", type=int, default=32,
                   help="concurrent streams of the paced runs (0: no paced runs)")
    p.add_argument("--no-direct", action="store_true", help="skip the direct-to-mock runs")
    p.add_argument("--workers-pair", type=parse_pairs, default=None,
                   help="CLIENT:UPSTREAM streamed at the highest concurrency with --workers 1 "
                        "and 2 (default: the first translating pair)")
    p.add_argument("--no-workers", action="store_true", help="skip the --workers run")
    p.add_argument("--workers", type=int, default=2,
                   help="gateway worker processes of the workers run (compared with one)")
    p.add_argument("--server-cpus", type=parse_cpus, default=None,
                   help="cores of the servers under test, e.g. 0-7 (default: the first usable "
                        "core; the workers run: the first --workers cores)")
    p.add_argument("--generator-cpus", type=parse_cpus, default=None,
                   help="cores of this driver and the mock, e.g. 8-15 (default: the second "
                        "usable core)")
    p.add_argument("--no-lfl", action="store_true",
                   help="skip the like-for-like pass-through (bench/passthrough_fast.py)")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                   help="the event loop of the gateway and of both pass-through proxies (the "
                        "same for all three: the yardstick runs on the gateway's loop)")
    p.add_argument("--gateway-cmd", default=None,
                   help="command that starts the gateway (before 'serve --config ...')")
    p.add_argument("--no-gateway", action="store_true", help="only direct and pass-through")
    p.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    p.add_argument("--request-timeout", type=float, default=30.0)
    p.add_argument("--generator", choices=driver.GENERATORS, default="lean",
                   help="the load generator, the driver's client and the mock's server: lean "
                        "(httptools, on uvloop) or aiohttp (a ClientSession and aiohttp's "
                        "low-level server, on asyncio's loop, whose ceiling on two cores is the "
                        "generator's core)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON results file [bench/results/run-<time>.json]")
    a = p.parse_args(argv)
    quick = {"duration": 2.0, "warmup": 0.5, "repetitions": 1,
             "pairs": parse_pairs(QUICK_PAIRS)}
    if a.workers < 2:
        p.error("--workers: at least 2 (the run compares them with one worker)")
    full = {"duration": 10.0, "warmup": 1.0, "repetitions": 3, "pairs": parse_pairs("all")}
    for k, v in (quick if a.quick else full).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not set(a.modes) <= {"whole", "stream"} or not a.modes:
        p.error("--modes takes whole, stream or whole,stream")
    if a.repetitions < 1 or a.duration <= 0 or a.warmup < 0:
        p.error("--repetitions >= 1, --duration > 0 and --warmup >= 0, please")
    if not a.concurrency and a.ttfb_concurrency <= 0:
        p.error("nothing to run: --concurrency none and --ttfb-concurrency 0")
    return a


# --- the plan ------------------------------------------------------------------------------------


def plan(a: argparse.Namespace, gateway: bool, ncpus: int) -> tuple[list[Spec], Spec | None]:
    """The configurations run each repetition, and the --workers 2 run (if any)."""
    upstreams = sorted({u for _, u in a.pairs}, key=ALL.index)

    def group(scenario: str, conc: int, mode: str) -> list[Spec]:
        # Each upstream's baselines right before the gateway routes to it, so that drift of a
        # shared machine between a ratio's two terms is as short as it can be.
        out = []
        for u in upstreams:
            if not a.no_direct:
                out.append(Spec(scenario, conc, mode, "direct", u, u))
            out.append(Spec(scenario, conc, mode, "passthrough", u, u))
            if not a.no_lfl:
                out.append(Spec(scenario, conc, mode, "lfl", u, u))
            if gateway:
                out.extend(Spec(scenario, conc, mode, "gateway", c, up)
                           for c, up in a.pairs if up == u)
        return out

    specs: list[Spec] = []
    for conc in a.concurrency:
        for mode in a.modes:
            specs.extend(group("load", conc, mode))
    if a.ttfb_concurrency > 0:
        specs.extend(group("paced", a.ttfb_concurrency, "stream"))
    w2 = None
    if gateway and not a.no_workers and ncpus >= 2:
        wkind = f"gateway-w{a.workers}"
        pairs = a.workers_pair or [p for p in a.pairs if p[0] != p[1]] or a.pairs
        c, u = pairs[0]
        conc = max(a.concurrency or [128])
        one = Spec("load", conc, "stream", "gateway", c, u)
        if one not in specs:
            specs.append(Spec("workers", conc, "stream", "gateway", c, u))
        w2 = Spec("workers", conc, "stream", wkind, c, u)
    return specs, w2


# --- processes -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Ports:
    mock: int
    paced: int
    pt: int
    pt_paced: int
    gw: int
    lfl: int = 0
    lfl_paced: int = 0


def gateway_config(ports: Ports) -> dict[str, Any]:
    upstreams: dict[str, Any] = {}
    routes: list[dict[str, Any]] = []
    for prefix, port in (("", ports.mock), ("paced-", ports.paced)):
        for d in ALL:
            up: dict[str, Any] = {"dialect": wire.DIALECTS[d],
                                  "url": f"http://127.0.0.1:{port}{wire.MOCK_PATHS[d]}",
                                  **wire.upstream_extra(d)}
            upstreams[f"{prefix}up-{d}"] = up
        for c in ALL:
            for u in ALL:
                routes.append({"path": route_path(prefix != "", c, u),
                               "dialect": wire.DIALECTS[c], "upstream": f"{prefix}up-{u}"})
    return {"server": {"host": "127.0.0.1", "port": ports.gw},
            "logging": {"level": "warning"}, "upstreams": upstreams, "routes": routes}


def route_path(paced: bool, client: str, upstream: str) -> str:
    return f"{'/paced' if paced else ''}/c/{client}/u/{upstream}"


def target_for(spec: Spec, ports: Ports, text: str) -> driver.Target:
    stream = spec.mode == "stream"
    paced = spec.scenario == "paced"
    if spec.kind == "direct":
        base, path = (ports.paced if paced else ports.mock), wire.MOCK_PATHS[spec.upstream]
    elif spec.kind == "passthrough":
        base, path = (ports.pt_paced if paced else ports.pt), wire.MOCK_PATHS[spec.upstream]
    elif spec.kind == "lfl":
        base, path = (ports.lfl_paced if paced else ports.lfl), wire.MOCK_PATHS[spec.upstream]
    else:
        base, path = ports.gw, route_path(paced, spec.client, spec.upstream)
    path = wire.stream_path(spec.client, path) if stream else wire.whole_path(spec.client, path)
    return driver.Target(f"http://127.0.0.1:{base}{path}", spec.client, stream, text)


def gateway_command(a: argparse.Namespace) -> list[str]:
    if a.gateway_cmd:
        return a.gateway_cmd.split()
    script = Path(sys.executable).parent / "chat-gateway"
    if script.exists():
        return [str(script)]
    found = shutil.which("chat-gateway")
    return [found] if found else [sys.executable, "-m", "gateway"]


async def start_gateway(a: argparse.Namespace, tmp: Path, ports: Ports, cpus: set[int] | None,
                        workers: int, server: dict[str, str] | None = None) -> procs.Proc:
    """The gateway on the bench's config, ``server`` settings added (``bench/ab.py --a-server``)."""
    config = tmp / "gateway.yaml"
    settings = gateway_config(ports)
    settings["server"].update(server or {})
    config.write_text(json.dumps(settings, indent=1))  # JSON is YAML
    cmd = [*gateway_command(a), "serve", "--config", str(config), "--host", "127.0.0.1",
           "--port", str(ports.gw)]
    # bench/soak.py starts the gateway through here with arguments of its own and no --loop:
    # then the gateway picks its own (auto), as a deployment would.
    if loop := getattr(a, "loop", None):
        cmd += ["--loop", loop]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    gw = procs.Proc(f"gateway (workers={workers})", cmd, cpus, tmp / f"gateway-w{workers}.log",
                    env)
    try:
        await procs.wait_ready(gw, f"http://127.0.0.1:{ports.gw}/healthz", 30)
    except RuntimeError:
        gw.stop()
        raise
    return gw


async def scrape(session: ClientSession, port: int) -> dict[str, Any] | None:
    try:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as r:
            if r.status != 200:
                return None
            return procs.histogram(await r.text(), "gateway_overhead_seconds")
    except (OSError, TimeoutError):
        return None


# --- one run -------------------------------------------------------------------------------------


async def measure(spec: Spec, a: argparse.Namespace, ports: Ports, server: procs.Proc | None,
                  generator_pids: list[int], cores: list[int], text: str) -> dict[str, Any]:
    """One run of one configuration. ``cores``: [server core, generator core] when pinned."""
    target = target_for(spec, ports, text)
    pids = server.pids() if server else []
    sampler = procs.RssSampler(pids) if pids else None
    marks: dict[str, Any] = {}
    metrics = ClientSession(timeout=ClientTimeout(total=5))
    is_gw = spec.kind.startswith("gateway")

    async def on_start() -> None:
        if is_gw:
            marks["hist0"] = await scrape(metrics, ports.gw)
        marks["cpu0"] = procs.cpu_split(pids)
        marks["gen0"] = procs.cpu_seconds(generator_pids)
        marks["cores0"] = [procs.core_times(c) for c in cores]
        marks["t0"] = time.perf_counter()

    async def on_end() -> None:
        marks["cpu1"] = procs.cpu_split(pids)
        marks["gen1"] = procs.cpu_seconds(generator_pids)
        marks["cores1"] = [procs.core_times(c) for c in cores]
        marks["t1"] = time.perf_counter()

    if sampler:
        sampler.start()
    try:
        result = await driver.run_load(
            target, concurrency=spec.concurrency, warmup=a.warmup, duration=a.duration,
            request_timeout=a.request_timeout, on_start=on_start, on_end=on_end,
            client=a.generator)
        if is_gw:
            marks["hist1"] = await scrape(metrics, ports.gw)
    finally:
        if sampler:
            await sampler.stop()
        await metrics.close()
    out = result.summary()
    wall = marks["t1"] - marks["t0"]
    out["generator_cpu_pct"] = 100 * (marks["gen1"] - marks["gen0"]) / wall
    for i, ((b0, s0), (b1, s1)) in enumerate(zip(marks["cores0"], marks["cores1"], strict=True)):
        out[f"core{i}_busy_pct"] = 100 * (b1 - b0) / wall
        out[f"core{i}_steal_pct"] = 100 * (s1 - s0) / wall
    if server:
        (user0, sys0), (user1, sys1) = marks["cpu0"], marks["cpu1"]
        cpu = (user1 - user0) + (sys1 - sys0)
        out["server_cpu_pct"] = 100 * cpu / wall
        if "core0_busy_pct" in out and not spec.kind.startswith("gateway-w"):
            out["others_on_server_core_pct"] = max(
                0.0, out["core0_busy_pct"] - out["server_cpu_pct"])
        out["cpu_ms_per_req"] = 1e3 * cpu / result.requests if result.requests else None
        # The kernel's share: a proxy's socket reads and writes are system time, its parsing
        # and framing user time. It tells whether a ratio moves with the bytes or the code.
        out["sys_cpu_ms_per_req"] = (
            1e3 * (sys1 - sys0) / result.requests if result.requests else None)
        out["rss_peak_mib"] = sampler.peak_one if sampler else None
        out["rss_peak_sum_mib"] = sampler.peak_sum if sampler else None
    h0, h1 = marks.get("hist0"), marks.get("hist1")
    if h0 and h1:
        d = procs.histogram_delta(h0, h1)
        if d["count"] > 0:
            out["overhead_count"] = d["count"]
            out["overhead_mean_us"] = 1e6 * d["sum"] / d["count"]
            p50, p99 = procs.histogram_quantile(d, 0.5), procs.histogram_quantile(d, 0.99)
            out["overhead_p50_us"] = 1e6 * p50 if p50 is not None else None
            out["overhead_p99_us"] = 1e6 * p99 if p99 is not None else None
            out["overhead_buckets"] = {("+Inf" if b == math.inf else repr(b)): v
                                       for b, v in d["buckets"].items()}
    return out


# --- reporting -----------------------------------------------------------------------------------

FIGURES = ("rps", "p50_ms", "p99_ms", "ttfb_p50_ms", "ttfb_p99_ms", "cpu_ms_per_req",
           "server_cpu_pct", "generator_cpu_pct", "core0_busy_pct", "core1_busy_pct",
           "core0_steal_pct", "core1_steal_pct", "others_on_server_core_pct",
           "rss_peak_mib", "rss_peak_sum_mib",
           "overhead_mean_us", "overhead_p50_us", "overhead_p99_us")


def baseline(summary: dict[Spec, dict[str, Any]], spec: Spec,
             kind: str = "passthrough") -> dict[str, Any] | None:
    """The pass-through's figures (``kind="lfl"``: the like-for-like one's) for ``spec``."""
    return summary.get(Spec(spec.scenario if spec.scenario != "workers" else "load",
                            spec.concurrency, spec.mode, kind, spec.upstream, spec.upstream))


# (target, limit): each judged on figures of one run, against the pass-through on the gateway's
# own loop (docs/performance.md, "Targets").
THROUGHPUT = {("identity", "whole"): 0.65, ("identity", "stream"): 0.8,
              ("translating", "whole"): 0.65, ("translating", "stream"): 0.8}
LFL_AIM = 0.7
TTFB_ADDED_MS = {"50": 0.5, "99": 5.0}
RSS_LIMIT_MIB = 80.0
WORKERS_SCALE = 1.7


LEGEND = """\
x pt: req/s over the pass-through's to the same upstream (same scenario, concurrency, mode).
x lfl: the same over the like-for-like pass-through's (bench/passthrough_fast.py: the gateway's
  upstream client on the same loop, so that only the gateway's own work differs).
p50ms/p99ms: request start to last byte; ttfb50/ttfb99: to the first body byte (streams).
err: errors over all repetitions (non-200, transport error, or text that does not reassemble).
ovh us: the gateway's gateway_overhead_seconds histogram over the window (mean; p50/p99
  interpolated in its buckets). cpu ms/req: server CPU (utime+stime, all its processes) per
  request. srv%: server CPU; c0%: core 0 busy (any process, interrupts, steal); gen%: driver +
  mock CPU; c1%: core 1 busy. c0% well above srv% means someone else used the server's core.
rss MiB: peak VmRSS of one server process, sampled every 100 ms during the run."""


def print_table(summary: dict[Spec, dict[str, Any]]) -> list[str]:
    head = (f"{'scenario':8} {'conc':>4} {'mode':6} {'configuration':34} {'req/s':>7} "
            f"{'x pt':>5} {'x lfl':>5} {'p50ms':>6} {'p99ms':>6} {'ttfb50':>6} {'ttfb99':>6} "
            f"{'err':>4} "
            f"{'ovh us mean/p50/p99':>19} {'cpu ms/req':>10} {'srv%':>4} {'c0%':>4} "
            f"{'gen%':>4} {'c1%':>4} {'rss MiB':>7}")
    lines = [head, "-" * len(head)]
    order = {"load": 0, "paced": 1, "workers": 2}
    kinds = {"direct": 0, "passthrough": 1, "lfl": 2, "gateway": 3}
    last = None
    for spec in sorted(summary, key=lambda s: (order[s.scenario], s.concurrency,
                                               s.mode != "whole", ALL.index(s.upstream),
                                               kinds.get(s.kind, 4), ALL.index(s.client))):
        s = summary[spec]
        group = (spec.scenario, spec.concurrency, spec.mode)
        if last is not None and group != last:
            lines.append("")
        last = group
        pt = baseline(summary, spec)
        ratio = s["rps"] / pt["rps"] if pt and pt.get("rps") and spec.kind != "passthrough" \
            else None
        lfl = baseline(summary, spec, "lfl")
        lfl_ratio = s["rps"] / lfl["rps"] if lfl and lfl.get("rps") and \
            spec.kind.startswith("gateway") else None
        ovh = "-"
        if s.get("overhead_mean_us") is not None:
            ovh = "/".join(fmt(s.get(k), 0) for k in
                           ("overhead_mean_us", "overhead_p50_us", "overhead_p99_us"))
        lines.append(
            f"{spec.scenario:8} {spec.concurrency:>4} {spec.mode:6} {spec.label:34} "
            f"{fmt(s.get('rps'), 0):>7} {fmt(ratio, 2):>5} {fmt(lfl_ratio, 2):>5} "
            f"{fmt(s.get('p50_ms')):>6} "
            f"{fmt(s.get('p99_ms')):>6} {fmt(s.get('ttfb_p50_ms')):>6} "
            f"{fmt(s.get('ttfb_p99_ms')):>6} {s['errors']:>4} {ovh:>19} "
            f"{fmt(s.get('cpu_ms_per_req'), 3):>10} {fmt(s.get('server_cpu_pct'), 0):>4} "
            f"{fmt(s.get('core0_busy_pct'), 0):>4} {fmt(s.get('generator_cpu_pct'), 0):>4} "
            f"{fmt(s.get('core1_busy_pct'), 0):>4} {fmt(s.get('rss_peak_mib')):>7}")
    return lines


@dataclass(slots=True)
class Check:
    target: str
    subject: str
    measured: str
    limit: str
    ok: bool | None
    note: str = ""
    cpu_estimate: str = ""
    """For throughput targets: pass-through CPU per request / gateway CPU per request, the ratio
    a CPU-bound server core would give (far less sensitive to a noisy machine)."""

    @property
    def verdict(self) -> str:
        return "n/a" if self.ok is None else ("PASS" if self.ok else "MISS")


def checks(summary: dict[Spec, dict[str, Any]], idle_rss: float | None,
           w2: Spec | None) -> list[Check]:
    out: list[Check] = []
    for spec, s in summary.items():
        if spec.kind != "gateway" or spec.scenario != "load":
            continue
        pt = baseline(summary, spec)
        if not pt or not pt.get("rps"):
            continue
        kind = "identity" if spec.client == spec.upstream else "translating"
        limit = THROUGHPUT[(kind, spec.mode)]
        ratio = s["rps"] / pt["rps"]
        note = f"{s['errors']} errors" if s["errors"] else ""
        cpu_gw, cpu_pt = s.get("cpu_ms_per_req"), pt.get("cpu_ms_per_req")
        estimate = f"{cpu_pt / cpu_gw:.2f}x" if cpu_gw and cpu_pt else ""
        subject = f"{spec.client}/{spec.upstream} c{spec.concurrency}"
        out.append(Check(f"{kind} {spec.mode} >= {limit}x pass-through", subject,
                         f"{ratio:.2f}x", f">= {limit}x", ratio >= limit and not s["errors"],
                         note, estimate))
        lfl = baseline(summary, spec, "lfl")
        if lfl and lfl.get("rps"):
            lratio = s["rps"] / lfl["rps"]
            cpu_l = lfl.get("cpu_ms_per_req")
            out.append(Check(f"like-for-like {spec.mode} >= {LFL_AIM}x (aim)", subject,
                             f"{lratio:.2f}x", f">= {LFL_AIM}x", lratio >= LFL_AIM,
                             note, f"{cpu_l / cpu_gw:.2f}x" if cpu_gw and cpu_l else ""))
    for spec, s in summary.items():
        if spec.kind != "gateway" or spec.scenario != "paced":
            continue
        pt = baseline(summary, spec)
        if not pt or pt.get("ttfb_p50_ms") is None or s.get("ttfb_p50_ms") is None:
            continue
        subject = f"{spec.client}/{spec.upstream} c{spec.concurrency}"
        for q, limit in TTFB_ADDED_MS.items():
            added = s[f"ttfb_p{q}_ms"] - pt[f"ttfb_p{q}_ms"]
            out.append(Check(f"TTFB added at p{q} <= {limit:g} ms", subject,
                             f"{added:+.2f} ms", f"<= {limit:g} ms",
                             added <= limit and not s["errors"],
                             f"{s['errors']} errors" if s["errors"] else ""))
    peaks = [(s["rss_peak_mib"], spec) for spec, s in summary.items()
             if spec.kind == "gateway" and spec.mode == "stream" and spec.concurrency >= 128
             and s.get("rss_peak_mib") is not None]
    if peaks:
        peak, spec = max(peaks, key=lambda x: x[0])
        out.append(Check(f"RSS under 128 streams < {RSS_LIMIT_MIB:g} MiB (1 worker)",
                         f"peak of {len(peaks)} runs ({spec.client}/{spec.upstream})",
                         f"{peak:.1f} MiB", f"< {RSS_LIMIT_MIB:g} MiB", peak < RSS_LIMIT_MIB,
                         f"idle {idle_rss:.1f} MiB" if idle_rss else ""))
    if w2 is not None and w2 in summary:
        one = summary.get(Spec("load", w2.concurrency, "stream", "gateway", w2.client,
                               w2.upstream)) or summary.get(
            Spec("workers", w2.concurrency, "stream", "gateway", w2.client, w2.upstream))
        many = summary[w2]
        n = int(w2.kind[9:])
        if one and one.get("rps"):
            ratio = many["rps"] / one["rps"]
            limit = WORKERS_SCALE * n / 2
            out.append(Check(f"--workers {n} ({n} cores) >= {limit:g}x one worker",
                             f"{w2.client}/{w2.upstream} stream c{w2.concurrency}",
                             f"{ratio:.2f}x", f">= {limit:g}x", ratio >= limit,
                             "caveat: load generator shares the cores" if n >= 2 and
                             many.get("core1_busy_pct") else ""))
    return out


def print_checks(rows: list[Check]) -> list[str]:
    head = (f"{'target':44} {'subject':34} {'measured':>10} {'limit':>10} {'result':6} "
            f"{'cpu est':>7} note")
    lines = [head, "-" * (len(head) + 10)]
    for r in sorted(rows, key=lambda r: (r.target, r.subject)):
        lines.append(f"{r.target:44} {r.subject:34} {r.measured:>10} {r.limit:>10} "
                     f"{r.verdict:6} {r.cpu_estimate:>7} {r.note}".rstrip())
    passed = sum(1 for r in rows if r.ok)
    missed = sum(1 for r in rows if r.ok is False)
    lines.append(f"{passed} PASS, {missed} MISS")
    lines.append("cpu est: pass-through CPU/request over the gateway's: the throughput ratio "
                 "if core 0 were the only limit (a cross-check when the machine is noisy).")
    return lines


# --- main ----------------------------------------------------------------------------------------


def git_rev() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                              capture_output=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


async def amain(a: argparse.Namespace) -> int:
    split = procs.split_cores(a.no_pin, a.server_cpus, a.generator_cpus)
    cpus, pin, server_cpus, gen_cpus = split.usable, split.pinned, split.server, split.generator
    # the cores whose busy time is reported (c0%, c1%): the server's first, the generator's first
    cores = [min(server_cpus), min(gen_cpus)] if pin and server_cpus and gen_cpus else []
    text = wire.answer_text(a.chunks)
    ports = Ports(*(procs.free_port() for _ in range(7)))
    py = sys.executable
    results: dict[str, Any] = {"runs": {}, "notes": []}
    started = time.time()
    idle: dict[str, float] = {}
    runs: dict[Spec, list[dict[str, Any]]] = {}
    w2: Spec | None = None
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmpname:
        tmp = Path(tmpname)
        running: list[procs.Proc] = []
        try:
            mock = procs.Proc("mock", [py, str(HERE / "mock.py"), "--chunks", str(a.chunks),
                                       "--server", a.generator,
                                       "--listen", str(ports.mock),
                                       "--listen", f"{ports.paced}:{a.paced_delay_ms}"],
                              gen_cpus, tmp / "mock.log")
            running.append(mock)
            scripts = [("passthrough", ports.pt, ports.mock),
                       ("passthrough", ports.pt_paced, ports.paced)]
            if not a.no_lfl:
                scripts += [("passthrough_fast", ports.lfl, ports.mock),
                            ("passthrough_fast", ports.lfl_paced, ports.paced)]
            pts = [procs.Proc(f"{script} {port}",
                              [py, str(HERE / f"{script}.py"), "--port", str(port),
                               "--upstream", f"http://127.0.0.1:{up}", "--loop", a.loop],
                              server_cpus, tmp / f"{script}-{port}.log")
                   for script, port, up in scripts]
            running.extend(pts)
            await procs.wait_ready(mock, f"http://127.0.0.1:{ports.mock}/", 15)
            await procs.wait_ready(mock, f"http://127.0.0.1:{ports.paced}/", 15)
            for pt, (_, port, _) in zip(pts, scripts, strict=True):
                await procs.wait_ready(pt, f"http://127.0.0.1:{port}/", 15)
            idle["passthrough"] = procs.rss_mib(pts[0].pid)
            if not a.no_lfl:
                idle["like-for-like"] = procs.rss_mib(pts[2].pid)

            gw: procs.Proc | None = None
            if not a.no_gateway:
                try:
                    gw = await start_gateway(a, tmp, ports, server_cpus, 1)
                    running.append(gw)
                    await asyncio.sleep(1.0)
                    idle["gateway"] = procs.rss_mib(gw.pid)
                except (RuntimeError, OSError) as e:
                    msg = f"gateway did not start; measuring without it: {e}"
                    print(msg, file=sys.stderr)
                    results["notes"].append(msg)
            specs, w2 = plan(a, gw is not None, len(cpus))
            per_run = a.warmup + a.duration + 0.3
            total = per_run * (len(specs) * a.repetitions + (a.repetitions if w2 else 0))
            print(f"{len(specs)} configurations x {a.repetitions} repetitions "
                  f"(+{1 if w2 else 0} --workers {a.workers}), about {total / 60:.1f} min; "
                  "pinning: "
                  f"{'servers on ' + str(sorted(server_cpus)) if pin else 'off'}"
                  f"{', driver and mock on ' + str(sorted(gen_cpus)) if pin else ''}",
                  flush=True)
            runs.update({s: [] for s in specs})
            gen_pids = [os.getpid(), mock.pid]
            for rep in range(a.repetitions):
                for i, spec in enumerate(specs, 1):
                    paced = spec.scenario == "paced"
                    server = {"direct": None,
                              "passthrough": pts[1] if paced else pts[0],
                              "lfl": pts[-1] if paced else pts[-2]}.get(spec.kind, gw)
                    r = await measure(spec, a, ports, server, gen_pids, cores, text)
                    runs[spec].append(r)
                    print(f"[rep {rep + 1}/{a.repetitions} {i:>3}/{len(specs)}] "
                          f"{spec.scenario} c{spec.concurrency} {spec.mode:6} {spec.label:34} "
                          f"{r['rps']:8.0f}/s err {r['errors']}"
                          + (f"  ({r['error_samples'][0][:80]})" if r["errors"] else ""),
                          flush=True)
            if gw is not None:
                idle["gateway_after_load"] = procs.rss_mib(gw.pid)
            if w2 is not None and gw is not None:
                gw.stop()
                running.remove(gw)
                try:
                    wcpus = (a.server_cpus or set(cpus[:a.workers])) if pin else None
                    gw2 = await start_gateway(a, tmp, ports, wcpus, a.workers)
                    running.append(gw2)
                    runs[w2] = []
                    for rep in range(a.repetitions):
                        r = await measure(w2, a, ports, gw2, gen_pids, cores, text)
                        runs[w2].append(r)
                        print(f"[workers {a.workers}, rep {rep + 1}] {w2.label} "
                              f"{r['rps']:8.0f}/s err {r['errors']}", flush=True)
                except (RuntimeError, OSError) as e:
                    msg = f"--workers {a.workers} gateway did not start: {e}"
                    print(msg, file=sys.stderr)
                    results["notes"].append(msg)
        finally:
            for p in reversed(running):
                p.stop()

    summary = {spec: procs.combine(rs, FIGURES) for spec, rs in runs.items() if rs}
    table = print_table(summary)
    rows = checks(summary, idle.get("gateway"), w2)
    targets = print_checks(rows)
    print()
    print("\n".join(table))
    print(LEGEND)
    print()
    print("RSS idle: " + ", ".join(f"{k} {v:.1f} MiB" for k, v in idle.items()))
    print()
    print("\n".join(targets))
    out = a.out or HERE / "results" / time.strftime("run-%Y%m%d-%H%M%S.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    results.update({
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "elapsed_s": round(time.time() - started, 1),
        "git": git_rev(),
        "machine": {"cpus": os.cpu_count(), "usable_cpus": cpus, "pinned": pin,
                    "python": platform.python_version(), "platform": platform.platform()},
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "rss_idle_mib": idle,
        "runs": {spec.key: rs for spec, rs in runs.items()},
        "summary": {spec.key: s for spec, s in summary.items()},
        "targets": [{"target": r.target, "subject": r.subject, "measured": r.measured,
                     "limit": r.limit, "result": r.verdict, "note": r.note,
                     "cpu_estimate": r.cpu_estimate} for r in rows],
        "table": [*table, "", *targets],
    })
    out.write_text(json.dumps(results, indent=1, default=str))
    print(f"\nJSON: {out}")
    return 0


def main() -> None:
    a = parse_args()
    sys.exit(driver.run(amain(a), a.generator))


if __name__ == "__main__":
    main()
