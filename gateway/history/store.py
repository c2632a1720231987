"""The history store: SQLAlchemy Core over PostgreSQL (asyncpg, async) or SQLite (the standard
library's driver, each transaction whole in a worker thread).

One :class:`HistoryStore` per gateway process, opened by the app's cleanup context and closed
with it. Each operation is one plain SQLAlchemy Core function of a ``Connection``, run in one
transaction: on PostgreSQL through the async engine (``AsyncConnection.run_sync``: every
statement awaits asyncpg), on SQLite as a single call into a thread pool. SQLite gets threads
rather than ``aiosqlite`` because aiosqlite crosses threads once per driver call (cursor,
execute, fetch, close: about 20 handoffs, each a GIL handoff, for one PUT); one handoff per
operation keeps the event loop as free, and a PUT costs less time and CPU.

Every call runs in its own task, shielded from the client going away, so a PUT that began
commits or rolls back as one transaction and the engine is disposed only after the last call
ended. Writes serialize per chat: PostgreSQL locks the chat's row (``FOR UPDATE``); SQLite
begins write transactions ``IMMEDIATE`` (one writer at a time, readers never blocked in WAL
mode), the writers of one process queueing in order on an asyncio lock.

Errors::

    GatewayError
     ├── StoreUnavailable   the database cannot be reached, timed out or failed (HTTP 503)
     ├── UnknownCursor      a ``before`` that names no chat or message of the list (HTTP 400)
     └── SchemaError        (migrate) the database's schema is newer than this gateway's
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway.config import HistoryConfig
from gateway.errors import GatewayError
from gateway.history.migrate import HEAD, SchemaError, upgrade
from gateway.history.models import Mode
from gateway.history.schema import chats, messages
from gateway.history.url import parse_store_url

__all__ = [
    "CHECK_INTERVAL",
    "ChatSummary",
    "HistoryStore",
    "NewMessage",
    "StoreUnavailable",
    "UnknownCursor",
]

T = TypeVar("T")
Work = Callable[[Connection], T]
CHECK_INTERVAL = 2.0
"""Seconds between two health checks (or migration attempts while the store is unreachable)."""
_STORE_ERRORS = (SQLAlchemyError, OSError)  # OSError: refused, reset, and TimeoutError
_IN_CHUNK = 500  # keys per IN (...): far below every driver's bound-parameter limit
_SUMMARY = (chats.c.id, chats.c.title, chats.c.mode, chats.c.last_message, chats.c.updated_us,
            chats.c.message_count)


class StoreUnavailable(GatewayError):
    pass


class UnknownCursor(GatewayError):
    pass


@dataclass(frozen=True, slots=True)
class ChatSummary:
    id: str
    title: str
    mode: str
    last_message: str
    updated_us: int
    message_count: int


@dataclass(frozen=True, slots=True)
class NewMessage:
    key: str
    """``messageId``, else ``id``: a message stored under a key already there replaces it."""
    body: str
    """The message's JSON, as the client sent it."""
    text: str
    """Its content as text, for the chat's ``lastMessage``."""


def now_us() -> int:
    return time.time_ns() // 1000


