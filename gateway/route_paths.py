"""Where one gateway serves the clients of several dialects: each dialect's ``default_path`` is a
suggestion (where its clients post by convention), not an identity, since two dialects may
suggest the same path (a Chat UI backend and Ollama both post to ``/api/chat``).

:func:`distinct_paths` gives each dialect its suggested path unless an earlier one took it, and
then that path under a prefix named after the dialect (``/ollama/api/chat``): a client that takes
a base URL (``OLLAMA_HOST=http://gateway/ollama``) still posts to its conventional path under it,
and the routes' model lists (:mod:`gateway.models_list`) follow the prefix.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.dialects import get

__all__ = ["distinct_paths"]


def distinct_paths(dialect_names: Iterable[str]) -> dict[str, str]:
    """``dialect name -> path`` for one route per dialect, in the order given (the earlier
    dialect keeps a path both suggest), no two alike."""
    taken: set[str] = set()
    out: dict[str, str] = {}
    for name in dialect_names:
        suggested = get(name).default_path
        path = suggested
        n = 1
        while path in taken:
            path = f"/{name}{suggested}" if n == 1 else f"/{name}-{n}{suggested}"
            n += 1
        taken.add(path)
        out[name] = path
    return out
