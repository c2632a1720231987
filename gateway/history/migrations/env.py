"""Alembic's entry point. The gateway passes its open connection in
``config.attributes["connection"]`` (inside a transaction it holds a lock on), so migrations run
on that connection and in that transaction."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("run the history migrations through the gateway: they need its "
                       "connection (gateway.history.migrate.upgrade)")
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
