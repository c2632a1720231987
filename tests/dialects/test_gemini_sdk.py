"""The real ``google-genai`` Python SDK as the gateway's client, end to end on 127.0.0.1, in front
of upstreams of every other registered dialect (found in the registry, by what they declare);
and the reverse: a Gemini upstream (a fake answering the dialect's samples) behind the real
OpenAI and Anthropic SDKs.

The SDK's own parsers must read what the gateway writes: ``generate_content`` (whole and
streamed), a manual function-calling loop (the call's id and arguments back to the upstream as a
tool result), structured output (``response_json_schema``, ``response_schema``),
``count_tokens``, ``models.list`` and its errors (``ClientError`` with the upstream's status and
message).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from aiohttp.test_utils import TestServer
from fakes import Fakes, FakeUpstream, Script, sample_text, upstream_config
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from pydantic import BaseModel
from strict import reader_for

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import DIALECTS, Dialect, get

GEMINI = get("gemini")
OTHERS = [d for d in DIALECTS.values() if d is not GEMINI]
TOOLS = [d for d in OTHERS if d.capabilities.tools and "tools" in d.samples.responses
         and "tools" in d.samples.streams and "tools" in d.samples.requests]
STRUCTURED = [d for d in OTHERS if "json_schema" in d.capabilities.structured_output]
MODEL = "gemini-2.5-flash"
TIMEOUT_MS = 10_000
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "population": {"type": "integer"}},
          "required": ["city"]}


def ids(dialects: list[Dialect]) -> list[str]:
    return [d.name for d in dialects]


@pytest.fixture
async def servers() -> AsyncIterator[list[Any]]:
    """The gateways (and SDK clients) a test starts, closed after it."""
    started: list[Any] = []
    yield started
    for s in reversed(started):
        if isinstance(s, genai.Client):
            await s.aio.aclose()
        else:
            await s.close()


async def gateway(servers: list[Any], fake: FakeUpstream, *, route_dialect: Dialect,
                  path: str, **cfg: Any) -> TestServer:
    config = {"upstreams": {"u": upstream_config(fake, model="up-model",
                                                 models=["up-other"])},
              "routes": [{"path": path, "dialect": route_dialect.name, "upstream": "u"}], **cfg}
    server = TestServer(create_app(parse_config(config, env={})), host="127.0.0.1")
    await server.start_server()
    servers.append(server)
    return server


async def gemini_client(servers: list[Any], fake: FakeUpstream,
                        api_key: str = "client-key", **cfg: Any) -> genai.Client:
    """The SDK, with its base URL at a route ``/g/v1beta`` in front of ``fake``."""
    gw = await gateway(servers, fake, route_dialect=GEMINI, path="/g/v1beta", **cfg)
    client = genai.Client(api_key=api_key, http_options=types.HttpOptions(
        base_url=str(gw.make_url("/g/")), api_version="v1beta", timeout=TIMEOUT_MS))
    servers.append(client)
    return client


# --- the SDK as the client -----------------------------------------------------------------------


@pytest.mark.parametrize("up", OTHERS, ids=ids(OTHERS))
async def test_generate_whole_and_streamed(fakes: Fakes, servers: list[Any],
                                           up: Dialect) -> None:
    fake = await fakes.start(up.name)
    client = await gemini_client(servers, fake)
    whole = await client.aio.models.generate_content(model=MODEL, contents="Hi?")
    assert whole.text == sample_text(up.name, stream=False)
    assert whole.candidates and whole.candidates[0].finish_reason == types.FinishReason.STOP
    pieces = [chunk async for chunk in await client.aio.models.generate_content_stream(
        model=MODEL, contents="Hi?")]
    assert "".join(c.text or "" for c in pieces) == sample_text(up.name, stream=True)
    last = pieces[-1].candidates
    assert last and last[0].finish_reason == types.FinishReason.STOP
    # the upstream was asked in its own dialect, the model named in the SDK's path
    asked = [reader_for(up).read_request(s.body) for s in fake.seen]
    assert [a.messages[-1].text for a in asked] == ["Hi?", "Hi?"]
    # (an upstream that only streams is asked for its stream for a whole answer too)
    assert [s.stream for s in fake.seen] == [getattr(up, "streams_only", False), True]
    if up.capabilities.usage_whole and not getattr(up, "streams_only", False):
        # (a whole answer assembled from a stream-only upstream's sample stream has no usage:
        # its sample, from the protocol's types, carries none)
        assert whole.usage_metadata is not None and whole.usage_metadata.total_token_count


def _declarations(up: Dialect) -> list[types.FunctionDeclaration]:
    """The functions the upstream's tools sample offers, as the SDK declares them."""
    names = reader_for(up).read_request(up.samples.requests["tools"]).tools
    return [types.FunctionDeclaration(name=n, description=f"the {n} function",
                                      parameters_json_schema={"type": "object"})
            for n in names]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("up", TOOLS, ids=ids(TOOLS))
