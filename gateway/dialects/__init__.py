"""The dialect registry: one module per dialect, one line each here.

Adding a dialect means one new module implementing :class:`Dialect` and one entry below.
"""

from __future__ import annotations

from gateway.dialects.base import Dialect, StreamDecoder, StreamEncoder
from gateway.dialects.chatui import ChatUIDialect
from gateway.dialects.openai import OpenAIDialect
from gateway.dialects.protocol_2024_01_28 import Protocol20240128
from gateway.dialects.protocol_2024_05_29 import Protocol20240529

__all__ = ["DIALECTS", "DIALECT_NAMES", "Dialect", "StreamDecoder", "StreamEncoder", "get"]

DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (Protocol20240128(), Protocol20240529(), ChatUIDialect(), OpenAIDialect())
}
DIALECT_NAMES: tuple[str, ...] = tuple(DIALECTS)


def get(name: str) -> Dialect:
    try:
        return DIALECTS[name]
    except KeyError:
        raise KeyError(f"unknown dialect {name!r}; known: {', '.join(DIALECT_NAMES)}") from None
