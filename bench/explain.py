"""Why each miss missed: every target a `bench/run.py` run missed, measured again and profiled.

    .venv/bin/pip install py-spy                       # once; not a project dependency
    .venv/bin/python bench/explain.py                  # the newest full run in bench/results/
    .venv/bin/python bench/explain.py bench/results/run-X.json --out /tmp/misses.md

Starts the mock, the pass-through and the gateway as `bench/run.py` does (the run's own
``--gateway-cmd`` unless another is given; the servers on core 0, this driver and the mock on
core 1) and takes the run's misses one at a time:

* **throughput** (identity, translating): the pass-through and the gateway loaded in turn,
  ``--rounds`` times, each window's server CPU per request measured as the run measures it; then
  one more gateway window under ``py-spy --native`` (bench/profile.py's stages) for the split of
  that CPU by stage. The split cuts the gateway's CPU per request in two: the **proxying**
  (server, upstream hop, exchange glue, event loop), which the pass-through does too, and the
  gateway's **own work** (translation, accounting), which the pass-through does not do at all.
  The target is met when the gateway's CPU per request is within the pass-through's over the
  target's ratio (the **budget**; with the lean load generator the throughput ratio is the CPU
  ratio). The verdict says which part goes over it;
* **first byte** (TTFB added at p50/p99): paced streams (the run's per-frame delay), the
  pass-through and the gateway in turn at the run's concurrency, ``--rounds`` times; the gateway
  a second time without the scrape of ``/metrics`` that `bench/run.py` makes at the start of
  each gateway window; and both with one stream at a time (the gateway unscraped). The gateway's
  CPU per paced stream is split by stage as above. Without the scrape, what is left is the
  gateway's; alone, a stream's first byte shows what the gateway's path adds; at the run's
  concurrency every stream's first frame arrives within the same millisecond on one core, and
  the difference is the wait behind the others' work.

A miss that meets its target when measured again gets the verdict "scatter" (one run on this
shared host moves a pair by more than the margin), still with its profile. The like-for-like
ratio is an aim, and ``--workers`` cannot be measured on 2 cores (docs/performance.md): neither
is explained here. ``--native`` pauses the gateway at each sample, so the split comes from its
own window and the CPU per request from the unsampled ones; it overstates system calls
(bench/profile.py), so the proxying's share reads a little high and the translation's a little
low.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

try:
    import driver
    import procs
    import run
    import wire
    from misses import Explained, Miss, judge, misses, table, tally
except ImportError as e:  # pragma: no cover - a fresh clone without the venv
    sys.exit(f"bench/explain.py needs the project's dependencies ({e}): run `make bench` first")


def _bench_profile() -> Any:
    """bench/profile.py, under a name of its own: ``import profile`` would name the stdlib's."""
    spec = importlib.util.spec_from_file_location("bench_profile", HERE / "profile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- measuring -----------------------------------------------------------------------------------


class Bench:
    """The mock, the pass-throughs and the gateway of one explanation, as bench/run.py starts
    them."""

    def __init__(self, a: argparse.Namespace, run_args: argparse.Namespace, tmp: Path) -> None:
        self.a = a
        self.run_args = run_args
        self.tmp = tmp
        self.ports = run.Ports(*(procs.free_port() for _ in range(5)))
        self.cores = procs.split_cores()
        self.running: list[procs.Proc] = []
        self.pt: procs.Proc | None = None
        self.pt_paced: procs.Proc | None = None
        self.gw: procs.Proc | None = None
        self.text = wire.answer_text(a.chunks)

    async def start(self) -> None:
        py, ports, a = sys.executable, self.ports, self.a
        mock = procs.Proc("mock", [py, str(HERE / "mock.py"), "--chunks", str(a.chunks),
                                   "--server", a.generator, "--listen", str(ports.mock),
                                   "--listen", f"{ports.paced}:{a.paced_delay_ms}"],
                          self.cores.generator, self.tmp / "mock.log")
        self.running.append(mock)
        self.pt, self.pt_paced = (
            procs.Proc(f"passthrough {port}", [py, str(HERE / "passthrough.py"), "--port",
                                               str(port), "--upstream", f"http://127.0.0.1:{up}"],
                       self.cores.server, self.tmp / f"passthrough-{port}.log")
            for port, up in ((ports.pt, ports.mock), (ports.pt_paced, ports.paced)))
        self.running += [self.pt, self.pt_paced]
        await procs.wait_ready(mock, f"http://127.0.0.1:{ports.mock}/", 15)
        await procs.wait_ready(mock, f"http://127.0.0.1:{ports.paced}/", 15)
        await procs.wait_ready(self.pt, f"http://127.0.0.1:{ports.pt}/", 15)
        await procs.wait_ready(self.pt_paced, f"http://127.0.0.1:{ports.pt_paced}/", 15)
        self.gw = await run.start_gateway(self.run_args, self.tmp, ports, self.cores.server, 1)
        self.running.append(self.gw)
        self.gen_pids = [os.getpid(), mock.pid]

    def stop(self) -> None:
        for p in reversed(self.running):
            p.stop()

    async def window(self, spec: run.Spec) -> dict[str, Any]:
        gateway = spec.kind == "gateway"
        server = self.gw if gateway else (self.pt_paced if spec.scenario == "paced" else self.pt)
        cores = ([min(self.cores.server), min(self.cores.generator)]
                 if self.cores.server and self.cores.generator else [])
        return await run.measure(spec, self.run_args, self.ports, server, self.gen_pids, cores,
                                 self.text)

    async def sampled(self, spec: run.Spec, spy: str) -> dict[str, float]:
        """Each stage's share of the gateway's samples over one window of ``spec``."""
        assert self.gw is not None
        raw = self.tmp / "samples.txt"
        seconds = self.a.warmup + self.a.seconds
        recorder = subprocess.Popen(
            [spy, "record", "--pid", str(self.gw.pid), "--duration", str(math.ceil(seconds)),
             "--rate", "200", "--format", "raw", "--output", str(raw), "--native"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            await self.window(spec)
        finally:
            _, err = recorder.communicate(timeout=seconds + 30)
        if recorder.returncode:
            sys.exit(f"py-spy failed: {err.decode(errors='replace').strip()}")
        return dict(_bench_profile().stages(raw))


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


async def explain_throughput(b: Bench, m: Miss, spy: str | None) -> Explained:
    e = Explained(m)
    pt_spec = run.Spec("load", m.concurrency, m.mode, "passthrough", m.upstream, m.upstream)
    gw_spec = run.Spec("load", m.concurrency, m.mode, "gateway", m.client, m.upstream)
    rounds: list[tuple[float, float, float]] = []  # (pt CPU us, gateway CPU us, req/s ratio)
    for _ in range(b.a.rounds):
        pt = await b.window(pt_spec)
        gw = await b.window(gw_spec)
        e.errors += pt["errors"] + gw["errors"]
        if pt.get("cpu_ms_per_req") and gw.get("cpu_ms_per_req") and pt["rps"] and gw["rps"]:
            rounds.append((1e3 * pt["cpu_ms_per_req"], 1e3 * gw["cpu_ms_per_req"],
                           gw["rps"] / pt["rps"]))
    if rounds:
        # the round whose CPU ratio is the median: its two terms, measured side by side, are
        # the budget and the cost the verdict compares, so that they agree with that ratio
        rounds.sort(key=lambda r: r[0] / r[1])
        e.pt_cpu_us, e.gw_cpu_us, _ = rounds[len(rounds) // 2]
        e.ratio_cpu = e.pt_cpu_us / e.gw_cpu_us
        e.ratio_rps = _median([r[2] for r in rounds])
        e.rounds_cpu = [r[0] / r[1] for r in rounds]
    if spy and e.gw_cpu_us is not None:
        shares = await b.sampled(gw_spec, spy)
        e.stages_us = {s: share * e.gw_cpu_us for s, share in shares.items()}
    judge(e)
    return e


async def explain_ttfb(b: Bench, m: Miss, spy: str | None) -> Explained:
    """Each round: the pass-through and the gateway at the run's concurrency (the gateway's
    window scraped at its start, as run.py scrapes it), the gateway again unscraped, then the
    pass-through and the gateway (unscraped) with one stream at a time."""
    e = Explained(m)
    key = f"ttfb_p{m.quantile}_ms"
    added: list[float] = []
    unscraped: list[float] = []
    alone: list[float] = []
    pt_ttfb: list[float] = []
    pt_ttfb_alone: list[float] = []
    gw_cpu, pt_cpu = [], []

    def spec(conc: int, kind: str) -> run.Spec:
        client = m.upstream if kind == "passthrough" else m.client
        return run.Spec("paced", conc, "stream", kind, client, m.upstream)

    async def unscraped_ttfb(conc: int) -> tuple[float | None, int]:
        target = run.target_for(spec(conc, "gateway"), b.ports, b.text)
        r = await driver.run_load(target, concurrency=conc, warmup=b.a.warmup,
                                  duration=b.a.seconds, client=b.a.generator)
        value = r.summary().get(key)
        return (float(value) if value is not None else None), r.errors

    for _ in range(b.a.rounds):
        pt = await b.window(spec(m.concurrency, "passthrough"))
        gw = await b.window(spec(m.concurrency, "gateway"))
        quiet, errors = await unscraped_ttfb(m.concurrency)
        e.errors += pt["errors"] + gw["errors"] + errors
        if pt.get(key) is not None and gw.get(key) is not None:
            added.append(gw[key] - pt[key])
            pt_ttfb.append(pt[key])
            if quiet is not None:
                unscraped.append(quiet - pt[key])
        if pt.get("cpu_ms_per_req") and gw.get("cpu_ms_per_req"):
            pt_cpu.append(1e3 * pt["cpu_ms_per_req"])
            gw_cpu.append(1e3 * gw["cpu_ms_per_req"])
        pt1 = await b.window(spec(1, "passthrough"))
        gw1, errors = await unscraped_ttfb(1)
        e.errors += pt1["errors"] + errors
        if pt1.get(key) is not None and gw1 is not None:
            alone.append(gw1 - pt1[key])
            pt_ttfb_alone.append(pt1[key])
    e.added_ms, e.added_alone_ms = _median(added), _median(alone)
    e.added_unscraped_ms = _median(unscraped)
    e.pt_ttfb_ms, e.pt_ttfb_alone_ms = _median(pt_ttfb), _median(pt_ttfb_alone)
    e.pt_cpu_us, e.gw_cpu_us = _median(pt_cpu), _median(gw_cpu)
    if e.pt_cpu_us and e.gw_cpu_us:
        e.ratio_cpu = e.pt_cpu_us / e.gw_cpu_us
    if spy and e.gw_cpu_us is not None:
        shares = await b.sampled(run.Spec("paced", m.concurrency, "stream", "gateway", m.client,
                                          m.upstream), spy)
        e.stages_us = {s: share * e.gw_cpu_us for s, share in shares.items()}
    judge(e)
    return e


# --- main ----------------------------------------------------------------------------------------


def newest_run() -> Path | None:
    """The newest full run (not --quick) in bench/results/."""
    for path in sorted((HERE / "results").glob("run-*.json"), reverse=True):
        try:
            if not json.loads(path.read_text())["args"].get("quick"):
                return path
        except (OSError, ValueError, KeyError):
            continue
    return None


async def amain(a: argparse.Namespace, results: dict[str, Any], chosen: list[Miss],
                spy: str | None) -> list[Explained]:
    run_args = run.parse_args(
        (["--gateway-cmd", a.gateway_cmd] if a.gateway_cmd else [])
        + ["--duration", str(a.seconds), "--warmup", str(a.warmup),
           "--generator", a.generator])
    rows: list[Explained] = []
    with tempfile.TemporaryDirectory(prefix="gateway-explain-") as tmpname:
        b = Bench(a, run_args, Path(tmpname))
        try:
            await b.start()
            for i, m in enumerate(chosen, 1):
                explain = explain_ttfb if m.kind == "ttfb" else explain_throughput
                e = await explain(b, m, spy)
                rows.append(e)
                print(f"[{i}/{len(chosen)}] {m.subject}: run {m.measured}; {e.verdict}: {e.why}",
                      flush=True)
        finally:
            b.stop()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="?", type=Path, default=None,
                   help="a bench/run.py JSON file [the newest full run in bench/results/]")
    p.add_argument("--rounds", type=int, default=3,
                   help="windows of the pass-through and the gateway, in turn, per miss")
    p.add_argument("--seconds", type=float, default=2.0, help="measured seconds per window")
    p.add_argument("--warmup", type=float, default=0.5, help="seconds of load before each")
    p.add_argument("--gateway-cmd", default=None,
                   help="how to start the gateway [the run's own --gateway-cmd]")
    p.add_argument("--only", default=None,
                   help="explain only the misses whose subject contains this text")
    p.add_argument("--no-profile", action="store_true",
                   help="measure again without py-spy (no split by stage)")
    p.add_argument("--out", type=Path, default=None,
                   help="write the Markdown tables here too (and the figures beside, as .json)")
    a = p.parse_args()
    path = a.results or newest_run()
    if path is None:
        sys.exit("no full run in bench/results/: run bench/run.py first, or name its JSON")
    results = json.loads(path.read_text())
    args = results.get("args", {})
    a.chunks = args.get("chunks", 20)
    a.paced_delay_ms = args.get("paced_delay_ms", 10.0)
    a.generator = args.get("generator", "lean")
    if a.gateway_cmd is None:
        a.gateway_cmd = args.get("gateway_cmd")
    chosen = [m for m in misses(results) if a.only is None or a.only in m.subject]
    if not chosen:
        print(f"{path}: no miss to explain")
        return
    spy = None
    if not a.no_profile:
        spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or \
            shutil.which("py-spy")
        if spy is None:
            sys.exit("py-spy is not installed: .venv/bin/pip install py-spy (or --no-profile)")
    started = time.time()
    print(f"{path} (git {results.get('git')}): {len(chosen)} misses to explain", flush=True)
    rows = driver.run(amain(a, results, chosen, spy), a.generator)
    lines = table(rows)
    summary = f"{len(rows)} misses: {tally(rows)}"
    print("\n" + "\n".join(lines) + "\n\n" + summary)
    if a.out:
        a.out.write_text("\n".join(lines) + "\n\n" + summary + "\n")
        a.out.with_suffix(".json").write_text(json.dumps({
            "run": str(path), "run_git": results.get("git"), "git": run.git_rev(),
            "elapsed_s": round(time.time() - started, 1),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
            "misses": [asdict(r) for r in rows]}, indent=1, default=str))


if __name__ == "__main__":
    main()
