"""The ``openai-responses`` dialect: its samples round-trip exactly, requests map both ways,
streams decode however the bytes are split and encode into what the strict reader (and so the
SDKs' accumulators) accept, and the status, usage and error tables hold."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from strict import openai_responses as strict
from strict import reader_for

from gateway.canonical import (
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
    Citation,
    ContextUpdate,
    ImagePart,
    Message,
    OtherPart,
    Reasoning,
    ReasoningDelta,
    ReasoningRequest,
    StreamError,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolDef,
    Usage,
    citations_of,
    context_with_citations,
)
from gateway.dialects import get
from gateway.dialects.stored import stored_responses_of
from gateway.errors import DialectError
from gateway.framing import encoder_for
from gateway.pipeline import (
    ResponseAssembler,
    StreamAssembler,
    StreamDecoding,
    StreamTranslator,
    events_from_response,
    translate_request,
    translate_response,
)

D = get("openai-responses")
CHAT = get("openai")
SAMPLES = D.samples
CASES = sorted(SAMPLES.streams)
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def encode(events: list[StreamEvent], req: ChatRequest | None = None) -> bytes:
    enc = D.encoder(req or D.parse_request({"model": "m", "input": "hi"}))
    frame = encoder_for(D.framing)
    return b"".join(frame(p) for e in events for p in enc.encode(e))


def wire_events(data: bytes) -> list[dict[str, Any]]:
    out = []
    for block in data.decode().split("\n\n"):
        if block:
            name, body = block.split("\n")
            ev = json.loads(body.removeprefix("data: "))
            assert name == f"event: {ev['type']}"
            out.append(ev)
    return out


def decode(data: bytes, pieces: list[bytes] | None = None) -> list[StreamEvent]:
    dec = StreamDecoding(D)
    events: list[StreamEvent] = []
    for piece in pieces if pieces is not None else [data]:
        events.extend(dec.feed(piece))
    return events + dec.finish()


# --- the samples ---------------------------------------------------------------------------------


def test_the_strict_reader_is_found_from_the_dialect() -> None:
    assert reader_for(D) is strict


@pytest.mark.parametrize("case", sorted(SAMPLES.requests))
def test_request_samples_round_trip(case: str) -> None:
    body = SAMPLES.requests[case]
    req = D.parse_request(body)
    assert D.render_request(req, stream=req.stream, model=None) == body
    strict.read_request(body)


@pytest.mark.parametrize("case", sorted(SAMPLES.responses))
def test_response_samples_round_trip(case: str) -> None:
    body = SAMPLES.responses[case]
    resp = D.parse_response(body)
    assert D.render_response(resp, D.parse_request(SAMPLES.requests[case])) == body
    strict.read_whole(body)


def test_error_sample_round_trips() -> None:
    err = D.parse_error(SAMPLES.error)
    assert err is not None
    err.status = SAMPLES.error_status
    assert D.render_error(err) == SAMPLES.error
    assert strict.read_error(SAMPLES.error) == "Previous response with id 'resp_abc123' not found."


@pytest.mark.parametrize("case", CASES)
def test_stream_samples_are_what_the_strict_reader_accepts(case: str) -> None:
    # (Not the SDK's types: the documented examples leave out usage fields those require; what
    # the gateway writes is checked against them below.)
    strict.read_stream(SAMPLES.streams[case])


def test_samples_say_what_their_cases_are_about() -> None:
    tools = strict.read_stream(SAMPLES.streams["tools"])
    assert [(c.name, c.arguments) for c in tools.tool_calls] == [
        ("get_current_weather", {"location": "Boston, MA", "unit": "celsius"})]
    assert strict.read_stream(SAMPLES.streams["reasoning"]).reasoning.startswith(
        "**Responding to a greeting**")
    msgs = strict.read_request(SAMPLES.requests["tools"]).messages
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "user"]
    assert msgs[0].images and msgs[1].tool_calls and msgs[2].tool_result_for


# --- stream decoding -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_stream_decodes_alike_split_at_every_byte(case: str) -> None:
    data = SAMPLES.streams[case]
    whole = decode(data)
    assert decode(data, [data[i:i + 1] for i in range(len(data))]) == whole
    for i in range(len(data) + 1):
        assert decode(data, [data[:i], data[i:]]) == whole, i


@pytest.mark.parametrize("case", CASES)
def test_stream_assembles_to_what_the_strict_reader_reads(case: str) -> None:
    data = SAMPLES.streams[case]
    a = StreamAssembler(D)
    a.feed(data)
    resp = a.finish()
    seen = strict.read_stream(data)
    assert a.error is None
    assert resp.text == seen.text
    assert [(c.id, c.name, json.loads(c.arguments)) for c in resp.tool_calls] == [
        (c.id, c.name, c.arguments) for c in seen.tool_calls]
    assert "".join(r.text for r in resp.reasoning) == seen.reasoning
    assert resp.usage is not None
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == seen.usage
    assert resp.finish_reason == ("tool_calls" if seen.tool_calls else "stop")


def test_stream_start_carries_the_response_identity() -> None:
    start = decode(SAMPLES.streams["text"])[0]
    assert start == StreamStart(id="resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654",
                                created=1741290958, model="gpt-5.4")


def test_stream_tool_arguments_pass_on_as_they_arrive() -> None:
    events = decode(SAMPLES.streams["tools"])
    deltas = [e.arguments for e in events if isinstance(e, ToolCallDelta)]
    assert len(deltas) == 11  # one per wire delta, none held back
    assert "".join(deltas) == '{"location":"Boston, MA","unit":"celsius"}'
    kinds = [type(e).__name__ for e in events]
    assert kinds[:2] == ["StreamStart", "ToolCallStart"]
    assert kinds[-2:] == ["ToolCallEnd", "StreamFinish"]


def test_reasoning_decodes_with_its_encrypted_content() -> None:
    rs = ResponseAssembler()
    body = _ev("response.output_item.done", output_index=0, item={
        "type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "a"},
                                                       {"type": "summary_text", "text": "b"}],
        "encrypted_content": "gAAA"})
    for e in decode(_stream(_created(), _ev("response.output_item.added", output_index=0,
                                            item={"type": "reasoning", "id": "rs_1",
                                                  "summary": []}),
                            body, _completed())):
        rs.add(e)
    [r] = rs.response().reasoning
    assert (r.text, r.redacted, r.dialect) == ("a\n\nb", "gAAA", "openai-responses")


def _ev(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields}


def _created(rid: str = "resp_1") -> dict[str, Any]:
    return _ev("response.created", response={"id": rid, "object": "response",
                                             "created_at": 1, "model": "m", "output": [],
                                             "status": "in_progress"})


def _completed(output: list[Any] | None = None, status: str = "completed",
               **fields: Any) -> dict[str, Any]:
    kind = "response.incomplete" if status == "incomplete" else "response.completed"
    return _ev(kind, response={"id": "resp_1", "object": "response", "created_at": 1,
                               "model": "m", "output": output or [], "status": status,
                               **fields})


def _stream(*events: dict[str, Any], named: bool = True) -> bytes:
    out = b""
    for n, ev in enumerate(events):
        body = orjson.dumps({**ev, "sequence_number": n})
        out += (f"event: {ev['type']}\n".encode() if named else b"") + b"data: " + body + b"\n\n"
    return out


def test_decoder_ignores_unknown_events_and_reads_unnamed_ones() -> None:
    data = _stream(_created(), _ev("response.in_progress", response={"id": "resp_1"}),
                   _ev("keepalive"), _ev("response.web_search_call.searching", output_index=0,
                                         item_id="ws_1"),
                   _ev("response.output_text.delta", item_id="m", output_index=1,
                       content_index=0, delta="hi"),
                   _completed(), named=False) + b"data: [DONE]\n\n"
    events = decode(data)
    assert [type(e) for e in events] == [StreamStart, TextDelta, StreamFinish]
    assert events[-1] == StreamFinish("stop", None)


def test_decoder_recovers_what_came_only_whole() -> None:
    """Servers that send no deltas (or fewer than the whole): the done events complete them."""
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
            "arguments": '{"a": 1}', "status": "completed"}
    msg = {"type": "message", "id": "m", "role": "assistant", "status": "completed",
           "content": [{"type": "output_text", "text": "Hello!", "annotations": []}]}
    data = _stream(_created(),
                   _ev("response.output_text.delta", item_id="m", output_index=0,
                       content_index=0, delta="Hel"),
                   _ev("response.output_text.done", item_id="m", output_index=0,
                       content_index=0, text="Hello!"),
                   _ev("response.output_item.done", output_index=0, item=msg),
                   _completed([msg, call]))
    a = ResponseAssembler()
    for e in decode(data):
        a.add(e)
    resp = a.response()
    assert resp.text == "Hello!"
    assert resp.tool_calls == [ToolCall("call_1", "f", '{"a": 1}')]
    assert resp.finish_reason == "tool_calls"


def test_decoder_reads_both_error_event_forms_and_response_failed() -> None:
    flat = _ev("error", code="server_error", message="boom", param=None)
    nested = _ev("error", error={"type": "server_error", "code": "rate_limit_exceeded",
                                 "message": "slow down", "param": None})
    failed = _ev("response.failed", response={
        "id": "resp_1", "status": "failed", "output": [],
        "error": {"code": "server_error", "message": "it broke"}})
    assert decode(_stream(_created(), flat))[-1] == StreamError("boom", "server_error")
    assert decode(_stream(_created(), nested))[-1] == StreamError("slow down",
                                                                  "rate_limit_exceeded")
    assert decode(_stream(_created(), failed))[-1] == StreamError("it broke", "server_error")
    # nothing after the first error, even a terminal event
    assert decode(_stream(_created(), flat, failed))[-1] == StreamError("boom", "server_error")


def test_decoder_finish_reasons_by_table() -> None:
    for details, reason in (({"reason": "max_output_tokens"}, "length"),
                            ({"reason": "content_filter"}, "content_filter")):
        events = decode(_stream(_created(), _completed(status="incomplete",
                                                       incomplete_details=details)))
        assert events[-1] == StreamFinish(reason, None)


def test_decoder_refuses_what_would_lose_data() -> None:
    orphan = _ev("response.function_call_arguments.delta", item_id="fc_9", output_index=3,
                 delta="{")
    events = decode(_stream(_created(), orphan))
    assert isinstance(events[-1], StreamError)
    assert "never announced" in events[-1].message
    cut = decode(_stream(_created(), _ev("response.output_text.delta", item_id="m",
                                         output_index=0, content_index=0, delta="x")))
    assert isinstance(cut[-1], StreamError)
    assert "terminal" in cut[-1].message
    assert isinstance(decode(b'data: {"no": "type"}\n\n')[-1], StreamError)
    call = {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": ""}
    twice = decode(_stream(_created(), _ev("response.output_item.added", output_index=0,
                                           item=call),
                           _ev("response.output_item.added", output_index=0, item=call)))
    assert isinstance(twice[-1], StreamError)
    assert "added twice" in twice[-1].message


def test_decoder_turns_annotations_into_citations() -> None:
    ann = {"type": "url_citation", "start_index": 0, "end_index": 3, "title": "Ex",
           "url": "https://example.com/a"}
    events = decode(_stream(_created(),
                            _ev("response.output_text.annotation.added", item_id="m",
                                output_index=0, content_index=0, annotation_index=0,
                                annotation=ann),
                            _completed()))
    [update] = [e for e in events if isinstance(e, ContextUpdate)]
    assert [c.url for c in citations_of(update.context)] == ["https://example.com/a"]


def test_identity_stream_passes_through_byte_for_byte() -> None:
    for case in CASES:
        data = SAMPLES.streams[case]
        t = StreamTranslator(D, D, D.parse_request(SAMPLES.requests[case]))
        assert t.feed(data) + t.finish() == data
        assert t.error is None


# --- stream encoding -----------------------------------------------------------------------------


def read_back(events: list[StreamEvent], req: ChatRequest | None = None) -> Any:
    data = encode(events, req)
    for ev in wire_events(data):
        EVENTS.validate_python(ev)
    assert_written_as_orjson_writes_them(data)
    return strict.read_stream(data), wire_events(data)


def assert_written_as_orjson_writes_them(data: bytes) -> None:
    """The encoder puts some events' JSON together from parts (a text delta, the response
    shell written once for two events): each must be what ``orjson.dumps`` writes for the
    event, ``type`` first and ``sequence_number`` second, numbered 0, 1, 2, ..."""
    for n, block in enumerate(b for b in data.split(b"\n\n") if b):
        body = block.split(b"\n")[1].removeprefix(b"data: ")
        ev = orjson.loads(body)
        assert body == orjson.dumps(ev), body
        assert list(ev)[:2] == ["type", "sequence_number"] and ev["sequence_number"] == n


def test_encode_text_with_usage_and_citations() -> None:
    ctx = context_with_citations([Citation("doc.pdf", "doc.pdf"),
                                  Citation("https://ex.com/b", "B", "https://ex.com/b")])
    seen, events = read_back([
        StreamStart(id="chatcmpl-1", model="gpt", context=ctx), TextDelta("Hel"),
        TextDelta("lo"),
        StreamFinish("stop", Usage(10, 5, cached_input_tokens=4, reasoning_tokens=2))])
    assert seen.text == "Hello"
    assert seen.usage == (10, 5)
    assert seen.finish == "completed"
    assert seen.citations == ["doc.pdf", "https://ex.com/b"]
    rid = events[0]["response"]["id"]
    assert rid.startswith("resp_") and rid != "chatcmpl-1"
    assert [e["type"] for e in events][:4] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added"]
    usage = events[-1]["response"]["usage"]
    assert usage["input_tokens_details"]["cached_tokens"] == 4
    assert usage["output_tokens_details"]["reasoning_tokens"] == 2
    Response.model_validate(events[-1]["response"])


@pytest.mark.parametrize("finish", [StreamFinish("stop"), StreamFinish("length"),
                                    StreamError("cut")])
@pytest.mark.parametrize("cited", [False, True])
def test_a_message_s_events_are_written_as_orjson_writes_their_objects(
        finish: StreamEvent, cited: bool) -> None:
    """The encoder writes a message's item and text-part events from byte parts: each is the
    bytes ``orjson.dumps`` gives for the object of the API reference, and the item that
    ``output_item.done`` shows is the one the final response lists."""
    text = 'say "hi"\\\n\u2028é😀\x01</script>'
    ctx = context_with_citations([Citation("doc.pdf", "doc.pdf")]) if cited else None
    enc = D.encoder(D.parse_request({"model": "m", "input": "hi"}))
    payloads = [p for e in [StreamStart(context=ctx), TextDelta(text[:5]), TextDelta(text[5:]),
                            finish] for p in enc.encode(e)]
    by_type = {p.event: p for p in payloads}
    added = orjson.loads(by_type["response.output_item.added"].data)
    item_id = added["item"]["id"]
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    annotations = orjson.loads(by_type["response.content_part.done"].data)["part"]["annotations"]
    assert bool(annotations) == cited
    part = {"type": "output_text", "text": text, "annotations": annotations}
    status = "completed" if isinstance(finish, StreamFinish) and finish.reason == "stop" \
        else "incomplete"
    written = {
        "response.output_item.added": {"output_index": 0, "item": {
            "type": "message", "id": item_id, "status": "in_progress", "role": "assistant",
            "content": []}},
        "response.content_part.added": {**where, "part": {
            "type": "output_text", "text": "", "annotations": []}},
        "response.output_text.done": {**where, "text": text, "logprobs": []},
        "response.content_part.done": {**where, "part": part},
        "response.output_item.done": {"output_index": 0, "item": {
            "type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [part]}},
    }
    for kind, fields in written.items():
        p = by_type[kind]
        number = orjson.loads(p.data)["sequence_number"]
        assert p.data == orjson.dumps({"type": kind, "sequence_number": number, **fields}), kind
    last = orjson.loads(payloads[-1].data)["response"]
    assert last["output"] == [written["response.output_item.done"]["item"]]
    assert [orjson.loads(p.data)["sequence_number"] for p in payloads] == \
        list(range(len(payloads)))


_SHELL_KEYS = ["id", "object", "created_at", "status", "error", "incomplete_details",
               "instructions", "max_output_tokens", "parallel_tool_calls", "previous_response_id",
               "reasoning", "store", "temperature", "text", "tool_choice", "tools", "top_p",
               "truncation", "metadata", "model", "output", "usage"]


@pytest.mark.parametrize("finish", [StreamFinish("stop", Usage(3, 2)), StreamFinish("length"),
                                    StreamError("cut", "server_error")])
@pytest.mark.parametrize("tools", [False, True])
def test_the_response_shells_are_written_as_orjson_writes_the_response_object(
        finish: StreamEvent, tools: bool) -> None:
    """The lifecycle and terminal events' response is put together from byte parts, the echo
    written once: each is what ``orjson.dumps`` writes for the API reference's ``Response``,
    its members in the order the encoder always wrote them; the lifecycle events echo neither
    tools nor instructions, the terminal one both, and the output items ``output_item.done``
    showed."""
    body: dict[str, Any] = {"model": "m", "input": "hi", "temperature": 0.5,
                            "metadata": {"k": "v"}}
    if tools:
        body |= {"instructions": "be \"brief\"\u2028", "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}}]}
    enc = D.encoder(D.parse_request(body))
    payloads = [p for e in [StreamStart(id="resp_up", created=1700000000), TextDelta("hi"),
                            ToolCallStart(0, "call_1", "f"), ToolCallDelta(0, "{}"),
                            ToolCallEnd(0), finish] for p in enc.encode(e)]
    events = [orjson.loads(p.data) for p in payloads]
    shells = [e["response"] for e in events if "response" in e]
    assert [e["type"] for e in events if "response" in e][:2] == [
        "response.created", "response.in_progress"]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    for n, shell in enumerate(shells):
        assert list(shell) == _SHELL_KEYS
        assert shell["id"] == "resp_up" and shell["created_at"] == 1700000000
        assert shell["temperature"] == 0.5 and shell["metadata"] == {"k": "v"}
        lifecycle = n < 2
        assert shell["instructions"] == (body.get("instructions") if not lifecycle else None)
        assert shell["tools"] == (body.get("tools", []) if not lifecycle else [])
        assert shell["output"] == ([] if lifecycle else done)
        Response.model_validate(shell)
    last = shells[-1]
    if isinstance(finish, StreamError):
        assert (last["status"], last["error"]) == (
            "failed", {"code": "server_error", "message": "cut"})
    else:
        assert last["status"] == ("completed" if finish.reason == "stop" else "incomplete")
        assert last["incomplete_details"] == (
            None if finish.reason == "stop" else {"reason": "max_output_tokens"})
        assert (last["usage"] or {}).get("output_tokens") == (2 if finish.usage else None)
    frame = encoder_for(D.framing)
    assert_written_as_orjson_writes_them(b"".join(frame(p) for p in payloads))


def test_encode_reasoning_then_text() -> None:
    seen, events = read_back([
        StreamStart(), ReasoningDelta("think "), ReasoningDelta("hard", dialect="anthropic",
                                                                signature="sig"),
        ReasoningDelta(redacted="gAAA", dialect="openai-responses"), TextDelta("42"),
        StreamFinish()])
    assert seen.reasoning == "think hard"
    assert seen.text == "42"
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    # the dialect's own redacted data as it came, another's signature sealed; each closes the
    # block it belongs to
    assert done[0]["encrypted_content"].startswith("chat-gateway.1.")
    assert done[1]["encrypted_content"] == "gAAA"
    assert [i["type"] for i in done] == ["reasoning", "reasoning", "message"]


def test_encode_tool_calls_interleaved_passes_every_fragment_on_at_once() -> None:
    enc = D.encoder(D.parse_request({"model": "m", "input": "hi"}))
    fed: list[tuple[StreamEvent, list[Any]]] = []
    for e in [StreamStart(), ToolCallStart(0, "call_a", "f"), ToolCallDelta(0, '{"x":'),
              ToolCallStart(1, "call_b", "g"), ToolCallDelta(1, '{"y":'),
              ToolCallDelta(0, " 1}"), ToolCallDelta(1, " 2}"), ToolCallEnd(0), ToolCallEnd(1),
              StreamFinish()]:
        fed.append((e, enc.encode(e)))
    for e, out in fed:
        if isinstance(e, ToolCallDelta):  # each fragment goes out with the event that brought it
            [payload] = out
            assert json.loads(payload.data)["delta"] == e.arguments
    frame = encoder_for(D.framing)
    data = b"".join(frame(p) for _, out in fed for p in out)
    seen = strict.read_stream(data)
    assert [(c.id, c.name, c.arguments) for c in seen.tool_calls] == [
        ("call_a", "f", {"x": 1}), ("call_b", "g", {"y": 2})]
    assert seen.finish == "completed"


def test_encode_text_around_tool_calls_opens_items_in_order() -> None:
    seen, events = read_back([
        StreamStart(), TextDelta("Let me look. "), ToolCallStart(0, "c1", "f"),
        ToolCallEnd(0), TextDelta("Done."), StreamFinish("tool_calls")])
    assert seen.text == "Let me look. Done."
    added = [(e["output_index"], e["item"]["type"]) for e in events
             if e["type"] == "response.output_item.added"]
    assert added == [(0, "message"), (1, "function_call"), (2, "message")]
    assert seen.tool_calls[0].arguments == {}  # no arguments came: "{}"


def test_encode_length_is_an_incomplete_response() -> None:
    seen, events = read_back([StreamStart(), TextDelta("cut"), StreamFinish("length")])
    assert seen.finish == "incomplete:max_output_tokens"
    assert events[-1]["type"] == "response.incomplete"
    assert events[-2]["item"]["status"] == "incomplete"


def test_the_decoder_reads_sdk_event_types_and_passes_over_the_others() -> None:
    """``_READERS`` names the event types the decoder reads, each one the SDK's
    ``ResponseStreamEvent`` knows, to a method of the decoder; any other type is passed over
    whatever it holds (after the start the first event gives), a read one is read."""
    from typing import get_args

    from gateway.dialects import openai_responses as module

    union = get_args(ResponseStreamEvent)[0]
    sdk = {get_args(m.model_fields["type"].annotation)[0] for m in get_args(union)}
    assert set(module._READERS) <= sdk
    assert all(getattr(module._Decoder, r.__name__) is r for r in module._READERS.values())
    dec = D.decoder()
    first = dec.decode({"type": "response.created", "response": {"id": "resp_1"}})
    assert [type(e) for e in first] == [StreamStart] and first[0].id == "resp_1"
    for kind in ("response.in_progress", "response.content_part.added",
                 "response.web_search_call.searching", "response.some_new_event"):
        assert dec.decode({"type": kind, "delta": 5, "output_index": -1}) == []
    with pytest.raises(DialectError):
        dec.decode({"type": "response.output_text.delta", "delta": 5})


def test_text_deltas_are_the_documented_event_whatever_comes_between() -> None:
    """Each text delta is the JSON of ResponseTextDeltaEvent's fields for it, numbered on,
    under the message open (a new one after reasoning), its text escaped as JSON; an empty
    text writes nothing; the message's final text is its deltas'; nothing after the end."""
    enc = D.encoder(D.parse_request({"model": "m", "input": "hi"}))
    events = [StreamStart(id="resp_1", model="m"), TextDelta("Hello"), TextDelta(""),
              TextDelta(' q"\\\n\x00\x1f 😀 \u2028'), ReasoningDelta("think", dialect=D.name),
              TextDelta("after"), TextDelta(" by Ann", agent="Ann"),
              TextDelta(" again", agent="Ann"), TextDelta(" back"), StreamFinish("stop")]
    seq, where = 0, ("", -1)
    deltas: list[tuple[str, str]] = []
    done: dict[str, str] = {}
    for e in events:
        for p in enc.encode(e):
            data = orjson.loads(p.data)
            assert data["sequence_number"] == seq
            seq += 1
            if p.event == "response.output_item.added" and data["item"]["type"] == "message":
                where = (data["item"]["id"], data["output_index"])
            elif p.event == "response.output_text.delta":
                assert p.data == orjson.dumps({
                    "type": p.event, "sequence_number": data["sequence_number"],
                    "item_id": where[0], "output_index": where[1], "content_index": 0,
                    "delta": data["delta"], "logprobs": []})
                deltas.append((where[0], data["delta"]))
            elif p.event == "response.output_text.done":
                done[data["item_id"]] = data["text"]
    assert [d for _, d in deltas] == ["Hello", ' q"\\\n\x00\x1f 😀 \u2028', "after",
                                      "\n\n**Ann:**  by Ann", " again", "\n\n back"]
    assert done == {i: "".join(d for j, d in deltas if j == i) for i, _ in deltas}
    assert len(done) == 2
    assert enc.encode(TextDelta("late")) == []


def test_encode_mid_stream_error_is_error_then_failed_and_nothing_else() -> None:
    enc = D.encoder(D.parse_request({"model": "m", "input": "hi"}))
    frame = encoder_for(D.framing)
    out = b""
    for e in [StreamStart(), TextDelta("partial"), ToolCallStart(0, "c", "f"),
              StreamError("upstream went away", "BAD_GATEWAY", 502), StreamFinish()]:
        out += b"".join(frame(p) for p in enc.encode(e))
    seen = strict.read_stream(out)
    events = wire_events(out)
    assert seen.error == "upstream went away"
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    err = events[-2]
    assert err["code"] == "BAD_GATEWAY" and err["message"] == "upstream went away"
    assert err["error"] == {"type": "server_error", "code": "BAD_GATEWAY",
                            "message": "upstream went away", "param": None}
    failed = events[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "upstream went away"}
    assert [i["type"] for i in failed["output"]] == ["message", "function_call"]
    assert not any(e["type"] == "response.completed" for e in events)


def test_encode_echoes_the_request() -> None:
    req = D.parse_request({"model": "gpt", "instructions": "Be brief.", "input": "hi",
                           "tools": [{"type": "function", "name": "f", "parameters": {}}],
                           "tool_choice": "required", "parallel_tool_calls": False,
                           "metadata": {"k": "v"}, "store": True, "temperature": 0.5})
    _, events = read_back([StreamStart(model="up"), TextDelta("x"), StreamFinish()], req)
    first, last = events[0]["response"], events[-1]["response"]
    # The lifecycle's first events stay small (the tools list once, in the last event)
    assert (first["tools"], first["instructions"]) == ([], None)
    assert last["instructions"] == "Be brief."
    assert last["tools"] == [{"type": "function", "name": "f", "parameters": {}}]
    for shell in (first, last):
        assert (shell["tool_choice"], shell["parallel_tool_calls"]) == ("required", False)
        assert shell["metadata"] == {"k": "v"}
        assert shell["store"] is False  # a translating route keeps nothing
        assert shell["model"] == "gpt"


@pytest.mark.parametrize("case", sorted(SAMPLES.responses))
def test_whole_samples_stream_like_their_whole_form(case: str) -> None:
    resp = D.parse_response(SAMPLES.responses[case])
    seen, _ = read_back(events_from_response(resp))
    whole = strict.read_whole(SAMPLES.responses[case])
    assert (seen.text, seen.tool_calls, seen.reasoning, seen.usage, seen.finish) == (
        whole.text, whole.tool_calls, whole.reasoning, whole.usage, whole.finish)


# --- requests, both ways -------------------------------------------------------------------------


def test_string_input_and_instructions() -> None:
    req = D.parse_request(SAMPLES.requests["text"])
    assert [(m.role, m.content) for m in req.messages] == [
        ("system", "You are a helpful assistant."), ("user", "Hello!")]
    assert req.model == "gpt-5.4"


def test_items_map_to_canonical_messages() -> None:
    req = D.parse_request({"model": "m", "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
            {"type": "input_file", "file_id": "file-1"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}],
         "encrypted_content": "gAAA"},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a":1}'},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
        {"type": "function_call", "call_id": "c3", "name": "h", "arguments": "{}"}]})
    user, turn, out1, out2, turn2 = req.messages
    assert user.content == [TextPart("look"), ImagePart(url="data:image/png;base64,AAAA",
                                                        detail="low"),
                            OtherPart("openai-responses", "input_file",
                                      {"type": "input_file", "file_id": "file-1"})]
    assert (turn.role, turn.content) == ("assistant", [TextPart("Checking.")])
    assert turn.tool_calls == [ToolCall("c1", "f", '{"a":1}'), ToolCall("c2", "g", "{}")]
    assert turn.reasoning == [Reasoning("hm", id="rs_1", redacted="gAAA",
                                        dialect="openai-responses")]
    assert (out1.role, out1.tool_call_id, out1.content) == ("tool", "c1", "one")
    assert out2.tool_call_id == "c2"
    assert (turn2.role, turn2.content, turn2.tool_calls) == ("assistant", "",
                                                             [ToolCall("c3", "h", "{}")])


def test_a_chat_completions_request_becomes_responses_items() -> None:
    body = SAMPLES_CHAT_TOOLS = get("openai").samples.requests["tools"]
    _, sent, lost = translate_request(body, CHAT, D)
    assert lost == []
    assert sent["instructions"] == "You are a helpful assistant."
    assert sent["store"] is False
    assert sent["tools"] == [{
        "type": "function", "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": SAMPLES_CHAT_TOOLS["tools"][0]["function"]["parameters"],
        "strict": False}]
    assert sent["tool_choice"] == "auto"
    kinds = [i.get("type") for i in sent["input"]]
    assert kinds == ["message", "function_call", "function_call_output", "message"]
    image = sent["input"][0]["content"][1]
    assert image["type"] == "input_image" and image["detail"] == "low"
    seen = strict.read_request(sent)
    assert [m.role for m in seen.messages] == ["system", "user", "assistant", "tool", "user"]
    assert seen.messages[2].tool_calls[0].arguments == {"location": "Madison, WI",
                                                        "unit": "celsius"}
    assert seen.messages[3].tool_result_for == "call_abc123"


def test_a_responses_request_becomes_chat_completions() -> None:
    _, sent, lost = translate_request(SAMPLES.requests["tools"], D, CHAT)
    assert lost == []
    msgs = sent["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "user"]
    assert msgs[0]["content"][1] == {"type": "image_url", "image_url": {
        "url": SAMPLES.requests["tools"]["input"][0]["content"][1]["image_url"]}}
    assert msgs[1]["tool_calls"][0]["function"]["name"] == "get_current_weather"
    assert msgs[2]["tool_call_id"] == "call_9pDxHq3FtT5kXb2mWn8cJrLe"
    assert sent["tools"][0]["function"]["name"] == "get_current_weather"
    assert "store" not in sent


def test_built_in_tools_and_files_go_only_to_a_responses_upstream() -> None:
    body = {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_file", "file_id": "file-1"}]}],
        "tools": [{"type": "web_search"}]}
    with pytest.raises(Exception, match="tools, content_parts"):
        translate_request(body, D, CHAT)
    _, sent, _ = translate_request(body, D, D)
    assert sent == body


@pytest.mark.parametrize(("wire", "choice"), [
    ("none", ToolChoice("none")), ("auto", ToolChoice("auto")),
    ("required", ToolChoice("required")),
    ({"type": "function", "name": "f"}, ToolChoice("tool", "f")),
])
def test_tool_choice_both_ways(wire: Any, choice: ToolChoice) -> None:
    req = D.parse_request({"input": "x", "tools": [{"type": "function", "name": "f"}],
                           "tool_choice": wire, "parallel_tool_calls": False})
    choice.parallel = False
    assert req.tool_choice == choice
    out = D.render_request(ChatRequest([Message("user", "x")], tool_choice=choice,
                                       tools=[ToolDef("f")]), stream=False, model="m")
    assert (out["tool_choice"], out["parallel_tool_calls"]) == (wire, False)


def test_reasoning_and_sampling_both_ways() -> None:
    req = D.parse_request({"input": "x", "reasoning": {"effort": "low", "summary": "auto"},
                           "max_output_tokens": 300, "temperature": 0.2, "top_p": 0.9})
    assert req.reasoning == ReasoningRequest(effort="low", summary="auto")
    assert req.sampling == {"max_tokens": 300, "temperature": 0.2, "top_p": 0.9}
    budget = ChatRequest([Message("user", "x")], reasoning=ReasoningRequest(budget_tokens=10000),
                         sampling={"stop": ["\n"], "seed": 1})
    out = D.render_request(budget, stream=True, model="m", max_tokens=512)
    assert out["reasoning"] == {"effort": "high"}
    assert out["max_output_tokens"] == 512
    assert out["stream"] is True and "stop" not in out and "seed" not in out
    off = ChatRequest([Message("user", "x")], reasoning=ReasoningRequest(enabled=False))
    assert "reasoning" not in D.render_request(off, stream=False, model="m")


def test_same_dialect_keeps_part_types_and_item_shapes() -> None:
    body = {"model": "m", "input": [
        {"role": "assistant", "content": [{"type": "input_text", "text": "a"},
                                          {"type": "refusal", "refusal": "no"},
                                          {"type": "output_text", "text": "b",
                                           "annotations": [], "logprobs": []}]},
        {"type": "message", "role": "user", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "odd", "annotations": []}]},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "raw"}], "status": "completed"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": [
            {"type": "input_text", "text": "ok"},
            {"type": "input_image", "image_url": "https://x/y.png"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"}]}
    req = D.parse_request(body)
    assert req.messages[0].text == "anob"
    assert req.messages[2].reasoning[0].text == "raw"
    assert D.render_request(req, stream=False, model=None) == body


def test_same_dialect_keeps_what_it_does_not_map() -> None:
    body = {"model": "m", "input": "x", "store": True, "metadata": {"a": "b"},
            "include": ["reasoning.encrypted_content"], "text": {"format": {"type": "text"}},
            "stream": True, "stream_options": {"include_obfuscation": False}}
    req = D.parse_request(body)
    assert D.render_request(req, stream=True, model=None) == body
    whole = D.render_request(req, stream=False, model=None)
    assert whole["stream"] is False and "stream_options" not in whole


@pytest.mark.parametrize(("body", "where"), [
    ({"input": "x", "previous_response_id": 1}, "previous_response_id"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ({"input": "x", "background": True}, "background"),
    ({"input": [{"type": "item_reference", "id": 1}]}, "input[0].id"),
    ({"model": 3, "input": "x"}, "model"),
    ({"input": 3}, "input"),
    ({}, "input"),
    ({"input": "x", "store": "yes"}, "store"),
    ({"input": "x", "instructions": ["x"]}, "instructions"),
    ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
    ({"input": [{"type": "message", "role": "user", "content": 3}]}, "input[0].content"),
    ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
    ({"input": "x", "tool_choice": "sometimes"}, "tool_choice"),
    ({"input": "x", "max_output_tokens": "many"}, "max_output_tokens"),
    ({"input": "x", "reasoning": {"effort": 1}}, "reasoning.effort"),
])
def test_bad_requests_name_the_field(body: dict[str, Any], where: str) -> None:
    with pytest.raises(DialectError) as caught:
        D.parse_request(body)
    assert caught.value.where == where


def test_stored_references_go_on_to_a_responses_upstream_as_they_came() -> None:
    # (where the gateway keeps the state instead, the exchange resolves them before parsing)
    body = {"model": "m", "previous_response_id": "resp_1", "store": True,
            "input": [{"type": "item_reference", "id": "msg_1"},
                      {"type": "message", "role": "user", "content": "next"}]}
    assert D.render_request(D.parse_request(body), stream=False, model=None) == body


def test_store_alone_is_accepted() -> None:
    for store in (True, False, None):
        req = D.parse_request({"input": "x", "store": store, "previous_response_id": None})
        assert req.extras["store"] is store


# --- whole answers: tables -----------------------------------------------------------------------


def whole(output: list[Any], **fields: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 1, "model": "m",
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "status": "completed", **fields}


MSG = {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
       "content": [{"type": "output_text", "text": "hi", "annotations": []}]}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": "{}",
        "status": "completed"}


@pytest.mark.parametrize(("fields", "output", "reason"), [
    ({"status": "completed"}, [MSG], "stop"),
    ({"status": "completed"}, [MSG, CALL], "tool_calls"),
    ({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}, [MSG],
     "length"),
    ({"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}, [MSG],
     "content_filter"),
])
def test_status_maps_to_finish_reason_and_back(fields: dict[str, Any], output: list[Any],
                                                reason: str) -> None:
    resp = D.parse_response(whole(output, **fields))
    assert resp.finish_reason == reason
    fresh = ChatResponse(resp.messages, finish_reason=reason)
    out = D.render_response(fresh, D.parse_request({"input": "x"}))
    assert out["status"] == fields["status"]
    assert out["incomplete_details"] == fields.get("incomplete_details")
    strict.read_whole(out)
    Response.model_validate(out)


def test_usage_both_ways() -> None:
    raw = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 60},
           "output_tokens": 40, "output_tokens_details": {"reasoning_tokens": 30},
           "total_tokens": 140}
    resp = D.parse_response(whole([MSG], usage=raw))
    assert resp.usage == Usage(100, 40, cached_input_tokens=60, reasoning_tokens=30)
    out = D.render_response(ChatResponse(resp.messages, usage=resp.usage),
                            D.parse_request({"input": "x"}))
    assert out["usage"] == {"input_tokens": 100,
                            "input_tokens_details": {"cached_tokens": 60,
                                                     "cache_write_tokens": 0},
                            "output_tokens": 40, "output_tokens_details": {"reasoning_tokens": 30},
                            "total_tokens": 140}


def test_a_whole_answer_from_another_dialect() -> None:
    resp = CHAT.parse_response(get("openai").samples.responses["tools"])
    req = D.parse_request(SAMPLES.requests["tools"])
    out = D.render_response(resp, req)
    Response.model_validate(out)
    seen = strict.read_whole(out)
    assert seen.tool_calls[0].arguments == {"location": "Boston, MA", "unit": "celsius"}
    assert out["id"].startswith("resp_")
    assert out["output"][0]["type"] == "function_call"
    assert out["output"][0]["id"].startswith("fc_")
    assert out["store"] is False
    assert out["tools"] == SAMPLES.requests["tools"]["tools"]


def test_citations_both_ways() -> None:
    ann = [{"type": "url_citation", "start_index": 0, "end_index": 2, "title": "A",
            "url": "https://a.example"},
           {"type": "file_citation", "file_id": "file-1", "filename": "b.pdf", "index": 2}]
    msg = {**MSG, "content": [{"type": "output_text", "text": "hi", "annotations": ann}]}
    resp = D.parse_response(whole([msg]))
    assert [c.id for c in citations_of(resp.context)] == ["https://a.example", "b.pdf"]
    fresh = ChatResponse([resp.messages[0]], context=resp.context)
    out = D.render_response(fresh, D.parse_request({"input": "x"}))
    assert strict.read_whole(out).citations == ["https://a.example", "b.pdf"]


def test_a_changed_answer_is_rendered_from_what_it_says() -> None:
    resp = D.parse_response(SAMPLES.responses["text"])
    resp.messages[0].content = "changed"
    out = D.render_response(resp, D.parse_request(SAMPLES.requests["text"]))
    assert strict.read_whole(out).text == "changed"


def test_failed_whole_response_is_an_error() -> None:
    body = whole([], status="failed", error={"code": "server_error", "message": "nope"})
    err = D.parse_error(body)
    assert err is not None and (err.message, err.code) == ("nope", "server_error")
    assert D.parse_error(whole([MSG], error=None)) is None


@pytest.mark.parametrize(("status", "kind"), [
    (400, "invalid_request_error"), (401, "authentication_error"), (403, "permission_error"),
    (404, "not_found_error"), (429, "rate_limit_error"), (500, "server_error"),
    (502, "server_error"), (503, "server_error"), (422, "invalid_request_error"),
])
def test_error_types_by_status(status: int, kind: str) -> None:
    body = D.render_error(ChatError(status, "m", code="c", param="p"))
    assert body == {"error": {"message": "m", "type": kind, "param": "p", "code": "c"}}
    assert strict.read_error(body) == "m"


# --- the strict reader rejects each pitfall ------------------------------------------------------


def _frames(events: list[dict[str, Any]], renumber: bool = True) -> bytes:
    out = b""
    for n, ev in enumerate(events):
        if renumber:
            ev = {**ev, "sequence_number": n}
        out += f"event: {ev['type']}\n".encode() + b"data: " + orjson.dumps(ev) + b"\n\n"
    return out


def _swap_item_id(ev: dict[str, Any]) -> dict[str, Any]:
    return {**ev, "item_id": "msg_other"} if ev["type"] == "response.output_text.delta" else ev


def _change_done_id(ev: dict[str, Any]) -> dict[str, Any]:
    if ev["type"] == "response.output_item.done":
        return {**ev, "item": {**ev["item"], "id": "msg_other"}}
    return ev


def _empty_final(ev: dict[str, Any]) -> dict[str, Any]:
    if ev["type"] == "response.completed":
        return {**ev, "response": {**ev["response"], "output": []}}
    return ev


def _other_id(ev: dict[str, Any]) -> dict[str, Any]:
    if ev["type"] == "response.completed":
        return {**ev, "response": {**ev["response"], "id": "resp_other"}}
    return ev


def _drop(kind: str) -> Any:
    return lambda events: [e for e in events if e["type"] != kind]


PITFALLS: dict[str, tuple[Any, str]] = {
    "created first": (_drop("response.created"), "not response.created"),
    "same response id": (lambda evs: [_other_id(e) for e in evs], "response id changed"),
    "content part before deltas": (_drop("response.content_part.added"), "never added"),
    "item id of deltas": (lambda evs: [_swap_item_id(e) for e in evs], "is not the added item"),
    "item identity at done": (lambda evs: [_change_done_id(e) for e in evs], "identity changed"),
    "every item done": (_drop("response.output_item.done"), "never done"),
    "one terminal event": (lambda evs: [*evs, evs[-1]], "after the terminal"),
    "final output lists all": (lambda evs: [_empty_final(e) for e in evs], "final output lists"),
    "no terminal": (lambda evs: evs[:-1], "without a terminal"),
    "completed after error": (
        lambda evs: [*evs[:-1], {"type": "error", "code": None, "message": "x", "param": None,
                                 "error": {"message": "x"}}, evs[-1]],
        "only response.failed"),
    "items added in order": (
        lambda evs: [{**e, "output_index": 1} if e.get("output_index") == 0 else e
                     for e in evs], "expected the next one"),
}


@pytest.mark.parametrize("pitfall", sorted(PITFALLS))
def test_strict_reader_rejects(pitfall: str) -> None:
    events = wire_events(SAMPLES.streams["text"])
    strict.read_stream(_frames(events))  # the sample itself passes
    mutate, message = PITFALLS[pitfall]
    with pytest.raises(AssertionError, match=message):
        strict.read_stream(_frames(mutate(events)))


def test_strict_reader_rejects_numbering_and_names() -> None:
    events = wire_events(SAMPLES.streams["tools"])
    gap = [{**e, "sequence_number": n + (n > 3)} for n, e in enumerate(events)]
    with pytest.raises(AssertionError, match="sequence_number"):
        strict.read_stream(_frames(gap, renumber=False))
    misnamed = _frames(events).replace(b"event: response.in_progress",
                                       b"event: response.created", 1)
    with pytest.raises(AssertionError, match="event: line says"):
        strict.read_stream(misnamed)
    wrong_kind = [{**e, "type": "response.output_text.delta", "content_index": 0}
                  if e["type"] == "response.function_call_arguments.delta" else e
                  for e in events]
    with pytest.raises(AssertionError, match="does not belong"):
        strict.read_stream(_frames(wrong_kind))


# --- structured output ---------------------------------------------------------------------------


def test_text_format_is_the_canonical_output_and_verbosity_stays() -> None:
    body = {**SAMPLES.requests["structured"]}
    body["text"] = {**body["text"], "verbosity": "low"}
    req = D.parse_request(body)
    assert req.output is not None and req.output.name == "calendar_event" and req.output.strict
    assert "text" not in req.extras and req.sampling["verbosity"] == "low"
    assert D.render_request(req, stream=False, model=None) == body
    chat = CHAT.render_request(req, stream=False, model=None)
    assert chat["response_format"]["json_schema"]["name"] == "calendar_event"
    # text.verbosity is Chat Completions' verbosity: the same setting, at the top level
    assert "text" not in chat and chat["verbosity"] == "low"


def test_json_mode_and_the_answer_echoes_the_format() -> None:
    body = {"model": "m", "input": "JSON please", "text": {"format": {"type": "json_object"}}}
    req = D.parse_request(body)
    assert req.output is not None and req.output.kind == "json_object" and "text" not in req.extras
    assert D.render_request(req, stream=False, model=None)["text"] == body["text"]
    answer = D.render_response(ChatResponse([AssistantMessage("{}")]), req)
    assert answer["text"] == {"format": {"type": "json_object"}}
    TypeAdapter(Response).validate_python(answer)


# --- stored responses: the wire side (the gateway keeps them: tests/test_stored_responses.py) ---

_STORED = stored_responses_of(D)
assert _STORED is not None
STORED = _STORED


def test_references_are_read_once_each_in_order() -> None:
    refs = STORED.references({"previous_response_id": "resp_1", "store": False, "input": [
        {"type": "item_reference", "id": "msg_2"}, {"role": "user", "content": "x"},
        {"type": "item_reference", "id": "fc_3"}, {"type": "item_reference", "id": "msg_2"}]})
    assert (refs.previous, refs.items, refs.store) == ("resp_1", ("msg_2", "fc_3"), False)
    assert not STORED.references({"input": "x"}) and STORED.references({"input": "x"}).store
    with pytest.raises(DialectError) as caught:
        STORED.references({"input": [{"type": "item_reference"}]})
    assert caught.value.where == "input[0].id"


def test_expand_puts_the_conversation_first_and_items_in_place() -> None:
    earlier = [{"id": "msg_0", "type": "message", "role": "user", "content": "hi"}]
    kept = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "hello", "annotations": []}]}
    body, own = STORED.expand({"model": "m", "previous_response_id": "resp_1", "input": [
        {"type": "item_reference", "id": "msg_1"}, {"role": "user", "content": "more"}]},
        earlier, {"msg_1": kept})
    assert body == {"model": "m", "input": [*earlier, kept, {"role": "user", "content": "more"}]}
    assert own[0] == kept
    assert own[1]["type"] == "message" and own[1]["id"].startswith("msg_")
    assert own[1]["content"] == [{"type": "input_text", "text": "more"}]
    # a lone string with nothing before it stays a string (its echo says so)
    assert STORED.expand({"input": "x"}, [], {})[0] == {"input": "x"}


def test_only_a_finished_answer_is_kept() -> None:
    done = {"id": "resp_1", "object": "response", "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": []}]}
    answer = STORED.finished(done)
    assert answer is not None and answer.id == "resp_1" and answer.output[0]["id"]
    assert STORED.finished({"type": "response.incomplete",
                            "response": {**done, "status": "incomplete"}}) is not None
    for not_kept in ({**done, "status": "failed"}, {"type": "response.failed", "response": done},
                     {"type": "response.output_text.delta", "delta": "x"}, {"error": {}}):
        assert STORED.finished(not_kept) is None


def test_the_errors_are_the_apis_own() -> None:
    prev = STORED.not_found("response", "resp_1")
    assert (prev.status, prev.code, prev.param) == (400, "previous_response_not_found",
                                                   "previous_response_id")
    assert STORED.not_found("item", "msg_1").status == STORED.not_found("stored", "r").status \
        == 404


# --- another provider's signed reasoning, through a client that replays what it got ------------

ANTHROPIC = get("anthropic")
_THINKING_ANSWER = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [
        {"type": "thinking", "thinking": "The user wants the tests run.", "signature": "EqQBsig=="},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
        {"type": "tool_use", "id": "toolu_1", "name": "exec_command",
         "input": {"cmd": "pytest"}}],
    "stop_reason": "tool_use", "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 20}}


def _next_turn(output: list[Any]) -> dict[str, Any]:
    """Codex's next request: the items it got, as they came, then its tool's output."""
    return {"model": "m", "include": ["reasoning.encrypted_content"], "input": [
        {"type": "message", "role": "user", "content": "Run the tests."}, *output,
        {"type": "function_call_output", "call_id": "toolu_1", "output": "1 passed"}],
        "tools": [{"type": "function", "name": "exec_command",
                   "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]}


def _replayed_blocks(output: list[Any]) -> list[Any]:
    _, sent, lost = translate_request(_next_turn(output), D, ANTHROPIC)
    assert lost == []
    assistant = [m for m in sent["messages"] if m["role"] == "assistant"]
    return [b for b in assistant[0]["content"] if b["type"] != "tool_use"]


def test_anthropic_thinking_goes_back_to_anthropic_sealed_in_encrypted_content() -> None:
    req = D.parse_request(_next_turn([]))
    whole, _ = translate_response(_THINKING_ANSWER, ANTHROPIC, D, req)
    reasoning = [i for i in whole["output"] if i["type"] == "reasoning"]
    assert all(i["encrypted_content"].startswith("chat-gateway.1.") for i in reasoning)
    assert "EqQBsig==" not in json.dumps(whole)  # opaque to the client
    assert _replayed_blocks(whole["output"]) == [
        {"type": "thinking", "thinking": "The user wants the tests run.",
         "signature": "EqQBsig=="},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}]


def test_streamed_anthropic_thinking_goes_back_to_anthropic_too() -> None:
    req = D.parse_request({**_next_turn([]), "stream": True})
    events = events_from_response(ANTHROPIC.parse_response(_THINKING_ANSWER))
    encoder, frame = ANTHROPIC.encoder(req), encoder_for(ANTHROPIC.framing)
    raw = b"".join(frame(p) for e in events for p in encoder.encode(e))
    tr = StreamTranslator(ANTHROPIC, D, req)
    body = (tr.feed(raw) + tr.finish()).decode()
    done = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")
            and '"response.completed"' in line]
    output = done[0]["response"]["output"]
    blocks = _replayed_blocks(output)
    assert blocks[0] == {"type": "thinking", "thinking": "The user wants the tests run.",
                         "signature": "EqQBsig=="}
    assert {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"} in blocks


def test_a_sealed_reasoning_never_reaches_an_openai_upstream() -> None:
    req = D.parse_request(_next_turn([]))
    whole, _ = translate_response(_THINKING_ANSWER, ANTHROPIC, D, req)
    _, sent, _ = translate_request(_next_turn(whole["output"]), D, D, policy="drop")
    assert not any(i.get("type") == "reasoning" for i in sent["input"])
