"""Ports for the servers the tests start and that bind their port themselves (a gateway process,
PostgreSQL, Redis, Prometheus...).

A port found free by ``bind(("127.0.0.1", 0))`` comes from the kernel's ephemeral range, from
which every other server the suite starts (hundreds a minute, in every xdist worker) is given its
port too: between the probe and the server's own bind, another worker's server can take it, and
then one test talks to another test's server. So each worker draws from a block of its own below
the ephemeral range (32768-60999 on Linux), which ``bind(0)`` never hands out.
"""

from __future__ import annotations

import itertools
import os
import socket

_FIRST = 20_000
_PER_WORKER = 400
_WORKERS = 30  # blocks: 20000-31999, below the ephemeral range


def _block() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    n = int(worker[2:]) if worker[2:].isdigit() else 0
    start = _FIRST + (n % _WORKERS) * _PER_WORKER
    return range(start, start + _PER_WORKER)


_NEXT = itertools.cycle(_block())


def free_port() -> int:
    """A port of this worker's block that nothing listens on now."""
    for _ in range(_PER_WORKER):
        port = next(_NEXT)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or lingering after a server of an earlier test
            return port
    raise RuntimeError(f"no free port in {_block()}")
