"""The ``anthropic`` dialect: its samples round trip exactly, requests map both ways, streams
decode however the bytes are split, and what its encoder writes passes the strict reader (the
checks Anthropic's SDKs need), interleaved tool calls included."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from strict import anthropic as strict
from strict.observed import ObservedCall

from gateway.canonical import (
    AssistantMessage,
    ChatError,
    ChatRequest,
    ChatResponse,
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
)
from gateway.dialects import DIALECTS, get
from gateway.dialects.anthropic import AnthropicDialect
from gateway.framing import encoder_for
from gateway.pipeline import (
    StreamAssembler,
    StreamDecoding,
    StreamTranslator,
    translate_request,
    translate_response,
)

A = get("anthropic")
OPENAI = get("openai")
SAMPLES = A.samples
CLIENT = A.parse_request({"model": "claude-x", "max_tokens": 100, "stream": True,
                          "messages": [{"role": "user", "content": "hi"}]})


def test_registered_with_its_declarations() -> None:
    assert isinstance(A, AnthropicDialect)
    assert A.name == "anthropic"
    assert A.default_path == "/v1/messages"
    assert A.framing == "sse" and A.named_events and A.stream_path is None
    assert not A.stream_by_accept
    caps = A.capabilities
    assert caps.tools and caps.images and caps.reasoning
    assert caps.usage_whole and caps.usage_stream
    assert caps.session_state == "none" and not caps.citations and not caps.multi_agent
    assert caps.structured_output == {"json_schema"}  # JSON mode has no native form
    assert set(SAMPLES.responses) == set(SAMPLES.streams) == {"text", "tools", "reasoning"}
    assert set(SAMPLES.requests) == {"text", "tools", "reasoning", "structured"}


# --- samples: exact round trips ------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(SAMPLES.requests))
def test_sample_request_round_trips(case: str) -> None:
    body = SAMPLES.requests[case]
    req = A.parse_request(body)
    assert A.render_request(req, stream=False, model="other") == body


@pytest.mark.parametrize("case", sorted(SAMPLES.requests))
def test_sample_request_streamed_adds_only_the_flag(case: str) -> None:
    body = SAMPLES.requests[case]
    assert A.render_request(A.parse_request(body), stream=True, model=None) == {
        **body, "stream": True}


@pytest.mark.parametrize("case", sorted(SAMPLES.responses))
def test_sample_response_round_trips(case: str) -> None:
    body = SAMPLES.responses[case]
    assert A.render_response(A.parse_response(body), CLIENT) == body
    strict.read_whole(body)  # the samples themselves pass the strict reader


def test_sample_error_round_trips_without_request_id() -> None:
    err = A.parse_error(SAMPLES.error)
    assert err is not None
    assert (err.type, err.message) == ("not_found_error",
                                       "The requested resource could not be found.")
    err.status = SAMPLES.error_status
    body = dict(SAMPLES.error)
    del body["request_id"]  # the gateway's own request id travels in X-Request-ID
    assert A.render_error(err) == body
    assert strict.read_error(A.render_error(err)) == err.message


@pytest.mark.parametrize("case", sorted(SAMPLES.streams))
def test_sample_streams_pass_the_strict_reader(case: str) -> None:
    strict.read_stream(SAMPLES.streams[case])


def test_a_request_with_every_kind_of_block_round_trips() -> None:
    body = {
        "model": "claude-x", "max_tokens": 64, "stream": False, "temperature": 0.5,
        "top_p": 0.9, "top_k": 5, "stop_sequences": ["\n\nHuman:"],
        "metadata": {"user_id": "u-1"},
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "adaptive", "display": "omitted"},
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        "tools": [
            {"name": "get_weather", "input_schema": {"type": "object"},
             "cache_control": {"type": "ephemeral"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        ],
        "messages": [
            {"role": "user", "content": [
                {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                                "data": "Grass is green."},
                 "citations": {"enabled": True}},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
                {"type": "text", "text": "Look", "cache_control": {"type": "ephemeral"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "First"},
                {"type": "thinking", "thinking": "hmm", "signature": "sig-1"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"a": [1, 2]}},
                {"type": "text", "text": "then"},
                {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [
                    {"type": "text", "text": "sunny"},
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]},
                {"type": "tool_result", "tool_use_id": "t2", "is_error": True,
                 "content": "boom", "cache_control": {"type": "ephemeral"}},
                {"type": "tool_result", "tool_use_id": "t3", "is_error": False},
                {"type": "text", "text": "go on"},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t4", "content": "late"}]},
            {"role": "system", "content": "A system turn (SDK 2.12 types it)"},
            {"role": "assistant", "content": "prefill"},
        ],
    }
    req = A.parse_request(body)
    assert A.render_request(req, stream=False, model=None) == body


# --- requests: the canonical view ----------------------------------------------------------------


def test_request_to_canonical() -> None:
    req = A.parse_request(SAMPLES.requests["tools"])
    assert req.model == "claude-opus-4-6"
    assert req.sampling == {"max_tokens": 1024}
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "tool"]
    system, user, assistant, tool = req.messages
    assert system.content == "You are a helpful weather assistant."
    assert user.content == [
        ImagePart(url="https://upload.wikimedia.org/wikipedia/commons/a/a7/"
                      "Camponotus_flavomarginatus_ant.jpg"),
        TextPart("What's the weather like in San Francisco?")]
    assert assistant.text == "I'll check the current weather in San Francisco for you."
    assert assistant.tool_calls == [ToolCall(
        "toolu_01A09q90qw90lq917835lq9", "get_weather",
        '{"location":"San Francisco, CA","unit":"celsius"}')]
    assert (tool.tool_call_id, tool.content, tool.is_error) == (
        "toolu_01A09q90qw90lq917835lq9", "15 degrees", False)
    (tool_def,) = req.tools
    assert (tool_def.name, tool_def.kind) == ("get_weather", "function")
    assert tool_def.parameters["required"] == ["location"]
    assert req.tool_choice == ToolChoice("auto")


def test_request_thinking_and_signatures_to_canonical() -> None:
    req = A.parse_request(SAMPLES.requests["reasoning"])
    assert req.reasoning == ReasoningRequest(budget_tokens=16000)
    (r,) = req.messages[1].reasoning
    assert r.signature == "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds..."
    assert r.dialect == "anthropic" and r.text.startswith("I need to find the GCD")
    for raw, want in [({"type": "disabled"}, ReasoningRequest(enabled=False)),
                      ({"type": "adaptive"}, ReasoningRequest())]:
        body = {**SAMPLES.requests["text"], "thinking": raw}
        assert A.parse_request(body).reasoning == want


@pytest.mark.parametrize(("raw", "mode", "name", "parallel"), [
    ({"type": "auto"}, "auto", None, None),
    ({"type": "any"}, "required", None, None),
    ({"type": "none"}, "none", None, None),
    ({"type": "tool", "name": "f"}, "tool", "f", None),
    ({"type": "auto", "disable_parallel_tool_use": True}, "auto", None, False),
    ({"type": "any", "disable_parallel_tool_use": False}, "required", None, True),
])
def test_tool_choice_both_ways(raw: Any, mode: str, name: str | None,
                               parallel: bool | None) -> None:
    body = {**SAMPLES.requests["tools"], "tool_choice": raw}
    req = A.parse_request(body)
    assert req.tool_choice == ToolChoice(mode, name, parallel)  # type: ignore[arg-type]
    req.extras_dialect = None  # rendered from the canonical value, not kept as it came
    out = A.render_request(req, stream=False, model=None)
    assert out["tool_choice"] == raw


def test_openai_request_to_anthropic_upstream() -> None:
    body = OPENAI.samples.requests["tools"]
    _, out, lost = translate_request(body, OPENAI, A, model="claude-up")
    # the image's detail (OpenAI's resolution hint) has no place in Anthropic's image block
    assert lost == ["messages[].content[].image_url.detail"]
    seen = strict.read_request(out)
    assert out["model"] == "gpt-4o"
    assert out["max_tokens"] == 4096  # the API requires one: the default when none is set
    assert out["system"] == "You are a helpful assistant."
    assert [m.role for m in seen.messages] == ["system", "user", "assistant", "tool", "user"]
    assert seen.messages[1].images == [body["messages"][1]["content"][1]["image_url"]["url"]]
    assert seen.messages[2].tool_calls == [ObservedCall(
        "call_abc123", "get_current_weather", {"location": "Madison, WI", "unit": "celsius"})]
    assert seen.messages[3].tool_result_for == "call_abc123"
    # the result and the question after it are ONE user message, results first
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assert out["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_abc123",
         "content": '{"temperature": 22, "unit": "celsius", "description": "Sunny"}'},
        {"type": "text", "text": "And in Boston?"}]
    assert out["messages"][1]["content"] == [{
        "type": "tool_use", "id": "call_abc123", "name": "get_current_weather",
        "input": {"location": "Madison, WI", "unit": "celsius"}}]
    assert out["tools"][0]["input_schema"] == body["tools"][0]["function"]["parameters"]
    assert seen.tools == ["get_current_weather"] and seen.tool_choice == "auto"


def test_anthropic_request_to_openai_upstream() -> None:
    _, out, lost = translate_request(SAMPLES.requests["tools"], A, OPENAI)
    assert lost == []
    msgs = out["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[0]["content"] == "You are a helpful weather assistant."
    assert msgs[1]["content"][0] == {"type": "image_url", "image_url": {
        "url": "https://upload.wikimedia.org/wikipedia/commons/a/a7/"
               "Camponotus_flavomarginatus_ant.jpg"}}
    call = msgs[2]["tool_calls"][0]
    assert orjson.loads(call["function"]["arguments"]) == {"location": "San Francisco, CA",
                                                           "unit": "celsius"}
    assert msgs[3] == {"role": "tool", "tool_call_id": "toolu_01A09q90qw90lq917835lq9",
                       "content": "15 degrees"}
    assert out["tools"][0]["function"]["parameters"]["required"] == ["location"]
    assert out["tool_choice"] == "auto" and out["max_tokens"] == 1024


def test_server_tools_and_documents_reach_only_anthropic() -> None:
    body = {**SAMPLES.requests["text"],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            "messages": [{"role": "user", "content": [
                {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}},
                {"type": "text", "text": "Summarize"}]}]}
    req = A.parse_request(body)
    assert req.tools == [ToolDef("web_search", kind="web_search_20250305",
                                 raw=body["tools"][0], dialect="anthropic")]
    assert isinstance(req.messages[0].content, list)
    assert req.messages[0].content[0] == OtherPart("anthropic", "document",
                                                   body["messages"][0]["content"][0])
    with pytest.raises(Exception, match="hosted_tools, content_parts"):
        translate_request(body, A, OPENAI)
    _, out, lost = translate_request(body, A, OPENAI, policy="drop")
    assert lost == ["hosted_tools", "content_parts"]
    assert "tools" not in out and out["messages"][0]["content"] == [
        {"type": "text", "text": "Summarize"}]


def test_system_and_developer_messages_go_to_top_level_system() -> None:
    req = ChatRequest(messages=[
        Message("system", "One."), Message("user", "hi"), Message("developer", "Two."),
        Message("assistant", "hello"), Message("user", "bye")])
    out = A.render_request(req, stream=False, model="m")
    assert out["system"] == [{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}]
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assert out["model"] == "m"


def test_max_tokens_from_the_client_the_upstream_or_the_default() -> None:
    req = ChatRequest(messages=[Message("user", "hi")])
    assert A.render_request(req, stream=False, model=None)["max_tokens"] == 4096
    assert A.render_request(req, stream=False, model=None, max_tokens=777)["max_tokens"] == 777
    req.sampling["max_tokens"] = 12
    assert A.render_request(req, stream=False, model=None, max_tokens=777)["max_tokens"] == 12


@pytest.mark.parametrize(("reasoning", "cap", "want_thinking", "want_cap"), [
    (ReasoningRequest(effort="low"), None, {"type": "enabled", "budget_tokens": 2048}, 4096),
    (ReasoningRequest(effort="medium"), None, {"type": "enabled", "budget_tokens": 8192},
     8192 + 4096),  # no cap from the client: it grows to fit the budget
    (ReasoningRequest(effort="high"), 20000, {"type": "enabled", "budget_tokens": 16384}, 20000),
    (ReasoningRequest(effort="high"), 5000, {"type": "enabled", "budget_tokens": 4999}, 5000),
    (ReasoningRequest(effort="high"), 1000, None, 1000),  # no room for the API's minimum
    (ReasoningRequest(budget_tokens=3000), None, {"type": "enabled", "budget_tokens": 3000},
     4096),
    (ReasoningRequest(enabled=False), None, {"type": "disabled"}, 4096),
    (ReasoningRequest(effort="none"), None, {"type": "disabled"}, 4096),
])
def test_reasoning_effort_as_thinking(reasoning: ReasoningRequest, cap: int | None,
                                      want_thinking: Any, want_cap: int) -> None:
    req = ChatRequest(messages=[Message("user", "hi")], reasoning=reasoning)
    if cap is not None:
        req.sampling["max_tokens"] = cap
    out = A.render_request(req, stream=False, model=None)
    assert out.get("thinking") == want_thinking
    assert out["max_tokens"] == want_cap


def test_reasoning_goes_back_only_when_anthropic_signed_it() -> None:
    assistant = Message("assistant", "done", reasoning=[
        Reasoning("mine", signature="sig", dialect="anthropic"),
        Reasoning("unsigned", dialect="anthropic"),
        Reasoning("deepseek's", dialect=None),
        Reasoning(redacted="opaque", dialect="anthropic"),
        Reasoning(redacted="enc", dialect="openai-responses"),
    ], tool_calls=[ToolCall("c1", "f", "")])
    req = ChatRequest(messages=[Message("user", "q"), assistant,
                                Message("tool", "r", tool_call_id="c1")])
    out = A.render_request(req, stream=False, model=None)
    assert out["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "mine", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "done"},
        {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
    ]


@pytest.mark.parametrize(("arguments", "expected"), [
    ('{"a": 1}', {"a": 1}), ("", {}), ("  ", {}), ('{"a": ', {}), ("[1, 2]", {}),
    ("null", {}),
])
def test_tool_use_input_is_always_an_object(arguments: str, expected: Any) -> None:
    req = ChatRequest(messages=[Message("assistant", "", tool_calls=[
        ToolCall("c", "f", arguments)])])
    out = A.render_request(req, stream=False, model=None)
    assert out["messages"][0]["content"] == [
        {"type": "tool_use", "id": "c", "name": "f", "input": expected}]


def test_base64_images_and_data_urls_become_base64_sources() -> None:
    req = ChatRequest(messages=[Message("user", [
        ImagePart(url="data:image/png;base64,AAAA"),
        ImagePart(data="BBBB", media_type="image/jpeg"),
        TextPart(""),  # the API rejects empty text blocks
        TextPart("What is this?")])])
    out = A.render_request(req, stream=False, model=None)
    assert out["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "AAAA"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                     "data": "BBBB"}},
        {"type": "text", "text": "What is this?"}]
    seen = strict.read_request(out)
    assert seen.messages[0].images == ["data:image/png;base64,AAAA",
                                       "data:image/jpeg;base64,BBBB"]


def test_sampling_both_ways() -> None:
    body = {**SAMPLES.requests["text"], "temperature": 0.2, "top_p": 0.8, "top_k": 3,
            "stop_sequences": ["END"], "metadata": {"user_id": "abc"}}
    req = A.parse_request(body)
    assert req.sampling == {"max_tokens": 1024, "temperature": 0.2, "top_p": 0.8, "top_k": 3,
                            "stop": ["END"], "user": "abc"}
    _, out, _ = translate_request(body, A, OPENAI)
    assert (out["temperature"], out["top_p"], out["stop"], out["user"], out["max_tokens"]) == (
        0.2, 0.8, ["END"], "abc", 1024)
    back = A.render_request(OPENAI.parse_request(out), stream=False, model=None)
    assert (back["temperature"], back["top_p"], back["stop_sequences"], back["metadata"]) == (
        0.2, 0.8, ["END"], {"user_id": "abc"})


@pytest.mark.parametrize(("body", "where"), [
    ({"max_tokens": 5}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages[0].content[0].text"),
    ({"messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}]},
     "messages[0].content[0].input"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
     "messages[0].content[0].tool_use_id"),
    ({"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t"}, {"type": "text", "text": 5}]}]},
     "messages[0].content[1].text"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
    ({"messages": [{"role": "user", "content": "x"}], "system": 5}, "system"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "maybe"}},
     "tool_choice.type"),
    ({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled"}},
     "thinking.budget_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"input_schema": {}}]},
     "tools[0].name"),
    ({"messages": [{"role": "user", "content": "x"}], "stop_sequences": "END"},
     "stop_sequences"),
])
def test_bad_requests_name_the_field(body: Any, where: str) -> None:
    from gateway.errors import DialectError

    with pytest.raises(DialectError) as e:
        A.parse_request(body)
    assert e.value.where == where


# --- whole answers -------------------------------------------------------------------------------


def test_response_to_canonical() -> None:
    resp = A.parse_response(SAMPLES.responses["tools"])
    assert resp.text == "I'll check the current weather in San Francisco for you."
    assert resp.tool_calls == [ToolCall("toolu_01A09q90qw90lq917835lq9", "get_weather",
                                        '{"location":"San Francisco, CA","unit":"celsius"}')]
    assert resp.finish_reason == "tool_calls"
    assert resp.usage == Usage(input_tokens=472, output_tokens=89)
    thinking = A.parse_response(SAMPLES.responses["reasoning"])
    assert [(r.text, r.redacted is not None, r.dialect) for r in thinking.reasoning] == [
        ("Let me analyze this step by step...", False, "anthropic"), ("", True, "anthropic")]


def test_whole_answers_to_and_from_openai() -> None:
    out, lost = translate_response(SAMPLES.responses["tools"], A, OPENAI,
                                   OPENAI.parse_request(OPENAI.samples.requests["tools"]))
    assert lost == []
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == SAMPLES.responses["tools"]["content"][0]["text"]
    assert out["usage"] == {"prompt_tokens": 472, "completion_tokens": 89, "total_tokens": 561}
    back, lost = translate_response(OPENAI.samples.responses["tools"], OPENAI, A, CLIENT)
    assert lost == []
    seen = strict.read_whole(back)
    openai_call = OPENAI.samples.responses["tools"]["choices"][0]["message"]["tool_calls"][0]
    assert seen.tool_calls[0].name == openai_call["function"]["name"]
    assert seen.tool_calls[0].arguments == orjson.loads(openai_call["function"]["arguments"])
    assert seen.finish == "tool_use"


def test_reasoning_from_another_provider_has_no_signature_to_replay() -> None:
    resp = ChatResponse([AssistantMessage("4", reasoning=[
        Reasoning("2+2", dialect=None), Reasoning(redacted="enc", dialect="openai-responses"),
        Reasoning("", signature="x", dialect="openai-responses")])], finish_reason="stop")
    body = A.render_response(resp, CLIENT)
    assert body["content"] == [{"type": "thinking", "thinking": "2+2", "signature": ""},
                               {"type": "text", "text": "4"}]
    strict.read_whole(body)
    # sent back by the client, that block never reaches Anthropic
    req = A.parse_request({**SAMPLES.requests["text"], "messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": body["content"]},
        {"role": "user", "content": "and?"}]})
    req.extras_dialect = None
    out = A.render_request(req, stream=False, model=None)
    assert out["messages"][1]["content"] == [{"type": "text", "text": "4"}]


def test_multi_agent_answer_is_one_text_with_headers() -> None:
    resp = ChatResponse([AssistantMessage("a", agent="One"), AssistantMessage("b", agent="Two")])
    body = A.render_response(resp, CLIENT)
    assert body["content"] == [{"type": "text", "text": "**One:** a\n\n**Two:** b"}]
    assert body["stop_reason"] == "end_turn" and body["model"] == "claude-x"


def test_empty_answer_still_has_a_text_block_and_usage() -> None:
    body = A.render_response(ChatResponse([AssistantMessage("")]), CLIENT)
    assert body["content"] == [{"type": "text", "text": ""}]
    assert body["usage"] == {"input_tokens": 0, "output_tokens": 0}
    assert body["id"].startswith("msg_")
    strict.read_whole(body)


@pytest.mark.parametrize(("wire", "canonical", "back"), [
    ("end_turn", "stop", "end_turn"),
    ("stop_sequence", "stop", "end_turn"),
    ("max_tokens", "length", "max_tokens"),
    ("model_context_window_exceeded", "length", "max_tokens"),
    ("tool_use", "tool_calls", "tool_use"),
    ("refusal", "content_filter", "refusal"),
    ("pause_turn", "pause_turn", "pause_turn"),
])
def test_stop_reason_table(wire: str, canonical: str, back: str) -> None:
    body = {**SAMPLES.responses["text"], "stop_reason": wire}
    resp = A.parse_response(body)
    assert resp.finish_reason == canonical
    assert A.render_response(resp, CLIENT)["stop_reason"] == wire  # same dialect: as it came
    resp.extras_dialect = None
    assert A.render_response(resp, CLIENT)["stop_reason"] == back


@pytest.mark.parametrize(("canonical", "wire"), [
    ("stop", "end_turn"), ("length", "max_tokens"), ("tool_calls", "tool_use"),
    ("content_filter", "refusal"), ("error", "end_turn"), ("something_else", "end_turn"),
    (None, "end_turn"),
])
def test_finish_reason_to_stop_reason(canonical: str | None, wire: str) -> None:
    body = A.render_response(ChatResponse([AssistantMessage("x")], finish_reason=canonical),
                             CLIENT)
    assert body["stop_reason"] == wire


def test_usage_table_both_ways() -> None:
    body = {**SAMPLES.responses["text"], "usage": {
        "input_tokens": 10, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5,
        "output_tokens": 30, "output_tokens_details": {"thinking_tokens": 20}}}
    resp = A.parse_response(body)
    assert resp.usage == Usage(input_tokens=115, output_tokens=30, cached_input_tokens=100,
                               cache_write_tokens=5, reasoning_tokens=20)
    resp.extras_dialect = None
    assert A.render_response(resp, CLIENT)["usage"] == body["usage"]
    out, _ = translate_response(body, A, OPENAI, OPENAI.parse_request(
        OPENAI.samples.requests["text"]))
    assert out["usage"] == {"prompt_tokens": 115, "completion_tokens": 30, "total_tokens": 145,
                            "prompt_tokens_details": {"cached_tokens": 100},
                            "completion_tokens_details": {"reasoning_tokens": 20}}
    # OpenAI's cached tokens are part of its input; Anthropic's input_tokens excludes them
    u = A.render_response(ChatResponse([AssistantMessage("x")], usage=Usage(
        input_tokens=50, output_tokens=7, cached_input_tokens=40)), CLIENT)["usage"]
    assert u == {"input_tokens": 10, "output_tokens": 7, "cache_read_input_tokens": 40}


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "kind"), [
    (400, "invalid_request_error"), (401, "authentication_error"), (402, "billing_error"),
    (403, "permission_error"), (404, "not_found_error"), (413, "request_too_large"),
    (429, "rate_limit_error"), (500, "api_error"), (504, "timeout_error"),
    (529, "overloaded_error"), (503, "overloaded_error"), (502, "api_error"),
    (422, "invalid_request_error"),
])
def test_error_type_table(status: int, kind: str) -> None:
    body = A.render_error(ChatError(status, "nope"))
    assert body == {"type": "error", "error": {"type": kind, "message": "nope"}}


def test_error_keeps_an_anthropic_type_and_maps_others() -> None:
    assert A.render_error(ChatError(400, "m", type="overloaded_error"))["error"]["type"] == \
        "overloaded_error"
    assert A.render_error(ChatError(500, "m", type="server_error"))["error"]["type"] == \
        "api_error"
    assert A.parse_error({"type": "message"}) is None
    assert A.parse_error({"error": "plain"}) == ChatError(500, "plain")


# --- streams: decoding ---------------------------------------------------------------------------


def decode_all(data: bytes, *cuts: int) -> list[StreamEvent]:
    dec = StreamDecoding(A)
    events: list[StreamEvent] = []
    start = 0
    for cut in (*cuts, len(data)):
        events += dec.feed(data[start:cut])
        start = cut
    return events + dec.finish()


@pytest.mark.parametrize("case", sorted(SAMPLES.streams))
def test_sample_stream_decodes_the_same_split_at_every_byte(case: str) -> None:
    data = SAMPLES.streams[case]
    whole = decode_all(data)
    assert isinstance(whole[0], StreamStart) and isinstance(whole[-1], StreamFinish)
    for i in range(len(data) + 1):
        assert decode_all(data, i) == whole, f"split at byte {i}"


def test_sample_streams_assemble() -> None:
    expect = {
        "text": ("Hello!", [], "stop", Usage(input_tokens=25, output_tokens=15)),
        "tools": ("Okay, let's check the weather for San Francisco, CA:",
                  [ToolCall("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather",
                            '{"location": "San Francisco, CA", "unit": "fahrenheit"}')],
                  "tool_calls", Usage(input_tokens=472, output_tokens=89)),
        "reasoning": ("The greatest common divisor of 1071 and 462 is **21**.", [], "stop",
                      Usage(input_tokens=30, output_tokens=48)),
    }
    for case, (text, calls, reason, usage) in expect.items():
        asm = StreamAssembler(A)
        asm.feed(SAMPLES.streams[case])
        resp = asm.finish()
        assert asm.error is None
        assert (resp.text, resp.tool_calls, resp.finish_reason, resp.usage) == (
            text, calls, reason, usage), case
    asm = StreamAssembler(A)
    asm.feed(SAMPLES.streams["reasoning"])
    (r,) = asm.finish().reasoning
    assert r.signature and r.dialect == "anthropic"
    assert r.text.endswith("so GCD(1071, 462) = 21.")


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n"
                    for e in events)


START = {"type": "message_start", "message": {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
    "stop_reason": None, "stop_sequence": None,
    "usage": {"input_tokens": 5, "cache_read_input_tokens": 20, "output_tokens": 1}}}
TEXT0 = {"type": "content_block_start", "index": 0,
         "content_block": {"type": "text", "text": ""}}
STOP0 = {"type": "content_block_stop", "index": 0}
DELTA = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 9}}
END = {"type": "message_stop"}


def text_delta(index: int, text: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": text}}


def test_stream_usage_is_cumulative_and_keeps_cached_input() -> None:
    events = decode_all(sse(START, TEXT0, text_delta(0, "hi"), STOP0, DELTA, END))
    start, finish = events[0], events[-1]
    assert isinstance(start, StreamStart) and isinstance(finish, StreamFinish)
    assert start.usage == Usage(input_tokens=25, output_tokens=1, cached_input_tokens=20)
    assert finish.usage == Usage(input_tokens=25, output_tokens=9, cached_input_tokens=20)


def test_decoder_ignores_ping_and_unknown_events() -> None:
    data = sse(START, {"type": "ping"}, {"type": "brand_new_event", "x": 1}, TEXT0,
               {"type": "content_block_delta", "index": 0,
                "delta": {"type": "new_delta_kind", "x": 1}},
               text_delta(0, "ok"), STOP0, DELTA, END)
    events = decode_all(data)
    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta("ok")]
    assert isinstance(events[-1], StreamFinish)


@pytest.mark.parametrize(("events", "message"), [
    ([START, START], "a second message_start"),
    ([START, text_delta(0, "x")], "not open"),
    ([START, TEXT0, STOP0, text_delta(0, "x")], "not open"),
    ([START, {**TEXT0, "index": 1}], "started where block 0 was due"),
    ([START, TEXT0, {"type": "content_block_delta", "index": 0,
                     "delta": {"type": "input_json_delta", "partial_json": "{"}}],
     "input_json_delta for a text block"),
    ([START, {"type": "content_block_start", "index": 0, "content_block": {
        "type": "tool_use", "id": "t", "name": "f", "input": {}}}, text_delta(0, "x")],
     "text_delta for a tool_use block"),
    ([START, TEXT0, {"type": "content_block_stop", "index": 3}], "not open"),
])
def test_decoder_is_strict_where_content_would_be_lost(events: list[dict[str, Any]],
                                                       message: str) -> None:
    dec = StreamDecoding(A)
    out = dec.feed(sse(*events))
    assert isinstance(out[-1], StreamError) and message in out[-1].message
    assert dec.broken


def test_decoder_error_event_ends_the_stream() -> None:
    err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    dec = StreamDecoding(A)
    out = dec.feed(sse(START, TEXT0, text_delta(0, "par"), err, text_delta(0, "tial")))
    assert out[-1] == StreamError("Overloaded", "overloaded_error", 529)
    assert not dec.broken and dec.finish() == []


def test_decoder_end_without_message_stop() -> None:
    tolerated = decode_all(sse(START, TEXT0, text_delta(0, "x"), STOP0, DELTA))
    assert isinstance(tolerated[-1], StreamFinish) and tolerated[-1].reason == "stop"
    dec = StreamDecoding(A)
    dec.feed(sse(START, TEXT0, text_delta(0, "x")))
    (cut,) = dec.finish()
    assert isinstance(cut, StreamError) and "before message_stop" in cut.message
    assert dec.broken


def test_decoder_takes_an_input_given_whole_and_closes_open_calls_at_the_end() -> None:
    data = sse(START, {"type": "content_block_start", "index": 0, "content_block": {
        "type": "tool_use", "id": "t", "name": "f", "input": {"q": 1}}},
        {**DELTA, "delta": {"stop_reason": "tool_use"}}, END)
    events = decode_all(data)
    assert events[1:] == [ToolCallStart(0, "t", "f"), ToolCallDelta(0, '{"q":1}'),
                          ToolCallEnd(0), StreamFinish("tool_calls", Usage(
                              input_tokens=25, output_tokens=9, cached_input_tokens=20))]


def test_data_only_events_are_read_by_their_type() -> None:
    """Tolerated from upstreams (the Python SDK itself would drop them)."""
    data = b"".join(b"data: " + orjson.dumps(e) + b"\n\n"
                    for e in (START, TEXT0, text_delta(0, "plain"), STOP0, DELTA, END))
    asm = StreamAssembler(A)
    asm.feed(data)
    assert asm.finish().text == "plain" and asm.error is None


# --- streams: encoding ---------------------------------------------------------------------------


def encode(events: list[StreamEvent], req: ChatRequest = CLIENT) -> bytes:
    enc, frame = A.encoder(req), encoder_for(A.framing)
    return b"".join(frame(p) for e in events for p in enc.encode(e))


def names_of(data: bytes) -> list[str]:
    return [line[7:].decode() for line in data.split(b"\n") if line.startswith(b"event: ")]


def test_encoded_text_stream_passes_the_strict_reader() -> None:
    data = encode([StreamStart(id="up-1", model="up-model",
                               usage=Usage(input_tokens=12, output_tokens=0)),
                   TextDelta("Hel"), ContextUpdate(context={"x": 1}), TextDelta("lo"),
                   StreamFinish("stop", Usage(input_tokens=12, output_tokens=3))])
    seen = strict.read_stream(data)
    assert (seen.text, seen.finish, seen.usage, seen.model) == ("Hello", "end_turn", (12, 3),
                                                               "claude-x")
    assert names_of(data) == ["message_start", "content_block_start", "content_block_delta",
                              "content_block_delta", "content_block_stop", "message_delta",
                              "message_stop"]
    assert b'"id":"up-1"' in data


def test_encoded_frames_are_the_compact_json_of_their_documented_fields() -> None:
    """Each frame the encoder puts together from bytes (a text block's start, its deltas, a
    block's stop, message_delta, message_stop) is the compact JSON of its event's fields in
    the documented order, whatever the block's index, stop reason and usage."""
    enc = A.encoder(CLIENT)
    out = []
    for event in [StreamStart(id="m1"), ReasoningDelta("think", dialect="anthropic"),
                  TextDelta('a "q"\n'), ToolCallStart(0, "c1", "f"), ToolCallEnd(0),
                  TextDelta("b"), StreamFinish("length", Usage(input_tokens=4, output_tokens=2))]:
        out += enc.encode(event)
    run = A.encoder(CLIENT)
    out += run.encode(StreamStart())
    out += run.encode(TextDelta("x"))
    out += run.plain_texts([b"y", b"z\\n"]) or []
    out += run.encode(StreamFinish(None))
    frames = [(p.event, orjson.loads(p.data), p.data) for p in out]
    assert all(data == orjson.dumps(value) for _, value, data in frames)
    seen = [(name, value) for name, value, _ in frames if name != "message_start"]
    text_start = {"type": "text", "text": ""}
    assert [(n, v.get("index"), v.get("content_block")) for n, v in seen
            if n in ("content_block_start", "content_block_stop")] == [
        ("content_block_start", 0, {"type": "thinking", "thinking": "", "signature": ""}),
        ("content_block_stop", 0, None), ("content_block_start", 1, text_start),
        ("content_block_stop", 1, None),
        ("content_block_start", 2, {"type": "tool_use", "id": "c1", "name": "f", "input": {}}),
        ("content_block_stop", 2, None), ("content_block_start", 3, text_start),
        ("content_block_stop", 3, None), ("content_block_start", 0, text_start),
        ("content_block_stop", 0, None)]
    texts = [(v["index"], v["delta"]) for n, v in seen if n == "content_block_delta"
             and v["delta"]["type"] == "text_delta"]
    assert texts == [(1, {"type": "text_delta", "text": 'a "q"\n'}),
                     (3, {"type": "text_delta", "text": "b"}),
                     (0, {"type": "text_delta", "text": "x"}),
                     (0, {"type": "text_delta", "text": "y"}),
                     (0, {"type": "text_delta", "text": "z\n"})]
    ends = [v for n, v in seen if n in ("message_delta", "message_stop")]
    assert ends == [
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
         "usage": {"input_tokens": 4, "output_tokens": 2}},
        {"type": "message_stop"},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 0}},
        {"type": "message_stop"}]


