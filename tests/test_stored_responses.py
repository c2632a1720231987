"""Stored responses kept by the gateway, driven by the real ``openai`` SDK: a client of the API
that keeps its answers (found in the registry by declaration) in front of upstreams of every
other API that carries tool loops, on both history stores. ``previous_response_id`` and
``item_reference`` reach the upstream as the conversation they stand for; ``retrieve``,
``input_items.list`` and ``delete`` answer the official shapes; one key never reads another's;
a cut stream is not kept; retention hides, then purges, what is too old."""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import openai
import orjson
import pytest
from aiohttp.test_utils import TestClient
from history_support import StoreUnderTest
from kept_support import KEEPING, TOOL_UPSTREAMS, ScriptedUpstream, heard

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import get
from gateway.errors import ConfigError
from gateway.history.responses import RESPONSES

KEYS = ("key-a", "key-b")
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


@dataclass
class Rig:
    gateway: TestClient[Any, Any]
    upstreams: dict[str, ScriptedUpstream]
    same: ScriptedUpstream

    def client(self, upstream: str, key: str = KEYS[0]) -> openai.AsyncOpenAI:
        prefix = "/same" if upstream == KEEPING else f"/{TOOL_UPSTREAMS.index(upstream)}"
        return openai.AsyncOpenAI(base_url=str(self.gateway.make_url(f"{prefix}/v1")),
                                  api_key=key, max_retries=0, timeout=10,
                                  _strict_response_validation=True)


@pytest.fixture
async def rig(store: StoreUnderTest, aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]],
              ) -> AsyncIterator[Rig]:
    ups = {n: await ScriptedUpstream(get(n)).start() for n in TOOL_UPSTREAMS}
    same = await ScriptedUpstream(get(KEEPING)).start()
    cfg = {
        "logging": {"level": "warning"},
        "auth": {"api_keys": list(KEYS)},
        "upstreams": {**{f"u{i}": {"dialect": n, "url": ups[n].url, "model": "m", "timeout": 10}
                         for i, n in enumerate(TOOL_UPSTREAMS)},
                      "same": {"dialect": KEEPING, "url": same.url, "timeout": 10}},
        "routes": [*({"path": f"/{i}/v1/responses", "dialect": KEEPING, "upstream": f"u{i}"}
                     for i in range(len(TOOL_UPSTREAMS))),
                   {"path": "/same/v1/responses", "dialect": KEEPING, "upstream": "same"}],
        "responses_store": {"store": store.url, "timeout": 5},
    }
    gateway = await aiohttp_client(create_app(parse_config(cfg, env={})),
                                   server_kwargs={"handler_cancellation": True})
    try:
        yield Rig(gateway, ups, same)
    finally:
        for up in [*ups.values(), same]:
            await up.close()


each_upstream = pytest.mark.parametrize("upstream", TOOL_UPSTREAMS)


def texts(upstream: ScriptedUpstream, i: int = -1) -> list[tuple[str, str]]:
    """The roles and texts of the messages an upstream was sent (system prompts left out)."""
    return [(m.role, m.text) for m in upstream.seen[i].messages if m.role != "system"]


@each_upstream
async def test_previous_response_id_sends_the_whole_conversation(rig: Rig, upstream: str) -> None:
    async with rig.client(upstream) as client:
        first = await client.responses.create(model="m", input="My name is Ada.")
        second = await client.responses.create(model="m", input="What is my name?",
                                                previous_response_id=first.id)
        third = await client.responses.create(model="m", input="And again?",
                                              previous_response_id=second.id, stream=True)
        events = [e async for e in third]
    up = rig.upstreams[upstream]
    assert first.store is True and first.previous_response_id is None
    assert second.previous_response_id == first.id
    assert texts(up, 1) == [("user", "My name is Ada."), ("assistant", first.output_text),
                            ("user", "What is my name?")]
    assert texts(up, 2) == [*texts(up, 1), ("assistant", second.output_text),
                            ("user", "And again?")]
    done = events[-1]
    assert done.type == "response.completed"
    assert done.response.previous_response_id == second.id
    assert done.response.output_text == heard(up.seen[2])