async def test_a_function_calling_loop(fakes: Fakes, servers: list[Any], up: Dialect,
                                       stream: bool) -> None:
    """The upstream calls a function (its tools sample), the SDK's caller answers it, the
    upstream answers in text: the call's id goes back with its result."""
    fake = await fakes.start(up.name)
    fake.queue = [Script(case="tools"), Script(case="text")]
    client = await gemini_client(servers, fake)
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=_declarations(up))],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    question = types.Content(role="user", parts=[types.Part(text="Use the tool.")])
    if stream:
        chunks = [c async for c in await client.aio.models.generate_content_stream(
            model=MODEL, contents=[question], config=config)]
        calls = [fc for c in chunks for fc in (c.function_calls or [])]
        turn = types.Content(role="model", parts=[types.Part(function_call=fc) for fc in calls])
    else:
        first = await client.aio.models.generate_content(model=MODEL, contents=[question],
                                                         config=config)
        calls = first.function_calls or []
        assert first.candidates and first.candidates[0].content is not None
        turn = first.candidates[0].content
    sent = reader_for(up).read_stream(up.samples.streams["tools"]) if stream else \
        reader_for(up).read_whole(up.samples.responses["tools"])
    assert [(c.name, c.args) for c in calls] == [(c.name, c.arguments) for c in sent.tool_calls]
    assert all(c.id for c in calls)
    results = types.Content(role="user", parts=[
        types.Part(function_response=types.FunctionResponse(
            id=c.id, name=c.name, response={"output": f"result of {c.name}"})) for c in calls])
    final = await client.aio.models.generate_content(
        model=MODEL, contents=[question, turn, results], config=config)
    assert final.text == sample_text(up.name, stream=False)
    replay = reader_for(up).read_request(fake.seen[-1].body)
    answered = [m for m in replay.messages if m.tool_result_for is not None]
    assert [(m.tool_result_for, m.text) for m in answered] == \
        [(c.id, f"result of {c.name}") for c in calls]
    made = [call for m in replay.messages for call in m.tool_calls]
    assert [(c.id, c.name) for c in made] == [(c.id, c.name) for c in calls]


class City(BaseModel):
    city: str
    population: int


@pytest.mark.parametrize("up", STRUCTURED, ids=ids(STRUCTURED))
async def test_structured_output_reaches_the_upstream_as_its_json_schema(
        fakes: Fakes, servers: list[Any], up: Dialect) -> None:
    fake = await fakes.start(up.name)
    client = await gemini_client(servers, fake)
    await client.aio.models.generate_content(
        model=MODEL, contents="A city, as JSON.", config=types.GenerateContentConfig(
            response_mime_type="application/json", response_json_schema=SCHEMA))
    await client.aio.models.generate_content(
        model=MODEL, contents="A city, as JSON.", config=types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=City))
    by_json, by_schema = (reader_for(up).read_request(s.body).output for s in fake.seen)
    assert by_json == ("json_schema", SCHEMA)
    assert by_schema is not None and by_schema[0] == "json_schema"
    schema = by_schema[1]
    assert isinstance(schema, dict) and schema["type"] == "object"
    assert set(schema["properties"]) == {"city", "population"}
    assert schema["properties"]["population"]["type"] == "integer"


@pytest.mark.parametrize("up", OTHERS, ids=ids(OTHERS))
async def test_count_tokens_and_the_model_list(fakes: Fakes, servers: list[Any],
                                               up: Dialect) -> None:
    fake = await fakes.start(up.name)
    client = await gemini_client(servers, fake)
    counted = await client.aio.models.count_tokens(model=MODEL,
                                                   contents="How many tokens is this?")
    assert isinstance(counted.total_tokens, int) and counted.total_tokens > 0
    listed = [m.name async for m in await client.aio.models.list()]
    assert listed == ["models/up-model", "models/up-other"]


@pytest.mark.parametrize("status", [400, 429])
@pytest.mark.parametrize("up", OTHERS, ids=ids(OTHERS))
async def test_upstream_errors_reach_the_sdk_as_its_client_errors(
        fakes: Fakes, servers: list[Any], up: Dialect, status: int) -> None:
    fake = await fakes.start(up.name, Script(status=status))
    client = await gemini_client(servers, fake)
    with pytest.raises(genai_errors.ClientError) as raised:
        await client.aio.models.generate_content(model=MODEL, contents="Hi?")
    assert raised.value.code == status
    assert raised.value.message == fake.error_text


async def test_keys_are_checked_from_the_sdks_header(fakes: Fakes,
                                                     servers: list[Any]) -> None:
    fake = await fakes.start(OTHERS[0].name)
    good = await gemini_client(servers, fake, api_key="k-1", auth={"api_keys": ["k-1"]})
    assert (await good.aio.models.generate_content(model=MODEL, contents="Hi?")).text
    bad = await gemini_client(servers, fake, api_key="wrong", auth={"api_keys": ["k-1"]})
    with pytest.raises(genai_errors.ClientError) as raised:
        await bad.aio.models.generate_content(model=MODEL, contents="Hi?")
    assert raised.value.code == 401 and raised.value.status == "UNAUTHENTICATED"
    assert len(fake.seen) == 1


