"""Processes under test: start (pinned), wait until ready, stop; read their CPU and RSS from /proc;
read a Prometheus histogram out of a /metrics page. Linux only (``/proc``, ``sched_setaffinity``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import socket
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from aiohttp import ClientSession, ClientTimeout

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def usable_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


@dataclass(frozen=True, slots=True)
class Cores:
    """Where the bench's processes run: the server under test on one core, the caller (load
    driver) and the mock on another; nothing pinned (``None``) with fewer than two cores."""

    usable: list[int]
    pinned: bool
    server: set[int] | None
    generator: set[int] | None


def split_cores(no_pin: bool = False, server: set[int] | None = None,
                generator: set[int] | None = None) -> Cores:
    """Pins the calling process to the generator's cores and says where the server goes:
    ``server``/``generator`` when given (a bigger machine), else the first two usable cores."""
    cpus = usable_cpus()
    pin = not no_pin and len(cpus) >= 2
    cores = Cores(cpus, pin, (server or {cpus[0]}) if pin else None,
                  (generator or {cpus[1]}) if pin else None)
    if cores.generator:
        os.sched_setaffinity(0, cores.generator)
    return cores


def combine(runs: list[dict[str, Any]], figures: Sequence[str]) -> dict[str, Any]:
    """Medians over the repetitions; errors are summed; the RSS peak is the largest."""
    out: dict[str, Any] = {"repetitions": len(runs),
                           "errors": sum(r["errors"] for r in runs),
                           "requests": sum(r["requests"] for r in runs)}
    for f in figures:
        values = [r[f] for r in runs if r.get(f) is not None]
        if values:
            out[f] = max(values) if f.startswith("rss") else statistics.median(values)
    samples = [s for r in runs for s in r.get("error_samples", [])]
    if samples:
        out["error_samples"] = samples[:3]
    return out


def fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


class Proc:
    """A child process in its own session (so its workers can be signalled with it), pinned to
    ``cpus`` before exec so that every process it forks inherits the pinning."""

    def __init__(self, name: str, cmd: Sequence[str], cpus: set[int] | None, log: Path,
                 env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        self.name = name
        self.cmd = list(cmd)
        self.cpus = cpus
        self.log_path = log
        self._log: IO[bytes] = log.open("wb")

        def pin() -> None:
            if cpus:
                os.sched_setaffinity(0, cpus)

        self.popen = subprocess.Popen(
            self.cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=pin, start_new_session=True, env=env, cwd=cwd)
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, n: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""

    def pids(self) -> list[int]:
        """This process and its descendants (e.g. ``--workers`` children)."""
        return [self.pid, *descendants(self.pid)]

    def stop(self, grace: float = 10.0) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)  # the group of our own child, by its id
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(5)
        else:  # the leader is gone; make sure no worker of its group is left
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        self._log.close()


def gateway_build(pid: int) -> str:
    """Which gateway a started process runs, from the shared objects it has mapped: the
    compiled modules' file (``gateway__mypyc``), or none (the sources, interpreted). A build
    started with ``python -m gateway`` from this checkout imports this checkout's gateway
    whatever PYTHONPATH says (``-m`` puts the working directory first on ``sys.path``): a
    comparison of two builds says what each really ran."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if "/gateway__mypyc." in path:
                    return f"compiled: {path}"
    except OSError:
        return "unknown (its /proc/<pid>/maps could not be read)"
    return "interpreted: no compiled module loaded"


async def wait_ready(proc: Proc, url: str, within: float) -> None:
    """Until ``GET url`` answers (any status below 500), the process dies, or ``within`` s."""
    deadline = time.monotonic() + within
    async with ClientSession(timeout=ClientTimeout(total=2)) as s:
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n"
                                   f"{proc.log_tail()}")
            with contextlib.suppress(OSError, TimeoutError):
                async with s.get(url) as r:
                    if r.status < 500:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{proc.name} not ready after {within:.0f}s:\n{proc.log_tail()}")


# --- /proc ---------------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2:].split()  # fields from 3 (state) on


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            children.setdefault(int(_stat_fields(int(entry.name))[1]), []).append(int(entry.name))
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return sorted(out)


def cpu_seconds(pids: Sequence[int]) -> float:
    """utime + stime of ``pids`` (fields 14 and 15 of /proc/<pid>/stat), in seconds."""
    user, system = cpu_split(pids)
    return user + system


def cpu_split(pids: Sequence[int]) -> tuple[float, float]:
    """(utime, stime) of ``pids`` in seconds: the process's own code, and the kernel's work
    for it (system calls: the socket reads and writes, epoll)."""
    user = system = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            f = _stat_fields(pid)
            user += int(f[11])
            system += int(f[12])
    return user / CLK_TCK, system / CLK_TCK


def core_times(cpu: int) -> tuple[float, float]:
    """(busy, steal) seconds of one core since boot, from /proc/stat: busy counts user, nice,
    system, irq, softirq and steal (time the hypervisor gave to someone else)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith(f"cpu{cpu} "):
                f = [int(x) for x in line.split()[1:]]
                user, nice, system, _idle, _iowait, irq, softirq, steal = (f + [0] * 8)[:8]
                return (user + nice + system + irq + softirq + steal) / CLK_TCK, steal / CLK_TCK
    return 0.0, 0.0


def rss_mib(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class RssSampler:
    """VmRSS of ``pids`` every ``interval`` s: the peak of any one process and of their sum."""

    def __init__(self, pids: Sequence[int], interval: float = 0.1) -> None:
        self.pids = list(pids)
        self.interval = interval
        self.peak_one = 0.0
        self.peak_sum = 0.0
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        values = [rss_mib(p) for p in self.pids]
        self.peak_one = max(self.peak_one, *values)
        self.peak_sum = max(self.peak_sum, sum(values))
        self.samples += 1

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sample()


# --- Prometheus ----------------------------------------------------------------------------------


def histogram(text: str, name: str) -> dict[str, Any]:
    """The sum over every label set of histogram ``name``: ``{"buckets": {le: count}, "sum",
    "count"}`` (cumulative buckets, as exposed)."""
    buckets: dict[float, float] = {}
    total = count = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        try:
            v = float(value)
        except ValueError:
            continue
        metric = head.split("{", 1)[0]
        if metric == name + "_bucket":
            le = head.split('le="', 1)[1].split('"', 1)[0]
            bound = math.inf if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + v
        elif metric == name + "_sum":
            total += v
        elif metric == name + "_count":
            count += v
    return {"buckets": buckets, "sum": total, "count": count}


def histogram_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    bounds = sorted(set(before["buckets"]) | set(after["buckets"]))
    return {
        "buckets": {b: after["buckets"].get(b, 0.0) - before["buckets"].get(b, 0.0)
                    for b in bounds},
        "sum": after["sum"] - before["sum"],
        "count": after["count"] - before["count"],
    }


def histogram_quantile(h: dict[str, Any], q: float) -> float | None:
    """Like PromQL's ``histogram_quantile``: linear inside the bucket the rank falls in; the
    largest finite bound when it falls in +Inf."""
    count = h["count"]
    if count <= 0:
        return None
    rank = q * count
    prev_bound, prev_cum = 0.0, 0.0
    finite = [b for b in sorted(h["buckets"]) if b != math.inf]
    for bound in sorted(h["buckets"]):
        cum = h["buckets"][bound]
        if cum >= rank:
            if bound == math.inf:
                return finite[-1] if finite else None
            if cum == prev_cum:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_cum) / (cum - prev_cum)
        prev_bound, prev_cum = bound, cum
    return finite[-1] if finite else None
