"""Every ordered (upstream dialect, client dialect) pair, whole and streamed, plus requests.

A canonical answer (unicode text, citations, follow-ups, session state, usage) is rendered in the
upstream dialect, translated by the pipeline into the client dialect, and read back the way a client
of that dialect would read it. What both sides of a pair can carry must arrive unchanged:

- text: every dialect;
- citations: protocol-2024-01-28, protocol-2024-05-29, chatui (``sources``);
- follow-up questions: the two protocol dialects;
- session state: the protocol dialects (any JSON), chatui (strings, as ``conversationId``); when the
  upstream has none the client gets back the one it sent;
- usage: protocol-2024-01-28 and openai.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from readback import CAN_CITE, check_framing, payloads_of, read_back

from gateway.canonical import (
    AssistantMessage,
    ChatError,
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
from gateway.dialects import DIALECT_NAMES, Dialect, get
from gateway.framing import RawData, encoder_for
from gateway.pipeline import (
    StreamTranslator,
    translate_error,
    translate_request,
    translate_response,
)

P0128, P0529, CHATUI, OPENAI = DIALECT_NAMES
PAIRS = [(u, c) for u in DIALECT_NAMES for c in DIALECT_NAMES]
PAIR_IDS = [f"{u}->{c}" for u, c in PAIRS]

CAN_FOLLOW = {P0128, P0529}
USAGE_WHOLE = {P0128, OPENAI}

TEXT = ("Héllo wörld 👋🏽 — «quotes» \"double\" \\ back\\slash\n"
        "line two\r\nline three\n\n日本語のテキスト 🇫🇷👨‍👩‍👧 end")
CITATIONS = [
    Citation("Benefit_Options.pdf#page=3", "Benefit_Options.pdf#page=3", None,
             "Both plans: cover 🏥 care\nand more"),
    Citation("https://example.com/a?b=1", "https://example.com/a?b=1",
             "https://example.com/a?b=1", "web snippet ü"),
    Citation("notes.txt", "notes.txt", None, None),
]
FOLLOWUPS = ["What about dental? 🦷", "And vision?"]
USAGE = {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}
STATES: dict[str, tuple[Any, Any]] = {
    # kind: (the upstream's session state, the one the client sent)
    "string": ("sess-up-ü-🙂", "sess-req-1"),
    "object": ({"conversation_id": 1234, "ü": ["x", None, True, 1.5]}, {"conversation_id": 1}),
    "mixed": ({"conversation_id": 1234}, "sess-req-1"),
}
ERROR_MESSAGE = "upstream exploded: ü 💥\nsecond line"


# --- helpers -------------------------------------------------------------------------------------


def wire(value: Any) -> Any:
    """What the other side of a socket reads."""
    return orjson.loads(orjson.dumps(value))


def can_carry(dialect: str, state: Any) -> bool:
    if state is None or dialect == OPENAI:
        return False
    return dialect != CHATUI or isinstance(state, str)


def messages() -> list[dict[str, Any]]:
    return [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi ü"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "What is covered? 🤔"}]


def client_body(client: str, *, stream: bool, state: Any,
                temperature: float | None = None) -> dict[str, Any]:
    """A request as a real client of ``client`` sends it."""
    body: dict[str, Any] = {"messages": messages()}
    if client == P0128:
        body["stream"] = stream
        body["session_state"] = state
        if temperature is not None:
            body["context"] = {"overrides": {"temperature": temperature, "top": 3}}
    elif client == P0529:  # the JavaScript SDK's camelCase
        if state is not None:
            body["sessionState"] = state
        if temperature is not None:
            body["context"] = {"overrides": {"temperature": temperature}}
    elif client == CHATUI:
        if isinstance(state, str):
            body["conversationId"] = state
    else:
        body["model"] = "gpt-client"
        body["stream"] = stream
        if stream:
            body["stream_options"] = {"include_usage": True}
        if temperature is not None:
            body["temperature"] = temperature
    return body


def client_request(client: str, *, stream: bool, state: Any) -> ChatRequest:
    req = get(client).parse_request(wire(client_body(client, stream=stream, state=state)))
    req.stream = stream
    return req


def upstream_request(upstream: str) -> ChatRequest:
    """The request the upstream answers, in its own dialect: the reference RAG backend spells
    ``session_state``; an OpenAI upstream was asked for usage."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "q"}]}
    if upstream == P0529:
        body["session_state"] = None
    if upstream == OPENAI:
        body["model"] = "up-model"
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return get(upstream).parse_request(body)


