"""The server tests' fake upstreams and client side, driven by the dialect registry: nothing here
names a dialect, so a dialect added to the registry is picked up by every server test.

**Upstreams.** A :class:`FakeUpstream` speaks one dialect at ``/chat`` (and at ``/chat`` plus the
dialect's ``stream_path`` where its streams are chosen by path). By default it answers with its
dialect's own samples (``samples/<dialect>/text.response.json`` and ``text.stream``, the bytes of
the API reference or a capture), which is enough for every test that only needs "a correct
answer". A :class:`Script` with ``scripted=True`` (implied by ``error_after`` / ``die_after``)
makes it answer a *scripted* answer through the dialect's own renderer and encoder instead: known
text in pieces, citations, follow-ups, thoughts, session state and usage, a mid-stream error event
or a dropped connection. That is for the tests whose point is what survives translation or where
a stream breaks, which no sample shows. Either way a script can delay, hold (``asyncio.Event``
gates), pace or replace the answer (a status with the dialect's sample error body, or a raw body).
The fake records what it was sent and what it said, and whether its client went away.

**Clients.** :func:`client_request` builds a request as a client of a dialect sends it, asking for
a stream the way the dialect declares (``stream_path``, ``stream_by_accept``, else the body's
flag). :func:`reader_for` reads what the gateway answers. It has the interface of the strict
readers (``tests/strict``: ``read_request``, ``read_whole``, ``read_stream``, ``read_error``,
returning :class:`strict.observed.Observed`); until those land it is an interim reader built on
the dialects' own parsers and decoders, made stricter where a reader must be (nothing may follow
a stream's error or finish). Switching to ``strict.reader_for`` changes this one function.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol

import aiohttp
import faults.upstream
import orjson
import ports
from aiohttp import web
from aiohttp.test_utils import TestClient
from multidict import CIMultiDict
from strict.observed import Observed, ObservedCall, ObservedMessage

from gateway.app import create_app
from gateway.canonical import (
    AssistantMessage,
    ChatRequest,
    ChatResponse,
    Citation,
    Message,
    OutputFormat,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    Usage,
    citations_of,
    context_with_citations,
    followups_of,
)
from gateway.config import parse_config
from gateway.dialects import (
    Dialect,
    client_path,
    get,
    names,
    routes_by_prefix,
    upstream_url_of,
)
from gateway.errors import ParseError
from gateway.framing import SniffingReader, encoder_for
from gateway.pipeline import ResponseAssembler

__all__ = [
    "CITATION_NAMES",
    "CLIENT_STATE",
    "FOLLOWUPS",
    "HOLD_MAX",
    "QUESTION",
    "TEXT",
    "UP_STATE",
    "USAGE",
    "FakeUpstream",
    "Fakes",
    "Reader",
    "Script",
    "SeededIds",
    "assert_failed_stream",
    "check_carried",
    "client_request",
    "closed_port",
    "dialect_at",
    "error_message",
    "eventually",
    "expected_state",
    "free_port",
    "known_to_a_new_process",
    "normal_finish",
    "other",
    "pairs",
    "read_answer",
    "reader_for",
    "sample_text",
    "serve_route",
    "split_frames",
    "text_so_far",
    "upstream_config",
]

HOLD_MAX = 45.0
"""The longest any fake waits on a gate: every test stays bounded even when it fails. A test
sets its gate within a second or two, except one that drives Chromium meanwhile (the status
page), which took over 10 s on a loaded 2-vCPU machine; under the 60 s test timeout."""

QUESTION = "What is covered?"
TEXT = "Héllo wörld 👋 — the answer\nin several pieces, \"quoted\" and done."
"""The text of a scripted answer."""
CITATIONS = [
    Citation("doc-one.pdf#page=2", "doc-one.pdf#page=2", None, "the first snippet"),
    Citation("https://example.com/two", "https://example.com/two", "https://example.com/two",
             "the second snippet"),
]
CITATION_NAMES = ["doc-one.pdf#page=2", "https://example.com/two"]
FOLLOWUPS = ["What else is covered?"]
USAGE = (11, 7)
"""A scripted answer's usage: (input tokens, output tokens), as :class:`Observed` has it."""
UP_STATE = "up-state-1"
CLIENT_STATE = "client-state-1"
CLIENT_MAX_TOKENS = 512
"""The output cap a client sends (dialects that require one reject a request without it)."""



