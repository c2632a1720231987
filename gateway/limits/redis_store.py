"""The shared store: Redis, through the ``redis`` package's asyncio client.

Each call is one Lua script (``EVALSHA``), so one round trip per admission and one per
settlement (calls made at once share one: :meth:`RedisStore._run`), and atomic: Redis runs a
script alone, so replicas never both take the last slot.
The time is Redis's own (``TIME``), the same for every replica whatever their clocks say.

Keys, per named key ``NAME`` (the hash tag keeps one key's counters in one cluster slot):

- ``chat-gateway:limits:{NAME}:<limit>``: a hash of bucket number to count, one per window
  (:mod:`.windows`), expiring one bucket after its window;
- ``chat-gateway:limits:{NAME}:in_flight``: a sorted set of in-flight slots scored by the end of
  their lease, so that a replica that dies holding slots frees them when the lease ends;
- ``chat-gateway:limits:{NAME}:totals``: the running totals, forgotten after 40 idle days.

Redis restarted empty: the windows start again from nothing (they admit more, never less),
settlements of reservations it forgot correct nothing below zero, and a slot it forgot is not
freed twice.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError

from gateway.limits.store import TOTALS, TOTALS_TTL_MS, KeyUsage, StoreError, retry_after
from gateway.limits.windows import Admission, Plan, Settlement, WindowState

__all__ = ["RedisStore"]

_PREFIX = "chat-gateway:limits:"

# KEYS: one hash per window, then the in-flight set, then the totals hash.
# ARGV: n windows, then per window (limit, length_ms, buckets, amount), then max_concurrent
# (0: none), lease_ms, member, totals_ttl_ms, then the slots this replica freed whose
# settlements may not have arrived yet.
# Returns: now_ms, refused (0: admitted, i: window i, n+1: max_concurrent), in_flight, then per
# window: used, reset_ms, and the live buckets of the refusing window as (bucket, count) pairs.
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[1])
local used, resets, cur, live_of = {}, {}, {}, {}
local refused = 0
for i = 1, n do
  local a = 2 + (i - 1) * 4
  local limit, length, buckets = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local width = length / buckets
  local c = math.floor(now / width)
  cur[i] = c
  local flat = redis.call('HGETALL', KEYS[i])
  local live, sum, newest = {}, 0, nil
  for j = 1, #flat, 2 do
    local idx, v = tonumber(flat[j]), tonumber(flat[j + 1])
    if idx <= c - buckets then
      redis.call('HDEL', KEYS[i], flat[j])
    else
      sum = sum + v
      live[#live + 1] = idx
      live[#live + 1] = v
      if newest == nil or idx > newest then newest = idx end
    end
  end
  used[i] = sum
  resets[i] = newest and ((newest + buckets) * width - now) or 0
  if refused == 0 and sum + 1 > limit then
    refused = i
    live_of = live
  end
end
local b = 2 + n * 4
local maxc, lease, member, ttl = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), ARGV[b + 2],
  tonumber(ARGV[b + 3])
local inflight = 0
for i = b + 4, #ARGV do redis.call('ZREM', KEYS[n + 1], ARGV[i]) end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[n + 1], '-inf', now)
  inflight = redis.call('ZCARD', KEYS[n + 1])
  if refused == 0 and inflight >= maxc then refused = n + 1 end
end
if refused == 0 then
  for i = 1, n do
    local a = 2 + (i - 1) * 4
    local length, buckets, amount = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]),
      tonumber(ARGV[a + 3])
    local width = length / buckets
    redis.call('HINCRBY', KEYS[i], tostring(cur[i]), amount)
    redis.call('PEXPIRE', KEYS[i], length + width)
    used[i] = used[i] + amount
    resets[i] = (cur[i] + buckets) * width - now
  end
  if maxc > 0 then
    redis.call('ZADD', KEYS[n + 1], now + lease, member)
    redis.call('PEXPIRE', KEYS[n + 1], lease)
    inflight = inflight + 1
  end
  redis.call('HINCRBY', KEYS[n + 2], 'requests', 1)
else
  redis.call('HINCRBY', KEYS[n + 2], 'limited', 1)
end
redis.call('PEXPIRE', KEYS[n + 2], ttl)
local out = {now, refused, inflight}
for i = 1, n do
  out[#out + 1] = used[i]
  out[#out + 1] = math.ceil(resets[i])
end
for _, v in ipairs(live_of) do out[#out + 1] = v end
return out
"""

