"""The Chat UI history API: conversations kept in SQLite, or PostgreSQL for several replicas.

``api`` holds the thin aiohttp handlers, ``models`` the request validation, ``store`` the
SQLAlchemy layer, ``migrations`` the versioned schema (Alembic), ``url`` the store URL. This
package's ``__init__`` imports nothing, so ``gateway.history.keys`` stays cheap to import for a
gateway that serves no history.
"""

__all__: list[str] = []