def test_encoded_reasoning_then_text_then_tools() -> None:
    data = encode([StreamStart(), ReasoningDelta("think", dialect="anthropic"),
                   ReasoningDelta(signature="sig", dialect="anthropic"),
                   ReasoningDelta("again", dialect="anthropic"),
                   ReasoningDelta(redacted="opaque", dialect="anthropic"),
                   TextDelta("Answer"), ToolCallStart(0, "c0", "f"),
                   ToolCallDelta(0, '{"a"'), ToolCallDelta(0, ": 1}"), ToolCallEnd(0),
                   ToolCallStart(1, "c1", "g"), ToolCallEnd(1),
                   StreamFinish(None, None)])
    seen = strict.read_stream(data)
    assert seen.reasoning == "thinkagain" and seen.text == "Answer"
    assert seen.tool_calls == [ObservedCall("c0", "f", {"a": 1}), ObservedCall("c1", "g", {})]
    assert seen.finish == "tool_use"
    blocks = [orjson.loads(line[6:])["content_block"]["type"] for line in data.split(b"\n")
              if line.startswith(b"data: ") and b'"content_block_start"' in line]
    assert blocks == ["thinking", "thinking", "redacted_thinking", "text", "tool_use",
                      "tool_use"]
    assert b'"signature_delta","signature":"sig"' in data