def answer_context() -> dict[str, Any]:
    ctx = context_with_citations(CITATIONS, {"thoughts": [{"title": "t", "description": "d"}]})
    assert isinstance(ctx, dict)
    return ctx


def canonical_answer(state: Any) -> ChatResponse:
    return ChatResponse(
        messages=[AssistantMessage(TEXT)],
        context={**answer_context(), "followup_questions": FOLLOWUPS},
        session_state=state, finish_reason="stop", usage=USAGE,
        id="chatcmpl-up-1", created=1_700_000_000, model="up-model")


def split_text(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), k=min(12, len(text) - 1)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def stream_events(state: Any, rng: random.Random, *, error: bool = False) -> list[StreamEvent]:
    """Context first, text as many deltas, follow-ups later in a nested context (as the reference
    backend sends them), then the finish or an error."""
    events: list[StreamEvent] = [StreamStart(
        context=answer_context(), session_state=state, id="chatcmpl-up-1",
        created=1_700_000_000, model="up-model")]
    pieces = split_text(TEXT, rng)
    if error:
        pieces = pieces[: len(pieces) // 2]
    events.extend(TextDelta(p) for p in pieces)
    if error:
        events.append(StreamError(ERROR_MESSAGE))
        return events
    events.append(ContextUpdate(context={"context": answer_context(),
                                         "followup_questions": FOLLOWUPS}))
    events.append(StreamFinish("stop", USAGE))
    return events


def encode_frames(dialect: Dialect, req: ChatRequest, events: list[StreamEvent]) -> list[bytes]:
    enc, frame = dialect.encoder(req), encoder_for(dialect.framing)
    return [frame(p) for e in events for p in enc.encode(e)]


def random_chunks(data: bytes, rng: random.Random) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = rng.choice((1, 2, 3, 5, 8, 13, 64, 512))
        out.append(data[i:i + n])
        i += n
    return out


def translate_stream(up: str, cl: str, req: ChatRequest, data: bytes,
                     rng: random.Random) -> tuple[StreamTranslator, bytes]:
    t = StreamTranslator(get(up), get(cl), req)
    out = b"".join(t.feed(c) for c in random_chunks(data, rng))
    return t, out + t.finish()


def expected_state(up: str, cl: str, kind: str) -> Any:
    """The upstream's state where both carry it, else the one the client sent (a chatui client
    keeps its own ``conversationId`` when the upstream's state is not a string)."""
    up_state, req_state = STATES[kind]
    sent = req_state if can_carry(cl, req_state) else None
    effective = up_state if can_carry(up, up_state) else sent
    return effective if can_carry(cl, effective) else sent


def session_keys_on_wire(payloads: list[Any]) -> set[str]:
    return {k for p in payloads if isinstance(p, dict)
            for k in ("sessionState", "session_state") if k in p}


def check_synthesised(cl: str, payloads: list[Any], text: str) -> None:
    """What a client of ``cl`` expects around the text of a clean stream."""
    if cl == OPENAI:
        assert payloads[-1] == RawData("[DONE]")
        chunks = payloads[:-1]
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
        assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    elif cl == CHATUI:
        last = payloads[-1]
        assert last["status"] == "completed" and last["content"] == text
        assert all(p["status"] == "processing" for p in payloads[:-1])
        assert len({p["messageId"] for p in payloads}) == 1
    elif cl == P0529:
        first = payloads[0]
        assert first["delta"].get("role") == "assistant" and isinstance(first["context"], dict)
    else:
        first = payloads[0]["choices"][0]
        assert first["delta"].get("role") == "assistant" and "context" in first
        assert len({(p["id"], p["created"]) for p in payloads}) == 1


# --- whole answers -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(STATES))
@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=PAIR_IDS)
def test_whole(up: str, cl: str, kind: str) -> None:
    up_state, req_state = STATES[kind]
    body = wire(get(up).render_response(canonical_answer(up_state), upstream_request(up)))
    req = client_request(cl, stream=False, state=req_state)
    out = wire(translate_response(body, get(up), get(cl), req))
    assert get(cl).parse_error(out) is None
    back = get(cl).parse_response(out)

    assert back.text == TEXT
    if up in CAN_CITE and cl in CAN_CITE:
        assert citations_of(back.context) == CITATIONS
    if up in CAN_FOLLOW and cl in CAN_FOLLOW:
        assert followups_of(back.context) == FOLLOWUPS
    assert back.session_state == expected_state(up, cl, kind)
    if cl == P0529 and back.session_state is not None:
        assert "sessionState" in out and "session_state" not in out
    if up in USAGE_WHOLE and cl in USAGE_WHOLE:
        assert back.usage == USAGE
    if cl in (P0128, OPENAI):
        assert back.finish_reason == "stop"
    if cl == OPENAI:
        assert out["model"] == ("up-model" if up in USAGE_WHOLE else "gpt-client")


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=PAIR_IDS)
def test_whole_error(up: str, cl: str) -> None:
    body = wire(get(up).render_error(ChatError(500, ERROR_MESSAGE)))
    err = get(up).parse_error(body)
    assert err is not None and err.message == ERROR_MESSAGE
    out = wire(translate_error(err, get(cl)))
    back = get(cl).parse_error(out)
    assert back is not None and back.message == ERROR_MESSAGE


