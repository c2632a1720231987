"""A real PostgreSQL server for the tests (and bench/history_bench.py): Debian's ``postgresql``
binaries (``/usr/lib/postgresql/<version>/bin``, installed by ``.ci/run``), a cluster made by
``initdb`` in a temporary directory, listening on a free loopback port. Never a mock.

PostgreSQL refuses to run as root, and CI runs as root: then the cluster is made and run by the
unprivileged user ``nobody`` (``Popen(user=..., group=...)``, so the process started is
postgres itself and signals reach it), in a directory it owns.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from ports import free_port

__all__ = ["PostgresServer", "pg_bin"]

_RUN_AS = "nobody"


def pg_bin() -> Path:
    """The newest installed PostgreSQL's binaries."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                   else 0)
    assert found, ("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
                   "apt-get install postgresql (.ci/run does)")
    return found[-1].parent


class PostgresServer:
    """``start()`` makes and starts the cluster, ``stop()`` stops it and removes its files;
    ``start()`` again after ``stop(remove=False)`` restarts the same cluster."""

    def __init__(self) -> None:
        self.bin = pg_bin()
        self.port = free_port()
        root = os.geteuid() == 0
        # As root, in /tmp: pytest's own temporary directories are closed to other users.
        self.dir = Path(tempfile.mkdtemp(prefix="chat-gateway-pg-", dir="/tmp" if root else None))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self._as_user: dict[str, Any] = {}
        if root:
            user = pwd.getpwnam(_RUN_AS)
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as_user = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        self._proc: subprocess.Popen[bytes] | None = None

    def _run(self, *args: str) -> None:
        out = subprocess.run(args, capture_output=True, timeout=120, check=False,
                             cwd=self.dir, **self._as_user)
        assert out.returncode == 0, (args[0], out.stdout.decode(), out.stderr.decode())

    def start(self, *, durable: bool = False) -> PostgresServer:
        """``durable``: PostgreSQL's own defaults (fsync on every commit), for benchmarks."""
        if not self.data.exists():
            self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                      "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
        # Durability off for tests: they want a real server's semantics, not its fsyncs.
        fast = [] if durable else ["-c", "fsync=off", "-c", "synchronous_commit=off",
                                   "-c", "full_page_writes=off"]
        self._proc = subprocess.Popen(
            [str(self.bin / "postgres"), "-D", str(self.data),
             "-p", str(self.port), "-h", "127.0.0.1", "-k", str(self.dir), *fast,
             "-c", "max_connections=200", "-c", "logging_collector=off"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.dir, **self._as_user)
        deadline = time.monotonic() + 60
        while True:
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                check=False, timeout=30)
            if ready.returncode == 0:
                return self
            assert self._proc.poll() is None, "postgres exited at start"
            assert time.monotonic() < deadline, "postgres did not start within 60 s"
            time.sleep(0.1)

    def url(self, database: str = "postgres", driver: str = "postgresql") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        out = subprocess.run(
            [str(self.bin / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database,
             "-c", sql], capture_output=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr.decode()
        return out.stdout.decode().strip()

    def new_database(self) -> str:
        """A fresh, empty database; its name."""
        name = "t_" + uuid.uuid4().hex[:12]
        self.psql(f"CREATE DATABASE {name}")
        return name

    def stop(self, *, remove: bool = True) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)  # postgres' fast shutdown
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)
