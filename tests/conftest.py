"""Shared test setup: hypothesis profiles (``HYPOTHESIS_PROFILE=fuzz`` for the nightly size) and
the ``fakes`` fixture (in-process fake upstreams, closed after the test)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
from fakes import Fakes
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=10_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
async def fakes() -> AsyncIterator[Fakes]:
    farm = Fakes()
    yield farm
    await farm.close()
