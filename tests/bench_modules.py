"""The benchmark's modules (bench/), imported as the tests need them, and its mock upstream
(bench/mock.py) served in the test's own event loop.

The benchmark knows the dialects the gateway ships (bench/wire/ has a module for each, and stops
on any other); the tests' conftest registers a fixture dialect besides them. So while bench's
modules are imported, the registry lists only the shipped dialects.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType

from aiohttp import web

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


def _import_mock() -> ModuleType:
    """bench/mock.py, under a name no package of the test environment can hold already."""
    spec = importlib.util.spec_from_file_location("bench_mock", BENCH / "mock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with shipped_dialects_only():
        spec.loader.exec_module(module)
    return module


mock = _import_mock()


@contextlib.asynccontextmanager
async def mock_server(chunks: int, lean: bool, delay: float = 0.0) -> AsyncIterator[int]:
    """The benchmark's mock of every dialect, in this process, with the lean server or
    aiohttp's; its port (bound by the server itself, so no other server can take it)."""
    m = mock.Mock(chunks, delay)
    if lean:
        server = await asyncio.get_running_loop().create_server(
            lambda: mock.LeanMock(m), "127.0.0.1", 0)
        try:
            yield server.sockets[0].getsockname()[1]
        finally:
            server.close()
        return
    runner = web.ServerRunner(web.Server(m.handle, access_log=None), handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()
