"""The app key of the history store: importing it costs nothing when no history is configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from gateway.history.store import HistoryStore

__all__ = ["HISTORY"]

HISTORY: web.AppKey[HistoryStore] = web.AppKey("history")
