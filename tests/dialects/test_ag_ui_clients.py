"""AG-UI's own client library, ``@ag-ui/client``'s ``HttpAgent`` (Node, tests/node/ag_ui_runs.mjs),
holding conversations through the gateway with the backends an agent UI wants to reach: a RAG
backend with citations, follow-ups and session state, a Chat UI backend, a Chat Completions
backend with a frontend tool round trip, an Anthropic backend that reasons; and the reverse, an
AG-UI agent endpoint (tests/node/ag_ui_agent.mjs, validating every input with the protocol's
own schema) behind a Chat UI client and the ``openai`` SDK.

What is asserted is what the libraries produce (the agent's messages and state, the SDK's
objects), and what the fake backends were sent. Every dialect is found in the registry by what
it declares or by its samples; none is named.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
from aiohttp import web
from aiohttp.test_utils import TestServer
from fakes import closed_port
from node_clients import NODE_DIR, ensure_node_modules, run_node
from strict import reader_for

from gateway.app import create_app
from gateway.canonical import (
    ContextUpdate,
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
from gateway.dialects import DIALECTS, Dialect
from gateway.framing import encoder_for


def _one(what: str, found: list[Dialect]) -> Dialect:
    assert found, f"no registered dialect is {what}"
    return found[0]


AGUI = _one("an agent UI's (its requests name a thread and a run)", [
    d for d in DIALECTS.values()
    if isinstance(d.samples.requests.get("text"), dict)
    and {"threadId", "runId"} <= set(d.samples.requests["text"])])
RAG = _one("a RAG backend with citations, follow-ups and JSON session state", [
    d for d in DIALECTS.values()
    if d.capabilities.citations and d.capabilities.followups and not d.capabilities.tools
    and d.capabilities.session_state == "json" and d.stream_path is not None])
CHATUI = _one("a frontend whose session state is a string",
              [d for d in DIALECTS.values() if d.capabilities.session_state == "string"])
CHAT = _one("Chat Completions", [d for d in DIALECTS.values()
                                 if d.default_path.endswith("/chat/completions")])
REASONER = _one("a backend that signs its reasoning (takes back only its own)", [
    d for d in DIALECTS.values()
    if d.capabilities.reasoning and d.capabilities.reasoning_replay == "own"
    and not d.capabilities.citations])

WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


# --- a scripted backend of any dialect ------------------------------------------------------------


class Backend:
    """A fake upstream of ``dialect``: each request is answered with the next script's events,
    written by the dialect's own stream encoder (the gateway asks it for streams), and kept."""

    def __init__(self, dialect: Dialect, *scripts: list[StreamEvent]) -> None:
        self.dialect = dialect
        self.scripts = list(scripts)
        self.seen: list[Any] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(body)
        events = self.scripts.pop(0)
        encoder, frame = self.dialect.encoder(self.dialect.parse_request(body)), \
            encoder_for(self.dialect.framing)
        out = web.StreamResponse(headers={"Content-Type": self.dialect.stream_content_type})
        await out.prepare(request)
        for e in events:
            data = b"".join(frame(p) for p in encoder.encode(e))
            if data:
                await out.write(data)
        await out.write_eof()
        return out

    def sent(self, i: int) -> Any:
        """The ``i``-th request as the backend's strict reader reads it."""
        return reader_for(self.dialect).read_request(self.seen[i])


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[TestServer]:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


@contextlib.asynccontextmanager
async def gateway(routes: dict[str, tuple[Dialect, Dialect, str]],
                  **route_extra: Any) -> AsyncIterator[TestServer]:
    """The gateway with one route per entry: path -> (client dialect, upstream dialect, url)."""
    cfg = {"upstreams": {f"u{i}": {"dialect": up.name, "url": url, "model": "up-model",
                                   "streaming": "always", "timeout": 20}
                         for i, (_, up, url) in enumerate(routes.values())},
           "routes": [{"path": path, "dialect": cl.name, "upstream": f"u{i}", **route_extra}
                      for i, (path, (cl, _, _)) in enumerate(routes.items())]}
    async with serving(create_app(parse_config(cfg, env={}))) as server:
        yield server


@contextlib.asynccontextmanager
async def backend(b: Backend) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", b.handle)
    async with serving(app) as server:
        yield str(server.make_url("/chat"))


