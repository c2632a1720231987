"""Operating the gateway with real tools: Prometheus scrapes it, promtool checks its metrics,
headless Chromium renders its status page, and ``--workers 2`` sums metrics across workers.

These need Debian's ``prometheus`` and ``chromium`` packages, which ``.ci/run`` installs; a
missing tool is a failure, never a skip.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.config import parse_config
from gateway.demo import demo_backend_app

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _require(tool: str) -> None:
    assert os.path.exists(tool), f"{tool} is missing: install Debian's package (.ci/run does)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(upstream_port: int, port: int = 0) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "logging": {"level": "warning"},
        "upstreams": {"llm": {"dialect": "openai", "model": "m",
                              "url": f"http://127.0.0.1:{upstream_port}/v1/chat/completions"}},
        "routes": [{"path": "/chat", "dialect": "protocol-2024-05-29", "upstream": "llm"}],
    }


async def _start_upstream() -> TestServer:
    server = TestServer(demo_backend_app("openai"), host="127.0.0.1")
    await server.start_server()
    return server


async def _traffic(base: str, n: int) -> None:
    body = orjson.dumps({"messages": [{"role": "user", "content": "hi"}]})
    async with aiohttp.ClientSession() as s:
        for i in range(n):
            path = "/chat/stream" if i % 2 else "/chat"
            async with s.post(base + path, data=body,
                              headers={"Content-Type": "application/json"}) as r:
                assert r.status == 200
                await r.read()


async def _gateway(upstream: TestServer) -> TestServer:
    assert upstream.port is not None
    server = TestServer(create_app(parse_config(_config(upstream.port))), host="127.0.0.1")
    await server.start_server()
    return server


@pytest.mark.timeout(120)
async def test_prometheus_scrapes_requests_and_ttft(tmp_path: Path) -> None:
    _require(PROMETHEUS)
    upstream = await _start_upstream()
    gateway = await _gateway(upstream)
    prom_port = _free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: gateway\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{gateway.port}']}}]\n")
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await _traffic(f"http://127.0.0.1:{gateway.port}", 6)
        api = f"http://127.0.0.1:{prom_port}/api/v1/query"
        queries = {
            "requests": 'sum(gateway_requests_total{route="/chat",status="200"})',
            "ttft": 'sum(gateway_time_to_first_token_seconds_count{route="/chat"})',
        }
        got: dict[str, float] = {}
        deadline = time.monotonic() + 60
        async with aiohttp.ClientSession() as s:
            while time.monotonic() < deadline and (
                    got.get("requests", 0) < 6 or got.get("ttft", 0) < 6):
                await asyncio.sleep(1)
                for name, q in queries.items():
                    try:
                        async with s.get(api, params={"query": q}) as r:
                            data = await r.json()
                    except aiohttp.ClientError:
                        continue
                    result = data.get("data", {}).get("result", [])
                    if result:
                        got[name] = float(result[0]["value"][1])
        assert got.get("requests") == 6, got
        assert got.get("ttft") == 6, got
    finally:
        prom.send_signal(signal.SIGTERM)
        prom.wait(timeout=20)
        await gateway.close()
        await upstream.close()


async def test_promtool_accepts_metrics_output() -> None:
    _require(PROMTOOL)
    upstream = await _start_upstream()
    gateway = await _gateway(upstream)
    try:
        await _traffic(f"http://127.0.0.1:{gateway.port}", 2)
        async with aiohttp.ClientSession() as s, \
                s.get(f"http://127.0.0.1:{gateway.port}/metrics") as r:
            text = await r.read()
        assert b"gateway_requests_total" in text
        proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text,
                              capture_output=True, timeout=30)
        assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    finally:
        await gateway.close()
        await upstream.close()


@pytest.mark.timeout(90)
async def test_status_page_in_headless_chromium(tmp_path: Path) -> None:
    _require(CHROMIUM)
    upstream = await _start_upstream()
    gateway = await _gateway(upstream)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--virtual-time-budget=5000", "--window-size=1200,800"]
    url = f"http://127.0.0.1:{gateway.port}/"
    try:
        await _traffic(f"http://127.0.0.1:{gateway.port}", 4)
        shot = tmp_path / "status.png"
        dom, _ = await asyncio.gather(
            _run([CHROMIUM, *flags, f"--user-data-dir={tmp_path / 'p1'}", "--dump-dom", url]),
            _run([CHROMIUM, *flags, f"--user-data-dir={tmp_path / 'p2'}",
                  f"--screenshot={shot}", url]),
        )
        html = dom.decode()
        assert '<tr data-path="/chat">' in html, html[:2000]
        assert "protocol-2024-05-29" in html
        assert '<tr data-upstream="llm">' in html
        assert '<td class="up">up</td>' in html
        row = html.split('<tr data-path="/chat">', 1)[1].split("</tr>", 1)[0]
        assert '<td class="num">4</td>' in row  # requests in the last minute
        assert "Updated <span id=\"updated\">never" not in html
        assert shot.exists() and shot.stat().st_size > 1000
    finally:
        await gateway.close()
        await upstream.close()


async def _run(cmd: list[str]) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        raise
    assert proc.returncode == 0, cmd
    return out


@pytest.mark.timeout(90)
async def test_two_workers_share_a_port_and_sum_metrics(tmp_path: Path) -> None:
    upstream = await _start_upstream()
    port = _free_port()
    assert upstream.port is not None
    cfg = tmp_path / "gw.yaml"
    cfg.write_bytes(orjson.dumps(_config(upstream.port, port)))  # JSON is YAML
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--workers", "2"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        await _wait_ready(base, proc)
        await _traffic(base, 20)
        pids = await _worker_pids(proc.pid)
        assert len(pids) == 2, pids
        async with aiohttp.ClientSession() as s:
            totals = set()
            for _ in range(6):  # whichever worker answers, it reports the sum over both
                async with s.get(base + "/metrics") as r:
                    text = (await r.read()).decode()
                totals.add(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                               if line.startswith("gateway_requests_total{")))
        assert totals == {20.0}, totals
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        await upstream.close()
    assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""


async def _wait_ready(base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                async with s.get(base + "/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise AssertionError("the gateway did not start")


async def _worker_pids(parent: int) -> list[int]:
    """The supervisor's worker children (multiprocessing also starts a resource tracker)."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return [int(c) for c in children
            if b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes()]


def test_status_page_is_self_contained() -> None:
    html = (Path(__file__).parent.parent / "gateway/static/status.html").read_text()
    assert "http://" not in html and "https://" not in html  # no CDN
    assert "/api/status" in html


async def test_status_api_reports_routes_and_health(aiohttp_client: Any) -> None:
    upstream = await _start_upstream()
    assert upstream.port is not None
    client = await aiohttp_client(create_app(parse_config(_config(upstream.port))))
    try:
        r = await client.post("/chat", json={"messages": [{"role": "user", "content": "x"}]})
        assert r.status == 200
        data = await (await client.get("/api/status")).json()
        assert data["routes"][0]["path"] == "/chat"
        assert data["routes"][0]["traffic"]["requests"] >= 1
        assert data["upstreams"][0] == {
            "name": "llm", "dialect": "openai", "healthy": True, "consecutive_failures": 0,
            "url": f"http://127.0.0.1:{upstream.port}/v1/chat/completions"}
        page = await client.get("/")
        assert page.status == 200 and "text/html" in page.headers["Content-Type"]
    finally:
        await upstream.close()
