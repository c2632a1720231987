"""A real Redis for the tests: Debian's ``redis-server`` (installed by ``.ci/provision``) on a
free loopback port, with nothing written to disk (``--save '' --appendonly no``), in a temporary
directory. Never a mock. :meth:`RedisServer.kill` and :meth:`RedisServer.start` again restart
it empty on the same port, as a Redis without persistence comes back after a crash."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from ports import free_port

__all__ = ["RedisServer"]


class RedisServer:
    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed: apt-get install redis-server (.ci/provision)"
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="chat-gateway-redis-"))
        self._proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> RedisServer:
        self._proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--logfile", str(self.dir / "log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            assert self._proc.poll() is None, (self.dir / "log").read_text()
            assert time.monotonic() < deadline, "redis-server did not start within 30 s"
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: gone at once, its data with it."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._proc = None

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