# KEYS: as _ADMIT. ARGV: n windows, then per window (length_ms, buckets, delta), then at_ms,
# member, tokens, prompt, completion, estimated, totals_ttl_ms.
_SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[1])
local b = 2 + n * 3
local at = tonumber(ARGV[b])
for i = 1, n do
  local a = 2 + (i - 1) * 3
  local length, buckets, delta = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local width = length / buckets
  local c = math.floor(at / width)
  if delta ~= 0 and c > math.floor(now / width) - buckets then
    local field = tostring(c)
    local v = redis.call('HGET', KEYS[i], field)
    if v then
      local nv = tonumber(v) + delta
      if nv < 0 then nv = 0 end
      redis.call('HSET', KEYS[i], field, nv)
    elseif delta > 0 then
      redis.call('HINCRBY', KEYS[i], field, delta)
      redis.call('PEXPIRE', KEYS[i], length + width)
    end
  end
end
redis.call('ZREM', KEYS[n + 1], ARGV[b + 1])
local totals = KEYS[n + 2]
redis.call('HINCRBY', totals, 'tokens', ARGV[b + 2])
redis.call('HINCRBY', totals, 'prompt_tokens', ARGV[b + 3])
redis.call('HINCRBY', totals, 'completion_tokens', ARGV[b + 4])
redis.call('HINCRBY', totals, 'estimated_tokens', ARGV[b + 5])
redis.call('PEXPIRE', totals, ARGV[b + 6])
return 1
"""

# KEYS: as _ADMIT. ARGV: n windows, then per window (length_ms, buckets).
# Returns: now_ms, in_flight, per window (used, reset_ms), then the totals as field, value.
_PEEK = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[1])
local out = {now, 0}
for i = 1, n do
  local a = 2 + (i - 1) * 2
  local length, buckets = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local width = length / buckets
  local c = math.floor(now / width)
  local flat = redis.call('HGETALL', KEYS[i])
  local sum, newest = 0, nil
  for j = 1, #flat, 2 do
    local idx = tonumber(flat[j])
    if idx > c - buckets then
      sum = sum + tonumber(flat[j + 1])
      if newest == nil or idx > newest then newest = idx end
    end
  end
  out[#out + 1] = sum
  out[#out + 1] = newest and math.ceil((newest + buckets) * width - now) or 0
end
out[2] = redis.call('ZCOUNT', KEYS[n + 1], '(' .. now, '+inf')
local flat = redis.call('HGETALL', KEYS[n + 2])
for _, v in ipairs(flat) do out[#out + 1] = v end
return out
"""


_SHA = {text: hashlib.sha1(text.encode()).hexdigest() for text in (_ADMIT, _SETTLE, _PEEK)}
"""Each script by its SHA-1, as ``EVALSHA`` names it."""


_MAX_BATCH = 256
"""Most calls in one pipeline."""


@dataclass(frozen=True, slots=True)
class _Call:
    sha: str
    keys: list[str]
    args: list[Any]
    done: asyncio.Future[list[Any]]


def _keys(key: str, plan: Plan) -> list[str]:
    base = f"{_PREFIX}{{{key}}}:"
    return [*(base + w.name for w in plan.windows), base + "in_flight", base + "totals"]


