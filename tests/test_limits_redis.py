"""The limits shared on a real Redis, under load and faults:

- three gateway processes (real ``chat-gateway serve`` subprocesses) on one Redis, 2,000
  concurrent requests on a key limited to 500 a minute: exactly 500 admitted, whichever replica
  each reached;
- a token budget never admits a request once spent, so it overshoots by one reservation at most;
- streams cut at random, by the client or by the upstream: what is settled is what the upstream
  reported for every stream that ended, and for each cut one an estimate within its documented
  bounds; no reservation is left behind;
- Redis killed and restarted mid-load: no crash, the policy answers while it is away, the limits
  come back without a restart, and no counter is stuck.
"""

from __future__ import annotations

import asyncio
import io
import math
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import structlog
from aiohttp.test_utils import TestClient
from fakes import USAGE, Fakes, Script, client_request, eventually, free_port, upstream_config
from redis_server import RedisServer

from gateway.app import create_app
from gateway.config import LimitsConfig, parse_config
from gateway.dialects import get, names
from gateway.log import configure_logging
from gateway.token_count import CHARS_PER_TOKEN, estimate

KEY = "shared-key-9f3c"
OPERATOR_KEY = "operator-key-1d2e"
OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}
REPORTING = [n for n in names() if get(n).capabilities.usage_stream]


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    saved = structlog.get_config()
    buf = io.StringIO()
    configure_logging(stream=buf, level="info")
    yield buf
    structlog.configure(**saved)


def gateway_config(upstream: dict[str, Any], dialect: str, store: str,
                   **limits: Any) -> dict[str, Any]:
    return {"logging": {"level": "warning"},
            "upstreams": {"u": upstream},
            "routes": [{"path": "/a", "dialect": dialect, "upstream": "u"}],
            "auth": {"api_keys": [OPERATOR_KEY],
                     "keys": [{"name": "shared", "key": KEY, "limits": limits}]},
            "limits": {"store": store}}


async def _wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            try:
                async with s.get(base + "/readyz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"{base} did not become ready: {log.read_text()}")


@pytest.mark.timeout(180)
async def test_three_replicas_admit_exactly_the_limit(redis_server: RedisServer, fakes: Fakes,
                                                      tmp_path: Path) -> None:
    d = names()[0]
    fake = await fakes.start(d)
    config = tmp_path / "gw.yaml"
    config.write_bytes(orjson.dumps(gateway_config(
        upstream_config(fake), d, redis_server.url(), requests_per_minute=500)))
    ports = [free_port() for _ in range(3)]
    logs = [tmp_path / f"replica{i}.log" for i in range(3)]
    procs: list[subprocess.Popen[bytes]] = []
    for port, log in zip(ports, logs, strict=True):
        with log.open("wb") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve", "--config", str(config),
                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT))
    bases = [f"http://127.0.0.1:{p}" for p in ports]
    path, body, headers = client_request(d, "/a", stream=False)
    raw = orjson.dumps(body)
    try:
        for base, proc, log in zip(bases, procs, logs, strict=True):
            await _wait_ready(base, proc, log)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            start = asyncio.Event()

            async def one(i: int) -> int:
                await start.wait()
                async with s.post(bases[i % 3] + path, data=raw, headers={
                        **headers, "Content-Type": "application/json",
                        "Authorization": f"Bearer {KEY}"}) as r:
                    await r.read()
                    return r.status

            tasks = [asyncio.create_task(one(i)) for i in range(2000)]
            await asyncio.sleep(0)
            start.set()
            statuses = Counter(await asyncio.gather(*tasks))
            assert statuses == {200: 500, 429: 1500}
            assert len(fake.seen) == 500
            for base in bases:  # every replica reads the same counters
                async with s.get(base + "/admin/usage", headers=OPERATOR) as r:
                    (key,) = (await r.json())["keys"]
                    assert key["windows"]["requests_per_minute"]["used"] == 500
                    assert key["totals"]["requests"] == 500
                    assert key["totals"]["limited"] == 1500
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


async def _app(aiohttp_client: Any, cfg: dict[str, Any]) -> TestClient[Any, Any]:
    gw: TestClient[Any, Any] = await aiohttp_client(
        create_app(parse_config(cfg, env={})), server_kwargs={"handler_cancellation": True})
    return gw


