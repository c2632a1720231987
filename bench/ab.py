"""A/B: two gateway builds' CPU per request, alternated window by window on one machine.

    .venv/bin/python bench/ab.py --a-rev 9c20a52 --pairs openai:0128,anthropic:responses
    .venv/bin/python bench/ab.py --a "env PYTHONPATH=/tmp/old python -P -m gateway" --rounds 12
    .venv/bin/python bench/ab.py --a-server upstream_client=aiohttp     # a setting A/B

On a shared host one window's throughput and CPU per request move by 15-20% from one window to
the next (docs/performance.md), more than most single changes are worth, so comparing two
`bench/run.py` runs, or even two alternated runs, cannot resolve a 5% change. Here both gateways
run at once, pinned to the same core, against one mock (only one of them is loaded at a time),
and short windows alternate A B, B A, A B, ... for every (pair, mode): a slow minute of the host
falls on both alike. The figure is, over the rounds, the median of B's CPU per request over A's
in the same round, with its spread; B is this checkout unless ``--b`` says otherwise.

Its resolution on the 2-vCPU development host, from three A/A runs (the same code both sides, 8
rounds of 2 s, openai:0128): medians 0.90 and 0.96 (whole, streamed; A a worktree of HEAD),
1.02 and 1.01 (the same command both sides), 1.01 (A ``python -m gateway``), with single rounds
anywhere in 0.69-1.25. So there it tells apart changes of about 10% and more; smaller ones need
more rounds, a quieter host, or an in-process timing.

A command that runs ``python -m gateway`` needs ``-P`` (or ``env -C`` to another directory):
``-m`` puts the working directory first on ``sys.path``, so from this checkout it imports this
checkout's gateway, whatever PYTHONPATH says. The report says what each build ran (the compiled
modules' file, or the sources interpreted) and stops when both ran the same compiled file.

``--a-rev REV`` checks REV out in a temporary git worktree, builds its compiled modules there
(``setup.py build_ext --inplace``, as ``pip install`` would: the sources alone would run
interpreted, against a compiled B) and runs it with this checkout's virtualenv
(``PYTHONPATH``), so its dependencies must match. Any error in any window is printed
and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

try:
    import driver
    import procs
    import run
    import wire
except ImportError as e:  # pragma: no cover - a fresh clone without the venv
    sys.exit(f"bench/ab.py needs the project's dependencies ({e}): run `make bench` first")


@dataclass
class Samples:
    cpu: dict[str, list[float]] = field(default_factory=lambda: {"A": [], "B": []})
    """CPU milliseconds per request of each window, by build, round by round."""
    rps: dict[str, list[float]] = field(default_factory=lambda: {"A": [], "B": []})
    errors: int = 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group()
    which.add_argument("--a", help="the command that starts build A (`serve ...` is appended)")
    which.add_argument("--a-rev", help="a git revision: build A is that revision's gateway")
    p.add_argument("--a-server", action="append", default=[], metavar="KEY=VALUE",
                   help="a `server:` setting of A's config (repeatable); without --a or "
                        "--a-rev, A is this checkout too: e.g. upstream_client=aiohttp")
    p.add_argument("--b", help="build B's command (default: this checkout's chat-gateway)")
    p.add_argument("--pairs", default="openai:0128", help="CLIENT:UPSTREAM,... as in run.py")
    p.add_argument("--modes", default="whole,stream")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--duration", type=float, default=2.0, help="measured seconds per window")
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--generator", choices=driver.GENERATORS, default="lean", help="the load client")
    a = p.parse_args(argv)
    if not (a.a or a.a_rev or a.a_server):
        p.error("build A: one of --a, --a-rev or --a-server is required")
    if any("=" not in kv for kv in a.a_server):
        p.error("--a-server takes KEY=VALUE")
    return a


def worktree(rev: str, into: Path) -> Path:
    """``rev`` checked out at ``into``, built as this checkout is (see the module's docstring)."""
    root = Path(subprocess.check_output(["git", "rev-parse", "--show-toplevel"], cwd=HERE,
                                        text=True).strip())
    subprocess.run(["git", "worktree", "add", "--detach", "--force", str(into), rev], cwd=root,
                   check=True, capture_output=True)
    if (into / "setup.py").exists():  # (a revision from before the compiled build has none)
        built = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                               cwd=into, capture_output=True, text=True, check=False)
        if built.returncode:
            remove_worktree(into)
            sys.exit(f"building {rev} failed:\n{built.stderr[-2000:]}")
    return into


def remove_worktree(path: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=HERE,
                   capture_output=True, check=False)


async def window(gw: procs.Proc, target: driver.Target, a: argparse.Namespace
                 ) -> tuple[float, float, int]:
    """One measured window: (CPU ms per request, requests per second, errors)."""
    marks: dict[str, float] = {}

    async def start() -> None:
        marks["t0"] = procs.cpu_seconds(gw.pids())

    async def end() -> None:
        marks["t1"] = procs.cpu_seconds(gw.pids())

    result = await driver.run_load(target, concurrency=a.concurrency, warmup=a.warmup,
                                   duration=a.duration, on_start=start, on_end=end,
                                   client=a.generator)
    for sample in result.error_samples:
        print(f"  error: {sample}", file=sys.stderr)
    requests = max(result.requests, 1)
    return (1e3 * (marks["t1"] - marks["t0"]) / requests, result.requests / a.duration,
            result.errors)