@each_upstream
async def test_retrieve_and_input_items_give_back_what_was_kept(rig: Rig, upstream: str) -> None:
    async with rig.client(upstream) as client:
        first = await client.responses.create(model="m", input=[
            {"role": "user", "content": "one"}, {"role": "user", "content": "two"},
            {"role": "user", "content": "three"}])
        got = await client.responses.retrieve(first.id)
        assert got.model_dump() == first.model_dump()
        page = await client.responses.input_items.list(first.id, order="asc")
        assert [(i.type, i.content[0].text) for i in page.data] == [  # type: ignore[union-attr]
            ("message", "one"), ("message", "two"), ("message", "three")]
        assert all(i.id for i in page.data)
        newest = await client.responses.input_items.list(first.id)  # the API's default: desc
        assert [i.content[0].text for i in newest.data] == [  # type: ignore[union-attr]
            "three", "two", "one"]
        one = await client.responses.input_items.list(first.id, limit=1, order="asc")
        assert (len(one.data), one.has_more, one.first_id) == (1, True, page.data[0].id)
        walked = [i.id async for i in client.responses.input_items.list(
            first.id, limit=1, order="asc")]  # the SDK pages with after=<last id>
        assert walked == [i.id for i in page.data]


@each_upstream
async def test_delete_then_the_response_is_gone(rig: Rig, upstream: str) -> None:
    async with rig.client(upstream) as client:
        first = await client.responses.create(model="m", input="keep me")
        raw = await client.responses.with_raw_response.delete(first.id)
        assert raw.http_request.method == "DELETE"
        assert raw.status_code == 200
        assert raw.http_response.json() == {"id": first.id, "object": "response",
                                            "deleted": True}
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.delete(first.id)
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="m", input="more", previous_response_id=first.id)
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"


@each_upstream
async def test_item_reference_resolves_a_tool_loop(rig: Rig, upstream: str) -> None:
    async with rig.client(upstream) as client:
        first = await client.responses.create(model="m", input="Weather in Paris?",
                                               tools=[WEATHER])  # type: ignore[list-item]
        [call] = first.output
        assert call.type == "function_call"
        second = await client.responses.create(model="m", tools=[WEATHER],  # type: ignore[list-item]
                                                input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "item_reference", "id": call.id},
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    up = rig.upstreams[upstream]
    sent = up.seen[1].messages
    calls = [c for m in sent for c in m.tool_calls]
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city":"Paris"}')]
    assert [m.text for m in sent if m.role == "tool"] == ["sunny"]
    assert second.output_text == heard(up.seen[1])
    async with rig.client(upstream) as client:
        items = await client.responses.input_items.list(second.id, order="asc")
    # kept as the item it referred to, never as the reference
    assert [i.type for i in items.data] == ["message", "function_call", "function_call_output"]


@each_upstream
async def test_one_key_never_reads_another_keys_responses(rig: Rig, upstream: str) -> None:
    async with rig.client(upstream, KEYS[0]) as a:
        mine = await a.responses.create(model="m", input="secret", tools=[WEATHER])  # type: ignore[list-item]
    async with rig.client(upstream, KEYS[1]) as b:
        with pytest.raises(openai.NotFoundError):
            await b.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            await b.responses.input_items.list(mine.id)
        with pytest.raises(openai.NotFoundError):
            await b.responses.delete(mine.id)
        with pytest.raises(openai.BadRequestError):
            await b.responses.create(model="m", input="x", previous_response_id=mine.id)
        with pytest.raises(openai.NotFoundError):
            await b.responses.create(model="m", input=[
                {"type": "item_reference", "id": mine.output[0].id}])  # type: ignore[list-item]
    async with rig.client(upstream, KEYS[0]) as a:
        assert (await a.responses.retrieve(mine.id)).id == mine.id  # still there for its owner


@each_upstream
async def test_store_false_keeps_nothing(rig: Rig, upstream: str) -> None:
    async with rig.client(upstream) as client:
        r = await client.responses.create(model="m", input="forget me", store=False)
        assert r.store is False
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(r.id)


@each_upstream
async def test_a_streamed_answer_is_kept_as_it_completed(rig: Rig, upstream: str) -> None:
    async with rig.client(upstream) as client:
        async with client.responses.stream(model="m", input="stream it") as s:
            final = await s.get_final_response()
        got = await client.responses.retrieve(final.id)
    assert got.status == "completed"
    assert got.output_text == final.output_text == heard(rig.upstreams[upstream].seen[0])
    assert got.usage is not None and got.usage.output_tokens == 7