async def runs(*steps: dict[str, Any]) -> list[dict[str, Any]]:
    got = await run_node("ag_ui_runs.mjs", env={"RUNS": json.dumps(steps)}, timeout=90)
    assert isinstance(got, list) and len(got) == len(steps)
    for run in got:
        assert run["warnings"] == [], run["warnings"]  # nothing the protocol does not define
    return got


def texts(messages: list[dict[str, Any]], role: str = "assistant") -> list[str]:
    return [m.get("content") or "" for m in messages if m["role"] == role]


# --- an agent UI in front of the backends ---------------------------------------------------------


async def test_a_rag_backend_keeps_its_state_and_cites_behind_an_agent_ui() -> None:
    ctx = {"data_points": {"text": ["benefits.pdf#page=2: Plus covers vision."]}}
    rag = Backend(RAG,
                  [StreamStart(context=ctx, session_state={"conversation": "c-1", "turn": 1}),
                   TextDelta("Plus covers "), TextDelta("vision [benefits.pdf#page=2]."),
                   ContextUpdate(context={"followup_questions": ["And dental?"]}),
                   StreamFinish()],
                  [StreamStart(session_state={"conversation": "c-1", "turn": 2}),
                   TextDelta("Dental too."), StreamFinish()])
    async with backend(rag) as url, gateway({"/agent": (AGUI, RAG, url)}) as gw:
        target = str(gw.make_url("/agent"))
        first, second = await runs({"url": target, "user": "What does Plus cover?"},
                                   {"url": target, "user": "And dental?"})
    assert [(m["role"], m.get("content")) for m in first["newMessages"]] == [
        ("assistant", "Plus covers vision [benefits.pdf#page=2].")]
    assert first["state"] == {"conversation": "c-1", "turn": 1}
    assert first["custom"] == [
        {"name": "sources", "value": [{"id": "benefits.pdf#page=2",
                                       "title": "benefits.pdf#page=2",
                                       "snippet": "Plus covers vision."}]},
        {"name": "followups", "value": ["And dental?"]}]
    assert first["runError"] is None and first["error"] is None
    # the state the backend gave comes back to it with the next turn, and its answer replaces it
    assert rag.sent(0).session_state is None
    assert rag.sent(1).session_state == {"conversation": "c-1", "turn": 1}
    assert [(m.role, m.text) for m in rag.sent(1).messages] == [
        ("user", "What does Plus cover?"),
        ("assistant", "Plus covers vision [benefits.pdf#page=2]."),
        ("user", "And dental?")]
    assert texts(second["newMessages"]) == ["Dental too."]
    assert second["state"] == {"conversation": "c-1", "turn": 2}


async def test_a_chat_ui_backend_behind_an_agent_ui_keeps_its_conversation_id() -> None:
    ctx = {"data_points": {"text": ["faq.md: Returns take 30 days."]}}
    chat = Backend(CHATUI,
                   [StreamStart(context=ctx, session_state="conv-9"), TextDelta("Thirty "),
                    TextDelta("days."), StreamFinish()],
                   [StreamStart(session_state="conv-9"), TextDelta("Yes."), StreamFinish()])
    async with backend(chat) as url, gateway({"/agent": (AGUI, CHATUI, url)}) as gw:
        target = str(gw.make_url("/agent"))
        first, second = await runs({"url": target, "user": "How long are returns?"},
                                   {"url": target, "user": "Even on sale?"})
    assert texts(first["newMessages"]) == ["Thirty days."]
    assert first["state"] == "conv-9"  # the Chat UI's conversation is the run's state
    assert first["custom"] == [{"name": "sources", "value": [
        {"id": "faq.md", "title": "faq.md", "snippet": "Returns take 30 days."}]}]
    assert chat.sent(0).session_state is None
    assert chat.sent(1).session_state == "conv-9"
    assert texts(second["newMessages"]) == ["Yes."]