async def test_a_spent_token_budget_admits_no_more(aiohttp_client: Any, fakes: Fakes,
                                                  redis_server: RedisServer) -> None:
    d = names()[0]
    release = asyncio.Event()
    fake = await fakes.start(d, Script(hold_before=release))
    budget = 10_000
    cfg = gateway_config(upstream_config(fake), d, redis_server.url(), tokens_per_minute=budget)
    gws = [await _app(aiohttp_client, cfg) for _ in range(2)]  # two replicas
    path, body, headers = client_request(d, "/a", stream=False)
    reserve = estimate(get(d).parse_request(body)) + body_max_tokens(d, body)
    statuses: list[int] = []

    async def one(i: int) -> None:
        async with gws[i % 2].post(path, json=body, headers={
                **headers, "Authorization": f"Bearer {KEY}"}) as r:
            await r.read()
            statuses.append(r.status)

    tasks = [asyncio.create_task(one(i)) for i in range(100)]
    # every admission decided (the admitted wait at the upstream) before any settles
    await eventually(lambda: len(fake.seen) + statuses.count(429) == 100, within=60)
    admitted = len(fake.seen)
    assert admitted == (budget - 1) // reserve + 1  # admitted while the budget had room
    release.set()
    await asyncio.gather(*tasks)
    assert Counter(statuses) == {200: admitted, 429: 100 - admitted}