# --- streams -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(STATES))
@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=PAIR_IDS)
def test_stream(up: str, cl: str, kind: str) -> None:
    rng = random.Random(f"{up}/{cl}/{kind}")
    up_state, req_state = STATES[kind]
    data = b"".join(encode_frames(get(up), upstream_request(up), stream_events(up_state, rng)))
    req = client_request(cl, stream=True, state=req_state)
    t, out = translate_stream(up, cl, req, data, rng)

    assert t.error is None and not t.broken and t.done
    check_framing(cl, out)
    payloads = payloads_of(out)
    check_synthesised(cl, payloads, TEXT)
    asm = read_back(cl, out)
    back = asm.response()
    assert asm.error is None
    assert back.text == TEXT
    assert t.text_chars >= len(TEXT)
    if up in CAN_CITE and cl in CAN_CITE:
        assert citations_of(back.context) == CITATIONS
    if up in CAN_FOLLOW and cl in CAN_FOLLOW:
        assert followups_of(back.context) == FOLLOWUPS
    assert back.session_state == expected_state(up, cl, kind)
    if cl == P0529 and back.session_state is not None:
        assert session_keys_on_wire(payloads) == {"sessionState"}
    if cl == CHATUI and up in CAN_CITE:
        sources = payloads[-1]["sources"]
        assert [(s["id"], s.get("url"), s.get("snippet")) for s in sources] == [
            (c.id, c.url, c.snippet) for c in CITATIONS]
    if up in USAGE_WHOLE and cl in USAGE_WHOLE:
        assert back.usage == USAGE
    assert back.finish_reason == "stop"


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=PAIR_IDS)
def test_stream_error(up: str, cl: str) -> None:
    rng = random.Random(f"error/{up}/{cl}")
    events = stream_events(None, rng, error=True)
    partial = "".join(e.text for e in events if isinstance(e, TextDelta))
    data = b"".join(encode_frames(get(up), upstream_request(up), events))
    req = client_request(cl, stream=True, state=None)
    t, out = translate_stream(up, cl, req, data, rng)

    assert t.error is not None and t.error.message == ERROR_MESSAGE and not t.broken
    check_framing(cl, out)
    asm = read_back(cl, out)
    assert asm.error is not None and asm.error.message == ERROR_MESSAGE
    assert asm.response().text == partial
    assert asm.response().finish_reason is None
    assert_ends_in_error(cl, payloads_of(out))


