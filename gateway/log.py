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
from structlog.typing import EventDict, Processor

__all__ = ["add_exc_fields", "configure_logging", "get_logger", "redact_url", "valid_text"]


def _dumps(obj: Any, **_: Any) -> str:
    try:
        return orjson.dumps(obj, default=str).decode()
    except TypeError:
        # A string with a lone surrogate: aiohttp decodes header bytes that are not UTF-8 with
        # surrogateescape (``User-Agent: caf\xe9``), and a log line must not fail on them.
        return orjson.dumps(valid_text(obj), default=str).decode()


def valid_text(value: Any) -> Any:
    """``value`` with every string made valid UTF-8 (an undecodable byte becomes U+FFFD), in
    dicts, lists and tuples too."""
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # a surrogate that stands for no byte
            return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {valid_text(k): valid_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [valid_text(v) for v in value]
    return value


def _exception_of(exc_info: Any) -> BaseException | None:
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple):
        return exc_info[1] if isinstance(exc_info[1], BaseException) else None
    return sys.exc_info()[1] if exc_info else None


def add_exc_fields(logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
    """``exc_type`` (the class's name) and ``exc_message`` (``str(exc)``) of the exception a line
    carries in ``exc_info`` (``True``, an exception or a ``sys.exc_info()`` tuple); ``exc_info``
    itself is left for the renderer's traceback."""
    exc = _exception_of(event_dict.get("exc_info"))
    if exc is not None:
        event_dict.setdefault("exc_type", type(exc).__name__)
        event_dict.setdefault("exc_message", str(exc))
    return event_dict


def _traceback_field(logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
    """structlog's :func:`~structlog.processors.format_exc_info` (``exc_info`` becomes the
    formatted traceback, as ``traceback.format_exception`` writes it), under ``traceback``."""
    event_dict = structlog.processors.format_exc_info(logger, method_name, event_dict)
    if "exception" in event_dict:
        event_dict["traceback"] = event_dict.pop("exception")
    return event_dict


_ACCESS_LOGGER_LEVEL = logging.WARNING
"""aiohttp's access log repeats the gateway's own ``access`` line (which the exchange writes from
the request's outcome): only its warnings are let through."""

_handler: logging.Handler | None = None
"""The root logger's handler this module installed (replaced on each configure)."""


def configure_logging(fmt: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    """structlog, and the standard library's root logger (aiohttp, asyncio and every other
    library), writing one line per event to ``stream`` (stdout by default): JSON objects, or
    the console renderer's lines when ``fmt`` is ``console``.

    A line about an exception (``log.exception(...)``, ``exc_info=``, a library's
    ``logger.exception``) carries ``exc_type``, ``exc_message`` and ``traceback`` (a string:
    the formatted traceback without local variables, so no header or key held by a frame can
    reach the log); the console format prints the traceback under the line instead."""
    global _handler
    out = stream or sys.stdout
    threshold = logging.getLevelNamesMapping()[level.upper()]
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    renderer: Any
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        exceptions: list[Processor] = [add_exc_fields]  # the renderer prints exc_info itself
    else:
        renderer = structlog.processors.JSONRenderer(serializer=_dumps)
        exceptions = [add_exc_fields, _traceback_field]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            timestamper,
            *exceptions,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        # One write() per line (print() makes two), as the root handler below does: a line from
        # another thread cannot land between a line and its newline.
        logger_factory=structlog.WriteLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            timestamper,
            *exceptions,
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    ))
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    root.setLevel(threshold)
    _handler = handler
    logging.getLogger("aiohttp.access").setLevel(max(threshold, _ACCESS_LOGGER_LEVEL))
    logging.captureWarnings(True)  # warnings.warn(...) as lines of the py.warnings logger


def get_logger(name: str = "gateway") -> Any:
    return structlog.get_logger(name)


_USERINFO = re.compile(r"//[^/@\s]+@")


def redact_url(url: str) -> str:
    """A URL without its ``user:password@`` part and without its query string."""
    return _USERINFO.sub("//", url).split("?", 1)[0]
