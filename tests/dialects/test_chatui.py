"""What only ``chatui`` does: cumulative content under one ``messageId``, sources with id, url and
snippet, the Chat UI app's own answer shape (route option ``chatui_shape``), the minimal
``Items`` answer, the history documents, a content rewritten rather than extended, errors the
app shows (``errorBody.message``)."""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from fakes import ZeroIds
from observe import AGENTS, CITATIONS, RICH, SNIPPETS, client_request, run_stream, strict
from strict._wire import sse_events

from gateway.canonical import (
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
    ContextUpdate,
    Message,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    context_with_citations,
    use_id_source,
)
from gateway.dialects import DIALECTS, get
from gateway.dialects.chatui import citations_from_sources, sources_of
from gateway.framing import Payload
from gateway.pipeline import translate_response

ME = get("chatui")
GOLDEN = Path(__file__).parent.parent / "golden" / ME.name
WRITTEN = [d for d in DIALECTS.values() if hasattr(strict(d), "write_stream")]


def events_of(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(raw) for _, raw in sse_events(data)]


@pytest.mark.parametrize("up", [d.name for d in WRITTEN])
def test_content_is_cumulative_under_one_message_id(up: str) -> None:
    u = DIALECTS[up]
    req, _ = client_request(ME, stream=True)
    obs = RICH["rag-no-state"]
    _, out = run_stream(u, ME, req, [strict(u).write_stream(obs, random.Random(up))])
    events = events_of(out)
    assert len({e["messageId"] for e in events}) == 1
    assert [e["status"] for e in events] == ["processing"] * (len(events) - 1) + ["completed"]
    contents = [e["content"] for e in events]
    assert all(b.startswith(a) for a, b in itertools.pairwise(contents))
    assert contents[-1] == obs.text


def test_sources_keep_url_and_snippet() -> None:
    """A source's url and snippet reach a chatui client from every dialect that names them."""
    req, _ = client_request(ME, stream=False)
    for u in [d for d in WRITTEN if d.capabilities.citations and d is not ME]:
        out, _ = translate_response(strict(u).write_whole(RICH["rag-no-state"]), u, ME, req)
        sources = out["sources"]
        for name in CITATIONS:
            snippet = SNIPPETS[name]
            if name.startswith("https://"):
                assert any(s.get("url") == name for s in sources), (u.name, sources)
            if snippet is not None:
                assert any(s["title"] == name and s["snippet"] == snippet for s in sources), \
                    (u.name, sources)


def test_sources_and_context_agree() -> None:
    ctx = orjson.loads((GOLDEN.parent / "protocol-2024-01-28" / "fragments" /
                        "data_points.json").read_bytes())
    assert [c.snippet for c in citations_from_sources(sources_of(ctx))] == [
        e.split(": ", 1)[1] for e in ctx["data_points"]["text"]]


def agents_answer() -> ChatResponse:
    return ChatResponse([AssistantMessage(t, agent=a, id=f"m-{n}")
                         for n, (a, t) in enumerate(AGENTS)])


def test_single_answer_carries_both_shapes() -> None:
    req = ME.parse_request({"messages": [{"role": "user", "content": "hi"}]})
    out = ME.render_response(ChatResponse([AssistantMessage("hello", id="m-1")]), req)
    assert out["content"] == "hello" and out["messageId"] == "m-1"
    [app] = out["messages"]
    assert (app["id"], app["role"], app["content"]) == ("m-1", "assistant", "hello")
    assert strict(ME).read_whole(out).text == "hello"


@pytest.mark.parametrize("shape", ["spec", "app"])
def test_multi_agent_answer_shape_is_a_route_option(shape: str) -> None:
    req = ME.parse_request({"messages": [{"role": "user", "content": "hi"}]})
    req.options = {"chatui_shape": shape}
    out = ME.render_response(agents_answer(), req)
    if shape == "spec":
        assert isinstance(out, list) and [m["agentName"] for m in out] == ["Research", "Code"]
    else:
        assert list(out) == ["messages"]
        assert [(m["id"], m["agentName"], m["content"]) for m in out["messages"]] == [
            (f"m-{n}", a, t) for n, (a, t) in enumerate(AGENTS)]
        assert all(set(m) == {"id", "role", "content", "timestamp", "agentName"}
                   for m in out["messages"])
    assert strict(ME).read_whole(out).agents == AGENTS
    assert ME.route_options is not None
    assert ME.route_options.model_validate({"chatui_shape": shape})