async def test_a_frontend_tool_round_trip_then_the_same_conversation_on_a_rag_backend() -> None:
    """Chat Completions calls the agent UI's own tool; the app runs it and the next run sends
    the result; then the app switches the conversation to a RAG backend (which has no tools: the
    route drops them, the history's tool turns included) and keeps talking there."""
    chat = Backend(CHAT,
                   [StreamStart(model="up-model"), TextDelta("Checking."),
                    ToolCallStart(0, "call_1", "get_weather"), ToolCallDelta(0, '{"city":'),
                    ToolCallDelta(0, '"Paris"}'), ToolCallEnd(0),
                    StreamFinish("tool_calls", Usage(10, 5))],
                   [StreamStart(model="up-model"), TextDelta("It is 22 °C in Paris."),
                    StreamFinish("stop", Usage(20, 8))])
    rag = Backend(RAG,
                  [StreamStart(session_state={"turn": 1}), TextDelta("Pack a light coat."),
                   StreamFinish()],
                  [StreamStart(session_state={"turn": 2}), TextDelta("And an umbrella."),
                   StreamFinish()])
    async with backend(chat) as chat_url, backend(rag) as rag_url, \
            gateway({"/chat": (AGUI, CHAT, chat_url), "/rag": (AGUI, RAG, rag_url)},
                    on_unsupported="drop") as gw:
        to_chat, to_rag = str(gw.make_url("/chat")), str(gw.make_url("/rag"))
        got = await runs(
            {"url": to_chat, "user": "Weather in Paris?", "tools": [WEATHER]},
            {"url": to_chat, "tools": [WEATHER], "toolResults": {"get_weather": '{"temp":22}'}},
            {"url": to_rag, "user": "What should I pack?", "tools": [WEATHER]},
            {"url": to_rag, "user": "Anything else?", "tools": [WEATHER]})
    called, answered, packed, more = got
    # the library's own reading: a pending call of the frontend tool, its arguments whole
    assert called["pendingToolCallIds"] == ["call_1"]
    [assistant] = called["newMessages"]
    assert assistant["content"] == "Checking."
    assert assistant["toolCalls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city":"Paris"}'}}]
    assert chat.sent(0).tools == ["get_weather"]
    # the next run carries the result to the backend, which answers from it
    turn = chat.sent(1).messages
    assert [(m.role, m.tool_result_for, m.text) for m in turn[-2:]] == [
        ("assistant", None, "Checking."), ("tool", "call_1", '{"temp":22}')]
    assert turn[-2].tool_calls[0].arguments == {"city": "Paris"}
    assert texts(answered["newMessages"]) == ["It is 22 °C in Paris."]
    assert answered["pendingToolCallIds"] == []
    # the RAG backend gets the conversation without what it cannot carry, and keeps its state
    assert [(m.role, m.text) for m in rag.sent(0).messages] == [
        ("user", "Weather in Paris?"), ("assistant", "Checking."),
        ("assistant", "It is 22 °C in Paris."), ("user", "What should I pack?")]
    assert texts(packed["newMessages"]) == ["Pack a light coat."]
    assert rag.sent(1).session_state == {"turn": 1}
    assert texts(more["newMessages"]) == ["And an umbrella."]
    assert more["state"] == {"turn": 2}
    assert [m["role"] for m in more["messages"]] == [
        "user", "assistant", "tool", "assistant", "user", "assistant", "user", "assistant"]


async def test_signed_reasoning_goes_back_to_the_backend_that_signed_it() -> None:
    thinker = Backend(REASONER,
                      [StreamStart(model="up-model"), ReasoningDelta("Six times seven. "),
                       ReasoningDelta("", signature="sig-ü-1", dialect=REASONER.name),
                       TextDelta("42."), StreamFinish("stop", Usage(9, 30))],
                      [StreamStart(model="up-model"), TextDelta("Yes, 42."), StreamFinish()])
    async with backend(thinker) as url, gateway({"/agent": (AGUI, REASONER, url)}) as gw:
        target = str(gw.make_url("/agent"))
        first, second = await runs({"url": target, "user": "6 x 7?"},
                                   {"url": target, "user": "Sure?"})
    reasoning, answer = first["newMessages"]
    assert reasoning["role"] == "reasoning" and reasoning["content"] == "Six times seven. "
    assert isinstance(reasoning.get("encryptedValue"), str)  # opaque to the app, kept by it
    assert answer == {"id": answer["id"], "role": "assistant", "content": "42."}
    assert first["reasoningEvents"] == 1
    # the next run sends the reasoning back, and the backend gets its own signed thinking
    sent = thinker.sent(1)
    assert [(m.role, m.text, m.reasoning) for m in sent.messages] == [
        ("user", "6 x 7?", ""), ("assistant", "42.", "Six times seven. "), ("user", "Sure?", "")]
    assert "sig-ü-1" in json.dumps(thinker.seen[1], ensure_ascii=False)
    assert texts(second["newMessages"]) == ["Yes, 42."]


