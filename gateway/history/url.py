"""The ``history.store`` URL: which database, through which async driver, and how to show it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

__all__ = ["StoreURL", "parse_store_url"]

_DRIVERS: dict[str, tuple[Literal["sqlite", "postgresql"], str]] = {
    "sqlite": ("sqlite", "sqlite+pysqlite"),
    "sqlite+pysqlite": ("sqlite", "sqlite+pysqlite"),
    "sqlite+aiosqlite": ("sqlite", "sqlite+pysqlite"),
    "postgresql": ("postgresql", "postgresql+asyncpg"),
    "postgres": ("postgresql", "postgresql+asyncpg"),
    "postgresql+asyncpg": ("postgresql", "postgresql+asyncpg"),
}


@dataclass(frozen=True, slots=True)
class StoreURL:
    kind: Literal["sqlite", "postgresql"]
    url: URL
    """What SQLAlchemy connects to: the configured URL with its driver named (asyncpg, or the
    standard library's sqlite3)."""
    display: str
    """The URL as configured, without password or query: safe for logs, /readyz, the status
    page."""


def parse_store_url(text: str) -> StoreURL:
    """Validate a store URL; :class:`ValueError` says what is wrong with it."""
    try:
        url = make_url(text)
    except (ArgumentError, ValueError):
        raise ValueError("not a database URL: use sqlite:///path/to/history.db or "
                         "postgresql://user:password@host:5432/db") from None
    if url.drivername not in _DRIVERS:
        raise ValueError(f"unsupported store {url.drivername!r}: use sqlite:///path/to/"
                         "history.db or postgresql://user:password@host:5432/db")
    kind, driver = _DRIVERS[url.drivername]
    if kind == "sqlite":
        if not url.database or url.database == ":memory:" or "memory" in url.query.get(
                "mode", ""):
            raise ValueError("an SQLite store needs a file path (sqlite:///data/history.db); "
                             "an in-memory database would lose the history at every restart")
        if url.query:
            raise ValueError("an SQLite store URL takes no query parameters")
    elif not url.database:
        raise ValueError("a PostgreSQL store URL names its database: "
                         "postgresql://user:password@host:5432/db")
    shown = URL.create(url.drivername, url.username, None, url.host, url.port,
                       url.database).render_as_string(hide_password=False)
    return StoreURL(kind, url.set(drivername=driver), shown)
