"""The operator's endpoints (``/metrics``, ``/api/status``, ``/``, ``/static/*``,
``/admin/reload``): key-guarded on the main port when ``auth.api_keys`` is set, open without
keys, and on their own listener with ``server.admin_port`` (the main port then answers 404 for
them), with every worker of ``--workers 2`` sharing that listener. Health probes stay open."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient
from fakes import dialect_at, free_port

from gateway import cli
from gateway.admin import create_admin_app
from gateway.app import create_app
from gateway.config import parse_config
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

ADMIN_GETS = ("/metrics", "/api/status", "/", "/static/status.css", "/admin/usage")
KEY = "k-admin-1"
ANY = dialect_at(1)  # the route's dialect does not matter here


async def _never(req: UpstreamRequest) -> MemoryResponse:
    raise AssertionError("no upstream is needed here")


def config(**server: Any) -> dict[str, Any]:
    return {"server": server,
            "upstreams": {"u": {"dialect": ANY, "url": "http://u.test/chat"}},
            "routes": [{"path": "/c", "dialect": ANY, "upstream": "u"}]}


async def start(aiohttp_client: Any, cfg: dict[str, Any]) -> TestClient[Any, Any]:
    app = create_app(parse_config(cfg, env={}), transport=MemoryTransport(_never))
    client: TestClient[Any, Any] = await aiohttp_client(app)
    return client


async def status_of(client: TestClient[Any, Any], method: str, path: str,
                    headers: dict[str, str] | None = None) -> int:
    async with client.request(method, path, headers=headers or {}) as resp:
        await resp.read()
        return resp.status


async def test_with_keys_and_no_admin_port_the_operator_endpoints_need_a_key(
        aiohttp_client: Any) -> None:
    client = await start(aiohttp_client, {**config(), "auth": {"api_keys": [KEY]}})
    for path in ADMIN_GETS:
        async with client.get(path) as resp:
            assert resp.status == 401, path
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")
            assert (await resp.json())["error"]["code"] == "UNAUTHORIZED"
        assert await status_of(client, "GET", path, {"Authorization": f"Bearer {KEY}"}) == 200
        assert await status_of(client, "GET", path, {"api-key": KEY}) == 200
        assert await status_of(client, "GET", path, {"Authorization": "Bearer wrong"}) == 401
    assert await status_of(client, "POST", "/admin/reload") == 401
    # With a key it is the reload's own answer (this app has no config file to reload).
    assert await status_of(client, "POST", "/admin/reload", {"x-api-key": KEY}) == 400
    for probe in ("/healthz", "/readyz"):  # probes carry no key: they stay open
        assert await status_of(client, "GET", probe) == 200


async def test_without_keys_they_are_open_as_before(aiohttp_client: Any) -> None:
    client = await start(aiohttp_client, config())
    for path in ADMIN_GETS:
        assert await status_of(client, "GET", path) == 200, path


async def test_the_admin_port_serves_them_and_the_main_port_no_longer_does(
        aiohttp_client: Any) -> None:
    cfg = {**config(admin_port=0), "auth": {"api_keys": [KEY]}}
    app = create_app(parse_config(cfg, env={}), transport=MemoryTransport(_never))
    main: TestClient[Any, Any] = await aiohttp_client(app)
    admin: TestClient[Any, Any] = await aiohttp_client(create_admin_app(app))
    for path in ADMIN_GETS:
        # The admin listener is the boundary (bind it where only operators reach): no key.
        assert await status_of(admin, "GET", path) == 200, path
        assert await status_of(main, "GET", path, {"Authorization": f"Bearer {KEY}"}) == 404
    assert await status_of(main, "POST", "/admin/reload") == 404
    assert await status_of(admin, "POST", "/admin/reload") == 400  # loopback: reload refused
    for probe in ("/healthz", "/readyz"):
        assert await status_of(main, "GET", probe) == 200
        assert await status_of(admin, "GET", probe) == 200
    assert await status_of(admin, "POST", "/c") == 404  # no chat on the admin port
    # Both listeners share one state: the main port's refusals show in the admin's metrics.
    assert await status_of(main, "POST", "/c") == 401
    metrics = await (await admin.get("/metrics")).text()
    assert 'route="/c",status="401"' in metrics
    snapshot = await (await admin.get("/api/status")).json()
    assert [r["path"] for r in snapshot["routes"]] == ["/c"]


def test_the_admin_port_must_differ_from_the_main_port() -> None:
    from gateway.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        parse_config(config(port=8080, admin_port=8080), env={})
    assert any(w == "server" and "admin_port" in m for w, m in e.value.problems), \
        e.value.problems


async def test_the_reload_command_sends_the_key_it_is_given(
        aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    client = await start(aiohttp_client, {**config(), "auth": {"api_keys": [KEY]}})
    base = str(client.make_url("/"))
    monkeypatch.delenv("CHAT_GATEWAY_KEY", raising=False)
    assert await asyncio.to_thread(cli.main, ["reload", "--url", base]) == 1
    assert "UNAUTHORIZED" in capsys.readouterr().err
    monkeypatch.setenv("CHAT_GATEWAY_KEY", KEY)
    assert await asyncio.to_thread(cli.main, ["reload", "--url", base]) == 1
    assert "not started from a config file" in capsys.readouterr().err  # past the key


@pytest.mark.timeout(90)
async def test_two_workers_share_the_admin_port(tmp_path: Path) -> None:
    port, admin_port = free_port(), free_port()
    cfg = tmp_path / "gw.yaml"
    cfg.write_bytes(orjson.dumps({
        **config(host="127.0.0.1", port=port, admin_port=admin_port),
        "logging": {"level": "warning"}}))  # JSON is YAML
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--workers", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    try:
        async with aiohttp.ClientSession() as s:
            pids: set[int] = set()
            deadline = time.monotonic() + 60
            # Each worker listens on the admin port too: the kernel spreads new connections
            # over them, and every page names the worker that served it.
            while len(pids) < 2 and time.monotonic() < deadline:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                with contextlib.suppress(aiohttp.ClientError):
                    async with aiohttp.ClientSession() as fresh, \
                            fresh.get(admin + "/api/status") as r:
                        if r.status == 200:
                            pids.add((await r.json())["worker"]["pid"])
                await asyncio.sleep(0.05)
            assert len(pids) == 2, pids
            async with s.get(base + "/metrics") as r:
                assert r.status == 404
            async with s.get(admin + "/metrics") as r:
                assert r.status == 200 and b"gateway_requests_total" in await r.read()
            async with s.get(base + "/healthz") as r:
                assert r.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    stdout, stderr = (p.read().decode() if p else "" for p in (proc.stdout, proc.stderr))
    assert proc.returncode == 0, stderr
    assert "worker_restarted" not in stdout and "Traceback" not in stderr  # none failed to bind

