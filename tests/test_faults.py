"""Every upstream fault x every client dialect and every upstream dialect x whole/streamed: the
documented answer, in time.

The fault upstream (:mod:`faults.upstream`) misbehaves as the request path tells it. For each
case the client must get the status or the error event docs/reliability.md promises, in its own
dialect, within the configured timeouts; a failed stream never ends with a clean finish; and
afterwards the gateway holds no upstream connection and runs no task for the exchange, and the
fault upstream saw its connection closed.

Dialects come from the registry. For each fault and mode every client dialect meets one upstream
dialect (of those the fault exists in), rotating with the fault, so that each fault meets every
upstream and every client dialect in both modes and, over the faults, every pair meets: the cases
grow with the number of dialects, not with its square. ``deep`` also runs every dialect against
itself, where it answers differently.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import structlog
from fakes import dialect_at, normal_finish, other
from faults.harness import (
    TIMEOUTS,
    UPSTREAM_CLIENTS,
    Answer,
    assert_no_clean_finish,
    client_request,
    codes_errors_by_status,
    error_message,
    gateway_config,
    handler_tasks,
    read_answer,
    settle,
    wait_until,
)
from faults.upstream import (
    DRIP_SECONDS,
    ERROR_MESSAGE,
    LEAK_KEY,
    LEAK_PASSWORD,
    LEAK_TOKEN,
    LEAK_USER,
    LONG_REPEATS,
    PIECES,
    SECRET_IN_PAGE,
    TEXT,
    FaultUpstream,
    closed_port,
    marks_its_finish,
)

from gateway.app import create_app
from gateway.canonical import ChatRequest, Message, StreamError, StreamFinish, StreamStart
from gateway.config import parse_config
from gateway.dialects import Dialect, get, names
from gateway.framing import SniffingReader, encoder_for
from gateway.keys import TRANSPORT
from gateway.log import configure_logging
from gateway.secrets import REDACTED
from gateway.upstream import connections_in_use


def _any(_: Dialect) -> bool:
    return True


def _is_sse(dialect: Dialect) -> bool:
    return dialect.framing == "sse"

T = TIMEOUTS["timeout"]
IDLE = TIMEOUTS["idle_timeout"]
LONG = 1.2
"""The ``long`` fault's ``max_stream_seconds``: past ``timeout``, which bounds only a stream's
first byte."""


def room(seconds: float) -> float:
    """An upper bound on what should take ``seconds``, with room for a busy machine (two cores
    shared with other test runs). Which timeout fired, or that none did, the answer's status and
    message tell; the elapsed time only proves that nothing hangs past its timeouts."""
    return 4 * seconds + 2.0


FAST = room(T)
"""Bound on a case that involves no timeout at all (were one to hang, ``timeout`` would end
it, and its 504 fails the case)."""


@dataclass(frozen=True, slots=True)
class Expect:
    kind: str  # "ok" | "status" | "event"
    status: int = 200
    message: str | None = None
    """A piece of the error message the client must see."""
    code: str | None = None
    """The error code a client must see, where its dialect's error events carry one."""


OK = Expect("ok")


def status(code: int, message: str | None = None) -> Expect:
    return Expect("status", code, message)


def event(message: str | None = None, code: str | None = None) -> Expect:
    return Expect("event", 200, message, code)


@dataclass(frozen=True, slots=True)
class Fault:
    name: str
    whole: Expect
    streamed: Expect
    exists_in: Callable[[Dialect], bool] = _any
    """The upstream dialects that have this fault."""
    whole_streaming: str = "auto"
    """How the upstream is asked when the client wants a whole answer: ``always`` makes the
    gateway assemble the whole answer from an upstream stream (for the stream faults)."""
    bound: float = FAST
    both: bool = False
    """Run against the client's own dialect and another (not one rotating upstream)."""
    config: tuple[tuple[str, float], ...] = ()
    """Upstream settings over :data:`TIMEOUTS`."""
    text: str = TEXT
    """The whole text the upstream would send: what a client got before an error is a prefix."""
    exact_prefix: bool = True
    """A mid-stream error comes after exactly the first two pieces."""
    waits: float = 0.0
    """The least time the case must take (the configured bound that ends it)."""


