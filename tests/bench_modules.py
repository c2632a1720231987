"""The benchmark's modules (bench/), imported as the tests need them.

The benchmark knows the dialects the gateway ships (bench/wire/ has a module for each, and stops
on any other); the tests' conftest registers a fixture dialect besides them. So while bench's
modules are imported, the registry lists only the shipped dialects.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import gateway.dialects as registry

BENCH = Path(__file__).resolve().parent.parent / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))


@contextlib.contextmanager
def shipped_dialects_only() -> Iterator[None]:
    names = registry.names
    registry.names = lambda: tuple(  # type: ignore[assignment]
        n for n in names() if type(registry.get(n)).__module__.startswith("gateway.dialects."))
    try:
        yield
    finally:
        registry.names = names  # type: ignore[assignment]