def body_max_tokens(dialect: str, body: Any) -> int:
    """The request's own output cap, else what the config reserves for one without."""
    cap = get(dialect).parse_request(body).sampling.get("max_tokens")
    return cap if isinstance(cap, int) else LimitsConfig().default_output_tokens


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dialect", REPORTING)
async def test_cut_streams_settle_what_was_reported_or_a_bounded_estimate(
        aiohttp_client: Any, fakes: Fakes, redis_server: RedisServer, dialect: str) -> None:
    rng = random.Random(45)
    pieces = 8
    fake = await fakes.start(dialect, Script(scripted=True, pieces=pieces, chunk_delay=0.005))
    cfg = gateway_config(upstream_config(fake), dialect, redis_server.url(),
                         tokens_per_day=10**8, max_concurrent=100)
    gws = [await _app(aiohttp_client, cfg) for _ in range(2)]
    path, body, headers = client_request(dialect, "/a", stream=True)
    prompt = estimate(get(dialect).parse_request(body))
    auth = {**headers, "Authorization": f"Bearer {KEY}"}

    async with gws[0].post(path, json=body, headers=auth) as r:  # a whole stream's bytes
        full = len(await r.read())

    plans: list[tuple[str, int]] = []
    for _ in range(30):
        roll = rng.random()
        if roll < 0.4:
            plans.append(("whole", 0))
        elif roll < 0.8:  # the client leaves after some bytes
            plans.append(("client", rng.randrange(1, full // 2)))
        else:  # the upstream drops the connection after some pieces
            plans.append(("upstream", rng.randrange(1, pieces)))
    for kind, at in plans:  # each stream's script, in the order the requests go
        if kind == "upstream":
            fake.queue.append(Script(scripted=True, pieces=pieces, die_after=at))
        else:
            fake.queue.append(Script(scripted=True, pieces=pieces,
                                     chunk_delay=0.02 if kind == "client" else 0.0))

    async def one(i: int, kind: str, at: int) -> tuple[str, int]:
        async with gws[i % 2].post(path, json=body, headers=auth) as r:
            assert r.status == 200
            if kind != "client":
                return kind, len(await r.read())
            got = 0
            async for chunk in r.content.iter_any():
                got += len(chunk)
                if got >= at:
                    break
            r.close()  # the client goes away mid-stream
            return kind, got

    done = []
    for i, (kind, at) in enumerate(plans):  # in order: the fake's queue pairs them up
        done.append(await one(i, kind, at))
    await _settled(gws[0], 1 + len(plans))

    whole = 1 + sum(1 for kind, _ in done if kind == "whole")
    # cut by the upstream: the client read all the gateway sent, so the estimate is exact
    by_upstream = sum(prompt + math.ceil(got / CHARS_PER_TOKEN)
                      for kind, got in done if kind == "upstream")
    # cut by the client: the gateway sent at least what the client read, at most a whole stream
    low = sum(prompt + math.ceil(got / CHARS_PER_TOKEN) for kind, got in done if kind == "client")
    high = sum(prompt + math.ceil(full / CHARS_PER_TOKEN) for kind, _ in done if kind == "client")
    assert 0 < low < high
    totals, windows, in_flight = await _usage(gws[1])
    assert totals["tokens"] - totals["estimated_tokens"] == whole * sum(USAGE)
    assert totals["prompt_tokens"] + totals["completion_tokens"] == totals["tokens"]
    assert low <= totals["estimated_tokens"] - by_upstream <= high
    assert windows["tokens_per_day"]["used"] == totals["tokens"]  # no reservation left
    assert in_flight == 0


async def _usage(gw: TestClient[Any, Any]) -> tuple[dict[str, int], dict[str, Any], int]:
    async with gw.get("/admin/usage", headers=OPERATOR) as r:
        (key,) = (await r.json())["keys"]
        return key["totals"], key["windows"], key["in_flight"]


async def _settled(gw: TestClient[Any, Any], requests: int) -> None:
    """Until every request's settlement reached the store (they run off the request's path)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        totals, _, in_flight = await _usage(gw)
        if totals["requests"] == requests and in_flight == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not settled: {await _usage(gw)}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("policy", ["allow", "deny"])
async def test_redis_killed_and_restarted_mid_load(aiohttp_client: Any, fakes: Fakes,
                                                   redis_server: RedisServer,
                                                   logs: io.StringIO, policy: str) -> None:
    d = names()[0]
    fake = await fakes.start(d, Script(delay=0.005))
    workers = 8
    cfg = gateway_config(upstream_config(fake), d, redis_server.url(),
                         requests_per_minute=10**6, tokens_per_day=10**8,
                         max_concurrent=workers)  # a slot left stuck would refuse a worker
    cfg["limits"].update(on_store_error=policy, retry_interval=0.1)
    cfg["logging"] = {"level": "info"}
    gws = [await _app(aiohttp_client, cfg) for _ in range(2)]
    path, body, headers = client_request(d, "/a", stream=False)
    auth = {**headers, "Authorization": f"Bearer {KEY}"}
    seen: list[tuple[float, float, int, bool]] = []  # started, ended, status, limit headers
    stop = asyncio.Event()

    async def worker(i: int) -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            async with gws[i % 2].post(path, json=body, headers=auth) as r:
                await r.read()
                seen.append((t0, time.monotonic(), r.status,
                             "x-ratelimit-limit-requests" in r.headers))

    load = [asyncio.create_task(worker(i)) for i in range(workers)]
    await asyncio.sleep(0.3)
    alive_until = time.monotonic()
    redis_server.kill()
    killed = time.monotonic()  # gone for good
    await asyncio.sleep(0.5)
    restarting = time.monotonic()
    redis_server.start()  # empty, on the same port, as after a crash
    restarted = time.monotonic()
    await eventually(lambda: any(h for t0, _, _, h in seen if t0 > restarted), within=10)
    await asyncio.sleep(0.5)
    stop.set()
    await asyncio.gather(*load)  # no worker failed: every request had an answer

    statuses = Counter(status for _, _, status, _ in seen)
    assert set(statuses) <= ({200} if policy == "allow" else {200, 503}), statuses
    away = [(status, h) for t0, t1, status, h in seen if t0 > killed and t1 < restarting]
    assert away, "no request while Redis was away"
    assert set(away) == ({(200, False)} if policy == "allow" else {(503, False)})
    assert all(status == 200 and h for _, t1, status, h in seen if t1 < alive_until)
    # once one request found the store again, every later one is limited again
    again = min(t0 for t0, _, _, h in seen if h and t0 > restarted)
    back = [(status, h) for t0, _, status, h in seen if t0 > again + 0.2]
    assert back and set(back) == {(200, True)}

    totals, windows, _ = await _usage(gws[0])
    await _settled(gws[0], totals["requests"])  # and nothing left in flight
    assert windows["requests_per_minute"]["used"] == totals["requests"] > 0
    events = [orjson.loads(line).get("event") for line in logs.getvalue().splitlines()]
    assert events.count("limits_store_unreachable") >= 1
    assert events.count("limits_store_recovered") >= 1
    assert "internal_error" not in events
    async with gws[0].get("/metrics", headers=OPERATOR) as r:
        assert 'gateway_limits_store_errors_total{op="admit"}' in await r.text()


async def test_a_client_gone_while_redis_admits_leaves_nothing_behind(
        aiohttp_client: Any, fakes: Fakes, redis_server: RedisServer) -> None:
    d = names()[0]
    fake = await fakes.start(d)
    cfg = gateway_config(upstream_config(fake), d, redis_server.url(),
                         tokens_per_minute=10**6, max_concurrent=5)
    gw = await _app(aiohttp_client, cfg)
    path, body, headers = client_request(d, "/a", stream=False)
    auth = {**headers, "Authorization": f"Bearer {KEY}"}
    async with gw.post(path, json=body, headers=auth) as r:  # connects, loads the scripts
        assert r.status == 200
    await _settled(gw, 1)
    first, _, _ = await _usage(gw)
    pauser = redis_client(redis_server)
    try:
        await pauser.execute_command("CLIENT", "PAUSE", "500", "ALL")  # Redis answers late
        with pytest.raises(TimeoutError):
            async with gw.post(path, json=body, headers=auth,
                               timeout=aiohttp.ClientTimeout(total=0.2)) as r:
                await r.read()
        # Redis admitted it when it woke up; the request was gone: all given back
        # Redis admitted it when it woke up; the request was gone: all given back
        await _settled(gw, 2)
    finally:
        await pauser.aclose()
    totals, windows, in_flight = await _usage(gw)
    assert totals["requests"] == 2 and in_flight == 0
    assert windows["tokens_per_minute"]["used"] == totals["tokens"] == first["tokens"] > 0
    assert len(fake.seen) == 1


def redis_client(server: RedisServer) -> Any:
    import redis.asyncio as aioredis

    return aioredis.Redis.from_url(server.url())
