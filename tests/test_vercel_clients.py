"""The Vercel AI SDK (``ai`` with ``@ai-sdk/openai``'s chat and responses providers and
``@ai-sdk/anthropic``), in Node, through cross-dialect routes of the gateway with its defaults:
a multi-step tool loop (``generateText`` and ``streamText`` with ``stopWhen``), structured output
(``Output.object`` with a zod schema), usage, and an upstream's error.

Each provider's dialect is the one whose clients post where the provider posts (its declared
``default_path``); each is tried against the first two other dialects that carry tools and JSON
schema output. The responses provider keeps its items by default: its second step refers to the
message the gateway returned by ``item_reference``, which the gateway's ``responses_store``
resolves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from kept_support import FAIL, LOOKING, ScriptedUpstream, agent_script, heard
from node_clients import run_node

from gateway.app import create_app
from gateway.config import parse_config
from gateway.dialects import DIALECTS, get

PROVIDERS = {"vercel-chat": "/chat/completions", "vercel-responses": "/responses",
             "vercel-anthropic": "/messages"}
"""Each provider, and where it posts below its baseURL."""


def client_dialect(provider: str) -> str:
    return next(n for n, d in DIALECTS.items() if d.default_path.endswith(PROVIDERS[provider]))


def upstreams_for(client: str) -> list[str]:
    return [n for n, d in DIALECTS.items() if n != client and d.capabilities.tools
            and "json_schema" in d.capabilities.structured_output][:2]


CASES = [(p, u) for p in PROVIDERS for u in upstreams_for(client_dialect(p))]


@dataclass
class Route:
    base: str
    upstream: ScriptedUpstream


@pytest.fixture
async def route(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Route]:
    provider, upstream = request.param
    client = client_dialect(provider)
    fake = await ScriptedUpstream(get(upstream), agent_script).start()
    cfg = {
        "logging": {"level": "warning"},
        "upstreams": {"u": {"dialect": upstream, "url": fake.url, "model": "m", "timeout": 10}},
        "routes": [{"path": "/r" + get(client).default_path, "dialect": client,
                    "upstream": "u"}],
        "responses_store": {"store": f"sqlite:///{tmp_path}/history.db"},
    }
    server = TestServer(create_app(parse_config(cfg, env={})), host="127.0.0.1")
    await server.start_server()
    try:
        yield Route(str(server.make_url("/r/v1")), fake)
    finally:
        await server.close()
        await fake.close()


@pytest.mark.parametrize("route", CASES, ids=[f"{p}-{u}" for p, u in CASES], indirect=True)
async def test_vercel_agent_loops_through_another_api(route: Route, request: Any) -> None:
    provider = request.node.callspec.params["route"][0]
    seen = await run_node("vercel_agent.mjs", env={"GATEWAY_BASE": route.base,
                                                   "PROVIDER": provider}, timeout=90)
    up = route.upstream.seen

    for name in ("generate", "stream"):
        run = seen[name]
        steps = run["steps"]
        assert [s["toolCalls"] for s in steps] == [[["get_weather", {"city": "Paris"}]], []], run
        assert steps[0]["toolResults"] == [["get_weather", {"city": "Paris",
                                                            "forecast": "sunny"}]]
        assert steps[0]["text"] == LOOKING
        assert run["finishReason"] == "stop"
        assert run["usage"] == {"input": 22, "output": 14}  # two steps of 11 and 7
        assert run.get("errors", []) == []
        # the second step's upstream request holds the whole turn: the text, the call, the result
        answered = next(r for r in up if any(m.role == "tool" for m in r.messages)
                        and r.stream == (name == "stream"))
        assistant = [m for m in answered.messages if m.role == "assistant"]
        assert [(m.text, [c.name for c in m.tool_calls]) for m in assistant] == [
            (LOOKING, ["get_weather"])]
        assert "sunny" in next(m.text for m in answered.messages if m.role == "tool")
        assert steps[1]["text"] == heard(answered)
        assert run["text"].endswith(heard(answered))

    if provider == "vercel-responses":
        # Its defaults: store on, and the message the gateway returned sent back by reference.
        for name in ("generate", "stream"):
            second = seen[name]["requests"][1]["body"]
            refs = [i for i in second["input"] if i.get("type") == "item_reference"]
            assert len(refs) == 1 and refs[0]["id"].startswith("msg_"), second["input"]
            assert second.get("store") is not False

    assert seen["object"]["output"] == {"city": "Paris", "temperature": 21}
    assert seen["error"] is not None and seen["error"]["status"] == 400, seen["error"]
    assert any(FAIL in r.messages[-1].text for r in up)
