"""Byte searches for the hot paths. Knows nothing of dialects."""

from __future__ import annotations

__all__ = ["holds"]


def holds(data: bytes, part: bytes) -> bool:
    """``part in data``, at a third of its cost: ``in`` on bytes first tries ``part`` as an
    integer (a byte value), which raises and formats a TypeError for every bytes ``part``
    before the search itself (CPython 3.11, ``_Py_bytes_contains``; about 2,000 instructions a
    call under callgrind, where ``find`` takes about 600)."""
    return data.find(part) >= 0
