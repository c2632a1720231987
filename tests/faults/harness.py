"""What the fault, hostile and security tests share: configs, client requests, reading a client's
answer back in its own dialect, and the leak checks (connections and tasks). Nothing here names a
dialect: requests are asked and answers read as each dialect declares."""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from fakes import assert_failed_stream, reader_for, split_frames
from fakes import client_request as fake_client_request
from strict.observed import Observed

from gateway import handlers
from gateway.canonical import (
    ChatRequest,
    Message,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
)
from gateway.config import GatewayConfig, parse_config
from gateway.dialects import Dialect
from gateway.exchange import serve
from gateway.framing import SniffingReader, encoder_for
from gateway.keys import TRANSPORT
from gateway.upstream import connections_in_use

__all__ = [
    "MAX_LINE",
    "TIMEOUTS",
    "UPSTREAM_CLIENTS",
    "Answer",
    "assert_no_clean_finish",
    "client_request",
    "codes_errors_by_status",
    "error_message",
    "gateway_config",
    "handler_tasks",
    "read_answer",
    "routes_config",
    "settle",
    "wait_until",
]

TIMEOUTS = {"timeout": 0.8, "connect_timeout": 5.0, "idle_timeout": 0.4}
"""Small, so that the whole matrix runs fast, and apart, so that a test can tell which one fired:
a ``drip`` frame every 0.2 s is well inside ``idle_timeout``, and a streamed drip (five pauses)
outlasts ``timeout`` (which bounds only the first byte of a stream). ``connect_timeout`` is no
fault's subject (a refused connection is refused at once): it only has to leave a connect to
127.0.0.1 room on a busy machine (0.5 s was seen to fire with both cores taken)."""
MAX_LINE = 64 * 1024
ROOMY = 4 * TIMEOUTS["timeout"] + 2.0
UPSTREAM_CLIENTS = ("fast", "aiohttp")
"""``server.upstream_client`` values: the default (``fast``) runs every case; the fallback runs
the cases where the client matters, so that both keep every guarantee."""


def _with_client(data: dict[str, Any], upstream_client: str | None) -> dict[str, Any]:
    if upstream_client is not None:
        data["server"] = {**data.get("server", {}), "upstream_client": upstream_client}
    return data


def gateway_config(url: str, upstream: str, client: str, *, streaming: str = "auto",
                   path: str = "/chat", extra: dict[str, Any] | None = None,
                   upstream_extra: dict[str, Any] | None = None,
                   upstream_client: str | None = None) -> GatewayConfig:
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
    return parse_config(_with_client(data, upstream_client), env={})


def routes_config(up: Any, client: str, routes: dict[str, tuple[str, str]], *,
                  extra: dict[str, Any] | None = None,
                  upstream_client: str | None = None,
                  timeouts: dict[str, float] | None = None) -> GatewayConfig:
    """One route per ``path: (upstream dialect, fault)``, all in ``client``'s dialect, each to its
    own upstream on the fault server ``up``."""
    upstreams: dict[str, Any] = {}
    route_list = []
    for i, (path, (dialect, fault)) in enumerate(routes.items()):
        name = f"up{i}-{fault}"
        # An upstream that answers at once is no test of a timeout: room for a busy machine,
        # so that the requests that check a gateway still serves never race one.
        relaxed = {"timeout": ROOMY, "idle_timeout": ROOMY} if fault == "ok" else {}
        upstreams[name] = {"dialect": dialect, "url": up.url(dialect, fault),
                           "max_line_bytes": MAX_LINE, **TIMEOUTS, **relaxed, **(timeouts or {})}
        route_list.append({"path": path, "dialect": client, "upstream": name})
    data: dict[str, Any] = {"upstreams": upstreams, "routes": route_list,
                            "health": {"failure_threshold": 1000}, **(extra or {})}
    return parse_config(_with_client(data, upstream_client), env={})


def client_request(client: str, stream: bool, path: str = "/chat", text: str = "hi",
                   messages: list[Message] | None = None,
                   ) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The path, body and headers with which a client of ``client`` asks ``text`` (or sends
    ``messages``) at the route ``path`` (no session state), asking for a stream as its dialect
    declares."""
    path, body, headers = fake_client_request(client, path, stream=stream, state=None, text=text,
                                              messages=messages)
    assert isinstance(body, dict)
    return path, body, headers


def codes_errors_by_status(dialect: Dialect) -> bool:
    """Whether the dialect's stream error events carry an error code derived from the status
    (one its encoder writes for a 502 that names no code, and its decoder reads back), so that a
    client of it must be given the right one."""
    frame = encoder_for(dialect.framing)
    reader, decoder = SniffingReader(named=dialect.named_events), dialect.decoder()
    encoder = dialect.encoder(ChatRequest([Message("user", "hi")]))
    data = b"".join(frame(p) for e in (StreamStart(), StreamError("m", status=502))
                    for p in encoder.encode(e))
    events = [e for p in [*reader.feed(data), *reader.finish()] for e in decoder.decode(p)]
    return any(isinstance(e, StreamError) and e.code == "BAD_GATEWAY" for e in events)


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
    seen: Observed | None = None
    """A 200 answer as the client dialect's reader reads it."""

    @property
    def text(self) -> str:
        """The answer's text, as the client dialect's reader reads it."""
        return self.seen.text if self.seen is not None else ""

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
        reader = SniffingReader(named=client.named_events)
        decoder = client.decoder()
        for payload in [*reader.feed(raw), *reader.finish()]:
            ans.events.extend(decoder.decode(payload))
        ans.events.extend(decoder.end())
        ans.seen = reader_for(client).read_stream(raw)
    else:
        ans.body = orjson.loads(raw)
        if status == 200:
            ans.seen = reader_for(client).read_whole(ans.body)
    return ans


def error_message(client: Dialect, ans: Answer) -> str:
    """The message of a non-200 whole answer, read by the client dialect's reader."""
    return reader_for(client).read_error(ans.body)


def assert_no_clean_finish(client: Dialect, ans: Answer) -> None:
    """A failed stream: the error event is the last thing (the reader lets nothing follow it),
    and no finish anywhere."""
    assert ans.seen is not None
    assert_failed_stream(ans.seen, client.name)
    assert not any(isinstance(e, StreamFinish) for e in ans.events), ans.events
    assert isinstance(ans.events[-1], StreamError), ans.events[-1]
    # and it came in the last frame
    frames = split_frames(client, ans.raw)
    reader, decoder = SniffingReader(named=client.named_events), client.decoder()
    last: list[StreamEvent] = []
    for frame in frames:
        last = [e for p in reader.feed(frame.data) for e in decoder.decode(p)] or last
    assert any(isinstance(e, StreamError) for e in last), frames[-1]


async def wait_until(ready: Callable[[], bool], limit: float = 10.0) -> bool:
    deadline = time.monotonic() + limit
    while not ready():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


_HANDLER_CODES = frozenset({serve.__code__, handlers.chat.__code__})


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


async def settle(app: web.Application, limit: float = 10.0) -> None:
    """After an exchange: no task still serves it and no upstream connection is held."""
    session = app[TRANSPORT]
    assert await wait_until(lambda: not handler_tasks(), limit), handler_tasks()
    assert await wait_until(lambda: connections_in_use(session) == 0, limit), \
        connections_in_use(session)
