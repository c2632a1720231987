"""Property tests: random text, session states and citations through every dialect pair.

Each example runs all 16 (upstream, client) pairs, whole and streamed, with the upstream's bytes
cut at random places. What the target can carry must arrive exactly: the text always; the session
state where both sides carry it (chatui only strings; the client's own state comes back when the
upstream has none); the citations between the three dialects that carry them; the follow-up
questions between the two protocol dialects.
"""

from __future__ import annotations

from itertools import cycle
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from readback import CAN_CITE, assemble, payloads_of

from gateway.canonical import (
    AssistantMessage,
    ChatRequest,
    ChatResponse,
    Citation,
    ContextUpdate,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    citations_of,
    context_with_citations,
    followups_of,
)
from gateway.dialects import DIALECT_NAMES, get
from gateway.framing import RawData, encoder_for
from gateway.pipeline import ResponseAssembler, StreamTranslator, translate_response

P0128, P0529, CHATUI, OPENAI = DIALECT_NAMES
# every example runs 16 pairs: the nightly profile (HYPOTHESIS_PROFILE=fuzz) needs more than the
# default 60 s per test
pytestmark = pytest.mark.timeout(max(60, int(settings().max_examples * 0.06)))
PAIRS = [(u, c) for u in DIALECT_NAMES for c in DIALECT_NAMES]
PROTOCOLS = {P0128, P0529}

# --- strategies ----------------------------------------------------------------------------------

TRICKY = ["👋🏽", "🇫🇷", "👨‍👩‍👧", "\n", "\r\n", "\r", "\n\n", "data: x", "}{", "\u2028", "é", "\\",
          '"', "\x00", "**A:** ", ": ", "[DONE]"]
