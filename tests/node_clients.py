"""The real JavaScript clients (the Vercel AI SDK, AG-UI's client, ...) the tests drive.

``tests/node/package.json`` pins them and ``package-lock.json`` fixes the whole tree; the first
test that needs them runs ``npm ci`` once (under a file lock, since the xdist workers share the
directory) and later ones reuse ``tests/node/node_modules`` while the lock file is unchanged.

A test writes its client as a small ES module under ``tests/node/`` and runs it with
:func:`run_node`: the script reads what it needs from its environment (the gateway's URL, ...),
prints one JSON document on stdout, and exits non-zero on failure. The test asserts on that
document: what the library itself produced, not the gateway's bytes.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

NODE_DIR = Path(__file__).parent / "node"
_STAMP = NODE_DIR / "node_modules" / ".chat-gateway-lock-sha256"


def _lock_digest() -> str:
    return hashlib.sha256((NODE_DIR / "package-lock.json").read_bytes()).hexdigest()


def ensure_node_modules() -> Path:
    """Install the pinned packages if they are not installed yet; return ``node_modules``."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise RuntimeError("node and npm are needed (bash .ci/provision installs them)")
    digest = _lock_digest()
    if _STAMP.exists() and _STAMP.read_text() == digest:
        return NODE_DIR / "node_modules"
    with open(NODE_DIR / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (_STAMP.exists() and _STAMP.read_text() == digest):
            done = subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=NODE_DIR, capture_output=True, text=True, timeout=600, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"npm ci failed in {NODE_DIR}:\n{done.stdout}\n{done.stderr}")
            _STAMP.write_text(digest)
    return NODE_DIR / "node_modules"


async def run_node(script: str | Path, *args: str, env: Mapping[str, str] | None = None,
                   timeout: float = 60.0) -> Any:  # noqa: ASYNC109 (it also kills node)
    """Run ``tests/node/<script>`` with node and return the JSON document it prints.

    Fails the test (with the script's stderr) on a non-zero exit, a timeout or output that is
    not one JSON document.
    """
    ensure_node_modules()
    path = Path(script)
    if not path.is_absolute():
        path = NODE_DIR / path
    proc = await asyncio.create_subprocess_exec(
        "node", str(path), *args, cwd=NODE_DIR,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"node {path.name} did not finish within {timeout} s") from None
    if proc.returncode != 0:
        raise AssertionError(
            f"node {path.name} exited {proc.returncode}:\n{err.decode(errors='replace')}")
    try:
        return orjson.loads(out)
    except orjson.JSONDecodeError:
        raise AssertionError(
            f"node {path.name} printed no JSON document:\n{out.decode(errors='replace')}\n"
            f"{err.decode(errors='replace')}") from None
