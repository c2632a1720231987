"""The ``ollama`` dialect's own rules: Ollama's defaults and names (a stream unless told not to,
``num_predict``, ``think``, ``format``), the ids its Python client leaves out, and what its
streams hold (whole tool calls, counts and durations in the last line)."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from gateway.canonical import (
    ChatRequest,
    ImagePart,
    Message,
    OutputFormat,
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
)
from gateway.carry import Unsupported
from gateway.dialects import get, names
from gateway.errors import DialectError
from gateway.framing import Payload, SniffingReader
from gateway.pipeline import translate_request

ME = get("ollama")
OTHER = next(get(n) for n in names() if n != ME.name)
USER = [{"role": "user", "content": "hi"}]


def parse(**body: Any) -> ChatRequest:
    return ME.parse_request({"model": "llama3.2", "messages": USER, **body})


# --- requests ------------------------------------------------------------------------------------


def test_a_request_streams_unless_it_says_not_to() -> None:
    assert parse().stream is True
    assert parse(stream=False).stream is False
    body = ME.render_request(parse(), stream=True, model=None)
    assert "stream" not in body  # the client's own absence is kept on an Ollama upstream
    req = ChatRequest([Message("user", "hi")])
    assert ME.render_request(req, stream=True, model="m")["stream"] is True
    assert ME.render_request(req, stream=False, model="m")["stream"] is False


def test_options_map_to_sampling_and_the_rest_is_unmapped() -> None:
    req = parse(options={"temperature": 0.2, "top_p": 0.9, "seed": 7, "num_predict": 64,
                         "stop": "\n\n", "top_k": 20, "num_ctx": 8192}, keep_alive="5m")
    assert req.sampling == {"temperature": 0.2, "top_p": 0.9, "seed": 7, "max_tokens": 64,
                            "stop": ["\n\n"]}
    assert sorted(req.unmapped) == ["keep_alive", "options.num_ctx", "options.top_k"]
    assert parse(options={"num_predict": -1}).unmapped == ["options.num_predict"]
    assert parse(logprobs=False, top_logprobs=0).unmapped == []  # Ollama's defaults
    assert parse(logprobs=True).unmapped == ["logprobs"]
    out = OTHER.render_request(req, stream=False, model="m")
    assert "top_k" not in orjson.dumps(out).decode()


@pytest.mark.parametrize(("options", "where"), [
    ({"temperature": "hot"}, "options.temperature"), ({"seed": 1.5}, "options.seed"),
    ({"stop": [1]}, "options.stop"), ({"num_predict": True}, "options.num_predict")])
def test_bad_options_say_where(options: dict[str, Any], where: str) -> None:
    with pytest.raises(DialectError) as e:
        parse(options=options)
    assert where in str(e.value)


def test_unmapped_options_follow_the_policy_on_another_dialect_only() -> None:
    body = ME.samples.requests["options"]
    with pytest.raises(Unsupported) as refused:
        translate_request(body, ME, OTHER, policy="reject")
    assert refused.value.fields == ["options"]
    _, out, lost = translate_request(body, ME, OTHER, policy="drop")
    assert "options" in lost and "num_ctx" not in orjson.dumps(out).decode()
    _, same, lost = translate_request(body, ME, ME, policy="reject")
    assert lost == [] and same["options"]["num_ctx"] == 8192 and same["keep_alive"] == "10m"


def test_think_and_format() -> None:
    assert parse(think=True).reasoning == ReasoningRequest()
    assert parse(think=False).reasoning == ReasoningRequest(enabled=False)
    assert parse(think="high").reasoning == ReasoningRequest(effort="high")
    with pytest.raises(DialectError):
        parse(think="xhigh")  # Ollama's server takes low, medium, high and max
    assert parse(format="json").output == OutputFormat("json_object")
    schema = {"type": "object"}
    assert parse(format=schema).output == OutputFormat("json_schema", schema=schema)
    assert parse(format="").output is None
    with pytest.raises(DialectError):
        parse(format="yaml")
    req = ChatRequest([Message("user", "hi")])
    for effort, think in (("none", False), ("minimal", "low"), ("medium", "medium"),
                          ("xhigh", "high"), ("max", "max")):
        req.reasoning = ReasoningRequest(effort=effort)
        assert ME.render_request(req, stream=False, model="m")["think"] == think
    req.reasoning = ReasoningRequest(budget_tokens=1024)
    assert ME.render_request(req, stream=False, model="m")["think"] is True
    req.reasoning, req.output = None, OutputFormat("json_schema", name="x")
    assert ME.render_request(req, stream=False, model="m")["format"] == {"type": "object"}


def test_calls_without_ids_get_ids_and_results_are_matched_by_name() -> None:
    """What the ``ollama`` Python client sends back: calls without ids, results with
    ``tool_name`` alone (or nothing but their order)."""
    req = parse(messages=[
        {"role": "user", "content": "weather and time?"},
        {"role": "assistant", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"function": {"name": "get_time", "arguments": {}}}]},
        {"role": "tool", "content": "12:00", "tool_name": "get_time"},
        {"role": "tool", "content": "sunny"},
        {"role": "tool", "content": "late", "tool_call_id": "call_other"}])
    calls = req.messages[1].tool_calls
    assert [(c.id, c.name, orjson.loads(c.arguments)) for c in calls] == [
        ("call_1_0", "get_weather", {"city": "Paris"}), ("call_1_1", "get_time", {})]
    assert [m.tool_call_id for m in req.messages[2:]] == ["call_1_1", "call_1_0", "call_other"]
    assert req.messages[1].content == ""  # the client leaves out an empty content


def test_a_request_to_an_ollama_upstream() -> None:
    req = ChatRequest([
        Message("developer", "Be brief."),
        Message("user", [TextPart("what is this?"),
                         ImagePart(url="data:image/png;base64,iVBORw0KGgo=")]),
        Message("assistant", "", tool_calls=[ToolCall("toolu_1", "look", '{"at": "x"}')]),
        Message("tool", "a cat", tool_call_id="toolu_1")],
        tools=[ToolDef("look", "Looks", {"type": "object"})], tool_choice=ToolChoice("auto"),
        sampling={"temperature": 0.5, "stop": ["END"], "user": "u-1"}, model=None)
    out = ME.render_request(req, stream=False, model="llama3.2", max_tokens=100)
    assert out["model"] == "llama3.2"
    assert out["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "what is this?", "images": ["iVBORw0KGgo="]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "toolu_1", "function": {"name": "look", "arguments": {"at": "x"}}}]},
        {"role": "tool", "content": "a cat", "tool_name": "look", "tool_call_id": "toolu_1"}]
    assert out["options"] == {"temperature": 0.5, "stop": ["END"], "num_predict": 100}
    assert out["tools"] == [{"type": "function", "function": {
        "name": "look", "description": "Looks", "parameters": {"type": "object"}}}]
    assert "tool_choice" not in out
    bad = ChatRequest([Message("assistant", "", tool_calls=[ToolCall("c", "f", "[1]")])])
    with pytest.raises(DialectError):
        ME.render_request(bad, stream=False, model="m")


def test_what_ollama_cannot_carry_is_declared() -> None:
    caps = ME.capabilities
    assert caps.tool_choices == frozenset({"auto"}) and caps.inline_images_only
    from gateway.carry import request_losses

    req = ChatRequest([Message("user", [ImagePart(url="https://x.test/a.png")])],
                      tools=[ToolDef("f")], tool_choice=ToolChoice("required"))
    assert request_losses(req, ME) == ["tool_choice", "images"]
    req = ChatRequest([Message("user", "hi")], tools=[ToolDef("f")],
                      tool_choice=ToolChoice("auto", parallel=False))
    assert request_losses(req, ME) == ["tool_choice"]


# --- answers -------------------------------------------------------------------------------------


def test_a_whole_answer() -> None:
    resp = ME.parse_response(ME.samples.responses["tools"])
    assert resp.finish_reason == "tool_calls"  # done_reason stop, after tool calls
    assert resp.tool_calls == [ToolCall("call_k3fqyb7e", "get_weather", '{"city":"Tokyo"}')]
    assert resp.usage == Usage(input_tokens=169, output_tokens=18)
    assert resp.created == 1751920373
    text = ME.parse_response(ME.samples.responses["text"])
    assert text.finish_reason == "stop" and text.model == "llama3.2"
    req = OTHER.parse_request(OTHER.samples.requests["text"])
    out = ME.render_response(OTHER.parse_response(OTHER.samples.responses["text"]), req)
    assert out["done"] is True and out["done_reason"] == "stop"
    assert out["created_at"].endswith("Z") and out["message"]["role"] == "assistant"


def test_created_at_as_go_writes_it() -> None:
    stream = ME.samples.streams["text"]
    first = orjson.loads(stream.split(b"\n", 1)[0])
    assert first["created_at"] == "2023-08-04T08:52:19.385406455-07:00"
    events = ME.decoder().decode(first)
    assert isinstance(events[0], StreamStart) and events[0].created == 1691164339


def decode(data: bytes) -> list[Any]:
    reader, dec = SniffingReader(), ME.decoder()
    return [e for p in [*reader.feed(data), *reader.finish()] for e in dec.decode(p)] + dec.end()


def test_a_stream_with_a_tool_call() -> None:
    events = decode(ME.samples.streams["tools"])
    assert [type(e) for e in events] == [StreamStart, ToolCallStart, ToolCallDelta,
                                         ToolCallEnd, StreamFinish]
    assert events[-1] == StreamFinish("tool_calls", Usage(input_tokens=169, output_tokens=15))


def test_a_stream_without_its_done_line_is_broken() -> None:
    lines = ME.samples.streams["text"].split(b"\n")
    events = decode(b"\n".join(lines[:2]) + b"\n")
    assert isinstance(events[-1], StreamError)
    assert not any(isinstance(e, StreamFinish) for e in events)
    failed = decode(lines[0] + b'\n{"error":"model crashed"}\n')
    assert failed[-1] == StreamError("model crashed")


def test_each_kind_of_line_after_the_first_is_read_for_all_it_holds() -> None:
    def after_start(line: dict[str, Any]) -> list[Any]:
        dec = ME.decoder()
        dec.decode({"model": "m", "created_at": "2024-01-01T00:00:00Z",
                    "message": {"role": "assistant", "content": ""}, "done": False})
        return dec.decode(line)

    def line(message: Any, **more: Any) -> dict[str, Any]:
        return {"model": "m", "created_at": "2024-01-01T00:00:01Z", "message": message,
                "done": False, **more}

    text = {"role": "assistant", "content": "Hi"}
    assert after_start(line(text)) == [TextDelta("Hi")]
    assert after_start(line({"role": "assistant", "content": ""})) == []
    assert after_start(line({"role": "assistant", "content": None})) == []
    assert after_start(line({"role": "assistant", "content": 7})) == []
    assert after_start(line({"role": "assistant"})) == []
    assert after_start(line({**text, "images": None})) == [TextDelta("Hi")]
    assert [type(e) for e in after_start(line({**text, "thinking": "hm"}))] == \
        [ReasoningDelta, TextDelta]
    called = after_start(line({**text, "tool_calls": [{"function": {"name": "f"}}]}))
    assert [type(e) for e in called] == [TextDelta, ToolCallStart, ToolCallDelta, ToolCallEnd]
    assert after_start(line(text, error="boom")) == [StreamError("boom")]
    assert after_start(line(text, done=True, done_reason="length")) == \
        [TextDelta("Hi"), StreamFinish("length", None)]
    assert after_start(line(text, eval_count=3)) == [TextDelta("Hi")]
    with pytest.raises(DialectError):
        after_start(line("Hi"))
    with pytest.raises(DialectError):
        after_start(line({**text, "tool_calls": "f"}))
    dec = ME.decoder()
    dec.decode(line(text))
    dec.decode(line(text, done=True))
    assert dec.decode(line(text)) == [] and dec.end() == []  # nothing after the last line
    failed = ME.decoder()
    failed.decode(line(text))
    failed.decode({"error": "boom"})
    assert failed.decode(line(text)) == [] and failed.end() == []


def test_a_text_is_encoded_as_the_general_line_writes_it() -> None:
    enc = ME.encoder(parse())
    enc.encode(StreamStart(model="up"))
    for text in ("Hello", ' "quoted"\n\\', " wörld 😀", "\u2028<>&", "\x00\x1f"):
        fast = enc.encode(TextDelta(text))
        general = [enc._line({"content": text})]
        assert _stamped(fast)[0] == _stamped(general)[0]
        assert isinstance(fast[0], bytes)
        assert orjson.loads(fast[0])["message"]["content"] == text


def test_lines_are_stamped_as_iso_stamps_them() -> None:
    from datetime import UTC, datetime, timedelta

    from gateway.dialects import ollama

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for ns in (1_700_000_000_000_000_000, 1_700_000_000_000_999_999, 1_700_000_000_999_999_999,
               1_700_000_001_000_000_000, 1_700_000_001_000_123_456, 951_782_400_000_001_000):
        moment = epoch + timedelta(microseconds=ns // 1000)
        expected = moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
        assert ollama._stamp(ns) == expected.encode()
    before = ollama._iso().encode()
    now = ollama._stamp()  # (the clock's: between two readings of it, in the same form)
    assert before <= now <= ollama._iso().encode()


def test_the_encoder_sends_a_call_whole_and_ends_with_counts_and_durations() -> None:
    enc = ME.encoder(parse())
    out: list[bytes] = []
    for e in (StreamStart(model="up"), TextDelta("Let me check."), ToolCallStart(0, "c1", "f"),
              ToolCallDelta(0, '{"a"'), ToolCallDelta(0, ': 1}'), ToolCallEnd(0),
              StreamFinish("tool_calls", Usage(input_tokens=3, output_tokens=4))):
        out += [p for p in enc.encode(e) if isinstance(p, bytes)]
    lines = [orjson.loads(p) for p in out]
    assert [ln["message"]["content"] for ln in lines[:-1]] == ["", "Let me check.", ""]
    assert lines[2]["message"]["tool_calls"] == [
        {"id": "c1", "function": {"index": 0, "name": "f", "arguments": {"a": 1}}}]
    last = lines[-1]
    assert last["done"] is True and last["done_reason"] == "stop"
    assert (last["prompt_eval_count"], last["eval_count"]) == (3, 4)
    assert all(last[k] > 0 for k in ("total_duration", "prompt_eval_duration",
                                      "eval_duration"))
    assert all(ln["model"] == "up" and ln["done"] is False for ln in lines[:-1])


def test_arguments_that_are_no_object_break_the_stream_in_ollamas_shape() -> None:
    enc = ME.encoder(parse())
    out = [*enc.encode(ToolCallStart(0, "c1", "f")), *enc.encode(ToolCallDelta(0, "[1, 2]")),
           *enc.encode(ToolCallEnd(0)), *enc.encode(StreamFinish("stop"))]
    assert len(out) == 1 and isinstance(out[0], bytes)  # (no start: nothing before the call)
    assert "error" in orjson.loads(out[0])


_WHEN = re.compile(rb'(?<="created_at":")[^"]+')
"""Where a line carries the moment it was written."""


def _twins(*events: StreamEvent) -> tuple[Any, Any]:
    """Two encoders given the same ``events``: the same lines from then on, but for their
    moments."""
    encs = [ME.encoder(parse()) for _ in range(2)]
    for enc in encs:
        for e in events:
            enc.encode(e)
    return encs[0], encs[1]


def _stamped(payloads: list[Payload] | None) -> tuple[list[bytes], list[bytes]]:
    """The lines with their moments taken out, and the moments."""
    assert payloads is not None
    lines = [p for p in payloads if isinstance(p, bytes)]
    assert len(lines) == len(payloads)
    return [_WHEN.sub(b"", ln) for ln in lines], [_WHEN.findall(ln)[0] for ln in lines]


def test_plain_texts_write_what_encoding_them_writes_each_stamped_when_written() -> None:
    enc, twin = _twins(StreamStart(model="up"))
    texts = [b"Hello", " wörld 😀".encode(), b" end."]
    plain = enc.plain_texts(texts)
    written, times = _stamped(plain)
    encoded, encoded_times = _stamped(
        [p for t in texts for p in twin.encode(TextDelta(t.decode()))])
    assert written == encoded
    assert plain is not None and orjson.loads(plain[1])["message"]["content"] == " wörld 😀"
    assert times == sorted(times) and all(t.endswith(b"Z") for t in times + encoded_times)
    last = orjson.loads(enc.encode(StreamFinish("stop"))[0])
    assert last["eval_duration"] > 0  # the first text's moment was taken, as encoding takes it


def test_plain_texts_leave_the_start_an_agent_and_a_closed_stream_to_encode() -> None:
    enc = ME.encoder(parse())
    assert enc.plain_texts([b"early"]) is None  # the empty first piece is not written yet
    enc, twin = _twins(StreamStart(), TextDelta("Hi", agent="a"))
    assert enc.plain_texts([b" there"]) is None
    # nothing changed: what follows is encoded as by its twin, never asked
    assert _stamped(enc.encode(TextDelta(" there")))[0] == \
        _stamped(twin.encode(TextDelta(" there")))[0]
    enc.encode(StreamFinish())
    assert enc.plain_texts([b"late"]) is None


# --- errors and models ---------------------------------------------------------------------------


def test_errors_and_model_lists() -> None:
    from gateway.canonical import ChatError

    assert ME.render_error(ChatError(404, "model not found")) == {"error": "model not found"}
    err = ME.parse_error(ME.samples.error)
    assert err is not None and "not found" in err.message
    assert ME.parse_error(ME.samples.responses["text"]) is None
    listed = ME.render_models(["a", "b:7b"])
    assert [m["model"] for m in listed["models"]] == ["a", "b:7b"]
    assert all(m["name"] == m["model"] and m["modified_at"] for m in listed["models"])
    assert ME.render_model_info("a")["model_info"] == {}