def test_foreign_signatures_and_redacted_data_are_not_shown() -> None:
    data = encode([StreamStart(), ReasoningDelta("r", signature="theirs", dialect="other"),
                   ReasoningDelta(redacted="ENC-DATA", dialect="other"), TextDelta("t"),
                   StreamFinish()])
    assert b"theirs" not in data and b"ENC-DATA" not in data
    assert strict.read_stream(data).reasoning == "r"


def test_agents_are_headed_in_one_text() -> None:
    data = encode([StreamStart(), TextDelta("a", agent="One"), TextDelta("b", agent="Two"),
                   StreamFinish()])
    assert strict.read_stream(data).text == "**One:** a\n\n**Two:** b"


def test_mid_stream_error_is_the_last_event() -> None:
    enc = A.encoder(CLIENT)
    frame = encoder_for(A.framing)
    out = [frame(p) for e in [StreamStart(), TextDelta("par"),
                              StreamError("upstream broke", status=502)] for p in enc.encode(e)]
    assert enc.encode(TextDelta("late")) == [] and enc.encode(StreamFinish()) == []
    data = b"".join(out)
    seen = strict.read_stream(data)
    assert seen.error == "upstream broke" and seen.text == "par"
    assert data.endswith(b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
                         b'"message":"upstream broke"}}\n\n')


