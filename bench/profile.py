"""Where the gateway's CPU goes under load: py-spy on the gateway while the bench driver loads it.

    .venv/bin/pip install py-spy                       # once; not a project dependency
    .venv/bin/python bench/profile.py openai:openai stream
    .venv/bin/python bench/profile.py 0529:0128 whole --concurrency 32 --seconds 10

Starts the mock and the gateway exactly as bench/run.py does (same config, same pinning: the
gateway on core 0, this driver and the mock on core 1), records the gateway with
``py-spy record --format raw`` (200 Hz, ``--nonblocking`` so that sampling does not pause it)
while ``--concurrency`` clients load one route, and prints:

* the share of samples by where the sampled frame's code lives (aiohttp, the gateway, asyncio,
  prometheus_client, ...): the split the performance notes quote;
* the gateway lines that cost most, each with the library time spent under it;
* the gateway's CPU per request split by stage (:data:`STAGES`): the server (aiohttp's, and the
  gateway's sink, CORS and client edge around it), the upstream hop (the transport),
  translation (pipeline, dialects, framing), accounting (the outcome record, metrics, logs), the
  exchange's own glue, and the event loop: each sample goes to the stage of its deepest frame
  that belongs to one, and the stage's share of the samples times the CPU the gateway spent per
  request in the measured window gives its microseconds.

``--gateway-cmd`` starts the gateway another way (as in ``bench/run.py``), e.g. another
checkout's. C extensions (orjson, httptools, aiohttp's parser) run where py-spy sees no Python
frame: their time goes to the Python caller, unless ``--native`` samples the C frames too.
``--native`` stops the gateway at each sample, and a stop lands on the way back from a system
call more often than elsewhere: it overstates system calls, so read it for where native time
goes, and ``perf record`` for shares. The gateway's compiled modules are C extensions too: for
its own lines, profile a copy of its sources without them, ``--gateway-cmd "env
PYTHONPATH=<copy> .venv/bin/python -P -m gateway"`` (``-P``: ``-m`` would put this checkout
first on ``sys.path``), keeping in mind that interpreted code spends more (the output says which
build ran).

py-spy cannot follow a coroutine's caller across the event loop (a task's frames start at the
coroutine the loop resumed), so "inclusive" time is attributed to the deepest gateway frame of
each sample, never summed up a call chain. The raw samples are kept (``--out``) for a flame graph
(e.g. ``flamegraph.pl`` or speedscope).
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

try:
    import driver
    import procs
    import run
    import wire
except ImportError as e:  # pragma: no cover - a fresh clone without the venv
    sys.exit(f"bench/profile.py needs the project's dependencies ({e}): run `make bench` first")

_AREAS = ("gateway/", "aiohttp/", "asyncio/", "prometheus_client", "structlog", "multidict",
          "yarl", "selectors", "contextlib", "orjson")
_FRAME = re.compile(r"(?P<func>.*?) \((?P<file>.*?):(?P<line>\d+)\)$")
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("accounting", ("gateway/exchange/outcome.py", "gateway/metrics.py",
                    "gateway/metric_children.py", "gateway/traffic.py",
                    "gateway/traffic_window.py", "gateway/log.py",
                    "prometheus_client/", "structlog/")),
    ("translation", ("gateway/pipeline.py", "gateway/dialects/", "gateway/framing/",
                     "gateway/carry.py", "gateway/canonical.py")),
    ("upstream hop", ("gateway/upstream/", "aiohttp/client", "aiohttp/connector.py",
                      "httptools/")),
    # the gateway's own modules around aiohttp's server (the answer's sink, CORS, the client
    # edge) are server work, not the exchange's: matched before the exchange's glue
    ("server", ("gateway/exchange/sink.py", "gateway/cors.py", "gateway/edge.py")),
    ("exchange glue", ("gateway/exchange/", "gateway/balancer.py", "gateway/handlers.py",
                       "gateway/app.py", "gateway/runtime.py")),
    ("server", ("aiohttp/",)),
)
"""Stage of a frame, by where its code lives; the first rule that matches wins (so that
``gateway/exchange/outcome.py`` is accounting, not glue). Frames of no stage (asyncio, the
standard library) are passed over for the nearest caller that has one; a
sample with none is the event loop's."""


def area(frame: str) -> str:
    m = _FRAME.match(frame)
    path = m.group("file") if m else frame
    return next((a.rstrip("/") for a in _AREAS if a in path), Path(path).name or "?")


def _path_of(frame: str) -> str:
    m = _FRAME.match(frame)
    if m is None:
        return frame
    return m.group("file")


def stage_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        path = _path_of(frame)
        for stage, places in STAGES:
            if any(p in path for p in places):
                return stage
    return "event loop"


def stages(raw: Path) -> dict[str, float]:
    """Each stage's share of the samples."""
    counts: collections.Counter[str] = collections.Counter()
    for row in raw.read_text().splitlines():
        stack, _, count = row.rpartition(" ")
        if stack and count.isdigit():
            counts[stage_of(stack.split(";"))] += int(count)
    total = sum(counts.values()) or 1
    return {k: v / total for k, v in counts.most_common()}


