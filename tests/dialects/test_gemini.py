"""The ``gemini`` dialect's own rules: the request target (model and method in the path), the
upstream URLs, Google's field spellings, thought signatures carried back to whoever issued them,
safety finishes, Google's error shape, and what only a Gemini upstream can carry."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from fakes import ZeroIds
from strict import reader_for
from strict._wire import frame_sse

from gateway.app import create_app
from gateway.canonical import (
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
    Message,
    OtherPart,
    Reasoning,
    ReasoningDelta,
    ReasoningRequest,
    StreamError,
    StreamFinish,
    StreamStart,
    TextDelta,
    ToolCall,
    Usage,
    use_id_source,
)
from gateway.carry import Unsupported
from gateway.config import parse_config
from gateway.dialects import Target, get
from gateway.dialects.gemini import SKIP_SIGNATURE
from gateway.errors import DialectError
from gateway.framing import Payload, encoder_for
from gateway.pipeline import adapt_request, translate_request
from gateway.upstream import MemoryResponse, MemoryTransport, UpstreamRequest

G = get("gemini")
ANTHROPIC = get("anthropic")
OPENAI = get("openai")
TEXT = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def test_the_target_names_the_model_and_the_method() -> None:
    read = G.read_target  # type: ignore[attr-defined]
    assert read("models/gemini-2.5-flash:generateContent", "POST", {}) == \
        Target("chat", model="gemini-2.5-flash", stream=False)
    assert read("models/gemini-2.5-flash:streamGenerateContent", "POST", {"alt": "sse"}) == \
        Target("chat", model="gemini-2.5-flash", stream=True)
    assert read("models/m:countTokens", "POST", {}) == Target("count", model="m")
    assert read("models", "GET", {}) == Target("models")
    for bad in ("models/m:embedContent", "models/:generateContent", "tunedModels/x:generate",
                "models/a/b:generateContent", "models/m"):
        assert read(bad, "POST", {}) is None, bad
    assert read("models", "POST", {}) is None


def test_upstream_urls_are_built_on_the_configured_base() -> None:
    url = G.upstream_url  # type: ignore[attr-defined]
    base = "https://generativelanguage.googleapis.com/v1beta"
    assert url(base, "gemini-2.5-pro", stream=False) == \
        f"{base}/models/gemini-2.5-pro:generateContent"
    assert url(base + "/", "m", stream=True) == f"{base}/models/m:streamGenerateContent?alt=sse"
    assert url(base + "?x=1", "m", stream=True) == \
        f"{base}/models/m:streamGenerateContent?x=1&alt=sse"
    assert url(base, "m", stream=False, count=True) == f"{base}/models/m:countTokens"


def test_snake_case_field_names_are_read_as_google_reads_them() -> None:
    req = G.parse_request({
        "contents": [{"role": "user", "parts": [
            {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgo="}},
            {"text": "what is it?"}]}],
        "system_instruction": {"parts": [{"text": "be brief"}]},
        "tools": [{"function_declarations": [{"name": "f", "parameters_json_schema": {
            "type": "object", "properties": {"snake_case_arg": {"type": "string"}}}}]}],
        "generation_config": {"max_output_tokens": 64, "top_p": 0.5,
                              "thinking_config": {"thinking_budget": 0}}})
    assert req.messages[0].role == "system" and req.messages[0].text == "be brief"
    image = req.messages[1].content[0]  # type: ignore[index]
    assert getattr(image, "media_type", None) == "image/png"
    assert req.tools[0].parameters["properties"] == {"snake_case_arg": {"type": "string"}}
    assert req.sampling == {"max_tokens": 64, "top_p": 0.5}
    assert req.reasoning == ReasoningRequest(effort="none", enabled=False)


def test_openapi_schemas_become_json_schema() -> None:
    req = G.parse_request({**TEXT, "tools": [{"functionDeclarations": [{"name": "f", "parameters": {
        "type": "OBJECT", "properties": {"n": {"type": "INTEGER", "nullable": True}}}}]}]})
    assert req.tools[0].parameters == {"type": "object",
                                       "properties": {"n": {"type": ["integer", "null"]}}}


def test_calls_without_ids_are_matched_to_their_responses_by_name() -> None:
    req = G.parse_request({"contents": [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "w", "args": {"c": "Lyon"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "w",
                                                          "response": {"output": "18C"}}}]}]})
    call = req.messages[1].tool_calls[0]
    result = req.messages[2]
    assert result.role == "tool" and result.tool_call_id == call.id and result.text == "18C"
    body = OPENAI.render_request(req, stream=False, model="m")
    assert body["messages"][2]["tool_call_id"] == body["messages"][1]["tool_calls"][0]["id"]


def test_a_signature_goes_back_to_the_dialect_that_issued_it() -> None:
    """An Anthropic thinking signature, given to a Gemini client, comes back to Anthropic as it
    was; Gemini's own signature stays with Gemini."""
    answer = ChatResponse([AssistantMessage("4", reasoning=[
        Reasoning("2+2", signature="EqQBsig", dialect=ANTHROPIC.name)])], finish_reason="stop")
    shown = G.render_response(answer, G.parse_request(TEXT))
    part = shown["candidates"][0]["content"]["parts"][0]
    assert part["thought"] is True and part["text"] == "2+2"
    assert base64.b64decode(part["thoughtSignature"])  # base64, as the SDK keeps it (bytes)
    replay = G.parse_request({"contents": [
        TEXT["contents"][0], {"role": "model", "parts": shown["candidates"][0]["content"]["parts"]},
        {"role": "user", "parts": [{"text": "and 3+3?"}]}]})
    back = ANTHROPIC.render_request(replay, stream=False, model="m")
    thinking = back["messages"][1]["content"][0]
    assert thinking == {"type": "thinking", "thinking": "2+2", "signature": "EqQBsig"}
    own = G.parse_request({"contents": [TEXT["contents"][0], {"role": "model", "parts": [
        {"functionCall": {"id": "c1", "name": "f", "args": {}}, "thoughtSignature": "R2VtaW5p"}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "f",
                                                          "response": {}}}]}]})
    assert own.messages[1].reasoning == [Reasoning("", signature="R2VtaW5p", dialect=G.name)]
    # (to Anthropic: a Gemini signature is not its own, and nothing of it is sent)
    assert adapt_request(own, ANTHROPIC, "reject")[1] == []


