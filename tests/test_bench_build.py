"""bench/procs.py's ``gateway_build``: which gateway a started process really runs.

Comparing two builds (bench/ab.py, bench/profile.py) is worth nothing if both run the same one,
and ``python -m gateway`` started from this checkout imports this checkout's compiled modules
whatever PYTHONPATH says: ``-m`` puts the working directory first on ``sys.path``. These start
real processes and read their /proc maps, as the benchmark does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench_modules import shipped_dialects_only

with shipped_dialects_only():
    import procs

ROOT = Path(__file__).resolve().parent.parent
_IMPORT = "import gateway.pipeline, sys; print('ready', flush=True); sys.stdin.read()"


@contextmanager
def _started(args: list[str], env: dict[str, str] | None = None) -> Iterator[int]:
    """A Python process that imported the gateway's translation core, from this checkout's
    directory, until the block ends."""
    p = subprocess.Popen([sys.executable, *args, "-c", _IMPORT], cwd=ROOT, env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        yield p.pid
    finally:
        p.kill()
        p.communicate(timeout=10)


def _sources_alone(into: Path) -> Path:
    shutil.copytree(ROOT / "gateway", into / "gateway",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return into


def test_this_checkout_runs_its_compiled_modules() -> None:
    with _started([]) as pid:
        build = procs.gateway_build(pid)
    assert build.startswith("compiled: "), build
    assert Path(build.removeprefix("compiled: ")).resolve().is_relative_to(ROOT)


def test_a_copy_of_the_sources_runs_interpreted_only_with_dash_p(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(_sources_alone(tmp_path))}
    with _started(["-P"], env) as pid:
        assert procs.gateway_build(pid) == "interpreted: no compiled module loaded"
    # the trap: without -P, this checkout's directory comes first and wins
    with _started([], env) as pid:
        assert procs.gateway_build(pid).startswith("compiled: ")