def test_an_upstream_error_type_is_kept() -> None:
    data = encode([StreamStart(), StreamError("Overloaded", code="overloaded_error",
                                              status=529)])
    assert b'"type":"overloaded_error"' in data


def test_empty_answer_and_events_before_any_start() -> None:
    seen = strict.read_stream(encode([TextDelta("x"), StreamFinish()]))
    assert seen.text == "x"
    seen = strict.read_stream(encode([StreamStart(), StreamFinish("length")]))
    assert (seen.text, seen.finish, seen.usage) == ("", "max_tokens", (0, 0))


def test_interleaved_calls_are_held_only_until_the_open_call_completes() -> None:
    """OpenAI may alternate the fragments of parallel calls; Anthropic needs one block at a
    time. The second call waits only while the first call's JSON is still open."""
    enc = A.encoder(CLIENT)
    frame = encoder_for(A.framing)
    chunks: list[bytes] = []
    script: list[tuple[StreamEvent, list[str]]] = [
        (StreamStart(), ["message_start"]),
        (ToolCallStart(0, "c0", "f"), ["content_block_start"]),
        (ToolCallDelta(0, '{"a": "x'), ["content_block_delta"]),
        (ToolCallStart(1, "c1", "g"), []),  # held: call 0's JSON is not closed
        (ToolCallDelta(1, '{"b":'), []),
        (ToolCallDelta(0, "}"), ["content_block_delta"]),  # inside a string: closes nothing
        (ToolCallDelta(0, '"'), ["content_block_delta"]),
        (ToolCallDelta(0, ', "n": [1, {"d": 2}]'), ["content_block_delta"]),
        (ToolCallDelta(0, "}"), ["content_block_delta", "content_block_stop",
                                 "content_block_start", "content_block_delta"]),
        (ToolCallDelta(1, " 2}"), ["content_block_delta"]),  # live again
        (ToolCallEnd(0), []),
        (TextDelta("after"), ["content_block_stop", "content_block_start",
                              "content_block_delta"]),
        (ToolCallEnd(1), []),
        (StreamFinish("tool_calls"), ["content_block_stop", "message_delta", "message_stop"]),
    ]
    for event, expected in script:
        payloads = enc.encode(event)
        chunk = b"".join(frame(p) for p in payloads)
        chunks.append(chunk)
        assert names_of(chunk) == expected, event
    seen = strict.read_stream(b"".join(chunks))
    assert seen.tool_calls == [ObservedCall("c0", "f", {"a": "x}", "n": [1, {"d": 2}]}),
                               ObservedCall("c1", "g", {"b": 2})]
    assert seen.text == "after"


