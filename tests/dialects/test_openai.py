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
