"""Shared test setup: hypothesis profiles (``HYPOTHESIS_PROFILE=fuzz`` for the nightly size),
the ``fakes`` fixture (in-process fake upstreams, closed after the test), the history stores
(``store``: SQLite, and a real PostgreSQL from ``pg.py``), a real Redis (``redis_server``, the
limits' shared store), and the fixture dialect, registered
here so that every test that iterates the registry runs it too."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from dialects.fixture_dialect import FixtureDialect
from fakes import Fakes
from history_support import StoreUnderTest, pg_store, sqlite_store
from hypothesis import HealthCheck, settings
from pg import PostgresServer
from redis_server import RedisServer

from gateway.dialects import register

settings.register_profile("ci", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=10_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

register(FixtureDialect())


@pytest.fixture
async def fakes() -> AsyncIterator[Fakes]:
    farm = Fakes()
    yield farm
    await farm.close()


# --- the history store: SQLite in a temporary directory, or a real PostgreSQL ---------------


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session; each test takes a fresh database of it."""
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A real Redis of the test's own (the limits' shared store), empty, on a free port."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreUnderTest:
    """The same tests run on both stores."""
    if request.param == "sqlite":
        return sqlite_store(tmp_path)
    return pg_store(request.getfixturevalue("postgres"))
