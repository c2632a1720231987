"""The limits' stores, each alone: the embedded one and a real Redis give the same answers to the
same requests (windows, the reservation rule, settlement, the in-flight set, totals), and the
memory store's windows slide by its clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis_server import RedisServer

from gateway.config import KeyLimits
from gateway.limits.redis_store import RedisStore
from gateway.limits.store import MemoryStore, Store
from gateway.limits.windows import Plan, Settlement, plan_of


class FakeWall:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    s: Store
    if request.param == "memory":
        s = MemoryStore(FakeWall())
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        s = RedisStore(server.url(), timeout=2.0, pool_size=4)
    yield s
    await s.aclose()


def plan(**limits: int) -> Plan:
    return plan_of(KeyLimits(**limits))  # type: ignore[arg-type]


LEASE = 60_000


async def test_requests_per_minute_admits_exactly_its_limit(store: Store) -> None:
    p = plan(requests_per_minute=3)
    got = [await store.admit("k", p, 10, f"m{i}", LEASE) for i in range(5)]
    assert [a.refused for a in got] == [None, None, None, "requests_per_minute",
                                        "requests_per_minute"]
    assert [a.states[0].remaining for a in got] == [2, 1, 0, 0, 0]
    assert 0 < got[3].retry_after <= 60
    assert 59 <= got[2].states[0].reset <= 60  # nothing counted left after its newest bucket
    usage = await store.usage("k", p)
    assert usage.totals["requests"] == 3 and usage.totals["limited"] == 2
    assert usage.states[0].used == 3


async def test_a_token_window_overshoots_by_one_reservation_at_most(store: Store) -> None:
    p = plan(tokens_per_minute=100)
    first = await store.admit("k", p, 60, "a", LEASE)
    second = await store.admit("k", p, 60, "b", LEASE)  # 60 < 100: room, so admitted
    third = await store.admit("k", p, 1, "c", LEASE)  # 120: spent
    assert (first.refused, second.refused, third.refused) == (None, None, "tokens_per_minute")
    assert second.states[0].used == 120 and second.states[0].remaining == 0
    # the first used 10 of its 60: the window holds 70, and admits again
    await store.settle("k", p, first.at_ms, "a", Settlement(60, 4, 6, 0))
    assert (await store.usage("k", p)).states[0].used == 70
    assert (await store.admit("k", p, 5, "d", LEASE)).refused is None
    # a request that used more than it reserved is counted in full
    await store.settle("k", p, second.at_ms, "b", Settlement(60, 50, 30, 30))
    usage = await store.usage("k", p)
    assert usage.states[0].used == 70 + 5 + 20
    assert usage.totals == {"requests": 3, "limited": 1, "tokens": 90, "prompt_tokens": 54,
                            "completion_tokens": 36, "estimated_tokens": 30}


async def test_every_window_must_admit_and_all_count(store: Store) -> None:
    p = plan(requests_per_minute=10, tokens_per_minute=1000, tokens_per_day=50,
             tokens_per_month=10_000)
    a = await store.admit("k", p, 40, "a", LEASE)
    assert a.refused is None
    assert [s.used for s in a.states] == [1, 40, 40, 40]
    b = await store.admit("k", p, 40, "b", LEASE)
    assert b.refused is None  # the day had 10 left
    c = await store.admit("k", p, 40, "c", LEASE)
    assert c.refused == "tokens_per_day"
    assert [s.used for s in c.states] == [2, 80, 80, 80]  # a refusal counts nothing
    assert 0 < c.retry_after <= 86_400


async def test_max_concurrent_counts_requests_in_flight(store: Store) -> None:
    p = plan(max_concurrent=2)
    a = await store.admit("k", p, 1, "a", LEASE)
    b = await store.admit("k", p, 1, "b", LEASE)
    c = await store.admit("k", p, 1, "c", LEASE)
    assert (a.refused, b.refused, c.refused) == (None, None, "max_concurrent")
    assert b.in_flight == 2
    await store.settle("k", p, a.at_ms, "a", Settlement(1, 0, 0, 0))
    assert (await store.usage("k", p)).in_flight == 1
    assert (await store.admit("k", p, 1, "d", LEASE)).refused is None
    # settling twice (a retried settlement, a store that forgot) frees nothing more
    await store.settle("k", p, a.at_ms, "a", Settlement(1, 0, 0, 0))
    assert (await store.usage("k", p)).in_flight == 2


async def test_a_slot_whose_lease_ended_is_free(store: Store) -> None:
    p = plan(max_concurrent=1)
    assert (await store.admit("k", p, 1, "a", 30)).refused is None
    if isinstance(store, MemoryStore):
        store._wall.now += 0.05  # type: ignore[attr-defined]
    else:
        await asyncio.sleep(0.05)
    assert (await store.admit("k", p, 1, "b", LEASE)).refused is None


async def test_keys_count_apart(store: Store) -> None:
    p = plan(requests_per_minute=1)
    assert (await store.admit("a", p, 1, "1", LEASE)).refused is None
    assert (await store.admit("b", p, 1, "2", LEASE)).refused is None
    assert (await store.admit("a", p, 1, "3", LEASE)).refused == "requests_per_minute"


async def test_the_memory_windows_slide_by_their_buckets() -> None:
    wall = FakeWall()
    wall.now = 1_800_000_000.0  # on a second's edge
    store = MemoryStore(wall)
    p = plan(requests_per_minute=2)
    assert (await store.admit("k", p, 1, "a", LEASE)).refused is None
    wall.now += 30
    assert (await store.admit("k", p, 1, "b", LEASE)).refused is None
    refused = await store.admit("k", p, 1, "c", LEASE)
    assert refused.refused == "requests_per_minute"
    assert refused.retry_after == pytest.approx(30.0)  # when the first one's bucket slides out
    wall.now += 30
    assert (await store.admit("k", p, 1, "d", LEASE)).refused is None
    wall.now += 59.5
    assert (await store.usage("k", p)).states[0].used == 1  # "d" is still inside its minute
    wall.now += 1
    assert (await store.usage("k", p)).states[0].used == 0


async def test_a_settlement_after_its_bucket_slid_out_corrects_nothing() -> None:
    wall = FakeWall()
    store = MemoryStore(wall)
    p = plan(tokens_per_minute=1000)
    a = await store.admit("k", p, 100, "a", LEASE)
    wall.now += 61
    b = await store.admit("k", p, 10, "b", LEASE)
    await store.settle("k", p, a.at_ms, "a", Settlement(100, 500, 500, 0))
    usage = await store.usage("k", p)
    assert usage.states[0].used == 10
    assert usage.totals["tokens"] == 1000  # the totals count it all the same
    del b


async def test_an_admission_frees_the_slots_it_is_told_ended(store: Store) -> None:
    p = plan(max_concurrent=1)
    assert (await store.admit("k", p, 1, "a", LEASE)).refused is None
    assert (await store.admit("k", p, 1, "b", LEASE)).refused == "max_concurrent"
    # "a" ended; its settlement has not arrived (or failed): the next admission frees it
    admitted = await store.admit("k", p, 1, "c", LEASE, ("a",))
    assert admitted.refused is None and admitted.in_flight == 1
