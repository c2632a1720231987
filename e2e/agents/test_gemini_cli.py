"""Gemini CLI (``gemini -p``, ``@google/gemini-cli`` from npm) through the gateway, on a backend of
another dialect: its ``write_file`` tool loop, on a Chat Completions and on an Anthropic Messages
backend (``make e2e-agents``; not part of ``make test``).

Gemini CLI speaks Google's Gemini API through the ``@google/genai`` SDK; it is pointed at the
gateway with ``GOOGLE_GEMINI_BASE_URL`` (its configuration reference: the base URL of Gemini API
requests with ``gemini-api-key`` authentication; plain HTTP is allowed on loopback) and a made-up
``GEMINI_API_KEY``, with a home of its own whose settings choose that authentication and turn off
telemetry and updates. ``--approval-mode yolo`` lets it run the tool without a prompt, and
``GEMINI_CLI_TRUST_WORKSPACE`` trusts the working folder (headless runs refuse an untrusted one).
The model is named (``-m``): without it, the CLI's model router first asks for a JSON verdict
(``responseJsonSchema``), which the scripted backend answers in plain text, and the CLI retries it
for minutes before it falls back (seen with 0.61.0; the loop then completes all the same). It posts
to ``/v1beta/models/{model}:streamGenerateContent?alt=sse``: the gateway's route is the Gemini
dialect's conventional prefix, found by its ``default_path`` like the others.

The CLI is installed into a prefix of its own under the agents' cache (an ``npm install
--no-save`` into a prefix shared with other CLIs removes them: npm prunes what no manifest
names).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from backends import CHAT, MESSAGES, Call, Chooser, Offer, ScriptedBackend
from harness import Gateway, run_agent

from gateway.dialects import DIALECTS, routes_by_prefix

pytestmark = pytest.mark.timeout(400)

CACHE = Path(os.environ.get("CHAT_GATEWAY_E2E_CACHE", "~/.cache/chat-gateway-e2e")).expanduser()
"""The agents' npm cache, outside the repository (as e2e/agents/conftest.py has it)."""
PACKAGE, VERSION = "@google/gemini-cli", "0.61.0"
MODEL = "gemini-2.5-flash"
FINAL = "E2E-GEMINI-WRITE-DONE"


def _gemini_path() -> str:
    """Where Gemini CLI's requests go: the conventional prefix of the dialect whose routes are
    prefixes its clients name the model and method under (the SDK's base URL + ``/v1beta``)."""
    [found] = [d for d in DIALECTS.values() if routes_by_prefix(d)
               and d.default_path.endswith("/v1beta")]
    return found.default_path


@pytest.fixture(scope="session")
def gemini_bin() -> Path:
    prefix = CACHE / "gemini-cli"
    manifest = prefix / "node_modules" / PACKAGE / "package.json"
    if not manifest.exists() or json.loads(manifest.read_text()).get("version") != VERSION:
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-save", "--no-audit",
                        "--no-fund", f"{PACKAGE}@{VERSION}"], check=True, timeout=600)
    path = prefix / "node_modules" / ".bin" / "gemini"
    assert path.exists(), path
    return path


def write_call(work: Path) -> Chooser:
    def choose(offers: dict[str, Offer]) -> Call:
        assert "write_file" in offers, sorted(offers)
        return Call("write_file", {"file_path": str(work / "written.txt"),
                                   "content": "write-ok\n"})
    return choose


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }))
    return home


@pytest.mark.parametrize("backend_path", [CHAT, MESSAGES], ids=["chat", "messages"])
async def test_gemini_cli_write_file_loop(
        backend_path: str, tmp_path: Path, gemini_bin: Path,
        scripted_backend: Callable[[str, Chooser, str], Awaitable[ScriptedBackend]],
        gateway_in_front: Callable[[str, ScriptedBackend], Awaitable[Gateway]]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    backend = await scripted_backend(backend_path, write_call(work), FINAL)
    gateway = await gateway_in_front(_gemini_path(), backend)
    env = {"PATH": os.environ["PATH"], "HOME": str(_home(tmp_path)),
           "GOOGLE_GEMINI_BASE_URL": gateway.base, "GEMINI_API_KEY": "e2e-gemini-key",
           "GEMINI_CLI_NO_RELAUNCH": "true", "GEMINI_CLI_TRUST_WORKSPACE": "true",
           "NO_COLOR": "1", "CI": "1"}
    run = await run_agent(
        [str(gemini_bin), "-p", "Write written.txt with the write tool, then report.",
         "-m", MODEL, "--approval-mode", "yolo"], cwd=work, env=env)

    assert not backend.seen.errors, backend.seen.errors
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
    assert (work / "written.txt").read_text() == "write-ok\n"
    assert FINAL in run.stdout, (run.stdout[-2000:], run.stderr[-2000:])
    assert backend.seen.calls and backend.seen.results, backend.seen
    turns = [a for a in await gateway.access_after(2) if a.get("status") == 200]
    assert len(turns) >= 2, turns
    assert all(a.get("client_dialect") == turns[0]["client_dialect"] for a in turns)
    # the key reached neither a log line nor a URL the gateway logged
    assert "e2e-gemini-key" not in gateway.log.read_text()
