"""The history API's speed, on SQLite and on PostgreSQL (docs/history.md has the figures).

    python bench/history_bench.py                 # both stores
    python bench/history_bench.py --store sqlite  # one
    python bench/history_bench.py --json out.json

For each store: a ``chat-gateway serve`` process (pinned to one core; this driver on the other)
serving the history on a fresh database (SQLite in WAL mode in a temporary directory, or a
PostgreSQL cluster of Debian's binaries with its default durability, made by tests/pg.py), then,
through HTTP on loopback:

- list 1,000 chats (``GET {path}?mode=standard&limit=1000``), target p50 < 50 ms;
- read a 1,000-message chat (``GET {path}/{id}/messages``), target p50 < 50 ms;
- PUT two new messages to a chat, target p50 < 10 ms;
- 50 concurrent writers, each PUTting two messages 20 times, on 50 chats and on one chat:
  no error, and every message stored exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from procs import Proc, cpu_seconds, free_port, split_cores, wait_ready

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from pg import PostgresServer  # noqa: E402  (tests/pg.py: the same launcher the tests use)

from gateway.dialects import names  # noqa: E402

H = "/chat-history"
TARGETS_MS = {"list 1,000 chats": 50.0, "read 1,000 messages": 50.0, "PUT 2 messages": 10.0}


def _config(store: str, port: int) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port, "max_body_bytes": 8 * 1024 * 1024},
        "logging": {"level": "warning"},
        # any dialects: the history API does not use the chat route
        "upstreams": {"u": {"dialect": names()[0], "url": "http://127.0.0.1:9/v1"}},
        "routes": [{"path": "/api/chat", "dialect": names()[0], "upstream": "u"}],
        "history": {"store": store, "pool_size": 10},
    }


def _message(chat: int, i: int) -> dict[str, Any]:
    return {"messageId": f"c{chat}-m{i}", "conversationId": f"c{chat}", "status": "completed",
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"message {i}: " + "some words of a chat message " * 4,
            "contentType": "text", "sources": [], "error": None,
            "createdAt": "2026-11-01T10:00:00.000Z"}


async def _timed(n: int, call: Callable[[], Awaitable[int]], gw: Proc) -> dict[str, Any]:
    """Wall time of ``n`` calls one after the other, and the gateway's CPU time per call (less
    sensitive than wall time to whatever else the machine runs)."""
    times, errors = [], 0
    cpu = cpu_seconds(gw.pids())
    for _ in range(n):
        t = time.perf_counter()
        status = await call()
        times.append((time.perf_counter() - t) * 1000)
        errors += status != 200
    cpu_ms = (cpu_seconds(gw.pids()) - cpu) * 1000 / n
    times.sort()
    return {"n": n, "p50_ms": statistics.median(times), "p95_ms": times[int(0.95 * (n - 1))],
            "gateway_cpu_ms": cpu_ms, "errors": errors}


async def bench_store(kind: str, url: str, cores: Any, log_dir: Path,
                      repeat: int) -> dict[str, Any]:
    port = free_port()
    config = log_dir / f"{kind}.json"
    config.write_bytes(orjson.dumps(_config(url, port)))
    gw = Proc(f"gateway-{kind}", [sys.executable, "-m", "gateway", "serve", "--config",
                                  str(config)], cores.server, log_dir / f"{kind}.log")
    base = f"http://127.0.0.1:{port}"
    out: dict[str, Any] = {"store": kind}
    try:
        await wait_ready(gw, base + "/healthz", 60)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            async def post(body: dict[str, Any]) -> dict[str, Any]:
                async with s.post(base + H, json=body) as r:
                    assert r.status == 200, await r.text()
                    result: dict[str, Any] = await r.json()
                    return result

            async def put(chat: str, msgs: list[dict[str, Any]]) -> int:
                async with s.put(f"{base}{H}/{chat}/messages", json={"messages": msgs}) as r:
                    await r.read()
                    return r.status

            async def get(path: str) -> int:
                async with s.get(base + path) as r:
                    await r.read()
                    return r.status

            chats = [(await post({"mode": "standard", "title": f"chat {i}"}))["id"]
                     for i in range(1000)]
            big = chats[0]
            for start in range(0, 1000, 100):
                assert await put(big, [_message(0, i) for i in range(start, start + 100)]) == 200
            async with s.get(f"{base}{H}?mode=standard&limit=1000") as r:
                assert len(await r.json()) == 1000
            async with s.get(f"{base}{H}/{big}/messages") as r:
                assert len(await r.json()) == 1000

            out["list 1,000 chats"] = await _timed(
                repeat, lambda: get(f"{H}?mode=standard&limit=1000"), gw)
            out["read 1,000 messages"] = await _timed(
                repeat, lambda: get(f"{H}/{big}/messages"), gw)
            target = chats[1]
            counter = iter(range(10**6))

            def two() -> list[dict[str, Any]]:
                i = next(counter)
                return [_message(1, 2 * i), _message(1, 2 * i + 1)]
            out["PUT 2 messages"] = await _timed(repeat * 4, lambda: put(target, two()), gw)

            for label, chat_of in (("50 writers, 50 chats", lambda w: chats[100 + w]),
                                   ("50 writers, one chat", lambda w: chats[2])):
                async def writer(w: int, chat_of: Callable[[int], str] = chat_of) -> int:
                    errors = 0
                    for i in range(20):
                        msgs = [_message(w, 2 * i), _message(w, 2 * i + 1)]
                        errors += await put(chat_of(w), msgs) != 200
                    return errors
                t = time.perf_counter()
                errors = sum(await asyncio.gather(*(writer(w) for w in range(50))))
                wall = time.perf_counter() - t
                counts = []
                for chat in sorted({chat_of(w) for w in range(50)}):
                    async with s.get(f"{base}{H}/{chat}/messages") as r:
                        ids = [m["messageId"] for m in await r.json()]
                        counts.append(len(ids) == len(set(ids)))
                        out.setdefault(label + " stored", 0)
                        out[label + " stored"] += len(ids)
                out[label] = {"errors": errors, "puts": 1000, "seconds": wall,
                              "puts_per_s": 1000 / wall, "no_duplicates": all(counts)}
    finally:
        gw.stop()
    return out


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| store | measure | p50 ms | p95 ms | target p50 | gateway CPU ms/call | errors |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        for name, target in TARGETS_MS.items():
            m = r[name]
            lines.append(f"| {r['store']} | {name} (n={m['n']}) | {m['p50_ms']:.2f} | "
                         f"{m['p95_ms']:.2f} | < {target:.0f} | {m['gateway_cpu_ms']:.2f} | "
                         f"{m['errors']} |")
        for label in ("50 writers, 50 chats", "50 writers, one chat"):
            m = r[label]
            lines.append(f"| {r['store']} | {label}: {m['puts']} PUTs, {m['puts_per_s']:.0f}/s, "
                         f"{r[label + ' stored']} messages stored, duplicates: "
                         f"{'none' if m['no_duplicates'] else 'YES'} | | | no error | | "
                         f"{m['errors']} |")
    return "\n".join(lines)


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", choices=("sqlite", "postgresql", "both"), default="both")
    p.add_argument("--repeat", type=int, default=50, help="timed calls per read measure "
                   "(4x as many PUTs)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--no-pin", action="store_true",
                   help="leave the gateway and the driver to the scheduler (a busy machine)")
    args = p.parse_args()
    cores = split_cores(no_pin=args.no_pin)
    load_before = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory(prefix="history-bench-") as tmp:
        work = Path(tmp)
        if args.store in ("sqlite", "both"):
            results.append(await bench_store("sqlite", f"sqlite:///{work}/history.db", cores,
                                             work, args.repeat))
        if args.store in ("postgresql", "both"):
            pg = PostgresServer().start(durable=True)
            try:
                results.append(await bench_store("postgresql", pg.url(pg.new_database()),
                                                 cores, work, args.repeat))
            finally:
                pg.stop()
    pinning = (f"gateway on {cores.server}, driver on {cores.generator}" if cores.pinned
               else "not pinned")
    print(f"load average before the run: {load_before:.2f}; {pinning}")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    failed = any(r[k]["p50_ms"] >= t for r in results for k, t in TARGETS_MS.items()) or any(
        r[label]["errors"] or not r[label]["no_duplicates"] for r in results
        for label in ("50 writers, 50 chats", "50 writers, one chat"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