@each_upstream
async def test_a_cut_stream_is_not_kept(rig: Rig, upstream: str,
                                        store: StoreUnderTest) -> None:
    rig.upstreams[upstream].cut_after_text = True
    async with rig.client(upstream) as client:
        stream = await client.responses.create(model="m", input="cut", stream=True)
        events = []
        with pytest.raises(openai.APIError):
            async for e in stream:
                events.append(e)
        started = next(e for e in events if e.type == "response.created")
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(started.response.id)
    assert store.sql("SELECT count(*) FROM responses") == [("0",)]


async def test_expired_responses_are_not_served_then_purged(rig: Rig,
                                                            store: StoreUnderTest) -> None:
    upstream = TOOL_UPSTREAMS[0]
    async with rig.client(upstream) as client:
        old = await client.responses.create(model="m", input="old news")
        store.sql("UPDATE responses SET created_us = 0")
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(old.id)
        with pytest.raises(openai.BadRequestError):
            await client.responses.create(model="m", input="x", previous_response_id=old.id)
        fresh = await client.responses.create(model="m", input="new")
    assert await rig.gateway.app[RESPONSES].purge() == 1
    assert store.sql("SELECT id FROM responses") == [(fresh.id,)]
    assert store.sql(f"SELECT count(*) FROM response_items WHERE response_id = '{old.id}'") \
        == [("0",)]
    kept = store.sql("SELECT DISTINCT owner FROM responses")
    assert kept and all(len(o) == 64 and KEYS[0] not in o for (o,) in kept)  # a hash, no key


async def test_a_route_to_the_same_api_passes_references_on(rig: Rig) -> None:
    async with rig.client(KEEPING) as client:
        await client.responses.create(model="m", input=[
            {"type": "item_reference", "id": "msg_theirs"}], previous_response_id="resp_theirs",
            store=True)
    [sent] = rig.same.bodies
    assert sent["previous_response_id"] == "resp_theirs"
    assert sent["input"] == [{"type": "item_reference", "id": "msg_theirs"}]
    assert sent["store"] is True


async def test_a_route_to_the_same_api_asks_its_upstream_for_its_answers(rig: Rig) -> None:
    async with rig.client(KEEPING) as client:
        got = await client.responses.with_raw_response.retrieve("resp_theirs")
        page = await client.responses.with_raw_response.delete("resp_theirs")
        items = await client.responses.input_items.with_raw_response.list(
            "resp_theirs", limit=5)
    assert got.http_response.json()["kept_by"] == "upstream"
    assert [(b["method"], b["path"]) for b in rig.same.bodies] == [
        ("GET", "/v1/responses/resp_theirs"), ("DELETE", "/v1/responses/resp_theirs"),
        ("GET", "/v1/responses/resp_theirs/input_items?limit=5")]
    assert page.status_code == items.status_code == 200
    assert all(b["authorization"] is None for b in rig.same.bodies)  # the gateway's keys stay


async def test_readyz_reports_the_store_without_its_password(rig: Rig,
                                                             store: StoreUnderTest) -> None:
    body = await (await rig.gateway.get("/readyz")).json()
    assert body["responses_store"]["healthy"] is True
    assert "s3cret" not in str(body) and body["responses_store"]["store"].split(":")[0] in \
        store.url


async def test_without_a_key_nothing_is_read(rig: Rig) -> None:
    async with rig.client(TOOL_UPSTREAMS[0]) as client:
        kept = await client.responses.create(model="m", input="mine")
    resp = await rig.gateway.get(f"/0/v1/responses/{kept.id}")
    assert resp.status == 401
    resp = await rig.gateway.post(f"/0/v1/responses/{kept.id}",
                                  headers={"Authorization": f"Bearer {KEYS[0]}"})
    assert resp.status == 405
    assert (await resp.json())["error"]["code"] == "METHOD_NOT_ALLOWED"


