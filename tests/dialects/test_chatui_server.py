"""chatui as the gateway serves it: what belongs to this dialect alone. Its stream's events each
carry the whole message so far (``processing`` then ``completed``), and a route may answer
multi-agent answers in the Chat UI app's shape (route option ``chatui_shape: app``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fakes import QUESTION, TEXT, Fakes, Script, reader_for, serve_route, split_frames

from gateway.dialects import get, names

DIALECT = "chatui"
ASK = {"messages": [{"role": "user", "content": QUESTION}]}


@pytest.mark.parametrize("upstream", names())
async def test_stream_from_a_never_streaming_upstream(aiohttp_client: Any, fakes: Fakes,
                                                      upstream: str) -> None:
    """(Scripted.) An empty ``processing`` message first, then the text growing, then the
    ``completed`` message with all of it."""
    fake = await fakes.start(upstream, Script(scripted=True))
    gw = await serve_route(aiohttp_client, DIALECT, fake, streaming="never")
    resp = await gw.post("/c", json=ASK, headers={"Accept": "text/event-stream"})
    assert resp.status == 200
    raw = await resp.read()
    events = [orjson.loads(f.data.removeprefix(b"data: ")) for f in split_frames(get(DIALECT), raw)]
    assert events[0]["status"] == "processing" and events[0]["content"] == ""
    assert events[-1]["status"] == "completed" and events[-1]["content"] == TEXT
    assert all(e["status"] == "processing" and TEXT.startswith(e["content"])
               for e in events[1:-1])
    assert any(e["content"] for e in events[1:-1])


@pytest.mark.parametrize("shape", ["spec", "app"])
async def test_multi_agent_answer_in_the_shape_the_route_asks(aiohttp_client: Any, fakes: Fakes,
                                                              shape: str) -> None:
    """A multi-agent answer (the dialect's own sample): the format's array of messages, or with
    ``chatui_shape: app`` the app's ``{"messages": [...]}``; the same agents either way."""
    fake = await fakes.start(DIALECT, Script(case="multi_agent"))
    gw = await serve_route(aiohttp_client, DIALECT, fake, route={"chatui_shape": shape})
    resp = await gw.post("/c", json=ASK)
    assert resp.status == 200
    body = await resp.json()
    if shape == "app":
        assert isinstance(body, dict) and [m["agentName"] for m in body["messages"]] == [
            "Research", "Code"]
    else:
        assert isinstance(body, list) and len(body) == 2
    sample = get(DIALECT).samples.responses["multi_agent"]
    assert reader_for(DIALECT).read_whole(body).agents == \
        reader_for(DIALECT).read_whole(sample).agents