def test_a_call_from_another_provider_is_replayed_with_the_documented_bypass() -> None:
    req = ChatRequest([Message("user", "x"),
                       Message("assistant", "", tool_calls=[ToolCall("c1", "f", "{}")]),
                       Message("tool", "ok", tool_call_id="c1")])
    body = G.render_request(req, stream=False, model="m")
    part = body["contents"][1]["parts"][0]
    assert part == {"functionCall": {"name": "f", "args": {}, "id": "c1"},
                    "thoughtSignature": SKIP_SIGNATURE}
    assert body["contents"][2]["parts"][0]["functionResponse"] == {
        "name": "f", "response": {"output": "ok"}, "id": "c1"}


def test_safety_blocks_finish_as_content_filter() -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": "m"}
    assert G.parse_response(blocked).finish_reason == "content_filter"
    dec = G.decoder()
    events = dec.decode(blocked)
    assert isinstance(events[0], StreamStart) and events[-1] == StreamFinish("content_filter")
    assert dec.end() == []
    cut = {"candidates": [{"content": {"parts": [{"text": "so"}], "role": "model"},
                           "finishReason": "RECITATION", "index": 0}]}
    assert G.parse_response(cut).finish_reason == "content_filter"
    body = OPENAI.render_response(G.parse_response(cut), OPENAI.parse_request(
        OPENAI.samples.requests["text"]))
    assert body["choices"][0]["finish_reason"] == "content_filter"


def test_usage_counts_thoughts_as_output() -> None:
    usage = G.parse_response(G.samples.responses["reasoning"]).usage
    assert usage == Usage(input_tokens=12, output_tokens=532, reasoning_tokens=519)
    out = G.render_response(ChatResponse([AssistantMessage("x")], usage=Usage(
        input_tokens=10, output_tokens=30, cached_input_tokens=4, reasoning_tokens=20)),
        G.parse_request(TEXT))
    assert out["usageMetadata"] == {"promptTokenCount": 10, "candidatesTokenCount": 10,
                                    "totalTokenCount": 40, "cachedContentTokenCount": 4,
                                    "thoughtsTokenCount": 20}


