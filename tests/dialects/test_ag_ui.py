"""The ``ag-ui`` dialect on its own: what a ``RunAgentInput`` becomes and back, what an agent's
events become (its own tool calls hidden, its state patched, its shorthand chunks read), what the
encoder writes (read by the strict reader), reasoning sealed for the provider that signed it,
and the errors a bad input gets."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from strict import ag_ui as strict
from strict import reader_for

from gateway.app import create_app
from gateway.canonical import (
    ChatRequest,
    ContextUpdate,
    Message,
    Reasoning,
    ReasoningDelta,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from gateway.config import parse_config
from gateway.dialects import get
from gateway.dialects.ag_ui import AgUiDialect, apply_patch
from gateway.errors import DialectError
from gateway.framing import encoder_for
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

D = AgUiDialect()
RUN = {"threadId": "t-1", "runId": "r-1"}


def decode(events: list[dict[str, Any]]) -> list[StreamEvent]:
    dec = D.decoder()
    return [e for p in events for e in dec.decode(p)] + dec.end()


def encode(events: list[StreamEvent], req: ChatRequest | None = None) -> bytes:
    enc = D.encoder(req or D.parse_request(D.samples.requests["text"]))
    frame = encoder_for(D.framing)
    return b"".join(frame(p) for e in events for p in enc.encode(e))


# --- requests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(D.samples.requests))
def test_a_sample_input_renders_back_as_it_came(case: str) -> None:
    body = D.samples.requests[case]
    assert D.render_request(D.parse_request(body), stream=True, model=None) == body


def test_an_input_maps_to_the_canonical_request() -> None:
    req = D.parse_request(D.samples.requests["tools"])
    assert req.hints == {"threadId": "thread-1", "runId": "run-2"}
    assert req.model == "gpt-4o-mini" and req.sampling == {"temperature": 0.2}
    assert req.session_state == {"unit": "C"}
    assert [(m.role, m.text, m.tool_call_id) for m in req.messages] == [
        ("system", "The user's locale:\nfr-FR", None),
        ("user", "What's the weather in Paris?", None),
        ("assistant", "", None),
        ("tool", '{"temp":22}', "call_1")]
    assert [(c.id, c.name, c.arguments) for c in req.messages[2].tool_calls] == [
        ("call_1", "get_weather", '{"city":"Paris"}')]
    assert [(t.name, t.description) for t in req.tools] == [
        ("get_weather", "The weather in a city")]
    assert not req.stream  # the Accept header asks for the stream


def test_reasoning_messages_go_with_the_assistant_turn_after_them() -> None:
    body = {**RUN, "messages": [
        {"id": "u", "role": "user", "content": "Q"},
        {"id": "r", "role": "reasoning", "content": "think", "encryptedValue": "opaque-1"},
        {"id": "a", "role": "assistant", "content": "A"},
        {"id": "x", "role": "activity", "activityType": "card", "content": {}},
        {"id": "t", "role": "tool", "toolCallId": "c1", "content": "", "error": "timed out"}]}
    req = D.parse_request(body)
    assert [(m.role, m.text) for m in req.messages] == [
        ("user", "Q"), ("assistant", "A"), ("tool", "timed out")]
    assert req.messages[1].reasoning == [
        Reasoning("think", redacted="opaque-1", id="r", dialect=D.name)]
    assert req.messages[2].is_error
    out = D.render_request(req, stream=True, model=None)
    assert out["messages"][1] == {"id": "r", "role": "reasoning", "content": "think",
                                  "encryptedValue": "opaque-1"}
    # to another dialect's upstream and back, the reasoning keeps its text, the turn its place
    req.extras_dialect = None
    again = D.render_request(req, stream=True, model=None)["messages"]
    assert [(m["id"], m["role"]) for m in again] == [
        ("m0", "user"), ("m1-r0", "reasoning"), ("m1", "assistant"), ("m2", "tool")]


def test_another_dialects_signature_is_sealed_for_it_and_comes_back() -> None:
    got = strict.read_stream(encode([
        StreamStart(), ReasoningDelta("hmm"), ReasoningDelta("", signature="sig", dialect="x"),
        TextDelta("ok"), StreamFinish()]))
    assert (got.reasoning, got.text) == ("hmm", "ok")
    events = [orjson.loads(line[6:]) for line in encode([
        StreamStart(), ReasoningDelta("hmm"), ReasoningDelta("", signature="s:ig", dialect="x"),
        StreamFinish()]).split(b"\n\n") if line]
    [sealed] = [e for e in events if e["type"] == "REASONING_ENCRYPTED_VALUE"]
    assert sealed["subtype"] == "message"
    body = {**RUN, "messages": [
        {"id": "r", "role": "reasoning", "content": "hmm",
         "encryptedValue": sealed["encryptedValue"]},
        {"id": "a", "role": "assistant", "content": "ok"}]}
    [msg] = D.parse_request(body).messages
    assert msg.reasoning == [Reasoning("hmm", signature="s:ig", dialect="x")]


def test_forwarded_props_carry_what_run_agent_input_has_no_field_for() -> None:
    from gateway.canonical import ReasoningRequest, ToolChoice

    req = ChatRequest([Message("user", "hi")], model=None, sampling={"top_p": 0.5, "stop": ["x"]},
                      tool_choice=ToolChoice("tool", "f", parallel=False),
                      reasoning=ReasoningRequest(effort="low", budget_tokens=1024))
    out = D.render_request(req, stream=True, model="m", max_tokens=99)
    assert out["forwardedProps"] == {
        "model": "m", "topP": 0.5, "stop": ["x"], "maxTokens": 99, "toolChoice": {"name": "f"},
        "parallelToolCalls": False,
        "reasoning": {"enabled": True, "effort": "low", "budgetTokens": 1024}}
    back = D.parse_request(out)
    assert back.sampling == {"top_p": 0.5, "stop": ["x"], "max_tokens": 99}
    assert back.tool_choice == ToolChoice("tool", "f", parallel=False)
    assert back.reasoning == ReasoningRequest(effort="low", budget_tokens=1024)
    assert out["state"] == {} and back.session_state is None


def test_the_empty_props_http_agent_always_sends_are_no_loss_and_others_are() -> None:
    """HttpAgent sends ``state``, ``tools``, ``context`` and ``forwardedProps`` even when it has
    none of them: the empty ones lose nothing in another dialect; props it does not read do."""
    from gateway.dialects.openai import OpenAIDialect
    from gateway.pipeline import translate_request

    body = {**RUN, "state": {}, "tools": [], "context": [], "forwardedProps": {},
            "messages": [{"id": "m0", "role": "user", "content": "hi"}]}
    assert translate_request(body, D, OpenAIDialect(), policy="drop")[2] == []
    body["forwardedProps"] = {"agentMode": "fast"}
    assert translate_request(body, D, OpenAIDialect(), policy="drop")[2] == ["forwardedProps"]


@pytest.mark.parametrize(("body", "where"), [
    ({"runId": "r", "messages": []}, "threadId"),
    ({**RUN, "messages": "hi"}, "messages"),
    ({**RUN, "messages": []}, "messages"),
    ({**RUN, "messages": [{"id": "t", "role": "tool", "content": "x"}]}, "messages[0].toolCallId"),
    ({**RUN, "messages": [{"id": "u", "role": "user", "content": [{"type": "image"}]}]},
     "messages[0].content[0].source"),
    ({**RUN, "messages": [{"id": "u", "role": "user", "content": "x"}], "tools": [{}]},
     "tools[0].name"),
])
def test_a_bad_input_names_the_field(body: Any, where: str) -> None:
    with pytest.raises(DialectError) as e:
        D.parse_request(body)
    assert e.value.where == where


# --- an agent's events -----------------------------------------------------------------------


def test_the_agents_own_tool_calls_are_hidden_and_the_others_end_the_answer() -> None:
    events = decode([
        {"type": "RUN_STARTED", **RUN},
        {"type": "TOOL_CALL_START", "toolCallId": "own", "toolCallName": "search"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "own", "delta": "{}"},
        {"type": "TOOL_CALL_END", "toolCallId": "own"},
        {"type": "TOOL_CALL_RESULT", "messageId": "m", "toolCallId": "own", "content": "x"},
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "toolCallName": "ask", "delta": '{"a"'},
        {"type": "TOOL_CALL_CHUNK", "delta": ":1}"},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "Hi"},
        {"type": "TEXT_MESSAGE_CHUNK", "delta": " there"},
        {"type": "RUN_FINISHED", **RUN, "usage": [
            {"model": "a", "inputTokens": 3, "outputTokens": 2},
            {"model": "b", "inputTokens": 4, "outputTokens": 1, "cachedInputTokens": 2}]}])
    assert events == [
        StreamStart(id="r-1"), TextDelta("Hi", None, "m1"), TextDelta(" there"),
        ToolCallStart(0, "c1", "ask"), ToolCallDelta(0, '{"a":1}'), ToolCallEnd(0),
        StreamFinish("tool_calls", Usage(input_tokens=7, output_tokens=3,
                                         cached_input_tokens=2))]


def test_the_state_is_snapshot_then_patched() -> None:
    events = decode([
        {"type": "RUN_STARTED", **RUN},
        {"type": "STATE_SNAPSHOT", "snapshot": {"n": 1, "tags": ["a"]}},
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "user"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "an echo, not the answer"},
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/n", "value": 2},
                                          {"op": "add", "path": "/tags/-", "value": "b"}]},
        {"type": "CUSTOM", "name": "followups", "value": ["Next?"]},
        {"type": "CUSTOM", "name": "the app's own", "value": 1},
        {"type": "RUN_FINISHED", **RUN, "outcome": {"type": "interrupt", "interrupts": []}}])
    assert events == [
        StreamStart(id="r-1", session_state={"n": 1, "tags": ["a"]}),
        ContextUpdate(session_state={"n": 2, "tags": ["a", "b"]}),
        ContextUpdate(context={"followup_questions": ["Next?"]}),
        StreamFinish("interrupt")]


def test_a_delta_with_no_snapshot_to_patch_is_an_error_and_a_cut_run_too() -> None:
    dec = D.decoder()
    dec.decode({"type": "RUN_STARTED", **RUN})
    with pytest.raises(DialectError):
        dec.decode({"type": "STATE_DELTA", "delta": []})
    assert decode([{"type": "RUN_STARTED", **RUN}]) == [
        StreamStart(id="r-1"), StreamError("the upstream stream ended before RUN_FINISHED")]


def test_json_patch() -> None:
    doc = {"a": {"b": [1, 2]}, "c~d/e": 0}
    before = copy.deepcopy(doc)
    got = apply_patch(doc, [
        {"op": "add", "path": "/a/b/0", "value": 0},
        {"op": "remove", "path": "/c~0d~1e"},
        {"op": "copy", "from": "/a/b", "path": "/x"},
        {"op": "move", "from": "/x", "path": "/y"},
        {"op": "test", "path": "/y/2", "value": 2}])
    assert got == {"a": {"b": [0, 1, 2]}, "y": [0, 1, 2]}
    assert doc == before
    for bad in ({"op": "test", "path": "/a", "value": 1}, {"op": "remove", "path": "/zz"},
                {"op": "frob", "path": ""}, {"op": "add", "path": "no-slash", "value": 1}):
        with pytest.raises(DialectError):
            apply_patch(doc, [bad])


# --- what the client reads ---------------------------------------------------------------------


def test_a_multi_agent_answer_with_a_tool_call_as_the_client_reads_it() -> None:
    req = D.parse_request(D.samples.requests["tools"])
    data = encode([
        StreamStart(session_state={"k": 1}, model="m1",
                    context={"data_points": {"text": ["a.pdf: x"]}, "thoughts": [{"t": 1}]}),
        TextDelta("One.", "Research"), TextDelta("Two.", "Code"),
        ToolCallStart(0, "c9", "get_weather"), ToolCallDelta(0, '{"city":"Oslo"}'),
        ContextUpdate(context={"followup_questions": ["More?"]}),
        ContextUpdate(context={"data_points": {"text": ["a.pdf: x"]}}),  # nothing new
        StreamFinish("tool_calls", Usage(5, 6))], req)
    got = strict.read_stream(data)
    assert got.agents == [("Research", "One."), ("Code", "Two.")]
    assert got.text == "**Research:** One.\n\n**Code:** Two."
    assert [(c.id, c.name, c.arguments) for c in got.tool_calls] == [
        ("c9", "get_weather", {"city": "Oslo"})]
    assert (got.session_state, got.citations, got.followups, got.thoughts) == (
        {"k": 1}, ["a.pdf"], ["More?"], True)
    events = [orjson.loads(e[6:]) for e in data.split(b"\n\n") if e]
    assert got.usage == (5, 6) and events[-1]["usage"][0]["model"] == "m1"
    assert [e["name"] for e in events if e["type"] == "CUSTOM"] == [
        "sources", "thoughts", "followups"]
    first = events[0]
    assert first == {"type": "RUN_STARTED", "threadId": "thread-1", "runId": "run-2",
                     "protocolVersion": "1.0"}


def test_plain_texts_are_written_inside_a_plain_text_message_only() -> None:
    """``plain_texts`` gives what encoding each text would, and nothing (the general path)
    wherever a TextDelta would write more than its TEXT_MESSAGE_CONTENT."""
    req = D.parse_request(D.samples.requests["text"])
    texts = [b"Hello", b" w\xc3\xb6rld \xf0\x9f\x98\x80"]

    def encoder_after(events: list[StreamEvent]) -> Any:
        enc = D.encoder(req)
        for e in events:
            enc.encode(e)
        return enc

    assert encoder_after([]).plain_texts(texts) is None  # no run started
    assert encoder_after([StreamStart()]).plain_texts(texts) is None  # no message open
    # an upstream's message id kept, one that JSON must escape
    opened = [StreamStart(), TextDelta("a", message_id='m"1')]
    twin = encoder_after(opened)
    assert encoder_after(opened).plain_texts(texts) == [
        p for t in texts for p in twin.encode(TextDelta(t.decode()))]
    thinking = [*opened, ReasoningDelta("hm")]
    assert encoder_after(thinking).plain_texts(texts) is None  # reasoning open, text closed
    assert encoder_after([*thinking, TextDelta("b")]).plain_texts(texts) is not None
    agent = [*opened, TextDelta("b", "Research")]
    assert encoder_after(agent).plain_texts(texts) is None  # an agent's message
    assert encoder_after([*opened, StreamFinish("stop")]).plain_texts(texts) is None
    # an agent's own events followed (an identity route): its text inside a reasoning span,
    # which a TextDelta would end first
    followed = encoder_after([])
    for event in ({"type": "RUN_STARTED", **RUN}, {"type": "REASONING_START", "messageId": "r"},
                  {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}):
        followed.follow(event)
    assert followed.plain_texts(texts) is None
    followed.follow({"type": "REASONING_END", "messageId": "r"})
    assert followed.plain_texts(texts) == [
        b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"' + t + b'"}' for t in texts]


def test_text_content_is_written_as_its_event_as_json() -> None:
    """A TEXT_MESSAGE_CONTENT written from its bytes around the text is the event orjson writes,
    whatever the text and the message id must escape, after a reasoning span, an agent and a
    message that changed."""
    enc = D.encoder(D.parse_request(D.samples.requests["text"]))
    texts = ['plain', 'a "quote" \\ back\nline\t\x01', "w\u00f6rld \U0001f600", ""]
    events: list[StreamEvent] = [StreamStart(), TextDelta("a", message_id='m"1\n')]
    events += [TextDelta(t) for t in texts]
    events += [ReasoningDelta("hm"), TextDelta("b"), *map(TextDelta, texts),
               TextDelta("c", "Research"), *(TextDelta(t, "Research") for t in texts)]
    content = []
    for e in events:
        for p in enc.encode(e):
            assert isinstance(p, bytes) and p == orjson.dumps(orjson.loads(p))
            event = orjson.loads(p)
            if event["type"] == "TEXT_MESSAGE_CONTENT":
                assert list(event) == ["type", "messageId", "delta"]
                content.append((event["messageId"] == 'm"1\n', event["delta"]))
    assert content == [(True, "a"), *((True, t) for t in texts if t), (True, "b"),
                       *((True, t) for t in texts if t), (False, "c"),
                       *((False, t) for t in texts if t)]


def test_a_whole_answer_is_the_runs_events_as_one_array() -> None:
    body = D.samples.responses["text"]
    resp = D.parse_response(body)
    assert resp.text == "Northwind Plus covers medical, vision and dental care."
    out = D.render_response(resp, D.parse_request(D.samples.requests["text"]))
    assert strict.read_whole(out).text == resp.text
    assert [e["type"] for e in out] == ["RUN_STARTED", "TEXT_MESSAGE_START",
                                        "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
                                        "RUN_FINISHED"]


def test_errors() -> None:
    err = D.parse_error(D.samples.error)
    assert err is not None and err.message == strict.read_error(D.samples.error)
    assert D.parse_error({"detail": "invalid RunAgentInput"}).message == \
        "invalid RunAgentInput"  # type: ignore[union-attr]
    assert D.parse_error(D.samples.responses["text"]) is None
    data = encode([StreamStart(), TextDelta("par"), StreamError("boom", "X")])
    got = strict.read_stream(data)
    assert (got.text, got.error) == ("par", "boom")


# --- the exchange ------------------------------------------------------------------------------

OPENAI = get("openai")
RUN_EVENTS = [{"type": "RUN_STARTED", **RUN},
              {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
              {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "whole anyway"},
              {"type": "TEXT_MESSAGE_END", "messageId": "m"}, {"type": "RUN_FINISHED", **RUN}]


@pytest.mark.parametrize("answer", ["stream", "array"])
async def test_an_agent_asked_for_no_stream_may_answer_its_stream(aiohttp_client: Any,
                                                                  answer: str) -> None:
    """``streaming: never`` asks without the event-stream ``Accept``. An agent's encoder
    streams whatever the ``Accept`` (protobuf aside): that stream is the whole answer, as a
    JSON array of the events is."""
    accepts: list[str] = []

    async def agent(request: UpstreamRequest) -> MemoryResponse:
        accepts.append(request.headers.get("Accept", ""))
        if answer == "stream":
            return MemoryResponse(200, {"Content-Type": "text/event-stream"}, b"".join(
                b"data: " + orjson.dumps(e) + b"\n\n" for e in RUN_EVENTS))
        return MemoryResponse(200, {"Content-Type": "application/json"}, orjson.dumps(RUN_EVENTS))

    up = {"dialect": D.name, "url": "http://agent.test/run", "streaming": "never"}
    cfg = parse_config({"upstreams": {"agent": up},
                        "routes": [{"path": "/v1/chat/completions", "dialect": OPENAI.name,
                                    "upstream": "agent"}]}, env={})
    gw = await aiohttp_client(create_app(cfg, transport=MemoryTransport(agent)))
    r = await gw.post("/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 200, await r.text()
    assert reader_for(OPENAI).read_whole(await r.json()).text == "whole anyway"
    assert accepts and "text/event-stream" not in accepts[0]