class SeededIds:
    """Random bytes drawn from a seed, in place of the kernel's
    (:func:`gateway.canonical.use_id_source`): two translators, or two renderings of one answer,
    mint the same ids."""

    def __init__(self) -> None:
        self._rng = random.Random(0)

    def take(self, n: int) -> bytes:
        return self._rng.randbytes(n)


class ZeroIds:
    """Ids of zero bytes (:func:`gateway.canonical.use_id_source`): every id minted is the same,
    whichever translator mints it and in whatever order (an encoder and its twin, given the same
    events, are in the same state)."""

    def take(self, n: int) -> bytes:
        return bytes(n)


# --- the registry, for tests that need "some dialect" -------------------------------------------


def pairs() -> list[tuple[str, str]]:
    """Every (client dialect, upstream dialect) of the registry."""
    return [(c, u) for c in names() for u in names()]


def dialect_at(i: int) -> str:
    """The registry's ``i``-th dialect, cyclically: a test that needs *some* dialect takes one by
    position, so that the tests spread their choices over the registry and name none."""
    all_names = names()
    return all_names[i % len(all_names)]


@cache
def known_to_a_new_process() -> tuple[str, ...]:
    """The dialects a freshly started ``chat-gateway`` knows (built in, or plugins): those a
    test that starts one may configure. A dialect the tests registered in this process only (the
    fixture dialect) is not among them. Asked of a new process's registry."""
    code = "import json; from gateway.dialects import names; print(json.dumps(names()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60,
                         check=True).stdout
    known = tuple(orjson.loads(out))
    assert known and set(known) <= set(names()), known
    return known


def other(name: str) -> str:
    """The dialect after ``name`` in the registry (cyclically): a different dialect whenever two
    are registered, so that a request between the two is translated."""
    all_names = names()
    return all_names[(all_names.index(name) + 1) % len(all_names)]


# --- reading what the gateway answers ------------------------------------------------------------


class Reader(Protocol):
    """The strict readers' interface (see ``tests/strict/observed.py``)."""

    def read_request(self, body: Any) -> Observed: ...
    def read_whole(self, body: Any) -> Observed: ...
    def read_stream(self, data: bytes) -> Observed: ...
    def read_error(self, body: Any) -> str: ...


def reader_for(dialect: Dialect | str) -> Reader:
    """The reader of a dialect's bodies.

    Interim, until the strict readers of ``tests/strict`` land (then this becomes
    ``strict.reader_for``): it reads with the dialect's own parser and decoder, so it cannot
    catch a key misspelled alike in the gateway's writer and reader; the strict readers can.
    """
    d = get(dialect) if isinstance(dialect, str) else dialect
    return _DecodingReader(d)


class _DecodingReader:
    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def read_request(self, body: Any) -> Observed:
        req = self.dialect.parse_request(body)
        return Observed(
            messages=[ObservedMessage(m.role, m.text, tool_result_for=m.tool_call_id)
                      for m in req.messages],
            tools=[t.name for t in req.tools],
            session_state=req.session_state,
            model=req.model,
            stream=req.stream,
        )

    def read_whole(self, body: Any) -> Observed:
        assert self.dialect.parse_error(body) is None, f"an error body: {body!r}"
        return _observed(self.dialect.parse_response(body))

    def read_stream(self, data: bytes) -> Observed:
        reader = SniffingReader(named=self.dialect.named_events)
        decoder = self.dialect.decoder()
        assembler = ResponseAssembler()
        over: StreamEvent | None = None
        for payload in [*reader.feed(data), *reader.finish()]:
            events = decoder.decode(payload)
            # (a dialect may end with more than one event, e.g. an error and a final status:
            # which may follow which is the strict readers' to say)
            assert over is None or not events, \
                f"{payload!r} followed the stream's {type(over).__name__}"
            for e in events:
                assembler.add(e)
                if isinstance(e, StreamFinish | StreamError):
                    over = e
        for e in decoder.end():
            assembler.add(e)
            if isinstance(e, StreamError) and over is None:
                raise AssertionError(f"the stream ended before it finished: {e.message}")
        seen = _observed(assembler.response())
        if assembler.error is not None:
            seen.error = assembler.error.message
            seen.finish = None
        return seen

    def read_error(self, body: Any) -> str:
        err = self.dialect.parse_error(body)
        assert err is not None, f"not a {self.dialect.name} error body: {body!r}"
        return err.message


