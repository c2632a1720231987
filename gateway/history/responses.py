"""Stored responses in the history's database: what :mod:`gateway.exchange.kept` keeps and finds
for the clients of a stateful API (OpenAI Responses), per owner (the SHA-256 of the client's API
key, ``''`` without keys), for the configured retention.

Bodies are JSON text, written and read as they are: the store never parses one. A response older
than the retention is never served, whether or not the hourly purge has removed it yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aiohttp import web
from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from gateway.config import GatewayConfig
from gateway.exchange.kept import NewResponse
from gateway.history.schema import response_items, responses
from gateway.history.store import CHECK_INTERVAL, HistoryStore, StoreUnavailable, now_us

__all__ = [
    "MAX_CHAIN",
    "PURGE_INTERVAL",
    "RESPONSES",
    "NewResponse",
    "ResponsesStore",
    "StoreUnavailable",
    "add_responses_store",
]

PURGE_INTERVAL = 3600.0
"""Seconds between two purges of expired responses (one also runs at start)."""
MAX_CHAIN = 10_000
"""Longest chain of ``previous_response_id`` followed (a guard, not a limit clients meet)."""
_IN_CHUNK = 500


class ResponsesStore:
    """Stored responses on a :class:`HistoryStore`'s database. Every method raises
    :class:`StoreUnavailable` when the database fails."""

    def __init__(self, store: HistoryStore, retention: float) -> None:
        self.store = store
        self.retention = retention
        """Seconds a response is kept."""

    @property
    def ready(self) -> bool:
        return self.store.ready

    def status(self) -> dict[str, Any]:
        return self.store.status()

    def _cutoff(self) -> int:
        return now_us() - int(self.retention * 1_000_000)

    async def save(self, owner: str, new: NewResponse) -> None:
        rows = [{"response_id": new.id, "seq": i, "role": role, "item_id": iid, "owner": owner,
                 "body": body}
                for i, (role, (iid, body)) in enumerate(
                    [("in", x) for x in new.inputs] + [("out", x) for x in new.outputs])]

        def work(conn: Connection) -> None:
            # An id this owner kept before (an upstream that reuses its ids) is replaced; one
            # another owner holds is never touched (the insert fails: not kept, logged).
            conn.execute(delete(response_items).where(
                response_items.c.response_id == new.id, response_items.c.owner == owner))
            conn.execute(delete(responses).where(responses.c.id == new.id,
                                                 responses.c.owner == owner))
            conn.execute(insert(responses).values(
                id=new.id, owner=owner, created_us=now_us(), previous_id=new.previous_id,
                body=new.body))
            if rows:
                conn.execute(insert(response_items), rows)
        await self.store.call("response_save", work, write=True)

    async def conversation(self, owner: str, response_id: str) -> list[str] | None:
        """The items of the conversation that ends with ``response_id`` (each response's input
        items then its output items, oldest response first), or ``None`` when ``owner`` has no
        such response. A chain broken by an expired or deleted response begins after it."""
        cutoff = self._cutoff()

        def work(conn: Connection) -> list[str] | None:
            chain: list[str] = []
            at: str | None = response_id
            while at is not None and len(chain) < MAX_CHAIN and at not in chain:
                row = conn.execute(select(responses.c.previous_id).where(
                    responses.c.id == at, responses.c.owner == owner,
                    responses.c.created_us >= cutoff)).first()
                if row is None:
                    break
                chain.append(at)
                at = row.previous_id
            if not chain:
                return None
            by_response: dict[str, list[str]] = {}
            for part in _chunks(chain, _IN_CHUNK):
                for rid, body in conn.execute(
                        select(response_items.c.response_id, response_items.c.body)
                        .where(response_items.c.response_id.in_(part))
                        .order_by(response_items.c.response_id, response_items.c.seq)):
                    by_response.setdefault(rid, []).append(body)
            return [body for rid in reversed(chain) for body in by_response.get(rid, [])]
        return await self.store.call("response_conversation", work, write=False)

    async def items(self, owner: str, ids: Sequence[str]) -> dict[str, str]:
        """``owner``'s kept items among ``ids`` (the newest when one id was kept twice)."""
        cutoff = self._cutoff()

        def work(conn: Connection) -> dict[str, str]:
            found: dict[str, str] = {}
            for part in _chunks(list(ids), _IN_CHUNK):
                for iid, body in conn.execute(
                        select(response_items.c.item_id, response_items.c.body)
                        .select_from(response_items.join(
                            responses, responses.c.id == response_items.c.response_id))
                        .where(response_items.c.owner == owner,
                               response_items.c.item_id.in_(part),
                               responses.c.created_us >= cutoff)
                        .order_by(responses.c.created_us, response_items.c.seq)):
                    found[iid] = body
            return found
        return await self.store.call("response_items", work, write=False)

    async def get(self, owner: str, response_id: str) -> str | None:
        cutoff = self._cutoff()

        def work(conn: Connection) -> str | None:
            body: str | None = conn.execute(select(responses.c.body).where(
                responses.c.id == response_id, responses.c.owner == owner,
                responses.c.created_us >= cutoff)).scalar()
            return body
        return await self.store.call("response_get", work, write=False)

    async def input_items(self, owner: str, response_id: str, *, limit: int, descending: bool,
                          after: str | None) -> tuple[list[str], bool] | None:
        """A page of the response's input items (``after``: the id of the last item of the
        previous page) and whether more follow; ``None`` for no such response of ``owner``."""
        cutoff = self._cutoff()

        def work(conn: Connection) -> tuple[list[str], bool] | None:
            found = conn.execute(select(responses.c.id).where(
                responses.c.id == response_id, responses.c.owner == owner,
                responses.c.created_us >= cutoff)).first()
            if found is None:
                return None
            seq = response_items.c.seq
            q = select(response_items.c.body).where(response_items.c.response_id == response_id,
                                                    response_items.c.role == "in")
            if after is not None:
                at = conn.execute(select(seq).where(
                    response_items.c.response_id == response_id,
                    response_items.c.role == "in", response_items.c.item_id == after)).scalar()
                if at is not None:
                    q = q.where(seq < at if descending else seq > at)
            rows = list(conn.execute(q.order_by(seq.desc() if descending else seq)
                                     .limit(limit + 1)).scalars())
            return rows[:limit], len(rows) > limit
        return await self.store.call("response_input_items", work, write=False)

    async def delete(self, owner: str, response_id: str) -> bool:
        def work(conn: Connection) -> bool:
            # Items first: SQLite enforces ON DELETE CASCADE only with its foreign_keys pragma.
            found = conn.execute(select(responses.c.id).where(
                responses.c.id == response_id, responses.c.owner == owner)).first()
            if found is None:
                return False
            conn.execute(delete(response_items).where(
                response_items.c.response_id == response_id))
            conn.execute(delete(responses).where(responses.c.id == response_id))
            return True
        return await self.store.call("response_delete", work, write=True)

    async def purge(self) -> int:
        """Remove the responses past the retention, and their items; how many."""
        cutoff = self._cutoff()

        def work(conn: Connection) -> int:
            old = select(responses.c.id).where(responses.c.created_us < cutoff)
            conn.execute(delete(response_items).where(response_items.c.response_id.in_(old)))
            return int(conn.execute(delete(responses).where(
                responses.c.created_us < cutoff)).rowcount or 0)
        return await self.store.call("response_purge", work, write=True)