FAULTS = [
    Fault("refused", status(502, "refused"), status(502, "refused"),
          bound=FAST),  # refused at once: no timeout about it
    # which timeout fired, the message says: ``timeout`` bounds the headers and a whole answer,
    # ``idle_timeout`` each silence of a stream
    Fault("never", status(504, "did not answer in time"), status(504, "did not answer in time"),
          bound=room(T)),
    Fault("stall", status(504, "did not finish"), status(504, "silent"), bound=room(T)),
    Fault("html500", status(500, "HTTP 500"), status(500, "HTTP 500")),
    Fault("notjson", status(502), status(502)),
    Fault("errbody", status(502, ERROR_MESSAGE), event(ERROR_MESSAGE)),
    Fault("r429", status(429), status(429)),
    Fault("nofinish", status(502), event("ended before"), marks_its_finish, "always"),
    Fault("cut", status(502), event("cut off", "BAD_GATEWAY"), whole_streaming="always"),
    Fault("reset", status(502), event(code="BAD_GATEWAY"), whole_streaming="always"),
    Fault("reset_early", status(502), status(502), whole_streaming="always"),
    Fault("malformed", status(502, "malformed"), event("malformed"), whole_streaming="always"),
    # A JSON-lines body whose first line is garbage sniffs as SSE and yields no event: 502 all
    # the same, but the message says the stream never began (see docs/reliability.md).
    Fault("malformed_first", status(502), status(502), whole_streaming="always"),
    Fault("huge", status(502, "longer than"), event("longer than"), whole_streaming="always"),
    Fault("huge_first", status(502, "longer than"), status(502, "longer than"),
          whole_streaming="always"),
    Fault("errchunk", status(502, ERROR_MESSAGE), event(ERROR_MESSAGE),
          whole_streaming="always"),
    Fault("bytewise", OK, OK),
    Fault("drip", OK, OK, bound=room(5 * DRIP_SECONDS)),
    Fault("slow", status(504, "did not finish"), event("silent", "GATEWAY_TIMEOUT"),
          bound=room(T)),
    Fault("ctype_plain", OK, OK),
    Fault("ctype_none", OK, OK),
    Fault("ctype_swapped", OK, OK),
    # Keep-alives never stand for an answer: the first *event* is bounded by ``timeout`` (here
    # ``first_byte_timeout`` is unset; ``idle_timeout`` is set long, so that only the first-event
    # bound can fire), and, the stream not having begun, the client gets a plain 504.
    Fault("comments_first", status(504), status(504, "did not start"), _is_sse, "always",
          bound=T + 3.0, config=(("idle_timeout", 30.0),), waits=T),
    Fault("blanks_first", status(504), status(504, "did not start"),
          whole_streaming="always", bound=T + 3.0, config=(("idle_timeout", 30.0),), waits=T),
    Fault("trickle_first", status(504), status(504, "did not start"),
          whole_streaming="always", bound=T + 3.0, config=(("idle_timeout", 30.0),), waits=T),
    # After the first event, keep-alives alone do not hold the stream either: ``idle_timeout``
    # counts the time without an event.
    Fault("heartbeats", status(504), event("silent", "GATEWAY_TIMEOUT"),
          whole_streaming="always", bound=T + 3.0),
    # A stream that keeps flowing, past ``max_stream_seconds``: the error event, a timeout.
    Fault("long", status(504), event("max_stream_seconds", "GATEWAY_TIMEOUT"),
          whole_streaming="always", bound=LONG + 3.0, config=(("max_stream_seconds", LONG),),
          text=TEXT * LONG_REPEATS, exact_prefix=False),
    # Unknown keys pass through only to a client of the upstream's own dialect, and there the
    # upstream's bytes are passed on as they came (never written back), deep value and all;
    # elsewhere it is dropped. Run against its own dialect and another:
    Fault("deep", OK, OK, both=True),
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


def _upstreams(fault: Fault, stream: bool) -> list[str]:
    """The upstream dialects that have this fault. A whole answer from an upstream that only
    streams is always assembled from its stream: that is the faults' ``whole_streaming: always``
    case, so the faults that answer a whole request whole are left to the others."""
    ups = [n for n in names() if fault.exists_in(get(n))]
    if stream or fault.whole_streaming == "always":
        return ups
    return [n for n in ups if not getattr(get(n), "streams_only", False)]


def _cases() -> Iterator[Case]:
    clients = names()
    for fi, fault in enumerate(FAULTS):
        for mi, stream in enumerate((False, True)):
            ups = _upstreams(fault, stream)
            for ci, client in enumerate(clients):
                if fault.both:  # its own dialect is answered otherwise: both
                    for up in dict.fromkeys((client, other(client))):
                        yield Case(fault, up, client, stream)
                else:
                    yield Case(fault, ups[(ci + fi + mi) % len(ups)], client, stream)


CASES = list(_cases())


def _fallback_cases() -> Iterator[Case]:
    """For the fallback client: every fault, whole and streamed, once each, the client and
    upstream dialects rotating (the default client runs them all)."""
    clients = names()
    for fi, fault in enumerate(FAULTS):
        for mi, stream in enumerate((False, True)):
            ups = _upstreams(fault, stream)
            yield Case(fault, ups[(fi * 2 + mi) % len(ups)], clients[(fi + mi) % len(clients)],
                       stream)


FALLBACK_CASES = list(_fallback_cases())


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


def _declared_status(upstream: str) -> int:
    """The status the upstream's own error event declares for the fault's error, as its dialect
    writes it (a typed error, like Anthropic's ``api_error``, names one), else 502: a whole
    answer assembled from a stream that ended so gets that status."""
    d = get(upstream)
    encoder, decoder = d.encoder(ChatRequest([Message("user", "q")], stream=True)), d.decoder()
    frame = encoder_for(d.framing)
    raw = b"".join(frame(p) for e in (StreamStart(), StreamError(ERROR_MESSAGE))
                   for p in encoder.encode(e))
    reader = SniffingReader(named=d.named_events)
    events = [e for p in [*reader.feed(raw), *reader.finish()] for e in decoder.decode(p)]
    error = next(e for e in events if isinstance(e, StreamError))
    return error.status if error.status >= 400 else 502


def _check(case: Case, ans: Answer, port: int) -> None:
    client = get(case.client)
    want = case.expect
    if want.kind == "status" and case.fault.name == "errchunk":
        want = replace(want, status=_declared_status(case.upstream))
    if want.kind == "ok":
        assert ans.status == 200, ans.raw[:500]
        assert ans.seen is not None and ans.seen.error is None, ans.raw[-500:]
        assert ans.seen.text == TEXT
        assert ans.seen.finish == normal_finish(case.client, stream=case.stream)
        if case.stream:
            assert ans.streamed
            assert ans.stream_error is None, ans.events
            assert isinstance(ans.events[-1], StreamFinish)
        else:
            assert not ans.streamed
        return
    _check_error_text(ans.raw, port)
    if want.kind == "status":
        assert ans.status == want.status, (ans.status, ans.raw[:500])
        assert not ans.streamed
        message = error_message(client, ans)
        if want.message is not None:
            assert want.message in message, message
        if want.status == 429:
            assert ans.headers.get("Retry-After") == "7"
        return
    assert ans.status == 200 and ans.streamed, (ans.status, ans.raw[:500])
    assert_no_clean_finish(client, ans)
    event = ans.stream_error
    assert event is not None and ans.seen is not None
    if want.message is not None:
        assert want.message in event.message, event.message
        assert ans.seen.error is not None and want.message in ans.seen.error, ans.seen.error
    if want.code is not None and codes_errors_by_status(client):
        assert event.code == want.code, event
    # what came before the error is a true prefix of the answer, never garbage
    assert case.fault.text.startswith(ans.text), ans.text
    if case.fault.exact_prefix and case.fault.name not in ("errbody",):
        assert ans.text == "".join(PIECES[:2]), ans.text


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_fault(case: Case, aiohttp_client: Any, logs: io.StringIO) -> None:
    await _run(case, aiohttp_client, logs, None)


@pytest.mark.parametrize("case", FALLBACK_CASES, ids=[c.id for c in FALLBACK_CASES])
async def test_fault_with_the_fallback_client(case: Case, aiohttp_client: Any,
                                             logs: io.StringIO) -> None:
    await _run(case, aiohttp_client, logs, UPSTREAM_CLIENTS[1])


async def _run(case: Case, aiohttp_client: Any, logs: io.StringIO,
               upstream_client: str | None) -> None:
    async with FaultUpstream() as up:
        if case.fault.name == "refused":
            url = f"http://127.0.0.1:{closed_port()}/{case.upstream}/ok/chat"
        else:
            url = up.url(case.upstream, case.fault.name)
        streaming = "auto" if case.stream else case.fault.whole_streaming
        app = create_app(gateway_config(url, case.upstream, case.client, streaming=streaming,
                                        upstream_extra=dict(case.fault.config),
                                        upstream_client=upstream_client))
        client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
        path, body, headers = client_request(case.client, case.stream)
        t0 = time.perf_counter()
        async with client.post(path, json=body, headers=headers) as resp:
            raw = await resp.read()
            elapsed = time.perf_counter() - t0
            ans = read_answer(get(case.client), resp.status, resp.headers, raw, elapsed)
        assert elapsed < case.fault.bound, elapsed
        # it waited as long as configured: ``timeout`` for the headers and for a whole answer,
        # ``idle_timeout`` for a silence in a stream (which one fired, the message says: no
        # upper bound between the two, which a busy machine blurs)
        if case.fault.name == "never" or (case.fault.name in ("stall", "slow")
                                          and not case.stream):
            assert elapsed > T - 0.1, elapsed
        elif case.fault.name in ("stall", "slow"):
            assert elapsed > IDLE - 0.1, elapsed
        assert elapsed > case.fault.waits - 0.1, elapsed
        if case.fault.name == "long" and case.stream:  # recorded as the timeout it is
            assert elapsed > LONG - 0.1, elapsed
            assert await wait_until(lambda: '"up:timeout"' in logs.getvalue()), logs.getvalue()
        _check(case, ans, up.port)
        await settle(app)
        if ans.status != 200 or ans.stream_error is not None:
            assert await wait_until(lambda: up.open_connections == 0), \
                "the gateway kept the failed upstream connection open"
        assert "internal_error" not in logs.getvalue()
        assert len(up.requests) <= 1  # no retry: one upstream, no retry budget


@pytest.mark.parametrize("upstream_client", UPSTREAM_CLIENTS)
async def test_the_leak_checks_see_a_held_connection(aiohttp_client: Any,
                                                     upstream_client: str) -> None:
    """The instruments the cases rely on: while an exchange waits on an upstream that never
    answers, a task serves it and it holds one upstream connection; both go once it ends (here
    by its client leaving, so that no timeout races the looking: on a busy machine the looking
    may take seconds)."""
    dialect = dialect_at(3)
    async with FaultUpstream() as up:
        app = create_app(gateway_config(up.url(dialect, "never"), dialect, dialect,
                                        upstream_extra={"timeout": LOOK},
                                        upstream_client=upstream_client))
        client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
        session = app[TRANSPORT]
        assert type(session).__name__.lower().startswith(upstream_client)
        path, body, headers = client_request(dialect, True)
        pending = asyncio.ensure_future(client.post(path, json=body, headers=headers))
        assert await wait_until(lambda: connections_in_use(session) == 1, LOOK)
        assert handler_tasks()
        # the upstream's own count moves when its server has run the accept (on a busy machine,
        # a while after the gateway's side connected)
        assert await wait_until(lambda: up.open_connections == 1, LOOK)
        assert not pending.done()  # still waiting: nothing timed out while we looked
        pending.cancel()  # the client goes away: with handler cancellation the exchange ends
        with contextlib.suppress(asyncio.CancelledError):
            await pending
        await settle(app, LOOK)
        assert await wait_until(lambda: up.open_connections == 0, LOOK)


LOOK = 30.0
"""Bound on each look of the leak-check test, and the upstream timeout there: far above what a
busy machine takes, never reached when all is well (each look polls and returns at once)."""


async def test_a_stream_may_outlast_timeout_while_it_keeps_flowing(aiohttp_client: Any) -> None:
    """``timeout`` bounds a stream's first byte, ``idle_timeout`` each silence: a stream that
    drips a frame every ``DRIP_SECONDS`` for longer than ``timeout`` completes."""
    upstream, client_dialect = dialect_at(0), dialect_at(2)
    async with FaultUpstream() as up:
        app = create_app(gateway_config(up.url(upstream, "drip"), upstream, client_dialect))
        client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
        path, body, headers = client_request(client_dialect, True)
        t0 = time.perf_counter()
        async with client.post(path, json=body, headers=headers) as resp:
            raw = await resp.read()
        elapsed = time.perf_counter() - t0
        ans = read_answer(get(client_dialect), resp.status, resp.headers, raw, elapsed)
        assert elapsed > T
        assert ans.text == TEXT and isinstance(ans.events[-1], StreamFinish)


async def test_a_whole_answer_from_a_stream_is_bounded_by_timeout(aiohttp_client: Any) -> None:
    """A whole answer is bounded by ``timeout`` even when the gateway assembles it from an
    upstream stream that keeps flowing (a drip, or keep-alive comments): 504, in time."""
    upstream, client_dialect = dialect_at(3), dialect_at(0)
    async with FaultUpstream() as up:
        app = create_app(gateway_config(up.url(upstream, "drip"), upstream, client_dialect,
                                        streaming="always"))
        client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
        path, body, headers = client_request(client_dialect, False)
        t0 = time.perf_counter()
        async with client.post(path, json=body, headers=headers) as resp:
            raw = await resp.read()
        elapsed = time.perf_counter() - t0
        assert resp.status == 504, raw
        ans = read_answer(get(client_dialect), resp.status, resp.headers, raw, elapsed)
        # ``timeout`` fired (the 504 and its message say so; the drip would have finished)
        assert "in time" in error_message(get(client_dialect), ans)
        assert T - 0.1 < elapsed < room(T)
        await settle(app)
        assert await wait_until(lambda: up.open_connections == 0)


LEAKS = {"leak401": 401, "leak500": 500, "leakchunk": 0}
"""The faults whose upstream quotes the request's credentials and address; 0: an error event."""


def _leak_cases() -> Iterator[tuple[str, str, str, bool]]:
    clients = names()
    for fi, fault in enumerate(LEAKS):
        for mi, stream in enumerate((False, True)):
            for ci, client in enumerate(clients):
                yield fault, clients[(ci + fi + mi + 1) % len(clients)], client, stream
                if fault == "leakchunk" and stream:  # a same-dialect route passes frames on
                    yield fault, client, client, stream


LEAK_CASES = list(_leak_cases())


@pytest.mark.parametrize(("fault", "upstream", "client_dialect", "stream"), LEAK_CASES,
                         ids=[f"{f}-{u}->{c}-{'streamed' if s else 'whole'}"
                              for f, u, c, s in LEAK_CASES])
async def test_an_upstream_error_never_hands_back_the_gateways_secrets(
        fault: str, upstream: str, client_dialect: str, stream: bool, aiohttp_client: Any,
        logs: io.StringIO) -> None:
    """The upstream's own error text (a 401's, a 500's, a mid-stream error event's) quotes the
    key the gateway sent (configured from ``${VAR}``), the URL's password and query token and
    the upstream's address: the client's answer, whole or streamed, and every log line hold
    none of them, only ``[redacted]`` in their place."""
    async with FaultUpstream() as up:
        stream_path = get(upstream).stream_path
        data: dict[str, Any] = {
            "upstreams": {"up": {
                "dialect": upstream, "url": up.leak_url(upstream, fault),
                "stream_url": up.leak_url(upstream, fault, stream_path),
                "headers": {"x-api-key": "${LEAK_KEY}"}, "streaming": "always" if fault ==
                "leakchunk" else "auto", **TIMEOUTS}},
            "routes": [{"path": "/chat", "dialect": client_dialect, "upstream": "up"}],
            "health": {"failure_threshold": 1000},
        }
        app = create_app(parse_config(data, env={"LEAK_KEY": LEAK_KEY}))
        client = await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
        path, body, headers = client_request(client_dialect, stream)
        async with client.post(path, json=body, headers=headers) as resp:
            raw = await resp.read()
            ans = read_answer(get(client_dialect), resp.status, resp.headers, raw, 0.0)
        await settle(app)
        assert len(up.requests) == 1
        assert up.requests[0].header("x-api-key") == LEAK_KEY  # it was sent, and quoted
        if LEAKS[fault]:
            assert ans.status == LEAKS[fault], raw
            message = error_message(get(client_dialect), ans)
        elif stream:
            assert ans.status == 200 and ans.stream_error is not None, raw
            message = ans.stream_error.message
        else:  # the upstream's declared error, as the status its dialect gives it
            assert ans.status >= 500 and not ans.streamed, raw
            message = error_message(get(client_dialect), ans)
        assert "invalid api key" in message and REDACTED in message, message
        basic = base64.b64encode(f"{LEAK_USER}:{LEAK_PASSWORD}".encode()).decode()
        logged = logs.getvalue()
        assert "invalid api key" in logged  # the error text was logged, scrubbed
        for secret in (LEAK_KEY, LEAK_PASSWORD, LEAK_TOKEN, basic, f"127.0.0.1:{up.port}",
                       "10.1.2.3", f"{LEAK_USER}:"):
            assert secret not in raw.decode("utf-8", "replace"), (secret, raw)
            assert secret not in logged, (secret, logged)
        assert "127.0.0.1" not in raw.decode("utf-8", "replace")  # (the log has the client's)
