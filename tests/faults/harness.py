"""What the fault, hostile and security tests share: configs, client requests, reading a client's
answer back in its own dialect, and the leak checks (connections and tasks)."""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from gateway import handlers
from gateway.canonical import (
    ChatError,
    ChatRequest,
    Message,
    StreamError,
    StreamEvent,
    StreamFinish,
    TextDelta,
)
from gateway.config import GatewayConfig, parse_config
from gateway.dialects import DIALECTS, Dialect
from gateway.framing import SniffingReader
from gateway.keys import SESSION
from gateway.proxy import Exchange
from gateway.upstream import connections_in_use

__all__ = [
    "MAX_LINE",
    "TIMEOUTS",
    "Answer",
    "assert_no_clean_finish",
    "client_body",
    "client_path",
    "error_of",
    "gateway_config",
    "handler_tasks",
    "read_answer",
    "routes_config",
    "settle",
    "wait_until",
]

TIMEOUTS = {"timeout": 1.0, "connect_timeout": 0.5, "idle_timeout": 0.5}
"""Small, so that the whole matrix runs fast, and apart, so that a test can tell which one fired:
a ``drip`` frame every 0.25 s is well inside ``idle_timeout``, and a streamed drip (five pauses)
outlasts ``timeout`` (which bounds only the first byte of a stream)."""
MAX_LINE = 64 * 1024


def gateway_config(url: str, upstream: str, client: str, *, streaming: str = "auto",
                   path: str = "/chat", extra: dict[str, Any] | None = None,
                   upstream_extra: dict[str, Any] | None = None) -> GatewayConfig:
    """One route ``path`` in ``client``'s dialect to one upstream ``up``; health ejection off (a
    failing upstream stays the only one, so every case sees the same gateway)."""
    up: dict[str, Any] = {"dialect": upstream, "url": url, "streaming": streaming,
                          "max_line_bytes": MAX_LINE, **TIMEOUTS, **(upstream_extra or {})}
    data: dict[str, Any] = {
        "upstreams": {"up": up},
        "routes": [{"path": path, "dialect": client, "upstream": "up"}],
        "health": {"failure_threshold": 1000},
        **(extra or {}),
    }
    return parse_config(data, env={})


def routes_config(up: Any, client: str, routes: dict[str, tuple[str, str]], *,
                  extra: dict[str, Any] | None = None) -> GatewayConfig:
    """One route per ``path: (upstream dialect, fault)``, all in ``client``'s dialect, each to its
    own upstream on the fault server ``up``."""
    upstreams: dict[str, Any] = {}
    route_list = []
    for i, (path, (dialect, fault)) in enumerate(routes.items()):
        name = f"up{i}-{fault}"
        upstreams[name] = {"dialect": dialect, "url": up.url(dialect, fault),
                           "max_line_bytes": MAX_LINE, **TIMEOUTS}
        route_list.append({"path": path, "dialect": client, "upstream": name})
    data: dict[str, Any] = {"upstreams": upstreams, "routes": route_list,
                            "health": {"failure_threshold": 1000}, **(extra or {})}
    return parse_config(data, env={})


def client_body(client: str, stream: bool, text: str = "hi") -> dict[str, Any]:
    req = ChatRequest(messages=[Message("user", text)], stream=stream)
    body = DIALECTS[client].render_request(req, stream=stream, model=None)
    assert isinstance(body, dict)
    return body


def client_path(client: str, stream: bool, path: str = "/chat") -> str:
    return path + "/stream" if stream and client == "protocol-2024-05-29" else path


@dataclass(slots=True)
class Answer:
    """A client's answer, read back the way a client of its dialect reads it."""

    status: int
    headers: Any
    raw: bytes
    elapsed: float
    streamed: bool = False
    events: list[StreamEvent] = field(default_factory=list)
    """A stream's events (what the client dialect's decoder makes of it, ``end()`` included)."""
    body: Any = None
    """A whole answer's JSON."""

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, TextDelta))

    @property
    def stream_error(self) -> StreamError | None:
        errors = [e for e in self.events if isinstance(e, StreamError)]
        return errors[0] if errors else None


def read_answer(client: Dialect, status: int, headers: Any, raw: bytes,
                elapsed: float) -> Answer:
    ctype = headers.get("Content-Type", "").split(";")[0].strip()
    ans = Answer(status, headers, raw, elapsed)
    if status == 200 and ctype != "application/json":
        ans.streamed = True
        reader = SniffingReader()
        decoder = client.decoder()
        for payload in [*reader.feed(raw), *reader.finish()]:
            ans.events.extend(decoder.decode(payload))
        ans.events.extend(decoder.end())
    else:
        ans.body = orjson.loads(raw)
    return ans


def error_of(client: Dialect, ans: Answer) -> ChatError:
    """The error a non-200 whole answer carries, read by the client's own dialect."""
    err = client.parse_error(ans.body)
    assert err is not None, f"not an error body in {client.name}: {ans.body!r}"
    return err


def assert_no_clean_finish(client: Dialect, ans: Answer) -> None:
    """A failed stream: the error event is the last thing, and no finish marker anywhere."""
    raw = ans.raw
    assert b"[DONE]" not in raw, raw[-300:]
    assert b'"status":"completed"' not in raw, raw[-300:]
    if client.name == "protocol-2024-01-28" or client.name == "openai":
        assert b'"finish_reason":"' not in raw, raw[-300:]
    assert not any(isinstance(e, StreamFinish) for e in ans.events), ans.events
    assert isinstance(ans.events[-1], StreamError), ans.events[-1]
    tail = raw.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    assert b"error" in tail, tail


async def wait_until(ready: Callable[[], bool], limit: float = 2.0) -> bool:
    deadline = time.monotonic() + limit
    while not ready():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


_HANDLER_CODES = frozenset({Exchange.run.__code__, handlers.chat.__code__})


def _await_chain(task: asyncio.Task[Any]) -> Iterator[types.CodeType]:
    obj: Any = task.get_coro()
    for _ in range(500):
        code = (getattr(obj, "cr_code", None) or getattr(obj, "gi_code", None)
                or getattr(obj, "ag_code", None))
        if code is None:
            return
        yield code
        obj = (getattr(obj, "cr_await", None) or getattr(obj, "gi_yieldfrom", None)
               or getattr(obj, "ag_await", None))


def handler_tasks() -> list[asyncio.Task[Any]]:
    """Tasks that are, somewhere down their await chain, serving a chat exchange."""
    return [t for t in asyncio.all_tasks() if not t.done()
            and any(c in _HANDLER_CODES for c in _await_chain(t))]


async def settle(app: web.Application, limit: float = 2.0) -> None:
    """After an exchange: no task still serves it and no upstream connection is held."""
    session = app[SESSION]
    assert await wait_until(lambda: not handler_tasks(), limit), handler_tasks()
    assert await wait_until(lambda: connections_in_use(session) == 0, limit), \
        connections_in_use(session)
