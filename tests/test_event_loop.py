"""``chat-gateway serve --loop``: uvloop when installed (the default, ``auto``), asyncio's own on
request; the same gateway on either (its errors, request ids and CORS headers)."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest
from faults.upstream import TEXT, FaultUpstream

from gateway.dialects import get
from gateway.framing import SniffingReader
from gateway.server import loop_factory

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _config(tmp_path: Path, port: int, upstream: str, closed_port: int) -> str:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "server:\n"
        f"  port: {port}\n"
        "  cors: {allow_origins: ['https://ui.example']}\n"
        "upstreams:\n"
        f"  up: {{dialect: openai, url: '{upstream}'}}\n"
        f"  gone: {{dialect: openai, url: 'http://127.0.0.1:{closed_port}/v1', "
        "connect_timeout: 1}\n"
        "routes:\n"
        "  - {path: /chat, dialect: openai, upstream: up}\n"
        "  - {path: /gone, dialect: openai, upstream: gone}\n")
    return str(path)


def _text(raw: bytes) -> str:
    decoder = get("openai").decoder()
    reader = SniffingReader()
    return "".join(getattr(e, "text", "") for p in [*reader.feed(raw), *reader.finish()]
                   for e in decoder.decode(p))


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_serve_runs_on_the_loop_asked_for(tmp_path: Path, loop: str) -> None:
    async with FaultUpstream() as up:
        await _serve_on(tmp_path, loop, up)


async def _serve_on(tmp_path: Path, loop: str, up: FaultUpstream) -> None:
    port = _free_port()
    path = _config(tmp_path, port, up.url("openai", "ok"), _free_port())
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
            body = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
            for _ in range(2):  # the second on the kept connection
                async with http.post(f"{base}/chat", json=body) as resp:
                    answer = await resp.json()
                    assert answer["choices"][0]["message"]["content"] == TEXT
                async with http.post(f"{base}/chat", json={**body, "stream": True}) as resp:
                    assert _text(await resp.read()) == TEXT
            assert up.connections == 1
            async with http.post(f"{base}/gone", json=body, headers={
                    "X-Request-ID": "rid-1", "Origin": "https://ui.example"}) as resp:
                answer = await resp.json()
                assert resp.status == 502
                assert "refused" in answer["error"]["message"]
                assert resp.headers["X-Request-ID"] == "rid-1"
                assert resp.headers["Access-Control-Allow-Origin"] == "https://ui.example"
            async with http.get(f"{base}/nope") as resp:
                assert resp.status == 404 and (await resp.json())["error"]["code"]
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