class RedisStore:
    """Counters every replica shares. ``timeout`` bounds connecting and each call's answer; a
    call that fails raises :class:`StoreError` (the client reconnects on the next one).

    A call waits its turn for one of ``pool_size`` connections without a bound: under a burst
    the queue is this process's own, not the store failing, and a store that fails makes every
    call fail at once (refused, or past ``timeout``), after which the layer stops asking for a
    while (:class:`~gateway.limits.layer.Limits`)."""

    def __init__(self, url: str, timeout: float, pool_size: int) -> None:
        pool = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=pool_size, timeout=None, socket_timeout=timeout,
            socket_connect_timeout=timeout,
            # no retries inside the client: a failed call is the policy's to answer, at once
            retry=Retry(NoBackoff(), 0))
        self._client = aioredis.Redis(connection_pool=pool, retry=Retry(NoBackoff(), 0))
        self._queue: list[_Call] = []
        """Calls made since the last flush, sent together (:meth:`_flush`)."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def _run(self, script: str, keys: list[str], args: list[Any]) -> list[Any]:
        """One script call. Calls made in the same turn of the event loop (the settlement of
        one request and the admission of the next, a burst's admissions) go out together as
        one pipeline: one write and one read for all, each still its own atomic script, in the
        order they were made."""
        loop = asyncio.get_running_loop()
        call = _Call(_SHA[script], keys, args, loop.create_future())
        if not self._queue:
            loop.call_soon(self._flush)
        self._queue.append(call)
        out: list[Any] = await call.done
        return out

    def _flush(self) -> None:
        batch, self._queue = self._queue, []
        for i in range(0, len(batch), _MAX_BATCH):
            task = asyncio.get_running_loop().create_task(self._send(batch[i:i + _MAX_BATCH]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[_Call]) -> None:
        try:
            results = await self._pipeline(batch)
            lost = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
            if lost:
                # A Redis that restarted lost every script: all are loaded again at once, and
                # the calls that met the loss are sent again, in their order.
                async with self._client.pipeline(transaction=False) as pipe:
                    for text in _SHA:
                        pipe.script_load(text)
                    await pipe.execute()
                again = await self._pipeline([batch[i] for i in lost])
                for i, r in zip(lost, again, strict=True):
                    results[i] = r
        except (RedisError, OSError, TimeoutError) as e:
            # The idle connections went down with the one that failed (a Redis that restarted
            # drops them all): closed now, so that the first calls after it returns reconnect
            # instead of each failing once on a dead connection.
            await self._client.connection_pool.disconnect(inuse_connections=False)
            results = [e] * len(batch)
        for call, r in zip(batch, results, strict=True):
            if call.done.done():  # its request went away
                continue
            if isinstance(r, BaseException):
                call.done.set_exception(StoreError(f"{type(r).__name__}: {r}"))
            else:
                call.done.set_result(r)

    async def _pipeline(self, batch: list[_Call]) -> list[Any]:
        async with self._client.pipeline(transaction=False) as pipe:
            for c in batch:
                pipe.evalsha(c.sha, len(c.keys), *c.keys, *c.args)
            out: list[Any] = await pipe.execute(raise_on_error=False)
            return out

    async def admit(self, key: str, plan: Plan, reserve: int, member: str, lease_ms: int,
                    released: Collection[str] = ()) -> Admission:
        args: list[Any] = [len(plan.windows)]
        for w in plan.windows:
            args += [w.limit, w.length_ms, w.buckets, reserve if w.tokens else 1]
        args += [plan.max_concurrent or 0, lease_ms, member, TOTALS_TTL_MS, *released]
        out = [int(v) for v in await self._run(_ADMIT, _keys(key, plan), args)]
        now, refused_at, in_flight = out[0], out[1], out[2]
        n = len(plan.windows)
        states = tuple(WindowState(w, out[3 + 2 * i], out[4 + 2 * i] / 1000)
                       for i, w in enumerate(plan.windows))
        if refused_at == 0:
            return Admission(now, None, 0.0, states, in_flight)
        if refused_at > n:
            return Admission(now, "max_concurrent", 1.0, states, in_flight)
        w = plan.windows[refused_at - 1]
        flat = out[3 + 2 * n:]
        live = list(zip(flat[::2], flat[1::2], strict=True))
        used = states[refused_at - 1].used
        return Admission(now, w.name, retry_after(live, used + 1 - w.limit, w, now), states,
                         in_flight)

    async def settle(self, key: str, plan: Plan, at_ms: int, member: str,
                     used: Settlement) -> None:
        delta = used.tokens - used.reserved
        args: list[Any] = [len(plan.windows)]
        for w in plan.windows:
            args += [w.length_ms, w.buckets, delta if w.tokens else 0]
        args += [at_ms, member, used.tokens, used.prompt, used.completion, used.estimated,
                 TOTALS_TTL_MS]
        await self._run(_SETTLE, _keys(key, plan), args)

    async def usage(self, key: str, plan: Plan) -> KeyUsage:
        args: list[Any] = [len(plan.windows)]
        for w in plan.windows:
            args += [w.length_ms, w.buckets]
        out = await self._run(_PEEK, _keys(key, plan), args)
        n = len(plan.windows)
        states = tuple(WindowState(w, int(out[2 + 2 * i]), int(out[3 + 2 * i]) / 1000)
                       for i, w in enumerate(plan.windows))
        flat = [v.decode() if isinstance(v, bytes) else str(v) for v in out[2 + 2 * n:]]
        stored = dict(zip(flat[::2], flat[1::2], strict=True))
        totals = {name: int(stored.get(name, 0)) for name in TOTALS}
        return KeyUsage(states, int(out[1]), totals)

    async def aclose(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()


