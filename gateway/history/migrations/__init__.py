"""Alembic migrations of the history store; :mod:`gateway.history.migrate` runs them at start."""
