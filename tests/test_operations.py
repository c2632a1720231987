"""Operating the gateway with real tools: Prometheus scrapes it, promtool checks its metrics,
and ``--workers 2`` sums metrics across workers (the status page: tests/test_status.py).

These need Debian's ``prometheus`` and ``chromium`` packages, which ``.ci/provision`` installs
(``make test`` and ``.ci/run`` call it); a missing tool is a failure, never a skip.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from fakes import client_request, known_to_a_new_process
from ports import free_port

from gateway.app import create_app
from gateway.config import parse_config
from gateway.demo import demo_backend_app
from gateway.dialects import get

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def _require(tool: str) -> None:
    assert os.path.exists(tool), f"{tool} is missing: run bash .ci/provision (make test does)"


def _client() -> str:
    """The route's dialect, by registry position (any would do; one a gateway started as a
    process of its own knows too)."""
    known = known_to_a_new_process()
    return known[1 % len(known)]


def _upstream() -> str:
    """Its demo backend's dialect."""
    known = known_to_a_new_process()
    return known[3 % len(known)]


def _config(upstream_port: int, port: int = 0) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "logging": {"level": "warning"},
        "upstreams": {"llm": {"dialect": _upstream(), "model": "m",
                              "url": _upstream_url(upstream_port)}},
        "routes": [{"path": "/chat", "dialect": _client(), "upstream": "llm"}],
    }


def _upstream_url(port: int) -> str:
    return f"http://127.0.0.1:{port}{get(_upstream()).default_path}"


async def _start_upstream() -> TestServer:
    # paced as the demo is, but briefly: at the demo's 40 ms a token, 20 requests in a row
    # took 11 s
    server = TestServer(demo_backend_app(_upstream(), token_delay=0.002), host="127.0.0.1")
    await server.start_server()
    return server


async def _traffic(base: str, n: int) -> None:
    """``n`` requests to the route, every other one streamed."""
    async with aiohttp.ClientSession() as s:
        for i in range(n):
            path, body, headers = client_request(_client(), "/chat", stream=bool(i % 2),
                                                 text="hi")
            async with s.post(base + path, data=orjson.dumps(body),
                              headers={"Content-Type": "application/json", **headers}) as r:
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
    prom_port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 500ms, evaluation_interval: 500ms}\n"
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
                await asyncio.sleep(0.2)
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
async def test_two_workers_share_a_port_and_sum_metrics(tmp_path: Path) -> None:
    upstream = await _start_upstream()
    port = free_port()
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


@pytest.mark.timeout(90)
async def test_every_worker_writes_json_lines_library_lines_included(tmp_path: Path) -> None:
    """``serve --workers 2`` at debug level on asyncio's loop: stdout is JSON lines only, each
    worker's standard-library lines among them (asyncio's "Using selector" as each worker's loop
    starts), and junk sent to the port is one ``bad_http_request`` warning a connection; no
    traceback anywhere."""
    upstream = await _start_upstream()
    port = free_port()
    assert upstream.port is not None
    cfg = tmp_path / "gw.yaml"
    config = _config(upstream.port, port)
    config["logging"] = {"level": "debug", "format": "json"}
    cfg.write_bytes(orjson.dumps(config))
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--workers", "2",
        "--loop", "asyncio", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    out, junk = b"", 6
    try:
        async with asyncio.timeout(30):  # until both workers listen
            while out.count(b'"event":"listening"') < 2:
                line = await proc.stdout.readline()
                assert line, out
                out += line
        for _ in range(junk):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"garbage garbage\r\n\r\n")
            async with asyncio.timeout(10):
                assert (await reader.read()).startswith(b"HTTP/1.0 400 ")
            writer.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(30):
                rest, err = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await upstream.close()
    out += rest
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    entries = [orjson.loads(line) for line in text.splitlines()]  # every line is JSON
    selectors = [e for e in entries
                 if e.get("logger") == "asyncio" and e["event"].startswith("Using selector")]
    assert len(selectors) == 2, text
    warned = [e for e in entries if e["event"] == "bad_http_request"]
    assert len(warned) == junk and all(e["peer"] == "127.0.0.1" for e in warned), text
    assert "Traceback" not in text and "Traceback" not in err.decode(), text + err.decode()


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