async def amain(a: argparse.Namespace) -> int:
    cores = procs.split_cores()
    tmp = Path(tempfile.mkdtemp(prefix="gateway-ab-"))
    tree = worktree(a.a_rev, tmp / "a-tree") if a.a_rev else None
    # In the worktree itself: ``python -m`` puts the working directory first on sys.path, ahead
    # of PYTHONPATH, so started from this checkout it would import this checkout's gateway.
    command_a = (f"env -C {shlex.quote(str(tree))} PYTHONPATH={shlex.quote(str(tree))} "
                 f"{shlex.quote(sys.executable)} -m gateway") if tree else a.a
    if tree:
        imported = subprocess.check_output(
            [*shlex.split(command_a)[:-2], "-c", "import gateway; print(gateway.__file__)"],
            text=True).strip()
        if not imported.startswith(str(tree)):
            sys.exit(f"build A imports {imported}, not the worktree's gateway")
    default = " ".join(run.gateway_command(run.parse_args([])))
    commands = {"A": command_a or default, "B": a.b or default}
    settings = {"A": dict(kv.split("=", 1) for kv in a.a_server), "B": {}}
    mock_port, paced_port = procs.free_port(), procs.free_port()
    mock = procs.Proc("mock", [sys.executable, str(HERE / "mock.py"), "--chunks", str(a.chunks),
                               "--server", a.generator,
                               "--listen", str(mock_port), "--listen", f"{paced_port}:10"],
                      cores.generator, tmp / "mock.log")
    gateways: dict[str, procs.Proc] = {}
    ports: dict[str, run.Ports] = {}
    try:
        await procs.wait_ready(mock, f"http://127.0.0.1:{mock_port}/", 10)
        for build, command in commands.items():
            ports[build] = run.Ports(mock_port, paced_port, 0, 0, procs.free_port())
            (tmp / build).mkdir()
            gateways[build] = await run.start_gateway(
                run.parse_args(["--gateway-cmd", command]), tmp / build, ports[build],
                cores.server, 1, settings[build])
        builds = {build: procs.gateway_build(gw.pid) for build, gw in gateways.items()}
        if commands["A"] != commands["B"] and builds["A"] == builds["B"] \
                and builds["A"].startswith("compiled"):
            sys.exit(f"builds A and B run the same compiled modules "
                     f"({builds['A'].removeprefix('compiled: ')}): "
                     "a `python -m gateway` started here imports this checkout's (use -P)")
        pairs = run.parse_pairs(a.pairs)
        modes = a.modes.split(",")
        samples = {(p, m): Samples() for p in pairs for m in modes}
        text = wire.answer_text(a.chunks)
        for r in range(a.rounds):
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            for (client, upstream), mode in samples:
                s = samples[((client, upstream), mode)]
                for build in order:
                    spec = run.Spec("load", a.concurrency, mode, "gateway", client, upstream)
                    cpu, rps, errors = await window(
                        gateways[build], run.target_for(spec, ports[build], text), a)
                    s.cpu[build].append(cpu)
                    s.rps[build].append(rps)
                    s.errors += errors
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
        return report(samples, commands, builds, a)
    finally:
        for gw in gateways.values():
            gw.stop()
        mock.stop()
        if tree is not None:
            remove_worktree(tree)


def report(samples: dict[tuple[tuple[str, str], str], Samples], commands: dict[str, str],
           builds: dict[str, str], a: argparse.Namespace) -> int:
    server = " ".join(f"server.{kv}" for kv in a.a_server)
    print(f"A: {commands['A']}{' with ' + server if server else ''}\n   ({builds['A']})\n"
          f"B: {commands['B']}\n   ({builds['B']})")
    print(f"{a.rounds} rounds of {a.duration:g} s windows, {a.concurrency} clients; "
          "B/A per round, median [min-max]")
    print(f"{'pair':24} {'mode':6} {'A cpu us':>9} {'B cpu us':>9} {'B/A cpu':>22} "
          f"{'B/A req/s':>10} {'errors':>6}")
    failed = False
    for ((client, upstream), mode), s in samples.items():
        ratios = [b / x for x, b in zip(s.cpu["A"], s.cpu["B"], strict=True) if x > 0]
        speed = [b / x for x, b in zip(s.rps["A"], s.rps["B"], strict=True) if x > 0]
        failed = failed or s.errors > 0
        print(f"{client + ':' + upstream:24} {mode:6} "
              f"{1e3 * statistics.median(s.cpu['A']):9.0f} "
              f"{1e3 * statistics.median(s.cpu['B']):9.0f} "
              f"{statistics.median(ratios):8.3f} [{min(ratios):.2f}-{max(ratios):.2f}]"
              f"{statistics.median(speed):11.3f} {s.errors:6d}")
    return 1 if failed else 0


def main() -> None:
    a = parse_args()
    sys.exit(driver.run(amain(a), a.generator))


if __name__ == "__main__":
    main()
