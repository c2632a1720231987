"""What the agent runs share beside their fixtures: the gateway's handle, an agent's run, and
the dialect of a path."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from gateway.dialects import DIALECTS, Dialect

__all__ = ["AGENT_TIMEOUT", "Gateway", "Run", "dialect_at", "ready", "run_agent"]

AGENT_TIMEOUT = 240.0
"""Seconds one agent run may take (they start slowly; the backend answers at once)."""


def dialect_at(path: str) -> Dialect:
    """The dialect whose clients post to ``path`` by convention."""
    found = [d for d in DIALECTS.values() if d.default_path == path]
    assert len(found) == 1, (path, [d.name for d in found])
    return found[0]


@dataclass(slots=True)
class Gateway:
    base: str
    """``http://127.0.0.1:<port>``."""
    log: Path
    """The gateway's stdout and stderr (JSON log lines, the access log among them)."""

    async def access_after(self, requests: int, within: float = 5.0) -> list[dict[str, object]]:
        """The access lines once ``requests`` are there: a request's line is written when its
        answer has ended, which may be just after the agent read the answer and exited."""
        deadline = asyncio.get_running_loop().time() + within
        while True:
            lines = self.access_lines()
            if len(lines) >= requests or asyncio.get_running_loop().time() > deadline:
                return lines
            await asyncio.sleep(0.05)

    def access_lines(self) -> list[dict[str, object]]:
        out = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                entry = json.loads(line)
                if entry.get("event") == "access":
                    out.append(entry)
        return out


async def ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"the gateway exited: {log.read_text()[-2000:]}")
            try:
                async with session.get(base + "/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"the gateway did not start: {log.read_text()[-2000:]}")


@dataclass(slots=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


async def run_agent(argv: list[str], *, cwd: Path, env: dict[str, str],
                    stdin: bytes = b"") -> Run:
    """One agent run to its end (killed past :data:`AGENT_TIMEOUT`)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), AGENT_TIMEOUT)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(
            f"{argv[0]} ran past {AGENT_TIMEOUT}s: {err.decode()[-2000:]}") from None
    return Run(proc.returncode or 0, out.decode(errors="replace"),
               err.decode(errors="replace"))
