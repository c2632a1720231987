"""What only ``openai`` does: usage in a stream only for a client that asked
(``stream_options.include_usage``), and asked of an upstream whenever the gateway streams from
it; ``stream_options`` never sent with a whole request; the output cap's two spellings; the model
that answered named in streams as in whole answers; a finished stream without ``[DONE]``."""

from __future__ import annotations

import random

import orjson
import pytest
from observe import RICH, run_stream, strict
from strict._wire import sse_events

from gateway.canonical import ChatRequest
from gateway.dialects import DIALECTS, get
from gateway.pipeline import translate_request

ME = get("openai")
WITH_USAGE = [d for d in DIALECTS.values() if d.capabilities.usage_stream
              and hasattr(strict(d), "write_stream")]


def client(include_usage: bool | None) -> ChatRequest:
    body: dict[str, object] = {"model": "gpt-4o-mini", "stream": True,
                               "messages": [{"role": "user", "content": "hi"}]}
    if include_usage is not None:
        body["stream_options"] = {"include_usage": include_usage}
    req = ME.parse_request(body)
    return req


@pytest.mark.parametrize("asked", [True, False, None])
@pytest.mark.parametrize("up", [d.name for d in WITH_USAGE])
def test_usage_chunk_only_for_a_client_that_asked(up: str, asked: bool | None) -> None:
    u = DIALECTS[up]
    data = strict(u).write_stream(RICH["rag-no-state"], random.Random(up))
    t, out = run_stream(u, ME, client(asked), [data])
    chunks = [orjson.loads(raw) for _, raw in sse_events(out) if raw != "[DONE]"]
    usage = [c for c in chunks if c.get("usage")]
    assert t.usage is not None  # counted either way (metrics)
    if asked:
        assert len(usage) == 1 and usage[0]["choices"] == []
        assert strict(ME).read_stream(out, lenient=u is ME).usage == RICH["rag-no-state"].usage
    elif u is not ME:  # a same-dialect upstream was asked what the client asked (below)
        assert usage == []


def test_streaming_upstream_requests_ask_for_usage() -> None:
    """The gateway counts usage, so it asks an openai upstream for it whenever it streams;
    an openai client's own choice is kept; a whole request never carries stream_options."""
    for c in DIALECTS.values():
        body = c.samples.requests["text"]
        _, out, _ = translate_request(body, c, ME, stream=True, model="m")
        if c is ME:
            assert out.get("stream_options") == body.get("stream_options")
        else:
            assert out["stream_options"] == {"include_usage": True}, c.name
        _, whole, _ = translate_request(body, c, ME, stream=False, model="m")
        assert "stream_options" not in whole and whole.get("stream") in (None, False), c.name


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_output_cap_keeps_its_spelling(key: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], key: 50}
    _, out, _ = translate_request(body, ME, ME, stream=False)
    assert out[key] == 50 and len({"max_tokens", "max_completion_tokens"} & set(out)) == 1
    for up in DIALECTS.values():
        _, out, _ = translate_request(body, ME, up, stream=False, model="m")
        if "max_tokens" in getattr(strict(up), "SAMPLING", ()):
            assert strict(up).read_request(out).extra["max_tokens"] == 50, up.name


def test_stream_names_the_model_that_answered() -> None:
    """As a whole answer does: the upstream's model when its stream names one from the start,
    else the one the client asked for."""
    for u in [d for d in DIALECTS.values() if hasattr(strict(d), "write_stream")]:
        data = strict(u).write_stream(RICH["rag-no-state"], random.Random(0))
        named = strict(u).read_stream(data).model
        _, out = run_stream(u, ME, client(None), [data], policy="drop")
        got = strict(ME).read_stream(out, lenient=u is ME).model
        assert got == (named or "gpt-4o-mini"), (u.name, got, named)


def test_a_finished_stream_without_done_is_finished() -> None:
    """Some servers finish their answer and leave out ``[DONE]``: the answer is whole."""
    data = ME.samples.streams["text"]
    cut = data[:data.rindex(b"data: [DONE]")]
    for c in DIALECTS.values():
        req = c.parse_request(c.samples.requests["text"])
        req.stream = True
        t, out = run_stream(ME, c, req, [cut])
        assert t.error is None and t.done, c.name
        got = strict(c).read_stream(out, lenient=True) if c is ME else strict(c).read_stream(out)
        assert got.text == "Paris is the capital of France. 🇫🇷" and got.error is None


def test_strict_reader_refuses_what_the_sdks_trip_on() -> None:
    reader = strict(ME)
    data = ME.samples.streams["text"].replace(b": keep-alive\n\n", b"")
    reader.read_stream(data)
    no_done = data[:data.rindex(b"data: [DONE]")]
    with pytest.raises(AssertionError, match="DONE"):
        reader.read_stream(no_done)
    assert reader.read_stream(no_done, lenient=True).finish == "stop"  # a server may do so
    error = b'data: {"error":{"message":"x","type":"server_error"}}\n\n'
    with pytest.raises(AssertionError, match="after the error"):
        reader.read_stream(no_done + error + b"data: [DONE]\n\n")
    renamed = data.replace(b'"id":"chatcmpl-A1"', b'"id":"chatcmpl-B2"', 1)
    with pytest.raises(AssertionError):
        reader.read_stream(renamed)