def _observed(resp: ChatResponse) -> Observed:
    ctx = resp.context
    agents = [(m.agent, m.content) for m in resp.messages] \
        if any(m.agent for m in resp.messages) else []
    return Observed(
        text=resp.text,
        agents=agents,
        citations=[c.title or c.id or c.url or "" for c in citations_of(ctx)],
        followups=followups_of(ctx),
        thoughts=isinstance(ctx, dict) and bool(ctx.get("thoughts")),
        session_state=resp.session_state,
        usage=None if resp.usage is None else (resp.usage.input_tokens,
                                               resp.usage.output_tokens),
        tool_calls=[ObservedCall(c.id, c.name, orjson.loads(c.arguments))
                    for c in resp.tool_calls],
        reasoning="".join(r.text for r in resp.reasoning),
        finish=resp.finish_reason,
        model=resp.model,
    )


def read_answer(dialect: str, content_type: str, raw: bytes) -> Observed:
    """A 200 answer as a client of ``dialect`` reads it: a whole answer when it is JSON, else a
    stream."""
    reader = reader_for(dialect)
    if content_type.split(";")[0].strip() == "application/json":
        return reader.read_whole(orjson.loads(raw))
    return reader.read_stream(raw)


def error_message(dialect: str, body: Any) -> str:
    """The message of an error answer, read as a client of ``dialect`` reads it."""
    return reader_for(dialect).read_error(body)


def text_so_far(dialect: str, data: bytes) -> str:
    """The text in the complete frames of a stream still arriving (no reader may judge an
    unfinished stream, so this one only decodes)."""
    d = get(dialect)
    reader = SniffingReader(named=d.named_events)
    decoder = d.decoder()
    return "".join(e.text for p in reader.feed(data) for e in decoder.decode(p)
                   if isinstance(e, TextDelta))


@cache
def normal_finish(dialect: str, *, stream: bool) -> Any:
    """How the dialect's reader sees the end of a normal answer (its sample), which is what a
    client must see at the end of any answer that finished normally. A stream sample that shows
    no finish (a capture that stops before its last line) defers to the whole answer's."""
    d, reader = get(dialect), reader_for(dialect)
    whole = reader.read_whole(d.samples.responses["text"]).finish
    if stream:
        return reader.read_stream(d.samples.streams["text"]).finish or whole
    return whole


@cache
def sample_text(dialect: str, *, stream: bool) -> str:
    """The text of the dialect's sample answer (what a fake of that dialect says by default)."""
    d, reader = get(dialect), reader_for(dialect)
    if stream:
        return reader.read_stream(d.samples.streams["text"]).text
    return reader.read_whole(d.samples.responses["text"]).text


def expected_state(client: str, upstream: str) -> Any:
    """The session state a client sees after a scripted answer: none when its dialect has none,
    its own back when the upstream's dialect has none (the gateway echoes it), else the
    upstream's."""
    if get(client).capabilities.session_state == "none":
        return None
    if get(upstream).capabilities.session_state == "none":
        return CLIENT_STATE
    return UP_STATE


def check_carried(seen: Observed, client: str, upstream: str, *, streamed: bool,
                  up_streamed: bool) -> None:
    """A scripted answer, as the client saw it: its text, and each field both dialects carry
    (citations, follow-ups, thoughts, usage, session state), and the normal finish."""
    c, u = get(client).capabilities, get(upstream).capabilities
    assert seen.error is None, seen.error
    assert seen.text == TEXT
    if c.citations and u.citations:
        assert seen.citations == CITATION_NAMES
    if c.followups and u.followups:
        assert seen.followups == FOLLOWUPS
    if c.thoughts and u.thoughts:
        assert seen.thoughts
    usage_out = c.usage_stream if streamed else c.usage_whole
    usage_in = u.usage_stream if up_streamed else u.usage_whole
    if usage_out and usage_in:
        assert seen.usage == USAGE
    assert seen.session_state == expected_state(client, upstream)
    assert seen.finish == normal_finish(client, stream=streamed)


# --- asking as a client --------------------------------------------------------------------------


def client_request(dialect: str, path: str = "/c", *, stream: bool, state: Any = CLIENT_STATE,
                   text: str = QUESTION, messages: list[Message] | None = None,
                   output: OutputFormat | None = None) -> tuple[str, Any, dict[str, str]]:
    """The path, body and headers with which a client of ``dialect`` asks ``text`` (or
    ``messages``), carrying ``state`` where its dialect carries session state. A stream is asked
    for as the dialect declares: its ``stream_path``, else ``Accept: text/event-stream`` where
    that alone asks, else the body's flag."""
    d = get(dialect)
    # (the path asks for the stream: a stream path, or a dialect that reads the method in it)
    by_path = stream and (d.stream_path is not None or routes_by_prefix(d))
    by_accept = stream and not by_path and d.stream_by_accept
    req = ChatRequest(messages or [Message("user", text)], session_state=state, output=output)
    body = d.render_request(req, stream=stream and not by_path and not by_accept,
                            model="client-model", max_tokens=CLIENT_MAX_TOKENS)
    headers = {"Accept": "text/event-stream"} if by_accept else {}
    path = client_path(d, path, "client-model", stream=stream)
    return path, body, headers


