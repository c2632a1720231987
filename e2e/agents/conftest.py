"""Shared setup of the coding-agent runs (``make e2e-agents``; not part of ``make test``).

- :func:`agent_bin`: the agents' CLIs, installed from npm at pinned versions into a cache
  outside the repository (``$CHAT_GATEWAY_E2E_CACHE``, default ``~/.cache/chat-gateway-e2e``),
  once; the path of a CLI's executable.
- :func:`scripted_backend`: a fake backend of one wire format on a free loopback port
  (:mod:`backends`), answering a scripted tool loop.
- :func:`gateway_in_front`: the gateway itself (``python -m gateway serve``, this checkout's
  code, the default config but for the route and the upstream) on a free loopback port, with a
  route in the agent's dialect in front of that backend; its access log is kept for assertions.

Dialects are found by where their clients post (``default_path``), never by name: a test says
"the agent posts to ``/v1/responses``, the backend serves ``/v1/chat/completions``". A test
file for another agent (Gemini CLI…) adds its npm package to :data:`AGENTS` and reuses the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import yaml
from backends import Chooser, ScriptedBackend, free_port
from harness import Gateway, dialect_at, ready

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("CHAT_GATEWAY_E2E_CACHE", "~/.cache/chat-gateway-e2e")).expanduser()
AGENTS: dict[str, tuple[str, str]] = {
    # executable -> (npm package, pinned version)
    "codex": ("@openai/codex", "0.171.0"),
    "claude": ("@anthropic-ai/claude-code", "2.1.332"),
}


def _installed(package: str, version: str) -> bool:
    manifest = CACHE / "node_modules" / package / "package.json"
    return manifest.exists() and json.loads(manifest.read_text()).get("version") == version


@pytest.fixture(scope="session")
def agent_bin() -> Callable[[str], Path]:
    """``agent_bin("codex")``: the CLI's executable, installed first when missing."""

    def get(name: str) -> Path:
        package, version = AGENTS[name]
        if not _installed(package, version):
            CACHE.mkdir(parents=True, exist_ok=True)
            subprocess.run(["npm", "install", "--prefix", str(CACHE), "--no-save", "--no-audit",
                            "--no-fund", f"{package}@{version}"], check=True, timeout=600)
        path = CACHE / "node_modules" / ".bin" / name
        assert path.exists(), path
        return path

    return get


@pytest.fixture
async def scripted_backend() -> AsyncIterator[Callable[..., Awaitable[ScriptedBackend]]]:
    """``await scripted_backend(path, choose, final, think=False)``: a backend serving
    ``path``'s wire."""
    started: list[ScriptedBackend] = []

    async def start(path: str, choose: Chooser, final: str, *,
                    think: bool = False) -> ScriptedBackend:
        backend = ScriptedBackend(path, choose, final, think=think)
        await backend.start()
        started.append(backend)
        return backend

    yield start
    for b in started:
        await b.close()


@pytest.fixture
async def gateway_in_front(tmp_path: Path) -> AsyncIterator[
        Callable[[str, ScriptedBackend], Awaitable[Gateway]]]:
    """``await gateway_in_front(client_path, backend)``: a gateway serving ``client_path`` in
    its dialect from ``backend``."""
    procs: list[subprocess.Popen[bytes]] = []

    async def start(client_path: str, backend: ScriptedBackend) -> Gateway:
        port = free_port()
        config = {
            "server": {"host": "127.0.0.1", "port": port},
            "logging": {"format": "json", "level": "info"},
            "upstreams": {"backend": {"dialect": dialect_at(backend.path).name,
                                      "url": backend.url, "timeout": 60}},
            "routes": [{"path": client_path, "dialect": dialect_at(client_path).name,
                        "upstream": "backend"}],
        }
        cfg = tmp_path / f"gateway-{port}.yaml"
        cfg.write_text(yaml.safe_dump(config))
        log = tmp_path / f"gateway-{port}.log"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gateway", "serve", "--config", str(cfg)],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        await ready(base, proc, log)
        return Gateway(base, log)

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


