"""Two gateway processes (real ``chat-gateway serve`` subprocesses) on one PostgreSQL: what one
stores the other serves, concurrent writers to one chat lose and duplicate nothing, and a chat
deleted through one is gone from both."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import orjson
import pytest
from fakes import free_port
from history_support import gateway_config
from pg import PostgresServer

H = "/chat-history"


async def _wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            try:
                async with s.get(base + "/readyz") as r:
                    if r.status == 200 and (await r.json())["history"]["healthy"]:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"{base} did not become ready: {log.read_text()}")


@pytest.mark.timeout(180)
async def test_two_replicas_share_one_history(postgres: PostgresServer, tmp_path: Path) -> None:
    config = tmp_path / "gw.yaml"
    config.write_bytes(orjson.dumps(gateway_config(postgres.url(postgres.new_database()))))
    ports = [free_port(), free_port()]
    procs: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / f"replica{i}.log" for i in range(2)]
    for port, log in zip(ports, logs, strict=True):
        with log.open("wb") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve", "--config", str(config),
                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT))
    bases = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        for base, proc, log in zip(bases, procs, logs, strict=True):
            await _wait_ready(base, proc, log)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            async with s.post(bases[0] + H, json={"mode": "standard", "title": "shared"}) as r:
                chat = await r.json()

            async def put(i: int) -> int:
                # Both spellings, both replicas: the spec's PUT .../messages, the app's PUT.
                path = f"{H}/{chat['id']}/messages" if i % 4 < 2 else f"{H}/{chat['id']}"
                message = {"messageId": f"m{i:03d}", "role": "user", "content": f"#{i}"}
                async with s.put(bases[i % 2] + path, json={"messages": [message]}) as r:
                    await r.read()
                    return r.status

            assert await asyncio.gather(*(put(i) for i in range(100))) == [200] * 100

            seen = []
            for base in bases * 2:  # each replica, twice
                async with s.get(f"{base}{H}/{chat['id']}/messages") as r:
                    assert r.status == 200
                    seen.append([m["messageId"] for m in await r.json()])
            assert sorted(seen[0]) == [f"m{i:03d}" for i in range(100)]  # each exactly once
            assert all(order == seen[0] for order in seen)  # one stable order, everywhere
            for base in bases:
                async with s.get(base + H + "?mode=standard") as r:
                    (summary,) = await r.json()
                    assert summary["messageCount"] == 100
                    assert summary["lastMessage"] == f"#{int(seen[0][-1][1:])}"

            async with s.delete(f"{bases[0]}{H}/{chat['id']}?mode=standard") as r:
                assert await r.json() == {"success": True}
            for base in bases:
                async with s.get(f"{base}{H}/{chat['id']}/messages") as r:
                    assert r.status == 404
                async with s.get(base + H + "?mode=standard") as r:
                    assert await r.json() == []
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
    for proc, log in zip(procs, logs, strict=True):
        assert proc.returncode == 0, log.read_text()