# --- fake upstreams ------------------------------------------------------------------------------


@dataclass
class Script:
    """How a fake answers one request."""

    status: int = 200
    """Not 200: the dialect's sample error body with this status (unless ``body`` is set)."""
    body: bytes | None = None
    """A raw body that replaces the answer (an error page, HTML, …)."""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds before anything is sent."""
    stream: bool | None = None
    """Force a streamed (True) or whole (False) answer; None: as the request asks."""
    chunk_delay: float = 0.0
    """Streams: seconds between frames."""
    hold_before: asyncio.Event | None = None
    """Wait for this before sending anything at all."""
    hold_after_first: asyncio.Event | None = None
    """Streams: wait for this after the first frame that carries text."""
    case: str = "text"
    """The dialect's sample answered (``samples/<dialect>/<case>.*``)."""
    scripted: bool = False
    """Answer the scripted answer below instead of the dialect's sample."""
    error_after: int | None = None
    """Scripted streams: send the dialect's error event after this many text pieces."""
    die_after: int | None = None
    """Scripted streams: drop the connection after this many text pieces."""
    text: str = TEXT
    pieces: int = 4
    context: Any = field(default_factory=lambda: answer_context())
    session_state: Any = UP_STATE
    usage: tuple[int, int] | None = USAGE
    finish_reason: str = "stop"

    @property
    def uses_encoder(self) -> bool:
        return self.scripted or self.error_after is not None or self.die_after is not None


def answer_context() -> dict[str, Any]:
    ctx = context_with_citations(CITATIONS, {"thoughts": [{"title": "t", "description": "d"}]})
    assert isinstance(ctx, dict)
    return {**ctx, "followup_questions": FOLLOWUPS}


@dataclass
class Seen:
    """A request as a fake received it, and what it said."""

    path: str
    headers: Mapping[str, str]
    """Case-insensitive, as HTTP header names are."""
    body: Any
    stream: bool
    said: str = ""
    """The text of the answer it sent (empty for an error or a raw body)."""


@dataclass(frozen=True, slots=True)
class Frame:
    data: bytes
    text: bool
    """It carries answer text."""


_SSE_EVENT = re.compile(rb".*?(?:\r\n\r\n|\n\n|\r\r)", re.S)
_LINE = re.compile(rb".*?(?:\r\n|\n|\r)", re.S)


def split_frames(dialect: Dialect, data: bytes) -> list[Frame]:
    """A stream body cut into its frames (SSE events or JSON lines) as sent, each marked with
    whether it carries text (by the dialect's decoder: this is the upstream side)."""
    pattern = _SSE_EVENT if dialect.framing == "sse" else _LINE
    pieces = [m.group(0) for m in pattern.finditer(data)]
    rest = data[sum(map(len, pieces)):]
    if rest:
        pieces.append(rest)
    reader, decoder = SniffingReader(named=dialect.named_events), dialect.decoder()
    frames = []
    for piece in pieces:
        events = [e for p in reader.feed(piece) for e in decoder.decode(p)]
        frames.append(Frame(piece, any(isinstance(e, TextDelta) for e in events)))
    return frames


