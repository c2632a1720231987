"""Instructions per request under callgrind: a measure of the gateway's own CPU that this shared
host's neighbours cannot move.

    .venv/bin/python bench/instructions.py --pairs 0128:0128,anthropic:anthropic
    .venv/bin/python bench/instructions.py --passthrough --modes stream    # the yardstick too
    .venv/bin/python bench/instructions.py --a-rev HEAD~1                  # A/B
    .venv/bin/python bench/instructions.py --a "env -C /tmp/old python -m gateway" --gateway-cmd ...

Why: on the 2-vCPU development host one window's CPU per request moves by 15-20% from one window
to the next (docs/performance.md), so `bench/ab.py` resolves changes of about 10% and nothing
smaller. Valgrind's callgrind counts the instructions a process executes, whatever the rest of
the machine does: the same build, load and count give the same figure to a few parts in a
thousand. So each server runs under ``valgrind --tool=callgrind --instr-atstart=no`` (about 50
times slower), against the same mock as `bench/run.py` (same config, same routes, same answers),
and for each (pair, mode): a warm-up batch, uncounted; then counting is switched on
(``callgrind_control -i on``) while no request is in flight, ``--clients`` keep-alive clients
send ``--requests`` requests each, and counting is switched off and dumped once every answer is
in. The figure is the instructions counted over the requests answered.

What it does not see: the kernel's work (system calls: the gateway makes fewer per request than
the pass-through, see docs/performance.md), and what a cache miss or a mispredicted branch costs
on real hardware. Instructions are not time: on this host a stream's time moved by 0.6 to 1.2
times its instructions in the one comparison made of both (a stand-in translator, 20-48% fewer
instructions, 14-34% less CPU by `bench/ab.py`). Use it to tell whether a change takes work away
and how much; use `bench/run.py` for what that is worth in requests per second.

``--cache-sim BYTES`` counts, besides, what instructions alone hide where a server runs as many
of them as another in more time: the misses of one simulated cache of that size, code and data
(this host's per-core L2 is the level whose misses cost tens of cycles each), and the branches
the simulated predictor got wrong. Counts of events, not their cost.

Needs Debian's ``valgrind`` (not a dependency of the gateway or of its tests).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

try:
    import ab
    import driver
    import h1load
    import procs
    import run
    import wire
    from yarl import URL
except ImportError as e:  # pragma: no cover - a fresh clone without the venv
    sys.exit(f"bench/instructions.py needs the project's dependencies ({e}): run `make bench` "
             "first")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=run.parse_pairs, default=None,
                   help="CLIENT:UPSTREAM,... as in run.py [every identity pair]")
    p.add_argument("--modes", default="stream", help="whole, stream or whole,stream")
    p.add_argument("--clients", type=int, default=32, help="keep-alive clients at once")
    p.add_argument("--requests", type=int, default=20, help="requests per client, counted")
    p.add_argument("--chunks", type=int, default=20, help="text chunks per answer")
    p.add_argument("--gateway-cmd", default=None,
                   help="command that starts the gateway, as in run.py (`env -C DIR` is read "
                        "as the directory to start it in)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--a-rev", default=None,
                       help="also count a git revision's gateway, build A (checked out in a "
                            "temporary worktree and built there, as bench/ab.py does, run "
                            "with this checkout's virtualenv), and print B/A")
    which.add_argument("--a", default=None,
                       help="also count the gateway this command starts, build A (e.g. another "
                            "checkout's), and print B/A")
    p.add_argument("--keep", type=Path, default=None,
                   help="keep callgrind's files here, one per (server, pair, mode), for "
                        "callgrind_annotate")
    p.add_argument("--cache-sim", type=int, default=0, metavar="BYTES",
                   help="also simulate a last-level cache of BYTES (this host's L2 a core, "
                        "e.g. 1048576) and the branch predictor, and print their misses per "
                        "request (about ten times slower again)")
    p.add_argument("--passthrough", action="store_true",
                   help="also count bench/passthrough.py, the yardstick, and print its "
                        "instructions over the gateway's")
    a = p.parse_args(argv)
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not set(a.modes) <= {"whole", "stream"} or not a.modes:
        p.error("--modes takes whole, stream or whole,stream")
    if a.pairs is None:
        a.pairs = [(d, d) for d in run.ALL]
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        p.error("valgrind is not installed (Debian: apt-get install valgrind)")
    return a


def split_cwd(cmd: list[str]) -> tuple[list[str], str | None]:
    """``env -C DIR rest...`` -> (rest, DIR): valgrind then runs the server itself, not env."""
    if len(cmd) > 2 and Path(cmd[0]).name == "env" and cmd[1] == "-C":
        return cmd[3:], cmd[2]
    return cmd, None


async def batch(target: driver.Target, clients: int, each: int) -> int:
    """``clients`` keep-alive clients send ``each`` requests one after the other; the errors."""
    body, headers = wire.request(target.dialect, target.stream)
    url = URL(target.url, encoded=True)
    host, port = url.host or "127.0.0.1", url.port or 80
    data = h1load.request_bytes(host, port, url.raw_path_qs, body, headers)
    conns = [await h1load.H1Connection.open(host, port) for _ in range(clients)]
    errors = 0

    async def client(conn: h1load.H1Connection) -> None:
        nonlocal errors
        for _ in range(each):
            answer = await conn.request(data)
            if driver._check(target, answer.status, answer.body) is not None:
                errors += 1

    try:
        await asyncio.gather(*(client(c) for c in conns))
    finally:
        for c in conns:
            c.close()
    return errors


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], capture_output=True, timeout=120, check=False)


async def count(a: argparse.Namespace, name: str, cmd: list[str], kind: str, tmp: Path,
                ports: run.Ports) -> dict[tuple[str, str, str], float]:
    """Instructions per request of one server, for each (client, upstream, mode)."""
    cmd, cwd = split_cwd(cmd)
    out = tmp / f"callgrind-{name}.out"
    vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
          "--instr-atstart=no"]
    if a.cache_sim:
        vg += ["--cache-sim=yes", "--branch-sim=yes", f"--LL={a.cache_sim},16,64"]
    port = ports.gw if kind == "gateway" else ports.pt
    if kind == "gateway":
        args = ["serve", "--config", str(tmp / "gateway.yaml"), "--host", "127.0.0.1",
                "--port", str(port)]
    else:
        args = ["--port", str(port), "--upstream", f"http://127.0.0.1:{ports.mock}"]
    server = procs.Proc(name, [*vg, *cmd, *args], procs.split_cores().server,
                        tmp / f"{name.replace(' ', '-')}.log", cwd=cwd)
    figures: dict[tuple[str, str, str], float] = {}
    pairs = a.pairs if kind == "gateway" else sorted({(u, u) for _, u in a.pairs},
                                                     key=lambda p: run.ALL.index(p[0]))
    try:
        await procs.wait_ready(server, f"http://127.0.0.1:{port}/healthz", 300)
        for mode in a.modes:
            for c, u in pairs:
                spec = run.Spec("load", a.clients, mode, kind, c, u)
                target = run.target_for(spec, ports, wire.answer_text(a.chunks))
                await batch(target, a.clients, 3)  # warm-up: connections, templates, caches
                dumps = set(glob.glob(f"{out}.*"))
                _control("-i", "on", str(server.pid))
                errors = await batch(target, a.clients, a.requests)
                _control("-i", "off", str(server.pid))
                _control(f"--dump={c}-{u}-{mode}", str(server.pid))
                for _ in range(100):
                    new = set(glob.glob(f"{out}.*")) - dumps
                    if new:
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise RuntimeError(f"callgrind wrote no dump for {name} {c}:{u} {mode}")
                dump = Path(new.pop())
                text = dump.read_text()
                if a.keep is not None:
                    a.keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(dump, a.keep / f"{name.replace(' ', '-')}-{c}-{u}-{mode}.out")
                totals = _totals(text)
                n = a.clients * a.requests
                if errors:
                    raise RuntimeError(f"{name} {c}:{u} {mode}: {errors} wrong answers of {n}")
                figures[(c, u, mode)] = totals["Ir"] / n
                print(f"{name:12} {c:>9}:{u:<9} {mode:6} {totals['Ir'] / n / 1e3:9.1f} k "
                      f"instructions per request ({n} requests)", flush=True)
                if a.cache_sim:
                    print(f"{'':12} {'':>19} {'':6} last-level misses per request: code "
                          f"{totals['ILmr'] / n:.0f}, data read {totals['DLmr'] / n:.0f}, "
                          f"data write {totals['DLmw'] / n:.0f}; branches mispredicted "
                          f"{(totals['Bcm'] + totals['Bim']) / n:.0f}", flush=True)
    finally:
        server.stop()
    return figures


def _totals(dump: str) -> dict[str, int]:
    """A callgrind dump's totals, by event name (``Ir``, and with the cache simulation ``ILmr``,
    ``DLmr``, ``DLmw``, ``Bcm``, ``Bim``, ...)."""
    events = re.search(r"^events: (.+)$", dump, re.M)
    totals = re.search(r"^totals: (.+)$", dump, re.M)
    if events is None or totals is None:
        raise RuntimeError("a callgrind dump without its events and totals")
    return dict(zip(events.group(1).split(), map(int, totals.group(1).split()), strict=False))


async def amain(a: argparse.Namespace) -> int:
    ports = run.Ports(*(procs.free_port() for _ in range(7)))
    cores = procs.split_cores()
    servers: list[tuple[str, list[str], str]] = []
    worktree = None
    with tempfile.TemporaryDirectory(prefix="gateway-instructions-") as tmpname:
        tmp = Path(tmpname)
        (tmp / "gateway.yaml").write_text(json.dumps(run.gateway_config(ports), indent=1))
        if a.passthrough:
            servers.append(("passthrough", [sys.executable, str(HERE / "passthrough.py")],
                            "passthrough"))
        if a.a_rev:
            worktree = ab.worktree(a.a_rev, tmp / "a")
            servers.append(("A", ["env", "-C", str(worktree), sys.executable, "-m", "gateway"],
                            "gateway"))
        elif a.a:
            servers.append(("A", shlex.split(a.a), "gateway"))
        gw = shlex.split(a.gateway_cmd) if a.gateway_cmd else run.gateway_command(a)
        servers.append(("B" if a.a_rev or a.a else "gateway", gw, "gateway"))
        mock = procs.Proc("mock", [sys.executable, str(HERE / "mock.py"), "--chunks",
                                   str(a.chunks), "--server", "lean", "--listen",
                                   str(ports.mock), "--listen", f"{ports.paced}:10"],
                          cores.generator, tmp / "mock.log")
        results: dict[str, dict[tuple[str, str, str], float]] = {}
        try:
            await procs.wait_ready(mock, f"http://127.0.0.1:{ports.mock}/", 15)
            for name, cmd, kind in servers:
                results[name] = await count(a, name, cmd, kind, tmp, ports)
        finally:
            mock.stop()
            if worktree is not None:
                subprocess.run(["git", "-C", str(HERE.parent), "worktree", "remove", "--force",
                                str(worktree)], capture_output=True, check=False)
    gateway = results[servers[-1][0]]
    print()
    head = f"{'pair':21} {'mode':6} {'k instr/request':>16}"
    if a.a_rev or a.a:
        head += f" {'A':>9} {'B/A':>6}"
    if a.passthrough:
        head += f" {'pass-through':>12} {'pt/gateway':>10}"
    print(head)
    print("-" * len(head))
    for (c, u, mode), n in gateway.items():
        line = f"{c + ':' + u:21} {mode:6} {n / 1e3:16.1f}"
        if a.a_rev or a.a:
            before = results["A"][(c, u, mode)]
            line += f" {before / 1e3:9.1f} {n / before:6.3f}"
        if a.passthrough:
            pt = results["passthrough"].get((u, u, mode))
            line += f" {pt / 1e3:12.1f} {pt / n:10.2f}" if pt else ""
        print(line)
    return 0


def main() -> None:
    sys.exit(driver.run(amain(parse_args()), "lean"))


if __name__ == "__main__":
    main()
