"""Versioned schema migrations (Alembic), run by every gateway process at start.

Several processes may start at once on one database (workers, replicas): on PostgreSQL they take
a transaction-scoped advisory lock, on SQLite the migration transaction begins ``IMMEDIATE``
(the store's ``begin`` hook), so one migrates and the others then find the schema current.
A database whose schema is newer than this gateway knows is refused, never dropped or rewritten.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from gateway.errors import GatewayError

__all__ = ["HEAD", "SchemaError", "upgrade"]

_LOCATION = Path(__file__).with_name("migrations")
_LOCK_KEY = 0x6368_6174_6869_7374 >> 1  # "chathist", in a signed 64-bit advisory lock key


class SchemaError(GatewayError):
    """The database holds a schema this gateway cannot migrate (a newer gateway's)."""


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_LOCATION))
    cfg.attributes["connection"] = connection
    return cfg


def _head() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


HEAD = _head()
"""The newest schema revision this gateway knows."""


def upgrade(connection: Connection) -> str | None:
    """Bring the schema to :data:`HEAD` inside the caller's transaction; returns the revision
    found before (``None``: a new database)."""
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_LOCK_KEY})")
    cfg = _config(connection)
    found = MigrationContext.configure(connection).get_current_revision()
    known = {r.revision for r in ScriptDirectory.from_config(cfg).walk_revisions()}
    if found is not None and found not in known:
        raise SchemaError(f"the history database is at schema revision {found!r}, which this "
                          f"gateway does not know (it knows up to {HEAD!r}): it was migrated "
                          "by a newer gateway; run that version, or point history.store at "
                          "another database")
    if found != HEAD:
        command.upgrade(cfg, "head")
    return found