async def test_errors_reach_the_agent_ui_as_the_library_reports_them() -> None:
    broken = Backend(CHAT, [StreamStart(), TextDelta("Partial "),
                            StreamError("the model fell over")])
    async with backend(broken) as url, gateway({"/agent": (AGUI, CHAT, url)}) as gw:
        target = str(gw.make_url("/agent"))
        cut, = await runs({"url": target, "user": "Hi"})
    # mid-run: RUN_ERROR, after the text the client was shown
    assert cut["runError"]["message"].endswith("the model fell over")
    assert cut["error"] is None
    assert texts(cut["messages"]) == ["Partial "]
    # before the run: an HTTP error, which HttpAgent rejects the run with
    async with gateway({"/agent": (AGUI, CHAT, f"http://127.0.0.1:{closed_port()}/chat")}) as gw:
        refused, = await runs({"url": str(gw.make_url("/agent")), "user": "Hi"})
    assert refused["error"]["status"] == 502
    assert "RUN_ERROR" in refused["error"]["message"]
    assert refused["newMessages"] is None


# --- an AG-UI agent behind the other frontends -----------------------------------------------


@contextlib.asynccontextmanager
async def agent_endpoint() -> AsyncIterator[str]:
    """tests/node/ag_ui_agent.mjs, listening on 127.0.0.1; its base URL."""
    ensure_node_modules()
    proc = await asyncio.create_subprocess_exec(
        "node", str(NODE_DIR / "ag_ui_agent.mjs"), cwd=NODE_DIR, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        yield f"http://127.0.0.1:{json.loads(line)['port']}"
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def inputs_of(base: str) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(f"{base}/inputs") as resp:
        got: list[dict[str, Any]] = await resp.json()
        return got


async def test_an_agent_behind_a_chat_ui_frontend() -> None:
    ask = CHATUI.samples.requests["text"]
    assert isinstance(ask, dict)
    async with agent_endpoint() as base, \
            gateway({"/api/chat": (CHATUI, AGUI, f"{base}/agent")},
                    on_unsupported="drop") as gw, aiohttp.ClientSession() as http:
        url = str(gw.make_url("/api/chat"))
        body = {**ask, "messages": [{"role": "user", "content": "Hello"}],
                "conversationId": "conv-ui-1"}
        async with http.post(url, json={**body, "stream": True},
                             headers={"Accept": "text/event-stream"}) as resp:
            assert resp.status == 200
            streamed = reader_for(CHATUI).read_stream(await resp.read())
        async with http.post(url, json={**body, "stream": False}) as resp:
            assert resp.status == 200
            whole = reader_for(CHATUI).read_whole(await resp.json())
        sent = await inputs_of(base)
    for seen in (streamed, whole):
        assert seen.text == "Turn 1: you said Hello."
        assert seen.citations == ["handbook.pdf#page=4"]
        assert seen.session_state == "conv-ui-1"  # its own: the agent's state is an object
        assert seen.error is None
    # the agent was asked for its stream both times, the conversation id as its state
    assert [s["accept"] for s in sent] == ["text/event-stream"] * 2
    for s in sent:
        assert s["input"]["state"] == "conv-ui-1"
        assert [(m["role"], m["content"]) for m in s["input"]["messages"]] == [("user", "Hello")]


async def test_an_agent_behind_the_openai_sdk_with_a_tool_round_trip() -> None:
    tool = {"type": "function", "function": WEATHER}
    async with agent_endpoint() as base, \
            gateway({"/v1/chat/completions": (CHAT, AGUI, f"{base}/agent")}) as gw:
        client = openai.AsyncOpenAI(base_url=str(gw.make_url("/v1")), api_key="sk-test",
                                    max_retries=0)
        ask = [{"role": "user", "content": "Weather in Paris?"}]
        whole = await client.chat.completions.create(model="m", messages=ask,  # type: ignore
                                                     tools=[tool])
        stream = await client.chat.completions.create(model="m", messages=ask,  # type: ignore
                                                      tools=[tool], stream=True)
        content, args, names, ids, finish = "", "", [], [], None
        async for chunk in stream:
            delta = chunk.choices[0].delta if chunk.choices else None
            if delta is not None:
                content += delta.content or ""
                for c in delta.tool_calls or []:
                    ids += [c.id] if c.id else []
                    names += [c.function.name] if c.function and c.function.name else []
                    args += c.function.arguments or "" if c.function else ""
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        call = whole.choices[0].message.tool_calls[0]  # type: ignore[index]
        answered = await client.chat.completions.create(model="m", messages=[  # type: ignore
            *ask, whole.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"temp":22}'}], tools=[tool])
        plain = await client.chat.completions.create(  # type: ignore
            model="m", messages=[{"role": "user", "content": "Hello"}])
        sent = await inputs_of(base)
    # the call the agent left for the client, not the one it ran itself
    msg = whole.choices[0].message
    assert msg.content == "Let me check the weather."
    assert [(c.id, c.function.name, json.loads(c.function.arguments))  # type: ignore[union-attr]
            for c in msg.tool_calls or []] == [("call_w1", "get_weather", {"city": "Paris"})]
    assert whole.choices[0].finish_reason == "tool_calls"
    assert (content, ids, names, json.loads(args), finish) == (
        "Let me check the weather.", ["call_w1"], ["get_weather"], {"city": "Paris"},
        "tool_calls")
    assert answered.choices[0].message.content == 'The tool said {"temp":22}.'
    assert plain.choices[0].message.content == "Turn 1: you said Hello."
    assert plain.usage is not None and (plain.usage.prompt_tokens,
                                        plain.usage.completion_tokens) == (13, 8)
    # what the agent was sent: always a stream, the tool with its description, the result
    assert {s["accept"] for s in sent} == {"text/event-stream"}
    assert sent[0]["input"]["tools"] == [WEATHER]
    result = sent[2]["input"]["messages"][-1]
    assert (result["role"], result["toolCallId"], result["content"]) == (
        "tool", "call_w1", '{"temp":22}')


# --- the protocol's own schemas --------------------------------------------------------------


async def test_what_the_gateway_writes_passes_the_protocols_schemas(tmp_path: Any) -> None:
    """The samples, every input the gateway renders from another dialect's requests, and every
    event it writes for every other dialect's streams: each passes ``@ag-ui/core``'s zod schema
    (``RunAgentInputSchema``, ``EventSchema``)."""
    import random

    from observe import chunks, client_request, request_cases, run_stream, stream_cases

    from gateway.pipeline import translate_request

    inputs: list[Any] = [dict(AGUI.samples.requests[k]) for k in sorted(AGUI.samples.requests)]
    events: list[Any] = [e for k in sorted(AGUI.samples.streams)
                         for e in reader_events(AGUI.samples.streams[k])]
    events += AGUI.samples.responses["text"]
    for d in DIALECTS.values():
        for _, body in request_cases(d):
            _, out, _ = translate_request(body, d, AGUI, model="m", policy="drop")
            inputs.append(out)
        for case in stream_cases(d):
            req, _ = client_request(AGUI, stream=True, sent=case.sent)
            _, data = run_stream(d, AGUI, req, chunks(case.body, random.Random(case.id)),
                                 policy="drop")
            events += reader_events(data)
    path = tmp_path / "docs.json"
    path.write_text(json.dumps({"inputs": inputs, "events": events}))
    got = await run_node("ag_ui_validate.mjs", env={"DOCS": str(path)}, timeout=90)
    bad_inputs = [(doc, issues) for doc, issues in zip(inputs, got["inputs"], strict=True)
                  if issues]
    bad_events = [(doc, issues) for doc, issues in zip(events, got["events"], strict=True)
                  if issues]
    assert not bad_inputs, bad_inputs[:3]
    assert not bad_events, bad_events[:3]
    assert len(inputs) > 20 and len(events) > 500  # (the cases are all there)


def reader_events(data: bytes) -> list[Any]:
    return [json.loads(block[6:]) for block in data.decode().split("\n\n")
            if block.startswith("data: ")]