def assert_ends_in_error(cl: str, payloads: list[Any]) -> None:
    """The error is the last thing the client reads: no [DONE], no completed status, no finish."""
    last = payloads[-1]
    assert isinstance(last, dict)
    if cl == CHATUI:
        assert last["status"] == "failed" and last["error"]["message"]
        assert all(p["status"] == "processing" for p in payloads[:-1]
                   if p["messageId"] == last["messageId"])
    else:
        assert "error" in last
    if cl == OPENAI:
        assert RawData("[DONE]") not in payloads
        assert all(c["choices"][0]["finish_reason"] is None for c in payloads[:-1])
    if cl == P0128:
        assert all(c["choices"][0]["finish_reason"] is None for c in payloads[:-1])


@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=PAIR_IDS)
def test_stream_truncated(up: str, cl: str) -> None:
    """An upstream body that stops early is never passed off as a clean finish."""
    rng = random.Random(f"cut/{up}/{cl}")
    frames = encode_frames(get(up), upstream_request(up), stream_events(None, rng))
    req = client_request(cl, stream=True, state=None)

    # cut inside a frame: every dialect notices
    data = b"".join(frames[:3]) + frames[3][: len(frames[3]) // 2]
    t, out = translate_stream(up, cl, req, data, rng)
    assert t.broken and t.error is not None
    check_framing(cl, out)
    assert read_back(cl, out).error is not None
    assert_ends_in_error(cl, payloads_of(out))

    # cut between frames: only the dialects with an end marker can tell
    data = b"".join(frames[:4])
    t, out = translate_stream(up, cl, req, data, rng)
    if up in (OPENAI, CHATUI):
        assert t.broken and t.error is not None
        assert_ends_in_error(cl, payloads_of(out))
    else:
        assert t.error is None and t.done


@pytest.mark.parametrize("first", ["Research", None])
@pytest.mark.parametrize(("up", "cl"), PAIRS, ids=PAIR_IDS)
def test_multi_agent(up: str, cl: str, first: str | None) -> None:
    """Several agents' text reaches every client, whole and streamed; single-message clients get
    each agent's text headed ``**Name:** `` with a blank line between agents."""
    rng = random.Random(f"agents/{up}/{cl}/{first}")
    resp = ChatResponse([AssistantMessage("Found 3 papers 📚.", agent=first),
                         AssistantMessage("Here is the code:\n```py\nx = 1\n```", agent="Code")])
    events: list[StreamEvent] = [StreamStart()]
    for m in resp.messages:
        events.extend(TextDelta(p, m.agent) for p in split_text(m.content, rng))
    events.append(StreamFinish())
    data = b"".join(encode_frames(get(up), upstream_request(up), events))
    t, out = translate_stream(up, cl, client_request(cl, stream=True, state=None), data, rng)
    assert t.error is None
    assert read_back(cl, out).response().text == resp.text
    whole = wire(get(up).render_response(resp, upstream_request(up)))
    req = client_request(cl, stream=False, state=None)
    assert get(cl).parse_response(wire(translate_response(whole, get(up), get(cl), req))).text \
        == resp.text


# --- requests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("cl", "up"), PAIRS, ids=[f"{c}->{u}" for c, u in PAIRS])
def test_request(cl: str, up: str, stream: bool) -> None:
    state = {"user": "ü", "turn": 2} if cl != CHATUI else "conv-ü-1"
    body = wire(client_body(cl, stream=stream, state=state, temperature=0.3))
    _, out = translate_request(body, get(cl), get(up), stream=stream, model="default-model")
    out = wire(out)
    back = get(up).parse_request(out)

    assert [(m.role, m.content) for m in back.messages] == [
        (m["role"], m["content"]) for m in messages()]
    assert back.session_state == (state if can_carry(cl, state) and can_carry(up, state)
                                  else None)
    if cl != CHATUI and up != CHATUI:
        assert back.sampling.get("temperature") == 0.3
    if up == OPENAI:
        assert out["model"] == ("gpt-client" if cl == OPENAI else "default-model")
        assert out.get("temperature") == (None if cl == CHATUI else 0.3)
    if up in (P0128, OPENAI):
        assert out.get("stream", False) is stream
    if up == CHATUI and stream:
        assert out["stream"] is True
    if up != cl and up in (P0128, P0529) and cl == OPENAI:
        assert out["context"] == {"overrides": {"temperature": 0.3}}


def test_request_model_default_when_client_names_none() -> None:
    body = {"messages": [{"role": "user", "content": "hi"}]}
    for cl in DIALECT_NAMES:
        _, out = translate_request(body, get(cl), get(OPENAI), stream=False, model="dflt")
        assert out["model"] == "dflt"


@pytest.mark.parametrize("key", ["sessionState", "session_state"])
@pytest.mark.parametrize("up", DIALECT_NAMES)
def test_p0529_client_gets_its_own_spelling(up: str, key: str) -> None:
    """Whole and streamed, a protocol-2024-05-29 client reads the session state under the key it
    sent, whatever the upstream spelled."""
    state = "s-ü" if up == CHATUI else {"id": 7}
    req = get(P0529).parse_request({"messages": messages(), key: {"old": 1}})
    other = "session_state" if key == "sessionState" else "sessionState"
    body = wire(get(up).render_response(canonical_answer(state), upstream_request(up)))
    out = wire(translate_response(body, get(up), get(P0529), req))
    assert out[key] == (state if up != OPENAI else {"old": 1}) and other not in out

    rng = random.Random(f"{up}/{key}")
    data = b"".join(encode_frames(get(up), upstream_request(up), stream_events(state, rng)))
    _, stream_out = translate_stream(up, P0529, req, data, rng)
    payloads = payloads_of(stream_out)
    assert session_keys_on_wire(payloads) == {key}
    assert read_back(P0529, stream_out).response().session_state == \
        (state if up != OPENAI else {"old": 1})


@pytest.mark.parametrize("up", DIALECT_NAMES)
@pytest.mark.parametrize("cl", DIALECT_NAMES)
def test_session_echo_when_upstream_has_none(up: str, cl: str) -> None:
    """An upstream that keeps no session state: the client gets back the one it sent."""
    sent = "conv-1" if cl == CHATUI else {"id": 1}
    req = client_request(cl, stream=True, state=sent)
    expected = sent if can_carry(cl, sent) else None
    body = wire(get(up).render_response(canonical_answer(None), upstream_request(up)))
    back = get(cl).parse_response(wire(translate_response(body, get(up), get(cl), req)))
    assert back.session_state == expected

    rng = random.Random(f"echo/{up}/{cl}")
    data = b"".join(encode_frames(get(up), upstream_request(up), stream_events(None, rng)))
    _, out = translate_stream(up, cl, req, data, rng)
    assert read_back(cl, out).response().session_state == expected


@pytest.mark.parametrize("cl", DIALECT_NAMES)
def test_chatui_multi_agent_stream_cut_after_first_agent(cl: str) -> None:
    """A chatui upstream's first agent completed, the second was cut off: not a clean finish."""
    rng = random.Random(f"agents-cut/{cl}")
    events: list[StreamEvent] = [StreamStart(), TextDelta("one", "A"), TextDelta("two", "B"),
                                 TextDelta(" more", "B"), StreamFinish()]
    frames = encode_frames(get(CHATUI), upstream_request(CHATUI), events)
    statuses = [orjson.loads(f[len(b"data: "):])["status"] for f in frames]
    cut = statuses.index("completed") + 2  # the first agent's completed event, then one of B's
    assert statuses[cut - 1] == "processing"
    t, out = translate_stream(CHATUI, cl, client_request(cl, stream=True, state=None),
                              b"".join(frames[:cut]), rng)
    assert t.broken and t.error is not None
    assert_ends_in_error(cl, payloads_of(out))