# --- structured output ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [
    {"type": "json_object"},
    {"type": "json_schema", "json_schema": {"name": "n", "description": "d",
                                            "schema": {"type": "object"}, "strict": False}},
    {"type": "json_schema", "json_schema": {"name": "n"}},
])
def test_response_format_is_the_canonical_output_and_renders_back_once(fmt: dict) -> None:
    body = {**ME.samples.requests["text"], "response_format": fmt}
    req = ME.parse_request(body)
    assert req.output is not None and req.output.kind == fmt["type"]
    assert "response_format" not in req.extras
    assert ME.render_request(req, stream=False, model=None) == body


def test_a_text_response_format_is_plain_text_kept_for_its_own_dialect() -> None:
    body = {**ME.samples.requests["text"], "response_format": {"type": "text"}}
    req = ME.parse_request(body)
    assert req.output is None
    assert ME.render_request(req, stream=False, model=None) == body


@pytest.mark.parametrize("fmt", [{"type": "json_schema"},
                                 {"type": "json_schema", "json_schema": {"schema": {}}},
                                 {"type": "json_schema", "json_schema": {"name": "n",
                                                                         "strict": "yes"}}])
def test_a_malformed_json_schema_is_a_400_naming_it(fmt: dict) -> None:
    with pytest.raises(Exception, match="response_format"):
        ME.parse_request({**ME.samples.requests["text"], "response_format": fmt})


def test_keys_of_text_and_image_parts_go_back_to_openai_and_nowhere_else() -> None:
    """A part's ``prompt_cache_breakpoint`` (the SDK types it on text and image parts) is kept for
    an OpenAI upstream, and reported by path for any other."""
    mark = {"mode": "explicit"}
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "look", "prompt_cache_breakpoint": mark},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"},
         "prompt_cache_breakpoint": mark}]}]}
    _, out, lost = translate_request(body, ME, ME)
    assert out["messages"] == body["messages"] and lost == []
    other = next(d for d in DIALECTS.values() if d.name != ME.name and d.capabilities.images)
    _, out, lost = translate_request(body, ME, other, policy="drop")
    assert "prompt_cache_breakpoint" not in orjson.dumps(out).decode()
    assert "messages[].content[].prompt_cache_breakpoint" in lost


@pytest.mark.parametrize("reason", [None, "stop", "length", "tool_calls", "content_filter",
                                    "error", "something_new"])
def test_encoder_start_and_finish_chunks_are_those_its_chunk_writer_writes(
        reason: str | None) -> None:
    """The first and the finish chunks are written from bytes made once: the very bytes the
    general chunk writer gives for them, whatever the finish reason."""
    from gateway.canonical import StreamFinish, StreamStart
    from gateway.dialects.openai import _finish_out

    enc = ME.encoder(client(None))
    start = enc.encode(StreamStart(id="chatcmpl-1", created=7, model="m"))
    assert start == [enc._chunk({"role": "assistant", "content": ""})]
    assert orjson.loads(start[0])["id"] == "chatcmpl-1"
    finish = enc.encode(StreamFinish(reason))
    assert finish == [enc._chunk({}, _finish_out(reason)), b"[DONE]"]


def test_encoder_without_an_upstream_id_mints_one_for_every_chunk() -> None:
    from gateway.canonical import StreamFinish, TextDelta

    enc = ME.encoder(client(None))
    out = [*enc.encode(TextDelta("a")), *enc.encode(StreamFinish("stop"))]
    ids = {orjson.loads(p)["id"] for p in out if p != b"[DONE]"}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")


@pytest.mark.parametrize("delta", [
    {"role": "assistant", "content": ""}, {"role": "assistant", "content": "hi"},
    {"role": "assistant", "content": None}, {"role": "assistant", "content": 3},
    {"content": "hi"}, {"content": ""}, {"role": "assistant", "reasoning_content": "r"},
    {"content": "hi", "reasoning_content": "r"}, {}, {"role": "assistant"}])
def test_decoder_shortcuts_read_what_the_general_delta_reading_reads(delta: dict[str, object],
                                                                    ) -> None:
    chunk = {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    fast = ME.decoder()
    general = ME.decoder()
    expected = general.decode({**chunk, "choices": []})
    general._delta(delta, expected)
    assert fast.decode(chunk) == expected


def test_plain_messages_and_answers_read_and_write_as_the_general_paths() -> None:
    """A role and a text alone, the shortcut's shape, and the shapes beside it that are not."""
    from gateway.dialects.openai import _render_message

    for m in [{"role": "user", "content": "hi"}, {"role": "user", "content": "hi", "name": "n"},
              {"role": "assistant", "content": None, "tool_calls": [{
                  "id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
              {"role": "tool", "content": "r", "tool_call_id": "c"}]:
        body = {"model": "m", "messages": [m]}
        req = ME.parse_request(body)
        assert ME.render_request(req, stream=False, model="m")["messages"] == [m]
        assert _render_message(req.messages[0], False) == {**m, "content": m["content"] or (
            None if "tool_calls" in m else "")}
    for message in [{"role": "assistant", "content": "hi"},
                    {"role": None, "content": "hi"},
                    {"role": "assistant", "content": "hi", "reasoning_content": "r"},
                    {"role": "assistant", "content": "hi", "refusal": None}]:
        answer = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                  "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        resp = ME.parse_response(answer)
        assert resp.messages[0].role == (message["role"] or "assistant")
        back = ME.render_response(resp, client(None))
        assert back["choices"][0]["message"] == {**message, "role": "assistant"}
        # (the upstream's own "object" is kept where its extras put it)
        assert list(back) == ["object", "id", "created", "model", "choices"]
