"""Strict readers, written for the tests and independent of the gateway's code: what a client of
each dialect reads from the bytes the gateway emits, checked harder than any real client checks.

One module per dialect, named like the dialect's module (``gateway/dialects/<m>.py`` ->
``tests/strict/<m>.py``), exposing ``read_request``, ``read_whole``, ``read_stream`` and
``read_error`` (see :mod:`strict.observed`). :func:`reader_for` finds it from the dialect object,
so no test names a dialect. A fixture dialect registered by the tests brings its own.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["reader_for"]


def reader_for(dialect: Any) -> ModuleType:
    """The strict reader module of a dialect object (its class's module, by file name; a
    dialect that carries a ``strict_reader`` attribute names its own)."""
    own = getattr(dialect, "strict_reader", None)
    if own is not None:
        return importlib.import_module(own)
    module = type(dialect).__module__.rsplit(".", 1)[-1]
    return importlib.import_module(f"strict.{module}")