async def test_a_store_that_cannot_be_reached_is_a_503_unless_nothing_is_kept(rig: Rig) -> None:
    rig.gateway.app[RESPONSES].store.ready = False
    async with rig.client(TOOL_UPSTREAMS[0]) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            await client.responses.create(model="m", input="keep me")
        assert caught.value.status_code == 503
        assert caught.value.response.headers["Retry-After"] == "5"
        r = await client.responses.create(model="m", input="forget me", store=False)
    assert r.output_text == heard(rig.upstreams[TOOL_UPSTREAMS[0]].seen[-1])


async def test_a_count_resolves_the_conversation_it_continues(rig: Rig) -> None:
    async with rig.client(TOOL_UPSTREAMS[0]) as client:
        first = await client.responses.create(model="m", input="x" * 400)
        alone = await client.responses.input_tokens.count(model="m", input="next")
        after = await client.responses.input_tokens.count(model="m", input="next",
                                                         previous_response_id=first.id)
    assert after.input_tokens >= alone.input_tokens + 100


async def test_references_on_a_route_its_upstream_cannot_keep_are_a_400(
        aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]]) -> None:
    up = await ScriptedUpstream(get(TOOL_UPSTREAMS[0])).start()
    cfg = {"upstreams": {"u": {"dialect": TOOL_UPSTREAMS[0], "url": up.url}},
           "routes": [{"path": "/v1/responses", "dialect": KEEPING, "upstream": "u"}]}
    gateway = await aiohttp_client(create_app(parse_config(cfg, env={})))
    try:
        async with openai.AsyncOpenAI(base_url=str(gateway.make_url("/v1")), api_key="k",
                                      max_retries=0) as client:
            with pytest.raises(openai.BadRequestError) as caught:
                await client.responses.create(model="m", input=[
                    {"type": "item_reference", "id": "msg_1"}])  # type: ignore[list-item]
            plain = await client.responses.create(model="m", input="hello")
        assert caught.value.param == "input"
        assert plain.store is False  # no responses_store: the gateway keeps nothing
        assert len(up.seen) == 1
    finally:
        await up.close()


def test_config_refuses_gateway_state_without_a_store() -> None:
    cfg = {"upstreams": {"u": {"dialect": TOOL_UPSTREAMS[0], "url": "http://127.0.0.1:9/x"}},
           "routes": [{"path": "/r", "dialect": KEEPING, "upstream": "u",
                       "responses_state": "gateway"}]}
    with pytest.raises(ConfigError, match="responses_store"):
        parse_config(cfg, env={})
    cfg["routes"][0]["dialect"] = TOOL_UPSTREAMS[0]  # type: ignore[index]
    cfg["responses_store"] = {}
    with pytest.raises(ConfigError, match="keeps no answers"):
        parse_config(cfg, env={})


@pytest.mark.parametrize(("given", "seconds"), [("30d", 30 * 86400), ("12h", 43200),
                                                ("90m", 5400), ("45s", 45), (3600, 3600)])
def test_retention_reads_a_duration(given: Any, seconds: float) -> None:
    cfg = {"upstreams": {"u": {"dialect": TOOL_UPSTREAMS[0], "url": "http://127.0.0.1:9/x"}},
           "routes": [{"path": "/r", "dialect": KEEPING, "upstream": "u"}],
           "responses_store": {"retention": given}}
    section = parse_config(cfg, env={}).responses_store
    assert section is not None and section.retention == seconds


def test_check_notes_a_route_whose_answers_nobody_keeps(tmp_path: Any) -> None:
    from gateway.cli import main

    cfg = {"upstreams": {up: {"dialect": up, "url": f"http://127.0.0.1:9/{up}"}
                         for up in TOOL_UPSTREAMS[:1]},
           "routes": [{"path": "/v1/responses", "dialect": KEEPING,
                       "upstream": TOOL_UPSTREAMS[0]}]}
    path = tmp_path / "gateway.yaml"
    path.write_bytes(orjson.dumps(cfg))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["check", "--config", str(path)]) == 0
    assert "note: routes[0]: answers are not kept" in out.getvalue()
    cfg["responses_store"] = {"store": f"sqlite:///{tmp_path}/kept.db"}
    path.write_bytes(orjson.dumps(cfg))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["check", "--config", str(path)]) == 0
    assert "note:" not in out.getvalue()