def test_text_during_an_unfinished_call_waits_for_it() -> None:
    data = encode([StreamStart(), ToolCallStart(0, "c0", "f"), ToolCallDelta(0, '{"s": "\\'),
                   TextDelta("later"), ToolCallDelta(0, '""}'), ToolCallEnd(0),
                   StreamFinish()])
    seen = strict.read_stream(data)
    assert seen.tool_calls == [ObservedCall("c0", "f", {"s": '"'})] and seen.text == "later"


def test_a_call_that_never_closes_its_json_holds_the_next_until_the_finish() -> None:
    data = encode([StreamStart(), ToolCallStart(0, "c0", "f"), ToolCallStart(1, "c1", "g"),
                   ToolCallDelta(1, '{"x": 1}'), ToolCallDelta(0, "{}"),
                   ToolCallStart(2, "c2", "h"), ToolCallDelta(2, "{"),
                   StreamFinish("tool_calls")])
    blocks = data.split(b"event: content_block_start")
    assert len(blocks) == 4
    assert b"c0" in blocks[1] and b"c1" in blocks[2] and b"c2" in blocks[3]
    with pytest.raises(AssertionError, match="JSON"):  # c2's input is incomplete: said so
        strict.read_stream(data)


# --- translation through the pipeline ------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(OPENAI.samples.streams))
def test_openai_streams_to_an_anthropic_client(case: str) -> None:
    data = OPENAI.samples.streams[case]
    want = StreamAssembler(OPENAI)
    want.feed(data)
    expected = want.finish()
    for cut in (None, len(data) // 3, 1):
        t = StreamTranslator(OPENAI, A, CLIENT)
        out = t.feed(data) if cut is None else t.feed(data[:cut]) + t.feed(data[cut:])
        out += t.finish()
        seen = strict.read_stream(out)
        assert seen.text == expected.text
        assert [(c.id, c.name, c.arguments) for c in seen.tool_calls] == [
            (c.id, c.name, orjson.loads(c.arguments)) for c in expected.tool_calls]
        assert seen.reasoning == "".join(r.text for r in expected.reasoning)
        u = expected.usage
        assert u is not None and seen.usage == (u.input_tokens, u.output_tokens)


def test_interleaving_openai_upstream_to_an_anthropic_client() -> None:
    def chunk(calls: list[dict[str, Any]] | None = None, reason: str | None = None) -> bytes:
        delta: dict[str, Any] = {"tool_calls": calls} if calls else {}
        return b"data: " + orjson.dumps({"id": "c", "object": "chat.completion.chunk",
                                         "created": 1, "model": "gpt", "choices": [
                                             {"index": 0, "delta": delta,
                                              "finish_reason": reason}]}) + b"\n\n"

    def call(i: int, args: str, name: str | None = None) -> dict[str, Any]:
        fn: dict[str, Any] = {"arguments": args}
        c: dict[str, Any] = {"index": i, "function": fn}
        if name:
            fn["name"] = name
            c["id"] = f"call_{i}"
        return c

    data = b"".join([
        chunk([call(0, "", "a"), call(1, "", "b")]),
        chunk([call(0, '{"x": ')]), chunk([call(1, '{"y": ')]),
        chunk([call(0, "1}")]), chunk([call(1, "2}")]),
        chunk(reason="tool_calls"), b"data: [DONE]\n\n"])
    t = StreamTranslator(OPENAI, A, CLIENT)
    seen = strict.read_stream(t.feed(data) + t.finish())
    assert seen.tool_calls == [ObservedCall("call_0", "a", {"x": 1}),
                               ObservedCall("call_1", "b", {"y": 2})]
    assert seen.finish == "tool_use"


@pytest.mark.parametrize("case", sorted(SAMPLES.streams))
def test_anthropic_streams_to_an_openai_client(case: str) -> None:
    openai_client = OPENAI.parse_request({**OPENAI.samples.requests["text"], "stream": True})
    t = StreamTranslator(A, OPENAI, openai_client)
    out = t.feed(SAMPLES.streams[case]) + t.finish()
    assert t.error is None and out.endswith(b"data: [DONE]\n\n")
    back = StreamAssembler(OPENAI)
    back.feed(out)
    resp = back.finish()
    want = StreamAssembler(A)
    want.feed(SAMPLES.streams[case])
    expected = want.finish()
    assert (resp.text, resp.tool_calls, resp.finish_reason) == (
        expected.text, expected.tool_calls, expected.finish_reason)


@pytest.mark.parametrize("case", sorted(SAMPLES.streams))
def test_identity_stream_keeps_the_upstream_events(case: str) -> None:
    data = SAMPLES.streams[case]
    t = StreamTranslator(A, A, CLIENT)
    out = b"".join(t.feed(data[i:i + 7]) for i in range(0, len(data), 7)) + t.finish()
    assert t.error is None
    assert names_of(out) == names_of(data)
    strict.read_stream(out)
    assert [orjson.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data:")] \
        == [orjson.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data:")]