class FakeUpstream:
    def __init__(self, dialect: str, script: Script | None = None) -> None:
        self.dialect = get(dialect)
        self.default = script or Script()
        self.queue: list[Script] = []
        """Scripts for the next requests, in order; then :attr:`default`."""
        self.seen: list[Seen] = []
        self.gone = asyncio.Event()
        """Set when the gateway went away while this fake was answering."""
        self.finished = 0
        self.health_status = 200
        self.health_checks = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    # --- addresses -----------------------------------------------------------------------------

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/chat"

    @property
    def name(self) -> str:
        return self.dialect.name

    def path_for(self, stream: bool, model: str | None = None) -> str:
        """The path the gateway posts to for a whole or streamed answer (of ``model``, for a
        dialect that names it in the path)."""
        built = upstream_url_of(self.dialect, "/chat", model, stream=stream)
        if built is not None:
            return built.split("?", 1)[0]
        suffix = self.dialect.stream_path
        return "/chat" + suffix if stream and suffix else "/chat"

    def is_path_for(self, path: str, stream: bool) -> bool:
        """Whether the gateway posted to ``path`` for a whole or streamed answer (of any model,
        for a dialect that names it in the path)."""
        if routes_by_prefix(self.dialect):
            target = self.dialect.read_target(  # type: ignore[attr-defined]
                path.removeprefix("/chat/"), "POST", {})
            return path.startswith("/chat/") and target is not None \
                and target.kind == "chat" and target.stream is stream
        return path == self.path_for(stream)

    @property
    def error_text(self) -> str:
        """The message of the dialect's sample error body (the answer to a scripted status)."""
        return reader_for(self.dialect).read_error(self.dialect.samples.error)

    def said(self, stream: bool) -> str:
        """The text of this fake's default (sample) answer."""
        return sample_text(self.name, stream=stream)

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> FakeUpstream:
        app = web.Application()
        app.router.add_post("/chat", self._chat)
        if routes_by_prefix(self.dialect):  # the model and method follow the base URL
            app.router.add_post("/chat/{tail:.+}", self._chat)
        if self.dialect.stream_path:
            app.router.add_post(self.path_for(True), self._chat)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                                     shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- handlers ------------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        self.health_checks += 1
        return web.json_response({"status": self.health_status}, status=self.health_status)

    def _wants_stream(self, request: web.Request, body: Any) -> bool:
        """As a server of this dialect decides: by path where it declares a stream path, else
        by the request's own flag or (where that alone asks) the Accept header."""
        if self.dialect.stream_path:
            return request.path == self.path_for(True)
        if routes_by_prefix(self.dialect):
            target = self.dialect.read_target(  # type: ignore[attr-defined]
                request.path.removeprefix("/chat/"), request.method, request.query)
            return target is not None and target.stream is True
        if self.dialect.stream_by_accept and "text/event-stream" in request.headers.get(
                "Accept", ""):
            return True
        try:
            return self.dialect.parse_request(body).stream
        except ParseError:
            return False

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        script = self.queue.pop(0) if self.queue else self.default
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw
        seen = Seen(request.path, CIMultiDict(request.headers), body,
                    self._wants_stream(request, body))
        self.seen.append(seen)
        try:
            return await self._answer(request, script, seen)
        except asyncio.CancelledError:
            self.gone.set()
            raise
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            self.gone.set()
            raise

    async def _answer(self, request: web.Request, s: Script,
                      seen: Seen) -> web.StreamResponse:
        if s.hold_before is not None:
            await asyncio.wait_for(s.hold_before.wait(), HOLD_MAX)
        if s.delay:
            await asyncio.sleep(s.delay)
        if s.body is not None or s.status != 200:
            raw = s.body if s.body is not None else orjson.dumps(self.dialect.samples.error)
            self.finished += 1
            return web.Response(status=s.status, body=raw, headers={
                "Content-Type": s.content_type, **s.headers})
        stream = seen.stream if s.stream is None else s.stream
        seen.stream = stream
        if not stream:
            if s.uses_encoder:
                req = self.dialect.parse_request(seen.body)
                seen.said = s.text
                body = orjson.dumps(self.dialect.render_response(_scripted_whole(s), req))
            else:
                answer = self.dialect.samples.responses[s.case]
                seen.said = reader_for(self.dialect).read_whole(answer).text
                body = orjson.dumps(answer)
            self.finished += 1
            return web.Response(body=body, content_type="application/json", headers=s.headers)
        out = web.StreamResponse(headers={"Content-Type": self.dialect.stream_content_type,
                                          **s.headers})
        await out.prepare(request)
        if s.uses_encoder:
            seen.said = s.text
            await self._scripted_stream(request, out, s, seen)
        else:
            data = self.dialect.samples.streams[s.case]
            seen.said = reader_for(self.dialect).read_stream(data).text
            await self._sample_stream(out, s, data)
        self.finished += 1
        return out

    async def _sample_stream(self, out: web.StreamResponse, s: Script, data: bytes) -> None:
        held = False
        for frame in split_frames(self.dialect, data):
            await out.write(frame.data)
            if frame.text and not held and s.hold_after_first is not None:
                held = True
                await asyncio.wait_for(s.hold_after_first.wait(), HOLD_MAX)
            if s.chunk_delay:
                await asyncio.sleep(s.chunk_delay)
        await out.write_eof()

    async def _scripted_stream(self, request: web.Request, out: web.StreamResponse, s: Script,
                               seen: Seen) -> None:
        req = self.dialect.parse_request(seen.body)
        encoder, frame = self.dialect.encoder(req), encoder_for(self.dialect.framing)

        async def send(event: StreamEvent) -> None:
            data = b"".join(frame(p) for p in encoder.encode(event))
            if data:
                await out.write(data)

        await send(StreamStart(context=s.context, session_state=s.session_state,
                               id="chatcmpl-up-1", created=1_700_000_000, model="up-model"))
        for i, piece in enumerate(split(s.text, s.pieces)):
            if s.die_after is not None and i == s.die_after:
                assert request.transport is not None
                request.transport.abort()
                return
            if s.error_after is not None and i == s.error_after:
                await send(StreamError("upstream broke down mid-answer"))
                await out.write_eof()
                return
            await send(TextDelta(piece))
            if i == 0 and s.hold_after_first is not None:
                await asyncio.wait_for(s.hold_after_first.wait(), HOLD_MAX)
            if s.chunk_delay:
                await asyncio.sleep(s.chunk_delay)
        await send(StreamFinish(s.finish_reason, _usage(s.usage)))
        await out.write_eof()