RESPONSES: web.AppKey[ResponsesStore] = web.AppKey("responses_store")


def add_responses_store(app: web.Application, config: GatewayConfig) -> None:
    """Open the stored responses' database with the app (when ``responses_store`` is set): its
    own pool, migrated at start like the history's, purged every :data:`PURGE_INTERVAL`."""
    section = config.responses_store
    if section is None:
        return
    from gateway.keys import LOG

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        log = app[LOG]
        store = HistoryStore(section.history_config(config.history), log)
        try:
            await store.start()
        except BaseException:
            await store.close()
            raise
        app[RESPONSES] = kept = ResponsesStore(store, section.retention)
        tasks = [asyncio.create_task(store.watch()), asyncio.create_task(_purge(kept, log))]
        yield
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await store.close()

    app.cleanup_ctx.append(ctx)


async def _purge(kept: ResponsesStore, log: Any) -> None:
    last = -PURGE_INTERVAL
    while True:
        if kept.ready and time.monotonic() - last >= PURGE_INTERVAL:
            try:
                removed = await kept.purge()
            except StoreUnavailable:
                pass  # the store's health is logged by the store; tried again next time
            else:
                last = time.monotonic()
                if removed:
                    log.info("responses_purged", removed=removed)
        await asyncio.sleep(CHECK_INTERVAL)


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i:i + size] for i in range(0, len(items), size)]