def summarize(raw: Path, top: int) -> str:
    areas: collections.Counter[str] = collections.Counter()
    lines: collections.Counter[str] = collections.Counter()
    total = 0
    for row in raw.read_text().splitlines():
        stack, _, count = row.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        areas[area(frames[-1])] += n
        ours = [f for f in frames if "gateway/" in _path_of(f) and "/cli.py" not in f
                and "/server.py" not in f]
        lines[ours[-1] if ours else f"(outside the gateway) {frames[-1][:70]}"] += n
    if not total:
        return "no samples (is py-spy allowed to attach? try as root or with CAP_SYS_PTRACE)"
    out = [f"{total} samples", "", "by area (the sampled frame's own code):"]
    out += [f"  {100 * v / total:5.1f}%  {k}" for k, v in areas.most_common(12)]
    out += ["", f"top {top} gateway lines (with the library time under them):"]
    out += [f"  {100 * v / total:5.1f}%  {k}" for k, v in lines.most_common(top)]
    return "\n".join(out)


async def profile(a: argparse.Namespace, spy: str) -> tuple[Path, float | None]:
    """The raw samples, and the gateway's CPU milliseconds per request in the window."""
    client, upstream = run.parse_pairs(a.pair)[0]
    cores = procs.split_cores()  # this driver and the mock on one core, the gateway on another
    tmp = Path(tempfile.mkdtemp(prefix="gateway-profile-"))
    ports = run.Ports(*(procs.free_port() for _ in range(5)))
    mock = procs.Proc("mock", [sys.executable, str(HERE / "mock.py"), "--chunks", str(a.chunks),
                               "--server", a.generator,
                               "--listen", str(ports.mock), "--listen", f"{ports.paced}:10"],
                      cores.generator, tmp / "mock.log")
    gw = None
    try:
        await procs.wait_ready(mock, f"http://127.0.0.1:{ports.mock}/", 10)
        gw_args = ["--gateway-cmd", a.gateway_cmd] if a.gateway_cmd else []
        gw = await run.start_gateway(run.parse_args(gw_args), tmp, ports, cores.server, 1)
        out = a.out or tmp / f"{client}-{upstream}-{a.mode}.txt"
        recorder = subprocess.Popen(
            [spy, "record", "--pid", str(gw.pid), "--duration", str(int(a.seconds)),
             "--rate", "200", "--format", "raw", "--output", str(out),
             # native frames (C extensions) need the process paused while sampled
             *(["--native"] if a.native else ["--nonblocking"])],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # paced: the mock sleeps 10 ms before each frame, so every frame is its own read and
        # write (as a model's tokens arrive): the per-frame cost, and what a first byte waits on
        spec = run.Spec("paced" if a.paced else "load", a.concurrency, a.mode, "gateway", client,
                        upstream)
        target = run.target_for(spec, ports, wire.answer_text(a.chunks))
        marks: dict[str, float] = {}

        async def start() -> None:
            marks["cpu0"] = procs.cpu_seconds(gw.pids()) if gw else 0.0

        async def end() -> None:
            marks["cpu1"] = procs.cpu_seconds(gw.pids()) if gw else 0.0

        result = await driver.run_load(target, concurrency=a.concurrency, warmup=0.5,
                                       duration=a.seconds, on_start=start, on_end=end,
                                       client=a.generator)
        _, err = recorder.communicate(timeout=a.seconds + 30)
        if recorder.returncode:
            sys.exit(f"py-spy failed: {err.decode(errors='replace').strip()}")
        summary = result.summary()
        cpu_ms = (1e3 * (marks["cpu1"] - marks["cpu0"]) / result.requests
                  if result.requests else None)
        paced = " paced" if a.paced else ""
        print(f"{client}/{upstream} {a.mode}{paced} c{a.concurrency}: {summary['rps']:.0f} req/s, "
              f"{result.errors} errors, gateway CPU {cpu_ms or 0:.3f} ms/request; raw samples: "
              f"{out}")
        build = procs.gateway_build(gw.pid)
        print(f"gateway {build}" + ("; py-spy sees no frame of a compiled module (an interpreted "
                                    "copy: --gateway-cmd 'env PYTHONPATH=<copy> python -P -m "
                                    "gateway')" if build.startswith("compiled") else ""))
        return out, cpu_ms
    finally:
        if gw is not None:
            gw.stop()
        mock.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pair", help=f"CLIENT:UPSTREAM ({', '.join(wire.DIALECTS)})")
    p.add_argument("mode", choices=["whole", "stream"])
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--paced", action="store_true",
                   help="against the mock's paced port (10 ms before each frame)")
    p.add_argument("--gateway-cmd", default=None,
                   help="how to start the gateway (as bench/run.py)")
    p.add_argument("--native", action="store_true",
                   help="sample native frames too (C extensions); pauses the "
                        "gateway at each sample, so its CPU per request reads higher")
    p.add_argument("--out", type=Path, default=None, help="where to keep the raw samples")
    p.add_argument("--generator", choices=driver.GENERATORS, default="lean", help="the load client")
    a = p.parse_args()
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        sys.exit("py-spy is not installed: .venv/bin/pip install py-spy")
    raw, cpu_ms = driver.run(profile(a, spy), a.generator)
    print(summarize(raw, a.top))
    print("\nCPU per request by stage (share of samples x CPU per request):")
    for stage, share in stages(raw).items():
        us = f"{1e3 * share * cpu_ms:6.1f} us" if cpu_ms else ""
        print(f"  {100 * share:5.1f}%  {us}  {stage}")


if __name__ == "__main__":
    main()
