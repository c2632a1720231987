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
* the gateway lines that cost most, each with the library time spent under it.

py-spy cannot follow a coroutine's caller across the event loop (a task's frames start at the
coroutine the loop resumed), so "inclusive" time is attributed to the deepest gateway frame of
each sample, never summed up a call chain. The raw samples are kept (``--out``) for a flame graph
(e.g. ``flamegraph.pl`` or speedscope).
"""

from __future__ import annotations

import argparse
import asyncio
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


def area(frame: str) -> str:
    m = _FRAME.match(frame)
    path = m.group("file") if m else frame
    return next((a.rstrip("/") for a in _AREAS if a in path), Path(path).name or "?")


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
        ours = [f for f in frames if "gateway/" in f and "/cli.py" not in f
                and "/server.py" not in f]
        lines[ours[-1] if ours else f"(outside the gateway) {frames[-1][:70]}"] += n
    if not total:
        return "no samples (is py-spy allowed to attach? try as root or with CAP_SYS_PTRACE)"
    out = [f"{total} samples", "", "by area (the sampled frame's own code):"]
    out += [f"  {100 * v / total:5.1f}%  {k}" for k, v in areas.most_common(12)]
    out += ["", f"top {top} gateway lines (with the library time under them):"]
    out += [f"  {100 * v / total:5.1f}%  {k}" for k, v in lines.most_common(top)]
    return "\n".join(out)


async def profile(a: argparse.Namespace, spy: str) -> Path:
    client, upstream = run.parse_pairs(a.pair)[0]
    cores = procs.split_cores()  # this driver and the mock on one core, the gateway on another
    tmp = Path(tempfile.mkdtemp(prefix="gateway-profile-"))
    ports = run.Ports(*(procs.free_port() for _ in range(5)))
    mock = procs.Proc("mock", [sys.executable, str(HERE / "mock.py"), "--chunks", str(a.chunks),
                               "--listen", str(ports.mock), "--listen", f"{ports.paced}:10"],
                      cores.generator, tmp / "mock.log")
    gw = None
    try:
        await procs.wait_ready(mock, f"http://127.0.0.1:{ports.mock}/", 10)
        gw = await run.start_gateway(run.parse_args([]), tmp, ports, cores.server, 1)
        out = a.out or tmp / f"{client}-{upstream}-{a.mode}.txt"
        recorder = subprocess.Popen(
            [spy, "record", "--pid", str(gw.pid), "--duration", str(int(a.seconds)),
             "--rate", "200", "--format", "raw", "--output", str(out), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        spec = run.Spec("load", a.concurrency, a.mode, "gateway", client, upstream)
        target = run.target_for(spec, ports, wire.answer_text(a.chunks))
        result = await driver.run_load(target, concurrency=a.concurrency, warmup=0.5,
                                       duration=a.seconds)
        _, err = recorder.communicate(timeout=a.seconds + 30)
        if recorder.returncode:
            sys.exit(f"py-spy failed: {err.decode(errors='replace').strip()}")
        summary = result.summary()
        print(f"{client}/{upstream} {a.mode} c{a.concurrency}: {summary['rps']:.0f} req/s, "
              f"{result.errors} errors; raw samples: {out}")
        return out
    finally:
        if gw is not None:
            gw.stop()
        mock.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pair", help="CLIENT:UPSTREAM (openai, 0128, 0529, chatui)")
    p.add_argument("mode", choices=["whole", "stream"])
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out", type=Path, default=None, help="where to keep the raw samples")
    a = p.parse_args()
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        sys.exit("py-spy is not installed: .venv/bin/pip install py-spy")
    raw = asyncio.run(profile(a, spy))
    print(summarize(raw, a.top))


if __name__ == "__main__":
    main()