def test_minimal_answer_roles_and_types() -> None:
    """Minimal answers: roles compared case-insensitively, non-text items ignored; clients of
    other dialects get each author's text headed by its name."""
    body = [
        {"Role": {"Label": "User"}, "Items": [{"$type": "TextContent", "Text": "question"}]},
        {"Role": {"Label": "Assistant"}, "AuthorName": "Bot", "Items": [
            {"$type": "TextContent", "Text": "Hello "},
            {"$type": "ImageContent", "Uri": "https://e.com/i.png"},
            {"$type": "FunctionCallContent", "Text": "not this"},
            {"Text": "world"}]},
        {"role": "ASSISTANT", "Items": [{"$type": "textcontent", "Text": "again"}]},
    ]
    resp = ME.parse_response(body)
    assert [(m.agent, m.content) for m in resp.messages] == [("Bot", "Hello world"),
                                                            (None, "again")]
    for c in DIALECTS.values():
        req, _ = client_request(c, stream=False)
        out, _ = translate_response(body, ME, c, req)
        assert strict(c).read_whole(out).text == "**Bot:** Hello world\n\nagain", c.name


def test_history_documents() -> None:
    history = orjson.loads((GOLDEN / "history" / "messages.json").read_bytes())
    resp = ME.parse_response(history)
    assert [(m.agent, m.content) for m in resp.messages] == [
        ("Technical", "I'll help you with that...")]  # the user's message is not the answer
    update = ME.parse_request(orjson.loads((GOLDEN / "history" / "update_request.json")
                                           .read_bytes()))
    assert [m.role for m in update.messages] == ["user", "assistant"]
    for path in (GOLDEN / "history").iterdir():
        assert orjson.loads(path.read_bytes())


def test_a_rewritten_content_reaches_delta_clients_whole() -> None:
    """The spec's SSE example rewrites its placeholder content instead of extending it: a chatui
    client shows the last content; a client of deltas cannot take text back, so it gets both."""
    data = (GOLDEN / "quirks" / "spec-rewrite.stream").read_bytes()
    for c in DIALECTS.values():
        req, _ = client_request(c, stream=True)
        t, out = run_stream(ME, c, req, [data], policy="drop")
        assert t.error is None, c.name
        if c is ME:
            assert strict(ME).read_stream(out, lenient=True).text == "Complete content..."
        else:
            assert strict(c).read_stream(out).text == "Partial content...Complete content...", \
                c.name


def test_error_bodies_carry_the_message_the_app_shows() -> None:
    out = ME.render_error(ChatError(503, "busy ü", "RATE"))
    assert out["message"] == "busy ü" and out["status"] == "failed"
    assert out["error"] == {"message": "busy ü", "code": "RATE"}
    err = ME.parse_error(orjson.loads(orjson.dumps(ME.samples.error)))
    assert err is not None and (err.message, err.code) == ("User-friendly error description",
                                                          "ERROR_CODE")
    assert ME.render_error(err)["error"]["code"] == "ERROR_CODE"


def test_message_ids_carry_over_on_a_re_encoded_stream() -> None:
    """A client that sent a conversationId to an upstream that sends none gets a re-encoded
    stream (its id put in); each agent's message keeps the upstream's messageId."""
    obs = replace(RICH["agents"], session_state=None)
    data = strict(ME).write_stream(obs, random.Random(0))
    upstream_ids = [e["messageId"] for e in events_of(data)]
    req, _ = client_request(ME, stream=True, sent="conv-client")
    _, out = run_stream(ME, ME, req, [data])
    events = events_of(out)
    assert [e["messageId"] for e in events if e["status"] == "completed"] == \
        list(dict.fromkeys(upstream_ids))
    assert {e.get("conversationId") for e in events} == {"conv-client"}