# --- a Gemini upstream behind other clients ------------------------------------------------------


async def test_openai_sdk_in_front_of_a_gemini_upstream(fakes: Fakes,
                                                        servers: list[Any]) -> None:
    fake = await fakes.start(GEMINI.name)
    fake.queue = [Script(), Script(), Script(case="tools"), Script()]
    gw = await gateway(servers, fake, route_dialect=get("openai"), path="/v1/chat/completions")
    client = openai.AsyncOpenAI(api_key="client-key", base_url=str(gw.make_url("/v1")),
                                max_retries=0, timeout=10)
    whole = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi?"}])
    assert whole.choices[0].message.content == sample_text(GEMINI.name, stream=False)
    assert whole.usage is not None and whole.usage.total_tokens == 19
    streamed = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi?"}], stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in streamed if c.choices])
    assert text == sample_text(GEMINI.name, stream=True)
    tool = {"type": "function", "function": {"name": "set_light_values",
                                             "parameters": {"type": "object"}}}
    called = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Dim the lights"}], tools=[tool])
    choice = called.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.function.name == "set_light_values"
    await client.chat.completions.create(model=MODEL, tools=[tool], messages=[
        {"role": "user", "content": "Dim the lights"},
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "done"}])
    body = fake.seen[-1].body
    assert fake.is_path_for(fake.seen[-1].path, False) and MODEL in fake.seen[-1].path
    model_turn, result_turn = body["contents"][1], body["contents"][2]
    # the call goes back with the signature Gemini gave it, the result with the call's id
    [part] = model_turn["parts"]
    assert part["functionCall"]["id"] == call.id and part["thoughtSignature"]
    assert result_turn["parts"][0]["functionResponse"] == {
        "name": "set_light_values", "id": call.id, "response": {"output": "done"}}


async def test_anthropic_sdk_in_front_of_a_gemini_upstream(fakes: Fakes,
                                                           servers: list[Any]) -> None:
    fake = await fakes.start(GEMINI.name)
    gw = await gateway(servers, fake, route_dialect=get("anthropic"), path="/v1/messages")
    client = anthropic.AsyncAnthropic(api_key="client-key", base_url=str(gw.make_url("")),
                                      max_retries=0, timeout=10)
    whole = await client.messages.create(model=MODEL, max_tokens=100,
                                         messages=[{"role": "user", "content": "Hi?"}])
    assert whole.content[0].type == "text"
    assert whole.content[0].text == sample_text(GEMINI.name, stream=False)
    async with client.messages.stream(model=MODEL, max_tokens=100, messages=[
            {"role": "user", "content": "Hi?"}]) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text == sample_text(GEMINI.name, stream=True)
    assert final.stop_reason == "end_turn"
    [asked, _] = [reader_for(GEMINI).read_request(s.body) for s in fake.seen]
    assert asked.extra.get("max_tokens") == 100


SIGNED = [d for d in OTHERS if d.capabilities.reasoning and "reasoning" in d.samples.responses
          and any(r.signature or r.redacted
                  for r in d.parse_response(d.samples.responses["reasoning"]).reasoning)]


def _opaque(reasoning: list[Any]) -> list[tuple[str | None, str | None]]:
    return [(r.signature, r.redacted) for r in reasoning if r.signature or r.redacted]


@pytest.mark.parametrize("up", SIGNED, ids=ids(SIGNED))
async def test_another_providers_signed_reasoning_goes_back_to_it_through_the_sdk(
        fakes: Fakes, servers: list[Any], up: Dialect) -> None:
    """The SDK keeps a thought's signature as bytes and sends it back re-encoded (URL-safe
    base64): the upstream that signed the reasoning gets its own signature back unchanged."""
    fake = await fakes.start(up.name)
    fake.queue = [Script(case="reasoning"), Script()]
    client = await gemini_client(servers, fake)
    question = types.Content(role="user", parts=[types.Part(text="Think first.")])
    first = await client.aio.models.generate_content(model=MODEL, contents=[question])
    assert first.candidates and first.candidates[0].content is not None
    turn = first.candidates[0].content
    assert any(p.thought and p.thought_signature for p in turn.parts or [])
    await client.aio.models.generate_content(model=MODEL, contents=[
        question, turn, types.Content(role="user", parts=[types.Part(text="And then?")])])
    replayed = up.parse_request(fake.seen[-1].body)
    sent = [r for m in replayed.messages for r in m.reasoning]
    assert _opaque(sent) == _opaque(up.parse_response(up.samples.responses["reasoning"]).reasoning)
