"""gateway/log.py: every line the process writes is one JSON object, and a line about a failure
carries its cause (``exc_type``, ``exc_message``, ``traceback``), whether the gateway or a library
(aiohttp, asyncio, anything on the standard library's ``logging``) wrote it. See
docs/reliability.md, "Logs of failures"."""

from __future__ import annotations

import asyncio
import gc
import io
import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import structlog
from aiohttp.test_utils import TestClient
from fakes import client_request, error_message

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import names
from gateway.log import configure_logging
from gateway.metrics import Metrics
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """The process's log, JSON, captured; structlog's and the root logger's set-up restored
    after."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    buf = io.StringIO()
    configure_logging(stream=buf)
    yield buf
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)


def lines(buf: io.StringIO) -> list[dict[str, Any]]:
    """Every line of the log, each parsed as JSON (a line that is not fails the test)."""
    out = []
    for line in buf.getvalue().splitlines():
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            pytest.fail(f"a log line that is not JSON: {line!r}\nthe log:\n{buf.getvalue()}")
    return out


def the_one(buf: io.StringIO, event: str) -> dict[str, Any]:
    found = [e for e in lines(buf) if e.get("event") == event]
    assert len(found) == 1, buf.getvalue()
    return found[0]


def assert_cause(entry: dict[str, Any], exc_type: str, message: str, raiser: str) -> None:
    assert entry["exc_type"] == exc_type, entry
    assert entry["exc_message"] == message, entry
    tb = entry["traceback"]
    assert isinstance(tb, str) and tb.startswith("Traceback (most recent call last):"), entry
    assert f", in {raiser}\n" in tb, tb
    assert tb.rstrip().endswith(f"{exc_type}: {message}"), tb
    assert "exc_info" not in entry and "exception" not in entry, entry


def _route_config(dialect: str) -> dict[str, Any]:
    return {"upstreams": {"up": {"dialect": dialect, "url": "http://up.invalid/chat"}},
            "routes": [{"path": "/c", "dialect": dialect, "upstream": "up"}]}


async def _unreached(req: UpstreamRequest) -> MemoryResponse:
    raise AssertionError("the upstream must not be called")


def _planted_bug(*_: Any) -> Any:
    raise RuntimeError("boom")


@pytest.mark.parametrize("dialect", names())
async def test_an_internal_error_in_an_exchange_is_logged_with_its_cause(
        aiohttp_client: Any, logs: io.StringIO, dialect: str) -> None:
    # the upstream client is the gateway's own code: a bug there is planted through its seam
    app = create_app(parse_config(_route_config(dialect), env={}),
                     transport=MemoryTransport(_planted_bug))
    gw: TestClient[Any, Any] = await aiohttp_client(app)
    path, body, headers = client_request(dialect, stream=False)
    resp = await gw.post(path, json=body, headers=headers)
    assert resp.status == 500
    assert "boom" not in error_message(dialect, await resp.json())  # the cause is for the log
    entry = the_one(logs, "internal_error")
    assert entry["level"] == "error" and entry["path"] == "/c"
    assert_cause(entry, "RuntimeError", "boom", "_planted_bug")


class _BrokenMetrics(Metrics):
    """Metrics whose scrape fails: a bug planted through the app's ``metrics`` seam, in a
    handler beside the exchange (``/metrics``)."""

    async def render_async(self) -> bytes:
        _planted_bug()
        return b""


async def test_an_internal_error_outside_the_exchange_is_logged_with_its_cause(
        aiohttp_client: Any, logs: io.StringIO) -> None:
    app = create_app(parse_config(_route_config(names()[0]), env={}),
                     metrics=_BrokenMetrics(), transport=MemoryTransport(_unreached))
    gw: TestClient[Any, Any] = await aiohttp_client(app)
    resp = await gw.get("/metrics")
    assert resp.status == 500
    assert "boom" not in await resp.text()  # the cause is for the log
    assert_cause(the_one(logs, "internal_error"), "RuntimeError", "boom", "_planted_bug")


def _raises_in_a_library() -> None:
    raise ValueError("a library's failure")


def test_a_library_logging_an_exception_writes_one_json_line_with_its_cause(
        logs: io.StringIO) -> None:
    try:
        _raises_in_a_library()
    except ValueError:
        logging.getLogger("aiohttp.server").exception("Error handling request from %s",
                                                       "127.0.0.1")
    entry = the_one(logs, "Error handling request from 127.0.0.1")
    assert entry["level"] == "error" and entry["logger"] == "aiohttp.server"
    assert "timestamp" in entry
    assert_cause(entry, "ValueError", "a library's failure", "_raises_in_a_library")


async def _fails_unobserved() -> None:
    raise RuntimeError("nobody awaited me")


def test_an_exception_asyncio_reports_writes_one_json_line_with_its_cause(
        logs: io.StringIO) -> None:
    """asyncio's "Task exception was never retrieved": logged by asyncio's logger when the task
    is collected."""
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(_fails_unobserved())
        loop.run_until_complete(asyncio.wait([task]))
        del task
        gc.collect()
    finally:
        loop.close()
    found = [e for e in lines(logs) if e.get("logger") == "asyncio"]
    assert len(found) == 1, logs.getvalue()
    entry = found[0]
    assert entry["event"].startswith("Task exception was never retrieved"), entry
    assert entry["level"] == "error"
    assert_cause(entry, "RuntimeError", "nobody awaited me", "_fails_unobserved")


def test_library_lines_below_the_configured_level_and_aiohttps_access_log_are_not_written(
        logs: io.StringIO) -> None:
    configure_logging(level="warning", stream=logs)
    logging.getLogger("some.library").info("chatty")
    logging.getLogger("some.library").warning("worth a look")
    configure_logging(level="info", stream=logs)
    logging.getLogger("aiohttp.access").info("a duplicate of the gateway's own access line")
    assert [e["event"] for e in lines(logs)] == ["worth a look"]


def test_reconfiguring_replaces_the_handler_rather_than_adding_one(logs: io.StringIO) -> None:
    for _ in range(3):
        configure_logging(stream=logs)
    logging.getLogger("some.library").warning("once")
    assert [e["event"] for e in lines(logs)] == ["once"]


def test_the_console_format_keeps_a_readable_traceback() -> None:
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    buf = io.StringIO()
    try:
        configure_logging(fmt="console", stream=buf)
        try:
            _raises_in_a_library()
        except ValueError:
            structlog.get_logger().exception("internal_error")
            logging.getLogger("aiohttp.server").exception("Error handling request")
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)
    text = buf.getvalue()
    assert text.count("Traceback (most recent call last):") == 2, text
    assert text.count("ValueError: a library's failure") == 2, text
    assert "internal_error" in text and "Error handling request" in text
