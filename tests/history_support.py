"""Helpers of the history tests: the store under test (with raw SQL behind the API), a gateway
config serving the history, and checks of the answers' shapes."""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from pg import PostgresServer

from gateway.dialects import names

__all__ = ["SUMMARY_KEYS", "StoreUnderTest", "assert_error", "gateway_config", "pg_store",
           "sqlite_store"]

SUMMARY_KEYS = {"id", "title", "lastMessage", "lastUpdated", "messageCount", "mode"}


@dataclass
class StoreUnderTest:
    """A history store for one test: its URL, and raw SQL on it (to look behind the API)."""

    kind: str
    url: str
    path: Path | None = None
    pg: PostgresServer | None = None
    database: str | None = None

    def sql(self, statement: str) -> list[tuple[str, ...]]:
        """Run one statement; its rows, every value as text."""
        if self.pg is not None:
            assert self.database is not None
            out = self.pg.psql(statement, self.database)
            return [tuple(line.split("|")) for line in out.splitlines() if line]
        assert self.path is not None
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            rows = db.execute(statement).fetchall()
            db.commit()
        return [tuple("" if v is None else str(v) for v in row) for row in rows]


def sqlite_store(tmp_path: Path) -> StoreUnderTest:
    path = tmp_path / "history.db"
    return StoreUnderTest("sqlite", f"sqlite:///{path}", path=path)


def pg_store(server: PostgresServer) -> StoreUnderTest:
    database = server.new_database()
    # trust authentication ignores the password: it is here to prove it is never shown.
    url = server.url(database).replace("postgres@", "postgres:s3cret-pw@")
    return StoreUnderTest("postgresql", url, pg=server, database=database)


ROUTE_DIALECT, UPSTREAM_DIALECT = names()[0], names()[-1]
"""Two registered dialects (different ones, so that the chat route translates)."""


def gateway_config(store_url: str, *, upstream_url: str = "http://127.0.0.1:9/v1/chat",
                   history: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """A gateway with one chat route (any dialects: the history API does not depend on them)
    and the history API on ``store_url``."""
    return {
        "logging": {"level": "warning"},
        "upstreams": {"llm": {"dialect": UPSTREAM_DIALECT, "url": upstream_url, "model": "m",
                              "connect_timeout": 1, "timeout": 5}},
        "routes": [{"path": "/api/chat", "dialect": ROUTE_DIALECT, "upstream": "llm"}],
        "history": {"store": store_url, "timeout": 3, **(history or {})},
        **top,
    }


async def assert_error(resp: aiohttp.ClientResponse, status: int, code: str,
                       param: str | None = None) -> dict[str, Any]:
    """The history's error shape: ``{"error": {"message", "code", "param"?}, "message"}``."""
    assert resp.status == status, (resp.status, await resp.text())
    assert resp.content_type == "application/json"
    body: dict[str, Any] = await resp.json()
    assert body["error"]["code"] == code, body
    assert body["message"] == body["error"]["message"] and body["message"], body
    assert body["error"].get("param") == param, body
    return body
