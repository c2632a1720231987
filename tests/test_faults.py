"""Every upstream fault x every client dialect x whole/streamed: the documented answer, in time.

The fault upstream (:mod:`faults.upstream`) misbehaves as the request path tells it. For each
case the client must get the status or the error event docs/reliability.md promises, in its own
dialect, within the configured timeouts; a failed stream never ends with a clean finish; and
afterwards the gateway holds no upstream connection and runs no task for the exchange, and the
fault upstream saw its connection closed.

Upstream dialects: faults whose bytes depend on the dialect run against all four (or the two the
fault exists in); faults that are only about time (no answer, stalls, drips) rotate the upstream
dialect over the client dialects and modes, so each still meets every upstream dialect.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import structlog
from faults.harness import (
    TIMEOUTS,
    Answer,
    assert_no_clean_finish,
    client_body,
    client_path,
    error_of,
    gateway_config,
    handler_tasks,
    read_answer,
    settle,
    wait_until,
)
from faults.upstream import (
    ERROR_MESSAGE,
    PIECES,
    SECRET_IN_PAGE,
    TEXT,
    FaultUpstream,
    closed_port,
)

from gateway.app import create_app
from gateway.canonical import StreamFinish
from gateway.dialects import DIALECT_NAMES, get
from gateway.keys import SESSION
from gateway.log import configure_logging
from gateway.upstream import connections_in_use

P0128, P0529, CHATUI, OPENAI = DIALECT_NAMES
SSE_UPS = (CHATUI, OPENAI)
ALL = DIALECT_NAMES
ROTATE = ()  # marker: one upstream dialect per (client, mode), rotating

T = TIMEOUTS["timeout"]
IDLE = TIMEOUTS["idle_timeout"]
FAST = 1.0
"""Bound on a case that involves no timeout at all."""


@dataclass(frozen=True, slots=True)
class Expect:
    kind: str  # "ok" | "status" | "event" | "same502" (502 to a same-dialect client, else ok)
    status: int = 200
    message: str | None = None
    """A piece of the error message the client must see."""
    code: str | None = None
    """The error code a chatui client must see (the dialect that carries a code per status)."""


OK = Expect("ok")
SAME_502 = Expect("same502", 502)


def status(code: int, message: str | None = None) -> Expect:
    return Expect("status", code, message)


def event(message: str | None = None, code: str | None = None) -> Expect:
    return Expect("event", 200, message, code)


@dataclass(frozen=True, slots=True)
class Fault:
    name: str
    whole: Expect
    streamed: Expect
    ups: tuple[str, ...] = ALL
    whole_streaming: str = "auto"
    """How the upstream is asked when the client wants a whole answer: ``always`` makes the
    gateway assemble the whole answer from an upstream stream (for the stream faults)."""
    bound: float = FAST


FAULTS = [
    Fault("refused", status(502, "refused"), status(502, "refused"), ROTATE,
          bound=TIMEOUTS["connect_timeout"] + 0.3),
    Fault("never", status(504), status(504), ROTATE, bound=T + 0.6),
    Fault("stall", status(504), status(504), ROTATE, bound=T + 0.6),
    Fault("html500", status(500, "HTTP 500"), status(500, "HTTP 500")),
    Fault("notjson", status(502), status(502)),
    Fault("errbody", status(502, ERROR_MESSAGE), event(ERROR_MESSAGE)),
    Fault("r429", status(429), status(429)),
    Fault("nofinish", status(502), event("ended before"), SSE_UPS, "always"),
    Fault("cut", status(502), event("cut off", "BAD_GATEWAY"), ALL, "always"),
    Fault("reset", status(502), event(code="BAD_GATEWAY"), ALL, "always"),
    Fault("reset_early", status(502), status(502), ALL, "always"),
    Fault("malformed", status(502, "malformed"), event("malformed"), ALL, "always"),
    # A JSON-lines body whose first line is garbage sniffs as SSE and yields no event: 502 all
    # the same, but the message says the stream never began (see docs/reliability.md).
    Fault("malformed_first", status(502), status(502), ALL, "always"),
    Fault("huge", status(502, "longer than"), event("longer than"), ALL, "always"),
    Fault("huge_first", status(502, "longer than"), status(502, "longer than"), ALL, "always"),
    Fault("errchunk", status(502, ERROR_MESSAGE), event(ERROR_MESSAGE), ALL, "always"),
    Fault("bytewise", OK, OK),
    Fault("drip", OK, OK, ROTATE, bound=3.0),
    Fault("slow", status(504), event("silent", "GATEWAY_TIMEOUT"), ROTATE,
          bound=T + 0.6),
    Fault("ctype_plain", OK, OK),
    Fault("ctype_none", OK, OK),
    Fault("ctype_swapped", OK, OK),
    # Unknown keys pass through only to a client of the upstream's own dialect: there the deep
    # value must be written back and cannot be, so 502 (before any byte); elsewhere it is dropped.
    Fault("deep", SAME_502, SAME_502),
]


@dataclass(frozen=True, slots=True)
class Case:
    fault: Fault
    upstream: str
    client: str
    stream: bool

    @property
    def expect(self) -> Expect:
        return self.fault.streamed if self.stream else self.fault.whole

    @property
    def id(self) -> str:
        mode = "streamed" if self.stream else "whole"
        return f"{self.fault.name}-{self.upstream}->{self.client}-{mode}"


def _cases() -> Iterator[Case]:
    for fault in FAULTS:
        for ci, client in enumerate(DIALECT_NAMES):
            for mi, stream in enumerate((False, True)):
                ups = fault.ups or (DIALECT_NAMES[(ci * 2 + mi) % len(DIALECT_NAMES)],)
                for up in ups:
                    yield Case(fault, up, client, stream)


CASES = list(_cases())


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    saved = structlog.get_config()
    buf = io.StringIO()
    configure_logging(stream=buf)
    yield buf
    structlog.configure(**saved)


def _check_error_text(raw: bytes, port: int) -> None:
    """No error body or event gives away internals."""
    text = raw.decode("utf-8", "replace")
    for leak in ("Traceback", 'File "', "<html", "<!DOCTYPE", SECRET_IN_PAGE, "hunter2",
                 f"127.0.0.1:{port}"):
        assert leak not in text, (leak, text)


def _check(case: Case, ans: Answer, port: int) -> None:
    client = get(case.client)
    want = case.expect
    if want.kind == "same502":
        want = status(502, "nested") if case.upstream == case.client else OK
    if want.kind == "ok":
        assert ans.status == 200, ans.raw[:500]
        if case.stream:
            assert ans.streamed
            assert ans.stream_error is None, ans.events
            assert isinstance(ans.events[-1], StreamFinish)
            assert ans.text == TEXT
        else:
            assert not ans.streamed
            assert client.parse_response(ans.body).text == TEXT
        return
    _check_error_text(ans.raw, port)
    if want.kind == "status":
        assert ans.status == want.status, (ans.status, ans.raw[:500])
        assert not ans.streamed
        err = error_of(client, ans)
        if want.message is not None:
            assert want.message in err.message, err.message
        if want.status == 429:
            assert ans.headers.get("Retry-After") == "7"
        return
    assert ans.status == 200 and ans.streamed, (ans.status, ans.raw[:500])
    assert_no_clean_finish(client, ans)
    event = ans.stream_error
    assert event is not None
    if want.message is not None:
        assert want.message in event.message, event.message
    if want.code is not None and case.client == CHATUI:
        assert event.code == want.code, event
    # what came before the error is a true prefix of the answer, never garbage
    assert TEXT.startswith(ans.text), ans.text
    if case.fault.name not in ("errbody",):
        assert ans.text == "".join(PIECES[:2]), ans.text


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_fault(case: Case, aiohttp_client: Any, logs: io.StringIO) -> None:
    async with FaultUpstream() as up:
        if case.fault.name == "refused":
            url = f"http://127.0.0.1:{closed_port()}/{case.upstream}/ok/chat"
        else:
            url = up.url(case.upstream, case.fault.name)
        streaming = "auto" if case.stream else case.fault.whole_streaming
        app = create_app(gateway_config(url, case.upstream, case.client, streaming=streaming))
        client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
        t0 = time.perf_counter()
        async with client.post(client_path(case.client, case.stream),
                               json=client_body(case.client, case.stream)) as resp:
            raw = await resp.read()
            elapsed = time.perf_counter() - t0
            ans = read_answer(get(case.client), resp.status, resp.headers, raw, elapsed)
        assert elapsed < case.fault.bound, elapsed
        # it waited as long as configured: ``timeout`` for the headers and for a whole answer,
        # ``idle_timeout`` for a silence in a stream
        if case.fault.name == "never" or (case.fault.name in ("stall", "slow")
                                          and not case.stream):
            assert elapsed > T - 0.1, elapsed
        elif case.fault.name in ("stall", "slow"):
            assert IDLE - 0.1 < elapsed < (IDLE + T) / 2, elapsed
        _check(case, ans, up.port)
        await settle(app)
        if ans.status != 200 or ans.stream_error is not None:
            assert await wait_until(lambda: up.open_connections == 0), \
                "the gateway kept the failed upstream connection open"
        assert "internal_error" not in logs.getvalue()
        assert len(up.requests) <= 1  # no retry: one upstream, no retry budget


async def test_the_leak_checks_see_a_held_connection(aiohttp_client: Any) -> None:
    """The instruments the cases rely on: while an exchange waits on an upstream that never
    answers, a task serves it and it holds one upstream connection; both go once it ends."""
    async with FaultUpstream() as up:
        app = create_app(gateway_config(up.url(OPENAI, "never"), OPENAI, OPENAI))
        client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
        session = app[SESSION]
        pending = asyncio.ensure_future(client.post("/chat", json=client_body(OPENAI, True)))
        assert await wait_until(lambda: connections_in_use(session) == 1)
        assert handler_tasks()
        assert up.open_connections == 1
        resp = await pending
        assert resp.status == 504
        resp.release()
        await settle(app)
        assert await wait_until(lambda: up.open_connections == 0)


async def test_a_stream_may_outlast_timeout_while_it_keeps_flowing(aiohttp_client: Any) -> None:
    """``timeout`` bounds a stream's first byte, ``idle_timeout`` each silence: a stream that
    drips a frame every 0.25 s for longer than ``timeout`` completes."""
    async with FaultUpstream() as up:
        app = create_app(gateway_config(up.url(P0128, "drip"), P0128, CHATUI))
        client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
        t0 = time.perf_counter()
        async with client.post("/chat", json=client_body(CHATUI, True)) as resp:
            raw = await resp.read()
        elapsed = time.perf_counter() - t0
        ans = read_answer(get(CHATUI), resp.status, resp.headers, raw, elapsed)
        assert elapsed > T
        assert ans.text == TEXT and isinstance(ans.events[-1], StreamFinish)


async def test_a_whole_answer_from_a_stream_is_bounded_by_timeout(aiohttp_client: Any) -> None:
    """A whole answer is bounded by ``timeout`` even when the gateway assembles it from an
    upstream stream that keeps flowing (a drip, or keep-alive comments): 504, in time."""
    async with FaultUpstream() as up:
        app = create_app(gateway_config(up.url(OPENAI, "drip"), OPENAI, P0128,
                                        streaming="always"))
        client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
        t0 = time.perf_counter()
        async with client.post("/chat", json=client_body(P0128, False)) as resp:
            body = await resp.json()
        elapsed = time.perf_counter() - t0
        assert resp.status == 504, body
        assert "in time" in body["error"]
        assert T - 0.1 < elapsed < T + 0.4
        await settle(app)
        assert await wait_until(lambda: up.open_connections == 0)
