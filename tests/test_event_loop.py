"""``chat-gateway serve --loop``: uvloop when installed (the default, ``auto``), asyncio's own on
request; the same gateway on either (its errors, request ids and CORS headers)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest
from fakes import client_request, error_message, known_to_a_new_process, read_answer
from faults.upstream import TEXT, FaultUpstream
from ports import free_port

from gateway.server import loop_factory

ROOT = Path(__file__).resolve().parent.parent


def _dialect() -> str:
    """Some dialect a new gateway process knows (which one does not matter here)."""
    return known_to_a_new_process()[0]


def _config(tmp_path: Path, port: int, upstream: str, closed_port: int) -> str:
    d = _dialect()
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "server:\n"
        f"  port: {port}\n"
        "  cors: {allow_origins: ['https://ui.example']}\n"
        "upstreams:\n"
        f"  up: {{dialect: {d}, url: '{upstream}'}}\n"
        f"  gone: {{dialect: {d}, url: 'http://127.0.0.1:{closed_port}/v1', "
        "connect_timeout: 1}\n"
        "routes:\n"
        f"  - {{path: /chat, dialect: {d}, upstream: up}}\n"
        f"  - {{path: /gone, dialect: {d}, upstream: gone}}\n")
    return str(path)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_serve_runs_on_the_loop_asked_for(tmp_path: Path, loop: str) -> None:
    async with FaultUpstream() as up:
        await _serve_on(tmp_path, loop, up)


async def _serve_on(tmp_path: Path, loop: str, up: FaultUpstream) -> None:
    port = free_port()
    d = _dialect()
    path = _config(tmp_path, port, up.url(d, "ok"), free_port())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "serve", "--config", path, "--loop", loop, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with asyncio.timeout(20):
                while True:
                    assert proc.returncode is None
                    try:
                        async with http.get(f"{base}/healthz") as health:
                            if health.status == 200:
                                break
                    except aiohttp.ClientConnectionError:
                        pass
                    await asyncio.sleep(0.1)
            for _ in range(2):  # the second on the kept connection
                for stream in (False, True):
                    where, body, headers = client_request(d, "/chat", stream=stream, state=None)
                    async with http.post(f"{base}{where}", json=body, headers=headers) as resp:
                        assert resp.status == 200
                        seen = read_answer(d, resp.content_type, await resp.read())
                        assert seen.text == TEXT and seen.error is None
            assert up.connections == 1
            _, body, _ = client_request(d, "/gone", stream=False, state=None)
            async with http.post(f"{base}/gone", json=body, headers={
                    "X-Request-ID": "rid-1", "Origin": "https://ui.example"}) as resp:
                assert resp.status == 502
                assert "refused" in error_message(d, await resp.json())
                assert resp.headers["X-Request-ID"] == "rid-1"
                assert resp.headers["Access-Control-Allow-Origin"] == "https://ui.example"
            async with http.get(f"{base}/nope") as resp:
                assert resp.status == 404 and await resp.json()
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out = (await proc.stdout.read()).decode()  # type: ignore[union-attr]
    events = [orjson.loads(line) for line in out.splitlines() if line.startswith("{")]
    listening = [e for e in events if e["event"] == "listening"]
    assert listening and listening[0]["loop"] == loop
    assert listening[0]["upstream_client"] == "fast"


def test_auto_is_uvloop_when_installed_and_asyncio_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert loop_factory("auto")[0] == "uvloop"
    assert loop_factory("asyncio") == ("asyncio", None)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if it were not installed
    assert loop_factory("auto") == ("asyncio", None)
    with pytest.raises(RuntimeError, match="not installed"):
        loop_factory("uvloop")
