"""Codex CLI (``codex exec``, from npm) through the gateway with its default config, on a
backend of another dialect: a shell-tool loop and an ``apply_patch`` loop each, on a Chat
Completions and on an Anthropic Messages backend.

Codex speaks only the Responses API. Its first request offers function tools, its freeform
``apply_patch`` (a ``custom`` tool with a Lark grammar, for current models), and hosted tools
(``web_search``, ``tool_search``) that no other backend runs: the gateway drops those under its
default policy and says so in the access log. The model named is one whose Codex profile uses
the freeform ``apply_patch`` (``gpt-5.5``), so that the freeform path is the one exercised.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from backends import (
    CHAT,
    MESSAGES,
    RAG,
    RESPONSES,
    THINKING,
    Call,
    Chooser,
    Offer,
    ScriptedBackend,
)
from harness import Gateway, Run, run_agent

pytestmark = pytest.mark.timeout(400)

MODEL = "gpt-5.5"
SHELL_TOOLS = {
    # Codex's shell tool by model profile, and its arguments
    "exec_command": lambda cmd: {"cmd": cmd},
    "shell_command": lambda cmd: {"command": cmd},
    "shell": lambda cmd: {"command": ["bash", "-lc", cmd]},
}
PATCH = "*** Begin Patch\n*** Update File: notes.txt\n@@\n one\n-two\n+TWO\n*** End Patch\n"


def shell_call(offers: dict[str, Offer]) -> Call:
    name = next(n for n in SHELL_TOOLS if n in offers)
    return Call(name, SHELL_TOOLS[name]("printf shell-ok > shell.txt"))


def patch_call(offers: dict[str, Offer]) -> Call:
    assert "apply_patch" in offers, sorted(offers)
    return Call("apply_patch", PATCH)


SCENARIOS: dict[str, tuple[Chooser, str]] = {
    "shell": (shell_call, "E2E-CODEX-SHELL-DONE"),
    "apply_patch": (patch_call, "E2E-CODEX-PATCH-DONE"),
}


def codex_home(root: Path, gateway: Gateway, model: str = MODEL) -> Path:
    home = root / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'model = "{model}"\n'
        'model_provider = "gateway"\n'
        "[model_providers.gateway]\n"
        'name = "chat-gateway"\n'
        f'base_url = "{gateway.base}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "E2E_GATEWAY_KEY"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n")
    return home


async def run_codex(codex: Path, tmp_path: Path, gateway: Gateway, prompt: str,
                    model: str = MODEL) -> Run:
    work = tmp_path / "work"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path),
           "CODEX_HOME": str(codex_home(tmp_path, gateway, model)), "E2E_GATEWAY_KEY": "sk-e2e",
           "RUST_LOG": "error"}
    return await run_agent(
        [str(codex), "exec", "--skip-git-repo-check",
         # the test's own temporary directory is the sandbox: Linux sandboxing (Landlock,
         # seccomp) is not available in every container the suite runs in
         "--dangerously-bypass-approvals-and-sandbox", "-C", str(work), prompt],
        cwd=work, env=env)


@pytest.mark.parametrize("backend_path", [CHAT, MESSAGES], ids=["chat", "messages"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_codex_tool_loop(
        scenario: str, backend_path: str, tmp_path: Path,
        agent_bin: Callable[[str], Path],
        scripted_backend: Callable[[str, Chooser, str], Awaitable[ScriptedBackend]],
        gateway_in_front: Callable[[str, ScriptedBackend], Awaitable[Gateway]]) -> None:
    codex = agent_bin("codex")
    choose, final = SCENARIOS[scenario]
    backend = await scripted_backend(backend_path, choose, final)
    gateway = await gateway_in_front(RESPONSES, backend)
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("one\ntwo\n")
    run = await run_codex(codex, tmp_path, gateway, f"Run the {scenario} step, then report.")

    assert not backend.seen.errors, backend.seen.errors
    assert run.returncode == 0, run.stderr[-3000:]
    assert final in run.stdout, (run.stdout[-2000:], run.stderr[-2000:])
    if scenario == "shell":
        assert (work / "shell.txt").read_text() == "shell-ok"
    else:
        assert (work / "notes.txt").read_text() == "one\nTWO\n"
        offered = backend.seen.offers[0]["apply_patch"]
        # Chat Completions has freeform tools; Anthropic gets the one-string-argument function
        assert offered.freeform == (backend_path == CHAT)
    assert backend.seen.calls and backend.seen.results, backend.seen
    turns = [a for a in await gateway.access_after(2) if a.get("status") == 200]
    assert len(turns) >= 2, turns
    # the hosted tools Codex offers (web_search, …) were dropped by the default policy, and said
    assert all("hosted_tools" in (a.get("dropped") or []) for a in turns), turns


async def test_codex_answers_from_a_backend_without_tools(
        tmp_path: Path, agent_bin: Callable[[str], Path],
        scripted_backend: Callable[[str, Chooser, str], Awaitable[ScriptedBackend]],
        gateway_in_front: Callable[[str, ScriptedBackend], Awaitable[Gateway]]) -> None:
    """A RAG backend of the legacy protocol: no tools, no reasoning. The default policies drop
    what Codex offers (its tools, its tool choice, its effort) and Codex prints the answer."""
    codex = agent_bin("codex")
    final = "E2E-CODEX-RAG-ANSWER"
    backend = await scripted_backend(RAG, shell_call, final)
    gateway = await gateway_in_front(RESPONSES, backend)
    (tmp_path / "work").mkdir()
    run = await run_codex(codex, tmp_path, gateway, "What does the plan cover?")

    assert not backend.seen.errors, backend.seen.errors
    assert run.returncode == 0, run.stderr[-3000:]
    assert final in run.stdout, (run.stdout[-2000:], run.stderr[-2000:])
    turns = [a for a in await gateway.access_after(1) if a.get("status") == 200]
    assert turns and all({"tools", "tool_choice", "reasoning_effort"} <= set(
        a.get("dropped") or []) for a in turns), turns


async def test_codex_namespaced_tools_reach_a_backend_without_namespaces(
        tmp_path: Path, agent_bin: Callable[[str], Path],
        scripted_backend: Callable[[str, Chooser, str], Awaitable[ScriptedBackend]],
        gateway_in_front: Callable[[str, ScriptedBackend], Awaitable[Gateway]]) -> None:
    """A model Codex has no profile for gets its fallback tools, among them the sub-agent tools
    grouped in a ``namespace`` (``multi_agent_v1``): on an Anthropic backend they are top-level
    tools named ``<namespace>__<name>``, and the shell loop still runs."""
    codex = agent_bin("codex")
    final = "E2E-CODEX-NAMESPACE-DONE"
    backend = await scripted_backend(MESSAGES, shell_call, final)
    gateway = await gateway_in_front(RESPONSES, backend)
    (tmp_path / "work").mkdir()
    run = await run_codex(codex, tmp_path, gateway, "Run the shell step, then report.",
                          model="gpt-codex-e2e-unknown")

    assert not backend.seen.errors, backend.seen.errors
    assert run.returncode == 0, run.stderr[-3000:]
    assert final in run.stdout, (run.stdout[-2000:], run.stderr[-2000:])
    assert (tmp_path / "work" / "shell.txt").read_text() == "shell-ok"
    offered = backend.seen.offers[0]
    grouped = [n for n in offered if "__" in n]
    assert grouped and all(n.startswith("multi_agent_v1__") for n in grouped), sorted(offered)


async def test_codex_gives_anthropics_signed_thinking_back(
        tmp_path: Path, agent_bin: Callable[[str], Path],
        scripted_backend: Callable[..., Awaitable[ScriptedBackend]],
        gateway_in_front: Callable[[str, ScriptedBackend], Awaitable[Gateway]]) -> None:
    """Extended thinking before a tool call: Anthropic refuses the next turn unless the signed
    thinking block comes back with the tool's result. Codex gets it as a reasoning item (its
    signature sealed in ``encrypted_content``), replays it, and the backend gets it back."""
    codex = agent_bin("codex")
    final = "E2E-CODEX-THINKING-DONE"
    backend = await scripted_backend(MESSAGES, shell_call, final, think=True)
    gateway = await gateway_in_front(RESPONSES, backend)
    (tmp_path / "work").mkdir()
    run = await run_codex(codex, tmp_path, gateway, "Run the shell step, then report.")

    assert not backend.seen.errors, backend.seen.errors
    assert run.returncode == 0, run.stderr[-3000:]
    assert final in run.stdout, (run.stdout[-2000:], run.stderr[-2000:])
    assert THINKING in backend.seen.thinking, backend.seen.thinking
