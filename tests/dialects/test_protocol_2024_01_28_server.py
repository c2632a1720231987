"""protocol-2024-01-28 as the gateway serves it: what belongs to this dialect alone. Its stream's
first chunk carries the context, and the last one the finish reason."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from fakes import CITATION_NAMES, QUESTION, TEXT, Fakes, Script, serve_route

from gateway.dialects import get, names

DIALECT = "protocol-2024-01-28"


@pytest.mark.parametrize("upstream", names())
async def test_stream_from_a_never_streaming_upstream(aiohttp_client: Any, fakes: Fakes,
                                                      upstream: str) -> None:
    """(Scripted.) Role and context first (its citations, where the upstream has them), then
    the text, then the finish."""
    fake = await fakes.start(upstream, Script(scripted=True))
    gw = await serve_route(aiohttp_client, DIALECT, fake, streaming="never")
    resp = await gw.post("/c", json={"messages": [{"role": "user", "content": QUESTION}],
                                     "stream": True})
    assert resp.status == 200
    chunks = [orjson.loads(line) for line in (await resp.read()).splitlines() if line.strip()]
    first = chunks[0]["choices"][0]
    assert first["delta"] == {"role": "assistant"} and "context" in first
    if get(upstream).capabilities.citations:
        assert first["context"]["data_points"]["citations"] == CITATION_NAMES
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    texts = [c["choices"][0]["delta"].get("content") or "" for c in chunks[1:-1]]
    assert "".join(texts) == TEXT
