"""Claude Code (``claude -p``, from npm) through the gateway with its default config, on a
backend of another dialect: its Write and Bash tool loops, each on a Chat Completions and on a
Responses backend.

Claude Code speaks Anthropic Messages; it is pointed at the gateway with ``ANTHROPIC_BASE_URL``
and a made-up ``ANTHROPIC_API_KEY``, with a home of its own (no settings, no login). The suite
may run as root, where ``bypassPermissions`` is refused, so the two tools are allowed by name
instead. (``--bare`` would offer the model no ``Write`` tool.)
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from backends import CHAT, MESSAGES, RESPONSES, Call, Chooser, Offer, ScriptedBackend
from harness import Gateway, run_agent

pytestmark = pytest.mark.timeout(400)


def write_call(work: Path) -> Chooser:
    def choose(offers: dict[str, Offer]) -> Call:
        assert "Write" in offers, sorted(offers)
        return Call("Write", {"file_path": str(work / "written.txt"), "content": "write-ok\n"})
    return choose


def bash_call(work: Path) -> Chooser:
    def choose(offers: dict[str, Offer]) -> Call:
        assert "Bash" in offers, sorted(offers)
        return Call("Bash", {"command": "printf bash-ok > bash.txt",
                             "description": "Write bash.txt"})
    return choose


SCENARIOS: dict[str, tuple[Callable[[Path], Chooser], str, str, str]] = {
    # scenario -> (its call, the file it makes, that file's content, the final text)
    "write": (write_call, "written.txt", "write-ok\n", "E2E-CLAUDE-WRITE-DONE"),
    "bash": (bash_call, "bash.txt", "bash-ok", "E2E-CLAUDE-BASH-DONE"),
}


@pytest.mark.parametrize("backend_path", [CHAT, RESPONSES], ids=["chat", "responses"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_claude_code_tool_loop(
        scenario: str, backend_path: str, tmp_path: Path,
        agent_bin: Callable[[str], Path],
        scripted_backend: Callable[[str, Chooser, str], Awaitable[ScriptedBackend]],
        gateway_in_front: Callable[[str, ScriptedBackend], Awaitable[Gateway]]) -> None:
    claude = agent_bin("claude")
    make_call, made, content, final = SCENARIOS[scenario]
    work = tmp_path / "work"
    work.mkdir()
    backend = await scripted_backend(backend_path, make_call(work), final)
    gateway = await gateway_in_front(MESSAGES, backend)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home),
           "ANTHROPIC_BASE_URL": gateway.base, "ANTHROPIC_API_KEY": "sk-ant-e2e",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    run = await run_agent(
        [str(claude), "-p", f"Do the {scenario} step, then report.",
         "--model", "claude-sonnet-4-5", "--permission-mode", "acceptEdits",
         "--allowedTools", "Write", "Bash", "--output-format", "text"], cwd=work, env=env)

    assert not backend.seen.errors, backend.seen.errors
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
    assert final in run.stdout, (run.stdout[-2000:], run.stderr[-2000:])
    assert (work / made).read_text() == content
    assert backend.seen.calls and backend.seen.results, backend.seen
    turns = [a for a in await gateway.access_after(2) if a.get("status") == 200]
    assert len(turns) >= 2, turns
