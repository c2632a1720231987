"""The real ``ollama`` Python client (``ollama.AsyncClient``) through the gateway, end to end on
127.0.0.1, and the reverse: a fake Ollama upstream behind the other dialects' clients (the real
OpenAI and Anthropic SDKs, and every registered client dialect's requests).

The client's route is ``/ollama/api/chat`` (the client is given ``host=<gateway>/ollama``, as a
user behind a prefix does), in front of fake upstreams of the other dialects, picked from the
registry by what they declare: every one for text, those with tools for the tool loop, those
with JSON-schema structured output for ``format``. The fakes answer with their dialect's
samples; what the client reads must be what the upstream said.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import ollama
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from fakes import Fakes, FakeUpstream, Script, client_request, reader_for, sample_text
from observe import read_upstream_stream
from strict import reader_for as strict_reader

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import get, names

ME = get("ollama")
TIMEOUT = 10.0
PREFIX = "/ollama"
OTHERS = [n for n in names() if n != ME.name]
WITH_TOOLS = [n for n in OTHERS if get(n).capabilities.tools and "tools" in
              get(n).samples.responses and "tools" in get(n).samples.streams]
WITH_SCHEMAS = [n for n in OTHERS if "json_schema" in get(n).capabilities.structured_output]
WITH_REASONING = [n for n in OTHERS if get(n).capabilities.reasoning
                  and "reasoning" in get(n).samples.responses]
MODELS = ["llama3.2", "qwen3:8b"]

WEATHER: Any = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a given city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


async def serve(app: web.Application) -> TestServer:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


class Gateway:
    """The app with one route per upstream dialect, ``/<upstream>/…`` (the first also at
    ``/ollama/api/chat``), each to a fake of that dialect."""

    def __init__(self) -> None:
        self.fakes = Fakes()
        self.up: dict[str, FakeUpstream] = {}
        self.server: TestServer | None = None

    async def start(self, client: str, upstreams: list[str],
                    routes: dict[str, str] | None = None) -> Gateway:
        """``routes``: path -> upstream dialect (the client's dialect at each path)."""
        ups: dict[str, Any] = {}
        for name in upstreams:
            fake = await self.fakes.start(name)
            self.up[name] = fake
            ups[name] = {"dialect": name, "url": fake.url, "timeout": TIMEOUT,
                         "connect_timeout": TIMEOUT, "health_url": None,
                         "model": MODELS[0], "models": MODELS[1:]}
        cfg = {"upstreams": ups, "routes": [
            {"path": path, "dialect": client, "upstream": up}
            for path, up in (routes or {}).items()]}
        self.server = await serve(create_app(parse_config(cfg, env={})))
        return self

    def url(self, path: str = "") -> str:
        assert self.server is not None
        return str(self.server.make_url(path))

    def client(self, prefix: str = PREFIX) -> ollama.AsyncClient:
        return ollama.AsyncClient(host=self.url(prefix), timeout=TIMEOUT, trust_env=False)

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()
        await self.fakes.close()


@pytest.fixture
async def gw() -> AsyncIterator[Gateway]:
    g = Gateway()
    try:
        yield g
    finally:
        await g.close()


async def ollama_client_in_front_of(gw: Gateway, upstream: str) -> ollama.AsyncClient:
    await gw.start(ME.name, [upstream], {f"{PREFIX}{ME.default_path}": upstream})
    return gw.client()


# --- the ollama client, upstreams of other dialects ---------------------------------------------


@pytest.mark.parametrize("upstream", OTHERS)
async def test_chat_whole_and_streamed(gw: Gateway, upstream: str) -> None:
    client = await ollama_client_in_front_of(gw, upstream)
    question = [{"role": "user", "content": "why is the sky blue?"}]
    whole = await client.chat(model=MODELS[0], messages=question,
                              options={"temperature": 0.2, "num_predict": 64})
    assert whole.done is True and whole.done_reason == "stop"
    assert whole.message.role == "assistant"
    assert whole.message.content == sample_text(upstream, stream=False)
    usage = reader_for(upstream).read_whole(get(upstream).samples.responses["text"]).usage
    if usage is not None and get(upstream).capabilities.usage_whole:
        assert (whole.prompt_eval_count, whole.eval_count) == usage
    assert whole.total_duration and whole.total_duration > 0
    sent = strict_reader(get(upstream)).read_request(gw.up[upstream].seen[-1].body)
    assert sent.messages[-1].text == "why is the sky blue?"

    parts = [p async for p in await client.chat(model=MODELS[0], messages=question,
                                                stream=True)]
    assert parts and parts[-1].done is True and not any(p.done for p in parts[:-1])
    assert "".join(p.message.content or "" for p in parts) == sample_text(upstream, stream=True)
    assert gw.up[upstream].seen[-1].stream is True


@pytest.mark.parametrize("upstream", WITH_TOOLS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_tool_loop(gw: Gateway, upstream: str, stream: bool) -> None:
    """The client offers a tool, gets the upstream's call (name and arguments as an object),
    answers it the way the client's README shows (``tool_name``, no id), and the upstream is
    sent a result that answers that very call."""
    client = await ollama_client_in_front_of(gw, upstream)
    fake = gw.up[upstream]
    fake.queue = [Script(case="tools"), Script(case="text")]
    messages: list[Any] = [{"role": "user", "content": "what is the weather in Tokyo?"}]
    if stream:
        parts = [p async for p in await client.chat(model=MODELS[0], messages=messages,
                                                    tools=[WEATHER], stream=True)]
        calls = [c for p in parts for c in (p.message.tool_calls or [])]
        answer = parts[-1]
    else:
        answer = await client.chat(model=MODELS[0], messages=messages, tools=[WEATHER])
        calls = list(answer.message.tool_calls or [])
    sample = get(upstream).samples.streams["tools"] if stream else \
        get(upstream).samples.responses["tools"]
    want = read_upstream_stream(get(upstream), sample) if stream else \
        strict_reader(get(upstream)).read_whole(sample)
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == \
        [(c.name, c.arguments) for c in want.tool_calls]
    assert answer.done is True
    offered = strict_reader(get(upstream)).read_request(fake.seen[0].body)
    assert offered.tools == ["get_weather"]

    messages.append({"role": "assistant", "content": "", "tool_calls": calls})
    for c in calls:
        messages.append({"role": "tool", "content": "11 degrees celsius",
                         "tool_name": c.function.name})
    final = await client.chat(model=MODELS[0], messages=messages, tools=[WEATHER])
    assert final.message.content == sample_text(upstream, stream=False)
    second = strict_reader(get(upstream)).read_request(fake.seen[1].body)
    results = [m for m in second.messages if m.tool_result_for is not None]
    [called] = [m for m in second.messages if m.tool_calls]
    # The client keeps no ids (its Message.ToolCall has none): the gateway gives the replayed
    # calls ids of its own, and each result the id of the call it answers.
    assert [(c.name, c.arguments) for c in called.tool_calls] == \
        [(c.name, c.arguments) for c in want.tool_calls]
    assert [r.tool_result_for for r in results] == [c.id for c in called.tool_calls]
    assert len({c.id for c in called.tool_calls}) == len(called.tool_calls)
    assert all(r.text == "11 degrees celsius" for r in results)


@pytest.mark.parametrize("upstream", WITH_SCHEMAS)
async def test_format_asks_for_structured_output(gw: Gateway, upstream: str) -> None:
    client = await ollama_client_in_front_of(gw, upstream)
    schema = {"type": "object", "properties": {"age": {"type": "integer"},
                                               "available": {"type": "boolean"}},
              "required": ["age", "available"]}
    await client.chat(model=MODELS[0], format=schema,
                      messages=[{"role": "user", "content": "Ollama is 22."}])
    sent = strict_reader(get(upstream)).read_request(gw.up[upstream].seen[-1].body)
    assert sent.output == ("json_schema", schema)


@pytest.mark.parametrize("upstream", WITH_REASONING)
async def test_think_and_thinking(gw: Gateway, upstream: str) -> None:
    client = await ollama_client_in_front_of(gw, upstream)
    gw.up[upstream].queue = [Script(case="reasoning")]
    answer = await client.chat(model=MODELS[0], think=True,
                               messages=[{"role": "user", "content": "9.9 or 9.11?"}])
    want = strict_reader(get(upstream)).read_whole(get(upstream).samples.responses["reasoning"])
    assert answer.message.thinking == (want.reasoning or None)
    assert answer.message.content == want.text


async def test_errors_reach_the_client_as_ollama_errors(gw: Gateway) -> None:
    upstream = OTHERS[0]
    client = await ollama_client_in_front_of(gw, upstream)
    fake = gw.up[upstream]
    question = [{"role": "user", "content": "hi"}]
    fake.queue = [Script(status=503)]
    with pytest.raises(ollama.ResponseError) as whole:
        await client.chat(model=MODELS[0], messages=question)
    assert whole.value.status_code >= 500 and whole.value.error
    # a stream that breaks after its first pieces: the client raises the upstream's message
    fake.queue = [Script(error_after=2)]
    stream = await client.chat(model=MODELS[0], messages=question, stream=True)
    got: list[str] = []
    with pytest.raises(ollama.ResponseError) as broken:
        async for part in stream:
            got.append(part.message.content or "")
    assert broken.value.error == "upstream broke down mid-answer"
    assert "".join(got)
    # a request the gateway refuses: 400, in Ollama's shape
    with pytest.raises(ollama.ResponseError) as bad:
        await client.chat(model=MODELS[0], messages=question, options={"temperature": "hot"})
    assert bad.value.status_code == 400 and "options.temperature" in bad.value.error


async def test_unmapped_options_follow_the_routes_policy(gw: Gateway) -> None:
    """``top_k`` has no place in another dialect: refused by default (400, naming it), sent
    without it where the route drops what cannot be carried."""
    upstream = OTHERS[0]
    await gw.start(ME.name, [upstream], {f"{PREFIX}{ME.default_path}": upstream})
    client = gw.client()
    with pytest.raises(ollama.ResponseError) as refused:
        await client.chat(model=MODELS[0], messages=[{"role": "user", "content": "hi"}],
                          options={"top_k": 20})
    assert refused.value.status_code == 400 and "options" in refused.value.error
    assert not gw.up[upstream].seen


async def test_list_and_show(gw: Gateway) -> None:
    client = await ollama_client_in_front_of(gw, OTHERS[0])
    listed = await client.list()
    assert [m.model for m in listed.models] == MODELS
    shown = await client.show(MODELS[1])
    assert shown.modelinfo == {} and "completion" in (shown.capabilities or [])
    with pytest.raises(ollama.ResponseError) as missing:
        await client.show("not-served")
    assert missing.value.status_code == 404 and "not-served" in missing.value.error


# --- an Ollama upstream, other clients ----------------------------------------------------------


@pytest.mark.parametrize("client", OTHERS)
async def test_every_client_dialect_reads_an_ollama_upstream(gw: Gateway, client: str) -> None:
    await gw.start(client, [ME.name], {"/c": ME.name})
    async with aiohttp.ClientSession() as http:
        for stream in (False, True):
            path, body, headers = client_request(client, "/c", stream=stream)
            async with http.post(gw.url(path), json=body, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                reader = strict_reader(get(client))
                seen = reader.read_stream(await resp.read()) if stream else \
                    reader.read_whole(await resp.json())
            assert seen.text == sample_text(ME.name, stream=stream)
            assert gw.up[ME.name].seen[-1].body["stream"] is stream


async def test_the_openai_sdk_in_front_of_an_ollama_upstream(gw: Gateway) -> None:
    """The SDK posts to its conventional path: the route there is the dialect that suggests it."""
    path = "/v1/chat/completions"
    client_dialect = next(n for n in OTHERS if get(n).default_path == path)
    await gw.start(client_dialect, [ME.name], {path: ME.name})
    fake = gw.up[ME.name]
    async with openai.AsyncOpenAI(base_url=gw.url("/v1"), api_key="k", timeout=TIMEOUT,
                                  max_retries=0) as sdk:
        fake.queue = [Script(case="tools")]
        whole = await sdk.chat.completions.create(
            model=MODELS[0], messages=[{"role": "user", "content": "weather in Tokyo?"}],
            tools=[WEATHER])
        [call] = whole.choices[0].message.tool_calls or []
        assert call.function.name == "get_weather" and call.id == "call_k3fqyb7e"
        assert whole.choices[0].finish_reason == "tool_calls"
        assert whole.usage is not None and whole.usage.prompt_tokens == 169
        stream = await sdk.chat.completions.create(
            model=MODELS[0], stream=True, messages=[
                {"role": "user", "content": "weather in Tokyo?"},
                {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": "11 degrees"}])
        text = "".join([c.choices[0].delta.content or "" async for c in stream
                        if c.choices])
    assert text == sample_text(ME.name, stream=True)
    sent = fake.seen[-1].body["messages"]
    assert sent[-1] == {"role": "tool", "content": "11 degrees", "tool_name": "get_weather",
                        "tool_call_id": "call_k3fqyb7e"}
    assert sent[-2]["tool_calls"][0]["function"]["arguments"] == {"city": "Tokyo"}


async def test_the_anthropic_sdk_in_front_of_an_ollama_upstream(gw: Gateway) -> None:
    path = "/v1/messages"
    client_dialect = next(n for n in OTHERS if get(n).default_path == path)
    await gw.start(client_dialect, [ME.name], {path: ME.name})
    fake = gw.up[ME.name]
    fake.queue = [Script(case="reasoning")]
    sdk = anthropic.AsyncAnthropic(base_url=gw.url(), api_key="k", timeout=TIMEOUT,
                                   max_retries=0)
    try:
        async with sdk.messages.stream(model=MODELS[0], max_tokens=256, messages=[
                {"role": "user", "content": "9.90 or 9.9?"}]) as stream:
            message = await stream.get_final_message()
    finally:
        await sdk.close()
    want = strict_reader(ME).read_stream(ME.samples.streams["reasoning"])
    texts = [b.text for b in message.content if b.type == "text"]
    thoughts = [b.thinking for b in message.content if b.type == "thinking"]
    assert texts == [want.text] and thoughts == [want.reasoning]
    assert want.usage is not None and message.usage.output_tokens == want.usage[1]
    assert fake.seen[-1].body["options"]["num_predict"] == 256
