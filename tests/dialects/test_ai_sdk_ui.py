"""The ``ai-sdk-ui`` dialect's own rules (the cross-dialect suites run it through the matrix; the
AI SDK itself drives it in test_ai_sdk_ui_clients.py): how a UI message's parts become canonical
messages, what a UI stream's reader passes on, what its writer sends, and the exchange's two
hooks it declares (its stream header, and a whole answer its backend streams anyway)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from strict import reader_for

from gateway.app import create_app
from gateway.canonical import (
    ChatRequest,
    ContextUpdate,
    Message,
    ReasoningDelta,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    ToolCallEnd,
    ToolCallStart,
)
from gateway.config import parse_config
from gateway.dialects import get
from gateway.errors import DialectError
from gateway.framing import SniffingReader
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

UI = get("ai-sdk-ui")
OPENAI = get("openai")


def ui(role: str, *parts: dict[str, Any], mid: str = "m") -> dict[str, Any]:
    return {"id": mid, "role": role, "parts": list(parts)}


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "chat", "messages": list(messages), "trigger": "submit-message", **extra}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def decode(chunks: list[Any]) -> list[StreamEvent]:
    data = b"".join(b"data: " + (c.encode() if isinstance(c, str) else orjson.dumps(c))
                    + b"\n\n" for c in chunks)
    reader, dec = SniffingReader(), UI.decoder()
    events = [e for p in reader.feed(data) + reader.finish() for e in dec.decode(p)]
    return events + dec.end()


# --- requests ------------------------------------------------------------------------------------


def test_an_assistant_message_is_one_message_per_step_each_followed_by_its_results() -> None:
    req = UI.parse_request(body(
        ui("user", text("Weather in Paris and Oslo?")),
        ui("assistant",
           {"type": "step-start"}, {"type": "reasoning", "text": "Two cities."},
           text("Checking."),
           {"type": "tool-getWeather", "toolCallId": "c1", "state": "output-available",
            "input": {"city": "Paris"}, "output": "22 °C"},
           {"type": "dynamic-tool", "toolName": "mcp_weather", "toolCallId": "c2",
            "state": "output-error", "input": {"city": "Oslo"}, "errorText": "no station"},
           {"type": "tool-book", "toolCallId": "c3", "state": "output-denied",
            "input": {}, "approval": {"id": "a", "approved": False}},
           {"type": "tool-later", "toolCallId": "c4", "state": "input-streaming"},
           {"type": "source-url", "sourceId": "s", "url": "https://example.com"},
           {"type": "step-start"}, text("Paris is warm.")),
    ))
    assert [(m.role, m.text, [c.name for c in m.tool_calls], m.tool_call_id, m.is_error)
            for m in req.messages] == [
        ("user", "Weather in Paris and Oslo?", [], None, False),
        ("assistant", "Checking.", ["getWeather", "mcp_weather", "book"], None, False),
        ("tool", "22 °C", [], "c1", False),
        ("tool", "no station", [], "c2", True),
        ("tool", "The user denied this tool call.", [], "c3", True),
        ("assistant", "Paris is warm.", [], None, False)]
    assert req.messages[1].reasoning[0].text == "Two cities."
    assert req.messages[1].tool_calls[0].arguments == '{"city":"Paris"}'
    assert req.stream is True  # the SDK sends no flag: its answers are streams


def test_images_are_image_parts_and_other_files_stay_this_dialects() -> None:
    req = UI.parse_request(body(ui(
        "user", text("What is this?"),
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,iVBO"},
        {"type": "file", "mediaType": "application/pdf", "url": "https://example.com/a.pdf"})))
    parts = req.messages[0].content
    assert isinstance(parts, list)
    assert [type(p).__name__ for p in parts] == ["TextPart", "ImagePart", "OtherPart"]
    rendered = OPENAI.render_request(req, stream=True, model="m")
    assert rendered["messages"][0]["content"][1] == {
        "type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}


def test_the_session_state_comes_back_in_the_part_the_answer_put_it_in() -> None:
    part = {"type": "data-session-state", "id": "session-state", "data": {"turn": 1}}
    history = (ui("user", text("Hi")), ui("assistant", text("Hello"), part), ui("user", text("?")))
    assert UI.parse_request(body(*history)).session_state == {"turn": 1}
    # a body key (a client that keeps its state itself) wins
    assert UI.parse_request(body(*history, sessionState="s-2")).session_state == "s-2"
    # and the same dialect upstream: the part as it came, no body key added
    req = UI.parse_request(body(*history))
    assert "sessionState" not in UI.render_request(req, stream=True, model=None)


@pytest.mark.parametrize("bad", [
    body(ui("robot", text("x"))), body({"id": "m", "role": [], "parts": []}),
    body(ui("user", {"type": "text"})), body({"id": "m", "role": "user", "parts": "hi"}),
    body(ui("assistant", {"type": "tool-x", "toolCallId": "c", "state": ["?"]})),
    body(ui("user", text("x")), stream="no"), body(ui("user", text("x")), tools=["t"]),
    body(ui("user", text("x")), toolChoice="sometimes"), {"messages": []},
])
def test_bad_requests_are_dialect_errors(bad: Any) -> None:
    with pytest.raises(DialectError):
        UI.parse_request(bad)


def test_tool_results_go_upstream_inside_their_calls_part() -> None:
    req = ChatRequest(messages=[
        Message("user", "Weather?"),
        Message("assistant", "", tool_calls=[_call("c1", "getWeather", '{"city":"Oslo"}')]),
        Message("tool", '{"tempC":3}', tool_call_id="c1"),
        Message("assistant", "It is 3 °C."), Message("user", "Thanks")])
    out = UI.render_request(req, stream=True, model="m")
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assert out["messages"][1]["parts"] == [
        {"type": "step-start"},
        {"type": "tool-getWeather", "toolCallId": "c1", "state": "output-available",
         "input": {"city": "Oslo"}, "output": '{"tempC":3}'},
        {"type": "step-start"}, {"type": "text", "text": "It is 3 °C."}]
    assert "stream" not in out and out["model"] == "m"
    assert UI.render_request(req, stream=False, model="m")["stream"] is False
    reader_for(UI).read_request(out)


def _call(cid: str, name: str, args: str) -> Any:
    from gateway.canonical import ToolCall

    return ToolCall(cid, name, args)


# --- reading an upstream's stream ----------------------------------------------------------------


def test_sources_and_state_sent_before_the_text_come_with_the_start() -> None:
    events = decode([  # a createUIMessageStream route that writes them first, with no start
        {"type": "source-url", "sourceId": "u", "url": "https://example.com/doc", "title": "Doc"},
        {"type": "data-session-state", "id": "session-state", "data": 4},
        {"type": "start-step"}, {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "Hi"}, {"type": "text-end", "id": "t"},
        {"type": "finish-step"}, {"type": "finish", "finishReason": "stop"}, "[DONE]"])
    start = events[0]
    assert isinstance(start, StreamStart) and start.session_state == 4
    assert start.context == {"data_points": {"text": [], "citations": ["https://example.com/doc"]}}
    assert events[1:] == [TextDelta("Hi"), StreamFinish("stop", None)]


def test_a_tool_the_backend_ran_itself_is_not_a_call_for_the_client() -> None:
    events = decode([
        {"type": "start"},
        {"type": "tool-input-available", "toolCallId": "s1", "toolName": "search",
         "input": {"q": "x"}},
        {"type": "tool-output-available", "toolCallId": "s1", "output": ["a"]},
        {"type": "tool-input-available", "toolCallId": "p1", "toolName": "web",
         "input": {}, "providerExecuted": True},
        {"type": "finish-step"}, {"type": "start-step"},
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "ask"},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"q": "y"}'},
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "ask",
         "input": {"q": "y"}},
        {"type": "finish-step"}, {"type": "finish", "finishReason": "tool-calls"}, "[DONE]"])
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.index, s.id, s.name) for s in starts] == [(0, "c1", "ask")]
    assert any(isinstance(e, ToolCallEnd) for e in events)
    assert events[-1] == StreamFinish("tool_calls", None)


@pytest.mark.parametrize(("tail", "message"), [
    ([{"type": "error", "errorText": "model overloaded"}, {"type": "finish-step"},
      {"type": "finish", "finishReason": "error"}, "[DONE]"], "model overloaded"),
    ([{"type": "abort", "reason": "user cancelled"}], "user cancelled"),
    ([], "the upstream stream ended before it finished"),
])
def test_an_error_an_abort_or_a_cut_is_never_a_clean_finish(tail: list[Any],
                                                            message: str) -> None:
    events = decode([{"type": "start"}, {"type": "text-start", "id": "t"},
                     {"type": "text-delta", "id": "t", "delta": "Par"}, *tail])
    assert events[-1] == StreamError(message)
    assert not any(isinstance(e, StreamFinish) for e in events)


def test_signed_reasoning_comes_back_with_its_issuer() -> None:
    events = decode([{"type": "start"}, {"type": "reasoning-start", "id": "r"},
                     {"type": "reasoning-delta", "id": "r", "delta": "hmm"},
                     {"type": "reasoning-end", "id": "r",
                      "providerMetadata": {"anthropic": {"signature": "sig"}}},
                     {"type": "finish"}, "[DONE]"])
    assert events[1:3] == [ReasoningDelta("hmm"),
                           ReasoningDelta(signature="sig", dialect="anthropic")]


# --- writing a stream ----------------------------------------------------------------------------


def encode(events: list[StreamEvent], req: ChatRequest | None = None) -> list[Any]:
    enc = UI.encoder(req or ChatRequest(messages=[Message("user", "hi")]))
    out: list[Any] = []
    for e in events:
        for p in enc.encode(e):
            assert isinstance(p, bytes)
            out.append("[DONE]" if p == b"[DONE]" else orjson.loads(p))
    return out


def test_the_writer_sends_sources_once_and_data_parts_when_they_change() -> None:
    ctx = {"data_points": {"text": ["a.pdf: A"], "citations": ["a.pdf"]},
           "followup_questions": ["More?"]}
    out = encode([StreamStart(context=ctx, session_state=1, id="up-1"), TextDelta("x"),
                  ContextUpdate(ctx, 1), ContextUpdate(None, 2),
                  StreamFinish("length", None)])
    kinds = [c if isinstance(c, str) else c["type"] for c in out]
    assert kinds == ["start", "start-step", "source-document", "data-followups",
                     "data-session-state", "text-start", "text-delta", "data-session-state",
                     "text-end", "finish-step", "finish", "[DONE]"]
    assert out[0] == {"type": "start", "messageId": "up-1"}
    assert out[7]["data"] == 2 and out[10]["finishReason"] == "length"


def test_signed_reasoning_ends_with_its_signature_and_a_text_only_delta_is_plain() -> None:
    out = encode([StreamStart(), ReasoningDelta("think"),
                  ReasoningDelta(signature="sig", dialect="anthropic"),
                  ReasoningDelta("again"), TextDelta("Hi")])
    ends = [c for c in out if c["type"] == "reasoning-end"]
    assert ends[0]["providerMetadata"] == {"anthropic": {"signature": "sig"}}
    assert "providerMetadata" not in ends[1]  # the next block is another one, unsigned
    out = encode([StreamStart(), ReasoningDelta("seen"),
                  ReasoningDelta(redacted="opaque", dialect="anthropic"), TextDelta("Hi")])
    blocks = [(c["type"], c.get("providerMetadata")) for c in out
              if c["type"] in ("reasoning-start", "reasoning-end")]
    assert blocks == [("reasoning-start", None), ("reasoning-end", None),
                      ("reasoning-start", None),
                      ("reasoning-end", {"anthropic": {"redactedData": "opaque"}})]
    enc = UI.encoder(ChatRequest(messages=[Message("user", "hi")]))
    for e in (StreamStart(), TextDelta("a")):
        enc.encode(e)
    assert enc.plain_texts([b"b c"]) == enc.encode(TextDelta("b c"))


def test_a_text_delta_is_written_as_its_chunk_as_json() -> None:
    """A text-delta written from its bytes around the text is the chunk orjson writes, whatever
    the text must escape, in each text block (after reasoning, for another agent)."""
    enc = UI.encoder(ChatRequest(messages=[Message("user", "hi")]))
    texts = ['plain', 'a "quote" \\ back\nline\t\x01', "w\u00f6rld \U0001f600", ""]
    events: list[StreamEvent] = [StreamStart(), *map(TextDelta, texts), ReasoningDelta("hm"),
                                 *map(TextDelta, texts), TextDelta("x", "Research"),
                                 *(TextDelta(t, "Research") for t in texts)]
    deltas = []
    for e in events:
        for p in enc.encode(e):
            assert isinstance(p, bytes) and p == orjson.dumps(orjson.loads(p))
            chunk = orjson.loads(p)
            if chunk["type"] == "text-delta":
                assert list(chunk) == ["type", "id", "delta"]
                deltas.append((chunk["id"], chunk["delta"]))
    assert deltas == [*(("text-1", t) for t in texts), *(("text-3", t) for t in texts),
                      ("text-3", "\n\n**Research:** x"), *(("text-3", t) for t in texts)]


def test_a_tool_result_continues_the_message_it_answers() -> None:
    req = UI.parse_request(body(
        ui("user", text("Weather?"), mid="u1"),
        ui("assistant", {"type": "tool-w", "toolCallId": "c", "state": "output-available",
                         "input": {}, "output": 1}, mid="a1")))
    assert encode([StreamStart(id="other")], req)[0] == {"type": "start", "messageId": "a1"}


# --- the exchange ------------------------------------------------------------------------------


SSE = (b'data: {"type":"start"}\n\ndata: {"type":"text-start","id":"t"}\n\n'
       b'data: {"type":"text-delta","id":"t","delta":"streamed anyway"}\n\n'
       b'data: {"type":"text-end","id":"t"}\n\n'
       b'data: {"type":"finish","finishReason":"stop"}\n\ndata: [DONE]\n\n')


async def test_a_whole_answer_its_backend_streams_anyway_is_assembled(aiohttp_client: Any,
                                                                       ) -> None:
    asked: list[Any] = []

    async def backend(request: UpstreamRequest) -> MemoryResponse:
        asked.append(orjson.loads(request.body))
        return MemoryResponse(200, {"Content-Type": "text/event-stream"}, SSE)

    up = {"dialect": UI.name, "url": "http://next.test/api"}
    cfg = parse_config({"upstreams": {"next": up},
                        "routes": [{"path": "/v1/chat/completions", "dialect": OPENAI.name,
                                    "upstream": "next"},
                                   {"path": "/ui", "dialect": UI.name, "upstream": "next"}]},
                       env={})
    gw = await aiohttp_client(create_app(cfg, transport=MemoryTransport(backend)))
    r = await gw.post("/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 200
    assert reader_for(OPENAI).read_whole(await r.json()).text == "streamed anyway"
    assert asked[0]["stream"] is False
    streamed = await gw.post("/ui", json=UI.samples.requests["text"])
    assert streamed.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert reader_for(UI).read_stream(await streamed.read()).text == "streamed anyway"
