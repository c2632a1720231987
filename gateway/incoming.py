"""What the exchange reads of a client's request: aiohttp's own request, the one door in."""

from __future__ import annotations

from typing import TypeAlias

from aiohttp import web

__all__ = ["ClientRequest"]

ClientRequest: TypeAlias = web.BaseRequest