def _scripted_whole(s: Script) -> ChatResponse:
    return ChatResponse(
        messages=[AssistantMessage(s.text)], context=s.context, session_state=s.session_state,
        finish_reason=s.finish_reason, usage=_usage(s.usage), id="chatcmpl-up-1",
        created=1_700_000_000, model="up-model")


def _usage(v: tuple[int, int] | None) -> Usage | None:
    return None if v is None else Usage(input_tokens=v[0], output_tokens=v[1])


def split(text: str, n: int) -> list[str]:
    n = max(1, min(n, len(text)))
    size = -(-len(text) // n)
    return [text[i:i + size] for i in range(0, len(text), size)]


class Fakes:
    """Starts fakes and closes them all at the end of a test."""

    def __init__(self) -> None:
        self._all: list[FakeUpstream] = []

    async def start(self, dialect: str, script: Script | None = None) -> FakeUpstream:
        fake = await FakeUpstream(dialect, script).start()
        self._all.append(fake)
        return fake

    async def close(self) -> None:
        for fake in self._all:
            with contextlib.suppress(Exception):
                await fake.close()


async def eventually(check: Callable[[], Awaitable[bool] | bool], within: float = 5.0) -> None:
    """Poll ``check`` (sync or async) until it holds; fail after ``within`` seconds."""
    async with asyncio.timeout(within):
        while True:
            result = check()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await asyncio.sleep(0.05)


def free_port() -> int:
    """A port for a server that binds it itself (:mod:`ports`)."""
    return ports.free_port()


def closed_port() -> int:
    """A port on which nothing listens (connections are refused), held for the tests' run."""
    return faults.upstream.closed_port()


def upstream_config(fake: FakeUpstream | str, url: str | None = None,
                    **extra: Any) -> dict[str, Any]:
    """An upstream of the fake (or of ``fake`` dialect at ``url``). Its timeouts leave a busy
    machine room (a connect to 127.0.0.1 was seen to take 3.4 s with both cores taken): a test
    about a timeout sets its own."""
    if isinstance(fake, str):
        assert url is not None
        return {"dialect": fake, "url": url, "connect_timeout": 10, "timeout": 10, **extra}
    return {"dialect": fake.name, "url": url or fake.url, "connect_timeout": 10, "timeout": 10,
            "health_url": None, **extra}


def assert_failed_stream(seen: Observed, client: str) -> None:
    """A stream that failed: the client read an error, and no normal finish (where its dialect
    marks one)."""
    assert seen.error, seen
    clean = normal_finish(client, stream=True)
    assert seen.finish is None or seen.finish != clean, seen.finish


async def serve_route(aiohttp_client: Any, client: str, fake: FakeUpstream,
                      route: dict[str, Any] | None = None,
                      **upstream: Any) -> TestClient[Any, Any]:
    """The real app, served as ``serve`` does, with one route ``/c`` in ``client``'s dialect
    (plus ``route`` keys) to ``fake`` (plus ``upstream`` keys)."""
    cfg = {"upstreams": {"u": upstream_config(fake, **upstream)},
           "routes": [{"path": "/c", "dialect": client, "upstream": "u", **(route or {})}]}
    gw: TestClient[Any, Any] = await aiohttp_client(
        create_app(parse_config(cfg, env={})), server_kwargs={"handler_cancellation": True})
    return gw