class HistoryStore:
    """The chats of a gateway; every method raises :class:`StoreUnavailable` on a store
    failure and never anything from the driver."""

    def __init__(self, config: HistoryConfig, log: Any) -> None:
        self.url = parse_store_url(config.store)
        self.ready = False
        """The schema is current: the store can serve."""
        self.healthy = False
        """The last statement or health check succeeded."""
        self._log = log
        self._reported: bool | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timeout = config.timeout
        # hide_parameters: message bodies never reach an error message or a log.
        pool = {"pool_size": config.pool_size, "max_overflow": 0,
                "pool_timeout": config.timeout, "hide_parameters": True}
        self._async: AsyncEngine | None = None
        self._sync: Engine | None = None
        self._threads: ThreadPoolExecutor | None = None
        self._writer = asyncio.Lock()
        if self.url.kind == "sqlite":
            self._sync = create_engine(self.url.url, connect_args={
                "timeout": config.timeout,  # the busy timeout, between processes
                "check_same_thread": False}, **pool)
            event.listen(self._sync, "connect", _sqlite_connect(config.timeout))
            event.listen(self._sync, "begin", _sqlite_begin)
            self._threads = ThreadPoolExecutor(config.pool_size,
                                               thread_name_prefix="history-sqlite")
        else:
            # No pre-ping (a round trip per checkout): after a database restart, the first
            # statement on a dead connection fails (503) and invalidates the whole pool, and the
            # health check every CHECK_INTERVAL usually meets it before any client does.
            self._async = create_async_engine(
                self.url.url, **pool, connect_args={
                    "timeout": config.timeout, "command_timeout": config.timeout,
                    "server_settings": {"application_name": "chat-gateway"}})

    def status(self) -> dict[str, Any]:
        """For /readyz and /api/status: the store's URL without password, and its health."""
        return {"store": self.url.display, "healthy": self.healthy and self.ready}

    # --- life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Create or migrate the schema. An unreachable store is left to :meth:`watch` (the
        gateway serves its chat routes meanwhile); a newer schema raises :class:`SchemaError`."""
        await self._migrate()

    async def watch(self) -> None:
        """Every :data:`CHECK_INTERVAL`: migrate while not ready, else check the store."""
        while True:
            await asyncio.sleep(CHECK_INTERVAL)
            if not self.ready:
                try:
                    await self._migrate()
                except SchemaError as e:
                    self._log.error("history_store_refused", store=self.url.display,
                                    error=str(e))
                continue
            with suppress(StoreUnavailable):
                await self._call("check", lambda conn: conn.execute(text("SELECT 1")),
                                 write=False)

    async def close(self) -> None:
        """Wait for the calls under way (they are bounded by ``timeout``), then close every
        pooled connection."""
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        if self._async is not None:
            await self._async.dispose()
        if self._sync is not None and self._threads is not None:
            self._threads.shutdown(wait=True)  # idle: every call has ended
            self._sync.dispose()

    async def _migrate(self) -> None:
        try:
            if self._sync is not None:
                assert self.url.url.database is not None
                Path(self.url.url.database).parent.mkdir(parents=True, exist_ok=True)
            found = await self._run(upgrade, write=True)
        except _STORE_ERRORS as e:
            self._mark(False, "migrate", e)
            return
        self.ready = True
        self._mark(True, "migrate")
        self._log.info("history_store_ready", store=self.url.display, schema=HEAD,
                       migrated_from=found if found != HEAD else None, created=found is None)

    # --- operations -----------------------------------------------------------------------

    async def list_chats(self, owner: str, mode: Mode, limit: int,
                         before: str | None) -> list[ChatSummary]:
        """``owner``'s chats of ``mode``, newest first; ``before`` is the last chat id of the
        previous page."""
        def work(conn: Connection) -> list[ChatSummary]:
            q = select(*_SUMMARY).where(chats.c.owner == owner, chats.c.mode == mode)
            if before is not None:
                at = conn.execute(select(chats.c.updated_us).where(
                    chats.c.id == before, chats.c.owner == owner,
                    chats.c.mode == mode)).scalar()
                if at is None:
                    raise UnknownCursor(f"no chat {before!r} in this list")
                q = q.where(or_(chats.c.updated_us < at,
                                and_(chats.c.updated_us == at, chats.c.id < before)))
            rows = conn.execute(
                q.order_by(chats.c.updated_us.desc(), chats.c.id.desc()).limit(limit))
            return [ChatSummary(*r) for r in rows]
        return await self._call("list", work, write=False)

    async def create_chat(self, owner: str, mode: Mode, title: str) -> ChatSummary:
        chat = ChatSummary(str(uuid.uuid4()), title, mode, "", now_us(), 0)

        def work(conn: Connection) -> ChatSummary:
            conn.execute(insert(chats).values(
                id=chat.id, owner=owner, mode=mode, title=title, created_us=chat.updated_us,
                updated_us=chat.updated_us, message_count=0, last_message=""))
            return chat
        return await self._call("create", work, write=True)

    async def get_chat(self, owner: str, chat_id: str) -> ChatSummary | None:
        def work(conn: Connection) -> ChatSummary | None:
            row = conn.execute(select(*_SUMMARY).where(
                chats.c.id == chat_id, chats.c.owner == owner)).first()
            return ChatSummary(*row) if row is not None else None
        return await self._call("get", work, write=False)

    async def messages(self, owner: str, chat_id: str, limit: int | None,
                       before: str | None) -> list[str] | None:
        """The chat's messages (JSON texts) in order, ``None`` for no such chat of ``owner``.
        With ``limit``: the last ``limit`` of them; with ``before`` (a message key): only those
        stored before that message."""
        def work(conn: Connection) -> list[str] | None:
            found = conn.execute(select(chats.c.id).where(
                chats.c.id == chat_id, chats.c.owner == owner)).first()
            if found is None:
                return None
            q = select(messages.c.body).where(messages.c.chat_id == chat_id)
            if before is not None:
                seq = conn.execute(select(messages.c.seq).where(
                    messages.c.chat_id == chat_id, messages.c.msg_key == before)).scalar()
                if seq is None:
                    raise UnknownCursor(f"no message {before!r} in this chat")
                q = q.where(messages.c.seq < seq)
            if limit is None:
                return list(conn.execute(q.order_by(messages.c.seq)).scalars())
            newest = conn.execute(q.order_by(messages.c.seq.desc()).limit(limit)).scalars()
            return list(newest)[::-1]
        return await self._call("messages", work, write=False)

    async def put_messages(self, owner: str, chat_id: str,
                           batch: Sequence[NewMessage]) -> ChatSummary | None:
        """Append ``batch`` to the chat, a message whose key is already stored replacing it in
        place; one transaction. ``None`` for no such chat of ``owner``."""
        latest: dict[str, NewMessage] = {}
        for m in batch:  # a key twice in one PUT: its first place, its last body
            latest[m.key] = m

        keys = list(latest)

        def work(conn: Connection) -> ChatSummary | None:
            # One round trip for the chat (locked) and its messages among the first keys.
            rows = conn.execute(
                select(*_SUMMARY, messages.c.msg_key, messages.c.seq, messages.c.body)
                .select_from(chats.outerjoin(messages, and_(
                    messages.c.chat_id == chats.c.id,
                    messages.c.msg_key.in_(keys[:_IN_CHUNK]))))
                .where(chats.c.id == chat_id, chats.c.owner == owner)
                .with_for_update(of=chats)).all()
            if not rows:
                return None
            chat = ChatSummary(*rows[0][:len(_SUMMARY)])
            stored: dict[str, tuple[int, str]] = {
                r.msg_key: (r.seq, r.body) for r in rows if r.msg_key is not None}
            for more in _chunks(keys[_IN_CHUNK:], _IN_CHUNK):
                for key, seq, body in conn.execute(
                        select(messages.c.msg_key, messages.c.seq, messages.c.body).where(
                            messages.c.chat_id == chat_id, messages.c.msg_key.in_(more))):
                    stored[key] = (seq, body)
            changed: list[dict[str, Any]] = []
            added: list[dict[str, Any]] = []
            last = chat.last_message
            for m in latest.values():
                if m.key not in stored:
                    added.append({"chat_id": chat_id, "seq": chat.message_count + len(added),
                                  "msg_key": m.key, "body": m.body})
                elif stored[m.key][1] != m.body:
                    changed.append({"k": m.key, "b": m.body})
                    if stored[m.key][0] == chat.message_count - 1:
                        last = m.text
            if added:
                last = latest[added[-1]["msg_key"]].text
            if not added and not changed:
                return chat  # a retried PUT: nothing to write, the chat keeps its place
            if changed:
                conn.execute(update(messages).where(
                    messages.c.chat_id == chat_id, messages.c.msg_key == bindparam("k"),
                ).values(body=bindparam("b")), changed)
            if added:
                conn.execute(insert(messages), added)
            count = chat.message_count + len(added)
            updated = max(now_us(), chat.updated_us)
            conn.execute(update(chats).where(chats.c.id == chat_id).values(
                updated_us=updated, message_count=count, last_message=last))
            return ChatSummary(chat.id, chat.title, chat.mode, last, updated, count)
        return await self._call("put", work, write=True)

    async def delete_chat(self, owner: str, chat_id: str) -> bool:
        """Remove the chat and its messages (``ON DELETE CASCADE``); ``False`` for no such chat
        of ``owner``."""
        def work(conn: Connection) -> bool:
            result = conn.execute(delete(chats).where(
                chats.c.id == chat_id, chats.c.owner == owner))
            return bool(result.rowcount)
        return await self._call("delete", work, write=True)

    async def call(self, op: str, work: Work[T], *, write: bool) -> T:
        """``work`` (a function of a ``Connection``) in one transaction, as every operation
        here runs: for the other tables of this database (:mod:`gateway.history.responses`)."""
        return await self._call(op, work, write=write)

    # --- plumbing -------------------------------------------------------------------------

    async def _run(self, work: Work[T], *, write: bool) -> T:
        """``work`` in one transaction, committed if ``write`` and it returns."""
        if self._async is not None:
            async with self._async.connect() as conn:
                if not write:
                    # Reads in autocommit: no BEGIN and ROLLBACK round trips around them.
                    await conn.execution_options(isolation_level="AUTOCOMMIT")
                    return await conn.run_sync(work)
                async with conn.begin():
                    return await conn.run_sync(work)
        assert self._threads is not None
        loop = asyncio.get_running_loop()
        if not write:
            return await loop.run_in_executor(self._threads, self._in_thread, work, False)
        # SQLite has one writer at a time. Its busy handler polls with sleeps of up to 100 ms,
        # so the writers of this process queue here instead, in order, without holding a
        # thread or a connection; the busy handler is left to arbitrate between processes.
        async with asyncio.timeout(self._timeout):
            await self._writer.acquire()
        try:
            return await loop.run_in_executor(self._threads, self._in_thread, work, True)
        finally:
            self._writer.release()

    def _in_thread(self, work: Work[T], write: bool) -> T:
        assert self._sync is not None
        with self._sync.connect() as conn:
            if not write:
                return work(conn)
            conn.execution_options(history_begin="BEGIN IMMEDIATE")
            with conn.begin():
                return work(conn)

    async def _call(self, op: str, work: Work[T], *, write: bool) -> T:
        if not self.ready:
            raise StoreUnavailable("the history store is not reachable yet")
        task = asyncio.ensure_future(self._guarded(op, work, write))
        self._tasks.add(task)
        task.add_done_callback(self._done)
        # Shielded: a client that goes away does not cut a transaction in half.
        return await asyncio.shield(task)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: its handler may have gone, nothing else will

    async def _guarded(self, op: str, work: Work[T], write: bool) -> T:
        try:
            result = await self._run(work, write=write)
        except _STORE_ERRORS as e:
            self._mark(False, op, e)
            raise StoreUnavailable("the history store is unavailable") from e
        self._mark(True, op)
        return result

    def _mark(self, healthy: bool, op: str, error: BaseException | None = None) -> None:
        self.healthy = healthy
        if healthy is self._reported:
            return  # only changes are logged
        self._reported = healthy
        if healthy:
            self._log.info("history_store_health", store=self.url.display, healthy=True)
        else:
            self._log.warning("history_store_health", store=self.url.display, healthy=False,
                              op=op, error=_describe(error))


def _describe(e: BaseException | None) -> str:
    if isinstance(e, DBAPIError) and e.orig is not None:
        e = e.orig
    return f"{type(e).__name__}: {e}"[:300] if e is not None else ""


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _sqlite_connect(timeout: float) -> Callable[[Any, Any], None]:
    def connect(dbapi_connection: Any, _record: Any) -> None:
        # Transactions are begun by _sqlite_begin, not by the driver, so that a write
        # transaction can begin IMMEDIATE (and DDL runs inside the migration's transaction).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        _enter_wal(cursor, timeout)
        for pragma in ("synchronous=NORMAL", "foreign_keys=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()
    return connect


def _enter_wal(cursor: Any, timeout: float) -> None:
    # Entering WAL takes an exclusive lock, and SQLite answers "database is locked" at once,
    # without its busy handler, when another process holds any lock meanwhile: processes
    # starting at once on a new database meet it (one in about eight, four at once). So the
    # busy wait is done here, within the same timeout as the busy handler's.
    deadline = time.monotonic() + timeout
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def _sqlite_begin(conn: Any) -> None:
    conn.exec_driver_sql(conn.get_execution_options().get("history_begin", "BEGIN"))
