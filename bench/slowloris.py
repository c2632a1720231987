"""Slow-header clients (slowloris) against ``chat-gateway serve``: what normal requests see, and
the gateway's open descriptors before, during and after.

    python bench/slowloris.py                       # 2,000 attackers, header_timeout 1 s
    python bench/slowloris.py --attackers 5000 --header-timeout 10

It starts the bench mock and the gateway (one worker, uvloop, as deployed; not pinned), then:
normal whole requests one after another through a translating route, idle; the same while
``--attackers`` connections send a request head one byte a second (``tests/edge_attacker.py``,
in a process of its own, reopening every connection the gateway closes); then the attacker stops
reopening (keeping its end of each connection open) and the gateway's descriptors are polled
until they are back to the idle count. Figures: normal p50/p99 idle and attacked, descriptors
idle / peak / after, and the time they took to come back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from aiohttp import ClientSession, web

from gateway.dialects import DIALECTS, names

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import procs  # noqa: E402

ATTACKER = HERE.parent / "tests" / "edge_attacker.py"


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def latencies(url: str, body: bytes, headers: dict[str, str], n: int) -> list[float]:
    out = []
    async with ClientSession() as s:
        for _ in range(n):
            t0 = time.perf_counter()
            async with s.post(url, data=body, headers=headers) as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"normal request answered {r.status}")
            out.append(time.perf_counter() - t0)
            await asyncio.sleep(0.005)
    return out


def pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[max(0, int(len(ordered) * q) - 1)] * 1000


def upstream(port: int, dialect: str) -> None:
    """The upstream: the dialect's sample whole answer to every POST."""
    body = orjson.dumps(DIALECTS[dialect].samples.responses["text"])

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/chat", answer)
    app.router.add_get("/", lambda r: answer(r))
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def amain(a: argparse.Namespace) -> int:
    order = names()
    client_d, upstream_d = order[0], order[-1]  # a translating route
    mock_port, gw_port = procs.free_port(), procs.free_port()
    with tempfile.TemporaryDirectory(prefix="gateway-slowloris-") as tmpname:
        tmp = Path(tmpname)
        config = {
            "server": {"header_timeout": a.header_timeout, "body_timeout": a.header_timeout,
                       "max_connections": a.attackers + 1000},
            "logging": {"level": "warning"},
            "upstreams": {"up": {"dialect": upstream_d, "streaming": "never",
                                 "url": f"http://127.0.0.1:{mock_port}/chat"}},
            "routes": [{"path": "/chat", "dialect": client_d, "upstream": "up"}],
        }
        (tmp / "gateway.yaml").write_text(json.dumps(config))
        mock = procs.Proc("upstream", [sys.executable, __file__, "--upstream", str(mock_port),
                                       upstream_d], None, tmp / "upstream.log")
        gw = procs.Proc("gateway", [sys.executable, "-m", "gateway", "serve", "--config",
                                    str(tmp / "gateway.yaml"), "--host", "127.0.0.1", "--port",
                                    str(gw_port)], None, tmp / "gateway.log")
        attacker: subprocess.Popen[bytes] | None = None
        try:
            await procs.wait_ready(mock, f"http://127.0.0.1:{mock_port}/", 15)
            await procs.wait_ready(gw, f"http://127.0.0.1:{gw_port}/healthz", 30)
            body = orjson.dumps(DIALECTS[client_d].samples.requests["text"])
            headers = {"Content-Type": "application/json"}
            url = f"http://127.0.0.1:{gw_port}/chat"
            await latencies(url, body, headers, 50)
            idle = await latencies(url, body, headers, a.requests)
            await asyncio.sleep(0.2)
            fds_idle = open_fds(gw.pid)
            attacker = subprocess.Popen(
                [sys.executable, str(ATTACKER), str(gw_port), str(a.attackers), "1.0"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while open_fds(gw.pid) < fds_idle + a.attackers * 0.9:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the attack never got going: {open_fds(gw.pid)} fds")
                await asyncio.sleep(0.05)
            seen: list[int] = []

            async def sample() -> None:
                while True:
                    seen.append(open_fds(gw.pid))
                    await asyncio.sleep(0.1)

            sampler = asyncio.create_task(sample())
            attacked = await latencies(url, body, headers, a.requests)
            sampler.cancel()
            assert attacker.stdin is not None
            attacker.stdin.write(b"hold\n")
            attacker.stdin.flush()
            t0 = time.monotonic()
            limit = t0 + 10 * a.header_timeout
            while open_fds(gw.pid) > fds_idle and time.monotonic() < limit:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            back = time.monotonic() - t0
            fds_after = open_fds(gw.pid)
            still_holding = attacker.poll() is None
        finally:
            if attacker is not None:
                attacker.kill()
                attacker.wait()
            gw.stop()
            mock.stop()
    print(f"slowloris: {a.attackers} slow-header connections (1 byte/s, reopened when closed), "
          f"header_timeout {a.header_timeout:g} s; {client_d} -> gateway -> {upstream_d}, "
          f"{a.requests} sequential whole requests per phase")
    print(f"normal requests idle:     p50 {pct(idle, 0.5):.1f} ms  p99 {pct(idle, 0.99):.1f} ms")
    print(f"normal requests attacked: p50 {pct(attacked, 0.5):.1f} ms  "
          f"p99 {pct(attacked, 0.99):.1f} ms  (x{pct(attacked, 0.99) / pct(idle, 0.99):.2f})")
    print(f"gateway open fds: idle {fds_idle}, during the attack {min(seen)}..{max(seen)} "
          f"(median {sorted(seen)[len(seen) // 2]}), after {fds_after}, back to idle "
          f"{back:.2f} s after the attacker stopped reopening "
          f"(attacker still holding its ends: {still_holding})")
    return 0 if fds_after <= fds_idle else 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--attackers", type=int, default=2000)
    p.add_argument("--header-timeout", type=float, default=1.0)
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--upstream", nargs=2, metavar=("PORT", "DIALECT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.upstream:
        upstream(int(args.upstream[0]), args.upstream[1])
        return
    sys.exit(asyncio.run(amain(args)))


if __name__ == "__main__":
    main()
