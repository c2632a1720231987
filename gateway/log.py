"""Structured logs: JSON lines by default, a console renderer on request.

Events carry fields, never formatted sentences. Header values are never passed to a log call;
``redact`` is the last line of defence for URLs that may hold credentials.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, TextIO

import orjson
import structlog

__all__ = ["configure_logging", "get_logger", "redact_url"]


def _dumps(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


def configure_logging(fmt: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    renderer: Any = (structlog.dev.ConsoleRenderer(colors=False) if fmt == "console"
                     else structlog.processors.JSONRenderer(serializer=_dumps))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stdout),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "gateway") -> Any:
    return structlog.get_logger(name)


_USERINFO = re.compile(r"//[^/@\s]+@")


def redact_url(url: str) -> str:
    """A URL without its ``user:password@`` part and without its query string."""
    return _USERINFO.sub("//", url).split("?", 1)[0]