piece = st.one_of(st.text(max_size=12), st.sampled_from(TRICKY))
pieces = st.lists(piece, max_size=12)
"""The answer's text as the upstream's deltas (empty ones included)."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                  max_size=3),
    max_leaves=8,
)
states = st.one_of(st.none(), st.text(max_size=10), json_values)

names = st.text(min_size=1, max_size=16).filter(lambda s: s == s.strip() and ": " not in s)
url_names = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1,
                    max_size=8).map(lambda s: "https://example.com/" + s)


@st.composite
def citation_lists(draw: st.DrawFn) -> list[Citation]:
    chosen = draw(st.lists(names | url_names, max_size=4, unique=True))
    out = []
    for name in chosen:
        snippet = draw(st.none() | st.text(max_size=16))
        url = name if name.startswith(("http://", "https://")) else None
        out.append(Citation(name, name, url, snippet))
    return out


followup_lists = st.lists(st.text(max_size=12), max_size=3)
chunk_sizes = st.lists(st.integers(1, 64), min_size=1, max_size=8)

# --- helpers -------------------------------------------------------------------------------------


def wire(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def can_carry(dialect: str, state: Any) -> bool:
    if state is None or dialect == OPENAI:
        return False
    return dialect != CHATUI or isinstance(state, str)


def expected_state(up: str, cl: str, up_state: Any, sent: Any) -> Any:
    sent = sent if can_carry(cl, sent) else None
    effective = up_state if can_carry(up, up_state) else sent
    return effective if can_carry(cl, effective) else sent


def client_request(client: str, state: Any, *, stream: bool) -> ChatRequest:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "q"}]}
    key = {P0128: "session_state", P0529: "sessionState", CHATUI: "conversationId"}.get(client)
    if key is not None and can_carry(client, state):
        body[key] = state
    if client == OPENAI:
        body.update(model="m", stream=stream, stream_options={"include_usage": True})
    req = get(client).parse_request(wire(body))
    req.stream = stream
    return req


def upstream_request(upstream: str) -> ChatRequest:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "q"}]}
    if upstream == P0529:
        body["session_state"] = None
    return get(upstream).parse_request(body)


def context_of(cites: list[Citation], followups: list[str]) -> Any:
    ctx = context_with_citations(cites)
    if followups:
        ctx = {**(ctx or {}), "followup_questions": followups}
    return ctx


def upstream_bytes(up: str, events: list[StreamEvent]) -> bytes:
    dialect = get(up)
    enc, frame = dialect.encoder(upstream_request(up)), encoder_for(dialect.framing)
    return b"".join(frame(p) for e in events for p in enc.encode(e))


def translate(up: str, cl: str, req: ChatRequest, data: bytes,
              sizes: list[int]) -> tuple[StreamTranslator, bytes]:
    t = StreamTranslator(get(up), get(cl), req)
    out, i, size = [], 0, cycle(sizes)
    while i < len(data):
        n = next(size)
        out.append(t.feed(data[i:i + n]))
        i += n
    out.append(t.finish())
    return t, b"".join(out)


def read_as_client(cl: str, data: bytes) -> tuple[ResponseAssembler, list[Any]]:
    payloads = payloads_of(data)
    return assemble(cl, payloads), payloads


def check_carried(up: str, cl: str, back: ChatResponse, cites: list[Citation],
                  followups: list[str]) -> None:
    if up in CAN_CITE and cl in CAN_CITE:
        # data_points.text holds the sources with a snippet, citations all of them: the ones
        # with no snippet come back after the others
        assert citations_of(back.context) == [c for c in cites if c.snippet is not None] + [
            c for c in cites if c.snippet is None]
    elif OPENAI in (up, cl):
        assert citations_of(back.context) == []
    if up in PROTOCOLS and cl in PROTOCOLS:
        assert followups_of(back.context) == followups


# --- properties ----------------------------------------------------------------------------------


@given(pieces, states, states, citation_lists(), followup_lists, chunk_sizes)
def test_stream_every_pair(parts: list[str], up_state: Any, sent: Any, cites: list[Citation],
                           followups: list[str], sizes: list[int]) -> None:
    text = "".join(parts)
    # citations first, follow-ups later (nested, as the reference backend sends them)
    events: list[StreamEvent] = [StreamStart(context=context_of(cites, []),
                                             session_state=up_state)]
    events += [TextDelta(p) for p in parts]
    if followups:
        events.append(ContextUpdate(context={"context": context_of(cites, []),
                                             "followup_questions": followups}))
    events.append(StreamFinish())
    for up, cl in PAIRS:
        data = upstream_bytes(up, events)
        t, out = translate(up, cl, client_request(cl, sent, stream=True), data, sizes)
        assert t.error is None, (up, cl, t.error)
        asm, payloads = read_as_client(cl, out)
        back = asm.response()
        assert asm.error is None
        assert back.text == text, (up, cl)
        assert back.session_state == expected_state(up, cl, up_state, sent), (up, cl)
        check_carried(up, cl, back, cites, followups)
        if cl == OPENAI:
            assert payloads[-1] == RawData("[DONE]")
        if cl == CHATUI:
            assert payloads[-1]["status"] == "completed" and payloads[-1]["content"] == text


@given(pieces, states, states, citation_lists(), followup_lists)
def test_whole_every_pair(parts: list[str], up_state: Any, sent: Any, cites: list[Citation],
                          followups: list[str]) -> None:
    text = "".join(parts)
    resp = ChatResponse([AssistantMessage(text)], context=context_of(cites, followups),
                        session_state=up_state)
    for up, cl in PAIRS:
        body = wire(get(up).render_response(resp, upstream_request(up)))
        req = client_request(cl, sent, stream=False)
        back = get(cl).parse_response(wire(translate_response(body, get(up), get(cl), req)))
        assert back.text == text, (up, cl)
        assert back.session_state == expected_state(up, cl, up_state, sent), (up, cl)
        check_carried(up, cl, back, cites, followups)


@given(pieces, st.text(min_size=1, max_size=24), chunk_sizes)
def test_stream_error_every_pair(parts: list[str], message: str, sizes: list[int]) -> None:
    events: list[StreamEvent] = [StreamStart(), *(TextDelta(p) for p in parts),
                                 StreamError(message)]
    for up, cl in PAIRS:
        t, out = translate(up, cl, client_request(cl, None, stream=True),
                           upstream_bytes(up, events), sizes)
        assert t.error is not None and t.error.message == message
        asm, payloads = read_as_client(cl, out)
        assert asm.error is not None and asm.error.message == message, (up, cl)
        assert asm.response().text == "".join(parts)
        assert RawData("[DONE]") not in payloads
        last = payloads[-1]
        assert last["status"] == "failed" if cl == CHATUI else "error" in last


@given(st.lists(st.tuples(st.sampled_from(["Research", "Code", None]), pieces), min_size=1,
                max_size=4), chunk_sizes)
def test_multi_agent_stream_every_pair(turns: list[tuple[str | None, list[str]]],
                                       sizes: list[int]) -> None:
    """Each agent's text reaches every client, headed as :attr:`ChatResponse.text` heads it."""
    events: list[StreamEvent] = [StreamStart()]
    messages: list[AssistantMessage] = []
    for agent, parts in turns:
        text = "".join(parts)
        if not text or (messages and messages[-1].agent == agent):
            continue  # an empty turn sends nothing; a repeated agent continues its message
        messages.append(AssistantMessage(text, agent=agent))
        events += [TextDelta(p, agent) for p in parts if p]
    events.append(StreamFinish())
    expected = ChatResponse(messages or [AssistantMessage("")]).text
    for up, cl in PAIRS:
        t, out = translate(up, cl, client_request(cl, None, stream=True),
                           upstream_bytes(up, events), sizes)
        assert t.error is None
        assert read_as_client(cl, out)[0].response().text == expected, (up, cl)