def test_strict_reader_refuses_what_the_app_trips_on() -> None:
    reader = strict(ME)
    data = ME.samples.streams["text"]
    reader.read_stream(data)
    with pytest.raises(AssertionError, match="completed"):
        reader.read_stream(data[:data.rindex(b"data: ")])  # never completed
    with pytest.raises(AssertionError, match="messageId"):
        reader.read_stream(data.replace(b'"msg-123"', b'"msg-999"', 1))
    shrunk = data.replace(b'"content":"I\'m analyzing your question about quantum computing"',
                          b'"content":"I\'m"', 1)
    assert shrunk != data
    with pytest.raises(AssertionError, match="extend"):
        reader.read_stream(shrunk)


def test_a_failed_event_that_brings_the_last_text_shows_it_then_fails() -> None:
    """A backend's ``failed`` event may carry the message's content so far, longer than the
    last ``processing`` one: that text is read before the error, and a chatui client's failed
    event keeps the message's id and all of its content."""
    def ev(status: str, content: str, error: Any = None) -> bytes:
        return b"data: " + orjson.dumps({"messageId": "m-1", "status": status,
                                          "role": "assistant", "content": content,
                                          "contentType": "text", "sources": [],
                                          "error": error,
                                          "createdAt": "2024-01-01T00:00:00.000Z"}) + b"\n\n"
    body = ev("processing", "Hello") + ev("failed", "Hello wor", {"message": "boom"})
    for client in DIALECTS.values():
        req, _ = client_request(client, stream=True)
        _, out = run_stream(ME, client, req, [body])
        seen = strict(client).read_stream(out)
        assert seen.error == "boom", (client.name, seen)
        assert "Hello wor".startswith(seen.text), (client.name, seen)
        if client is ME:
            assert seen.text == "Hello wor"
            last = events_of(out)[-1]
            assert (last["messageId"], last["status"], last["content"]) == (
                "m-1", "failed", "Hello wor")


# --- runs of plain texts -------------------------------------------------------------------------


def _twins(req: ChatRequest, *events: StreamEvent) -> tuple[Any, Any]:
    """Two encoders of ``req`` given ``events``, minting the same ids: in the same state."""
    with use_id_source(ZeroIds()):
        encs = [ME.encoder(req) for _ in range(2)]
        for enc in encs:
            for e in events:
                enc.encode(e)
    return encs[0], encs[1]


def _encoded(enc: Any, texts: list[bytes]) -> list[Payload]:
    return [p for t in texts for p in enc.encode(TextDelta(t.decode()))]


_STAMP = re.compile(rb'"createdAt":"[^"]*"')


def _unstamped(payloads: list[Payload] | None) -> list[Any] | None:
    """The payloads but for the time each was stamped with when written (two encoders write
    the same event a millisecond apart at times)."""
    if payloads is None:
        return None
    return [_STAMP.sub(b'"createdAt":""', p) if isinstance(p, bytes) else p for p in payloads]


def test_plain_texts_write_what_encoding_them_writes_and_keep_the_content() -> None:
    """Each event of a run carries the whole content so far, an escaped one included, as
    encoding the run's TextDeltas gives it; what follows sees the same content."""
    cites = citations_from_sources([{"id": "s", "title": "T", "url": "https://x.test"}])
    enc, twin = _twins(ChatRequest([Message("user", "hi")], session_state="conv-1"),
                       StreamStart(id="m-1"), ContextUpdate(context_with_citations(cites)),
                       TextDelta('say "content":""\n ü'))
    texts = [b" plain", " wörld 😀".encode(), b" end."]
    written = enc.plain_texts(texts)
    assert _unstamped(written) == _unstamped(_encoded(twin, texts))
    assert written is not None and len(written) == 3
    assert orjson.loads(written[-1])["content"] == 'say "content":""\n ü plain wörld 😀 end.'
    assert _unstamped(enc.encode(StreamFinish())) == _unstamped(twin.encode(StreamFinish()))


def test_plain_texts_leave_an_agents_text_and_a_closed_stream_to_encode() -> None:
    enc, twin = _twins(ChatRequest([Message("user", "hi")]), StreamStart(),
                       TextDelta("Hi", agent="a"))
    assert enc.plain_texts([b" there"]) is None
    # nothing changed: what follows is encoded as by its twin, never asked
    with use_id_source(ZeroIds()):
        assert _unstamped(enc.encode(TextDelta(" there"))) == \
            _unstamped(twin.encode(TextDelta(" there")))
    enc.encode(StreamFinish())
    assert enc.plain_texts([b"late"]) is None
    assert enc.encode(TextDelta("late")) == []
