"""openai as the gateway serves it: what belongs to this dialect alone. A stream is a role chunk,
content chunks, a finish chunk, the usage chunk when the client asked for it
(``stream_options.include_usage``), then ``data: [DONE]``."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fakes import QUESTION, TEXT, USAGE, Fakes, Script, serve_route, split_frames

from gateway.dialects import get, names

DIALECT = "openai"


def _chunks(raw: bytes) -> list[Any]:
    out = []
    for frame in split_frames(get(DIALECT), raw):
        data = frame.data.strip().removeprefix(b"data: ")
        out.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return out


@pytest.mark.parametrize("include_usage", [False, True], ids=["no-usage", "usage"])
@pytest.mark.parametrize("streaming", ["auto", "never"])
@pytest.mark.parametrize("upstream", names())
async def test_stream_shape(aiohttp_client: Any, fakes: Fakes, upstream: str, streaming: str,
                            include_usage: bool) -> None:
    """(Scripted.) From a streaming or a never-streaming upstream alike."""
    fake = await fakes.start(upstream, Script(scripted=True))
    gw = await serve_route(aiohttp_client, DIALECT, fake, streaming=streaming)
    body: dict[str, Any] = {"model": "m", "stream": True,
                            "messages": [{"role": "user", "content": QUESTION}]}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    resp = await gw.post("/c", json=body)
    assert resp.status == 200
    chunks = _chunks(await resp.read())
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1] == "[DONE]"
    with_choice = [c for c in chunks[:-1] if c["choices"]]
    assert with_choice[-1]["choices"][0]["finish_reason"] == "stop"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in with_choice) == TEXT
    usage = [c for c in chunks[:-1] if c.get("usage")]
    caps = get(upstream).capabilities
    carried = caps.usage_whole if streaming == "never" else caps.usage_stream
    if include_usage and carried:
        [last] = usage
        assert last["choices"] == [] and last is chunks[-2]
        assert (last["usage"]["prompt_tokens"], last["usage"]["completion_tokens"]) == USAGE
    else:
        assert usage == []