def test_identity_stream_error_after_content_is_an_error_event() -> None:
    err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    t = StreamTranslator(A, A, CLIENT)
    out = t.feed(sse(START, TEXT0, text_delta(0, "x"), err)) + t.finish()
    seen = strict.read_stream(out)
    assert seen.error == "Overloaded" and seen.text == "x"


def test_identity_stream_cut_short_ends_with_an_error_event() -> None:
    t = StreamTranslator(A, A, CLIENT)
    out = t.feed(sse(START, TEXT0, text_delta(0, "x"))) + t.finish()
    seen = strict.read_stream(out)
    assert seen.error is not None and "before message_stop" in seen.error


def test_system_blocks_are_one_prompt_joined_by_a_blank_line_for_every_upstream() -> None:
    # Claude Code's system: an identity line, then its instructions, each a text block. The API
    # documents no join; a blank line keeps them two paragraphs wherever they go.
    wire = [{"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    body = {"model": "m", "max_tokens": 10, "system": wire,
            "messages": [{"role": "user", "content": "hi"}]}
    req = get("anthropic").parse_request(body)
    assert req.messages[0].text == "You are Claude Code.\n\nBe brief."
    for d in DIALECTS.values():
        if d.name == "anthropic":
            continue
        sent = orjson.dumps(d.render_request(req, stream=False, model=None)).decode()
        assert "You are Claude Code.\\n\\nBe brief." in sent, d.name
    # An Anthropic upstream gets the blocks as they came (cache_control on the second)...
    assert get("anthropic").render_request(req, stream=False, model=None)["system"] == wire
    # ...unless the text changed on the way: then one block of the canonical text.
    req.messages[0].content = [TextPart("Other.")]
    assert get("anthropic").render_request(req, stream=False, model=None)["system"] == [
        {"type": "text", "text": "Other."}]


# --- structured output ---------------------------------------------------------------------------


def test_output_config_format_is_the_canonical_output_and_the_rest_stays() -> None:
    body = {**SAMPLES.requests["structured"]}
    body["output_config"] = {**body["output_config"], "effort": "low", "future": 1}
    req = A.parse_request(body)
    assert req.output is not None and req.output.kind == "json_schema"
    assert req.output.schema == body["output_config"]["format"]["schema"]
    assert req.reasoning == ReasoningRequest(effort="low")
    assert req.extras["output_config"] == {"future": 1}
    assert A.render_request(req, stream=False, model=None) == body  # nothing said twice
    elsewhere = OPENAI.render_request(req, stream=False, model=None)
    assert "output_config" not in elsewhere and "future" not in orjson.dumps(elsewhere).decode()
    assert elsewhere["response_format"]["json_schema"]["schema"] == req.output.schema
    assert elsewhere["reasoning_effort"] == "low"


# --- effort (output_config.effort) ---------------------------------------------------------------


@pytest.mark.parametrize("effort", ["low", "medium", "high", "xhigh", "max"])
@pytest.mark.parametrize("thinking", [None, {"type": "adaptive"},
                                      {"type": "enabled", "budget_tokens": 2000}])
def test_effort_is_the_canonical_effort_and_round_trips(effort: str, thinking: Any) -> None:
    body: dict[str, Any] = {**SAMPLES.requests["text"], "output_config": {"effort": effort}}
    if thinking is not None:
        body["thinking"] = thinking
    req = A.parse_request(body)
    assert req.reasoning is not None and req.reasoning.effort == effort
    assert req.reasoning.budget_tokens == (thinking or {}).get("budget_tokens")
    assert "output_config" not in req.extras
    # the same dialect: as it came; an effort alone invents no thinking
    assert A.render_request(req, stream=False, model=None) == body


def test_effort_beside_a_format_round_trips() -> None:
    body = {**SAMPLES.requests["structured"]}
    body["output_config"] = {**body["output_config"], "effort": "high"}
    req = A.parse_request(body)
    assert req.reasoning == ReasoningRequest(effort="high") and req.output is not None
    assert A.render_request(req, stream=False, model=None) == body


def test_an_effort_that_is_not_a_string_is_a_400_naming_it() -> None:
    body = {**SAMPLES.requests["text"], "output_config": {"effort": 3}}
    with pytest.raises(Exception, match=r"output_config\.effort"):
        A.parse_request(body)


@pytest.mark.parametrize(("effort", "sent"), [
    ("none", "low"), ("minimal", "low"), ("low", "low"), ("medium", "medium"),
    ("high", "high"), ("xhigh", "xhigh"), ("max", "max"),
    ("ultra", "ultra"),  # unknown: sent as it came, for the API to judge, never a default
])
def test_an_effort_from_elsewhere_is_output_config_effort_and_keeps_the_budget(
        effort: str, sent: str) -> None:
    req = ChatRequest(messages=[Message("user", "hi")], reasoning=ReasoningRequest(effort=effort))
    out = A.render_request(req, stream=False, model=None)
    assert out["output_config"] == {"effort": sent}
    # the thinking budget from the effort, as before
    assert out["thinking"]["type"] == ("disabled" if effort == "none" else "enabled")


def test_a_budget_without_an_effort_sends_no_effort() -> None:
    req = ChatRequest(messages=[Message("user", "hi")],
                      reasoning=ReasoningRequest(budget_tokens=3000))
    out = A.render_request(req, stream=False, model=None)
    assert "output_config" not in out
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 3000}


@pytest.mark.parametrize("fmt", [{"type": "json_object"}, {"type": "json_schema"},
                                 {"type": "json_schema", "schema": []}])
def test_a_format_the_api_does_not_take_is_a_400_naming_it(fmt: Any) -> None:
    body = {**SAMPLES.requests["text"], "output_config": {"format": fmt}}
    with pytest.raises(Exception, match=r"output_config\.format"):
        A.parse_request(body)


def test_a_tool_input_orjson_cannot_write_is_an_error_of_the_answer() -> None:
    """An integer past 64 bits (valid JSON, which orjson refuses to write) in a tool call's
    input: a named error of the answer, not an exception of the gateway (found by test_fuzz)."""
    from gateway.errors import DialectError

    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "stop_reason": "tool_use", "stop_sequence": None,
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "f",
                         "input": {"n": -(1 << 63) - 1}}],
            "usage": {"input_tokens": 1, "output_tokens": 1}}
    with pytest.raises(DialectError) as e:
        A.parse_response(body)
    assert e.value.where == "content[0].input"