def test_errors_in_googles_shape_both_ways() -> None:
    err = G.parse_error(G.samples.error)
    assert err == ChatError(400, "API key not valid. Please pass a valid API key.",
                            code="INVALID_ARGUMENT")
    assert G.parse_error([{"error": {"code": 429, "message": "slow down",
                                     "status": "RESOURCE_EXHAUSTED"}}]) == ChatError(
        429, "slow down", code="RESOURCE_EXHAUSTED")
    assert G.render_error(ChatError(503, "busy")) == {
        "error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}}
    assert G.render_error(ChatError(400, "no", code="BAD_REQUEST"))["error"]["status"] == \
        "INVALID_ARGUMENT"
    event = G.decoder().decode({"error": {"code": 500, "message": "boom", "status": "INTERNAL"}})
    assert event == [StreamError("boom", "INTERNAL", 500)]


@pytest.mark.parametrize("key", ["cachedContent", "candidateCount"])
def test_what_only_gemini_carries_follows_the_routes_policy(key: str) -> None:
    body: dict[str, Any] = dict(TEXT)
    if key == "cachedContent":
        body["cachedContent"] = "cachedContents/abc"
    else:
        body["generationConfig"] = {"candidateCount": 2}
    req = G.parse_request(body)
    assert any(isinstance(p, OtherPart) and p.kind == key
               for p in req.messages[0].content)  # type: ignore[union-attr]
    assert G.render_request(req, stream=False, model="m") == body  # to Gemini: carried
    with pytest.raises(Unsupported) as refused:
        translate_request(body, G, OPENAI, policy="reject")
    assert refused.value.fields == ["content_parts"]
    _, sent, lost = translate_request(body, G, OPENAI, policy="drop")
    assert lost == ["content_parts"] and sent["messages"][0]["content"][0]["text"] == "hi"


def test_thinking_maps_to_efforts_and_back() -> None:
    levels = G.render_request(ChatRequest([Message("user", "x")], reasoning=ReasoningRequest(
        effort="high")), stream=False, model="gemini-3-pro-preview")
    assert levels["generationConfig"]["thinkingConfig"] == {"includeThoughts": True,
                                                            "thinkingLevel": "HIGH"}
    budget = G.render_request(ChatRequest([Message("user", "x")], reasoning=ReasoningRequest(
        effort="low")), stream=False, model="gemini-2.5-flash")
    assert budget["generationConfig"]["thinkingConfig"] == {"includeThoughts": True,
                                                            "thinkingBudget": 1024}
    assert G.parse_request({**TEXT, "generationConfig": {"thinkingConfig": {
        "thinkingLevel": "LOW"}}}).reasoning == ReasoningRequest(effort="low")


def test_a_stream_that_ends_before_its_finish_is_an_error() -> None:
    dec = G.decoder()
    dec.decode({"candidates": [{"content": {"parts": [{"text": "a"}], "role": "model"}}]})
    [err] = dec.end()
    assert isinstance(err, StreamError) and "ended before" in err.message


def _chunk(parts: list[Any], *, finish: str | None = None, usage: Any = None,
           **top: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    chunk: dict[str, Any] = {"candidates": [candidate]}
    if usage is not None:
        chunk["usageMetadata"] = usage
    return {**chunk, "modelVersion": "gemini-2.5-flash", "responseId": "r1", **top}


def _counts(n: int) -> dict[str, int]:
    return {"promptTokenCount": 8, "candidatesTokenCount": n, "totalTokenCount": 8 + n}


_STREAMS: dict[str, list[dict[str, Any]]] = {
    "texts": [_chunk([{"text": "a"}], usage=_counts(1)), _chunk([{"text": "b"}], usage=_counts(2)),
              _chunk([{"text": ""}], usage=_counts(3)),
              _chunk([{"text": "c"}, {"text": "d"}], finish="STOP", usage=_counts(4))],
    # counts that count nothing leave the last ones that did
    "counts kept": [_chunk([{"text": "a"}], usage=_counts(1)),
                    _chunk([{"text": "b"}], usage={"totalTokenCount": 9}),
                    _chunk([{"text": "c"}], usage={"promptTokenCount": True}),
                    _chunk([{"text": "d"}], usage=[1]),
                    _chunk([{"text": "e"}], finish="MAX_TOKENS")],
    "snake counts": [_chunk([{"text": "a"}], usage=_counts(1)),
                     _chunk([{"text": "b"}], finish="STOP", usage={
                         "prompt_token_count": 8, "candidates_token_count": 5,
                         "thoughts_token_count": 2})],
    "no counts": [_chunk([{"text": "a"}]), _chunk([{"text": "b"}], finish="STOP")],
    "other shapes": [_chunk([{"text": "a"}], usage=_counts(1)),
                     _chunk([{"text": "t", "thought": True}], usage=_counts(2)),
                     _chunk([{"text": "b", "thoughtSignature": "s"}], usage=_counts(3)),
                     _chunk([{"functionCall": {"name": "f", "args": {"x": 1}}}]),
                     {"candidates": [], "usageMetadata": _counts(4)},
                     {**_chunk([{"text": "c"}]), "promptFeedback": {}},
                     _chunk([{"text": "d"}], finish="STOP", usage=_counts(5))],
    "blocked after counts": [_chunk([{"text": "a"}], usage=_counts(1)),
                             {"promptFeedback": {"blockReason": "SAFETY"}}],
}


@pytest.mark.parametrize("name", sorted(_STREAMS))
def test_common_stream_events_decode_as_any_spelling_of_them(name: str) -> None:
    """The decoder's shortcut for events of the common shape gives what its general path gives
    for the same events spelled with a snake_case key (which that path camel-cases), usage
    and finish included, whatever the other events of the stream."""
    def snake(chunk: dict[str, Any]) -> dict[str, Any]:
        out = dict(chunk)
        if "responseId" in out:
            out["response_id"] = out.pop("responseId")
        else:
            out["model_version"] = "gemini-2.5-flash"
        return out

    fast, slow = G.decoder(), G.decoder()
    for chunk in _STREAMS[name]:
        assert fast.decode(chunk) == slow.decode(snake(chunk))
    assert fast.end() == slow.end()


def test_the_last_counts_that_count_go_with_the_finish() -> None:
    dec = G.decoder()
    events = [e for chunk in _STREAMS["counts kept"] for e in dec.decode(chunk)]
    assert events[-1] == StreamFinish("length", Usage(input_tokens=8, output_tokens=1))
    dec = G.decoder()
    events = [e for chunk in _STREAMS["snake counts"] for e in dec.decode(chunk)]
    assert events[-1] == StreamFinish("stop", Usage(input_tokens=8, output_tokens=7,
                                                    reasoning_tokens=2))


def test_a_text_chunk_is_the_documented_shape() -> None:
    """A text delta's chunk, written from its template, is the JSON of the API's shape for it,
    before the start (the encoder's own id) and after it (the upstream's id and model)."""
    enc = G.encoder(G.parse_request(TEXT))
    texts = ["Hello", "", 'q"uo\\te', "tab\there\nline \x00\x1f", " wörld 😀 \u2028"]
    first = orjson.loads(enc.encode(TextDelta("x"))[0])
    for model, rid in ((None, first["responseId"]), ("gemini-2.5-flash", "resp-1")):
        if model is not None:
            enc.encode(StreamStart(id=rid, model=model))
        for t in texts:
            want: dict[str, Any] = {"candidates": [{"content": {"parts": [{"text": t}],
                                                                "role": "model"}, "index": 0}]}
            if model is not None:
                want["modelVersion"] = model
            want["responseId"] = rid
            assert enc.encode(TextDelta(t)) == [orjson.dumps(want)]


def _framed(framing: str, payloads: list[Payload]) -> bytes:
    frame = encoder_for(framing)  # type: ignore[arg-type]
    return b"".join(frame(p) for p in payloads)


@pytest.mark.parametrize("framing", ["sse", "jsonarray"])
def test_plain_texts_are_the_chunks_their_text_deltas_make(framing: str) -> None:
    """``plain_texts`` (the runs accelerator) writes what encoding each TextDelta writes, in
    either framing of a Gemini stream (framed after), and leaves the encoder as those would;
    a text that carries a signature, or an agent's header, takes the general path."""
    with use_id_source(ZeroIds()):  # (the same minted id for both, until the start gives one)
        fast, slow = G.encoder(G.parse_request(TEXT)), G.encoder(G.parse_request(TEXT))
    texts = ["Hello", " wörld 😀", " «q»"]

    def both(*events: Any) -> None:
        for e in events:
            assert _framed(framing, fast.encode(e)) == _framed(framing, slow.encode(e))

    def run() -> None:
        plain = fast.plain_texts([t.encode() for t in texts])  # type: ignore[attr-defined]
        assert plain is not None
        assert _framed(framing, plain) == _framed(
            framing, [p for t in texts for p in slow.encode(TextDelta(t))])

    run()  # (before the start: a text chunk is the same then)
    both(StreamStart(id="resp-1", model="gemini-2.5-flash"),
         TextDelta("hi", agent="Ann"))  # (a paragraph: the run's text was written before)
    assert fast.plain_texts([b"x"]) is None  # type: ignore[attr-defined]
    both(TextDelta("back"))
    run()  # (the start's id and model, not the ones before it)
    assert orjson.loads(fast.encode(TextDelta("x"))[0])["responseId"] == "resp-1"
    slow.encode(TextDelta("x"))
    both(ReasoningDelta("", signature="sig", dialect=G.name))
    assert fast.plain_texts([b"signed"]) is None  # type: ignore[attr-defined]
    [signed] = fast.encode(TextDelta("signed"))
    slow.encode(TextDelta("signed"))
    assert orjson.loads(signed)["candidates"][0]["content"]["parts"][0][
        "thoughtSignature"] == "sig"
    run()
    both(StreamFinish("stop", Usage(3, 4)))


def test_foreign_redacted_reasoning_round_trips_through_a_signature() -> None:
    enc = G.encoder(G.parse_request(TEXT))
    enc.encode(StreamStart())
    assert enc.encode(ReasoningDelta("", redacted="opaque", dialect=ANTHROPIC.name)) == []
    [chunk] = enc.encode(StreamFinish("stop"))
    part = orjson.loads(chunk)["candidates"][0]["content"]["parts"][0]
    back = G.parse_request({"contents": [TEXT["contents"][0],
                                         {"role": "model", "parts": [part]}]})
    assert back.messages[1].reasoning == [Reasoning("", redacted="opaque",
                                                    dialect=ANTHROPIC.name)]


def test_bad_requests_name_the_field() -> None:
    for body, where in (({"contents": "hi"}, "contents"),
                        ({**TEXT, "toolConfig": {"functionCallingConfig": {"mode": "X"}}},
                         "toolConfig.functionCallingConfig.mode"),
                        ({**TEXT, "generationConfig": {"maxOutputTokens": "9"}},
                         "generationConfig.maxOutputTokens")):
        with pytest.raises(DialectError) as e:
            G.parse_request(body)
        assert e.value.where == where


async def test_a_key_in_the_query_is_accepted_and_goes_on_as_a_header(
        aiohttp_client: Any) -> None:
    seen: list[UpstreamRequest] = []

    async def upstream(req: UpstreamRequest) -> MemoryResponse:
        seen.append(req)
        return MemoryResponse(200, {"Content-Type": "application/json"},
                              orjson.dumps(G.samples.responses["text"]))

    config = parse_config({
        "upstreams": {"g": {"dialect": G.name, "url": "http://up.test/v1beta"}},
        "routes": [{"path": "/v1beta", "dialect": G.name, "upstream": "g"}]}, env={})
    client: TestClient[Any, Any] = await aiohttp_client(
        create_app(config, transport=MemoryTransport(upstream)))
    resp = await client.post("/v1beta/models/gemini-2.5-flash:generateContent?key=sekrit",
                             json=TEXT)
    assert resp.status == 200
    [sent] = seen
    assert sent.url == "http://up.test/v1beta/models/gemini-2.5-flash:generateContent"
    assert sent.headers["x-goog-api-key"] == "sekrit" and "sekrit" not in sent.url
    missing = await client.post("/v1beta/models/m:embedContent", json=TEXT)
    assert missing.status == 404


def test_gemini_clis_router_schema_is_read_as_json_schema() -> None:
    """Gemini CLI's model router asks for JSON with OpenAPI's upper-case types inside
    ``responseJsonSchema`` (observed from 0.61.0), which Google accepts and OpenAI would not."""
    req = G.parse_request({**TEXT, "generationConfig": {
        "responseMimeType": "application/json", "responseJsonSchema": {
            "type": "OBJECT", "properties": {"complexity_score": {"type": "INTEGER"}},
            "required": ["complexity_score"]}}})
    assert req.output is not None and req.output.schema == {
        "type": "object", "properties": {"complexity_score": {"type": "integer"}},
        "required": ["complexity_score"]}


@pytest.mark.parametrize("alt", ["", "?alt=sse"])
async def test_a_stream_without_alt_sse_is_a_json_array(aiohttp_client: Any, alt: str) -> None:
    """Google's default stream (no ``alt=sse``): one JSON array whose elements are the
    events an SSE stream would carry; with ``alt=sse``, those events."""
    up = OPENAI

    async def upstream(req: UpstreamRequest) -> MemoryResponse:
        return MemoryResponse(200, {"Content-Type": "text/event-stream"},
                              up.samples.streams["text"])

    config = parse_config({
        "upstreams": {"u": {"dialect": up.name, "url": "http://up.test/v1/chat/completions"}},
        "routes": [{"path": "/v1beta", "dialect": G.name, "upstream": "u"}]}, env={})
    client: TestClient[Any, Any] = await aiohttp_client(
        create_app(config, transport=MemoryTransport(upstream)))
    resp = await client.post(f"/v1beta/models/m:streamGenerateContent{alt}", json=TEXT)
    assert resp.status == 200
    body = await resp.read()
    if alt:
        assert resp.headers["Content-Type"] == "text/event-stream"
        events = reader_for(G).read_stream(body)
    else:
        assert resp.headers["Content-Type"] == "application/json"
        assert body.startswith(b"[{") and body.endswith(b"}\r\n]")
        elements = orjson.loads(body)
        assert isinstance(elements, list) and len(elements) > 2
        events = reader_for(G).read_stream(frame_sse(elements))
    want = reader_for(up).read_stream(up.samples.streams["text"])
    assert events.text == want.text and events.finish == "STOP"


_TWO_TOOLS = [{"functionDeclarations": [{"name": "f"}, {"name": "g"}, {"name": "h"}]}]


@pytest.mark.parametrize("extra", [
    {"tools": _TWO_TOOLS, "toolConfig": {"functionCallingConfig": {
        "mode": "ANY", "allowedFunctionNames": ["f", "g"]}}},
    {"generationConfig": {"responseMimeType": "text/x.enum",
                          "responseSchema": {"type": "STRING", "enum": ["a", "b"]}}},
], ids=["allowed-names", "enum-answer"])
def test_what_has_no_canonical_place_is_left_to_the_policy(extra: dict[str, Any]) -> None:
    body: dict[str, Any] = {**TEXT, **extra}
    _, same, lost = translate_request(body, G, G, policy="reject")
    assert lost == [] and {k: same[k] for k in extra} == extra  # to Gemini: as it came
    with pytest.raises(Unsupported) as refused:
        translate_request(body, G, OPENAI, policy="reject")
    assert refused.value.fields == ["options"]
    assert translate_request(body, G, OPENAI, policy="drop")[2] == ["options"]


def test_a_tool_config_without_a_choice_goes_back_to_gemini() -> None:
    body = {**TEXT, "toolConfig": {"retrievalConfig": {"latLng": {"latitude": 1.0,
                                                                   "longitude": 2.0}}}}
    assert translate_request(body, G, G)[1]["toolConfig"] == body["toolConfig"]
