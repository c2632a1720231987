"""The Vercel AI SDK itself (the ``ai`` package pinned in tests/node) through the gateway, on
127.0.0.1: its ``AbstractChat`` with its ``DefaultChatTransport`` (what ``useChat`` runs) in front
of routes whose upstreams are a legacy RAG backend, a Chat UI backend, a Chat Completions model
with tools and an Anthropic model that reasons; and the reverse, a backend written with the SDK's
own server side (``createUIMessageStream``, as a Next.js route) behind the Chat UI and Chat
Completions client dialects. What is asserted is what the library produced: its UI messages, their
parts, tool states, sources and errors.

The upstreams are picked from the registry by what they declare, not by name. Each fake model
answers through its dialect's own encoder: the RAG backend with two sources, a follow-up question
and a session state that counts the turns it was sent; the tool model with a call of
``getWeather`` unless the last message is that call's result, which it quotes; the reasoning model
with signed reasoning before its text.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web
from node_clients import NODE_DIR, ensure_node_modules, run_node

from gateway.app import create_app
from gateway.canonical import (
    ChatError,
    ChatRequest,
    Citation,
    ReasoningDelta,
    StreamEvent,
    StreamFinish,
    StreamStart,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    context_with_citations,
)
from gateway.config import parse_config
from gateway.dialects import DIALECTS, Dialect, get
from gateway.framing import encoder_for

MINE = get("ai-sdk-ui")


def _pick(what: str, test: Callable[[Dialect], bool]) -> Dialect:
    found = [d for d in DIALECTS.values() if d is not MINE and test(d)]
    assert found, f"no registered dialect is {what}"
    return found[0]


RAG = _pick("a legacy RAG protocol with a stream path and follow-ups",
            lambda d: d.framing == "jsonlines" and d.stream_path is not None
            and d.capabilities.followups and d.capabilities.session_state == "json")
CHATUI = _pick("multi-agent", lambda d: d.capabilities.multi_agent)
TOOLS = _pick("Chat Completions (tools, plain SSE)",
              lambda d: d.capabilities.tools and d.framing == "sse" and not d.named_events)
REASONS = _pick("Anthropic (reasoning it alone takes back, a version header)",
                lambda d: d.capabilities.reasoning and d.capabilities.reasoning_replay == "own"
                and d.models_header is not None)

SOURCES = [Citation("benefits.pdf#page=3", "benefits.pdf#page=3", None, "Dental is covered."),
           Citation("https://example.com/plan", "https://example.com/plan",
                    "https://example.com/plan", "The plan page.")]
FOLLOWUP = "What about vision?"
WEATHER_TOOL = {"getWeather": {"description": "the weather in a city", "inputSchema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
THINKING = "Compare 9.11 and 9.9: the tenths decide."


# --- fake models, answering through their dialect's encoder -------------------------------------


def _last_user(req: ChatRequest) -> str:
    return next((m.text for m in reversed(req.messages) if m.role == "user"), "")


def rag_answer(d: Dialect, req: ChatRequest) -> list[StreamEvent]:
    state = req.session_state if isinstance(req.session_state, dict) else {}
    turn = int(state.get("turn", 0)) + 1
    context = context_with_citations(SOURCES, {"followup_questions": [FOLLOWUP]})
    return [StreamStart(context=context, session_state={"turn": turn}),
            TextDelta(f"Answer {turn}: "), TextDelta(f"you asked “{_last_user(req)}”."),
            StreamFinish("stop")]


def tool_answer(d: Dialect, req: ChatRequest) -> list[StreamEvent]:
    last = req.messages[-1]
    if last.role == "tool":
        return [StreamStart(model="tool-model"), TextDelta(f"It is {last.text} in Paris."),
                StreamFinish("stop", Usage(30, 8))]
    if req.tools and "weather" in _last_user(req).lower():
        return [StreamStart(model="tool-model"), TextDelta("Let me check."),
                ToolCallStart(0, "call_w1", "getWeather"), ToolCallDelta(0, '{"city":'),
                ToolCallDelta(0, '"Paris"}'), ToolCallEnd(0), StreamFinish("tool_calls",
                                                                        Usage(20, 9))]
    return [StreamStart(model="tool-model"), TextDelta(f"No tools: {_last_user(req)}"),
            StreamFinish("stop")]


def reasoning_answer(d: Dialect, req: ChatRequest) -> list[StreamEvent]:
    replayed = [r for m in req.messages for r in m.reasoning]
    return [StreamStart(model="thinking-model"),
            ReasoningDelta(THINKING), ReasoningDelta(signature="sig-123", dialect=d.name),
            TextDelta(f"9.9 is larger (I was sent {len(replayed)} thoughts back)."),
            StreamFinish("stop", Usage(15, 40))]


Answer = Callable[[Dialect, ChatRequest], list[StreamEvent]]


@dataclass
class FakeModel:
    dialect: Dialect
    answer: Answer
    seen: list[ChatRequest] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        req = self.dialect.parse_request(orjson.loads(await request.read()))
        self.seen.append(req)
        out = web.StreamResponse(headers={"Content-Type": self.dialect.stream_content_type})
        await out.prepare(request)
        encoder, frame = self.dialect.encoder(req), encoder_for(self.dialect.framing)
        for event in self.answer(self.dialect, req):
            await out.write(b"".join(frame(p) for p in encoder.encode(event)))
        await out.write_eof()
        return out


@dataclass
class Setup:
    base: str
    models: dict[str, FakeModel]


@pytest.fixture
async def setup(aiohttp_client: Any) -> AsyncIterator[Setup]:
    """The gateway with one ``ai-sdk-ui`` route per fake model, and ``/rag-drop``: the RAG
    backend under the ``drop`` policy (a conversation that ran tools before goes on there)."""
    models = {"rag": FakeModel(RAG, rag_answer), "chatui": FakeModel(CHATUI, rag_answer),
              "tools": FakeModel(TOOLS, tool_answer), "reasons": FakeModel(REASONS,
                                                                           reasoning_answer)}
    runners = []
    for model in models.values():
        app = web.Application()
        path = "/chat"
        app.router.add_post(path, model.handle)
        if model.dialect.stream_path:
            app.router.add_post(path + model.dialect.stream_path, model.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        model.url = f"http://127.0.0.1:{port}{path}"
        runners.append(runner)
    cfg = {
        "upstreams": {name: {"dialect": m.dialect.name, "url": m.url, "model": "m",
                             "timeout": 20, "connect_timeout": 10, "health_url": None}
                      for name, m in models.items()},
        "routes": [{"path": f"/{name}", "dialect": MINE.name, "upstream": name}
                   for name in models] + [
            {"path": "/rag-drop", "dialect": MINE.name, "upstream": "rag",
             "on_unsupported": "drop"}],
    }
    gw = await aiohttp_client(create_app(parse_config(cfg, env={})))
    try:
        yield Setup(str(gw.make_url("")).rstrip("/"), models)
    finally:
        for runner in runners:
            await runner.cleanup()


async def chat(setup: Setup, plan: dict[str, Any]) -> Any:
    return await run_node("ui_chat.mjs", env={"GATEWAY_URL": setup.base,
                                             "PLAN": json.dumps(plan)})


def parts_of(message: dict[str, Any], *kinds: str) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"] in kinds]


def text_of(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in parts_of(message, "text"))


# --- the AI SDK as the client --------------------------------------------------------------------


async def test_a_rag_conversation_shows_sources_and_follow_ups_and_keeps_its_session_state(
        setup: Setup) -> None:
    got = await chat(setup, {"route": "/rag", "turns": ["What is covered?", "And dental?"]})
    assert [t["status"] for t in got["turns"]] == ["ready", "ready"]
    user1, answer1, user2, answer2 = got["messages"]
    assert [user1["role"], answer1["role"], user2["role"], answer2["role"]] == \
        ["user", "assistant", "user", "assistant"]
    assert text_of(answer1) == "Answer 1: you asked “What is covered?”."
    assert text_of(answer2) == "Answer 2: you asked “And dental?”."
    assert parts_of(answer1, "source-url", "source-document") == [
        {"type": "source-document", "sourceId": "benefits.pdf#page=3",
         "mediaType": "text/plain", "title": "benefits.pdf#page=3",
         "providerMetadata": {"chat-gateway": {"snippet": "Dental is covered."}}},
        {"type": "source-url", "sourceId": "https://example.com/plan",
         "url": "https://example.com/plan", "title": "https://example.com/plan",
         "providerMetadata": {"chat-gateway": {"snippet": "The plan page."}}}]
    assert parts_of(answer1, "data-followups") == [
        {"type": "data-followups", "id": "followups", "data": [FOLLOWUP]}]
    assert parts_of(answer2, "data-session-state") == [
        {"type": "data-session-state", "id": "session-state", "data": {"turn": 2}}]
    assert [p["state"] for p in parts_of(answer2, "text")] == ["done"]
    # the state went back in the assistant message the client kept, and reached the backend
    sent = got["requests"][1]["messages"][1]
    assert parts_of(sent, "data-session-state")[0]["data"] == {"turn": 1}
    rag = setup.models["rag"].seen
    assert [r.session_state for r in rag] == [None, {"turn": 1}]
    assert [(m.role, m.text) for m in rag[1].messages] == [
        ("user", "What is covered?"), ("assistant", text_of(answer1)),
        ("user", "And dental?")]


async def test_a_chat_ui_backend_answers_with_its_sources_and_conversation(setup: Setup) -> None:
    got = await chat(setup, {"route": "/chatui", "turns": ["Hello?"]})
    answer = got["messages"][1]
    assert text_of(answer) == "Answer 1: you asked “Hello?”."
    assert [p["title"] for p in parts_of(answer, "source-url", "source-document")] == \
        [c.title for c in SOURCES]
    # a Chat UI conversation id is a string: the backend's {"turn": 1} cannot be one
    assert parts_of(answer, "data-session-state") == []


async def test_a_client_side_tool_round_trip_to_a_chat_completions_model(setup: Setup) -> None:
    got = await chat(setup, {"route": "/tools", "body": {"tools": WEATHER_TOOL},
                             "toolOutputs": {"getWeather": {"tempC": 22}},
                             "turns": ["Weather in Paris?", "Thanks!"]})
    assert [t["status"] for t in got["turns"]] == ["ready", "ready"]
    assert [(c["toolName"], c["input"]) for c in got["toolCalls"]] == \
        [("getWeather", {"city": "Paris"})]
    _, answer, _, last = got["messages"]
    assert [p["type"] for p in answer["parts"]] == [
        "step-start", "text", "tool-getWeather", "step-start", "text"]
    tool = parts_of(answer, "tool-getWeather")[0]
    assert {k: tool[k] for k in ("toolCallId", "state", "input", "output")} == {
        "toolCallId": "call_w1", "state": "output-available", "input": {"city": "Paris"},
        "output": {"tempC": 22}}
    assert text_of(answer) == 'Let me check.It is {"tempC":22} in Paris.'
    assert answer["metadata"]["usage"] == {"inputTokens": 30, "outputTokens": 8,
                                           "totalTokens": 38}
    assert text_of(last) == "No tools: Thanks!"
    # three requests: the question, the tool's output (sent automatically), the next question
    assert len(got["requests"]) == 3
    seen = setup.models["tools"].seen
    assert [t.name for t in seen[0].tools] == ["getWeather"]
    after_tool = seen[1].messages
    assert [(m.role, m.tool_call_id) for m in after_tool] == [
        ("user", None), ("assistant", None), ("tool", "call_w1")]
    assert after_tool[1].tool_calls[0].arguments == '{"city":"Paris"}'
    assert after_tool[2].text == '{"tempC":22}'
    assert [m.role for m in seen[2].messages] == ["user", "assistant", "tool", "assistant",
                                                  "user"]


async def test_a_conversation_that_ran_a_tool_goes_on_with_the_legacy_rag_backend(
        setup: Setup) -> None:
    got = await chat(setup, {"routes": ["/tools", "/tools", "/rag-drop"],
                             "body": {"tools": WEATHER_TOOL},
                             "toolOutputs": {"getWeather": {"tempC": 22}},
                             "turns": ["Weather in Paris?", "Is travel insurance covered?"]})
    assert [t["status"] for t in got["turns"]] == ["ready", "ready"]
    last = got["messages"][-1]
    assert text_of(last) == "Answer 1: you asked “Is travel insurance covered?”."
    assert parts_of(last, "data-session-state")[0]["data"] == {"turn": 1}
    # the RAG backend reads text: the tool call and its result were dropped (and counted)
    rag = setup.models["rag"].seen[0]
    assert [(m.role, m.text) for m in rag.messages] == [
        ("user", "Weather in Paris?"), ("assistant", "Let me check."),
        ("assistant", 'It is {"tempC":22} in Paris.'),
        ("user", "Is travel insurance covered?")]


async def test_reasoning_from_anthropic_is_a_reasoning_part_that_goes_back_signed(
        setup: Setup) -> None:
    got = await chat(setup, {"route": "/reasons", "turns": ["Which is larger, 9.11 or 9.9?",
                                                             "Sure?"]})
    assert [t["status"] for t in got["turns"]] == ["ready", "ready"]
    answer, last = got["messages"][1], got["messages"][3]
    assert [p["type"] for p in answer["parts"]] == ["step-start", "reasoning", "text"]
    reasoning = parts_of(answer, "reasoning")[0]
    assert (reasoning["text"], reasoning["state"]) == (THINKING, "done")
    assert reasoning["providerMetadata"] == {REASONS.name: {"signature": "sig-123"}}
    assert text_of(answer) == "9.9 is larger (I was sent 0 thoughts back)."
    assert text_of(last) == "9.9 is larger (I was sent 1 thoughts back)."
    replayed = setup.models["reasons"].seen[1].messages[1].reasoning[0]
    assert (replayed.text, replayed.signature) == (THINKING, "sig-123")


async def test_a_backend_that_breaks_mid_answer_is_an_error_the_chat_shows(
        aiohttp_client: Any) -> None:
    async def broken(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": TOOLS.stream_content_type})
        await out.prepare(request)
        encoder = TOOLS.encoder(TOOLS.parse_request(orjson.loads(await request.read())))
        frame = encoder_for(TOOLS.framing)
        for e in (StreamStart(), TextDelta("Half an ans")):
            await out.write(b"".join(frame(p) for p in encoder.encode(e)))
        await asyncio.sleep(0.3)  # the text reaches the client before the stream breaks
        await out.write(b"data: {not json\n\n")
        await out.write_eof()
        return out

    async def refused(request: web.Request) -> web.Response:
        return web.json_response(TOOLS.render_error(ChatError(429, "slow down")), status=429)

    app = web.Application()
    app.router.add_post("/broken", broken)
    app.router.add_post("/refused", refused)
    up = await aiohttp_client(app)
    base = str(up.make_url("")).rstrip("/")
    cfg = {"upstreams": {n: {"dialect": TOOLS.name, "url": f"{base}/{n}", "model": "m",
                             "health_url": None} for n in ("broken", "refused")},
           "routes": [{"path": f"/{n}", "dialect": MINE.name, "upstream": n}
                      for n in ("broken", "refused")]}
    gw = await aiohttp_client(create_app(parse_config(cfg, env={})))
    url = str(gw.make_url("")).rstrip("/")
    got = await run_node("ui_chat.mjs", env={"GATEWAY_URL": url, "PLAN": json.dumps(
        {"route": "/broken", "turns": ["Hi"]})})
    assert got["turns"] == [{"status": "error", "error": got["turns"][0]["error"]}]
    assert got["turns"][0]["error"] == "the upstream sent a malformed chunk: an event's data is " \
        "not JSON"
    assert text_of(got["messages"][1]) == "Half an ans"
    body = dict(MINE.samples.requests["text"])
    got = await run_node("ui_stream.mjs", env={"GATEWAY_URL": url + "/refused",
                                               "BODY": json.dumps(body)})
    assert got["failed"]["statusCode"] == 429
    assert json.loads(got["failed"]["message"]) == {"type": "error", "errorText": "slow down"}


async def test_the_stream_carries_the_protocol_header(setup: Setup) -> None:
    got = await run_node("ui_stream.mjs", env={
        "GATEWAY_URL": setup.base + "/rag", "BODY": json.dumps(MINE.samples.requests["text"])})
    assert got["status"] == 200
    assert got["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
    assert got["headers"]["content-type"].startswith("text/event-stream")
    assert got["chunks"][:2] == ["start", "start-step"]
    assert got["chunks"][-1] == "finish" and got["errors"] == []
    assert text_of(got["message"]) == "Answer 1: you asked “Hello!”."


# --- an AI SDK backend behind other clients ------------------------------------------------------


@pytest.fixture
async def ui_backend() -> AsyncIterator[str]:
    """tests/node/ui_backend.mjs, a backend made with the SDK's own server side."""
    ensure_node_modules()
    proc = await asyncio.create_subprocess_exec(
        "node", str(NODE_DIR / "ui_backend.mjs"), cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        yield f"http://127.0.0.1:{json.loads(line)['port']}"
    finally:
        proc.kill()
        await proc.wait()


async def _backend_seen(base: str) -> list[Any]:
    async with aiohttp.ClientSession() as s, s.get(f"{base}/seen") as r:
        return list(await r.json())


async def test_a_ui_stream_backend_serves_an_openai_client(aiohttp_client: Any,
                                                            ui_backend: str) -> None:
    cfg = {"upstreams": {"next": {"dialect": MINE.name, "url": f"{ui_backend}/api/chat",
                                  "health_url": None, "timeout": 20}},
           "routes": [{"path": "/v1/chat/completions", "dialect": TOOLS.name,
                       "upstream": "next"}]}
    gw = await aiohttp_client(create_app(parse_config(cfg, env={})))
    client = openai.AsyncOpenAI(base_url=str(gw.make_url("/v1")), api_key="k",
                                http_client=openai.DefaultAsyncHttpxClient(trust_env=False))
    history: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_9", "type": "function",
            "function": {"name": "getWeather", "arguments": '{"city":"Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": '{"tempC":3}'},
        {"role": "assistant", "content": "It is 3 °C."},
        {"role": "user", "content": "Hello there"}]
    whole = await client.chat.completions.create(model="m", messages=history)
    assert whole.choices[0].message.content == "You said: Hello there"
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage is not None and (whole.usage.prompt_tokens,
                                        whole.usage.completion_tokens) == (5, 4)
    stream = await client.chat.completions.create(model="m", messages=history, stream=True)
    pieces = [c.choices[0].delta.content async for c in stream
              if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == "You said: Hello there"
    seen = await _backend_seen(ui_backend)
    # the SDK validated and converted what the gateway sent (else it answered 400)
    assistant = seen[0]["messages"][2]
    assert assistant["role"] == "assistant"
    assert [p["type"] for p in assistant["parts"]] == [
        "step-start", "tool-getWeather", "step-start", "text"]
    assert {k: assistant["parts"][1][k] for k in ("toolCallId", "state", "input", "output")} \
        == {"toolCallId": "call_9", "state": "output-available", "input": {"city": "Oslo"},
            "output": '{"tempC":3}'}


async def test_a_ui_stream_backend_serves_a_chat_ui_client(aiohttp_client: Any,
                                                           ui_backend: str) -> None:
    cfg = {"upstreams": {"next": {"dialect": MINE.name, "url": f"{ui_backend}/api/chat",
                                  "health_url": None, "timeout": 20}},
           "routes": [{"path": "/api/chat", "dialect": CHATUI.name, "upstream": "next"}]}
    gw = await aiohttp_client(create_app(parse_config(cfg, env={})))
    body = {"messages": [{"role": "user", "content": "Hello there"}], "conversationId": "c-7"}
    resp = await gw.post("/api/chat", json=body, headers={"Accept": "text/event-stream"})
    assert resp.status == 200
    from strict import reader_for

    got = reader_for(CHATUI).read_stream(await resp.read())
    assert got.text == "You said: Hello there"
    # the canonical context names a source with a URL by its URL
    assert got.citations == ["https://example.com/doc"]
    assert got.session_state == "c-7"  # the backend's state is a number: the client's own stays
    whole = await gw.post("/api/chat", json=body)
    answer = reader_for(CHATUI).read_whole(await whole.json())
    assert (answer.text, answer.citations) == ("You said: Hello there",
                                               ["https://example.com/doc"])
    seen = await _backend_seen(ui_backend)
    assert seen[0]["sessionState"] == "c-7"
    assert seen[0]["messages"][0]["parts"] == [{"type": "text", "text": "Hello there"}]


@pytest.mark.parametrize("case", ["text", "tools", "reasoning"])
async def test_the_samples_are_what_the_sdks_own_server_side_sends(case: str) -> None:
    got = await run_node("capture_ui_stream.mjs", case)
    assert got["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
    assert got["body"].encode() == MINE.samples.streams[case]
